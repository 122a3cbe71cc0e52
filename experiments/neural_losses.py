"""The listwise losses neural learning-to-rank users pick, written from their papers for ``python -m experiments.deep``.

No maintained PyTorch package offers them on this machine's registry (allRank 1.4.3 dates from 2021
and imports torchvision; rax is JAX), so they are written here, on the padded (B, L) layout with a
mask, and tested against direct loop implementations (``tests/test_deep_experiment.py``):

* :func:`listnet_loss` — ListNet (Cao, Qin, Liu, Tsai and Li, "Learning to Rank: From Pairwise
  Approach to Listwise Approach", ICML 2007): the cross-entropy between the top-one probabilities of
  the grades and of the scores (softmax of each over the query's documents).
* :func:`approx_ndcg_loss` — ApproxNDCG (Qin, Liu and Li, "A general approximation framework for
  direct optimization of information retrieval measures", Information Retrieval 2010): −NDCG with
  each position replaced by the smooth rank 1 + Σ_{j≠i} σ(α (s_j − s_i)).
* :func:`lambda_loss` — LambdaLoss's NDCG-Loss2++ (Wang, Li, Golbandi, Bendersky and Najork, "The
  LambdaLoss Framework for Ranking Metric Optimization", CIKM 2018): Σ over pairs with y_i > y_j of
  −(ρ_ij + μ δ_ij) |G_i − G_j| log₂ σ(s_i − s_j), G = (2^y − 1)/maxDCG, positions from the current
  scores.

Each returns the mean over the rows that have something to order.  Gains are 2^y − 1 throughout.
"""

from __future__ import annotations

import math

import torch

__all__ = ["allrank_lambda_loss", "approx_ndcg_loss", "lambda_loss", "listnet_loss"]


def _gains(y: torch.Tensor) -> torch.Tensor:
    return torch.pow(2.0, y.to(torch.float64)) - 1.0


def _ideal_dcg(gains: torch.Tensor, mask: torch.Tensor, k: int | None = None) -> torch.Tensor:
    """maxDCG (@k) of every row over its real documents (padding has gain 0)."""
    ordered = torch.sort(torch.where(mask, gains, torch.zeros_like(gains)), dim=1, descending=True).values
    ordered = ordered[:, :k] if k is not None else ordered
    discount = 1.0 / torch.log2(torch.arange(2, ordered.shape[1] + 2, dtype=gains.dtype, device=gains.device))
    return (ordered * discount).sum(dim=1)


