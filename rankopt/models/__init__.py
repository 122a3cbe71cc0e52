"""Models (problem builders) and the public estimators."""
from rankopt.models.base import Model
from rankopt.models.rank_svm import RankSVM

__all__ = ["Model", "RankSVM"]
