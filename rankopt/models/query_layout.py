"""The queries of a batch a multi-query problem trains on, grouped: one concept for every such problem.

:class:`~rankopt.models.ranking.QueryRankingProblem` (all rows in this process) and each row chunk of
:class:`~rankopt.models.chunked_ranking.ChunkedQueryRankingProblem` lay their used queries out the same way
and infer through it, so that both give the same coefficients to the bit.
"""

from __future__ import annotations

import logging
from typing import Any

import numpy as np

__all__ = ["UsedQueries", "log_left_out"]

logger = logging.getLogger(__name__)


class UsedQueries:
    """The used queries of ``queries`` (a :class:`~rankopt._validation.QueryIndex`) over ``n_rows`` rows.

    ``offsets`` delimit the used queries in grouped order, ``rows`` lists their rows in that order (None
    when they are the rows in order: the gather and scatter are then skipped), and ``row_query`` gives each
    row's used query (−1: left out) where ``by_query`` asks for it (the plane cache's parts).
    """

    def __init__(self, queries, usable: np.ndarray, n_rows: int, *, by_query: bool = True):
        sizes = queries.sizes[usable]
        self.offsets = np.concatenate(([0], np.cumsum(sizes))).astype(np.intp)
        rows = queries.order[np.repeat(usable, queries.sizes)]
        self.rows = None if rows.size == n_rows and np.array_equal(rows, np.arange(n_rows)) else rows
        self.n_rows, self.n_used = n_rows, int(sizes.size)
        self.row_query: Any = None
        if by_query:
            grouped_query = np.repeat(np.arange(self.n_used), sizes)
            self.row_query = grouped_query if self.rows is None else np.full(n_rows, -1, dtype=np.intp)
            if self.rows is not None:
                self.row_query[self.rows] = grouped_query

    def grouped(self, values: np.ndarray) -> np.ndarray:
        """Per-row ``values`` in the used queries' order."""
        return values if self.rows is None else values[self.rows]

    def scatter(self, grouped_coef, n_queries_used: int) -> np.ndarray:
        """Grouped coefficients back in row order, divided by Q (0 for the rows left out)."""
        scaled = np.asarray(grouped_coef, dtype=np.float64) / n_queries_used
        if self.rows is None:
            return scaled
        coef = np.zeros(self.n_rows)
        coef[self.rows] = scaled
        return coef

    def infer(self, rankings, scores: np.ndarray, n_queries_used: int, where: str):
        """The prepared batch's most violated rankings at ``scores`` (row order): (coef / Q in row order, Δ per
        used query); a query the kernel finds nothing to order in is the kernel breaking its contract."""
        result = rankings(self.grouped(scores))
        if not result.usable.all():
            raise RuntimeError(
                f"batched inference found nothing to order in {int(np.count_nonzero(~result.usable))} queries "
                f"{where} that have two relevance levels"
            )
        return self.scatter(result.coef, n_queries_used), np.asarray(result.losses, dtype=np.float64)


def log_left_out(n_queries: int, n_used: int) -> None:
    """Say (at INFO) how many queries a problem leaves out for having nothing to order."""
    if n_used < n_queries:
        logger.info(
            "%d of %d queries have nothing to order (documents of one relevance level, or that the loss "
            "does not tell apart) and are left out",
            n_queries - n_used,
            n_queries,
        )
