"""Loss-augmented inference over many queries in one call.

A set of queries is given as concatenated arrays: the documents of query q
are ``scores[offsets[q]:offsets[q + 1]]`` (and the same slice of
``relevance``), ``offsets`` being int64, ``offsets[0] = 0``, non-decreasing,
``offsets[-1] = n``.  :func:`most_violated_rankings` solves every query's
loss-augmented inference and returns the concatenated coefficients of the
joint feature map, so that a multi-query model forms

    Ψ_q(R̂_q) = Σ_{i∈q} coef[i] ψ(x_i),     Δ_q = losses[q],

with each query's own single-query normalisation (1/(|P||N|) for the binary
rank losses, 1/#pairs for the pairwise loss); averaging over queries is the
caller's business.

Relevance.  A binary rank loss (``loss.graded`` False: AP, NDCG, AUC, the
plugins) takes 0/1 relevance — bool or integers; the caller thresholds
graded labels.  A graded loss (``loss.graded`` True: "pairwise") takes the
integer grades themselves (≥ 0).

Usable queries.  A binary query needs a relevant and a non-relevant
document, a graded one two distinct grades; any other query has nothing to
order: coefficients 0, loss 0, value 0, ``usable[q]`` False.

Methods.  ``method`` names the single-query method every query runs ("auto",
"qs", "select", "search", "greedy", "dp", a plugin's), resolved once; a
graded loss takes "auto" or "pairwise".  The result equals calling the
single-query method per query (:func:`most_violated_rankings_per_query`,
kept as the reference): the same ranks bit for bit, hence the same
coefficients and losses (the kernels reproduce NumPy's summation order); the
values Σ coef·s + Δ up to the order of that sum.  A position-discount plugin
with D(1) ≠ 1 gets its per-query tables up to rounding (docs/maths.md).

Compiled path.  The methods qs, select, search, greedy and topk (by class) on a
loss with a :meth:`~rankopt.losses.RankLoss.compiled_form`, and the pairwise
loss, run in one nogil call of ``_batched.pyx`` with the queries spread over
OpenMP threads (at most one per :data:`DOCS_PER_THREAD` documents).  Any
other method or loss runs the reference loop, logged once per loss type and
method (logger ``rankopt.inference.batched``).
"""

from __future__ import annotations

import logging
import math
import numbers
import os
from dataclasses import dataclass

import numpy as np

import rankopt.inference._batched as _batched
import rankopt.inference._graded_position as _graded_position
from rankopt._validation import (
    QueryIndex,
    check_queries_to_order,
    check_relevant_at,
    check_score_sums,
    check_whole_numbers,
    largest_magnitude,
)
from rankopt.inference.ap_methods import SearchMethod, SelectMethod
from rankopt.inference.base import PluginLookup, kernel_arguments, most_violated_ranking
from rankopt.inference.greedy import GreedyMethod
from rankopt.inference.qs import QSMethod
from rankopt.inference.topk import TopKMethod, count_losses
from rankopt.losses.base import KernelCode, RankLoss
from rankopt.losses.structure import (
    GradedPairStructure,
    GradedPositionStructure,
    GradedQueryStructure,
    TopKCountStructure,
    grade_levels,
)

logger = logging.getLogger(__name__)

#: Grades below this are mapped to levels by counting in the pairwise kernel.
MAX_COUNTED_GRADE = 64

#: The method name of the pairwise structure over grades (besides "auto").
PAIRWISE_METHOD = GradedPairStructure.methods[0]
#: The methods of a position-based structure: the compiled sort (and "auto"), or the O(n k²)
#: assignment by SciPy's ``linear_sum_assignment`` per query in Python, its reference.
NDCG_SORT_METHOD, NDCG_ASSIGNMENT_METHOD = GradedPositionStructure.methods


@dataclass(frozen=True)
class BatchedRankingInference:
    """The most violated output of every query, concatenated.

    Attributes
    ----------
    coef : ndarray of float64, shape (n_docs,)
        In input order: Ψ_q(R̂_q) = Σ_{i∈q} coef[i] ψ(x_i), with the
        single-query normalisation; 0 for the documents of unusable queries.
    losses : ndarray of float64, shape (n_queries,)
        Δ_q(R*_q, R̂_q); 0 for an unusable query.
    values : ndarray of float64, shape (n_queries,)
        Σ_{i∈q} coef[i] s_i + Δ_q, the maximised objective; 0 when unusable.
    usable : ndarray of bool, shape (n_queries,)
        Whether the query has something to order.
    """

    coef: np.ndarray
    losses: np.ndarray
    values: np.ndarray
    usable: np.ndarray


