"""A structured-hinge loss layer for PyTorch rankers: any registered rank loss, exact inference.

``RankHingeLoss(loss)`` is :func:`rankopt.structured_hinge` as a ``torch.nn.Module``: the forward pass
computes each query's structured hinge h(s) = max_R [Δ(R*, R) + Σ_i (c_i(R) − c_i(R*)) s_i] with the
compiled batched loss-augmented inference (threads, no Python loop over queries), and the backward pass
returns the exact subgradient c(R̂) − c(R*), scaled like the reduction.  The loss is any registered rank
loss — AP, NDCG, ROC area, precision at k, graded NDCG@k, pairwise, a plugin's.

Two backends compute the same hinge (``backend=``).  ``"compiled"``: the compiled kernels on the host, with
OpenMP threads; CUDA (or other device) scores are copied to the host once per call and the gradient copied
back.  ``"torch"``: the structure table's tensor-op kernels (:mod:`rankopt.inference.tensor_kernels`), in
torch operations on the scores' own device, so GPU scores never leave the GPU; it takes the padded layout
(and one flat query) of every structure but a loss's own per-query inference, and a loss or layout it
cannot take runs on the compiled path with one log line saying so.  ``"auto"`` (the default) is
``"compiled"`` for CPU tensors and ``"torch"`` elsewhere.  float16 and bfloat16 scores are computed in
float32, and their loss value is returned in float32 (a hinge can exceed float16's range); the gradient
keeps the scores' dtype.  In the padded layout only the documents the mask keeps are read: padding may
hold anything.  Labels may be any integer or floating dtype holding whole grades (float16 and bfloat16
included, read through float32).  Importing :mod:`rankopt` never imports torch; this module does (the
``rankopt[torch]`` extra).

The hinge is piecewise linear in the scores: its second derivative is 0 almost everywhere, and a double
backward is refused with that reason rather than returning zeros silently.
"""

from __future__ import annotations

import logging
import weakref

import numpy as np
import torch

from rankopt._validation import as_float_vector, check_grades, check_positive_float, check_reduction
from rankopt.hinge import HingeQueries, hinge_per_query, prepare_hinges, prepared_hinges, reduce_hinges
from rankopt.inference._batched import gather_kept, kept_offsets, scale_into, scatter_kept
from rankopt.inference.kernel_base import ReusedOutput
from rankopt.inference.tensor_kernels import TensorKernelUnsupported

__all__ = ["BACKENDS", "MetricHingeLoss", "RankHingeLoss"]

logger = logging.getLogger(__name__)

#: The values of ``RankHingeLoss(backend=...)``.
BACKENDS = ("auto", "compiled", "torch")

_FLOAT_DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)


