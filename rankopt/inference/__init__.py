"""Loss-augmented inference for rank losses.

The calls that take plugin names (``most_violated_ranking``,
``most_violated_rankings``) are public in :mod:`rankopt.api` and at the top
level (``rankopt.most_violated_ranking``); this package is the layer below
the plugin registry and receives one.
"""

import os as _os
from importlib.machinery import EXTENSION_SUFFIXES as _EXTENSION_SUFFIXES


def _refuse_an_unbuilt_source_folder() -> None:
    """Python started in a checkout imports this folder, not the installed package: without the compiled
    kernels (``pip install .`` puts them in site-packages) a fit would fail deep inside with "No module named
    'rankopt.inference._observation'"; say so at the import instead."""
    here = _os.path.dirname(_os.path.dirname(_os.path.abspath(__file__)))
    if not _os.path.isfile(_os.path.join(here, _os.pardir, "setup.py")):
        return  # an installed package
    compiled = ("_observation" + suffix for suffix in _EXTENSION_SUFFIXES)
    if not any(_os.path.isfile(_os.path.join(here, "inference", name)) for name in compiled):
        raise ImportError(
            f"rankopt is being imported from its source folder {here!r}, which holds no compiled kernels: Python "
            "started in the checkout finds this folder before the installed package. Run Python from another "
            "folder (cd ..), or build the kernels in place: pip install --no-build-isolation -e ."
        )


# Checked where the compiled kernels are first needed: ``import rankopt``, ``rankopt --version`` and
# ``--help`` stay light and work anywhere.
_refuse_an_unbuilt_source_folder()

from rankopt.inference.base import InferenceMethod, PluginLookup, RankingInference  # noqa: E402

__all__ = ["InferenceMethod", "PluginLookup", "RankingInference"]