def _has_two_grades(y: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Rows with something to order: two distinct grades among their real documents."""
    top = torch.where(mask, y, torch.full_like(y, torch.iinfo(y.dtype).min)).max(dim=1).values
    bottom = torch.where(mask, y, torch.full_like(y, torch.iinfo(y.dtype).max)).min(dim=1).values
    return top > bottom


def _row_mean(per_row: torch.Tensor, used: torch.Tensor) -> torch.Tensor:
    """The mean over the rows with something to order (as ``RankHingeLoss``'s "mean")."""
    if not bool(used.any()):
        return per_row.sum() * 0.0
    return per_row[used].mean()


def listnet_loss(scores: torch.Tensor, y: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """ListNet's top-one cross-entropy, softmax over the grades as the target distribution."""
    neg_inf = torch.finfo(scores.dtype).min
    target = torch.softmax(torch.where(mask, y.to(scores.dtype), torch.full_like(scores, neg_inf)), dim=1)
    log_p = torch.log_softmax(torch.where(mask, scores, torch.full_like(scores, neg_inf)), dim=1)
    per_row = -(torch.where(mask, target * log_p, torch.zeros_like(scores))).sum(dim=1)
    return _row_mean(per_row, _has_two_grades(y, mask))


def approx_ndcg_loss(scores: torch.Tensor, y: torch.Tensor, mask: torch.Tensor, alpha: float = 1.0) -> torch.Tensor:
    """−ApproxNDCG with the smooth ranks 1 + Σ_{j≠i} σ(α (s_j − s_i)) over the row's real documents."""
    gains = _gains(y).to(scores.dtype)
    pair = mask[:, :, None] & mask[:, None, :]
    pair = pair & ~torch.eye(scores.shape[1], dtype=torch.bool, device=scores.device)[None]
    above = torch.sigmoid(alpha * (scores[:, None, :] - scores[:, :, None]))  # [b, i, j]: j above i
    smooth_rank = 1.0 + torch.where(pair, above, torch.zeros_like(above)).sum(dim=2)
    dcg = torch.where(mask, gains / torch.log2(1.0 + smooth_rank), torch.zeros_like(scores)).sum(dim=1)
    ideal = _ideal_dcg(_gains(y), mask).to(scores.dtype)
    used = _has_two_grades(y, mask)
    return _row_mean(-dcg / torch.where(used, ideal, torch.ones_like(ideal)), used)


def lambda_loss(
    scores: torch.Tensor, y: torch.Tensor, mask: torch.Tensor, mu: float = 5.0, k: int | None = None
) -> torch.Tensor:
    """LambdaLoss NDCG-Loss2++: pairs weighted by (ρ_ij + μ δ_ij) |G_i − G_j|, positions by the scores.

    With ``k``, NDCG-Loss2++@k as allRank truncates it: only pairs whose two documents both stand in the
    top k of the current ranking, and G normalised by maxDCG@k.

    Pair-restricted: a pair counts only when y_i > y_j, so its first document is graded (y_i > 0).  The
    pairs are formed between the R graded documents of a row (R the most of any row) and its L documents,
    B × R × L instead of allRank's B × L × L; with ``k``, between the top k and the top k, B × k × k.
    """
    gains = torch.where(mask, _gains(y), torch.zeros((), dtype=torch.float64, device=y.device))
    ideal = _ideal_dcg(gains, mask, k)
    normalised = (gains / torch.where(ideal > 0, ideal, torch.ones_like(ideal))[:, None]).to(scores.dtype)
    with torch.no_grad():  # the current ranking: padding last
        keyed = torch.where(mask, scores.detach(), torch.full_like(scores, -torch.inf))
        order = torch.argsort(keyed, dim=1, descending=True)
    if k is not None:
        first = second = order[:, : min(k, scores.shape[1])]
        position = torch.arange(1, first.shape[1] + 1, dtype=scores.dtype, device=scores.device).expand(first.shape)
        first_position = second_position = position
    else:
        position = torch.empty_like(order)
        position.scatter_(1, order, torch.arange(1, scores.shape[1] + 1, device=scores.device).expand_as(order))
        position = position.to(scores.dtype)
        graded = mask & (y > 0)
        n_graded = int(graded.sum(dim=1).max()) if graded.numel() else 0
        first = torch.argsort(graded.to(torch.int8), dim=1, descending=True, stable=True)[:, :n_graded]
        second = torch.arange(scores.shape[1], device=scores.device).expand_as(scores)
        first_position, second_position = position.gather(1, first), position
    pairs = _pair_terms(scores, y, mask, normalised, (first, first_position), (second, second_position), mu)
    return _row_mean(pairs, _has_two_grades(y, mask))


def _pair_terms(scores, y, mask, normalised, first, second, mu):
    """Σ over the pairs (i from ``first``, j from ``second``) with y_i > y_j of −w_ij log₂ σ(s_i − s_j), per row;
    ``first`` and ``second`` are (document indices, their 1-based positions)."""
    (i, p_i), (j, p_j) = first, second
    better = (y.gather(1, i)[:, :, None] > y.gather(1, j)[:, None, :]) & mask.gather(1, i)[:, :, None]
    better &= mask.gather(1, j)[:, None, :]
    inv_i, inv_j = 1.0 / torch.log2(1.0 + p_i), 1.0 / torch.log2(1.0 + p_j)
    rho = (inv_i[:, :, None] - inv_j[:, None, :]).abs()
    gap = (p_i[:, :, None] - p_j[:, None, :]).abs()
    delta = (1.0 / torch.log2(1.0 + gap) - 1.0 / torch.log2(2.0 + gap)).abs()
    weight = (rho + mu * delta) * (normalised.gather(1, i)[:, :, None] - normalised.gather(1, j)[:, None, :]).abs()
    # Zeroed before the product: a pair of a document with itself has δ infinite, and inf · 0 would poison it.
    weight = torch.where(better, weight, torch.zeros((), dtype=weight.dtype, device=weight.device))
    diff = scores.gather(1, i)[:, :, None] - scores.gather(1, j)[:, None, :]
    return -(weight * torch.nn.functional.logsigmoid(diff)).sum(dim=(1, 2)) / math.log(2.0)


def allrank_lambda_loss(
    scores: torch.Tensor, y: torch.Tensor, mask: torch.Tensor, mu: float = 5.0, k: int | None = None, eps: float = 1e-10
) -> torch.Tensor:
    """allRank's NDCG-Loss2++ as its ``lambdaLoss`` computes it (allegro/allRank 1.4.3, ``losses/lambdaLoss.py``),
    transcribed step by step for the side-by-side benchmark (``benchmarks/bench_lambdaloss.py``): every tensor
    B × L × L, the documents sorted by score, the pairs masked (a finite, positive difference of grades; both
    in the top k), σ(s_i − s_j) clamped at ``eps`` and raised to the weight, ``log2``, summed over the masked
    pairs.  Its reduction is allRank's "sum" over the batch; the clamps are allRank's.
    """
    n = scores.shape[1]
    k = n if k is None else k
    y_pred = torch.where(mask, scores, torch.full_like(scores, -torch.inf))
    y_true = torch.where(mask, y.to(scores.dtype), torch.full_like(scores, -torch.inf))
    y_pred_sorted, indices_pred = y_pred.sort(descending=True, dim=-1)
    y_true_sorted, _ = y_true.sort(descending=True, dim=-1)
    true_sorted_by_preds = torch.gather(y_true, dim=1, index=indices_pred)
    true_diffs = true_sorted_by_preds[:, :, None] - true_sorted_by_preds[:, None, :]
    padded_pairs_mask = torch.isfinite(true_diffs) & (true_diffs > 0)
    ndcg_at_k_mask = torch.zeros((n, n), dtype=torch.bool, device=scores.device)
    ndcg_at_k_mask[:k, :k] = True
    true_sorted_by_preds = true_sorted_by_preds.clamp(min=0.0)
    y_true_sorted = y_true_sorted.clamp(min=0.0)
    discount = torch.log2(1.0 + torch.arange(1, n + 1, device=scores.device, dtype=scores.dtype))[None, :]
    max_dcgs = torch.sum(((torch.pow(2, y_true_sorted) - 1) / discount)[:, :k], dim=-1).clamp(min=eps)
    gain = (torch.pow(2, true_sorted_by_preds) - 1) / max_dcgs[:, None]
    gain_gaps = torch.abs(gain[:, :, None] - gain[:, None, :])
    positions = torch.arange(1, n + 1, device=scores.device)
    gaps = torch.abs(positions[:, None] - positions[None, :])
    deltas = torch.abs(1.0 / discount[0, gaps - 1] - 1.0 / discount[0, gaps])  # gaps − 1 = −1 wraps, then zeroed
    deltas.diagonal().zero_()
    lambda_rank = torch.abs(1.0 / discount[:, :, None] - 1.0 / discount[:, None, :]) * gain_gaps
    weights = mu * deltas[None, :, :] * gain_gaps + lambda_rank
    scores_diffs = (y_pred_sorted[:, :, None] - y_pred_sorted[:, None, :]).clamp(min=-1e8, max=1e8)
    scores_diffs = scores_diffs.masked_fill(torch.isnan(scores_diffs), 0.0)
    weighted_probas = (torch.sigmoid(scores_diffs).clamp(min=eps) ** weights).clamp(min=eps)
    return -torch.sum(torch.log2(weighted_probas)[padded_pairs_mask & ndcg_at_k_mask])
