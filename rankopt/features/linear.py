"""The identity feature map ψ(x) = x, for dense arrays and CSR matrices."""
from __future__ import annotations

import numpy as np

from rankopt.features.base import FeatureMap
from rankopt.hookspecs import hookimpl


class LinearFeatureMap(FeatureMap):
    """ψ(x) = x.  Scores keep the data's float precision; combinations are float64."""

    name = "linear"

    def n_features(self, X):
        return X.shape[1]

    def scores(self, X, w):
        return np.asarray(X @ w.astype(X.dtype, copy=False)).ravel()

    def combine(self, X, coef):
        return np.asarray(X.T @ coef.astype(X.dtype, copy=False), dtype=np.float64).ravel()


@hookimpl
def rankopt_feature_maps():
    return [LinearFeatureMap]
