"""The plain ranking model: Ψ(X, R) of Mohapatra et al. (2018) eq. (1) with any rank loss, over one query or many."""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from rankopt._validation import QueryIndex, check_query_scores
from rankopt.engine.problem import BlockPlanes, BlockProblem, RowInference
from rankopt.hookspecs import hookimpl
from rankopt.inference.base import solve_ranking
from rankopt.inference.batched import (
    PreparedRankings,
    check_queries_the_loss_orders,
    ground_truth_coefficients,
    most_violated_rankings,
)
from rankopt.inference.structure_table import kernel_for_loss
from rankopt.losses.base import OutputKind
from rankopt.models.base import FeatureMapProblem, Model
from rankopt.models.chunked_ranking import ChunkedQueryRankingProblem
from rankopt.models.query_layout import UsedQueries, log_left_out

__all__ = ["QueryRankingProblem", "RankingModel", "RankingProblem"]


class RankingProblem(FeatureMapProblem):
    """Ψ(X, R) = (1/|P||N|) Σ_{x∈P} Σ_{y∈N} R_xy (ψ(x) − ψ(y)).

    The ground truth puts every positive first, so Ψ(X, R*) is the difference
    of the class means of ψ; the most violated ranking comes from
    :func:`rankopt.most_violated_ranking`.  X is never split or copied: each
    oracle call is one score product over all rows and one combination with
    a coefficient per row, so memory stays at the data plus O(n).
    """

    def __init__(self, X, y, loss, feature_map, inference, registry):
        self.X, self.is_positive = X, y
        self.loss, self.feature_map = loss, feature_map
        self.registry = registry
        n_pos = int(np.count_nonzero(y))
        n_neg = y.size - n_pos
        # Checked and resolved for this problem's size, once (as most_violated_ranking does per call):
        # the compiled form first, then the method, since a loss's conditions may hold on some sizes only.
        loss.compiled_form(n_pos, n_neg)
        kernel, structure = kernel_for_loss(loss)
        self._method = kernel.single_query_method(loss, structure, inference, n_pos, n_neg, registry)
        self.inference = self._method.name
        self.inference_note = kernel.describe_method(
            loss,
            structure,
            inference,
            self.inference,
            np.array([n_pos]),
            np.array([n_neg]),
            registry,
            size=(n_pos, n_neg),
        )
        self._pos_rows, self._neg_rows = np.flatnonzero(y), np.flatnonzero(~y)
        self.n_features = feature_map.n_features(X)
        self._set_ground_truth(np.where(y, 1.0 / n_pos, -1.0 / n_neg))

    def infer(self, scores):
        check_query_scores(scores)  # then both parts pass check_scores, as solve_ranking requires
        result = solve_ranking(self.loss, scores[self._pos_rows], scores[self._neg_rows], self._method)
        coef = np.empty(self.is_positive.size)
        coef[self._pos_rows] = result.pos_coef
        coef[self._neg_rows] = result.neg_coef
        # The maximum as every linear problem sums it (one query over qid gives the same bits).
        return RowInference(coef, result.loss, float(coef @ scores) + result.loss)


