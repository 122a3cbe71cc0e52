"""The structures a graded rank loss declares, on which loss-augmented inference over grades dispatches.

A graded loss (``RankLoss.graded``) says through :meth:`RankLoss.structure`
which exact inference its Δ and Ψ admit; ``rankopt.inference.batched`` runs
the compiled kernel of that structure and never looks at the loss's class:

:class:`GradedPositionStructure`
    Δ(π) = 1 − Σ_{π(i) ≤ k'} G(g_i) D(π(i)) / IDCG with a non-decreasing gain
    G ≥ 0 and a positive non-increasing discount D on the top k' = min(k, n)
    positions; Ψ(X, π) = Σ_{π(i) ≤ k'} A(π(i)) x_i with A = D / Σ_{j≤k'} D(j).
    The assignment's weights are the product u_i D(j), so a partial sort per
    query is exact (DCG/NDCG@k with any gains, graded rank-biased precision).
:class:`GradedPairStructure`
    SVM^rank's labellings of the pairs with different grades: every pair
    (i, j) with g_i > g_j is a constraint, of weight 1 (``pairwise``) or of
    a weight the loss gives each pair of grades.

:class:`GradedQueryStructure`
    no structure to exploit: the loss brings its own per-query inference,
    run on the reference path (one Python call per query, logged).

A graded loss declaring none of them has no inference over grades here and
is refused with that reason.  The binary rank losses declare theirs through
:meth:`RankLoss.compiled_form` and the C-conditions (``docs/plugins.md``),
and a binary loss whose Δ counts the positives in the top k may declare

:class:`TopKCountStructure`
    Δ a function of m, the positives among the top k (precision and recall
    at k): the ``topk`` method tries every m, O(n log n) per query, where the
    C3-based methods do not apply and the general ``dp`` costs O(|P||N|).

Each structure checks its own declaration (:meth:`contract_problem`) on a
few grades and positions: a plugin whose declared structure its numbers
contradict is refused at registration with a counterexample.
"""

from __future__ import annotations

import itertools
import numbers
from collections.abc import Callable
from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from rankopt.exceptions import PluginContractError
from rankopt.losses.base import KeyedCache

__all__ = [
    "GradedPairStructure",
    "GradedPositionStructure",
    "GradedQueryStructure",
    "LossStructure",
    "TopKCountStructure",
    "WEIGHTED_SUM_BOUND",
    "check_declared_structure",
    "check_weighted_sum",
    "declared_structure_problem",
]

#: Grades below this are mapped to gains through a table indexed by the grade (one gather, no sort).
_TABLE_GRADES = 1 << 16
#: A query's weighted sums — Σ G·D for a position-based loss (its DCG and IDCG), Σ w over its pairs for a
#: weighted pairwise one (the normaliser W) — must stay below this (about 1e301): their largest term
#: times their count is compared with it, so a gain or weight near 1e308 is refused, not turned into NaN.
WEIGHTED_SUM_BOUND = 2.0**1000
#: Grades and positions a declared structure is probed on at registration.
PROBE_GRADES = 16
PROBE_POSITIONS = 64


