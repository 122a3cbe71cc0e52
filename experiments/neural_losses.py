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

import torch

__all__ = ["approx_ndcg_loss", "lambda_loss", "listnet_loss"]


def _gains(y: torch.Tensor) -> torch.Tensor:
    return torch.pow(2.0, y.to(torch.float64)) - 1.0


def _ideal_dcg(gains: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """maxDCG of every row over its real documents (padding has gain 0)."""
    ordered = torch.sort(torch.where(mask, gains, torch.zeros_like(gains)), dim=1, descending=True).values
    discount = 1.0 / torch.log2(torch.arange(2, gains.shape[1] + 2, dtype=gains.dtype, device=gains.device))
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


def lambda_loss(scores: torch.Tensor, y: torch.Tensor, mask: torch.Tensor, mu: float = 5.0) -> torch.Tensor:
    """LambdaLoss NDCG-Loss2++: pairs weighted by (ρ_ij + μ δ_ij) |G_i − G_j|, positions by the scores."""
    gains = _gains(y)
    ideal = _ideal_dcg(gains, mask)
    normalised = gains / torch.where(ideal > 0, ideal, torch.ones_like(ideal))[:, None]
    # 1-based positions of the current ranking (padding sorted last).
    with torch.no_grad():
        keyed = torch.where(mask, scores.detach().double(), torch.full_like(gains, -torch.inf))
        order = torch.argsort(keyed, dim=1, descending=True)
        position = torch.empty_like(order)
        position.scatter_(1, order, torch.arange(1, scores.shape[1] + 1, device=scores.device).expand_as(order))
    position = position.to(torch.float64)
    inv_discount = 1.0 / torch.log2(1.0 + position)
    rho = (inv_discount[:, :, None] - inv_discount[:, None, :]).abs()
    gap = (position[:, :, None] - position[:, None, :]).abs()
    delta = (1.0 / torch.log2(1.0 + gap) - 1.0 / torch.log2(2.0 + gap)).abs()
    weight = (rho + mu * delta) * (normalised[:, :, None] - normalised[:, None, :]).abs()
    better = (y[:, :, None] > y[:, None, :]) & mask[:, :, None] & mask[:, None, :]
    diff = scores[:, :, None] - scores[:, None, :]
    log_sig = torch.nn.functional.logsigmoid(diff) / torch.log(torch.tensor(2.0, dtype=scores.dtype))
    # Zeroed before the product: the diagonal's δ is infinite, and inf · 0 would poison the gradient.
    weight = torch.where(better, weight, torch.zeros_like(weight)).to(scores.dtype)
    per_row = -(weight * log_sig).sum(dim=(1, 2))
    return _row_mean(per_row, _has_two_grades(y, mask))
