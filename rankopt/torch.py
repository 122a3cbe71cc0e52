"""A structured-hinge loss layer for PyTorch rankers: any registered rank loss, exact inference.

``RankHingeLoss(loss)`` is :func:`rankopt.structured_hinge` as a ``torch.nn.Module``: the forward pass
computes each query's structured hinge h(s) = max_R [Δ(R*, R) + Σ_i (c_i(R) − c_i(R*)) s_i] with the
compiled batched loss-augmented inference (threads, no Python loop over queries), and the backward pass
returns the exact subgradient c(R̂) − c(R*), scaled like the reduction.  The loss is any registered rank
loss — AP, NDCG, ROC area, precision at k, graded NDCG@k, pairwise, a plugin's.

Inference runs on the CPU: CUDA (or other device) scores are copied to the host once per call and the
gradient copied back to their device, in their dtype.  float16 and bfloat16 scores are computed in
float32.  Importing :mod:`rankopt` never imports torch; this module does (the ``rankopt[torch]`` extra).

The hinge is piecewise linear in the scores: its second derivative is 0 almost everywhere, and a double
backward is refused with that reason rather than returning zeros silently.
"""

from __future__ import annotations

import numpy as np
import torch

from rankopt.hinge import REDUCTIONS, hinge_per_query, reduce_hinges

__all__ = ["RankHingeLoss"]

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
        Threads of the inference (default: ``OMP_NUM_THREADS``, else every core).
    **loss_params
        Parameters of a loss given by name, e.g. ``RankHingeLoss("ndcg_graded", k=5)``.

    Calling it:

    * flat layout, like ``RankSVM.fit``: ``loss_fn(scores, y, qid=None, group=None)`` with 1-D scores;
    * padded list layout, as neural LTR libraries use: ``loss_fn(scores, y, mask=None)`` with
      scores and y of shape (B, L), each row one query, ``mask`` True for the real documents.
    """

    def __init__(self, loss="ap", *, relevant_at=1, reduction="mean", n_threads=None, **loss_params):
        super().__init__()
        from rankopt.plugins import default_registry

        if reduction not in REDUCTIONS:
            raise ValueError(f"expected reduction to be one of {list(REDUCTIONS)}, got {reduction!r} instead")
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

    def extra_repr(self) -> str:
        return f"loss={self.rank_loss!r}, reduction={self.reduction!r}"

    def forward(self, scores: torch.Tensor, y, qid=None, group=None, mask=None) -> torch.Tensor:
        if not isinstance(scores, torch.Tensor):
            raise TypeError(f"expected scores to be a torch.Tensor, got {type(scores).__name__} instead")
        if scores.dtype not in _FLOAT_DTYPES:
            raise TypeError(f"expected floating-point scores (float16/bfloat16/float32/float64), got {scores.dtype}")
        if scores.dim() == 2:
            if qid is not None or group is not None:
                raise ValueError(
                    "expected qid and group only with 1-D scores; in the padded (B, L) layout each row is a query"
                )
            return _StructuredHinge.apply(scores, _Call(self, y, None, None, mask))
        if scores.dim() != 1:
            raise ValueError(f"expected scores of shape (n,) or (B, L), got shape {tuple(scores.shape)} instead")
        if mask is not None:
            raise ValueError("expected mask only with the padded (B, L) layout, got it with 1-D scores")
        return _StructuredHinge.apply(scores, _Call(self, y, qid, group, None))


class _Call:
    """One forward call's arguments, checked and moved to the host."""

    def __init__(self, module: RankHingeLoss, y, qid, group, mask):
        self.module, self.y, self.qid, self.group, self.mask = module, y, qid, group, mask

    def host(self, scores: torch.Tensor):
        """(flat scores, grades, qid, group, where the flat documents sit in the padded input), on the host.

        The last is an index array, a slice (no mask) or None (the flat layout).  The scores are copied
        to the host once; float16 and bfloat16 become float32 there.
        """
        y = _host_array(self.y, scores, "y")
        detached = scores.detach()
        if detached.dtype in (torch.float16, torch.bfloat16):
            detached = detached.float()
        s = detached.cpu().numpy()
        if s.ndim == 1:
            if y is None or y.shape != s.shape:
                raise ValueError(f"expected y of shape {s.shape} (one label per score), got {_shape(y)} instead")
            return s, y, _host_array(self.qid, scores, "qid"), _host_array(self.group, scores, "group"), None
        if y is None or y.shape != s.shape:
            raise ValueError(f"expected y of shape {s.shape} (the scores' padded layout), got {_shape(y)} instead")
        if self.mask is None:  # every document of every row: no gather
            rows = np.repeat(np.arange(s.shape[0]), s.shape[1])
            return s.ravel(), y.ravel(), rows, None, slice(None)
        mask = _host_array(self.mask, scores, "mask")
        if mask.shape != s.shape or mask.dtype != np.bool_:
            raise ValueError(
                f"expected a boolean mask of shape {s.shape}, got {mask.dtype} of shape {mask.shape} instead"
            )
        if not mask.any():
            raise ValueError("expected mask to keep some document, got a mask that is False everywhere instead")
        where = np.flatnonzero(mask.ravel())
        rows = where // s.shape[1]
        return s.ravel()[where], y.ravel()[where], rows, None, where