@dataclass(frozen=True)
class GradedPositionStructure:
    """A position-based graded loss: gain of each grade, discount of each position, cutoff k.

    Attributes
    ----------
    gain : callable
        ``gain(grades)``: the gains G of integer grades ≥ 0 (an int64 array),
        as floats, finite, ≥ 0 and non-decreasing in the grade.
    discount : callable
        ``discount(positions)``: D of 1-based positions (a float array),
        positive and non-increasing up to k.
    k : int or None
        The cutoff: positions beyond k carry no gain and no weight; None for
        every position.
    """

    gain: Callable[[np.ndarray], np.ndarray]
    discount: Callable[[np.ndarray], np.ndarray]
    k: int | None

    #: The methods it runs besides "auto": the compiled partial sort, and the n × k' assignment
    #: by SciPy's ``linear_sum_assignment`` per query in Python, its reference.
    methods: ClassVar[tuple[str, ...]] = ("sort", "assignment")

    def kept(self, n: int) -> int:
        """k' = min(k, n): how many of n positions carry weight."""
        return n if self.k is None else min(self.k, n)

    def position_weights(self, n: int) -> np.ndarray:
        """D(1), …, D(k') for queries of at most n documents, checked positive and non-increasing."""
        positions = np.arange(1, self.kept(n) + 1, dtype=np.float64)
        table = np.asarray(self.discount(positions), dtype=np.float64)
        problem = _discount_problem(positions, table)
        if problem is not None:
            raise ValueError(f"expected a positive, non-increasing discount, got {problem} instead")
        return np.ascontiguousarray(table)

    def tables(self, grades: np.ndarray, n_documents: int) -> tuple[np.ndarray, np.ndarray]:
        """(:meth:`gains` of ``grades``, :meth:`position_weights` for queries of at most ``n_documents``),
        refused when a query's Σ G·D could leave float64's range (:data:`WEIGHTED_SUM_BOUND`)."""
        gains, discount = self.gains(grades), self.position_weights(n_documents)
        check_weighted_sum(
            float(gains.max(initial=0.0)), float(discount.sum()), "gains G", "Σ D over the kept positions"
        )
        return gains, discount

    def gains(self, grades: np.ndarray) -> np.ndarray:
        """G of every document's grade (integers ≥ 0), float64, checked finite, ≥ 0 and non-decreasing in the grade.

        The gain is a function of the grade, so it is evaluated once per grade present
        (:func:`grade_levels`).
        """
        levels, inverse = grade_levels(grades)
        return self._checked_gain(levels)[inverse]

    def _checked_gain(self, levels: np.ndarray) -> np.ndarray:
        """G(levels) for increasing grades, or a ValueError with a counterexample."""
        table = np.asarray(self.gain(levels), dtype=np.float64)
        problem = _gain_problem(levels, table)
        if problem is not None:
            raise ValueError(f"expected finite gains >= 0, non-decreasing in the grade, got {problem} instead")
        return table

    def contract_problem(self, loss=None) -> str | None:
        """What contradicts the declaration on grades 0…15 and positions 1…64, or None."""
        k = self.k
        if k is not None and (isinstance(k, bool) or not isinstance(k, numbers.Integral) or k < 1):
            return f"cutoff k = {k!r}, expected an integer >= 1 or None"
        positions = np.arange(1, (PROBE_POSITIONS if k is None else min(k, PROBE_POSITIONS)) + 1, dtype=np.float64)
        problem = _discount_problem(positions, np.asarray(self.discount(positions), dtype=np.float64))
        if problem is not None:
            return f"discount: {problem}"
        levels = np.arange(PROBE_GRADES, dtype=np.int64)
        gains = np.asarray(self.gain(levels), dtype=np.float64)
        problem = _gain_problem(levels, gains)
        if problem is None and gains.shape == levels.shape:
            problem = _sum_problem(float(gains.max()), float(np.sum(self.discount(positions))), "G", "Σ D")
        return None if problem is None else f"gain: {problem}"