def most_violated_rankings(
    loss,
    scores,
    relevance,
    offsets,
    method: str = "auto",
    *,
    n_threads: int | None = None,
    relative_to_truth: bool = False,
    relevant_at: float | None = None,
    registry: PluginLookup,
) -> BatchedRankingInference:
    """Loss-augmented inference for every query: argmax_R w·Ψ_q(R) + Δ_q(R*_q, R).

    Parameters
    ----------
    loss : str or RankLoss
        A registered rank-loss name or instance.
    scores : array-like of float, shape (n_docs,)
        w·ψ(x) of every document, queries concatenated (float32 is kept).
    relevance : array-like of int or bool, shape (n_docs,)
        0/1 relevance for a binary loss, integer grades ≥ 0 for a graded one.
    offsets : array-like of int, shape (n_queries + 1,)
        Query q holds documents offsets[q] … offsets[q + 1] − 1.
    method : str, default "auto"
        The single-query inference method every query runs.
    n_threads : int, optional
        Most threads the queries are spread over; default:
        :func:`default_threads` (``OMP_NUM_THREADS``, else every core).  A batch uses one thread per
        :data:`DOCS_PER_THREAD` documents at most.
    relative_to_truth : bool, default False
        Return ``coef`` as Ψ_q(R̂_q) − Ψ_q(R*_q)'s coefficients and ``values`` as
        Δ_q + w·(Ψ_q(R̂_q) − Ψ_q(R*_q)), the structured hinge of each query (up to rounding, ≥ 0) and its
        subgradient: the ground truth of :func:`ground_truth_coefficients` is subtracted inside the
        compiled binary kernel, after the inference elsewhere.
    relevant_at : float, optional
        For a binary loss: ``relevance`` holds integer grades ≥ 0, and a document is relevant from
        this grade on (thresholded inside the compiled kernel, without a 0/1 copy of the grades).
        Ignored by graded losses, which train on the grades.
    registry : PluginLookup
        Where names are looked up (a :class:`rankopt.plugins.PluginRegistry`;
        :func:`rankopt.api.most_violated_rankings` supplies the default one).

    Returns
    -------
    BatchedRankingInference
    """
    prepared = PreparedRankings(
        loss,
        relevance,
        offsets,
        method,
        relative_to_truth=relative_to_truth,
        relevant_at=relevant_at,
        registry=registry,
    )
    return prepared(scores, n_threads=n_threads)


class PreparedRankings:
    """:func:`most_violated_rankings` on one batch — loss, relevance, offsets, method — for any scores.

    Everything but the scores is checked and resolved once, here: the relevance and offsets, the
    method, the compiled kernel and its tables.  Each call then checks only its scores (finite, sums
    that cannot overflow) and runs the inference: for callers that infer many times on one batch, as a
    cutting plane's problem does at every iteration.  The parameters are :func:`most_violated_rankings`'.
    """

    def __init__(
        self,
        loss,
        relevance,
        offsets,
        method: str = "auto",
        *,
        relative_to_truth: bool = False,
        relevant_at: float | None = None,
        registry: PluginLookup,
    ):
        self.loss = resolve_rank_loss(loss, registry)
        thresholded = relevant_at is not None and not self.loss.graded
        self.relevance, self.offsets = _check_relevance_offsets(self.loss, relevance, offsets, grades=thresholded)
        self.longest = int(np.max(np.diff(self.offsets), initial=0))
        self.method, self.registry, self.relative_to_truth = method, registry, relative_to_truth
        self._kernel, self._relevant_from, self._count_tables = None, 1, (None, None)
        if self.loss.graded:
            resolve_graded_method(self.loss, method)
            return
        if thresholded:
            self._relevant_from = _integer_threshold(check_relevant_at(relevant_at))
        self._kernel = _compiled_kernel(
            self.loss, _resolve_binary_method(self.loss, method, registry, self.offsets), self.offsets
        )
        if self._kernel is None and thresholded:  # the per-query path takes 0/1 relevance
            self.relevance, self._relevant_from = (self.relevance >= self._relevant_from).astype(np.int64), 1
        if self._kernel is not None and self._kernel[4]:  # top k: Δ per query from the declared count structure
            relevant = (self.relevance >= self._relevant_from).astype(np.int64)
            self._count_tables = _count_loss_tables(self.loss.structure(), relevant, self.offsets)

    def __call__(self, scores, *, n_threads: int | None = None) -> BatchedRankingInference:
        scores = _check_scores(scores, self.longest, self.relevance.size)
        _check_n_threads(n_threads)
        n_threads = _threads_for(scores.size, default_threads() if n_threads is None else int(n_threads))
        loss, relevance, offsets = self.loss, self.relevance, self.offsets
        if self._kernel is not None:
            return _binary_kernel_rankings(
                loss,
                self._kernel,
                scores,
                relevance,
                offsets,
                n_threads,
                self.relative_to_truth,
                self._relevant_from,
                self._count_tables,
            )
        if loss.graded:
            result = _graded_rankings(loss, scores, relevance, offsets, self.method, n_threads, self.registry)
        else:
            result = _per_query(loss, scores, relevance, offsets, self.method, self.registry)
        if not self.relative_to_truth:
            return result
        truth = ground_truth_coefficients(loss, relevance, offsets, registry=self.registry)
        values = np.zeros_like(result.values)
        terms = truth * scores.astype(np.float64)
        nonempty = offsets[1:] > offsets[:-1]
        values[nonempty] = np.add.reduceat(terms, offsets[:-1][nonempty]) if terms.size else 0.0
        values = np.where(result.usable, result.values - values, 0.0)
        return BatchedRankingInference(result.coef - truth, result.losses, values, result.usable)


