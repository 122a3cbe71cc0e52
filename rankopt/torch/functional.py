"""The structured hinge as PyTorch functions: what :class:`rankopt.torch.RankHingeLoss` and
:class:`rankopt.torch.MetricHingeLoss` call, as ``torch.nn.MarginRankingLoss`` calls
``torch.nn.functional.margin_ranking_loss``.

Each function checks the call's layout once (shapes, dtypes, devices: nothing that reads the data), names its
configuration by a handle and runs the one operator ``torch.ops.rankopt.rank_hinge``
(:mod:`rankopt.torch._op`), which checks the data where it is, runs the kernel of the loss's structure on the
chosen device and reduces.  Both devices take and refuse the same inputs.
"""

from __future__ import annotations

import warnings

import torch

from rankopt._validation import check_n_threads, check_positive_float, check_reduction
from rankopt.inference.structure_table import registered_devices
from rankopt.torch._handles import loss_handle, named_loss_handle, resolved_loss
from rankopt.torch._inputs import checked_call, describe, labels_on
from rankopt.torch._op import rank_hinge_call

__all__ = [
    "DEVICES",
    "SIMILARITIES",
    "check_metric_options",
    "check_options",
    "hinge_of_handle",
    "metric_hinge",
    "metric_hinge_of_handle",
    "metric_rankings",
    "rank_hinge",
]

#: Where the inference runs (``device=``): the compiled kernels on the host ("cpu"), the tensor kernels on the
#: scores' device ("torch"), or "cpu" for CPU tensors and "torch" elsewhere ("auto"); besides these, any
#: device a module registers kernels on (:mod:`rankopt.inference.structure_table`).
DEVICES = ("auto", "cpu", "torch")
#: The scores ``metric_hinge`` gives a document: the cosine of two embeddings, or their dot product.
SIMILARITIES = ("cosine", "dot")


def rank_hinge(
    scores: torch.Tensor,
    y,
    *,
    loss="ap",
    mask=None,
    qid=None,
    group=None,
    reduction: str = "mean",
    relevant_at=1,
    device: str = "auto",
    n_threads: int | None = None,
    **loss_params,
) -> torch.Tensor:
    """The structured hinge of a rank loss at ``scores``; its backward is the exact subgradient.

    Parameters
    ----------
    scores : Tensor, shape (n,) or (B, L)
        Floating-point scores: one flat query, or queries given by ``qid``/``group``; or one query per row.
    y : Tensor or array-like, same shape as ``scores``
        Whole relevance grades ≥ 0 ({−1, 1} reads as {0, 1}), any integer or floating dtype.
    loss : str or RankLoss, default "ap"
        A registered rank-loss name (with ``loss_params``) or instance.
    mask : Tensor or ndarray of bool, shape (B, L), optional
        The real documents of the padded layout; padding may hold anything.
    qid, group : array-like, optional
        The queries of flat scores: one id per document, or LightGBM's contiguous group sizes.
    reduction : {"mean", "sum", "none"}, default "mean"
        "mean" over the queries with something to order, "sum", or "none" (one value per query: per row of the
        padded layout, per qid, increasing, of the flat one).
    relevant_at : float, default 1
        The grade from which a document counts as relevant for a binary loss.
    device : {"auto", "cpu", "torch"}, default "auto"
        Where the inference runs: "cpu", the compiled kernels on the host (scores copied there once, the
        gradient back); "torch", the tensor kernels on the scores' own device; "auto", "cpu" for CPU tensors
        and "torch" elsewhere.
    n_threads : int, optional
        Threads of the compiled inference (default: ``OMP_NUM_THREADS``, else every core).

    Returns
    -------
    Tensor
        A scalar ("mean", "sum"), or one value per query ("none"); float32 for float16 and bfloat16 scores.
    """
    handle = _loss_handle(loss, loss_params)
    options = dict(reduction=reduction, relevant_at=relevant_at, device=device, n_threads=n_threads)
    return hinge_of_handle(scores, y, handle, mask=mask, qid=qid, group=group, **options)


