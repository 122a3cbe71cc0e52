"""The structured hinge as one PyTorch operator, ``torch.ops.rankopt.rank_hinge``, in eager and compiled code.

``torch.compile`` traces PyTorch code; the hinge's inference is compiled code on the host, or tensor kernels
chosen through the plugin registry and the structure table, none of which a tracer should walk into.
Registered with :mod:`torch.library` as a custom operator, with a fake-tensor implementation (the outputs'
shapes and dtypes from the inputs alone) and its autograd formula, the hinge is one node of a compiled graph,
and eager calls run the same operator.

An operator takes tensors, numbers and strings, so a call names its loss by an integer handle
(:func:`loss_handle`) and passes its options as they are: the same loss keeps its handle, so a compiled graph
stays valid; another loss, or other options, are other constants, and the graph is recompiled for them.

The operator returns the reduced value, its gradient for an upstream gradient of 1 (``coef``, in the dtype
the gradient is computed in) and, for the flat layout with query ids and no reduction, each document's query;
the backward scales ``coef`` by the upstream gradient, a multiplication skipped in eager host calls when that
gradient is 1 (a loss backpropagated as it is).
"""

from __future__ import annotations

import torch
from torch.autograd import forward_ad

from rankopt.torch import _device, _host
from rankopt.torch._handles import config
from rankopt.torch._host import runs_on_host

__all__ = ["rank_hinge_call", "rank_hinge_op"]


def _hinges(scores, y, mask, qid, loss, reduction, relevant_from, n_threads, device):
    """The operator's implementation: the tensor kernels where they take the call, else the compiled ones."""
    held = config(loss, reduction, relevant_from, n_threads, device)
    if not held.runs_on_host(scores):
        result = _device.tensor_hinges(held, scores, y, mask, qid)
        if result is not None:
            return result
    return _host.host_hinges(held, scores, y, mask, qid)


