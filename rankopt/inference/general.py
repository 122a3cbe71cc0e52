"""The dynamic-programming method "dp": exact for every loss satisfying C1 and C2.

Greedy and quicksort-flavoured inference need C3 (Observation 4: each
negative's own best rank is non-decreasing in j).  Without C3 — precision@k,
position discounts that are not convex — the optimum over non-decreasing rank
vectors r₁ ≤ … ≤ r_|N| of Σ_j f_j(r_j) (Observations 1–3) is still found by
dynamic programming over j:

    F_j(i) = f_j(i) + max_{i' ≤ i} F_{j−1}(i'),

O(|P||N|) time.  Recovering the argmax from one forward pass would need an
|N| × (|P|+1) table of back-pointers; instead the rank vector is found by
divide and conquer over j (Hirschberg's trick): a forward pass to the middle
negative and a backward pass from the end fix the middle negative's rank,
which splits the rank interval of the two halves, so each level costs half
the previous one and the total stays O(|P||N|).  Sub-problems whose table
fits in ``memory_budget`` numbers are solved directly with the table, so the
extra memory is O(|P| + |N|) plus that fixed budget.

``delta_diff`` is called from NumPy for blocks of negatives at a time; the
recursion itself loops over the negatives in Python, so the method suits
problems up to ~10⁵ negatives.  ``method="auto"`` picks it only when no
faster exact method accepts the loss.
"""

from __future__ import annotations

import numpy as np

from rankopt.hookspecs import hookimpl
from rankopt.inference.base import InferenceMethod, descending_order
from rankopt.losses.base import RankLoss, checked_delta_diff

__all__ = ["DPMethod"]

#: Largest dynamic-programming table (in float64 entries) held at once.
DEFAULT_MEMORY_BUDGET = 1 << 20


class DPMethod(InferenceMethod):
    """Exact inference by dynamic programming over non-decreasing rank vectors."""

    name = "dp"
    auto_priority = 1000
    memory_budget = DEFAULT_MEMORY_BUDGET
    #: Exact under C1 and C2 alone (Observations 1–3).
    requires = "C2"

    def estimated_cost(self, n_pos: int, n_neg: int) -> float:
        """O(|P| |N|): every negative against every interleaving rank."""
        return float(n_pos) * float(n_neg)

    def interleaving_ranks(self, loss: RankLoss, pos_scores, neg_scores):
        pos_desc = pos_scores[descending_order(pos_scores)].astype(np.float64)
        order = descending_order(neg_scores)
        neg_desc = neg_scores[order].astype(np.float64)
        ranks_sorted = _MonotoneRanksDP(loss, pos_desc, neg_desc, self.memory_budget).solve()
        ranks = np.empty(neg_desc.size, dtype=np.int64)
        ranks[order] = ranks_sorted
        return ranks


def _last_argmax(values: np.ndarray) -> int:
    return int(values.size - 1 - np.argmax(values[::-1]))


def _suffix_max(values: np.ndarray) -> np.ndarray:
    return np.maximum.accumulate(values[::-1])[::-1]


class _MonotoneRanksDP:
    """max Σ_j f_j(r_j) over 1 ≤ r_1 ≤ … ≤ r_N ≤ |P|+1, negatives sorted descending.

    Negatives j are 1-based; a sub-problem (ja, jb, lp, rp) asks for the
    best r_ja … r_jb within ranks lp … rp.  f_j is used up to an additive
    constant per j (f_j(lp) = 0), which does not change any argmax.
    """

    def __init__(self, loss, pos_desc, neg_desc, memory_budget):
        self.loss = loss
        self.pos = pos_desc
        self.neg = neg_desc
        self.n_pos, self.n_neg = pos_desc.size, neg_desc.size
        self.scale = 2.0 / (self.n_pos * self.n_neg)
        self.budget = max(int(memory_budget), 2 * (self.n_pos + 1))

    def _f(self, j_first: int, j_last: int, lp: int, rp: int) -> np.ndarray:
        """f_j(i) − f_j(lp) for j = j_first…j_last (rows), i = lp…rp (columns)."""
        rows = j_last - j_first + 1
        f = np.zeros((rows, rp - lp + 1))
        if rp > lp:
            j = np.arange(j_first, j_last + 1)[:, None]
            i = np.arange(lp, rp)[None, :]
            steps = checked_delta_diff(self.loss, j, i, self.n_pos, self.n_neg)
            steps += self.scale * (self.pos[lp - 1 : rp - 1][None, :] - self.neg[j_first - 1 : j_last][:, None])
            np.cumsum(steps, axis=1, out=f[:, 1:])
        return f

    def _blocks(self, j_first: int, j_last: int, width: int, reverse: bool = False):
        """Row ranges of f small enough for the memory budget."""
        step = max(1, self.budget // (2 * width))
        starts = list(range(j_first, j_last + 1, step))
        if reverse:
            starts.reverse()
        for start in starts:
            yield start, min(start + step - 1, j_last)

    def _forward(self, j_first, j_last, lp, rp) -> np.ndarray:
        """F_{j_last} on lp…rp, starting the recursion at j_first."""
        best: np.ndarray | None = None
        for a, b in self._blocks(j_first, j_last, rp - lp + 1):
            for row in self._f(a, b, lp, rp):
                best = row if best is None else row + np.maximum.accumulate(best)
        assert best is not None  # j_first ≤ j_last: at least one row
        return best

    def _backward(self, j_first, j_last, lp, rp) -> np.ndarray:
        """B_{j_first}(i) = f_{j_first}(i) + best of r_{j_first+1…j_last} ≥ i."""
        best: np.ndarray | None = None
        for a, b in self._blocks(j_first, j_last, rp - lp + 1, reverse=True):
            for row in self._f(a, b, lp, rp)[::-1]:
                best = row if best is None else row + _suffix_max(best)
        assert best is not None  # j_first ≤ j_last: at least one row
        return best

    def _solve_with_table(self, ja, jb, lp, rp, ranks) -> None:
        f = self._f(ja, jb, lp, rp)
        table = np.empty_like(f)
        table[0] = f[0]
        for k in range(1, f.shape[0]):
            table[k] = f[k] + np.maximum.accumulate(table[k - 1])
        a = _last_argmax(table[-1])
        ranks[jb - 1] = lp + a
        for k in range(f.shape[0] - 1, 0, -1):
            a = _last_argmax(table[k - 1][: a + 1])
            ranks[ja + k - 2] = lp + a

    def solve(self) -> np.ndarray:
        ranks = np.empty(self.n_neg, dtype=np.int64)
        stack = [(1, self.n_neg, 1, self.n_pos + 1)]
        while stack:
            ja, jb, lp, rp = stack.pop()
            n, width = jb - ja + 1, rp - lp + 1
            if width == 1:
                ranks[ja - 1 : jb] = lp
                continue
            if n * width <= self.budget:
                self._solve_with_table(ja, jb, lp, rp, ranks)
                continue
            mid = ja + (n - 1) // 2
            total = self._forward(ja, mid, lp, rp)
            if mid < jb:
                total = total + _suffix_max(self._backward(mid + 1, jb, lp, rp))
            r_mid = lp + _last_argmax(total)
            ranks[mid - 1] = r_mid
            if ja < mid:
                stack.append((ja, mid - 1, lp, r_mid))
            if mid < jb:
                stack.append((mid + 1, jb, r_mid, rp))
        return ranks


@hookimpl
def rankopt_inference_methods():
    return [DPMethod]