def _loss_handle(loss, loss_params: dict) -> int:
    """The handle of a loss name with its parameters (a constant to a tracer) or of a loss instance."""
    if isinstance(loss, str):
        return named_loss_handle(loss, tuple(sorted(loss_params.items())))
    return loss_handle(resolved_loss(loss, loss_params))


def hinge_of_handle(scores, y, loss: int, *, mask, qid, group, reduction, relevant_at, device, n_threads):
    """:func:`rank_hinge` of the loss with the handle ``loss`` (:mod:`rankopt.torch._op`): what the modules
    call, with their loss's handle kept as an integer, which a tracer reads as a constant."""
    check_options(reduction, device, n_threads)
    y, mask, qid = checked_call(scores, y, mask, qid, group)
    return rank_hinge_call(scores, y, mask, qid, loss, reduction, _relevant_from(relevant_at), n_threads, device)[0]


@torch.compiler.assume_constant_result
def _relevant_from(relevant_at) -> int:
    """The least relevant grade, an integer (``relevant_at`` checked): what a binary loss's threshold reads."""
    from rankopt.inference.binary_kernels import integer_threshold

    return integer_threshold(relevant_at)


def check_options(reduction: str, device: str, n_threads=None) -> None:
    """Refuse an unknown reduction or device, or threads that are not a positive integer or None, on every
    device alike (the layers call it when they are made, not at the first call): a device is "auto" or one
    that kernels are registered on (:data:`DEVICES`, or one a module added)."""
    check_reduction(reduction)
    check_n_threads(n_threads)
    devices = sorted({*DEVICES, *registered_devices()})
    if device not in devices:
        raise ValueError(f"expected device to be one of {devices}, got {device!r} instead")


def check_metric_options(similarity: str, scale, relevant: str = "same_label") -> float:
    """Refuse an unknown similarity or relevance rule, or a scale that is not a positive float; the scale."""
    if similarity not in SIMILARITIES:
        raise ValueError(f"expected similarity to be one of {list(SIMILARITIES)}, got {similarity!r} instead")
    if relevant != "same_label":
        raise ValueError(f"expected relevant to be 'same_label', got {relevant!r} instead")
    return check_positive_float(scale, "scale")


def metric_hinge(
    embeddings: torch.Tensor,
    labels,
    *,
    loss="ap",
    similarity: str = "cosine",
    scale: float = 1.0,
    indices_tuple=None,
    ref_emb=None,
    ref_labels=None,
    device: str = "auto",
    n_threads: int | None = None,
    **loss_params,
) -> torch.Tensor:
    """The mean structured hinge of the queries the embeddings make: each embedding ranks the other ones (itself
    excluded), or the reference set ``ref_emb``; a document is relevant when it shares the query's label.

    ``similarity`` ("cosine" or "dot") and ``scale`` make the scores, the similarities times ``scale``; the
    other parameters are :func:`rank_hinge`'s; ``indices_tuple``, a miner's tuples in pytorch-metric-learning's
    calling convention, must be None.  A scalar, 0 with a zero gradient when no embedding has anything to rank
    (a batch of one).
    """
    handle = _loss_handle(loss, loss_params)
    references = (indices_tuple, ref_emb, ref_labels)
    return metric_hinge_of_handle(embeddings, labels, handle, similarity, scale, references, device, n_threads)


def metric_hinge_of_handle(embeddings, labels, loss: int, similarity, scale, references, device, n_threads):
    """:func:`metric_hinge` of the loss with the handle ``loss``, ``references`` (indices_tuple, ref_emb,
    ref_labels): what :class:`~rankopt.torch.MetricHingeLoss` calls."""
    ranked = metric_rankings(embeddings, labels, similarity, scale, *references)
    if ranked is None:
        return (embeddings * 0).sum()
    scores, relevance, mask = ranked
    options = dict(reduction="mean", relevant_at=1, device=device, n_threads=n_threads)
    return hinge_of_handle(scores, relevance, loss, mask=mask, qid=None, group=None, **options)