class RankHingeLoss(torch.nn.Module):
    """The structured hinge of a rank loss, for training any scorer with PyTorch.

    Parameters
    ----------
    loss : str or RankLoss, default "ap"
        A registered rank-loss name or instance.
    relevant_at : float, default 1
        The grade from which a document counts as relevant for a binary loss.
    reduction : {"mean", "sum", "none"}, default "mean"
        "mean" over the queries with something to order (a query with one relevance level contributes
        0 and is not counted), "sum", or "none" (one value per query: per row of the padded layout,
        per qid, increasing, of the flat one).
    n_threads : int, optional
        Threads of the compiled inference (default: ``OMP_NUM_THREADS``, else every core).
    backend : {"auto", "compiled", "torch"}, default "auto"
        Where the inference runs (module docstring): the compiled kernels on the host, or tensor operations
        on the scores' device; "auto" takes the compiled kernels for CPU tensors and the tensor ones
        elsewhere.
    **loss_params
        Parameters of a loss given by name, e.g. ``RankHingeLoss("ndcg_graded", k=5)``.

    Calling it:

    * flat layout, like ``RankSVM.fit``: ``loss_fn(scores, y, qid=None, group=None)`` with 1-D scores;
    * padded list layout, as neural LTR libraries use: ``loss_fn(scores, y, mask=None)`` with
      scores and y of shape (B, L), each row one query, ``mask`` True for the real documents.
    """

    def __init__(self, loss="ap", *, relevant_at=1, reduction="mean", n_threads=None, backend="auto", **loss_params):
        super().__init__()
        from rankopt.plugins import default_registry

        check_reduction(reduction)
        if backend not in BACKENDS:
            raise ValueError(f"expected backend to be one of {list(BACKENDS)}, got {backend!r} instead")
        registry = default_registry()
        if loss_params:
            if not isinstance(loss, str):
                raise ValueError(
                    f"expected loss parameters only with a loss name, got {sorted(loss_params)} with {loss!r}"
                )
            loss = registry.get_loss(loss, **loss_params)
        self.rank_loss = registry.resolve_loss(loss)
        self.relevant_at = relevant_at
        self.reduction = reduction
        self.n_threads = n_threads
        self.backend = backend
        self._prepared_batch = _PreparedBatch()
        # The backward's gradient array, reused once torch has let go of the last one.
        self._gradient_buffer = ReusedOutput()

    def extra_repr(self) -> str:
        return f"loss={self.rank_loss!r}, reduction={self.reduction!r}, backend={self.backend!r}"

    def forward(self, scores: torch.Tensor, y, qid=None, group=None, mask=None) -> torch.Tensor:
        """The reduced structured hinge of ``scores``; its backward is the exact subgradient.

        Parameters
        ----------
        scores : Tensor, shape (n,) or (B, L)
            Floating-point scores: one flat query or queries given by ``qid``/``group``; or one query per row.
        y : Tensor or array-like, same shape as ``scores``
            Whole relevance grades ≥ 0 ({−1, 1} reads as {0, 1}), any integer or floating dtype.
        qid, group : array-like, optional
            The queries of flat scores: one id per document, or LightGBM's contiguous group sizes.
        mask : Tensor or ndarray of bool, shape (B, L), optional
            The real documents of the padded layout; padding may hold anything.

        Returns
        -------
        Tensor
            A scalar ("mean", "sum"), or one value per query ("none").
        """
        if not isinstance(scores, torch.Tensor):
            raise TypeError(f"expected scores to be a torch.Tensor, got {type(scores).__name__} instead")
        if scores.dtype not in _FLOAT_DTYPES:
            raise TypeError(f"expected floating-point scores (float16/bfloat16/float32/float64), got {scores.dtype}")
        if scores.dim() == 2:
            if qid is not None or group is not None:
                raise ValueError(
                    "expected qid and group only with 1-D scores; in the padded (B, L) layout each row is a query"
                )
        elif scores.dim() != 1:
            raise ValueError(f"expected scores of shape (n,) or (B, L), got shape {tuple(scores.shape)} instead")
        elif mask is not None:
            raise ValueError("expected mask only with the padded (B, L) layout, got it with 1-D scores")
        if self.backend == "torch" or (self.backend == "auto" and scores.device.type != "cpu"):
            hinges = _tensor_hinges(self, scores, y, qid, group, mask)
            if hinges is not None:
                return _TensorStructuredHinge.apply(scores, hinges, self.reduction)
        return _StructuredHinge.apply(scores, _Call(self, y, qid, group, mask))


