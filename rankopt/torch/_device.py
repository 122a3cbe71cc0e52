"""The hinge on the tensor kernels (:mod:`rankopt.inference.tensor_kernels`), where the scores are.

The device is read once per call: the input checks' verdicts and every size the kernel needs from the data
(:meth:`~rankopt.inference.tensor_kernels.TensorKernel.facts`) travel home in one transfer.  A loss or layout
the tensor kernels cannot take runs on the compiled kernels instead, said once per loss type and reason.
"""

from __future__ import annotations

import logging

import numpy as np
import torch

from rankopt.hinge import reduce_hinges
from rankopt.inference.kernel_base import say_once
from rankopt.inference.tensor_kernels import TensorKernelUnsupported
from rankopt.torch._host import host_array, value_dtype

__all__ = ["tensor_hinges"]

logger = logging.getLogger("rankopt.torch")


def _fall_back(loss, reason: str) -> None:
    """Say once per loss type and reason that a call runs on the compiled (host) path instead."""
    message = "RankHingeLoss(%r): the tensor backend cannot take it (%s); running on the host"
    say_once(("on the host", type(loss), reason), logger, message, loss.name, reason)


def tensor_hinges(config, scores: torch.Tensor, y: torch.Tensor, mask, qid):
    """The operator's (value, coef, query_of) from the tensor kernel of the loss's structure, or None (logged)
    to run on the host."""
    from rankopt.inference.structure_table import kernel_for_loss
    from rankopt.losses.structure import check_declared_structure

    loss = config.loss
    if qid is not None:
        _fall_back(loss, "it takes the padded (B, L) layout, not qid or group")
        return None
    try:
        kernel, structure = kernel_for_loss(loss, device="torch" if config.device == "auto" else config.device)
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
    batch = _DeviceBatch(rows.detach(), y.reshape(rows.shape), mask)
    prepared = kernel.prepare(
        loss,
        structure,
        batch.grades,
        batch.mask,
        "auto",
        relevant_from=config.relevant_from,
        registry=None,
        verify=batch.read,
    )
    compute = torch.float64 if rows.dtype == torch.float64 else torch.float32
    try:
        hinges = prepared.hinges(rows.detach().to(compute))
    except TensorKernelUnsupported as exc:
        _fall_back(loss, str(exc))
        return None
    if config.reduction == "none":
        value, coef = hinges.values, hinges.coef
    else:
        total, factor = reduce_hinges(hinges.values.double(), hinges.usable, config.reduction)
        value, coef = total, hinges.coef * factor
    empty = torch.empty(0, dtype=torch.long, device=scores.device)
    return value.to(value_dtype(scores.dtype)), coef.reshape(scores.shape).contiguous(), empty


class _DeviceBatch:
    """A padded batch's labels and mask on the scores' device, checked where the mask keeps a document (finite
    scores whose sums stay finite, whole labels ≥ 0, or {−1, 1} read as {0, 1}) without reading the device:
    :meth:`read` brings the checks' verdicts home with whatever else the kernel needs, in one transfer."""

    def __init__(self, scores: torch.Tensor, y: torch.Tensor, mask):
        device = scores.device
        if mask is None:
            mask = torch.ones(scores.shape, dtype=torch.bool, device=device)
        labels = y.detach()
        integer = not (labels.is_floating_point() or labels.is_complex())
        if not integer:
            labels = labels.double()  # exact for every whole label below 2**53, and ordered beyond
        zero_label = torch.zeros((), dtype=labels.dtype, device=device)
        kept = torch.where(mask, labels, zero_label)
        kept_scores = torch.where(mask, scores, torch.zeros((), dtype=scores.dtype, device=device))
        lowest = kept.min()
        # The longest row's kept documents bound its score sums, as the host bounds a query's (not the padding's).
        longest = mask.sum(dim=1).max() if mask.shape[0] else torch.zeros((), device=device)
        checks = [mask.any(), kept_scores.abs().max(), lowest, (mask & (labels != 1) & (labels != -1)).any(), longest]
        if not integer:
            # Every float from 2**53 on is whole; below 2**63 it converts to int64 exactly, as on the host.
            whole = torch.isfinite(kept) & (kept == torch.round(kept)) & (kept.abs() < 2.0**63)
            checks.append(whole.all())
            # A label read() refuses (NaN, infinity, a fraction, 2**63 and beyond) is 0 until then: cast as it is,
            # it became a negative index the kernel's grade tables read out of bounds before the refusal.
            kept = torch.where(whole, kept, zero_label)
        self.checks = torch.stack([c.double() for c in checks])
        # {−1, 1} labels read as {0, 1}; an invalid label gives garbage here, refused by read() before use.
        self.grades = torch.where(lowest < 0, (kept > 0).long(), kept.long())
        self.mask, self._labels = mask, y.detach()
        self.score_dtype = np.float64 if scores.dtype == torch.float64 else np.float32

    def read(self, facts: torch.Tensor | None) -> np.ndarray | None:
        """The one transfer from the device: the checks (a ValueError for a refused batch) and ``facts``."""
        from rankopt._validation import (
            check_grades,
            negative_grade_error,
            not_finite_error,
            nothing_kept_error,
            score_sum_bound,
            score_sums_error,
        )

        values = self.checks if facts is None else torch.cat((self.checks, facts.double().reshape(-1)))
        host = np.asarray(values.tolist())  # the read
        any_kept, largest, lowest, not_binary, longest, *whole = host[: self.checks.shape[0]].tolist()
        if not any_kept:
            raise nothing_kept_error()
        if not np.isfinite(largest):
            raise not_finite_error("scores")
        if largest * longest > score_sum_bound(self.score_dtype):
            raise score_sums_error(largest, int(longest), self.score_dtype)
        if whole and not whole[0]:
            # A refused batch is read again, to name the first bad label as the host does.
            check_grades(host_array(self._labels)[host_array(self.mask)], name="y")
            raise ValueError(
                "expected y to hold integer relevance grades >= 0 that fit in 64-bit integers, got NaN, infinity, "
                "fractions or grades from 2**63 on instead"
            )
        if lowest < 0 and not_binary:
            raise negative_grade_error("y", f"{lowest:g}")
        return None if facts is None else host[self.checks.shape[0] :]
