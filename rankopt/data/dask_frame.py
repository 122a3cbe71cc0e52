"""Dask DataFrames as design matrices: validated into a Dask array of their values.

Imported by :mod:`rankopt.data.backends` when ``dask.dataframe`` is first seen.  The partitions' lengths
are computed once (one pass over the partitions, on Dask's active scheduler), so that the rows' chunks are
known; nothing is gathered.  A multi-query fit then takes the labels and query ids as Dask Series of the
same frame (``df["label"]``, ``df["qid"]``), partitioned alike: every query whole within a partition.
"""

from __future__ import annotations

from rankopt.data.backends import register_backend
from rankopt.data.dask_backend import DaskBackend, check_dask_matrix, import_dask

__all__ = ["DaskFrameBackend"]

dd = import_dask("dask.dataframe")


class DaskFrameBackend(DaskBackend):
    """A Dask DataFrame of numeric columns, computed on as the Dask array of its values."""

    name = "dask-dataframe"

    def validate(self, X, name: str = "X"):
        return check_dask_matrix(X.to_dask_array(lengths=True), name)


register_backend(dd.DataFrame, DaskFrameBackend())
