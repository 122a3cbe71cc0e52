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
"""

from __future__ import annotations

import numpy as np

from rankopt.hookspecs import hookimpl
from rankopt.inference.base import InferenceMethod, descending_order
from rankopt.losses.base import RankLoss
from rankopt.losses.structure import TopKCountStructure, check_declared_structure

__all__ = ["TopKMethod"]


class TopKMethod(InferenceMethod):
    """Every count m of positives in the top k, each with its best ranking: exact for top-k count losses."""

    name = "topk"
    auto_priority = 20

    def unsupported_reason(self, loss: RankLoss) -> str | None:
        if not isinstance(loss.structure(), TopKCountStructure):
            return (
                "it is exact only for a loss that declares a TopKCountStructure (a Δ that counts the "
                f"positives in the top k, such as precision_at_k), got {type(loss).__name__} {loss.name!r} instead"
            )
        # This very instance's declaration, checked once per loss class and parameters: registration
        # probed only the default-constructed class.
        check_declared_structure(loss)
        return None

    def interleaving_ranks(self, loss: RankLoss, pos_scores, neg_scores):
        structure = loss.structure()
        assert isinstance(structure, TopKCountStructure)  # unsupported_reason has refused other losses
        pos_order, neg_order = descending_order(pos_scores), descending_order(neg_scores)
        p = pos_scores[pos_order].astype(np.float64)
        n = neg_scores[neg_order].astype(np.float64)
        m = best_count(structure, p, n)
        ranks_sorted = _ranks_for_count(p, n, m, min(structure.k, p.size + n.size) - m)
        ranks = np.empty(n.size, dtype=np.int64)
        ranks[neg_order] = ranks_sorted
        return ranks


def best_count(structure: TopKCountStructure, p: np.ndarray, n: np.ndarray) -> int:
    """m* for positives ``p`` and negatives ``n``, each sorted high to low."""
    n_pos, n_neg = p.size, n.size
    kept = min(structure.k, n_pos + n_neg)
    counts = np.arange(max(0, kept - n_neg), min(kept, n_pos) + 1)
    penalty = _boundary_penalties(p, n, counts, kept)
    objective = np.asarray(structure.loss_of_count(counts, n_pos, n_neg), dtype=np.float64)
    objective = objective - 2.0 * penalty / (n_pos * n_neg)
    return int(counts[int(np.argmax(objective))])


def _boundary_penalties(p: np.ndarray, n: np.ndarray, counts: np.ndarray, kept: int) -> np.ndarray:
    """U(m) + V(m) for every m of ``counts`` (consecutive), b = kept − m."""
    prefix_p = np.concatenate(([0.0], np.cumsum(p)))
    prefix_n = np.concatenate(([0.0], np.cumsum(n)))
    neg_ascending, pos_ascending = n[::-1], p[::-1]

    def neg_above(x):  # #{j : n_j > x}, n sorted high to low
        return n.size - np.searchsorted(neg_ascending, x, side="right")

    def pos_at_or_above(x):  # #{i : p_i >= x}
        return p.size - np.searchsorted(pos_ascending, x, side="left")

    def pos_above(x):  # #{i : p_i > x}
        return p.size - np.searchsorted(pos_ascending, x, side="right")

    def neg_at_or_above(x):  # #{j : n_j >= x}
        return n.size - np.searchsorted(neg_ascending, x, side="left")

    def row_u(i, b):  # Σ_{j > b} (n_j − p_i)⁺ for 0-based positive i: negatives b+1 … J with n_j > p_i
        last = neg_above(p[i])
        width = np.maximum(last - b, 0)
        return np.where(width > 0, prefix_n[np.maximum(last, b)] - prefix_n[b] - width * p[i], 0.0)

    def column_v(j, a):  # Σ_{i > a} (p_i − n_j)⁺ for 0-based negative j: positives a+1 … I with p_i > n_j
        last = pos_above(n[j])
        width = np.maximum(last - a, 0)
        return np.where(width > 0, prefix_p[np.maximum(last, a)] - prefix_p[a] - width * n[j], 0.0)

    m0, b0 = int(counts[0]), kept - int(counts[0])
    u0 = float(np.sum(row_u(np.arange(m0), b0))) if m0 else 0.0
    v0 = float(np.sum(column_v(np.arange(b0), m0))) if b0 else 0.0
    steps = counts[:-1]  # m → m + 1: positive m + 1 joins the top, negative b leaves it
    if steps.size == 0:
        return np.array([u0 + v0])
    b = kept - steps  # ≥ 1 for every step
    # U gains column b (0-based b − 1) over the top positives i < m, and row m at b − 1.
    first_below = pos_at_or_above(n[b - 1])  # positives i ≥ this have p_i < n_b
    width = np.maximum(steps - first_below, 0)
    column_u = np.where(
        width > 0, width * n[b - 1] - (prefix_p[np.maximum(steps, first_below)] - prefix_p[first_below]), 0.0
    )
    du = column_u + row_u(steps, b - 1)
    # V loses row m (positive m joins the top) over negatives j < b, and column b − 1 over positives > m.
    first_lower = neg_at_or_above(p[steps])  # negatives j ≥ this have n_j < p_m
    width = np.maximum(b - first_lower, 0)
    row_v = np.where(width > 0, width * p[steps] - (prefix_n[np.maximum(b, first_lower)] - prefix_n[first_lower]), 0.0)
    dv = -row_v - column_v(b - 1, steps + 1)
    return u0 + v0 + np.concatenate(([0.0], np.cumsum(du + dv)))


def _ranks_for_count(p: np.ndarray, n: np.ndarray, m: int, b: int) -> np.ndarray:
    """Interleaving ranks of the sorted negatives when p_1…p_m and n_1…n_b form the top block, merged by score."""
    pos_ascending = p[::-1]
    above_top = m - np.searchsorted(pos_ascending[p.size - m :], n[:b], side="left")
    above_rest = (p.size - m) - np.searchsorted(pos_ascending[: p.size - m], n[b:], side="left")
    return np.concatenate((1 + above_top, 1 + m + above_rest)).astype(np.int64)


@hookimpl
def rankopt_inference_methods():
    return [TopKMethod]
