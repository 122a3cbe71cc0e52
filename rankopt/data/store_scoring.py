"""Scoring a query store a partition at a time: ``rankopt predict`` and ``rankopt evaluate`` on Dask.

Each partition holds whole queries (:mod:`rankopt.data.query_store`), so both jobs run per partition on
Dask's active scheduler (threads, or the workers of a ``dask_client``): :func:`write_store_scores` has each
partition write its scores to a part file and then joins the parts in row order, and
:func:`store_query_metrics` has each partition return its queries' metrics.  The driver never holds a row.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile

import numpy as np

__all__ = ["format_scores", "query_metrics", "store_query_metrics", "write_store_scores"]


def format_scores(scores: np.ndarray) -> str:
    """One score a line, as ``rankopt predict`` writes them (12 significant digits)."""
    return "".join(f"{score:.12g}\n" for score in scores.tolist())


def _weights_for(coef: np.ndarray, n_columns: int, path: str) -> np.ndarray:
    """The model's weights for a store ``n_columns`` wide: the store may span fewer features, never more."""
    if n_columns > coef.size:
        raise ValueError(f"expected the query store {path!r} to span at most {coef.size} features, got {n_columns}")
    return coef[:n_columns]


def _scores(X, coef: np.ndarray) -> np.ndarray:
    """A partition's scores, in float64 whatever the store's dtype."""
    return np.asarray(X, dtype=np.float64) @ coef


def _score_partition(X, coef: np.ndarray, path: str) -> int:
    scores = _scores(X, coef)
    with open(path, "w", encoding="utf-8") as handle:
        handle.write(format_scores(scores))
    return scores.size


def write_store_scores(store, coef: np.ndarray, output: str | None) -> int:
    """Write ``X @ coef`` for every row of the store, one score a line, to ``output`` (stdout when None).

    Each partition writes its part file in a temporary folder beside ``output``; the parts are then joined
    in row order and the folder removed.  Returns the rows scored.
    """
    import dask

    from rankopt.data.query_store import open_query_store

    X, _, _ = open_query_store(store)
    coef = _weights_for(np.asarray(coef, dtype=np.float64), X.shape[1], os.fspath(store))
    folder = tempfile.mkdtemp(prefix=".rankopt-scores-", dir=os.path.dirname(os.path.abspath(output or ".")))
    try:
        parts = [os.path.join(folder, f"part-{i:06d}") for i in range(X.numblocks[0])]
        tasks = [
            dask.delayed(_score_partition)(block, coef, part)
            for block, part in zip(X.to_delayed().ravel(), parts, strict=True)
        ]
        rows = sum(dask.compute(*tasks))
        target = sys.stdout if output is None else open(output, "w", encoding="utf-8")  # noqa: SIM115
        try:
            for part in parts:
                with open(part, encoding="utf-8") as handle:
                    shutil.copyfileobj(handle, target)
        finally:
            if output is not None:
                target.close()
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    return rows


def query_metrics(grades, scores, qid, relevant_at, gains: str) -> tuple[np.ndarray, np.ndarray, dict]:
    """(query ids, their sizes, {metric: per-query values}), queries by increasing id: AP, NDCG@1/5/10, P@10."""
    from rankopt.metrics import mean_average_precision, ndcg_at_k, precision_at_k

    grades, qid = np.asarray(grades), np.asarray(qid)
    ids, sizes = np.unique(qid, return_counts=True)
    per_query = {
        "AP": mean_average_precision(grades, scores, qid, relevant_at, average=False),
        **{f"NDCG@{k}": ndcg_at_k(grades, scores, qid, k=k, gains=gains, average=False) for k in (1, 5, 10)},
        "P@10": precision_at_k(grades, scores, qid, k=10, relevant_at=relevant_at, average=False),
    }
    return ids, sizes, per_query


def _partition_metrics(X, y, qid, coef: np.ndarray, relevant_at, gains: str):
    return query_metrics(y, _scores(X, coef), qid, relevant_at, gains)


def store_query_metrics(store, coef: np.ndarray, *, relevant_at, gains: str) -> tuple[np.ndarray, np.ndarray, dict]:
    """:func:`query_metrics` over every partition of the store, queries by increasing id."""
    import dask

    from rankopt.data.query_store import open_query_store

    X, y, qid = open_query_store(store)
    coef = _weights_for(np.asarray(coef, dtype=np.float64), X.shape[1], os.fspath(store))
    tasks = [
        dask.delayed(_partition_metrics)(xb, yb, qb, coef, relevant_at, gains)
        for xb, yb, qb in zip(X.to_delayed().ravel(), y.to_delayed().ravel(), qid.to_delayed().ravel(), strict=True)
    ]
    results = dask.compute(*tasks)
    ids = np.concatenate([r[0] for r in results])
    sizes = np.concatenate([r[1] for r in results])
    order = np.argsort(ids, kind="stable")
    per_query = {name: np.concatenate([r[2][name] for r in results])[order] for name in results[0][2]}
    return ids[order], sizes[order], per_query