@dataclass(frozen=True)
class GradedPairStructure:
    """SVM^rank's pairwise loss over grades, each pair of different grades weighted by its two grades.

    Ψ = Σ_{g_i > g_j} w(g_i, g_j) y_ij (x_i − x_j) / W and Δ = Σ_{y_ij = −1} w(g_i, g_j) / W, W the
    sum of the weights.  Inference still keeps a pair exactly when s_i − s_j ≥ 1/2, so the weighted
    loss runs the same sweeps, counting per grade level (O(n K) per query for K grades).

    Attributes
    ----------
    weight : callable or None
        ``weight(higher, lower)``: the weights of pairs of integer grades (int64 arrays, elementwise,
        higher > lower), finite and ≥ 0.  None: every pair counts 1 (``pairwise``, O(n log n)).
    """

    weight: Callable[[np.ndarray, np.ndarray], np.ndarray] | None = None

    methods: ClassVar[tuple[str, ...]] = ("level_sweep",)

    def weight_matrix(self, levels: np.ndarray, n_documents: int | None = None) -> np.ndarray:
        """The K × K weights of the sorted distinct grades ``levels`` (row: the higher), 0 on and above the diagonal.

        With ``n_documents`` (the longest query), refused when a query's Σ w over its pairs could leave
        float64's range (:data:`WEIGHTED_SUM_BOUND`).
        """
        matrix = self._weight_matrix(levels)
        if n_documents is not None:
            pairs = float(n_documents) * float(n_documents) / 4.0  # the most pairs of different grades
            check_weighted_sum(float(matrix.max(initial=0.0)), pairs, "pair weights w", "pairs per query")
        return matrix

    def _weight_matrix(self, levels: np.ndarray) -> np.ndarray:
        k = levels.size
        higher, lower = np.tril_indices(k, -1)
        matrix = np.zeros((k, k))
        if self.weight is None:
            matrix[higher, lower] = 1.0
            return matrix
        values = np.asarray(self.weight(levels[higher], levels[lower]), dtype=np.float64)
        problem = _weight_problem(levels[higher], levels[lower], values)
        if problem is not None:
            raise ValueError(f"expected finite pair weights >= 0, got {problem} instead")
        matrix[higher, lower] = values
        return matrix

    def contract_problem(self, loss=None) -> str | None:
        """A negative, NaN or infinite weight among the grades 0…15, or None."""
        if self.weight is None:
            return None
        higher, lower = np.tril_indices(PROBE_GRADES, -1)
        values = np.asarray(self.weight(higher.astype(np.int64), lower.astype(np.int64)), dtype=np.float64)
        problem = _weight_problem(higher, lower, values)
        if problem is None and values.shape == higher.shape:
            problem = _sum_problem(float(values.max()), PROBE_POSITIONS**2 / 4.0, "w", "pairs")
        return None if problem is None else f"weight: {problem}"


@dataclass(frozen=True)
class TopKCountStructure:
    """A binary rank loss whose Δ depends only on m, the number of positives among the top k positions.

    Precision at k and recall at k are of this kind (normalised so that the ground truth scores 0, both
    are 1 − m / min(k, |P|)).  With the pairwise Ψ of the binary rank losses, the most violated
    ranking for a given m puts the m best positives and the k − m best negatives in the top k, each
    block sorted by score (Joachims, "A support vector method for multivariate performance measures",
    ICML 2005, solves Prec@k by such sorting): trying every m is exact, O(n log n) per query
    (``rankopt.inference.topk``, ``docs/maths.md``).

    Attributes
    ----------
    k : int
        The cutoff, ≥ 1.
    loss_of_count : callable
        ``loss_of_count(m, n_pos, n_neg)``: Δ of any ranking with m positives (an int array) in the
        top min(k, |P| + |N|) positions.
    """

    k: int
    loss_of_count: Callable[[np.ndarray, int, int], np.ndarray]

    #: The binary methods this structure makes exact (besides those C1–C4 admit).
    methods: ClassVar[tuple[str, ...]] = ("topk",)

    def contract_problem(self, loss) -> str | None:
        """Where ``loss.value`` contradicts ``loss_of_count``, or None.

        Every pattern of up to 6 samples is tried, then, past the cutoff (k + 1 and k + 2 samples, where
        a count can fall short of the positives), patterns of every feasible count for a spread of
        positive counts, each arranged two ways (the positives of the top k first or last in it).
        """
        k = self.k
        if isinstance(k, bool) or not isinstance(k, numbers.Integral) or k < 1:
            return f"cutoff k = {k!r}, expected an integer >= 1"
        for pattern in _count_patterns(int(k)):
            n_pos = int(pattern.sum())
            m = int(pattern[:k].sum())
            declared = float(np.asarray(self.loss_of_count(np.array([m]), n_pos, pattern.size - n_pos))[0])
            value = float(loss.value(pattern))
            if not (np.isfinite(declared) and abs(declared - value) <= 1e-12 * max(1.0, abs(value))):
                shown = "".join("+" if x else "-" for x in pattern)
                return (
                    f"the ranking {shown} has {m} positives in the top {k}, for which loss_of_count "
                    f"gives {declared!r}, but value() gives {value!r}"
                )
        return None


