"""A padded batch's kept documents on the host: the flat layout the compiled kernels read, gathered from the
padded (B, L) arrays by the mask, and the gradient scattered back."""

from __future__ import annotations

import numpy as np

from rankopt._validation import check_grades
from rankopt.inference._batched import (
    gather_kept,
    gather_leading,
    kept_offsets,
    scale_into,
    scatter_kept,
    scatter_leading,
)
from rankopt.inference.kernel_base import ReusedOutput

__all__ = ["AllKept", "Kept"]


class AllKept:
    """The padded layout without a mask: every document of every row, the flat layout a reshape."""

    def gather(self, values: np.ndarray) -> np.ndarray:
        return values.reshape(-1)

    def scatter(self, flat: np.ndarray, factor: float, dtype, buffer: ReusedOutput) -> np.ndarray:
        """``flat · factor`` in ``dtype``, rounded once (the gradient, as a flat array)."""
        out = buffer.empty(flat.size, dtype)
        scale_into(np.ascontiguousarray(flat, dtype=np.float64), factor, out)
        return out


class Kept:
    """The documents a padded batch's mask keeps: the flat layout's offsets, and its gather and scatter, each
    one compiled pass over the mask (``_batched.kept_offsets``, ``gather_kept``, ``scatter_kept``), or over
    the offsets alone when every row keeps its first places (``leading``: ``gather_leading``,
    ``scatter_leading``); values of other dtypes than the compiled ones take NumPy's boolean indexing."""

    def __init__(self, mask: np.ndarray, offsets: np.ndarray | None = None, leading: bool = False):
        self.mask = np.ascontiguousarray(mask)
        self.bytes = self.mask.view(np.uint8)
        if offsets is None:  # not counted by a gather already
            offsets = np.empty(mask.shape[0] + 1, dtype=np.int64)
            kept_offsets(self.bytes, offsets)
        self.offsets, self.leading = offsets, leading
        self.n_kept = int(offsets[-1])

    @classmethod
    def with_grades(cls, mask: np.ndarray, labels: np.ndarray, narrow: bool) -> tuple[Kept, np.ndarray]:
        """The documents ``mask`` keeps and their labels checked as grades
        (:func:`~rankopt._validation.check_grades`).  Contiguous int64 labels, a training loop's usual ones,
        are gathered by a pass that also counts each row's kept documents, tells whether every row keeps its
        first places (the batch's later moves then skip the mask) and whether a label is negative (grades ≥ 0
        need no check of their own) and, with ``narrow``, as int8 when they all fit.  Boolean and uint8 labels
        (0/1 relevance, a metric-learning batch's "same label") are grades already, gathered as bytes."""
        mask = np.ascontiguousarray(mask)
        if labels.dtype in _BYTE_GRADES and labels.flags.c_contiguous:  # grades 0–255 already: a byte each
            offsets, leading = np.empty(mask.shape[0] + 1, dtype=np.int64), np.zeros(1, dtype=np.uint8)
            flat = gather_kept(labels.view(np.int8), mask.view(np.uint8), mask.size, None, False, offsets, leading)
            kept = cls(mask, offsets, bool(leading[0]))
            flat = flat[: kept.n_kept]
            if narrow and (labels.dtype == np.bool_ or flat.size == 0 or flat.min() >= 0):  # each below 128
                return kept, flat
            return kept, flat.view(np.uint8).astype(np.int64)
        if labels.dtype != np.int64 or not labels.flags.c_contiguous:
            kept = cls(mask)
            return kept, check_grades(kept.gather(labels), kept.n_kept)
        offsets, bits = np.empty(mask.shape[0] + 1, dtype=np.int64), np.zeros(1, dtype=np.int64)
        leading = np.zeros(1, dtype=np.uint8)
        flat = gather_kept(labels, mask.view(np.uint8), mask.size, bits, narrow, offsets, leading)
        kept = cls(mask, offsets, bool(leading[0]))
        flat = flat[: kept.n_kept]
        if narrow and not 0 <= bits[0] < 128:  # grades from 128 on, or negative labels: as they are
            flat = kept.gather(labels)
        return kept, flat if bits[0] >= 0 else check_grades(flat, kept.n_kept)

    def gather(self, values: np.ndarray) -> np.ndarray:
        if values.dtype in _GATHERED and values.flags.c_contiguous:
            if self.leading:
                return gather_leading(values, self.offsets)
            return gather_kept(values, self.bytes, self.n_kept)
        return values[self.mask]

    def scatter(self, flat: np.ndarray, factor: float, dtype, buffer: ReusedOutput) -> np.ndarray:
        """``flat · factor`` at the kept places and 0 elsewhere, in ``dtype`` (the padded gradient, flat)."""
        out = buffer.empty(self.mask.size, dtype)
        flat, padded = np.ascontiguousarray(flat, dtype=np.float64), out.reshape(self.mask.shape)
        if self.leading:
            scatter_leading(flat, factor, self.offsets, padded)
        else:
            scatter_kept(flat, factor, self.bytes, padded)
        return out


#: Labels that are grades as they are, a byte each (torch's boolean labels come as uint8: ``_inputs.py``).
_BYTE_GRADES = (np.dtype(np.bool_), np.dtype(np.uint8))
#: The dtypes ``_batched.gather_kept`` takes.
_GATHERED = (np.dtype(np.float32), np.dtype(np.float64), np.dtype(np.int64))
