"""The joint-feature-map contract.

The engine touches the data only through two products:
per-sample scores s_i = w·ψ(x_i) and the combination Σ_i c_i ψ(x_i) that
builds a joint feature vector from the coefficients an inference kernel
returns.  A feature map provides exactly those.
"""

from __future__ import annotations

import abc
from typing import ClassVar

import numpy as np

__all__ = ["FeatureMap"]


class FeatureMap(abc.ABC):
    """Maps samples to ψ(x) through the two products the engine needs."""

    name: ClassVar[str] = ""

    @abc.abstractmethod
    def n_features(self, X) -> int:
        """The dimension of ψ(x) for samples of X."""

    @abc.abstractmethod
    def scores(self, X, w: np.ndarray) -> np.ndarray:
        """s_i = w·ψ(x_i) for every row of X, shape (n_samples,)."""

    @abc.abstractmethod
    def combine(self, X, coef: np.ndarray) -> np.ndarray:
        """Σ_i coef_i ψ(x_i), shape (n_features,), float64."""

    def combine_groups(self, X, coef: np.ndarray, group: np.ndarray, n_groups: int) -> np.ndarray | None:
        """Σ_{i in group g} coef_i ψ(x_i) per group g, shape (n_groups, n_features), float64; rows with
        group < 0 in none.  None (the default) when the map does not compute it: the engine then keeps
        no per-query plane cache, which only costs iterations."""
        return None