@torch.library.custom_op("rankopt::rank_hinge", mutates_args=())
def rank_hinge_op(
    scores: torch.Tensor,
    y: torch.Tensor,
    mask: torch.Tensor | None,
    qid: torch.Tensor | None,
    loss: int,
    reduction: str,
    relevant_from: int,
    n_threads: int | None,
    device: str,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(value, coef, query_of) of the hinge: the arguments are checked (:mod:`rankopt.torch.functional`)."""
    return _hinges(scores, y, mask, qid, loss, reduction, relevant_from, n_threads, device)


@rank_hinge_op.register_fake
def _(scores, y, mask, qid, loss, reduction, relevant_from, n_threads, device):
    by_query = reduction == "none" and qid is not None
    if reduction != "none":
        value = scores.new_empty((), dtype=_host.value_dtype(scores.dtype))
    elif by_query:
        value = scores.new_empty((torch.library.get_ctx().new_dynamic_size(),), dtype=_host.value_dtype(scores.dtype))
    else:
        value = scores.new_empty((scores.shape[0] if scores.dim() == 2 else 1,), dtype=_host.value_dtype(scores.dtype))
    coef = torch.empty_like(scores, dtype=_host.gradient_dtype(scores.dtype))
    query_of = scores.new_empty((scores.shape[0] if by_query else 0,), dtype=torch.long)
    return value, coef, query_of


def _setup_context(ctx, inputs, output) -> None:
    scores, _, _, _, _, reduction, _, _, device = inputs
    _, coef, query_of = output
    ctx.save_for_backward(scores, coef, query_of)
    # coef and query_of are the backward's own inputs, never differentiated: no zero gradients made for them.
    # (Not marked non-differentiable: the mark would keep them, and the gradient buffer they use, alive with
    # the graph after the backward, and the next call could not reuse the buffer.)
    ctx.set_materialize_grads(False)
    ctx.reduction, ctx.on_host = reduction, runs_on_host(device, scores)


def _backward(ctx, upstream, _coef_grad, _query_grad):
    scores, coef, query_of = ctx.saved_tensors
    if upstream is None:  # the value was not used
        return (None,) * 9
    if ctx.reduction != "none":
        factor = upstream
    elif scores.dim() == 2:
        factor = upstream[:, None]
    else:  # one flat query (one value), or each document's query
        factor = upstream[query_of] if query_of.numel() else upstream
    if ctx.on_host and _is_one(factor):
        # A loss backpropagated as it is: its gradient is coef, already in its final rounding; a new tensor
        # over its memory, which a leaf's .grad can take as it is rather than copy.
        grad = coef.detach()
    else:
        grad = coef * factor.to(coef.dtype)
    grad = grad.to(scores.dtype)
    if torch.is_grad_enabled():  # create_graph=True: a second derivative may be asked for
        grad = _NoSecondDerivative.apply(grad, scores)
    return (grad, *(None,) * 8)


def _is_one(factor: torch.Tensor) -> bool:
    """Whether an upstream gradient on the host is the scalar 1, read only where reading costs nothing: a plain
    tensor (a tracer's fake or functional tensors are subclasses, whose value is unknown) on the CPU."""
    return (
        type(factor) is torch.Tensor
        and not torch.compiler.is_compiling()
        and not torch._C._are_functorch_transforms_active()  # vmap's batched tensors are plain ones to Python
        and factor.dim() == 0
        and factor.device.type == "cpu"
        and factor.item() == 1.0
    )


torch.library.register_autograd("rankopt::rank_hinge", _backward, setup_context=_setup_context)


class _EagerHinge(torch.autograd.Function):
    """The operator's implementation and autograd formula, called directly where nothing traces the call: the
    same code as ``torch.ops.rankopt.rank_hinge`` without the dispatcher's layers (tens of microseconds a
    call, which a training loop's step pays every time)."""

    @staticmethod
    def forward(ctx, *inputs):
        # forward(ctx, ...) rather than a separate setup_context, which costs an inspect.signature per call;
        # functorch transforms, which need the latter, take the operator instead (rank_hinge_call).
        output = _hinges(*inputs)
        _setup_context(ctx, inputs, output)
        return output

    @staticmethod
    def backward(ctx, *grads):
        return _backward(ctx, *grads)


class _TransformedHinge(torch.autograd.Function):
    """The operator under a ``torch.func`` transform or ``torch.autograd.forward_ad``: ``grad``, ``jacrev`` and
    ``vjp`` take its backward, ``jvp``, ``jacfwd`` and dual numbers its forward-mode derivative (the same
    subgradient, applied to a tangent: the operator alone gave zero tangents), ``vmap`` the operator's own rule."""

    generate_vmap_rule = True

    @staticmethod
    def forward(*inputs):
        return rank_hinge_op(*inputs)

    @staticmethod
    def setup_context(ctx, inputs, output):
        _setup_context(ctx, inputs, output)
        _save_for_forward(ctx, inputs, output)
        ctx.mark_non_differentiable(*output[1:])

    @staticmethod
    def backward(ctx, *grads):
        return _backward(ctx, *grads)

    @staticmethod
    def jvp(ctx, scores_tangent, *_):
        return _jvp(ctx, scores_tangent)


def _save_for_forward(ctx, inputs, output) -> None:
    value, coef, query_of = output
    ctx.save_for_forward(coef, query_of)
    ctx.flat, ctx.n_values = inputs[0].dim() == 1, value.shape[0] if value.dim() else 0


def _jvp(ctx, scores_tangent):
    """The forward-mode derivative: the backward's subgradient applied to the scores' tangent, reduced as the
    value is (a scalar, one value per row, per query id, or the one flat query's)."""
    coef, query_of = ctx.saved_tensors  # in forward mode, what save_for_forward kept
    terms = coef * scores_tangent.to(coef.dtype)
    if ctx.reduction != "none":
        tangent = terms.sum()
    elif not ctx.flat:
        tangent = terms.sum(dim=1)
    elif query_of.numel():  # each query's value: the terms of its documents
        tangent = terms.new_zeros(ctx.n_values).index_add_(0, query_of, terms)
    else:  # one flat query: one value
        tangent = terms.sum().reshape(1)
    return tangent.to(_host.value_dtype(scores_tangent.dtype)), None, None


def rank_hinge_call(*inputs):
    """The hinge's (value, coef, query_of): the custom operator where ``torch.compile`` or another tracer sees
    the call, the operator with its derivatives under a ``torch.func`` transform, and its implementation directly
    in plain eager code."""
    if torch.compiler.is_compiling():
        return rank_hinge_op(*inputs)
    if torch._C._are_functorch_transforms_active() or forward_ad._current_level >= 0:  # a transform, dual numbers
        return _TransformedHinge.apply(*inputs)
    if _traced(inputs[:4]):
        return rank_hinge_op(*inputs)
    return _EagerHinge.apply(*inputs)


def _traced(tensors) -> bool:
    """Whether a tracer sees the call: a tensor is a tracer's subclass (fake, functional).  (A torch.func
    transform, whose batched tensors are plain ones to Python, is told by its own flag in rank_hinge_call.)"""
    return any(t is not None and type(t) not in (torch.Tensor, torch.nn.Parameter) for t in tensors)


@rank_hinge_op.register_vmap
def _vmap(info, in_dims, scores, y, mask, qid, *options):
    """``torch.func.vmap``: the operator on each slice in turn (a batch of queries is already the padded
    layout's rows; vmap over it is for code written one batch at a time)."""
    tensors = (scores, y, mask, qid)

    def one(index: int):
        sliced = (t if d is None else t.select(d, index) for t, d in zip(tensors, in_dims[:4], strict=True))
        return rank_hinge_op(*sliced, *options)

    slices = [one(index) for index in range(info.batch_size)]
    return tuple(torch.stack(parts) for parts in zip(*slices, strict=True)), (0, 0, 0)


class _NoSecondDerivative(torch.autograd.Function):
    """Identity whose own backward refuses: the hinge's Hessian is 0 almost everywhere.  (A separate
    ``setup_context``, so that ``torch.func.grad`` and its kin take it.)"""

    generate_vmap_rule = True

    @staticmethod
    def forward(grad: torch.Tensor, scores: torch.Tensor):
        return grad.clone()

    @staticmethod
    def setup_context(ctx, inputs, output):
        pass

    @staticmethod
    def backward(ctx, grad_output):
        raise RuntimeError(
            "RankHingeLoss has no second derivative to offer: the structured hinge is piecewise linear in the "
            "scores, so its second derivative is 0 almost everywhere (and undefined on the kinks); a double "
            "backward (create_graph=True, Hessian-vector products) would return zeros, so it is refused"
        )
