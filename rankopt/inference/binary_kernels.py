"""The structure table's kernels for binary rank losses: those that declare no structure (their compiled
form and C1–C4 choose the method: qs, select/search, greedy, dp, a plugin's) and top-k count losses.

Compiled path.  The methods qs, select, search, greedy and topk (by class) on a loss with a
:meth:`~rankopt.losses.RankLoss.compiled_form` run in one nogil call of ``_batched.pyx`` with the
queries spread over OpenMP threads.  Any other method or loss runs the single-query method per query,
logged once per loss type and method.
"""

from __future__ import annotations

import math
import warnings
from typing import ClassVar, NamedTuple

import numpy as np

import rankopt.inference._batched as _batched
from rankopt._validation import check_relevant_at
from rankopt.exceptions import SlowInferenceWarning
from rankopt.inference.ap_methods import SearchMethod, SelectMethod
from rankopt.inference.base import kernel_arguments, most_violated_ranking
from rankopt.inference.brute_force import brute_force_most_violated
from rankopt.inference.greedy import GreedyMethod
from rankopt.inference.kernel_base import (
    BatchedRankingInference,
    PreparedKernel,
    ReusedOutput,
    StructureKernel,
    log_fallback,
    longest_query,
)
from rankopt.inference.qs import QSMethod
from rankopt.inference.topk import CountLossPool, TopKMethod
from rankopt.losses.base import KernelCode, KeyedCache, RankLoss
from rankopt.losses.structure import TopKCountStructure

__all__ = [
    "BinaryRankKernel",
    "CompiledBinaryKernel",
    "TopKCountKernel",
    "compiled_kernel",
    "integer_threshold",
    "per_query",
    "report_inference",
]

#: The single-query methods with a compiled per-query form in ``_batched.pyx``,
#: by class: a subclass may change what the method computes.
_COMPILED_METHODS = {
    QSMethod: "qs",
    SelectMethod: "select",
    SearchMethod: "search",
    GreedyMethod: "greedy",
    TopKMethod: "topk",
}


class CompiledBinaryKernel(NamedTuple):
    """The arguments of ``_batched.binary_batch`` that a batch fixes."""

    method_code: int
    loss_code: int
    table: np.ndarray
    unimodal: bool
    top_k: int


