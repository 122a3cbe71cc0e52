"""The structure table's kernels for graded losses: position-based, pairwise (weighted or not), and a loss's
own one-query inference.

Each runs its batch in one call of a compiled kernel where it has one (``_graded_position`` for the
position structure, ``_batched.pairwise_batch`` for the pairs, threads over queries) and keeps the
definition-level one-query inference as its reference.
"""

from __future__ import annotations

import numbers
import warnings

import numpy as np

import rankopt.inference._batched as _batched
import rankopt.inference._graded_position as _graded_position
from rankopt.inference.binary_kernels import packed_sorted_keys, per_query
from rankopt.inference.brute_force import brute_force_graded, brute_force_pairs
from rankopt.inference.kernel_base import (
    BatchedRankingInference,
    PreparedKernel,
    ReusedOutput,
    StructureKernel,
    log_fallback,
    longest_query,
)
from rankopt.losses.base import RankLoss
from rankopt.losses.structure import (
    GradedPairStructure,
    GradedPositionStructure,
    GradedQueryStructure,
    check_weighted_sum,
    grade_levels,
)

__all__ = ["GradedKernel", "GradedPairKernel", "GradedPositionKernel", "GradedQueryKernel"]

#: Grades below this are mapped to levels by counting in the pairwise kernel.
MAX_COUNTED_GRADE = 64

#: The method name of the pairwise structure over grades (besides "auto").
PAIRWISE_METHOD = GradedPairStructure.methods[0]
#: The methods of a position-based structure: the compiled sort (and "auto"), or the O(n k²)
#: assignment by SciPy's ``linear_sum_assignment`` per query in Python, its reference.
NDCG_SORT_METHOD, NDCG_ASSIGNMENT_METHOD = GradedPositionStructure.methods


class GradedKernel(StructureKernel):
    """A graded structure's kernel: its methods are the structure's own (``structure.methods``)."""

    graded = True

    def resolve_method(self, loss, structure, method, longest, registry) -> str:
        """The method the graded ``loss`` runs over grades ("auto" resolved), or a ValueError."""
        methods = structure.methods
        if method != "auto" and method not in methods:
            choices = repr(methods[0]) if len(methods) == 1 else f"one of {list(methods)}"
            raise ValueError(
                f"expected inference 'auto' or {choices} for the graded loss {loss.name!r}, got {method!r} instead"
            )
        return methods[0] if method == "auto" else method


#: The grade dtypes the level passes read as they are (a training loop's narrowed labels are int8).
_BYTE_OR_INT64 = (np.dtype(np.int8), np.dtype(np.int64))


def _levels_and_gains(structure, relevance: np.ndarray, longest: int):
    """(level_of, gains, level_gains, discount) of a position structure's grades, the levels' gains and the
    discount for queries of ``longest`` documents.  Each document is given by its grade level as a byte
    (``level_of``, uint8, and ``gains`` None) when the batch has at most ``MAX_BYTE_LEVELS`` levels, the
    kernel looking its gain up; by its gain otherwise (``level_of`` None).  The grades below 2¹⁶ of a training
    loop's hot path take two compiled passes (``_graded_position.present_levels``, then ``level_lookup``);
    larger ones are sorted (:func:`grade_levels`)."""
    relevance = np.asarray(relevance)
    grades = np.ascontiguousarray(relevance, dtype=relevance.dtype if relevance.dtype in _BYTE_OR_INT64 else np.int64)
    levels = _graded_position.present_levels(grades)
    level_of = None
    if levels is None:
        levels, level_of = grade_levels(grades)
    level_gains, discount = structure.tables(levels, longest)
    if levels.size > _graded_position.MAX_BYTE_LEVELS:
        if level_of is None:
            level_of = np.searchsorted(levels, grades)
        return None, level_gains[level_of], level_gains, discount
    if level_of is None:
        return _graded_position.level_lookup(grades, levels), None, level_gains, discount
    return level_of.astype(np.uint8), None, level_gains, discount


