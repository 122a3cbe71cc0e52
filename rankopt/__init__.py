"""rankopt: learning to rank by directly optimising rank-based losses.

Importing rankopt builds no plugin manager; the default one is created on
first use (``get_loss``, ``list_plugins``, ``RankSVM.fit``, …).

The public names below are imported on first access (PEP 562's module
``__getattr__``): ``import rankopt`` alone loads neither scikit-learn nor
the engine, so that ``rankopt --version`` and ``rankopt --help`` answer at
once.  ``from rankopt import RankSVM`` works as usual.
"""

from __future__ import annotations

from rankopt._lazy import lazy_attributes
from rankopt.hookspecs import hookimpl as hookimpl

__version__ = "0.1.0"

#: Public name -> the module that defines it, imported on first access.
_LAZY = {
    "ConvergenceWarning": "rankopt.exceptions",
    "HOAPSVM": "rankopt.estimators",
    "HOBSVM": "rankopt.estimators",
    "LatentAPSVM": "rankopt.estimators",
    "LatentSSVM": "rankopt.estimators",
    "LatentSVM": "rankopt.estimators",
    "RankSVM": "rankopt.estimators",
    "RankSVMCV": "rankopt.estimators",
    "RankingInference": "rankopt.inference.base",
    "check_qs_suitable": "rankopt.api",
    "create_plugin_manager": "rankopt.plugins",
    "get_loss": "rankopt.plugins",
    "get_plugin_manager": "rankopt.plugins",
    "list_plugins": "rankopt.plugins",
    "most_violated_ranking": "rankopt.api",
    "read_svmlight": "rankopt.data.loaders",
    "solve_cccp": "rankopt.engine",
    "solve_cutting_plane": "rankopt.engine",
    "structured_hinge": "rankopt.hinge",
}

__all__ = sorted([*_LAZY, "hookimpl"])

#: Subpackages and modules reachable as ``rankopt.<name>`` after ``import rankopt`` alone,
#: imported on first access (``rankopt.metrics.ndcg_at_k``, ``rankopt.data.fetch_mslr_sample``).
SUBMODULES = (
    "api",
    "data",
    "engine",
    "estimators",
    "exceptions",
    "experiments",
    "features",
    "graphcut",
    "inference",
    "losses",
    "metrics",
    "models",
    "plugins",
    "testing",
)

__getattr__, __dir__ = lazy_attributes("rankopt", globals(), _LAZY, SUBMODULES)
