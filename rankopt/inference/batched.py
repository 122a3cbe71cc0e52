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

Methods.  ``inference`` names the single-query method every query runs ("auto",
"qs", "select", "search", "greedy", "dp", a plugin's), resolved once; a
graded loss takes "auto" or its structure's ("level_sweep" for "pairwise").  The result equals calling the
single-query method per query (:func:`most_violated_rankings_per_query`,
kept as the reference): the same ranks bit for bit, hence the same
coefficients and losses (the kernels reproduce NumPy's summation order); the
values Σ coef·s + Δ up to the order of that sum.  A position-discount plugin
with D(1) ≠ 1 gets its per-query tables up to rounding (docs/maths.md).

Kernels.  What runs is the kernel the structure table holds for the loss's declared structure
(:mod:`rankopt.inference.structure_table`): compiled where it can be, one nogil call with the queries
spread over OpenMP threads (at most one per :data:`DOCS_PER_THREAD` documents); the reference loop
otherwise, logged once per loss type and method (logger ``rankopt.inference.batched``).
"""

from __future__ import annotations

import logging
import math
import os

import numpy as np

import rankopt.inference._batched as _batched
from rankopt._validation import (
    QueryIndex,
    as_float_vector,
    check_n_threads,
    check_score_sums,
    check_whole_numbers,
    not_finite_error,
    queries_to_order,
    refuse_queries_without_levels,
    renamed_method,
)
from rankopt.inference.base import PluginLookup
from rankopt.inference.binary_kernels import integer_threshold, per_query
from rankopt.inference.kernel_base import BatchedRankingInference, longest_query
from rankopt.inference.structure_table import device_array_type, kernel_for_loss, reads_grades
from rankopt.losses.base import RankLoss, loss_from_metric_name

__all__ = [
    "DOCS_PER_THREAD",
    "BatchedRankingInference",
    "PreparedRankings",
    "check_queries_the_loss_orders",
    "default_threads",
    "ground_truth_coefficients",
    "most_violated_rankings",
    "most_violated_rankings_per_query",
    "queries_the_loss_orders",
    "refuse_nothing_to_order",
    "resolve_graded_method",
]

logger = logging.getLogger(__name__)


def most_violated_rankings(
    loss,
    scores,
    relevance,
    offsets,
    inference: str = "auto",
    *,
    n_threads: int | None = None,
    relative_to_truth: bool = False,
    relevant_at: float | None = None,
    registry: PluginLookup,
    method: str | None = None,
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
    inference : str, default "auto"
        The inference method every query runs (the estimators' ``inference=``).
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
        renamed_method(inference, method, "most_violated_rankings"),
        relative_to_truth=relative_to_truth,
        relevant_at=relevant_at,
        registry=registry,
    )
    return prepared(scores, n_threads=n_threads)


class PreparedRankings:
    """:func:`most_violated_rankings` on one batch — loss, relevance, offsets, method — for any scores.

    Everything but the scores is checked and resolved once, here: the relevance and offsets, the
    method, the kernel (the compiled one, or ``device``'s: any device whose kernels take NumPy arrays) and its
    tables.  Each call then checks only its scores (finite, sums
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
        device: str = "cpu",
    ):
        self.loss = resolve_rank_loss(loss, registry)
        if device_array_type(device) != "numpy":
            raise ValueError(
                f"expected a device whose kernels take NumPy arrays, got {device!r}, whose kernels take "
                f"{device_array_type(device)} arrays (rankopt.torch runs them)"
            )
        self.kernel, self.structure = kernel_for_loss(self.loss, device)
        thresholded = relevant_at is not None and not self.kernel.graded
        self.relevance, self.offsets = _check_relevance_offsets(
            self.loss, relevance, offsets, self.kernel.graded, grades=thresholded, as_is=self.kernel.label_dtypes
        )
        self.longest = longest_query(self.offsets)
        self.method, self.registry, self.relative_to_truth = method, registry, relative_to_truth
        relevant_from = integer_threshold(relevant_at) if thresholded else 1
        self._relevant_from = relevant_from if thresholded else None
        self._prepared = self.kernel.prepare(
            self.loss,
            self.structure,
            self.relevance,
            self.offsets,
            method,
            relevant_from=relevant_from,
            registry=registry,
        )

    def __call__(self, scores, *, n_threads: int | None = None) -> BatchedRankingInference:
        scores = _check_scores(scores, self.longest, self.relevance.size)
        check_n_threads(n_threads)
        n_threads = _threads_for(scores.size, default_threads() if n_threads is None else int(n_threads))
        result = self._prepared(scores, n_threads, self.relative_to_truth)
        if not self.relative_to_truth or self._prepared.relative_inside:
            return result
        offsets = self.offsets
        truth = self.kernel.ground_truth(self.loss, self.structure, self._truth_relevance(), offsets)
        values = np.zeros_like(result.values)
        terms = truth * scores.astype(np.float64)
        nonempty = offsets[1:] > offsets[:-1]
        values[nonempty] = np.add.reduceat(terms, offsets[:-1][nonempty]) if terms.size else 0.0
        values = np.where(result.usable, result.values - values, 0.0)
        return BatchedRankingInference(result.coef - truth, result.losses, values, result.usable)

    def _truth_relevance(self) -> np.ndarray:
        """The relevance the ground truth is of: the checked grades, or a binary loss's 0/1 thresholded here,
        as its kernel thresholds them (the host subtracts the truth for a device that does not)."""
        if self._relevant_from is None:
            return self.relevance
        return (self.relevance >= self._relevant_from).astype(np.int64)


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
    loss, scores, relevance, offsets, inference: str = "auto", *, registry: PluginLookup, method: str | None = None
) -> BatchedRankingInference:
    """:func:`most_violated_rankings` by one single-query call per query, in Python.

    The reference the compiled batch is tested against (each structure kernel's one-query reference:
    the single-query method for a binary loss, the definition for a graded one).
    """
    method = renamed_method(inference, method, "most_violated_rankings_per_query")
    loss, scores, relevance, offsets = _check_batch(loss, scores, relevance, offsets, registry)
    kernel, structure = kernel_for_loss(loss)
    kernel.resolve_method(loss, structure, method, longest_query(offsets), registry)
    return per_query(kernel, loss, structure, scores, relevance, offsets, method, registry)


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
    usable, two_levels = queries_the_loss_orders(loss, relevance, queries, method, registry=registry)
    if not usable.any():
        refuse_nothing_to_order(loss, queries.n_queries, two_levels, relevant_at=relevant_at)
    return usable


def queries_the_loss_orders(
    loss: RankLoss, relevance: np.ndarray, queries: QueryIndex, method, *, registry: PluginLookup
) -> tuple[np.ndarray, int]:
    """:func:`check_queries_the_loss_orders` without the refusal: which queries the loss orders, and how
    many hold two relevance levels (for callers that see the queries a block at a time)."""
    usable = queries_to_order(relevance, queries)
    two_levels = int(np.count_nonzero(usable))
    if not reads_grades(loss) or two_levels == 0:
        return usable, two_levels
    candidates = np.flatnonzero(usable)
    rows = queries.order[np.repeat(usable, queries.sizes)]
    offsets = np.concatenate(([0], np.cumsum(queries.sizes[usable]))).astype(np.intp)
    grades = np.asarray(relevance)[rows]
    verdict = most_violated_rankings(loss, np.zeros(rows.size), grades, offsets, method, registry=registry).usable
    usable[candidates[~verdict]] = False
    return usable, two_levels


def refuse_nothing_to_order(loss: RankLoss, n_queries: int, two_levels: int, *, relevant_at=None) -> None:
    """The refusal of :func:`check_queries_the_loss_orders` when none of ``n_queries`` queries is usable
    (``two_levels`` of them hold two relevance levels)."""
    if two_levels == 0:
        refuse_queries_without_levels(n_queries, graded=reads_grades(loss), relevant_at=relevant_at)
    raise ValueError(
        f"expected some query (qid) to hold two documents that loss {loss.name!r} orders apart (grades whose "
        f"gains differ, or a pair of positive weight), got none of the {n_queries} queries instead"
    )


def ground_truth_coefficients(loss, relevance, offsets, *, registry: PluginLookup) -> np.ndarray:
    """Coefficients of Ψ_q(R*_q) for every document, in input order.

    The ground truth puts the higher grades first: 1/|P| for a relevant and
    −1/|N| for a non-relevant document of a binary loss; for the pairwise loss
    (#lower − #higher grades)/#pairs; for graded NDCG@k the mean position
    weight A over the positions the document's tie group of equal grades
    occupies in the ideal order.  0 for the documents of unusable queries.
    """
    loss = resolve_rank_loss(loss, registry)
    kernel, structure = kernel_for_loss(loss)
    relevance, offsets = _check_relevance_offsets(loss, relevance, offsets, kernel.graded)
    return kernel.ground_truth(loss, structure, relevance, offsets)


def rank_loss_names(registry: PluginLookup) -> list[str]:
    """The registered rank losses' names, sorted: what a door that takes a rank loss by name offers."""
    return sorted(info.name for info in registry.list("loss") if issubclass(info.cls, RankLoss))


def resolve_rank_loss(loss, registry: PluginLookup, **loss_params) -> RankLoss:
    """The rank loss named by (with ``loss_params``) or given as ``loss``: the one resolution of every door that
    takes a rank loss (the hinges, the metrics, the boosting objectives), so that each refuses alike — an
    unknown name with the rank losses it could be, a labeling loss by what it is."""
    if not isinstance(loss, (str, RankLoss)):
        raise TypeError(f"expected loss to be a rank-loss name or a RankLoss instance, got {type(loss).__name__}")
    if isinstance(loss, str):
        names = rank_loss_names(registry)
        if loss_from_metric_name(loss)[0] not in names:
            raise ValueError(f"unknown rank loss {loss!r}: expected one of {names}")
    loss = registry.resolve_loss(loss, **loss_params)
    if not isinstance(loss, RankLoss):
        raise ValueError(
            f"expected loss to be a rank loss, got the {loss.output_kind.value} loss {loss.name!r} instead"
        )
    return loss


def resolve_graded_method(loss, method) -> str:
    """The method the graded ``loss`` runs over grades ("auto" resolved), or a ValueError."""
    kernel, structure = kernel_for_loss(loss)
    return kernel.resolve_method(loss, structure, method, 0, None)


def _check_batch(loss, scores, relevance, offsets, registry):
    loss = resolve_rank_loss(loss, registry)
    relevance, offsets = _check_relevance_offsets(loss, relevance, offsets, reads_grades(loss))
    scores = _check_scores(scores, longest_query(offsets), relevance.size)
    return loss, scores, relevance, offsets


def _check_scores(scores, longest: int, n_documents: int) -> np.ndarray:
    """1-D finite float scores (float32 kept), one per each of the batch's ``n_documents``, whose sums over a
    query of ``longest`` documents cannot overflow."""
    scores = as_float_vector(scores, "scores", scan=False)  # one pass reads the scores, below
    largest = _batched.largest_magnitude(scores) if scores.size else 0.0
    if not math.isfinite(largest):
        raise not_finite_error("scores")
    if scores.size:
        check_score_sums(largest, longest, scores.dtype)
    if scores.size != n_documents:
        raise ValueError(f"expected relevance of the same length as scores ({scores.size}), got {n_documents} instead")
    return scores


def _check_relevance_offsets(
    loss, relevance, offsets, graded: bool, *, grades: bool = False, as_is: tuple = ()
) -> tuple[np.ndarray, np.ndarray]:
    """Relevance and offsets as int64 (integer relevance of a dtype in ``as_is`` as it is): grades ≥ 0 for a loss
    whose kernel reads them (``graded``), 0/1 relevance for a binary one unless ``grades`` (thresholded later)."""
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
    if _batched.query_size_range(offsets_arr)[0] < 0:
        q = int(np.argmax(np.diff(offsets_arr) < 0))
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
        rel = rel.astype(rel.dtype if rel.dtype in as_is else np.int64, copy=False)
    elif np.issubdtype(rel.dtype, np.floating):
        # Grades read from SVM-light files come as floats; integral values are accepted.
        check_whole_numbers(rel, "relevance", "integer relevance")
        rel = rel.astype(np.int64)
    else:
        raise ValueError(f"expected integer or bool relevance, got dtype {rel.dtype} instead")
    rel = np.ascontiguousarray(rel)
    if rel.size:
        if (graded or grades) and rel.min() < 0:
            kind = "graded loss" if graded else "loss"
            raise ValueError(f"expected grades >= 0 for the {kind} {loss.name!r}, got {rel.min()} instead")
        if not (graded or grades) and (rel.min() < 0 or rel.max() > 1):
            bad = rel[(rel < 0) | (rel > 1)][0]
            raise ValueError(
                f"expected 0/1 relevance for the binary loss {loss.name!r} (threshold graded labels "
                f"first), got {bad} instead"
            )
    return rel, offsets_arr