class _Batch(PreparedKernel):
    """A graded batch: ``run(scores, n_threads, relative_to_truth)`` gives its inference; with
    ``relative_inside`` False the caller subtracts the ground truth when asked, and the run ignores the flag."""

    def __init__(self, run, relevance, relative_inside: bool = False):
        self.run, self.relevance, self._relative_inside = run, relevance, relative_inside

    @property
    def relative_inside(self) -> bool:
        return self._relative_inside

    def __call__(self, scores, n_threads, relative_to_truth):
        return self.run(scores, n_threads, relative_to_truth)


def _compiled_batch(kernel_call, relevance, offsets, relative_inside: bool = False) -> _Batch:
    """A batch run by a compiled kernel ``kernel_call(scores, coef, losses, values, usable, n_threads,
    relative_to_truth)`` that writes every coefficient and its outputs in place (zeros for the queries with
    nothing to order) and, when ``relative_inside``, subtracts the ground truth itself when asked."""

    buffer = ReusedOutput()

    def run(scores, n_threads, relative_to_truth):
        n_queries = offsets.size - 1
        coef = buffer.empty(scores.size)  # the compiled graded kernels write every coefficient
        losses, values = np.zeros(n_queries, dtype=np.float64), np.zeros(n_queries, dtype=np.float64)
        usable = np.zeros(n_queries, dtype=np.uint8)
        kernel_call(scores, coef, losses, values, usable, n_threads, relative_to_truth and relative_inside)
        return BatchedRankingInference(coef, losses, values, usable.view(bool))

    return _Batch(run, relevance, relative_inside)


class GradedPositionKernel(GradedKernel):
    """Gain of each grade, discount of each position, cutoff k: a partial sort per query (compiled), or the
    n × k' assignment (SciPy) as the reference."""

    structure = GradedPositionStructure
    label = "graded position"
    label_dtypes = _BYTE_OR_INT64

    def prepare(self, loss, structure, relevance, offsets, method, *, relevant_from, registry):
        method = self.resolve_method(loss, structure, method, 0, registry)
        if method == NDCG_ASSIGNMENT_METHOD:
            return _Batch(
                lambda s, n, _: per_query(self, loss, structure, s, relevance, offsets, method, registry), relevance
            )
        longest = longest_query(offsets)
        # The gains and the discount's checks are the grade levels', each document's gain a lookup in the
        # kernel (whose ground truth looks tie groups up by level too).
        level_of, gains, level_gains, discount = _levels_and_gains(structure, relevance, longest)

        def position_batch(scores, coef, losses, values, usable, n_threads, relative_to_truth):
            _graded_position.position_batch(
                scores,
                gains,
                offsets,
                discount,
                coef,
                losses,
                values,
                usable,
                n_threads,
                relative_to_truth,
                level_of,
                level_gains,
            )

        return _compiled_batch(position_batch, relevance, offsets, relative_inside=True)

    def query(self, loss, structure, scores, relevance, method, registry):
        return _position_query_assignment(structure, scores, relevance)

    def ground_truth(self, loss, structure, relevance, offsets):
        return _position_ground_truth(structure, relevance, offsets)

    def ranking_loss(self, loss, structure, ordered_relevance):
        gains = structure.gains(np.asarray(ordered_relevance))
        discount = structure.position_weights(gains.size)
        ideal = float(np.sort(gains)[::-1][: discount.size] @ discount)
        return 1.0 - float(gains[: discount.size] @ discount) / ideal

    def check(self, loss, structure, *, n_instances, random_state, registry):
        _check_position_structure(
            self, loss, structure, n_instances=n_instances, random_state=random_state, registry=registry
        )


#: Longest query from which the pairwise batch reads NumPy's sort of packed keys instead of sorting each query
#: itself: from there its own sort leaves the cache (in-process A/B of the kernel, 10 queries of 10⁵ documents:
#: 0.85–0.86× at 1–90 % relevant), while below it costs as much (10³ × 10³, 10⁴ × 100: 0.98–1.05× with half
#: relevant) or more, the packed keys sorting the queries that the dense test never sorts (1.7–1.8× at 1 %).
PAIRWISE_PACKED_MIN_WIDTH = 1 << 14


