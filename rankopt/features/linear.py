"""The identity feature map ψ(x) = x, for every data backend."""

from __future__ import annotations

import numpy as np

from rankopt.data.backends import backend_for
from rankopt.features.base import FeatureMap
from rankopt.hookspecs import hookimpl

__all__ = ["LinearFeatureMap"]


class LinearFeatureMap(FeatureMap):
    """ψ(x) = x over NumPy, CSR or Dask data (:mod:`rankopt.data.backends`).

    Scores keep the data's float precision; combinations are float64.
    """

    name = "linear"

    def n_features(self, X):
        return X.shape[1]

    def scores(self, X, w):
        return backend_for(X).scores(X, np.asarray(w, dtype=np.float64))

    def combine(self, X, coef):
        return backend_for(X).combine(X, np.asarray(coef, dtype=np.float64))

    def combine_groups(self, X, coef, group, n_groups):
        return backend_for(X).combine_groups(X, np.asarray(coef, dtype=np.float64), group, n_groups)


@hookimpl
def rankopt_feature_maps():
    return [LinearFeatureMap]
