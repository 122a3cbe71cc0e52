"""The ``topk`` method: exact inference for a loss whose Δ counts the positives in the top k.

For a loss declaring a :class:`~rankopt.losses.structure.TopKCountStructure`,
Δ depends only on m, the positives among the top k' = min(k, |P| + |N|)
positions.  With positives p_1 ≥ … ≥ p_|P| and negatives n_1 ≥ … ≥ n_|N|
sorted by score, and b = k' − m:

* for a fixed m the best ranking puts p_1…p_m and n_1…n_b in the top k',
  each block merged by score (within a class, a higher score may always take
  the higher place: Observation 1 of Mohapatra et al. (2018));
* its pairwise term is Σ_{i,j} |p_i − n_j| less twice what the block
  boundary forces against the scores:
  U(m) = Σ_{i ≤ m, j > b} (n_j − p_i)⁺ and V(m) = Σ_{i > m, j ≤ b} (p_i − n_j)⁺;
* so m* maximises Δ(m) − 2 (U(m) + V(m)) / (|P||N|) over
  max(0, k' − |N|) ≤ m ≤ min(k', |P|).

U and V change by sums over one row or one column of the (p, n) grid when m
grows by one, and each such sum is two prefix sums around a binary search:
O((|P| + |N|) log(|P| + |N|)) in all, the sorting included.

The per-query method runs the batched kernel's code for one query (``_batched.topk_ranks``), so the two
agree to the bit.  Of several maximising m the largest is taken: the negatives as low as they can go,
the tie rule of every method (``docs/maths.md``).
"""

from __future__ import annotations

import copy
import threading
from typing import cast

import numpy as np

import rankopt.inference._batched as _batched
from rankopt.hookspecs import hookimpl
from rankopt.inference.base import InferenceMethod, descending_order
from rankopt.losses.base import RankLoss
from rankopt.losses.structure import TopKCountStructure, check_declared_structure

__all__ = ["POOL_GRID_MAX", "CountLossPool", "TopKMethod", "count_losses"]


class TopKMethod(InferenceMethod):
    """Every count m of positives in the top k, each with its best ranking: exact for top-k count losses."""

    name = "topk"
    auto_priority = 20

    def unsupported_reason(self, loss: RankLoss) -> str | None:
        structure = loss.structure()
        if structure is None or self.name not in structure.methods:
            return (
                "it is exact only for a loss that declares a TopKCountStructure (a Δ that counts the "
                f"positives in the top k, such as precision_at_k), got {type(loss).__name__} {loss.name!r} instead"
            )
        # This very instance's declaration, checked once per loss class and parameters: registration
        # probed only the default-constructed class.
        check_declared_structure(loss)
        return None

    def interleaving_ranks(self, loss: RankLoss, pos_scores, neg_scores):
        structure = cast(TopKCountStructure, loss.structure())  # unsupported_reason has refused other losses
        pos_order, neg_order = descending_order(pos_scores), descending_order(neg_scores)
        # float64 (exact for float32 scores): the kernel computes in float64 either way, so the ranks are
        # the batch's to the bit.
        p = np.ascontiguousarray(pos_scores[pos_order], dtype=np.float64)
        n = np.ascontiguousarray(neg_scores[neg_order], dtype=np.float64)
        kept = min(structure.k, p.size + n.size)
        counts = np.arange(max(0, kept - n.size), min(kept, p.size) + 1)
        ranks_sorted = np.empty(n.size, dtype=np.intc)
        _batched.topk_ranks(p, n, structure.k, count_losses(structure, counts, p.size, n.size), ranks_sorted)
        ranks = np.empty(n.size, dtype=np.int64)
        ranks[neg_order] = ranks_sorted
        return ranks


def count_losses(structure: TopKCountStructure, counts: np.ndarray, n_pos: int, n_neg: int) -> np.ndarray:
    """Δ for each count of ``counts`` (consecutive m) from ``loss_of_count``, checked: finite, ≥ 0, one each."""
    values = np.ascontiguousarray(structure.loss_of_count(counts, int(n_pos), int(n_neg)), dtype=np.float64)
    if values.shape != counts.shape or not np.all(np.isfinite(values)) or np.any(values < 0):
        raise ValueError(
            f"expected loss_of_count to give a finite Δ >= 0 for each of {counts.size} counts, got {values!r}"
        )
    return values