class MetricHingeLoss(torch.nn.Module):
    """The structured hinge of a rank loss for metric learning: every embedding ranks the others.

    Called as pytorch-metric-learning's losses are, ``loss_fn(embeddings, labels, indices_tuple=None,
    ref_emb=None, ref_labels=None)``, without needing PML.  With PML installed, :class:`rankopt.pml.MetricHingeLoss`
    is the same loss as a ``BaseMetricLossFunction``, with PML's distances, reducers, miners and wrappers.
    Each embedding is a query; the documents it ranks are the other embeddings of the batch (itself
    excluded), or the reference set when ``ref_emb``/``ref_labels`` are given. A document is relevant
    when it shares the query's label. The loss is the mean structured hinge over the queries that have
    both a relevant and an irrelevant document (:class:`RankHingeLoss` over the padded query × document
    similarity matrix, so its gradient is the exact subgradient through the similarities).

    Parameters
    ----------
    loss : str or RankLoss, default "ap"
        Any registered rank loss: "ap", "ndcg", "auc", a plugin's.
    similarity : {"cosine", "dot"}, default "cosine"
        The score a query gives a document: the cosine of their embeddings, or their dot product.
    scale : float, default 1.0
        The scores are the similarities times ``scale``. The hinge weighs score differences against a loss in
        [0, 1]: cosines in [−1, 1] at scale 1 rarely leave the margin, so the hinge stays active on every
        query; a larger scale asks for a margin that shrinks as 1/scale (the digits experiment chooses it on
        validation data).
    relevant : {"same_label"}, default "same_label"
        Which documents are relevant to a query: those with its label.
    n_threads : int, optional
        Threads of the compiled inference (:class:`RankHingeLoss`).
    backend : {"auto", "compiled", "torch"}, default "auto"
        Where the inference runs (:class:`RankHingeLoss`): on a GPU, "auto" keeps the similarity matrix there.
    **loss_params
        Parameters of a loss given by name.
    """

    SIMILARITIES = ("cosine", "dot")

    def __init__(
        self,
        loss="ap",
        *,
        similarity="cosine",
        scale=1.0,
        relevant="same_label",
        n_threads=None,
        backend="auto",
        **loss_params,
    ):
        super().__init__()
        if similarity not in self.SIMILARITIES:
            raise ValueError(f"expected similarity to be one of {list(self.SIMILARITIES)}, got {similarity!r} instead")
        scale = check_positive_float(scale, "scale")
        if relevant != "same_label":
            raise ValueError(f"expected relevant to be 'same_label', got {relevant!r} instead")
        self.hinge = RankHingeLoss(loss, reduction="mean", n_threads=n_threads, backend=backend, **loss_params)
        self.similarity, self.scale, self.relevant = similarity, scale, relevant

    def extra_repr(self) -> str:
        return f"loss={self.hinge.rank_loss!r}, similarity={self.similarity!r}, scale={self.scale!r}"

    def forward(self, embeddings: torch.Tensor, labels, indices_tuple=None, ref_emb=None, ref_labels=None):
        """The mean structured hinge of the queries the embeddings make, as pytorch-metric-learning calls a loss.

        Parameters
        ----------
        embeddings : Tensor, shape (batch, dim)
        labels : Tensor or array-like of numeric class labels, shape (batch,)
        indices_tuple : None
            A miner's tuples have no role: every embedding ranks all the others.
        ref_emb, ref_labels : Tensor, shape (n, dim) and (n,), optional
            A reference set the queries rank instead of the batch (both or neither).

        Returns
        -------
        Tensor
            A scalar; 0 with a zero gradient when no embedding has anything to rank (a batch of one).
        """
        if indices_tuple is not None:
            raise ValueError(
                "expected indices_tuple=None: every embedding ranks all the others, so a miner's pairs or "
                "triplets have no role here"
            )
        if not isinstance(embeddings, torch.Tensor) or embeddings.dim() != 2:
            raise ValueError(f"expected embeddings of shape (batch, dim), got {_describe(embeddings)} instead")
        labels = _labels_on(labels, embeddings, "labels")
        self_reference = ref_emb is None
        if self_reference != (ref_labels is None):
            raise ValueError("expected ref_emb and ref_labels together, got only one of them")
        if self_reference:
            ref_emb, ref_labels = embeddings, labels
        elif not isinstance(ref_emb, torch.Tensor) or ref_emb.dim() != 2 or ref_emb.shape[1] != embeddings.shape[1]:
            raise ValueError(f"expected ref_emb of shape (n, {embeddings.shape[1]}), got {_describe(ref_emb)} instead")
        else:
            ref_labels = _labels_on(ref_labels, ref_emb, "ref_labels")
        if labels.shape[0] != embeddings.shape[0] or ref_labels.shape[0] != ref_emb.shape[0]:
            raise ValueError("expected one label per embedding, in labels and in ref_labels")
        if documents_ranked(embeddings.shape[0], ref_emb.shape[0], self_reference) == 0:
            # A batch of one (the last of a DataLoader without drop_last) or an empty reference set: nothing to
            # rank, a loss of 0 with a zero gradient, as pytorch-metric-learning's losses give.
            return (embeddings * 0).sum()
        queries, documents = embeddings, ref_emb
        if self.similarity == "cosine":
            queries, documents = _unit_rows(queries), _unit_rows(documents)
        scores = (queries @ documents.T) * self.scale
        relevance = (labels[:, None] == ref_labels[None, :]).long()
        mask = None
        if self_reference:
            mask = ~torch.eye(labels.shape[0], dtype=torch.bool, device=embeddings.device)
        return self.hinge(scores, relevance, mask=mask)


