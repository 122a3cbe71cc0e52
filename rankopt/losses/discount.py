"""The position-discount family: Δ = 1 − Σ_{x∈P} D(ind(x)) / Σ_{i≤|P|} D(i).

NDCG with binary relevance is the member D(i) = 1/log2(1 + i).  With the
normaliser Z = Σ_{i≤|P|} D(i) (``qs-rank-losses`` Prop. 7):

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
from rankopt.losses.base import CompiledForm, KernelCode, RankLoss, pattern_counts


class PositionDiscountLoss(RankLoss):
    """Base class of losses given by a positive, decreasing, convex discount D."""

    @abc.abstractmethod
    def discount(self, positions: np.ndarray) -> np.ndarray:
        """D(positions), positions being 1-based ranks (float array)."""

    def discount_table(self, n: int) -> np.ndarray:
        """D(1), …, D(n) as float64, checked to be finite."""
        table = np.asarray(self.discount(np.arange(1, n + 1, dtype=np.float64)), dtype=np.float64)
        if table.shape != (n,) or not np.all(np.isfinite(table)):
            raise ValueError(
                f"{type(self).__name__}.discount must return {n} finite values for positions "
                f"1..{n}, got {table!r} instead"
            )
        return table

    def _normaliser(self, n_pos):
        # Cached per |P| so that delta_diff stays O(1) (condition C4).
        cache = self.__dict__.setdefault("_normaliser_cache", {})
        if n_pos not in cache:
            cache[n_pos] = float(np.sum(self.discount_table(n_pos)))
        return cache[n_pos]

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
        # The table has |P| + |N| entries (10⁶ logarithms for NDCG cost more
        # than the inference itself), and a training run asks for the same
        # sizes at every cutting-plane iteration: the last one is kept,
        # read-only.
        key = (n_pos, n_neg, tuple(sorted(self.get_params().items())))
        cached = self.__dict__.get("_compiled_form_cache")
        if cached is not None and cached[0] == key:
            return cached[1]
        discounts = self.discount_table(n_pos + n_neg)
        # Not in place: discount_table may return the plugin's own array.  The
        # name is rebound so that only two tables exist at once (this one and
        # CompiledForm's read-only copy, checked finite).
        discounts = discounts / discounts[:n_pos].sum()
        form = CompiledForm(KernelCode.POSITION_DISCOUNT, discounts)
        self.__dict__["_compiled_form_cache"] = (key, form)
        return form

    def __getstate__(self):
        # Caches are rebuilt on demand; a pickled loss should not carry a table of |P| + |N| values.
        return {k: v for k, v in self.__dict__.items() if not k.endswith("_cache")}


class NDCGLoss(PositionDiscountLoss):
    """1 − NDCG with binary relevance and the convex discount 1/log2(1 + i)."""

    name = "ndcg"

    def discount(self, positions):
        return 1.0 / np.log2(1.0 + np.asarray(positions, dtype=np.float64))


@hookimpl
def rankopt_losses():
    return [NDCGLoss]