def _graded_rankings(loss, scores, relevance, offsets, method, n_threads, registry) -> BatchedRankingInference:
    """:func:`most_violated_rankings` of a graded loss, by its declared structure."""
    n_queries = offsets.size - 1
    coef = np.zeros(scores.size, dtype=np.float64)
    losses = np.zeros(n_queries, dtype=np.float64)
    values = np.zeros(n_queries, dtype=np.float64)
    usable = np.zeros(n_queries, dtype=np.uint8)
    method = resolve_graded_method(loss, method)
    structure = graded_structure(loss)
    if isinstance(structure, GradedQueryStructure):
        _log_fallback(loss, method, "it declares a GradedQueryStructure: its own inference, per query")
        return _per_query(loss, scores, relevance, offsets, method, registry)
    if isinstance(structure, GradedPositionStructure):
        if method == NDCG_ASSIGNMENT_METHOD:
            return _per_query(loss, scores, relevance, offsets, method, registry)
        longest = int(np.max(np.diff(offsets), initial=0))
        gains, discount = structure.tables(relevance, longest)
        _graded_position.position_batch(scores, gains, offsets, discount, coef, losses, values, usable, n_threads)
        return BatchedRankingInference(coef, losses, values, usable.view(bool))
    # Levels by counting when the grades are small (LETOR's 0–4), else by sorting them per query.
    if structure.weight is not None:
        levels, inverse = grade_levels(relevance)
        longest = int(np.max(np.diff(offsets), initial=0))
        weight = np.ascontiguousarray(structure.weight_matrix(levels, longest).ravel())
        _batched.pairwise_batch(
            scores, inverse.astype(np.int64), offsets, coef, losses, values, usable, n_threads, levels.size, weight
        )
        return BatchedRankingInference(coef, losses, values, usable.view(bool))
    top_grade = int(relevance.max(initial=0))
    n_grade_values = top_grade + 1 if top_grade < MAX_COUNTED_GRADE else 0
    _batched.pairwise_batch(scores, relevance, offsets, coef, losses, values, usable, n_threads, n_grade_values)
    return BatchedRankingInference(coef, losses, values, usable.view(bool))


def _integer_threshold(relevant_at: float) -> int:
    """The least integer grade ≥ ``relevant_at`` (> 0), capped where no int64 grade reaches it."""
    return int(min(math.ceil(relevant_at), np.iinfo(np.int64).max))


def _binary_kernel_rankings(
    loss, kernel, scores, relevance, offsets, n_threads, relative_to_truth, relevant_from, count_tables
) -> BatchedRankingInference:
    """:func:`most_violated_rankings` of a binary loss through ``_batched.binary_batch``.

    ``relevance`` holds 0/1 labels, or grades relevant from ``relevant_from`` on.
    """
    n_queries = offsets.size - 1
    # The binary kernel writes every coefficient (0 for unusable queries): no zero-filling.
    coef = np.empty(scores.size, dtype=np.float64)
    losses = np.zeros(n_queries, dtype=np.float64)
    values = np.zeros(n_queries, dtype=np.float64)
    usable = np.zeros(n_queries, dtype=np.uint8)
    method_code, code, table, unimodal, top_k = kernel
    count_loss, count_offsets = count_tables
    _batched.binary_batch(
        scores,
        relevance,
        offsets,
        method_code,
        code,
        table,
        unimodal,
        coef,
        losses,
        values,
        usable,
        n_threads,
        top_k,
        count_loss,
        count_offsets,
        relative_to_truth,
        relevant_from,
    )
    return BatchedRankingInference(coef, losses, values, usable.view(bool))


#: Documents per thread below which a batch does not start more threads:
#: waking an OpenMP team costs from tens of microseconds to milliseconds on a
#: busy machine, about the time of inference over this many documents.
DOCS_PER_THREAD = 1 << 14