#: (loss type, reason) pairs already logged as falling back to the compiled path.
_LOGGED_FALLBACKS: set = set()


def _fall_back(loss, reason: str) -> None:
    """Say once per loss type and reason that a call runs on the compiled (host) path instead."""
    key = (type(loss), reason)
    if key not in _LOGGED_FALLBACKS:
        _LOGGED_FALLBACKS.add(key)
        logger.warning(
            "RankHingeLoss(%r): the tensor backend cannot take it (%s); running on the host", loss.name, reason
        )


def _tensor_hinges(module: RankHingeLoss, scores: torch.Tensor, y, qid, group, mask):
    """The call's hinges from the tensor kernel of the loss's structure, or None (logged) to run on the host.

    The device is read once: the input checks and every size the kernel needs from the data
    (:meth:`~rankopt.inference.tensor_kernels.TensorKernel.facts`) travel in one transfer."""
    from rankopt.inference.batched import resolve_rank_loss
    from rankopt.inference.structure_table import kernel_for_loss
    from rankopt.losses.structure import check_declared_structure
    from rankopt.plugins import default_registry

    loss = resolve_rank_loss(module.rank_loss, default_registry())
    if scores.dim() == 1 and (qid is not None or group is not None):
        _fall_back(loss, "it takes the padded (B, L) layout, not qid or group")
        return None
    try:
        kernel, structure = kernel_for_loss(loss, device="torch")
    except ValueError:
        _fall_back(loss, f"no tensor kernel is registered for its structure {type(loss.structure()).__name__}")
        return None
    reason = kernel.unsupported_reason(loss, structure, scores.shape[-1])
    if reason is not None:
        _fall_back(loss, reason)
        return None
    check_declared_structure(loss)
    if scores.numel() == 0:  # refused by the compiled path's checks, with its message
        return None
    rows = scores if scores.dim() == 2 else scores[None, :]
    batch = _DeviceBatch(rows, y, mask)
    grades = batch.grades
    if not loss.graded:
        from rankopt.inference.binary_kernels import integer_threshold

        grades = (grades >= integer_threshold(module.relevant_at)).long()
    with torch.no_grad():
        facts = batch.read(kernel.facts(loss, structure, grades, batch.mask))
        compute = torch.float64 if rows.dtype == torch.float64 else torch.float32
        try:
            return kernel.hinge(loss, structure, rows.detach().to(compute), grades, batch.mask, facts)
        except TensorKernelUnsupported as exc:
            _fall_back(loss, str(exc))
            return None


