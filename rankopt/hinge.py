"""The structured hinge of a rank loss as a function of the scores, for training any scorer (neural rankers).

For one query with scores s and ground truth R*,

    h(s) = max_R [ Δ(R*, R) + Σ_i (c_i(R) − c_i(R*)) s_i ],

where c_i(R) are the coefficients of the joint feature map Ψ(X, R) = Σ_i c_i(R) ψ(x_i) (the pairwise Ψ of
the binary rank losses, a graded loss's own).  h ≥ 0, and c(R̂) − c(R*) is a subgradient, R̂ a maximiser:
both come from one batched loss-augmented inference over every query
(:func:`rankopt.api.most_violated_rankings`) and the ground truth's coefficients
(:func:`rankopt.api.ground_truth_coefficients`).  With a linear scorer s = Xw,
½‖w‖² + C · mean_q h_q(Xw) is exactly RankSVM's 1-slack objective over queries.

:func:`structured_hinge` is the NumPy function; ``rankopt.torch.RankHingeLoss`` wraps it as a PyTorch
module, and other frameworks can wrap it the same way.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from rankopt._validation import (
    QueryIndex,
    as_float_vector,
    check_grades,
    check_labels_shape,
    check_qid,
    check_reduction,
    check_relevant_at,
    qid_or_group,
)
from rankopt.inference.base import PluginLookup
from rankopt.inference.batched import PreparedRankings, resolve_rank_loss

__all__ = ["HingeQueries", "grouped_hinges", "hinge_per_query", "prepare_hinges", "prepared_hinges", "structured_hinge"]


@dataclass(frozen=True)
class HingeQueries:
    """The per-query hinges of one call, before reduction.

    Attributes
    ----------
    values : ndarray of float64, shape (n_queries,)
        h_q, queries by increasing qid (or in ``offsets`` order); 0 for a query with nothing to order.
    grad : ndarray of float64, shape (n_samples,)
        ∂h_{q(i)} / ∂s_i, in the input order of the scores.
    usable : ndarray of bool, shape (n_queries,)
        Whether the query has something to order.
    order : ndarray of intp, shape (n_samples,), or None
        The documents grouped by query (None: already grouped, as given).
    offsets : ndarray of int64, shape (n_queries + 1,)
        Query q holds the documents ``order[offsets[q]:offsets[q + 1]]``.
    """

    values: np.ndarray
    grad: np.ndarray
    usable: np.ndarray
    order: np.ndarray | None
    offsets: np.ndarray

    def query_of(self) -> np.ndarray:
        """Each document's query (an index into ``values``), in input order."""
        sizes = np.diff(self.offsets)
        grouped = np.repeat(np.arange(sizes.size, dtype=np.intp), sizes)
        if self.order is None:
            return grouped
        query_of = np.empty_like(grouped)
        query_of[self.order] = grouped
        return query_of


def structured_hinge(
    scores,
    y,
    *,
    qid=None,
    group=None,
    loss="ap",
    relevant_at=1,
    reduction: str = "mean",
    n_threads: int | None = None,
    registry: PluginLookup | None = None,
    device: str = "cpu",
    **loss_params,
):
    """The structured hinge of ``loss`` at ``scores`` and a subgradient: ``(value, grad)``.

    Parameters
    ----------
    scores : array-like of float, shape (n_samples,)
        One score per document (float32 is kept for the inference).
    y : array-like, shape (n_samples,)
        Relevance grades, integers ≥ 0 ({−1, 1} reads as {0, 1}); a binary loss counts a document
        relevant from ``relevant_at`` on, a graded loss trains on the grades.  Without ``qid`` and
        ``group`` the documents are one query.
    qid, group : array-like, optional
        The queries, as in :meth:`rankopt.RankSVM.fit`: one id per document, or LightGBM's contiguous
        group sizes.
    loss : str or RankLoss, default "ap"
        Any registered rank loss, built-in or plugin, binary or graded: a name (with ``loss_params``, as
        :func:`rankopt.torch.rank_hinge` takes them) or an instance.
    relevant_at : float, default 1
    reduction : {"mean", "sum", "none"}, default "mean"
        "mean": over the queries with something to order (0 when none has); "sum"; "none": one value per
        query, queries by increasing qid (0 for a query with nothing to order).
    n_threads : int, optional
        Threads of the batched inference (default: ``OMP_NUM_THREADS``, else every core).
    registry : PluginRegistry, optional
        Where names are looked up; the default registry otherwise.
    device : str, default "cpu"
        Whose kernels infer: the compiled ones, or any device whose kernels take NumPy arrays
        (:mod:`rankopt.inference.structure_table`).

    Returns
    -------
    value : float, or ndarray of shape (n_queries,) with ``reduction="none"``
    grad : ndarray of float64, shape (n_samples,)
        A subgradient of ``value`` (of the sum with "sum", the mean with "mean"); with "none", each
        document's derivative of its own query's hinge.
    """
    check_reduction(reduction)
    if loss_params:
        if registry is None:
            from rankopt.plugins import default_registry

            registry = default_registry()
        loss = resolve_rank_loss(loss, registry, **loss_params)
    options = dict(loss=loss, relevant_at=relevant_at, n_threads=n_threads, registry=registry, device=device)
    per_query = hinge_per_query(scores, y, qid=qid, group=group, **options)
    if reduction == "none":
        return per_query.values, per_query.grad
    value, grad_scale = reduce_hinges(per_query.values, per_query.usable, reduction)
    return float(value), per_query.grad if grad_scale == 1.0 else per_query.grad * float(grad_scale)


