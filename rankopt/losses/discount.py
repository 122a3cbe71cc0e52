"""The position-discount family: Δ = 1 − Σ_{x∈P} D(ind(x)) / Σ_{i≤|P|} D(i).

NDCG with binary relevance is the member D(i) = 1/log2(1 + i).  With the
normaliser Z = Σ_{i≤|P|} D(i) (Mohapatra et al. (2018) Prop. 7):

    δ_j(i) = (D(i + j − 1) − D(|P| + j)) / Z,
    δ_j(i + 1) − δ_j(i) = (D(i + j) − D(i + j − 1)) / Z.

C3 holds exactly when D is convex (Remark 1: the Chakrabarti et al. discount,
flat on {1, 2}, breaks it).  A subclass supplies only :meth:`discount`; the
compiled kernels read the table D(1…|P|+|N|) and never call back into Python.
"""

from __future__ import annotations

import abc

import numpy as np

from rankopt.hookspecs import hookimpl
from rankopt.losses.base import _TABLE_RTOL, CompiledForm, KernelCode, KeyedCache, RankLoss, pattern_counts

__all__ = ["NDCGLoss", "PositionDiscountLoss"]

#: Compiled forms of position-discount losses, keyed by (loss parameters, |P|, |N|) and shared by
#: equal losses: a training run — or a caller passing the loss by name, which builds a new
#: instance each call — asks for the same sizes at every iteration, and the table of |P| + |N|
#: discounts (10⁶ logarithms for NDCG) costs more than the inference itself.  Bounded to a few
#: tables' worth of memory.
_COMPILED_FORMS = KeyedCache(max_entries=256, max_weight=64e6, weight=lambda form: form.table.nbytes)
#: Normalisers Σ_{i≤|P|} D(i), keyed by (loss parameters, |P|): delta_diff stays O(1) (C4).
_NORMALISERS = KeyedCache(max_entries=4096)


class PositionDiscountLoss(RankLoss):
    """Base class of losses given by a positive, decreasing, convex discount D.

    The contract — D finite, non-negative and non-increasing, D(1) > 0 — is
    checked on every table rankopt builds, that is on exactly the positions
    1…|P|+|N| a call uses (values that underflow to 0.0 far down are
    fine).  Convexity is condition C3: where D bends down, the greedy and
    quicksort-flavoured methods refuse the call and ``method="auto"`` runs an
    exact general method instead (precision@k is such a loss).
    """

    @abc.abstractmethod
    def discount(self, positions: np.ndarray) -> np.ndarray:
        """D(positions), positions being 1-based ranks (float array)."""

    def discount_table(self, n: int) -> np.ndarray:
        """D(1), …, D(n) as float64, checked to be finite, non-negative and non-increasing."""
        table = np.asarray(self.discount(np.arange(1, n + 1, dtype=np.float64)), dtype=np.float64)
        problem = _discount_table_problem(table, n)
        if problem is not None:
            raise ValueError(
                f"expected {type(self).__qualname__}.discount (loss {self.name!r}) to return finite, "
                f"non-negative, non-increasing values for positions 1..{n}, got {problem} instead"
            )
        return table

    def _normaliser(self, n_pos):
        return _NORMALISERS.get_or_build(_sized_key(self, n_pos), lambda: self._build_normaliser(n_pos))

    def _build_normaliser(self, n_pos) -> float:
        total = float(np.sum(self.discount_table(n_pos)))
        if not total > 0:
            raise ValueError(
                f"expected {type(self).__qualname__}.discount (loss {self.name!r}) to be positive at "
                f"position 1, got D(1) + … + D({n_pos}) = {total!r} instead"
            )
        return total

    def value(self, pattern):
        return self.value_at_positions(*pattern_counts(pattern))

    def value_at_positions(self, positions, n_neg):
        gain = np.sum(self.discount(np.asarray(positions, dtype=np.float64)))
        return float(1.0 - gain / self._normaliser(positions.size))

    def delta(self, j, i, n_pos, n_neg):
        j = np.asarray(j, dtype=np.float64)
        i = np.asarray(i, dtype=np.float64)
        return (self.discount(i + j - 1.0) - self.discount(n_pos + j)) / self._normaliser(n_pos)

    def delta_diff(self, j, i, n_pos, n_neg):
        j = np.asarray(j, dtype=np.float64)
        i = np.asarray(i, dtype=np.float64)
        return (self.discount(i + j) - self.discount(i + j - 1.0)) / self._normaliser(n_pos)

    def compiled_form(self, n_pos, n_neg):
        # Shared by every loss with equal parameters, built (and checked) once per size.
        return _COMPILED_FORMS.get_or_build(
            _sized_key(self, n_pos, n_neg), lambda: self._build_compiled_form(n_pos, n_neg)
        )

    def _build_compiled_form(self, n_pos, n_neg) -> CompiledForm:
        discounts = self.discount_table(n_pos + n_neg)
        normaliser = float(discounts[:n_pos].sum())
        if not normaliser > 0:
            raise ValueError(
                f"expected {type(self).__qualname__}.discount (loss {self.name!r}) to be positive at "
                f"position 1, got D(1) + … + D({n_pos}) = {normaliser!r} instead"
            )
        # Not in place: discount_table may return the plugin's own array.  The
        # name is rebound so that only two tables exist at once (this one and
        # CompiledForm's read-only copy).
        discounts = discounts / normaliser
        return CompiledForm(KernelCode.POSITION_DISCOUNT, discounts)


def _sized_key(loss, *sizes):
    key = loss.cache_key()
    return None if key is None else (key, *sizes)


def _discount_table_problem(table: np.ndarray, n: int) -> str | None:
    """What breaks the discount contract in ``table`` = D(1…n), briefly, or None."""
    if table.shape != (n,):
        return f"an array of shape {table.shape} (expected ({n},))"
    finite = np.isfinite(table)
    if not finite.all():
        k = int(np.argmin(finite))
        return f"D({k + 1}) = {float(table[k])!r}"
    negative = table < 0
    if negative.any():
        k = int(np.argmax(negative))
        return f"D({k + 1}) = {float(table[k])!r}"
    rises = table[1:] - table[:-1] > _TABLE_RTOL * table[:-1]
    if rises.any():
        k = int(np.argmax(rises))
        return f"D({k + 1}) = {float(table[k])!r} < D({k + 2}) = {float(table[k + 1])!r}"
    return None


class NDCGLoss(PositionDiscountLoss):
    """1 − NDCG with binary relevance and the convex discount 1/log2(1 + i)."""

    name = "ndcg"

    def discount(self, positions):
        return 1.0 / np.log2(1.0 + np.asarray(positions, dtype=np.float64))


@hookimpl
def rankopt_losses():
    return [NDCGLoss]