class _DeviceBatch:
    """A padded batch's labels and mask on the scores' device, checked where the mask keeps a document (finite
    scores whose sums stay finite, whole labels ≥ 0, or {−1, 1} read as {0, 1}) without reading the device:
    :meth:`read` brings the checks' verdicts home with whatever else the kernel needs, in one transfer."""

    def __init__(self, scores: torch.Tensor, y, mask):
        device = scores.device
        y = y if isinstance(y, torch.Tensor) else torch.as_tensor(np.asarray(y), device=device)
        if isinstance(mask, np.ndarray):  # as the compiled path reads it
            mask = torch.as_tensor(mask, device=device)
        for name, value in (("y", y), ("mask", mask)):
            if isinstance(value, torch.Tensor) and value.device != device:
                raise ValueError(f"expected {name} on the scores' device {device}, got it on {value.device} instead")
        if y.dim() == 1 and scores.shape[0] == 1:  # one flat query
            if y.shape[0] != scores.shape[1]:
                raise ValueError(
                    f"expected y of shape ({scores.shape[1]},) (one label per score), got {tuple(y.shape)} instead"
                )
            y = y.reshape(scores.shape)
        if y.shape != scores.shape:
            raise ValueError(
                f"expected y of shape {tuple(scores.shape)} (the scores' layout), got {tuple(y.shape)} instead"
            )
        if mask is None:
            mask = torch.ones(scores.shape, dtype=torch.bool, device=device)
        elif not isinstance(mask, torch.Tensor) or mask.shape != scores.shape or mask.dtype != torch.bool:
            raise ValueError(f"expected a boolean mask of shape {tuple(scores.shape)}, got {_describe(mask)} instead")
        labels = y.detach()
        integer = not (labels.is_floating_point() or labels.is_complex())
        if not integer:
            labels = labels.double()  # exact for every whole label below 2**53, and ordered beyond
        zero_label = torch.zeros((), dtype=labels.dtype, device=device)
        kept = torch.where(mask, labels, zero_label)
        kept_scores = torch.where(mask, scores.detach(), torch.zeros((), dtype=scores.dtype, device=device))
        lowest = kept.min()
        checks = [mask.any(), kept_scores.abs().max(), lowest, (mask & (labels != 1) & (labels != -1)).any()]
        if not integer:
            # Every float from 2**53 on is whole; below 2**63 it converts to int64 exactly, as on the host.
            checks.append((torch.isfinite(kept) & (kept == torch.round(kept)) & (kept.abs() < 2.0**63)).all())
        self.checks = torch.stack([c.double() for c in checks])
        # {−1, 1} labels read as {0, 1}; an invalid label gives garbage here, refused by read() before use.
        self.grades = torch.where(lowest < 0, (kept > 0).long(), kept.long())
        self.mask, self.width = mask, scores.shape[1]
        self.score_dtype = np.float64 if scores.dtype == torch.float64 else np.float32

    def read(self, facts: torch.Tensor | None) -> np.ndarray | None:
        """The one transfer from the device: the checks (a ValueError for a refused batch) and ``facts``."""
        from rankopt._validation import not_finite_error, score_sum_bound, score_sums_error

        values = self.checks if facts is None else torch.cat((self.checks, facts.double().reshape(-1)))
        host = np.asarray(values.tolist())  # the read
        any_kept, largest, lowest, not_binary, *whole = host[: self.checks.shape[0]].tolist()
        if not any_kept:
            raise ValueError("expected mask to keep some document, got a mask that is False everywhere instead")
        if not np.isfinite(largest):
            raise not_finite_error("scores")
        if largest * self.width > score_sum_bound(self.score_dtype):
            raise score_sums_error(largest, self.width, self.score_dtype)
        if whole and not whole[0]:
            raise ValueError(
                "expected y to hold integer relevance grades >= 0 that fit in 64-bit integers, got NaN, infinity, "
                "fractions or grades from 2**63 on instead"
            )
        if lowest < 0 and not_binary:
            raise ValueError(
                "expected y to hold integer relevance grades >= 0 (or binary labels in {-1, 1}), "
                f"got {lowest:g} instead"
            )
        return None if facts is None else host[self.checks.shape[0] :]


class _TensorStructuredHinge(torch.autograd.Function):
    """The tensor backend's hinge: forward reduces the kernel's per-row values, backward scales its coefficients."""

    @staticmethod
    def forward(ctx, scores: torch.Tensor, hinges, reduction: str):
        out_dtype = _value_dtype(scores.dtype)
        values = hinges.values
        if reduction == "none":
            out = values
            ctx.scale = None
        else:
            total = values.sum()
            ctx.scale = 1.0 / hinges.usable.sum().clamp(min=1).to(values.dtype) if reduction == "mean" else None
            out = total * ctx.scale if ctx.scale is not None else total
        ctx.coef, ctx.reduction = hinges.coef, reduction
        ctx.save_for_backward(scores)
        if scores.dim() == 1 and reduction == "none":
            out = out.reshape(1)
        return out.to(out_dtype)

    @staticmethod
    def backward(ctx, grad_output: torch.Tensor):
        (scores,) = ctx.saved_tensors
        upstream = grad_output.detach().to(ctx.coef.dtype)
        if ctx.reduction == "none":
            grad = ctx.coef * upstream.reshape(-1)[:, None]
        else:
            grad = ctx.coef * (upstream * ctx.scale if ctx.scale is not None else upstream)
        grad = grad.reshape(scores.shape).to(scores.dtype)
        if torch.is_grad_enabled():
            grad = _NoSecondDerivative.apply(grad, scores)
        return grad, None, None