def default_threads() -> int:
    """``OMP_NUM_THREADS`` when set to a positive integer, else the cores this process may use."""
    try:
        requested = int(os.environ.get("OMP_NUM_THREADS", "").split(",")[0])
    except ValueError:
        requested = 0
    if requested > 0:
        return requested
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def _threads_for(n_docs: int, n_threads: int) -> int:
    return max(1, min(n_threads, n_docs // DOCS_PER_THREAD))


def most_violated_rankings_per_query(
    loss, scores, relevance, offsets, method: str = "auto", *, registry: PluginLookup
) -> BatchedRankingInference:
    """:func:`most_violated_rankings` by one single-query call per query, in Python.

    The reference the compiled batch is tested against, and the path of
    losses without a compiled form.
    """
    loss, scores, relevance, offsets = _check_batch(loss, scores, relevance, offsets, registry)
    if loss.graded:
        resolve_graded_method(loss, method)
    else:
        _resolve_binary_method(loss, method, registry, offsets)
    return _per_query(loss, scores, relevance, offsets, method, registry)


def check_queries_the_loss_orders(
    loss: RankLoss, relevance: np.ndarray, queries: QueryIndex, method, *, registry: PluginLookup, relevant_at=None
) -> np.ndarray:
    """Which queries have something to order under ``loss``, refusing relevance where none has.

    Two relevance levels are needed (:func:`~rankopt._validation.check_queries_to_order`, with its
    message); a graded loss may still tell no two of a query's documents apart — two grades that share a
    gain, pairs of weight 0 — and then its kernel finds nothing to order there.  Whether it does depends
    on the grades alone, so the kernel's own verdict on zero scores is the one used: a fit leaves out
    (and counts) exactly the queries its inference would.
    """
    usable = check_queries_to_order(relevance, queries, graded=loss.graded, relevant_at=relevant_at)
    if not loss.graded:
        return usable
    candidates = np.flatnonzero(usable)
    rows = queries.order[np.repeat(usable, queries.sizes)]
    offsets = np.concatenate(([0], np.cumsum(queries.sizes[usable]))).astype(np.intp)
    grades = np.asarray(relevance)[rows]
    verdict = most_violated_rankings(loss, np.zeros(rows.size), grades, offsets, method, registry=registry).usable
    usable[candidates[~verdict]] = False
    if not usable.any():
        raise ValueError(
            f"expected some query (qid) to hold two documents that loss {loss.name!r} orders apart (grades whose "
            f"gains differ, or a pair of positive weight), got none of the {queries.n_queries} queries instead"
        )
    return usable


def ground_truth_coefficients(loss, relevance, offsets, *, registry: PluginLookup) -> np.ndarray:
    """Coefficients of Ψ_q(R*_q) for every document, in input order.

    The ground truth puts the higher grades first: 1/|P| for a relevant and
    −1/|N| for a non-relevant document of a binary loss; for the pairwise loss
    (#lower − #higher grades)/#pairs; for graded NDCG@k the mean position
    weight A over the positions the document's tie group of equal grades
    occupies in the ideal order.  0 for the documents of unusable queries.
    """
    loss = resolve_rank_loss(loss, registry)
    relevance, offsets = _check_relevance_offsets(loss, relevance, offsets)
    sizes = np.diff(offsets)
    query_of = np.repeat(np.arange(sizes.size), sizes)
    structure = graded_structure(loss) if loss.graded else None
    if isinstance(structure, GradedPositionStructure):
        return _position_ground_truth(structure, relevance, offsets)
    if isinstance(structure, GradedQueryStructure):
        coef = np.zeros(relevance.size)
        for lo, hi in zip(offsets[:-1], offsets[1:], strict=True):
            grades = relevance[lo:hi]
            if hi > lo and grades.max() > grades.min():
                coef[lo:hi] = structure.ground_truth(grades)
        return coef
    if isinstance(structure, GradedPairStructure) and structure.weight is not None:
        return _weighted_pair_ground_truth(structure, relevance, offsets)
    if loss.graded:
        lower, higher = _grade_counts(relevance, offsets)
        n_pairs = np.bincount(query_of, weights=lower, minlength=sizes.size)[query_of]
        # Divided, not scaled: with two grades this is exactly 1/|P| and −1/|N|.
        with np.errstate(invalid="ignore", divide="ignore"):
            coef = np.where(n_pairs > 0, (lower - higher) / n_pairs, 0.0)
        return coef
    n_pos = np.bincount(query_of, weights=relevance, minlength=sizes.size)
    n_neg = sizes - n_pos
    usable = (n_pos > 0) & (n_neg > 0)
    # The expressions of the single-query ranking model, 1.0 / n_pos and −1.0 / n_neg, computed once per
    # query (0 for an unusable one) and handed to its documents.
    with np.errstate(divide="ignore"):
        positive = np.where(usable, 1.0 / n_pos, 0.0)
        negative = np.where(usable, -1.0 / n_neg, 0.0)
    return np.where(relevance != 0, positive[query_of], negative[query_of])


# ---------------------------------------------------------------- the compiled path

#: The single-query methods with a compiled per-query form in ``_batched.pyx``,
#: by class: a subclass may change what the method computes.
_COMPILED_METHODS = {
    QSMethod: "qs",
    SelectMethod: "select",
    SearchMethod: "search",
    GreedyMethod: "greedy",
    TopKMethod: "topk",
}

#: (loss type, method name) pairs already logged as running per query in Python.
_LOGGED_FALLBACKS: set = set()


def _log_fallback(loss: RankLoss, method_name: str, reason: str) -> None:
    key = (type(loss), method_name)
    if key not in _LOGGED_FALLBACKS:
        _LOGGED_FALLBACKS.add(key)
        logger.warning(
            "most_violated_rankings: loss %r with method %r runs one Python call per query (%s)",
            loss.name,
            method_name,
            reason,
        )


def _compiled_kernel(loss: RankLoss, solver, offsets: np.ndarray):
    """(method code, kernel code, discount table, unimodal, top k) for ``_batched.binary_batch``, or None.

    None — the per-query Python path, logged once per loss type and method —
    when the method has no compiled per-query form or the loss no compiled form.
    """
    method_name = _COMPILED_METHODS.get(type(solver))
    if method_name is None:
        _log_fallback(loss, solver.name, f"method {solver.name!r} has no compiled batched form")
        return None
    if method_name == "topk":
        # Δ comes per query from the declared count structure (_count_loss_tables), not from a compiled form.
        structure = loss.structure()
        assert isinstance(structure, TopKCountStructure)  # the method refuses other losses
        return _batched.METHOD_CODES[method_name], 0, np.zeros(1), False, structure.k
    longest = int(np.max(np.diff(offsets), initial=0))
    # One form for every query: the kernel code does not depend on the sizes,
    # and a position-discount table T(1…longest) asked with |P| = 1 is D / D(1);
    # each query divides it by its own Σ_{i≤|P|} T(i).
    form = loss.compiled_form(1, max(longest - 1, 1))
    if form is None:
        _log_fallback(loss, solver.name, f"loss {loss.name!r} has no compiled form")
        return None
    code, table = kernel_arguments(loss, form, 1, max(longest - 1, 1))
    unimodal = method_name == "qs" and code is KernelCode.AP and solver.ap_unimodal_search
    return _batched.METHOD_CODES[method_name], int(code), table, bool(unimodal), 0


def _count_loss_tables(structure: TopKCountStructure, relevance: np.ndarray, offsets: np.ndarray):
    """Δ(m) for every query and every feasible count m of positives in its top k', concatenated, and offsets.

    Query q's entries are m = max(0, k' − |N_q|) … min(k', |P_q|); the loss is asked once per distinct
    (|P_q|, |N_q|), vectorised over m.
    """
    sizes = np.diff(offsets)
    n_pos = np.zeros(sizes.size, dtype=np.int64)
    nonempty = sizes > 0
    n_pos[nonempty] = np.add.reduceat(relevance, offsets[:-1][nonempty])
    n_neg = sizes - n_pos
    kept = np.minimum(structure.k, sizes)
    low, high = np.maximum(0, kept - n_neg), np.minimum(kept, n_pos)
    lengths = np.maximum(high - low + 1, 1)
    starts = np.concatenate(([0], np.cumsum(lengths)))
    table = np.zeros(int(starts[-1]))
    usable = (n_pos > 0) & (n_neg > 0)
    pairs, group = np.unique(np.column_stack((n_pos, n_neg))[usable], axis=0, return_inverse=True)
    where = np.flatnonzero(usable)
    for index, (p, n) in enumerate(pairs):
        members = where[group.ravel() == index]
        counts = np.arange(low[members[0]], high[members[0]] + 1)
        values = count_losses(structure, counts, int(p), int(n))
        table[starts[members][:, None] + np.arange(counts.size)] = values
    return table, starts[:-1].astype(np.int64)


# ---------------------------------------------------------------- the per-query path


def _per_query(loss, scores, relevance, offsets, method, registry) -> BatchedRankingInference:
    n_queries = offsets.size - 1
    coef = np.zeros(scores.size, dtype=np.float64)
    losses = np.zeros(n_queries, dtype=np.float64)
    values = np.zeros(n_queries, dtype=np.float64)
    usable = np.zeros(n_queries, dtype=bool)
    for q in range(n_queries):
        lo, hi = offsets[q], offsets[q + 1]
        s, rel = scores[lo:hi], relevance[lo:hi]
        if loss.graded:
            structure = graded_structure(loss)
            if isinstance(structure, GradedPositionStructure):
                result = _position_query_assignment(structure, s, rel)
            elif isinstance(structure, GradedQueryStructure):
                result = _own_query_inference(loss, structure, s, rel)
            else:
                result = _pairwise_query(structure, s, rel)
            if result is None:
                continue
            coef[lo:hi], losses[q], values[q] = result
        else:
            is_pos = rel != 0
            if is_pos.all() or not is_pos.any():
                continue
            res = most_violated_ranking(loss, s[is_pos], s[~is_pos], method, registry=registry)
            q_coef = coef[lo:hi]
            q_coef[is_pos] = res.pos_coef
            q_coef[~is_pos] = res.neg_coef
            losses[q], values[q] = res.loss, res.value
        usable[q] = True
    return BatchedRankingInference(coef, losses, values, usable)


def _grade_counts(grades: np.ndarray, offsets: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """For each document, how many documents of its query have a lower and a higher grade."""
    sizes = np.diff(offsets)
    query_of = np.repeat(np.arange(sizes.size), sizes)
    order = np.lexsort((grades, query_of))
    q_sorted, g_sorted = query_of[order], grades[order]
    new_group = np.ones(order.size, dtype=bool)
    new_group[1:] = (q_sorted[1:] != q_sorted[:-1]) | (g_sorted[1:] != g_sorted[:-1])
    group_start = np.maximum.accumulate(np.where(new_group, np.arange(order.size), 0))
    group_id = np.cumsum(new_group) - 1
    group_size = np.bincount(group_id)[group_id]
    lower = np.empty(order.size, dtype=np.int64)
    lower[order] = group_start - offsets[q_sorted]
    higher = np.empty(order.size, dtype=np.int64)
    higher[order] = sizes[q_sorted] - (group_start - offsets[q_sorted]) - group_size
    return lower, higher


def _pairwise_query(structure: GradedPairStructure, scores: np.ndarray, grades: np.ndarray):
    """A pairwise structure's inference on one query by its definition, over the pair matrix.

    O(n²): the reference of the compiled kernels.  Returns (coef, loss,
    value), or None when the query has no pair of positive weight.
    """
    if structure.weight is not None:
        return _weighted_pairwise_query(structure, scores, grades)
    s = scores.astype(np.float64)
    higher = grades[:, None] > grades[None, :]  # (i, j) is a pair: i has the higher grade
    n_pairs = int(np.count_nonzero(higher))
    if n_pairs == 0:
        return None
    # Scores beyond ±9e307 overflow to ±inf, which compares with 1/2 as the exact difference would.
    with np.errstate(over="ignore"):
        kept = higher & (s[:, None] - s[None, :] >= 0.5)  # y_ij = +1
    swapped = higher & ~kept
    # coef_i·|P| = Σ_j y_ij − Σ_j y_ji over the pairs i belongs to.
    signed = kept.astype(np.int64) - swapped
    counts = signed.sum(axis=1) - signed.sum(axis=0)
    scale = 1.0 / n_pairs
    coef = counts * scale
    loss = np.count_nonzero(swapped) / n_pairs
    return coef, loss, float(coef @ s) + loss


def _own_query_inference(loss: RankLoss, structure: GradedQueryStructure, scores: np.ndarray, grades: np.ndarray):
    """A loss's own inference on one query, its output checked; None when the grades are all equal."""
    if grades.size == 0 or grades.max() == grades.min():
        return None
    coef, delta = structure.inference(scores, grades)
    coef = np.asarray(coef, dtype=np.float64)
    delta = float(delta)
    if coef.shape != scores.shape or not np.all(np.isfinite(coef)) or not (np.isfinite(delta) and delta >= 0):
        raise RuntimeError(
            f"loss {loss.name!r} broke its contract: its own inference returned coefficients of shape "
            f"{coef.shape} for {scores.size} documents and Δ = {delta!r}; expected finite coefficients, one per "
            "document, and a finite Δ >= 0"
        )
    return coef, delta, float(coef @ scores.astype(np.float64)) + delta


def _weighted_pairwise_query(structure: GradedPairStructure, scores: np.ndarray, grades: np.ndarray):
    """:func:`_pairwise_query` with a weight per pair of grades: Ψ and Δ weighted, divided by the weights' sum."""
    s = scores.astype(np.float64)
    levels, inverse = grade_levels(grades)
    weights = structure.weight_matrix(levels, grades.size)[inverse[:, None], inverse[None, :]]  # 0 unless g_i > g_j
    total = float(weights.sum())
    if not total > 0:
        return None
    with np.errstate(over="ignore"):
        kept = s[:, None] - s[None, :] >= 0.5
    signed = np.where(kept, weights, -weights)
    coef = (signed.sum(axis=1) - signed.sum(axis=0)) / total
    loss = float(np.where(kept, 0.0, weights).sum()) / total
    return coef, loss, float(coef @ s) + loss


# ---------------------------------------------------------------- validation


def _position_query_assignment(structure: GradedPositionStructure, scores: np.ndarray, grades: np.ndarray):
    """A position-based loss's inference on one query as the n × k' assignment it is (SciPy), O(n k'²).

    The reference of the compiled sort: the weight of document i at position
    j is D(j) (s_i / S − G_i / IDCG).  Documents of equal score and gain
    share their tie group's mean coefficient.  Returns (coef, loss, value),
    or None when the query's grades are all equal.
    """
    if grades.size == 0:
        return None
    gains, discount = structure.tables(grades, grades.size)
    if gains.max() == gains.min():
        return None
    from scipy.optimize import linear_sum_assignment

    s = scores.astype(np.float64)
    ideal = float(np.sort(gains)[::-1][: discount.size] @ discount)
    total = float(discount.sum())
    weights = np.outer(s / total - gains / ideal, discount)
    rows, cols = linear_sum_assignment(weights, maximize=True)
    coef = np.zeros(s.size)
    coef[rows] = discount[cols] / total
    dcg = float(gains[rows] @ discount[cols])
    delta = 1.0 - dcg / ideal
    # Documents of equal score and gain are interchangeable: each gets its tie group's mean, as the sort does.
    _, tie_group = np.unique(np.column_stack((s, gains)), axis=0, return_inverse=True)
    tie_group = tie_group.ravel()
    coef = (np.bincount(tie_group, weights=coef) / np.bincount(tie_group))[tie_group]
    return coef, delta, float(coef @ s) + delta


def _weighted_pair_ground_truth(structure: GradedPairStructure, grades: np.ndarray, offsets: np.ndarray) -> np.ndarray:
    """Ψ*'s coefficients with weighted pairs: (Σ_{l < g_i} w(g_i, l) L_l − Σ_{h > g_i} w(h, g_i) L_h) / W per query."""
    sizes = np.diff(offsets)
    if grades.size == 0:
        return np.zeros(0)
    levels, inverse = grade_levels(grades)
    matrix = structure.weight_matrix(levels, int(sizes.max(initial=0)))
    query_of = np.repeat(np.arange(sizes.size), sizes)
    counts = np.zeros((sizes.size, levels.size))
    np.add.at(counts, (query_of, inverse), 1.0)
    per_doc = counts[query_of]  # the level counts of each document's query
    below = np.einsum("nl,nl->n", per_doc, matrix[inverse])
    above = np.einsum("nh,nh->n", per_doc, matrix[:, inverse].T)
    total = np.einsum("qh,hl,ql->q", counts, matrix, counts)[query_of]
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(total > 0, (below - above) / total, 0.0)


def _position_ground_truth(structure: GradedPositionStructure, grades: np.ndarray, offsets: np.ndarray) -> np.ndarray:
    """Ψ*'s coefficients: each document gets the mean position weight A of its tie group (equal gains) in the
    ideal order."""
    sizes = np.diff(offsets)
    n_queries = sizes.size
    if grades.size == 0:
        return np.zeros(0)
    longest = int(sizes.max(initial=0))
    gains, discount = structure.tables(grades, longest)
    query_of = np.repeat(np.arange(n_queries), sizes)
    order = np.lexsort((-gains, query_of))  # per query, gains high to low
    position = np.arange(grades.size) - offsets[query_of[order]]  # 0-based place in the ideal order
    kept = np.minimum(sizes, discount.size)  # k' per query
    totals = np.concatenate(([0.0], np.cumsum(discount)))[kept]
    q_sorted, g_sorted = query_of[order], gains[order]
    inside = position < kept[q_sorted]
    weight = np.where(inside, discount[np.minimum(position, discount.size - 1)], 0.0)
    with np.errstate(invalid="ignore", divide="ignore"):
        weight = weight / totals[q_sorted]
    new_group = np.ones(order.size, dtype=bool)
    new_group[1:] = (q_sorted[1:] != q_sorted[:-1]) | (g_sorted[1:] != g_sorted[:-1])
    group = np.cumsum(new_group) - 1
    mean = np.bincount(group, weights=weight) / np.bincount(group)
    # Per query, grades high to low: usable when its first grade is above its last (an empty query is not).
    nonempty = sizes > 0
    usable = np.zeros(n_queries, dtype=bool)
    usable[nonempty] = g_sorted[offsets[:-1][nonempty]] > g_sorted[offsets[1:][nonempty] - 1]
    coef = np.zeros(grades.size)
    coef[order] = np.where(usable[q_sorted], mean[group], 0.0)
    return coef


def resolve_rank_loss(loss, registry: PluginLookup) -> RankLoss:
    """The rank loss named by or given as ``loss``, or a ValueError for a labeling loss."""
    loss = registry.resolve_loss(loss)
    if not isinstance(loss, RankLoss):
        raise ValueError(
            f"expected loss to be a rank loss, got the {loss.output_kind.value} loss {loss.name!r} instead"
        )
    return loss


def _resolve_binary_method(loss, method, registry, offsets):
    """The method for every query of the batch, exact up to the longest query.

    A discount's convexity (C3) is a property of its positions 1…n, so a
    method exact for the longest query's n positions is exact for every
    query: asked as |P| = 1, |N| = n − 1, as :func:`_compiled_kernel` builds
    the table.
    """
    longest = int(np.max(np.diff(offsets), initial=0))
    return registry.resolve_method(method, loss, 1, max(longest - 1, 1))


def graded_structure(loss: RankLoss):
    """The structure the graded ``loss`` declares (:meth:`RankLoss.structure`), or a ValueError saying it has none."""
    structure = loss.structure()
    if not isinstance(structure, (GradedPositionStructure, GradedPairStructure, GradedQueryStructure)):
        raise ValueError(
            f"no inference over graded relevance is known for the loss {loss.name!r} "
            f"({type(loss).__module__}.{type(loss).__qualname__}): its structure() declares "
            f"{'none' if structure is None else repr(structure)}. The built-in graded losses declare theirs for "
            "themselves, not subclasses (a subclass may change Δ); subclass rankopt.losses.GradedPositionLoss "
            "(gain and discount) or return a rankopt.losses.structure.GradedPositionStructure (docs/plugins.md)"
        )
    return structure


def resolve_graded_method(loss, method) -> str:
    """The method the graded ``loss`` runs over grades ("auto" resolved), or a ValueError."""
    methods = graded_structure(loss).methods
    if method != "auto" and method not in methods:
        choices = repr(methods[0]) if len(methods) == 1 else f"one of {list(methods)}"
        raise ValueError(
            f"expected method 'auto' or {choices} for the graded loss {loss.name!r}, got {method!r} instead"
        )
    return methods[0] if method == "auto" else method


def _check_n_threads(n_threads) -> None:
    if n_threads is not None and (
        isinstance(n_threads, bool) or not isinstance(n_threads, numbers.Integral) or n_threads < 1
    ):
        raise ValueError(f"expected n_threads to be a positive integer or None, got {n_threads!r} instead")


def _check_batch(loss, scores, relevance, offsets, registry):
    loss = resolve_rank_loss(loss, registry)
    relevance, offsets = _check_relevance_offsets(loss, relevance, offsets)
    scores = _check_scores(scores, int(np.max(np.diff(offsets), initial=0)), relevance.size)
    return loss, scores, relevance, offsets


def _check_scores(scores, longest: int, n_documents: int) -> np.ndarray:
    """1-D finite float scores (float32 kept), one per each of the batch's ``n_documents``, whose sums over a
    query of ``longest`` documents cannot overflow."""
    try:
        scores = np.asarray(scores)
    except Exception as exc:
        raise ValueError(f"expected scores to be a 1-D array of numbers, got {type(scores).__name__}: {exc}") from exc
    if scores.ndim != 1:
        raise ValueError(f"expected scores to be 1-D, got an array of shape {scores.shape} instead")
    if scores.dtype == np.bool_ or not np.issubdtype(scores.dtype, np.number) or np.iscomplexobj(scores):
        raise ValueError(f"expected scores to hold real numbers, got dtype {scores.dtype} instead")
    scores = np.ascontiguousarray(scores, dtype=np.float32 if scores.dtype == np.float32 else np.float64)
    largest = largest_magnitude(scores) if scores.size else 0.0
    if not math.isfinite(largest):
        raise ValueError("expected finite scores, got NaN or infinity instead")
    if scores.size:
        check_score_sums(largest, longest, scores.dtype)
    if scores.size != n_documents:
        raise ValueError(f"expected relevance of the same length as scores ({scores.size}), got {n_documents} instead")
    return scores


def _check_relevance_offsets(loss, relevance, offsets, *, grades: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """Relevance and offsets as int64; 0/1 relevance for a binary loss unless ``grades`` (thresholded later)."""
    try:
        offsets_arr = np.asarray(offsets)
    except Exception as exc:
        raise ValueError(f"expected offsets to be a 1-D integer array, got {type(offsets).__name__}: {exc}") from exc
    if offsets_arr.ndim != 1 or offsets_arr.size == 0:
        raise ValueError(f"expected offsets to be a non-empty 1-D array, got shape {offsets_arr.shape} instead")
    if offsets_arr.dtype == np.bool_ or not np.issubdtype(offsets_arr.dtype, np.integer):
        raise ValueError(f"expected integer offsets, got dtype {offsets_arr.dtype} instead")
    offsets_arr = np.ascontiguousarray(offsets_arr, dtype=np.int64)
    if offsets_arr[0] != 0:
        raise ValueError(f"expected offsets to start at 0, got {offsets_arr[0]} instead")
    steps = np.diff(offsets_arr)
    if steps.size and steps.min() < 0:
        q = int(np.argmax(steps < 0))
        raise ValueError(
            f"expected non-decreasing offsets, got offsets[{q + 1}] = {offsets_arr[q + 1]} < "
            f"offsets[{q}] = {offsets_arr[q]} instead"
        )
    try:
        rel = np.asarray(relevance)
    except Exception as exc:
        raise ValueError(f"expected relevance to be a 1-D array, got {type(relevance).__name__}: {exc}") from exc
    if rel.ndim != 1:
        raise ValueError(f"expected relevance to be 1-D, got an array of shape {rel.shape} instead")
    if rel.size != offsets_arr[-1]:
        raise ValueError(f"expected relevance to hold the offsets' {offsets_arr[-1]} documents, got {rel.size} instead")
    if rel.dtype == np.bool_:
        rel = rel.astype(np.int64)
    elif np.issubdtype(rel.dtype, np.integer):
        rel = rel.astype(np.int64, copy=False)
    elif np.issubdtype(rel.dtype, np.floating):
        # Grades read from SVM-light files come as floats; integral values are accepted.
        check_whole_numbers(rel, "relevance", "integer relevance")
        rel = rel.astype(np.int64)
    else:
        raise ValueError(f"expected integer or bool relevance, got dtype {rel.dtype} instead")
    rel = np.ascontiguousarray(rel)
    if rel.size:
        if (loss.graded or grades) and rel.min() < 0:
            kind = "graded loss" if loss.graded else "loss"
            raise ValueError(f"expected grades >= 0 for the {kind} {loss.name!r}, got {rel.min()} instead")
        if not (loss.graded or grades) and (rel.min() < 0 or rel.max() > 1):
            bad = rel[(rel < 0) | (rel > 1)][0]
            raise ValueError(
                f"expected 0/1 relevance for the binary loss {loss.name!r} (threshold graded labels "
                f"first), got {bad} instead"
            )
    return rel, offsets_arr