#: Every pattern of up to this many samples is probed; beyond, a spread of them.
_EXHAUSTIVE_SAMPLES = 6


def _count_patterns(k: int):
    """The rankings a top-k declaration is probed on (see :meth:`TopKCountStructure.contract_problem`)."""
    for n in range(2, _EXHAUSTIVE_SAMPLES + 1):
        for n_pos in range(1, n):
            for positions in itertools.combinations(range(n), n_pos):
                pattern = np.zeros(n, dtype=bool)
                pattern[list(positions)] = True
                yield pattern
    for n in range(max(k + 1, _EXHAUSTIVE_SAMPLES + 1), k + 3):
        kept = min(k, n)
        for n_pos in sorted({1, 2, kept // 2, kept - 1, kept, kept + 1, n - 2, n - 1} & set(range(1, n))):
            low, high = max(0, kept - (n - n_pos)), min(kept, n_pos)
            for m in sorted({low, low + 1, (low + high) // 2, high - 1, high} & set(range(low, high + 1))):
                for first in (True, False):
                    top, rest = np.zeros(kept, dtype=bool), np.zeros(n - kept, dtype=bool)
                    (top[:m] if first else top[kept - m :])[...] = True
                    (rest[: n_pos - m] if first else rest[rest.size - (n_pos - m) :])[...] = True
                    yield np.concatenate((top, rest))


@dataclass(frozen=True)
class GradedQueryStructure:
    """A graded loss with no structure the compiled kernels exploit, bringing its own per-query inference.

    For a Δ that is not separable by position — expected reciprocal rank, say — no sorting argument
    applies.  Such a loss declares this and gives its own exact inference for one query; rankopt runs it
    on the reference path, one Python call per query, and says so once in its log.

    Attributes
    ----------
    inference : callable
        ``inference(scores, grades) -> (coef, loss)``: one query's most violated output, as the
        coefficients of Ψ per document and its Δ.
    ground_truth : callable
        ``ground_truth(grades) -> coef``: Ψ(X, Y*)'s coefficients for one query.
    probe_documents : int, default 8
        The largest query :func:`rankopt.testing.check_loss` (and registration) probes the inference on: queries
        of every size from 1 to this one, the largest first.  An inference that enumerates the rankings may
        declare fewer (its cost grows as n!); one whose cases change past 8 documents should declare more.
    """

    inference: Callable[[np.ndarray, np.ndarray], tuple]
    ground_truth: Callable[[np.ndarray], np.ndarray]
    probe_documents: int = 8

    methods: ClassVar[tuple[str, ...]] = ("reference",)

    def contract_problem(self, loss=None) -> str | None:
        return None


def declared_structure_problem(loss) -> str | None:
    """What contradicts ``loss``'s declared structure on this very instance (its parameters included), or None.

    Registration probes the default-constructed class; a declaration that lies only at other parameters
    is caught here, where a fit or a method takes the loss.  The verdict is remembered per loss class and
    parameters, so a training loop pays for it once.
    """
    return _VERDICTS.get_or_build(loss.cache_key(), lambda: _structure_problem(loss))


def _structure_problem(loss) -> str | None:
    structure = loss.structure()
    return None if structure is None else structure.contract_problem(loss)


#: declared_structure_problem's verdicts, keyed by the losses' parameters (Loss.cache_key).
_VERDICTS = KeyedCache(max_entries=256)


def check_declared_structure(loss) -> None:
    """Refuse a loss whose declared structure its own numbers contradict (:func:`declared_structure_problem`)."""
    problem = declared_structure_problem(loss)
    if problem is not None:
        raise PluginContractError(
            f"loss {loss.name!r} ({type(loss).__name__} with {loss.get_params(deep=False)}) declares a "
            f"{type(loss.structure()).__name__} that its own numbers contradict: {problem}"
        )


#: What :meth:`rankopt.losses.RankLoss.structure` may return.
LossStructure = GradedPositionStructure | GradedPairStructure | GradedQueryStructure | TopKCountStructure


def grade_levels(grades) -> tuple[np.ndarray, np.ndarray]:
    """The distinct grades (integers ≥ 0), increasing, and each document's index among them.

    ``np.unique`` sorts every document; grades below 2¹⁶ (LETOR's 0–4) are counted and looked up in a
    table instead, one pass each, which matters on a training loop's hot path.
    """
    grades = np.asarray(grades, dtype=np.int64)
    if grades.size == 0:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.intp)
    top = int(grades.max())
    if top < _TABLE_GRADES:
        present = np.bincount(grades, minlength=top + 1) > 0
        levels = np.flatnonzero(present)
        index = np.cumsum(present) - 1
        return levels, index[grades]
    levels, inverse = np.unique(grades, return_inverse=True)
    return levels, inverse.ravel()


def _discount_problem(positions: np.ndarray, table: np.ndarray) -> str | None:
    if table.shape != positions.shape:
        return f"shape {table.shape} for {positions.size} positions"
    bad = ~np.isfinite(table) | (table <= 0)
    if bad.any():
        at = int(np.argmax(bad))
        return f"D({positions[at]:g}) = {float(table[at])!r}"
    rising = np.flatnonzero(table[1:] > table[:-1] * (1 + 1e-12))
    if rising.size:
        at = int(rising[0])
        return f"D({positions[at]:g}) = {float(table[at])!r} < D({positions[at + 1]:g}) = {float(table[at + 1])!r}"
    return None


def _negative_or_not_finite(values: np.ndarray, expected: tuple, name) -> str | None:
    """The first entry of ``values`` that is negative, NaN or infinite, as ``name(at) = value``; or a bad shape."""
    if values.shape != expected:
        return f"shape {values.shape}, expected {expected}"
    bad = ~np.isfinite(values) | (values < 0)
    if bad.any():
        at = int(np.argmax(bad))
        return f"{name(at)} = {float(values[at])!r}"
    return None


def check_weighted_sum(largest: float, count: float, terms: str, counted: str) -> None:
    """Refuse ``terms`` whose largest × ``count`` exceeds :data:`WEIGHTED_SUM_BOUND`."""
    problem = _sum_problem(largest, count, terms, counted)
    if problem is not None:
        raise ValueError(f"expected {terms} whose sum over a query stays finite, got {problem} instead")


def _sum_problem(largest: float, count: float, terms: str, counted: str) -> str | None:
    if largest * count <= WEIGHTED_SUM_BOUND:
        return None
    return (
        f"{terms} up to {largest:.3g} with {counted} = {count:.3g}: the product {largest * count:.3g} exceeds "
        f"2**1000 = {WEIGHTED_SUM_BOUND:.3g}, beyond which a query's sums (DCG, IDCG, the pair weights' W) "
        "can overflow to inf and Δ to NaN; scale the gains or weights down (Δ is their ratio: a common factor "
        "does not change it)"
    )


def _weight_problem(higher: np.ndarray, lower: np.ndarray, values: np.ndarray) -> str | None:
    return _negative_or_not_finite(values, higher.shape, lambda at: f"w({higher[at]}, {lower[at]})")


def _gain_problem(levels: np.ndarray, table: np.ndarray) -> str | None:
    problem = _negative_or_not_finite(table, levels.shape, lambda at: f"G({levels[at]})")
    if problem is not None:
        return problem
    falling = np.flatnonzero(table[1:] < table[:-1])
    if falling.size:
        at = int(falling[0])
        return f"G({levels[at]}) = {float(table[at])!r} > G({levels[at + 1]}) = {float(table[at + 1])!r}"
    return None