class QueryRankingProblem(FeatureMapProblem, BlockProblem):
    """Q queries, one w, one slack: SVM^map's and SVM^rank's formulation.

    Ψ(X, R) = (1/Q) Σ_q Ψ_q(X_q, R_q) and Δ = (1/Q) Σ_q Δ_q(R*_q, R_q), each
    Ψ_q and Δ_q the single-query ones (Yue, Finley, Radlinski & Joachims,
    "A support vector method for optimizing average precision", SIGIR 2007;
    Joachims, "Training linear SVMs in linear time", KDD 2006).  The most
    violated tuple of rankings is each query's most violated ranking, found
    for all queries in one batched inference call; the data is touched by one
    score product and one combination per oracle call, as for one query.

    Queries with nothing to order (one relevance level) contribute nothing
    and are left out; Q counts the others (``n_queries_used``).  Rows are
    never copied: the queries' rows are gathered from the scores and the
    coefficients scattered back.
    """

    def __init__(self, X, relevance, queries: QueryIndex, loss, feature_map, inference, registry):
        self.X = X
        self.loss, self.feature_map = loss, feature_map
        self.registry = registry
        relevance = np.asarray(relevance)
        usable = check_queries_the_loss_orders(loss, relevance, queries, inference, registry=registry)
        # The method of the loss's structure kernel: exact up to the longest query is exact for all.
        kernel, structure = kernel_for_loss(loss)
        longest = int(queries.sizes.max(initial=0))
        self.inference = kernel.resolve_method(loss, structure, inference, longest, registry)
        n_pos = np.add.reduceat(relevance[queries.order] != 0, queries.offsets[:-1])[usable]
        self.inference_note = kernel.describe_method(
            loss, structure, inference, self.inference, n_pos, queries.sizes[usable] - n_pos, registry
        )
        self.n_features = feature_map.n_features(X)
        self.n_queries = queries.n_queries
        self.n_queries_used = int(np.count_nonzero(usable))
        log_left_out(self.n_queries, self.n_queries_used)
        self._layout = UsedQueries(queries, usable, relevance.size)
        self.offsets, self.rows, self._n_rows = self._layout.offsets, self._layout.rows, relevance.size
        self.relevance = np.ascontiguousarray(relevance if self.rows is None else relevance[self.rows])
        self._set_ground_truth(
            self._scatter(ground_truth_coefficients(loss, self.relevance, self.offsets, registry=registry))
        )
        # The batch is fixed for the whole solve: checked and resolved once, each call checks its scores.
        self._rankings = PreparedRankings(loss, self.relevance, self.offsets, self.inference, registry=registry)
        # Two products with X (scores and combination; the parts by query are a third).
        self.oracle_cost = 3.0 * float(X.nnz if sp.issparse(X) else np.prod(X.shape))
        self.n_blocks = self.n_queries_used
        order = np.arange(self._n_rows) if self.rows is None else self.rows
        self._block_rows = [order[a:b] for a, b in zip(self.offsets[:-1], self.offsets[1:], strict=True)]
        # Each row's query among the used ones (−1: left out), for the planes split by query.
        self._row_query = self._layout.row_query

    def _scatter(self, grouped_coef: np.ndarray) -> np.ndarray:
        """Per-row coefficients in X's row order, divided by Q."""
        return self._layout.scatter(grouped_coef, self.n_queries_used)

    def infer(self, scores):
        coef, losses = self._layout.infer(self._rankings, scores, self.n_queries_used, f"for loss {self.loss.name!r}")
        loss = float(np.mean(losses))
        return RowInference(coef, loss, float(coef @ scores) + loss, losses / self.n_queries_used)

    def block_most_violated(self, block, w):
        """Query ``block``'s part of the cut at w, from its own rows: one small product each way."""
        rows = self._block_rows[block]
        start, stop = self.offsets[block], self.offsets[block + 1]
        X_block = self.X[rows]
        scores = np.asarray(self.feature_map.scores(X_block, w), dtype=np.float64)
        result = most_violated_rankings(
            self.loss,
            scores,
            self.relevance[start:stop],
            np.array([0, stop - start], dtype=np.intp),
            self.inference,
            registry=self.registry,
        )
        coef = self.ground_truth_coef[rows] - np.asarray(result.coef, dtype=np.float64) / self.n_queries_used
        return self.feature_map.combine(X_block, coef), float(result.losses[0]) / self.n_queries_used

    def block_planes(self, inference):
        """Each query's part of the cut: its slack is a sum of per-query maxima (SVM^map's 1-slack form)."""
        if self.n_queries_used < 2 or inference.block_losses is None:
            return None
        coef = self.ground_truth_coef - inference.coef
        return BlockPlanes(
            inference.block_losses,
            lambda: self.feature_map.combine_groups(self.X, coef, self._row_query, self.n_queries_used),
        )


class RankingModel(Model):
    """Rank SVM (AP-SVM, NDCG-SVM, ROC-area SVM, …) over one query or over many.

    Without ``queries`` the rows of X are one query and ``y`` is bool
    relevance (:class:`RankingProblem`).  With a :class:`QueryIndex`, ``y``
    is per-row relevance — bool for a binary loss, integer grades for a
    graded one — and the problem is :class:`QueryRankingProblem`.  With
    ``row_chunks`` (a Dask X, its labels and query ids chunked alike) the
    inference runs on the chunks (:class:`ChunkedQueryRankingProblem`).
    """

    name = "ranking"
    output_kind = OutputKind.RANKING
    supports_queries = True
    supports_row_chunks = True

    def build_problem(
        self, X, y, loss, feature_map, *, inference="auto", registry, queries=None, row_chunks=None, relevant_at=1
    ):
        if row_chunks is not None:
            return ChunkedQueryRankingProblem(row_chunks, loss, feature_map, inference, registry, relevant_at)
        if queries is None:
            return RankingProblem(X, y, loss, feature_map, inference, registry)
        return QueryRankingProblem(X, y, queries, loss, feature_map, inference, registry)


@hookimpl
def rankopt_models():
    return [RankingModel]
