"""rankopt: learning to rank by directly optimising rank-based losses.

Importing rankopt builds no plugin manager; the default one is created on
first use (``get_loss``, ``list_plugins``, ``RankSVM.fit``, …).
"""
from rankopt.engine import solve_cccp, solve_cutting_plane
from rankopt.exceptions import ConvergenceWarning
from rankopt.hookspecs import hookimpl
from rankopt.inference.base import RankingInference, most_violated_ranking
from rankopt.losses.qs_check import check_qs_suitable
from rankopt.models.latent import LatentAPSVM, LatentSSVM, LatentSVM
from rankopt.models.high_order import HOAPSVM, HOBSVM
from rankopt.models.rank_svm import RankSVM
from rankopt.plugins import (
    create_plugin_manager,
    get_loss,
    get_plugin_manager,
    list_plugins,
)

__version__ = "0.1.0"

__all__ = [
    "ConvergenceWarning",
    "HOAPSVM",
    "HOBSVM",
    "LatentAPSVM",
    "LatentSSVM",
    "LatentSVM",
    "RankSVM",
    "RankingInference",
    "check_qs_suitable",
    "create_plugin_manager",
    "get_loss",
    "get_plugin_manager",
    "hookimpl",
    "list_plugins",
    "most_violated_ranking",
    "solve_cccp",
    "solve_cutting_plane",
]