def _shape(value) -> str:
    return "None" if value is None else str(value.shape)


def _host_array(value, scores: torch.Tensor, name: str):
    """``value`` as a NumPy array; a tensor must live on the scores' device."""
    if value is None:
        return None
    if isinstance(value, torch.Tensor):
        if value.device != scores.device:
            raise ValueError(f"expected {name} on the scores' device {scores.device}, got it on {value.device} instead")
        return value.detach().cpu().numpy()
    return np.asarray(value)


class _StructuredHinge(torch.autograd.Function):
    @staticmethod
    def forward(ctx, scores: torch.Tensor, call: _Call):
        module = call.module
        flat, grades, qid, group, where = call.host(scores)
        per_query = hinge_per_query(
            flat,
            grades,
            qid=qid,
            group=group,
            loss=module.rank_loss,
            relevant_at=module.relevant_at,
            n_threads=module.n_threads,
        )
        grad, query_of = per_query.grad, per_query.query_of
        if module.reduction == "none":
            values = per_query.values
            if where is not None:  # one value per row of the padded layout, 0 for a row without documents
                rows = qid  # each document's row, increasing
                by_row = np.zeros(scores.shape[0])
                by_row[rows[np.flatnonzero(np.diff(rows, prepend=-1))]] = values
                values, query_of = by_row, rows
            out = torch.as_tensor(values, dtype=scores.dtype, device=scores.device)
        else:
            total, grad = reduce_hinges(per_query, module.reduction)
            out = torch.tensor(total, dtype=scores.dtype, device=scores.device)
        ctx.save_for_backward(scores)  # only to tie a double backward to the graph, where it is refused
        ctx.grad, ctx.query_of, ctx.where, ctx.shape = grad, query_of, where, scores.shape
        ctx.reduction, ctx.dtype, ctx.device = module.reduction, scores.dtype, scores.device
        return out

    @staticmethod
    def backward(ctx, grad_output: torch.Tensor):
        upstream = grad_output.detach().double().cpu().numpy()
        if ctx.reduction == "none":
            per_doc = ctx.grad * upstream[ctx.query_of]
        else:
            per_doc = ctx.grad * float(upstream)
        if ctx.where is not None:
            full = np.zeros(int(np.prod(ctx.shape)))
            full[ctx.where] = per_doc
            per_doc = full.reshape(ctx.shape)
        grad = torch.as_tensor(per_doc, dtype=ctx.dtype, device=ctx.device)
        if torch.is_grad_enabled():  # create_graph=True: a second derivative may be asked for
            (scores,) = ctx.saved_tensors
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
