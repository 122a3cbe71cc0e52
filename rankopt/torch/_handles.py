"""The losses the torch layer's calls name by handle, and the host state their calls reuse.

An operator takes tensors, numbers and strings: a call names its loss by an integer (:func:`named_loss_handle` for a
name and its parameters, :func:`loss_handle` for an instance), which a tracer reads as a constant.
"""

from __future__ import annotations

import itertools
import pickle
import weakref

import torch

from rankopt.losses.base import RankLoss
from rankopt.torch._host import HingeConfig, HostState

__all__ = ["config", "loss_handle", "named_loss_handle", "resolved_loss"]

_LOSSES: dict[int, RankLoss] = {}
_HANDLES: dict[tuple, int] = {}
_STATES: dict[tuple, HostState] = {}
_NEXT_HANDLE = itertools.count()


@torch.compiler.assume_constant_result
def named_loss_handle(name: str, loss_params: tuple) -> int:
    """The handle of the loss ``name`` with ``loss_params`` ((name, value) pairs), built through the default
    registry on the first call.  Compiled code calls it once, when it is traced."""
    key: tuple = ("name", name, loss_params)
    try:
        held = _HANDLES.get(key)
    except TypeError:  # a parameter that cannot be hashed (an array): its loss is known by its bytes
        key = ("name", name, _parameter_bytes(loss_params))
        held = _HANDLES.get(key)
    if held is None:
        held = _HANDLES[key] = _new_handle(resolved_loss(name, dict(loss_params)))
    return held


@torch.compiler.disable
def loss_handle(loss: RankLoss) -> int:
    """The handle of a rank-loss instance (:func:`resolved_loss`'s), held as itself (its ``set_params`` is seen)
    for as long as it lives.  Not traced (an instance is no constant to a tracer): a module holds its loss's
    handle as an integer instead."""
    key = ("object", id(loss))
    held = _HANDLES.get(key)
    if held is None:
        held = _HANDLES[key] = _new_handle(loss)
        weakref.finalize(loss, _forget, key, held)  # the id may be reused once the loss is gone
    return held


def _new_handle(loss: RankLoss) -> int:
    handle = next(_NEXT_HANDLE)
    _LOSSES[handle] = loss
    return handle


@torch.compiler.disable
def resolved_loss(loss, loss_params: dict):
    """The rank loss ``loss`` names with ``loss_params`` (or is), through the default registry: never traced by
    ``torch.compile`` (the plugin machinery is not tensor code), so a layer made inside compiled code costs a
    graph break."""
    from rankopt.inference.batched import resolve_rank_loss
    from rankopt.plugins import default_registry

    registry = default_registry()
    return resolve_rank_loss(loss, registry, **loss_params)


def _parameter_bytes(loss_params: tuple) -> bytes:
    try:
        return pickle.dumps(loss_params)
    except Exception as exc:
        raise TypeError(
            "expected loss parameters that can be hashed or pickled, got ones that cannot be; pass the loss as an "
            "instance instead (rankopt.get_loss(name, ...))"
        ) from exc


def _forget(key: tuple, handle: int) -> None:
    _HANDLES.pop(key, None)
    _LOSSES.pop(handle, None)
    for options in [options for options in _STATES if options[0] == handle]:
        _STATES.pop(options, None)


def config(loss: int, reduction: str, relevant_from: int, n_threads: int | None, device: str) -> HingeConfig:
    """The call's loss and options, with the state its earlier calls left."""
    options = (loss, reduction, relevant_from, n_threads, device)
    state = _STATES.get(options)
    if state is None:
        state = _STATES[options] = HostState()
    return HingeConfig(_LOSSES[loss], relevant_from, reduction, n_threads, device, state)