class BinaryRankKernel(StructureKernel):
    """A binary rank loss that declares no structure: its compiled form and C1–C4 decide the method."""

    structure: ClassVar[type | None] = None
    label = "binary rank loss"
    #: The compiled batch reads int8 grades too (``_batched.binary_batch``'s labels).
    label_dtypes = (np.dtype(np.int8), np.dtype(np.int64))

    def __init__(self):
        #: A top-k count loss's :class:`CountLossPool` per loss parameters: a training loop meets the same class
        #: sizes at every step, and the loss's own function is a Python call per pair.
        self.count_loss_pools = KeyedCache(max_entries=64)

    def resolve_method(self, loss, structure, method, longest, registry):
        """The name of the method every query of the batch runs, exact up to the longest query.

        A discount's convexity (C3) is a property of its positions 1…n, so a method exact for the
        longest query's n positions is exact for every query: asked as |P| = 1, |N| = n − 1, as
        :func:`compiled_kernel` builds the table.
        """
        return self.registered_method(loss, method, longest, registry).name

    @staticmethod
    def registered_method(loss, method, longest, registry):
        """The registry's inference method :meth:`resolve_method` names."""
        return registry.resolve_method(method, loss, 1, max(longest - 1, 1))

    def single_query_method(self, loss, structure, method, n_pos, n_neg, registry):
        """The registry's single-query method, exact at this size (qs, select, greedy, dp, a plugin's)."""
        return registry.resolve_method(method, loss, n_pos, n_neg)

    def describe_method(self, loss, structure, method, resolved, n_pos, n_neg, registry, size=None):
        """Why the method runs and its estimated cost (:func:`report_inference`); ``size`` the (|P|, |N|) it
        was resolved for, by default that of the batch's longest query."""
        if size is None:
            size = (1, max(int(np.max(n_pos + n_neg, initial=1)) - 1, 1))
        return report_inference(
            registry, method, registry.resolve_method(resolved, loss, *size), loss, n_pos, n_neg, size
        )

    def prepare(self, loss, structure, relevance, offsets, method, *, relevant_from, registry):
        longest = longest_query(offsets)
        resolved = self.registered_method(loss, method, longest, registry)
        kernel = compiled_kernel(loss, resolved, offsets)
        if kernel is None:
            # The per-query path takes 0/1 relevance: grades above 1 are thresholded too, since its ground
            # truth counts the relevant documents.
            relevance = (relevance >= relevant_from).astype(np.int64)
            return _PerQueryBinary(self, loss, relevance, offsets, method, registry)
        count_tables = (None, None)
        if kernel.top_k:  # Δ per query from the declared count structure
            count_tables = _count_loss_tables(loss, relevance, relevant_from, offsets, self.count_loss_pools)
        return _CompiledBinary(loss, kernel, relevance, offsets, relevant_from, count_tables)

    def query(self, loss, structure, scores, relevance, method, registry):
        is_pos = relevance != 0
        if is_pos.all() or not is_pos.any():
            return None
        res = most_violated_ranking(loss, scores[is_pos], scores[~is_pos], method, registry=registry)
        coef = np.empty(scores.size, dtype=np.float64)
        coef[is_pos] = res.pos_coef
        coef[~is_pos] = res.neg_coef
        return coef, res.loss, res.value

    def ground_truth(self, loss, structure, relevance, offsets):
        sizes = np.diff(offsets)
        query_of = np.repeat(np.arange(sizes.size), sizes)
        is_pos = np.asarray(relevance) != 0
        n_pos = np.bincount(query_of, weights=is_pos, minlength=sizes.size)
        n_neg = sizes - n_pos
        usable = (n_pos > 0) & (n_neg > 0)
        # The expressions of the single-query ranking model, 1.0 / n_pos and −1.0 / n_neg, computed once per
        # query (0 for an unusable one) and handed to its documents.
        with np.errstate(divide="ignore"):
            positive = np.where(usable, 1.0 / n_pos, 0.0)
            negative = np.where(usable, -1.0 / n_neg, 0.0)
        return np.where(is_pos, positive[query_of], negative[query_of])

    def check(self, loss, structure, *, n_instances, random_state, registry):
        """Every registered method that declares itself exact for ``loss`` against every ordering."""
        exact = [m for m in registry.inference_methods() if m.unsupported_reason(loss) is None]
        if not exact:
            raise AssertionError(f"no registered inference method is exact for loss {loss.name!r}")
        rng = np.random.default_rng(random_state)
        for _ in range(n_instances):
            n_pos, n_neg = int(rng.integers(1, 4)), int(rng.integers(1, 4))
            # A coarse grid makes ties between and within classes common.
            pos = rng.integers(-2, 3, n_pos) / 2.0
            neg = rng.integers(-2, 3, n_neg) / 2.0
            expected = brute_force_most_violated(loss, pos, neg)
            for method in exact:
                got = most_violated_ranking(loss, pos, neg, method.name, registry=registry)
                if not np.isclose(got.value, expected, rtol=1e-9, atol=1e-12):
                    raise AssertionError(
                        f"method {method.name!r} on loss {loss.name!r}: objective {got.value!r} but "
                        f"enumeration finds {expected!r} for pos={pos.tolist()}, neg={neg.tolist()}"
                    )

    def ranking_loss(self, loss, structure, ordered_relevance):
        return float(loss.value(np.asarray(ordered_relevance) != 0))

    def estimated_cost(self, method, n_pos, n_neg):
        return float(method.estimated_cost(int(n_pos), int(n_neg)))


class TopKCountKernel(BinaryRankKernel):
    """A binary loss whose Δ counts the positives in the top k: the ``topk`` method becomes exact for it."""

    structure = TopKCountStructure
    label = "top-k count"


def compiled_kernel(loss: RankLoss, resolved, offsets: np.ndarray) -> CompiledBinaryKernel | None:
    """The compiled batch's arguments for the inference method ``resolved`` on ``loss``, or None.

    None — the per-query Python path, logged once per loss type and method —
    when the method has no compiled per-query form or the loss no compiled form.
    """
    method_name = _COMPILED_METHODS.get(type(resolved))
    if method_name is None:
        log_fallback(loss, resolved.name, f"method {resolved.name!r} has no compiled batched form")
        return None
    if method_name == "topk":
        # Δ comes per query from the declared count structure (_count_loss_tables), not from a compiled form.
        k = loss.structure().k  # the method refuses losses that declare no TopKCountStructure
        return CompiledBinaryKernel(_batched.METHOD_CODES[method_name], 0, np.zeros(1), False, k)
    longest = longest_query(offsets)
    # One form for every query: the kernel code does not depend on the sizes,
    # and a position-discount table T(1…longest) asked with |P| = 1 is D / D(1);
    # each query divides it by its own Σ_{i≤|P|} T(i).
    form = loss.compiled_form(1, max(longest - 1, 1))
    if form is None:
        log_fallback(loss, resolved.name, f"loss {loss.name!r} has no compiled form")
        return None
    code, table = kernel_arguments(loss, form, 1, max(longest - 1, 1))
    unimodal = method_name == "qs" and code is KernelCode.AP and resolved.ap_unimodal_search
    return CompiledBinaryKernel(_batched.METHOD_CODES[method_name], int(code), table, bool(unimodal), 0)


