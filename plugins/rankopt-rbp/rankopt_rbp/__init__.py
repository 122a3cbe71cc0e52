"""rankopt-rbp: a rank-biased-precision loss for rankopt, and the template for plugin packages.

Installing this package is all it takes: rankopt loads the module named by
the ``rankopt`` entry point (:mod:`rankopt_rbp.plugin`) on first use, after
which ``rankopt.RankSVM(loss="rbp")`` and
``rankopt.get_loss("rbp", persistence=0.9)`` work.
"""

from rankopt_rbp.plugin import RBPLoss

__version__ = "0.1.0"

__all__ = ["RBPLoss"]
