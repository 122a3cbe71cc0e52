"""Models (problem builders) and the public estimators.

``RankSVM`` is imported on first access (PEP 562's module ``__getattr__``):
the plugin registry imports :mod:`rankopt.models.base` and must not pay for
scikit-learn through this package.
"""
from rankopt.models.base import Model

__all__ = ["Model", "RankSVM"]


def __getattr__(name: str):
    if name == "RankSVM":
        from rankopt.models.rank_svm import RankSVM

        return RankSVM
    raise AttributeError(f"module 'rankopt.models' has no attribute {name!r}")