class _CompiledBinary(PreparedKernel):
    """A binary loss's batch through ``_batched.binary_batch``: ``relevance`` holds 0/1 labels, or grades
    relevant from ``relevant_from`` on; the ground truth is subtracted inside the kernel when asked."""

    relative_inside = True

    def __init__(self, loss, kernel, relevance, offsets, relevant_from, count_tables):
        self.loss, self.kernel, self.relevance, self.offsets = loss, kernel, relevance, offsets
        self.relevant_from, self.count_tables = relevant_from, count_tables
        self._coef = ReusedOutput()
        self._keys = ReusedOutput()

    def __call__(self, scores, n_threads, relative_to_truth):
        offsets = self.offsets
        n_queries = offsets.size - 1
        # The binary kernel writes every coefficient (0 for unusable queries): no zero-filling.
        coef = self._coef.empty(scores.size)
        losses = np.zeros(n_queries, dtype=np.float64)
        values = np.zeros(n_queries, dtype=np.float64)
        usable = np.zeros(n_queries, dtype=np.uint8)
        kernel = self.kernel
        count_loss, count_offsets = self.count_tables
        keys = packed_sorted_keys(scores, offsets, self.relevance, self.relevant_from, self._keys)
        _batched.binary_batch(
            scores,
            self.relevance,
            offsets,
            kernel.method_code,
            kernel.loss_code,
            kernel.table,
            kernel.unimodal,
            coef,
            losses,
            values,
            usable,
            n_threads,
            kernel.top_k,
            count_loss,
            count_offsets,
            relative_to_truth,
            self.relevant_from,
            keys,
        )
        return BatchedRankingInference(coef, losses, values, usable.view(bool))


#: Documents from which a batch of float32 scores is put in order by NumPy's sort of packed keys
#: (:func:`packed_sorted_keys`) rather than query by query in the kernel: below, NumPy's call costs more than
#: it saves.
PACKED_SORT_MIN = 1 << 12
#: Longest query from which the packed sort is used: shorter rows cost NumPy more per row than the kernel's own
#: sort of a few scores, which also skips the queries of one class (measured at 10⁵ queries of 10: 8.9 against
#: 13.6 ms with 1 % relevant, 34 against 30 with half).
PACKED_SORT_MIN_WIDTH = 17


def packed_sorted_keys(
    scores: np.ndarray,
    offsets: np.ndarray,
    relevance: np.ndarray,
    relevant_from: int,
    buffer: ReusedOutput | None = None,
) -> np.ndarray | None:
    """Each query's documents in rankopt's order as ``_batched.packed_descending_keys`` sorted by NumPy, one row
    per query, each key with the document's class (``relevance`` ≥ ``relevant_from``): the order the binary and
    the pairwise batches read; None where the kernel sorts instead: float64 scores (a double and its index do
    not fit 64 bits), a small batch, short queries only, a query of 2³¹ documents or more, or queries so
    unequal that the rows would hold more padding than documents.  The keys live in ``buffer`` (the batch's
    own, reused from call to call: fresh pages cost more than the packing)."""
    n_queries, n_docs = offsets.size - 1, scores.size
    if scores.dtype != np.float32 or n_docs < PACKED_SORT_MIN or n_queries == 0:
        return None
    width = longest_query(offsets)
    if width < PACKED_SORT_MIN_WIDTH or width >= 1 << 31 or n_queries * width > 2 * n_docs:
        return None
    keys = (buffer or ReusedOutput()).empty(n_queries * width, np.uint64).reshape(n_queries, width)
    _batched.packed_descending_keys(scores, relevance, relevant_from, offsets, keys)
    keys.sort(axis=1)
    return keys