def _describe(value) -> str:
    return f"shape {tuple(value.shape)}" if isinstance(value, torch.Tensor) else type(value).__name__


def documents_ranked(n_queries: int, n_references: int, self_reference: bool) -> int:
    """How many documents each query ranks: the other embeddings of the batch, or the reference set."""
    return max(n_queries - 1, 0) if self_reference else n_references


def _unit_rows(x: torch.Tensor) -> torch.Tensor:
    """The rows of ``x`` scaled to unit length, without overflow: each row is divided by its largest |entry|
    first (the direction is the same), so a row of norm 1e20 in float32 stays itself, not a zero vector."""
    largest = x.detach().abs().amax(dim=1, keepdim=True)
    tiny = torch.finfo(x.dtype).tiny if x.is_floating_point() else 1.0
    return torch.nn.functional.normalize(x / largest.clamp_min(tiny), dim=1)


def _labels_on(labels, embeddings: torch.Tensor, name: str) -> torch.Tensor:
    """``labels`` as a 1-D tensor on the embeddings' device, or an error naming both devices."""
    if not isinstance(labels, torch.Tensor):
        array = None if labels is None else np.asarray(labels)
        if array is None or array.dtype.kind not in "biuf":
            raise TypeError(
                f"expected {name} to be a 1-D tensor or array of numeric class labels, got "
                f"{'None' if array is None else f'an array of dtype {array.dtype}'} instead (encode other labels "
                "as integers, e.g. with sklearn.preprocessing.LabelEncoder)"
            )
        labels = torch.as_tensor(array, device=embeddings.device)
    elif labels.device != embeddings.device:
        raise ValueError(f"expected {name} on the embeddings' device {embeddings.device}, got {labels.device} instead")
    if labels.dim() != 1:
        raise ValueError(f"expected {name} to be 1-D, got shape {tuple(labels.shape)} instead")
    return labels


class _Call:
    """One forward call's arguments, checked and moved to the host."""

    def __init__(self, module: RankHingeLoss, y, qid, group, mask):
        self.module, self.y, self.qid, self.group, self.mask = module, y, qid, group, mask

    def hinges(self, scores: torch.Tensor) -> tuple[HingeQueries, _AllKept | _Kept]:
        """The per-query hinges of the call, and where its flat documents sit in the padded input.

        The second is where the scores' documents are kept: ``_Kept`` for a padded layout with a mask,
        ``_AllKept`` otherwise (every document, in input order: no gather).  The scores are copied to the host
        once; float16 and bfloat16 become float32 there.
        """
        module = self.module
        detached = scores.detach()
        if detached.dtype in (torch.float16, torch.bfloat16):
            detached = detached.float()
        s = detached.cpu().numpy()
        if s.ndim == 1:
            y = _host_array(self.y, scores, "y")
            if y is None or y.shape != s.shape:
                raise ValueError(f"expected y of shape {s.shape} (one label per score), got {_shape(y)} instead")
            qid, group = _host_array(self.qid, scores, "qid"), _host_array(self.group, scores, "group")
            options = dict(loss=module.rank_loss, relevant_at=module.relevant_at, n_threads=module.n_threads)
            return hinge_per_query(s, y, qid=qid, group=group, **options), _AllKept()
        prepared, where = module._prepared_batch.get(self.y, self.mask, module, lambda: self._prepare(scores, s.shape))
        # Only the kept documents are read and checked: padding may hold anything (-inf scores, -1 labels).
        # Read once, by the prepared batch's own check (finite, sums that cannot overflow).
        flat = as_float_vector(where.gather(s), "scores", scan=False)
        return prepared_hinges(prepared, flat, module.n_threads), where

    def _prepare(self, scores: torch.Tensor, shape) -> tuple:
        """The padded batch's labels checked and prepared (:func:`rankopt.hinge.prepare_hinges`), and where its
        kept documents sit in the flat scores."""
        module = self.module
        options = dict(loss=module.rank_loss, relevant_at=module.relevant_at)
        y = _host_array(self.y, scores, "y")
        if y is None or y.shape != shape:
            raise ValueError(f"expected y of shape {shape} (the scores' padded layout), got {_shape(y)} instead")
        n_rows, width = shape
        if self.mask is None:  # every document of every row: no gather
            offsets = np.arange(n_rows + 1, dtype=np.int64) * width
            return prepare_hinges(check_grades(y.reshape(-1), n_rows * width), offsets, **options), _AllKept()
        mask = _host_array(self.mask, scores, "mask")
        if mask.shape != shape or mask.dtype != np.bool_:
            raise ValueError(
                f"expected a boolean mask of shape {shape}, got {mask.dtype} of shape {mask.shape} instead"
            )
        kept = _Kept(mask)
        if kept.n_kept == 0:
            raise ValueError("expected mask to keep some document, got a mask that is False everywhere instead")
        return prepare_hinges(check_grades(kept.gather(y), kept.n_kept), kept.offsets, **options), kept