class GradedPairKernel(GradedKernel):
    """SVM^rank's pairs over grades, each weighted by its two grades (or all alike): compiled sweeps."""

    structure = GradedPairStructure
    label = "graded pairwise"

    def resolve_method(self, loss, structure, method, longest, registry) -> str:
        """:meth:`GradedKernel.resolve_method`, taking the method's former name "pairwise" (which named the
        loss too) as "level_sweep", with a FutureWarning."""
        if method == "pairwise":
            warnings.warn(
                f"inference='pairwise' is deprecated for the graded loss {loss.name!r}: it is now "
                "inference='level_sweep'",
                FutureWarning,
                stacklevel=2,
            )
            method = "level_sweep"
        return super().resolve_method(loss, structure, method, longest, registry)

    def prepare(self, loss, structure, relevance, offsets, method, *, relevant_from, registry):
        self.resolve_method(loss, structure, method, 0, registry)
        longest = longest_query(offsets)
        if structure.weight is not None:
            # Weighted pairs: each document's grade level (counted when the grades are small, LETOR's 0–4,
            # else sorted) and the levels' weight matrix.
            levels, inverse = grade_levels(relevance)
            weight = np.ascontiguousarray(structure.weight_matrix(levels, longest).ravel())
            grade_index, n_grade_values = inverse.astype(np.int64), levels.size
        else:  # every pair counts 1: the grades themselves, counted when small
            top_grade = int(relevance.max(initial=0))
            grade_index, n_grade_values, weight = relevance, top_grade + 1 if top_grade < MAX_COUNTED_GRADE else 0, None

        keys_buffer = ReusedOutput()
        packed = weight is None and longest >= PAIRWISE_PACKED_MIN_WIDTH

        def pairwise_batch(scores, coef, losses, values, usable, n_threads, relative_to_truth):
            # Long unweighted queries read their order from NumPy's sort of packed keys (float32 scores).
            keys = packed_sorted_keys(scores, offsets, grade_index, 1, keys_buffer) if packed else None
            _batched.pairwise_batch(
                scores,
                grade_index,
                offsets,
                coef,
                losses,
                values,
                usable,
                n_threads,
                n_grade_values,
                weight,
                relative_to_truth,
                keys,
            )

        return _compiled_batch(pairwise_batch, relevance, offsets, relative_inside=True)

    def query(self, loss, structure, scores, relevance, method, registry):
        return _pairwise_query(structure, scores, relevance)

    def ground_truth(self, loss, structure, relevance, offsets):
        if structure.weight is not None:
            return _weighted_pair_ground_truth(structure, relevance, offsets)
        sizes = np.diff(offsets)
        query_of = np.repeat(np.arange(sizes.size), sizes)
        lower, higher = _grade_counts(relevance, offsets)
        n_pairs = np.bincount(query_of, weights=lower, minlength=sizes.size)[query_of]
        # Divided, not scaled: with two grades this is exactly 1/|P| and −1/|N|.
        with np.errstate(invalid="ignore", divide="ignore"):
            coef = np.where(n_pairs > 0, (lower - higher) / n_pairs, 0.0)
        return coef

    def ranking_loss(self, loss, structure, ordered_relevance):
        levels, index = grade_levels(np.asarray(ordered_relevance))
        weight = structure.weight_matrix(levels)
        # above[i, t]: documents of level t ranked above document i; a pair is misordered when the lower
        # grade stands above the higher (the weight matrix's row is the higher grade).
        one_hot = np.eye(levels.size)[index]
        above = np.cumsum(one_hot, axis=0) - one_hot
        misordered = float(np.sum(above * weight[index]))
        counts = one_hot.sum(axis=0)
        total = float(counts @ weight @ counts)
        return misordered / total

    def check(self, loss, structure, *, n_instances, random_state, registry):
        _check_pair_structure(
            self, loss, structure, n_instances=n_instances, random_state=random_state, registry=registry
        )