class _PerQueryBinary(PreparedKernel):
    """A binary loss's batch by its single-query method, one Python call per query."""

    relative_inside = False  # the one-query methods give Ψ(R̂): the host subtracts the truth

    def __init__(self, kernel, loss, relevance, offsets, method, registry):
        self.kernel, self.loss, self.relevance, self.offsets = kernel, loss, relevance, offsets
        self.method, self.registry = method, registry

    def __call__(self, scores, n_threads, relative_to_truth):
        return per_query(self.kernel, self.loss, None, scores, self.relevance, self.offsets, self.method, self.registry)


def per_query(kernel, loss, structure, scores, relevance, offsets, method, registry) -> BatchedRankingInference:
    """``kernel``'s one-query reference on every query of the batch, in Python."""
    n_queries = offsets.size - 1
    coef = np.zeros(scores.size, dtype=np.float64)
    losses = np.zeros(n_queries, dtype=np.float64)
    values = np.zeros(n_queries, dtype=np.float64)
    usable = np.zeros(n_queries, dtype=bool)
    for q in range(n_queries):
        lo, hi = offsets[q], offsets[q + 1]
        result = kernel.query(loss, structure, scores[lo:hi], relevance[lo:hi], method, registry)
        if result is None:
            continue
        coef[lo:hi], losses[q], values[q] = result
        usable[q] = True
    return BatchedRankingInference(coef, losses, values, usable)


def integer_threshold(relevant_at) -> int:
    """The least integer grade ≥ ``relevant_at`` (checked: a positive finite number), capped where no int64
    grade reaches it."""
    return int(min(math.ceil(check_relevant_at(relevant_at)), np.iinfo(np.int64).max))


def _count_loss_tables(
    loss: RankLoss, relevance: np.ndarray, relevant_from: int, offsets: np.ndarray, cache: KeyedCache
):
    """Δ(m) of the batch's (|P|, |N|) pairs for every feasible count m of positives in the top k', in one array,
    and where each query's entries start in it (queries of one pair share them; 0 for a query with nothing to
    order, which the kernel never reads).

    A pair's entries are m = max(0, k' − |N|) … min(k', |P|); the loss is asked once per distinct pair,
    vectorised over m.  The answers are kept per loss parameters (``cache`` under ``loss.cache_key()``; None:
    asked at every call) in a :class:`CountLossPool`, so a training loop's step looks its pairs up in one gather.
    """
    pool = cache.get_or_build(loss.cache_key(), lambda: CountLossPool.of_loss(loss))
    starts = np.zeros(offsets.size - 1, dtype=np.int64)
    # A training loop's step meets pairs the pool holds already: one compiled pass counts each query's
    # positives and looks its pair up; a pair not there yet sends the batch through the pool's own lookup.
    values, grid = pool.arrays()
    if values.size and _batched.count_table_starts(relevance, relevant_from, offsets, grid, starts):
        return values, starts
    n_pos = np.empty(starts.size, dtype=np.int64)
    _batched.relevant_per_query(relevance, relevant_from, offsets, n_pos)
    n_neg = np.diff(offsets) - n_pos
    where = np.flatnonzero((n_pos > 0) & (n_neg > 0))
    if where.size == 0:
        return np.zeros(1), starts
    values, starts[where] = pool.entries(n_pos[where], n_neg[where])
    return values, starts


#: A fit warns when its inference method is estimated at this many times the compiled sorting path's cost.
SLOW_INFERENCE_RATIO = 100.0


def report_inference(registry, method: str, resolved, loss, n_pos: np.ndarray, n_neg: np.ndarray, size) -> str:
    """The method a fit's inference runs, why, and its estimated cost; warn once when that is ≥ 100× the compiled path.

    ``resolved`` is the inference method ``method`` resolved to for problems of ``size`` (|P|, |N|); ``n_pos`` and
    ``n_neg`` hold each query's class sizes.
    """
    explanation = registry.explain_method(method, loss, *size)
    cost = float(sum(resolved.estimated_cost(int(p), int(n)) for p, n in zip(n_pos, n_neg, strict=True)))
    total = n_pos + n_neg
    compiled = float(np.sum(total * np.log2(total + 1.0)))
    ratio = cost / max(compiled, 1.0)
    if ratio >= SLOW_INFERENCE_RATIO:
        warnings.warn(
            f"inference for loss {loss.name!r} runs method {explanation}: estimated at {ratio:.0f} times the cost "
            f"of the compiled O(n log n) path on this data, at every iteration. A loss that satisfies C3 or "
            f"declares a structure (a top-k count, a graded position structure) runs compiled; see "
            f"docs/plugins.md, or subsample the documents",
            SlowInferenceWarning,
            stacklevel=4,
        )
    return f"{explanation}; estimated at {ratio:.3g} times the compiled path"