class _AllKept:
    """The padded layout without a mask: every document of every row, the flat layout a reshape."""

    def gather(self, values: np.ndarray) -> np.ndarray:
        return values.reshape(-1)

    def scatter(self, flat: np.ndarray, factor: float, dtype, buffer: ReusedOutput) -> np.ndarray:
        """``flat · factor`` in ``dtype``, rounded once (the gradient, as a flat array)."""
        out = buffer.empty(flat.size, dtype)
        scale_into(np.ascontiguousarray(flat, dtype=np.float64), factor, out)
        return out


class _Kept:
    """The documents a padded batch's mask keeps: the flat layout's offsets, and its gather and scatter, each
    one compiled pass over the mask (``_batched.kept_offsets``, ``gather_kept``, ``scatter_kept``); values of
    other dtypes than the compiled ones take NumPy's boolean indexing."""

    def __init__(self, mask: np.ndarray):
        self.mask = np.ascontiguousarray(mask)
        self.bytes = self.mask.view(np.uint8)
        self.offsets = np.empty(mask.shape[0] + 1, dtype=np.int64)
        self.n_kept = int(kept_offsets(self.bytes, self.offsets))

    def gather(self, values: np.ndarray) -> np.ndarray:
        if values.dtype in _GATHERED and values.flags.c_contiguous:
            return gather_kept(values, self.bytes, self.n_kept)
        return values[self.mask]

    def scatter(self, flat: np.ndarray, factor: float, dtype, buffer: ReusedOutput) -> np.ndarray:
        """``flat · factor`` at the kept places and 0 elsewhere, in ``dtype`` (the padded gradient, flat)."""
        out = buffer.empty(self.mask.size, dtype)
        scatter_kept(np.ascontiguousarray(flat, dtype=np.float64), factor, self.bytes, out.reshape(self.mask.shape))
        return out


#: The dtypes ``_batched.gather_kept`` takes.
_GATHERED = (np.dtype(np.float32), np.dtype(np.float64), np.dtype(np.int64))


class _PreparedBatch:
    """The last padded batch's prepared labels, kept while its label and mask tensors stay the same objects,
    unmodified (torch's version counters), with the same shape, loss and ``relevant_at``: a loop over a fixed
    batch checks and prepares its labels once, as :class:`rankopt.inference.batched.PreparedRankings` is meant
    to be used.  Labels given as arrays are prepared at every call.  Copies and pickles of the layer start
    empty (the entry refers to tensors by weak reference)."""

    def __init__(self):
        self._key: tuple | None = None
        self._value = None

    def __reduce__(self):
        return (_PreparedBatch, ())

    def get(self, y, mask, module: RankHingeLoss, build):
        """The prepared batch for these labels, built by ``build()`` unless the last one still holds."""
        if not isinstance(y, torch.Tensor) or not (mask is None or isinstance(mask, torch.Tensor)):
            return build()
        loss_key = module.rank_loss.cache_key()
        if loss_key is None:  # a loss whose parameters cannot be snapshotted: never reuse
            return build()
        # The loss's parameters by value: set_params between calls must not find the old preparation.
        key = (y._version, tuple(y.shape), None if mask is None else mask._version, loss_key, module.relevant_at)
        held = self._key
        if (
            held is not None
            and held[0]() is y
            and (mask is None) == (held[1] is None)
            and (mask is None or held[1]() is mask)
            and held[2:] == key
        ):
            return self._value
        self._value = build()
        self._key = (weakref.ref(y), None if mask is None else weakref.ref(mask), *key)
        return self._value