def metric_rankings(embeddings, labels, similarity, scale, indices_tuple, ref_emb, ref_labels):
    """The rankings :func:`metric_hinge` scores: (scores, relevance, mask) of the padded query × document
    layout, or None when no embedding has anything to rank (a batch of one, the last of a ``DataLoader``
    without ``drop_last``, or an empty reference set: a loss of 0 with a zero gradient, as
    pytorch-metric-learning's losses give)."""
    if indices_tuple is not None:
        raise ValueError(
            "expected indices_tuple=None: every embedding ranks all the others, so a miner's pairs or "
            "triplets have no role here"
        )
    scale = check_metric_options(similarity, scale)
    if not isinstance(embeddings, torch.Tensor) or embeddings.dim() != 2:
        raise ValueError(f"expected embeddings of shape (batch, dim), got {describe(embeddings)} instead")
    labels = labels_on(labels, embeddings, "labels")
    self_reference = ref_emb is None
    if self_reference != (ref_labels is None):
        raise ValueError("expected ref_emb and ref_labels together, got only one of them")
    if self_reference:
        ref_emb, ref_labels = embeddings, labels
    elif not isinstance(ref_emb, torch.Tensor) or ref_emb.dim() != 2 or ref_emb.shape[1] != embeddings.shape[1]:
        raise ValueError(f"expected ref_emb of shape (n, {embeddings.shape[1]}), got {describe(ref_emb)} instead")
    else:
        ref_labels = labels_on(ref_labels, ref_emb, "ref_labels")
    if labels.shape[0] != embeddings.shape[0] or ref_labels.shape[0] != ref_emb.shape[0]:
        raise ValueError("expected one label per embedding, in labels and in ref_labels")
    if documents_ranked(embeddings.shape[0], ref_emb.shape[0], self_reference) == 0:
        return None
    queries, documents = embeddings, ref_emb
    if similarity == "cosine":
        queries, documents = _unit_rows(queries), _unit_rows(documents)
    scores = (queries @ documents.T) * scale
    relevance = labels[:, None] == ref_labels[None, :]  # boolean: 0/1 grades, a byte each
    mask = None
    if self_reference:
        mask = ~torch.eye(labels.shape[0], dtype=torch.bool, device=embeddings.device)
    return scores, relevance, mask


def documents_ranked(n_queries: int, n_references: int, self_reference: bool) -> int:
    """How many documents each query ranks: the other embeddings of the batch, or the reference set."""
    return max(n_queries - 1, 0) if self_reference else n_references


def _unit_rows(x: torch.Tensor) -> torch.Tensor:
    """The rows of ``x`` scaled to unit length, without overflow: each row is divided by its largest |entry|
    first (the direction is the same), so a row of norm 1e20 in float32 stays itself, not a zero vector.  A row
    of zeros is divided by 1: it stays zero, with the finite gradient ``normalize`` gives it (as in PML), where
    a divisor of the smallest float made it infinite."""
    largest = x.detach().abs().amax(dim=1, keepdim=True)
    return torch.nn.functional.normalize(x / torch.where(largest > 0, largest, torch.ones_like(largest)), dim=1)


def device_from_backend(device: str, backend: str | None, owner: str) -> str:
    """``device``, or the device the deprecated ``backend=`` of ``owner`` names ("compiled" is "cpu")."""
    if backend is None:
        return device
    warnings.warn(
        f"{owner}(backend=...) is deprecated and will be removed: it is now device=, and backend='compiled' is "
        "device='cpu' (backend names a data backend elsewhere in rankopt)",
        FutureWarning,
        stacklevel=3,
    )
    names = {"auto": "auto", "compiled": "cpu", "torch": "torch"}
    if backend not in names:
        raise ValueError(f"expected backend to be one of {list(names)}, got {backend!r} instead")
    return names[backend]