class GradedQueryKernel(GradedKernel):
    """A loss that brings its own one-query inference: run per query, said once in the log."""

    structure = GradedQueryStructure
    label = "own one-query inference"

    def prepare(self, loss, structure, relevance, offsets, method, *, relevant_from, registry):
        method = self.resolve_method(loss, structure, method, 0, registry)

        def run(scores, n_threads, relative_to_truth):
            log_fallback(loss, method, "it declares a GradedQueryStructure: its own inference, per query")
            return per_query(self, loss, structure, scores, relevance, offsets, method, registry)

        return _Batch(run, relevance)

    def query(self, loss, structure, scores, relevance, method, registry):
        return _own_query_inference(loss, structure, scores, relevance)

    def ground_truth(self, loss, structure, relevance, offsets):
        coef = np.zeros(relevance.size)
        for lo, hi in zip(offsets[:-1], offsets[1:], strict=True):
            grades = relevance[lo:hi]
            if hi > lo and grades.max() > grades.min():
                coef[lo:hi] = structure.ground_truth(grades)
        return coef

    def ranking_loss(self, loss, structure, ordered_relevance):
        raise ValueError(
            f"expected a loss whose structure gives Δ of a ranking, got {loss.name!r}, which declares only its own "
            "one-query inference (a GradedQueryStructure)"
        )

    def check(self, loss, structure, *, n_instances, random_state, registry):
        _check_own_inference(
            self, loss, structure, n_instances=n_instances // 10, random_state=random_state, registry=registry
        )