class CountLossPool:
    """Δ(m) of one top-k count loss (one set of parameters) for every (|P|, |N|) asked so far, appended to one
    array, and where each pair's entries start: a grid over |P| and |N| up to :data:`POOL_GRID_MAX` cells, a
    dictionary past it.  Arrays are replaced, never resized in place, so a caller's array stays valid."""

    def __init__(self, structure: TopKCountStructure):
        self.structure = structure
        self.values = np.zeros(0)
        self.grid: np.ndarray = np.full((0, 0), -1, dtype=np.int64)
        self.far: dict[tuple[int, int], int] = {}
        self._lock = threading.Lock()

    @classmethod
    def of_loss(cls, loss: RankLoss) -> CountLossPool:
        """The pool of ``loss`` with its parameters as they are now, asked of a copy: a pool is kept under the
        loss's parameters (``cache_key``) and asks its Δ lazily, and the structure's Δ is the live loss's, which a
        later ``set_params`` would change under the old key."""
        return cls(copy.deepcopy(loss).structure())

    def arrays(self) -> tuple[np.ndarray, np.ndarray]:
        """(values, grid) as they are now: Δ(m) of every pair asked so far, and where each (|P|, |N|)'s entries
        start (−1: not asked), for a compiled lookup (``_batched.count_table_starts``)."""
        with self._lock:
            return self.values, self.grid

    def entries(self, n_pos: np.ndarray, n_neg: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(values, where each (n_pos[q], n_neg[q])'s entries start in values), asking the loss for new pairs."""
        with self._lock:
            shape = (int(n_pos.max()) + 1, int(n_neg.max()) + 1)
            if shape[0] * shape[1] > POOL_GRID_MAX:
                return self._far_entries(n_pos, n_neg)
            if shape[0] > self.grid.shape[0] or shape[1] > self.grid.shape[1]:
                grown = np.full(
                    (max(shape[0], self.grid.shape[0]), max(shape[1], self.grid.shape[1])), -1, dtype=np.int64
                )
                grown[: self.grid.shape[0], : self.grid.shape[1]] = self.grid
                self.grid = grown
            found = self.grid[n_pos, n_neg]
            missing = found < 0
            if missing.any():
                base = shape[1]
                keys = np.unique(n_pos[missing] * base + n_neg[missing])
                for p, n in zip((keys // base).tolist(), (keys % base).tolist(), strict=True):
                    self.grid[p, n] = self._append(p, n)
                found = self.grid[n_pos, n_neg]
            return self.values, found

    def _far_entries(self, n_pos: np.ndarray, n_neg: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        base = int(n_neg.max()) + 1
        keys, group = np.unique(n_pos * base + n_neg, return_inverse=True)
        found = np.empty(keys.size, dtype=np.int64)
        for index, (p, n) in enumerate(zip((keys // base).tolist(), (keys % base).tolist(), strict=True)):
            if (p, n) not in self.far:
                self.far[p, n] = self._append(p, n)
            found[index] = self.far[p, n]
        return self.values, found[group.ravel()]

    def _append(self, n_pos: int, n_neg: int) -> int:
        """Ask the loss for Δ(m) at one pair, append it, and return where it starts."""
        kept = min(self.structure.k, n_pos + n_neg)
        answer = count_losses(self.structure, np.arange(max(0, kept - n_neg), min(kept, n_pos) + 1), n_pos, n_neg)
        start = self.values.size
        self.values = np.concatenate((self.values, answer))
        return start


#: The most (|P| + 1) × (|N| + 1) cells a :class:`CountLossPool` keeps as a grid (32 MiB of int64).
POOL_GRID_MAX = 1 << 22


@hookimpl
def rankopt_inference_methods():
    return [TopKMethod]
