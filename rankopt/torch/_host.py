"""The hinge on the compiled kernels: the scores copied to the host once, the gradient copied back.

The padded layout's labels are checked and prepared once for as long as the same, unmodified label and mask
tensors come back (:class:`PreparedBatch`), and only the documents the mask keeps are read: padding may hold
anything.  The gradient is computed in float64 and rounded once into the dtype the layer returns it in.
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass, field

import numpy as np
import torch

from rankopt._validation import as_float_vector, check_grades, nothing_kept_error
from rankopt.hinge import hinge_per_query, prepare_hinges, prepared_hinges, reduce_hinges
from rankopt.inference.kernel_base import ReusedOutput
from rankopt.inference.structure_table import device_array_type, kernel_for_loss
from rankopt.losses.base import RankLoss
from rankopt.torch._padded import AllKept, Kept

__all__ = ["HingeConfig", "HostState", "PreparedBatch", "gradient_dtype", "host_hinges", "runs_on_host", "value_dtype"]


def value_dtype(scores_dtype: torch.dtype) -> torch.dtype:
    """The dtype of the loss value: the scores' own, but float32 for float16 and bfloat16 scores, whose
    hinge (a sum over a query, a mean over queries) can exceed float16's 65504 and would read inf."""
    return torch.float32 if scores_dtype in (torch.float16, torch.bfloat16) else scores_dtype


def gradient_dtype(scores_dtype: torch.dtype) -> torch.dtype:
    """The dtype the gradient is rounded into before the scores' own: float64 or float32."""
    return torch.float64 if scores_dtype == torch.float64 else torch.float32


def host_hinges(config, scores: torch.Tensor, y: torch.Tensor, mask, qid):
    """The operator's (value, coef, query_of) on the compiled kernels (:mod:`rankopt.torch._op`)."""
    detached = scores.detach()
    if detached.dtype in (torch.float16, torch.bfloat16):
        detached = detached.float()
    s = detached.cpu().numpy()
    if s.ndim == 1:
        per_query = hinge_per_query(
            s,
            host_array(y),
            qid=None if qid is None else qid.numpy(),
            loss=config.loss,
            relevant_at=config.relevant_from,
            n_threads=config.n_threads,
            device=config.host_device,
        )
        where = AllKept()
    else:
        prepared, where = config.prepared.get(y, mask, config, lambda: _prepare(config, y, mask, s.shape))
        # Only the kept documents are read and checked, once, by the prepared batch's own check.
        flat = as_float_vector(where.gather(s), "scores", scan=False)
        per_query = prepared_hinges(prepared, flat, config.n_threads)
    host = np.float64 if scores.dtype == torch.float64 else np.float32
    out = value_dtype(scores.dtype)
    if config.reduction == "none":  # one value per query: per row of the padded layout, per qid of the flat one
        value = torch.as_tensor(per_query.values, dtype=out)
        factor, by_query = 1.0, qid is not None
    else:
        total, factor = reduce_hinges(per_query.values, per_query.usable, config.reduction)
        value, by_query = torch.tensor(float(total), dtype=out), False
    coef = torch.from_numpy(where.scatter(per_query.grad, float(factor), host, config.gradient_buffer))
    query_of = torch.from_numpy(per_query.query_of()) if by_query else torch.empty(0, dtype=torch.long)
    device = scores.device
    return value.to(device), coef.reshape(scores.shape).to(device), query_of.to(device)


def _prepare(config, y: torch.Tensor, mask, shape) -> tuple:
    """The padded batch's labels checked and prepared (:func:`rankopt.hinge.prepare_hinges`), and where its
    kept documents sit in the flat scores."""
    options = dict(loss=config.loss, relevant_at=config.relevant_from, device=config.host_device)
    labels = host_array(y)
    n_rows, width = shape
    if mask is None:  # every document of every row: no gather
        offsets = np.arange(n_rows + 1, dtype=np.int64) * width
        return prepare_hinges(check_grades(labels.reshape(-1), n_rows * width), offsets, **options), AllKept()
    # Labels as narrow as the host kernel takes them: int8 for a binary loss's when they fit.
    narrow = np.dtype(np.int8) in kernel_for_loss(config.loss, config.host_device)[0].label_dtypes
    kept, grades = Kept.with_grades(host_array(mask), labels, narrow)
    if kept.n_kept == 0:
        raise nothing_kept_error()
    return prepare_hinges(grades, kept.offsets, **options), kept