def reduce_hinges(values, usable, reduction: str):
    """The "sum" or "mean" of per-query hinges, and the factor of their subgradient in its gradient.

    "mean" is over the usable queries (0 when none is).  ``values`` and ``usable`` are NumPy arrays or tensors
    on any device, and the result is of their kind: nothing is read from a device, so the one reduction
    serves :func:`structured_hinge` and both devices of :mod:`rankopt.torch`.
    """
    total = values.sum()
    if reduction == "sum":
        return total, 1.0
    count = usable.sum(dtype=values.dtype)
    count = count + (count == 0)  # max(count, 1) without a branch on the data: no usable query gives 0
    return total / count, 1.0 / count


def hinge_per_query(
    scores, y, *, qid=None, group=None, loss="ap", relevant_at=1, n_threads=None, registry=None, device="cpu"
) -> HingeQueries:
    """:func:`structured_hinge` before its reduction: every query's hinge and each document's derivative."""
    check_relevant_at(relevant_at)  # a graded loss does not read it, but it is checked at every door alike
    s = as_float_vector(scores, "scores")
    if y is not None:
        check_labels_shape(s.shape, np.shape(y))
    qid = qid_or_group(qid, group, s.size)
    queries = QueryIndex.single(s.size) if qid is None else check_qid(qid, s.size)
    grades = check_grades(y, s.size)
    options = dict(loss=loss, relevant_at=relevant_at, n_threads=n_threads, registry=registry, device=device)
    if qid is None or np.array_equal(queries.order, np.arange(s.size)):
        return grouped_hinges(s, grades, queries.offsets, **options)
    per_query = grouped_hinges(s[queries.order], grades[queries.order], queries.offsets, **options)
    grad = np.empty_like(per_query.grad)
    grad[queries.order] = per_query.grad
    return HingeQueries(per_query.values, grad, per_query.usable, queries.order, per_query.offsets)


def grouped_hinges(
    scores: np.ndarray,
    grades: np.ndarray,
    offsets,
    *,
    loss="ap",
    relevant_at=1,
    n_threads=None,
    registry=None,
    device="cpu",
) -> HingeQueries:
    """:func:`hinge_per_query` of documents already grouped by query: query q holds
    ``offsets[q]`` … ``offsets[q + 1]`` − 1 (empty queries allowed), ``grades`` integers ≥ 0 as checked by
    :func:`rankopt._validation.check_grades`.  The layout of padded (B, L) batches, with no reordering.
    """
    prepared = prepare_hinges(grades, offsets, loss=loss, relevant_at=relevant_at, registry=registry, device=device)
    return prepared_hinges(prepared, scores, n_threads)


def prepare_hinges(
    grades: np.ndarray, offsets, *, loss="ap", relevant_at=1, registry=None, device="cpu"
) -> PreparedRankings:
    """Everything :func:`grouped_hinges` checks and builds but the scores, for a batch whose labels do not
    change (a layer called again on the same labels reuses it: :func:`prepared_hinges`)."""
    if registry is None:
        from rankopt.plugins import default_registry

        registry = default_registry()
    rank_loss = resolve_rank_loss(loss, registry)
    # A query (or a whole mini-batch) with one relevance level is not an error here: its hinge is 0.
    options = dict(relative_to_truth=True, relevant_at=relevant_at, registry=registry, device=device)
    return PreparedRankings(rank_loss, grades, offsets, "auto", **options)


def prepared_hinges(prepared: PreparedRankings, scores: np.ndarray, n_threads=None) -> HingeQueries:
    """:func:`grouped_hinges` of a batch prepared by :func:`prepare_hinges`, at ``scores``."""
    result = prepared(scores, n_threads=n_threads)
    # max(0, ·): R = R* gives 0, so h ≥ 0; the subtraction may round a hair below.
    values = np.maximum(result.values, 0.0)
    return HingeQueries(values, result.coef, result.usable, None, prepared.offsets)