def _shape(value) -> str:
    return "None" if value is None else str(value.shape)


def _host_array(value, scores: torch.Tensor, name: str):
    """``value`` as a NumPy array; a tensor must live on the scores' device."""
    if value is None:
        return None
    if isinstance(value, torch.Tensor):
        if value.device != scores.device:
            raise ValueError(f"expected {name} on the scores' device {scores.device}, got it on {value.device} instead")
        value = value.detach()
        if value.dtype in (torch.float16, torch.bfloat16):  # NumPy has no bfloat16: float32 holds both exactly
            value = value.float()
        return value.cpu().numpy()
    return np.asarray(value)


def _value_dtype(scores_dtype: torch.dtype) -> torch.dtype:
    """The dtype of the loss value: the scores' own, but float32 for float16 and bfloat16 scores, whose
    hinge (a sum over a query, a mean over queries) can exceed float16's 65504 and would read inf."""
    return torch.float32 if scores_dtype in (torch.float16, torch.bfloat16) else scores_dtype


class _StructuredHinge(torch.autograd.Function):
    @staticmethod
    def forward(ctx, scores: torch.Tensor, call: _Call):
        per_query, where = call.hinges(scores)
        reduction = call.module.reduction
        out_dtype = _value_dtype(scores.dtype)
        if reduction == "none":  # one value per query: per row of the padded layout, per qid of the flat one
            out = torch.as_tensor(per_query.values, dtype=out_dtype, device=scores.device)
            ctx.grad, ctx.query_of = per_query.grad, per_query.query_of()
        else:
            total, ctx.grad_scale = reduce_hinges(per_query, reduction)
            ctx.grad = per_query.grad
            out = torch.tensor(total, dtype=out_dtype, device=scores.device)
        ctx.save_for_backward(scores)  # only to tie a double backward to the graph, where it is refused
        ctx.where, ctx.shape, ctx.reduction = where, scores.shape, reduction
        ctx.gradient_buffer = call.module._gradient_buffer
        return out

    @staticmethod
    def backward(ctx, grad_output: torch.Tensor):
        upstream = grad_output.detach().double().cpu().numpy()
        # Scaled and cast to the scores' dtype in one pass (float32 for float16 / bfloat16, cast by torch).
        host_dtype = torch.float64 if ctx.saved_tensors[0].dtype == torch.float64 else torch.float32
        host = np.float64 if host_dtype == torch.float64 else np.float32
        if ctx.reduction == "none":  # each document's derivative times its own query's upstream gradient
            flat, factor = ctx.grad * upstream[ctx.query_of], 1.0
        else:
            flat, factor = ctx.grad, ctx.grad_scale * float(upstream)
        per_doc = ctx.where.scatter(flat, factor, host, ctx.gradient_buffer)
        (scores,) = ctx.saved_tensors
        grad = torch.from_numpy(per_doc.reshape(ctx.shape)).to(device=scores.device, dtype=scores.dtype)
        if torch.is_grad_enabled():  # create_graph=True: a second derivative may be asked for
            grad = _NoSecondDerivative.apply(grad, scores)
        return grad, None


class _NoSecondDerivative(torch.autograd.Function):
    """Identity whose own backward refuses: the hinge's Hessian is 0 almost everywhere."""

    @staticmethod
    def forward(ctx, grad: torch.Tensor, scores: torch.Tensor):
        return grad.clone()

    @staticmethod
    def backward(ctx, grad_output):
        raise RuntimeError(
            "RankHingeLoss has no second derivative to offer: the structured hinge is piecewise linear in the "
            "scores, so its second derivative is 0 almost everywhere (and undefined on the kinks); a double "
            "backward (create_graph=True, Hessian-vector products) would return zeros, so it is refused"
        )