class PreparedBatch:
    """The last padded batch's prepared labels, kept while its label and mask tensors stay the same objects,
    unmodified (torch's version counters), with the same shape, loss parameters and ``relevant_at``: a loop
    over a fixed batch checks and prepares its labels once, as
    :class:`rankopt.inference.batched.PreparedRankings` is meant to be used.  The entry refers to the tensors
    by weak reference, and is read and replaced as one tuple, so that threads sharing it never pair one
    batch's key with another's preparation."""

    def __init__(self):
        self._entry: tuple | None = None

    def get(self, y: torch.Tensor, mask, config, build):
        """The prepared batch for these labels, built by ``build()`` unless the last one still holds."""
        loss_key = config.loss.cache_key()
        if loss_key is None:  # a loss whose parameters cannot be snapshotted: never reuse
            return build()
        if y.is_inference() or (mask is not None and mask.is_inference()):
            # Made under torch.inference_mode (an evaluation loop's): no version counter tells an in-place
            # change, so such a batch is prepared at every call.
            return build()
        # The loss's parameters by value: set_params between calls must not find the old preparation.
        key = (y._version, tuple(y.shape), None if mask is None else mask._version, loss_key, config.relevant_from)
        held = self._entry
        if (
            held is not None
            and held[0]() is y
            and (mask is None) == (held[1] is None)
            and (mask is None or held[1]() is mask)
            and held[2] == key
        ):
            return held[3]
        # The last batch's preparation goes before this one is built: its arrays (labels, levels, gains: megabytes
        # at a training loop's sizes) are freed first, and the new ones reuse their memory instead of the
        # operating system's fresh pages.
        held = self._entry = None
        value = build()
        self._entry = (weakref.ref(y), None if mask is None else weakref.ref(mask), key, value)
        return value


def host_array(value: torch.Tensor) -> np.ndarray:
    """A tensor's values as a NumPy array on the host (float16 and bfloat16 through float32, which holds both
    exactly: NumPy has no bfloat16)."""
    value = value.detach()
    if value.dtype in (torch.float16, torch.bfloat16):
        value = value.float()
    return value.cpu().numpy()


@dataclass(eq=False)
class HostState:
    """What the calls of one loss and options reuse between them: the last padded batch's preparation and the
    gradient's memory."""

    prepared: PreparedBatch = field(default_factory=lambda: PreparedBatch())
    gradient_buffer: ReusedOutput = field(default_factory=ReusedOutput)


@dataclass(frozen=True)
class HingeConfig:
    """One call's loss and options, as the operator's implementations read them."""

    loss: RankLoss
    relevant_from: int
    reduction: str
    n_threads: int | None
    device: str
    state: HostState

    @property
    def prepared(self) -> PreparedBatch:
        return self.state.prepared

    @property
    def gradient_buffer(self) -> ReusedOutput:
        return self.state.gradient_buffer

    @property
    def host_device(self) -> str:
        """The device whose NumPy kernels the host path runs: the one named if its kernels take NumPy arrays,
        else "cpu" (the compiled kernels: "auto", and a tensor device handing a call back)."""
        if self.device != "auto" and device_array_type(self.device) == "numpy":
            return self.device
        return "cpu"

    def runs_on_host(self, scores: torch.Tensor) -> bool:
        """Whether a call with these scores starts on the compiled kernels (the tensor kernels may still hand
        it back: :func:`rankopt.torch._device.tensor_hinges`)."""
        return runs_on_host(self.device, scores)


def runs_on_host(device: str, scores: torch.Tensor) -> bool:
    """Whether a call on ``device`` starts on the host: "auto" with CPU scores, or a device whose kernels take
    NumPy arrays ("cpu", the compiled kernels; any other such device registered)."""
    if device == "auto":
        return scores.device.type == "cpu"
    return device_array_type(device) == "numpy"