def _grade_counts(grades: np.ndarray, offsets: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """For each document, how many documents of its query have a lower and a higher grade.

    Counted, not sorted: the grades' levels (:func:`grade_levels`) are counted per query, and a document's
    lower (higher) documents are its query's counts below (above) its level.
    """
    sizes = np.diff(offsets)
    n_queries = sizes.size
    levels, level_of = grade_levels(grades)
    n_levels = levels.size
    cell = np.repeat(np.arange(n_queries), sizes) * n_levels + level_of
    counts = np.bincount(cell, minlength=n_queries * n_levels).reshape(n_queries, n_levels)
    below = np.cumsum(counts, axis=1) - counts
    above = sizes[:, None] - below - counts
    return below.ravel()[cell].astype(np.int64), above.ravel()[cell].astype(np.int64)


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
    ideal order.

    Nothing is sorted: the grades are counted by level (:func:`grade_levels`), levels of equal gain form
    one tie group, and a query's groups, from the highest gain down, fill its ideal order one after the
    other, so a group's positions follow from the counts.  Each group's sum of A is taken over its
    positions in increasing order, one addition at a time, as the sort-based definition adds them.
    """
    sizes = np.diff(offsets)
    n_queries = sizes.size
    if grades.size == 0:
        return np.zeros(0)
    levels, level_of = grade_levels(grades)
    level_gains = structure._checked_gain(levels)
    discount = structure.position_weights(int(sizes.max(initial=0)))
    check_weighted_sum(
        float(level_gains.max(initial=0.0)), float(discount.sum()), "gains G", "Σ D over the kept positions"
    )
    # Tie groups of equal gain, numbered from the highest gain down (gains do not decrease with the grade).
    ascending = np.concatenate(([0], np.cumsum(level_gains[1:] > level_gains[:-1])))
    n_groups = int(ascending[-1]) + 1
    group_of = (n_groups - 1 - ascending)[level_of]
    query_of = np.repeat(np.arange(n_queries), sizes)
    cell = query_of * n_groups + group_of  # (query, group)
    counts = np.bincount(cell, minlength=n_queries * n_groups).reshape(n_queries, n_groups)
    starts = np.cumsum(counts, axis=1) - counts  # a group's first 0-based place in its query's ideal order
    kept = np.minimum(sizes, discount.size)  # k' per query
    totals = np.concatenate(([0.0], np.cumsum(discount)))[kept]
    inside = np.clip(np.minimum(starts + counts, kept[:, None]) - starts, 0, None).ravel()
    first = np.repeat(starts.ravel(), inside)
    position = first + np.arange(first.size) - np.repeat(np.cumsum(inside) - inside, inside)
    cells = np.repeat(np.arange(n_queries * n_groups), inside)
    with np.errstate(invalid="ignore", divide="ignore"):
        weight = discount[position] / totals[cells // n_groups]
        mean = np.bincount(cells, weights=weight, minlength=n_queries * n_groups) / counts.ravel()
    usable = np.count_nonzero(counts, axis=1) > 1  # two gains at least: something to order
    return np.where(usable[query_of], mean[cell], 0.0)


def _infer(kernel, loss, structure, scores, grades, offsets, method, registry) -> BatchedRankingInference:
    """``kernel``'s batched inference on well-formed arrays (float64 scores, int64 grades and offsets)."""
    prepared = kernel.prepare(loss, structure, grades, offsets, method, relevant_from=1, registry=registry)
    return prepared(np.ascontiguousarray(scores, dtype=np.float64), 1, False)


def _check_position_structure(
    kernel, loss: RankLoss, structure, *, n_instances: int, random_state: int, registry
) -> None:
    """Every method of the declared position structure against enumeration, over queries of 1–6 documents."""
    rng = np.random.default_rng(random_state)
    sizes = rng.integers(1, 7, n_instances)
    offsets = np.concatenate(([0], np.cumsum(sizes)))
    # Coarse grids: ties among scores, among grades, and of both at once.
    scores = rng.integers(-2, 3, offsets[-1]) / 2.0
    grades = rng.integers(0, 4, offsets[-1])
    for method in structure.methods:
        result = _infer(kernel, loss, structure, scores, grades, offsets, method, registry)
        for q in range(sizes.size):
            s, g = scores[offsets[q] : offsets[q + 1]], grades[offsets[q] : offsets[q + 1]]
            coef = result.coef[offsets[q] : offsets[q + 1]]
            gains = structure.gains(g)
            if gains.max() == gains.min():
                if result.usable[q] or np.any(coef != 0):
                    raise AssertionError(f"method {method!r} on loss {loss.name!r}: query {q} has nothing to order")
                continue
            expected = brute_force_graded(structure, s, g)
            if not np.isclose(result.values[q], expected, rtol=1e-9, atol=1e-12) or not np.isclose(
                coef @ s + result.losses[q], result.values[q], rtol=1e-9, atol=1e-12
            ):
                raise AssertionError(
                    f"method {method!r} on graded loss {loss.name!r}: objective {result.values[q]!r} but "
                    f"enumeration finds {expected!r} for scores={s.tolist()}, grades={g.tolist()}"
                )
            for score, grade in set(zip(s.tolist(), g.tolist(), strict=True)):
                tied = coef[(s == score) & (g == grade)]
                if np.any(tied != tied[0]):
                    raise AssertionError(
                        f"method {method!r} on graded loss {loss.name!r}: documents of equal score and grade get "
                        f"coefficients {tied.tolist()}; a tie group shares its positions' mean"
                    )


def _check_pair_structure(kernel, loss: RankLoss, structure, *, n_instances: int, random_state: int, registry) -> None:
    """The pairs' kernel against enumeration of every labelling, on queries of 2–5 documents with ties."""
    rng = np.random.default_rng(random_state)
    sizes = rng.integers(2, 6, n_instances)
    offsets = np.concatenate(([0], np.cumsum(sizes)))
    scores = rng.integers(-2, 3, offsets[-1]) / 2.0  # ties, and differences of exactly 1/2
    grades = rng.integers(0, 4, offsets[-1])
    result = _infer(kernel, loss, structure, scores, grades, offsets, "auto", registry)
    for q in range(sizes.size):
        s, g = scores[offsets[q] : offsets[q + 1]], grades[offsets[q] : offsets[q + 1]]
        n_pairs = int(np.sum(g[:, None] > g[None, :]))
        if not result.usable[q] or n_pairs > 10:
            continue
        expected = brute_force_pairs(structure, s, g)
        if not np.isclose(result.values[q], expected, rtol=1e-9, atol=1e-12):
            raise AssertionError(
                f"graded loss {loss.name!r}: objective {result.values[q]!r} but enumeration of the labellings "
                f"finds {expected!r} for scores={s.tolist()}, grades={g.tolist()}"
            )


#: Score vectors per query whose answers :func:`_check_own_inference` plays against one another.
_CROSS_SCORES = 12


#: Score vectors per query whose answers :func:`_check_own_inference` plays against one another.
_CROSS_SCORES = 12


def _probe_documents(structure) -> int:
    largest = structure.probe_documents
    if isinstance(largest, bool) or not isinstance(largest, numbers.Integral) or largest < 1:
        raise ValueError(f"expected probe_documents to be an integer >= 1, got {largest!r} instead")
    return int(largest)


def _check_own_inference(kernel, loss: RankLoss, structure, *, n_instances: int, random_state: int, registry) -> None:
    """A loss that brings its own one-query inference (a ``GradedQueryStructure``), checked by its answers.

    Its output space is its own, so nothing is enumerated; instead the hinge's definition is used.  The
    answer at scores s is the maximum over every output of Δ + c·s, so (1) it is at least the ground
    truth's value c*·s (Δ = 0 there), (2) no answer found at other scores s' beats it when evaluated at s,
    and (3) its value is Δ + c·s with Δ finite and ≥ 0.  An inexact inference shows up as an answer at
    one score vector that another score vector's answer beats.  Queries of every size from the structure's
    ``probe_documents`` (8 by default) down to 1, the largest first, with tied scores and grades.
    """
    rng = np.random.default_rng(random_state)
    largest = _probe_documents(structure)
    for instance in range(max(n_instances, largest)):
        n = largest - instance % largest
        grades = rng.integers(0, 3, n)
        offsets = np.array([0, n])
        truth = kernel.ground_truth(loss, structure, grades, offsets)
        candidates = [rng.integers(-2, 3, n) / 2.0 for _ in range(_CROSS_SCORES // 2)]
        candidates += [rng.normal(size=n) for _ in range(_CROSS_SCORES - len(candidates))]
        answers = []
        for scores in candidates:
            result = _infer(kernel, loss, structure, scores, grades, offsets, "auto", registry)
            coef, delta, value = result.coef, float(result.losses[0]), float(result.values[0])
            where = f"loss {loss.name!r} (its own inference) at scores={scores.tolist()}, grades={grades.tolist()}"
            if not result.usable[0]:
                continue
            if not (np.all(np.isfinite(coef)) and np.isfinite(delta) and delta >= 0.0):
                raise AssertionError(f"{where}: expected finite coefficients and Δ >= 0, got {coef.tolist()}, {delta}")
            if not np.isclose(value, float(coef @ scores) + delta, rtol=1e-9, atol=1e-12):
                raise AssertionError(f"{where}: value {value!r} is not Δ + c·s = {float(coef @ scores) + delta!r}")
            if value < float(truth @ scores) - 1e-9 * max(1.0, abs(value)):
                raise AssertionError(f"{where}: value {value!r} is below the ground truth's {float(truth @ scores)!r}")
            answers.append((scores, coef, delta, value))
        for scores, _, _, value in answers:
            better = max((float(c @ scores) + d for _, c, d, _ in answers), default=-np.inf)
            if better > value + 1e-9 * max(1.0, abs(value)):
                raise AssertionError(
                    f"loss {loss.name!r} (its own inference) is not exact: at scores={scores.tolist()}, "
                    f"grades={grades.tolist()} it returns value {value!r}, but an output it returned at other "
                    f"scores reaches {better!r} there"
                )
