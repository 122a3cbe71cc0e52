"""Dask DataFrames as design matrices: validated into a Dask array of their values.

Imported by :mod:`rankopt.data.backends` when ``dask.dataframe`` is first seen.  The partitions' lengths
are computed once (one pass over the partitions, on Dask's active scheduler), so that the rows' chunks are
known; nothing is gathered.  A multi-query fit then takes the labels and query ids as Dask Series of the
same frame (``df["label"]``, ``df["qid"]``), partitioned alike: every query whole within a partition.
"""

from __future__ import annotations

import numpy as np

from rankopt.data.backends import register_backend
from rankopt.data.dask_backend import DaskBackend, check_dask_matrix, import_dask

__all__ = ["DaskFrameBackend"]

dd = import_dask("dask.dataframe")


class DaskFrameBackend(DaskBackend):
    """A Dask DataFrame of numeric columns, computed on as the Dask array of its values."""

    name = "dask-dataframe"

    def validate(self, X, name: str = "X"):
        return check_dask_matrix(_numeric_values(X, name).to_dask_array(lengths=True), name)


def _numeric_values(X, name: str):
    """The frame with one real dtype, decided from its columns' dtypes alone (nothing computed): float32 when
    every column is, else float64.  Mixed columns (a bool and a float, as pandas gives them) made Dask's values
    an object array, refused where the same pandas frame fits."""
    for column, dtype in X.dtypes.items():
        if getattr(dtype, "kind", "O") not in "biuf":
            raise ValueError(f"expected {name} to hold real numbers, got column {column!r} of dtype {dtype} instead")
    kinds = set(X.dtypes)
    if len(kinds) == 1 and next(iter(kinds)) in (np.float32, np.float64):
        return X
    target = np.float32 if kinds == {np.dtype(np.float32)} else np.float64
    return X.astype(target)


register_backend(dd.DataFrame, DaskFrameBackend())
