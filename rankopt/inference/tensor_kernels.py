"""The structure table's tensor-op kernels: each structure's exact hinge in torch operations on a padded batch.

A second implementation of every declared structure's loss-augmented inference and ground truth, written
in torch tensor operations over the padded (B, L) layout of :class:`rankopt.torch.RankHingeLoss`, so that
it runs on whatever device the scores are on (CUDA, MPS or the CPU) and the scores never leave it.  Each
kernel returns the hinge of every row relative to its ground truth, h = max_R [Δ(R*, R) + (c(R) − c(R*))·s],
and its subgradient c(R̂) − c(R*): what :class:`rankopt.inference.kernel_base.StructureKernel`'s compiled
batch returns with ``relative_to_truth=True``, and equal to it (tested on random batches against the
compiled kernels, ``tests/inference/test_tensor_kernels.py``).

Cost per query of L documents (|P| relevant, |N| = L − |P| not; K grade levels), time and memory:

* binary rank losses with a compiled form satisfying C1–C4 (AP, NDCG, ROC area, position discounts):
  O(|N| (|P| + 1)) — every negative's objective at every interleaving rank, from the form's O(1)
  discrete derivative (C4), maximised negative by negative (exact under C3, Observation 4 of Mohapatra
  et al. 2018).  This is O(L²) in the worst case, where the compiled kernel is O(L log L): the backend
  takes rows of up to :data:`BINARY_LONGEST` = 2,046 documents (|N| (|P| + 1) ≤ 2²⁰ whatever the classes),
  in row chunks of at most 2²⁴ table entries; longer rows run on the compiled kernels;
* top-k count losses (precision@k): O(L log L + k²) — sorted classes, prefix sums and one k × k block;
* graded position losses (NDCG@k and plugins): O(L log L) — a top-k of the documents' per-position
  utility and a sort of the gains for the ground truth;
* graded pair losses (SVM^rank's pairwise, weighted or not): O(K L log L) unweighted, O(K² L log L)
  weighted — one batched binary search per pair of grade levels, never the L² pairs; at most
  :data:`MAX_PAIR_LEVELS` levels.

The per-query constants a loss's own code defines — a discount table, the gains of the grades present, the
Δ of each count of a top-k loss, the pair weights of the grades present — are computed on the host once
per call from a few integers (the grade levels present, the class counts of a top-k loss), as the
compiled path computes them; the scores and every per-document quantity stay on the device.
"""

from __future__ import annotations

import abc
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

import rankopt.inference._batched as _batched
from rankopt.inference.base import kernel_arguments
from rankopt.inference.kernel_base import BatchedRankingInference, Kernel, PreparedKernel
from rankopt.inference.topk import CountLossPool
from rankopt.losses.base import KernelCode, KeyedCache, RankLoss
from rankopt.losses.structure import GradedPairStructure, GradedPositionStructure, TopKCountStructure

__all__ = [
    "BINARY_LONGEST",
    "MAX_PAIR_LEVELS",
    "PreparedTensorBatch",
    "TensorHinge",
    "TensorKernel",
    "TensorKernelUnsupported",
]

#: The longest rows the binary kernel takes: |N| (|P| + 1) ≤ 2²⁰ for any split of 2,046 documents.
BINARY_LONGEST = 2046
#: Entries of the objective table the binary kernel holds at once: larger batches run in row chunks.
BINARY_CHUNK_ENTRIES = 1 << 24
#: The most grade levels a batch of the graded pair kernel may hold.
MAX_PAIR_LEVELS = 64


@dataclass(frozen=True)
class TensorHinge:
    """Every row's hinge relative to its ground truth, on the scores' device.

    Attributes
    ----------
    values : Tensor, shape (B,)
        h_q ≥ 0; 0 for a row with nothing to order.
    coef : Tensor, shape (B, L)
        ∂h_q/∂s: c(R̂) − c(R*), 0 on padding and on rows with nothing to order.
    usable : Tensor of bool, shape (B,)
        Whether the row has something to order.
    """

    values: torch.Tensor
    coef: torch.Tensor
    usable: torch.Tensor


class TensorKernelUnsupported(ValueError):
    """A batch a tensor kernel cannot take, known only from its data (more grade levels than it holds): the
    caller runs it on the compiled path instead, as for what :meth:`TensorKernel.unsupported_reason` refuses."""


class TensorKernel(Kernel):
    """A structure's hinge in tensor operations over a padded batch (:mod:`rankopt.inference.tensor_kernels`).

    The contract of every device (:class:`~rankopt.inference.kernel_base.Kernel`): :meth:`prepare` takes the
    padded batch's relevance and its mask as the layout and infers with :meth:`hinge`; the ground truth's
    coefficients and the Δ of a ranking, host-side questions, are the host kernel's of the same structure.
    """

    device = "torch"
    array_type = "torch"

    def __init__(self):
        #: Device copies of the small constant tables of recent calls (:func:`_device_constant`).
        self.constants = KeyedCache(max_entries=64)

    def unsupported_reason(self, loss: RankLoss, structure: Any, width: int) -> str | None:
        """Why this kernel cannot take ``loss`` on rows of ``width`` documents, or None: by default every loss
        of its structure, at any width."""
        return None

    def facts(self, loss: RankLoss, structure: Any, relevance: torch.Tensor, mask: torch.Tensor):
        """What :meth:`hinge` needs to know on the host from the data (sizes, the grades present), as a 1-D
        tensor on the device, or None: the caller reads it in the same transfer as the input checks, the one
        time a call waits for the device.  ``relevance`` and ``mask`` are :meth:`hinge`'s, unchecked yet."""
        return None

    @abc.abstractmethod
    def hinge(
        self,
        loss: RankLoss,
        structure: Any,
        scores: torch.Tensor,
        relevance: torch.Tensor,
        mask: torch.Tensor,
        facts: np.ndarray | None,
    ) -> TensorHinge:
        """The batch's hinges.  ``scores`` (B, L) finite where ``mask``, in the dtype to compute in;
        ``relevance`` (B, L) int64: 0/1 for a binary kernel (already thresholded), grades ≥ 0 for a graded
        one; ``mask`` (B, L) bool; ``facts`` :meth:`facts` read on the host (float64).  Padding may hold
        anything: it is never read into a result.  Nothing here reads the device."""

    def prepare(self, loss, structure, relevance, layout, method, *, relevant_from, registry, verify=None):
        """The kernel ready for one padded batch: ``relevance`` (B, L) int64 grades, ``layout`` its boolean
        mask; ``verify`` brings :meth:`facts` home (by default alone; the torch layer brings its input checks
        in the same transfer)."""
        self.resolve_method(loss, structure, method, relevance.shape[-1], registry)
        if not self.graded:
            relevance = (relevance >= relevant_from).long()
        return PreparedTensorBatch(self, loss, structure, relevance, layout, verify)

    def ground_truth(self, loss, structure, relevance, layout):
        """Ψ(R*)'s coefficients, (B, L) on the batch's device: the host kernel's, over the kept documents."""
        mask = np.ascontiguousarray(layout.cpu().numpy())
        offsets = np.empty(mask.shape[0] + 1, dtype=np.int64)
        _batched.kept_offsets(mask.view(np.uint8), offsets)  # the padded layout's kept rows as the flat one's
        truth = _host_twin(structure).ground_truth(loss, structure, relevance[layout].cpu().numpy(), offsets)
        out = torch.zeros(relevance.shape, dtype=torch.float64, device=relevance.device)
        out[layout] = torch.as_tensor(truth, device=relevance.device)
        return out

    def ranking_loss(self, loss, structure, ordered_relevance):
        return _host_twin(structure).ranking_loss(loss, structure, ordered_relevance)


def _host_twin(structure) -> Kernel:
    from rankopt.inference.structure_table import kernel_for

    return kernel_for(structure, "cpu")


class PreparedTensorBatch(PreparedKernel):
    """A tensor kernel ready for one padded batch: its hinge relative to the ground truth, as tensors."""

    relative_inside = True

    def __init__(self, kernel: TensorKernel, loss, structure, relevance, mask, verify=None):
        self.kernel, self.loss, self.structure = kernel, loss, structure
        self.relevance, self.mask = relevance, mask
        self.verify = _read_alone if verify is None else verify
        self.pending = kernel.facts(loss, structure, relevance, mask)

    def hinges(self, scores: torch.Tensor) -> TensorHinge:
        """Every row's hinge (the torch layer's use: no Δ needed)."""
        facts = self.verify(self.pending)
        return self.kernel.hinge(self.loss, self.structure, scores, self.relevance, self.mask, facts)

    def __call__(self, scores, n_threads=None, relative_to_truth=True):
        if not relative_to_truth:
            raise ValueError("expected relative_to_truth=True: the tensor kernels give the hinge relative to R*")
        hinge = self.hinges(scores)
        # h = Δ + Σ_i (c_i(R̂) − c_i(R*)) s_i, so Δ is h less the coefficients' scores (0 for unusable rows).
        kept = torch.where(self.mask, scores, torch.zeros((), dtype=scores.dtype, device=scores.device))
        losses = hinge.values - (hinge.coef * kept).sum(dim=1)
        return BatchedRankingInference(hinge.coef, losses, hinge.values, hinge.usable)


def _read_alone(pending):
    return None if pending is None else np.asarray(pending.double().reshape(-1).tolist())


# ---------------------------------------------------------------- shared pieces


def _sorted_members(scores, members, width: int):
    """The scores of each row's ``members`` sorted high to low (first ``width`` columns), their columns, and
    which of those entries are members; the others hold 0."""
    keyed = torch.where(members, scores, -torch.inf)
    values, columns = torch.sort(keyed, dim=1, descending=True, stable=True)
    values, columns = values[:, :width], columns[:, :width]
    valid = torch.arange(width, device=scores.device)[None, :] < members.sum(dim=1, keepdim=True)
    return torch.where(valid, values, 0), columns, valid


def _tie_runs_mean(sorted_scores, coef, valid):
    """``coef`` of sorted members (:func:`_sorted_members`), each averaged over its run of equal scores: tied
    documents of one relevance are interchangeable in a most violated ranking, so the mean of their
    coefficients is a subgradient too, and the one that does not depend on the order they come in."""
    same = (sorted_scores[:, 1:] == sorted_scores[:, :-1]) & valid[:, 1:] & valid[:, :-1]
    return _run_means(coef, same)


def _run_means(values, tied):
    """Each entry of ``values`` (B, L) replaced by the mean of its run, ``tied[:, j]`` saying that entries j and
    j + 1 of a row are in one run."""
    starts = torch.ones(values.shape, dtype=torch.long, device=values.device)
    starts[:, 1:] = (~tied).long()
    group = torch.cumsum(starts, dim=1) - 1
    sums = torch.zeros_like(values).scatter_add_(1, group, values)
    counts = torch.zeros_like(values).scatter_add_(1, group, torch.ones_like(values))
    return (sums / counts.clamp(min=1.0)).gather(1, group)


def _prefix(values):
    """Prefix sums with a leading 0: out[:, r] = Σ_{a<r} values[:, a]."""
    return torch.nn.functional.pad(torch.cumsum(values, dim=1), (1, 0))


def _highest_argmax(values, dim: int):
    """The largest index among the maxima of ``values`` along ``dim`` (the compiled kernels' tie rule)."""
    flipped = torch.flip(values, dims=(dim,))
    return values.shape[dim] - 1 - torch.argmax(flipped, dim=dim)


def _scatter_rows(shape, like, columns, values):
    """A (B, L) tensor holding ``values`` at ``columns`` of each row (added: padding entries add 0)."""
    out = torch.zeros(shape, dtype=like.dtype, device=like.device)
    return out.scatter_add_(1, columns, values)


def _copied_without_waiting(values: np.ndarray, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """A host array made a tensor of ``dtype`` on ``device`` without the host waiting for the device: a copy to
    a GPU from pageable memory waits for the work queued before it; from pinned memory it is queued behind it
    (torch's pinned-memory cache keeps the buffer until the copy has run)."""
    host = torch.from_numpy(np.ascontiguousarray(values)).to(dtype)
    if device.type != "cuda":
        return host.to(device)
    return host.pin_memory().to(device, non_blocking=True)


def _device_constant(constants: KeyedCache, values, dtype, device) -> torch.Tensor:
    """``values`` (a small host array) as a tensor of ``dtype`` on ``device``, copied there once per content
    and kept in ``constants``: copying host memory to a GPU waits for the work queued before it.  Callers
    only read it."""
    values = np.ascontiguousarray(values)
    key = (values.tobytes(), values.dtype.str, values.shape, str(dtype), str(device))
    return constants.get_or_build(key, lambda: torch.as_tensor(values, device=device).to(dtype))


#: Grades whose presence a graded kernel's facts record (those from it on are one more flag).
PRESENCE_GRADES = MAX_PAIR_LEVELS


def _grade_facts(relevance, mask):
    """Which grades 0 … PRESENCE_GRADES − 1 the kept documents hold, whether any holds a larger one, and the
    most documents a row keeps: PRESENCE_GRADES + 2 numbers on the device (fixed size: no read of the data to
    shape it).  The longest row bounds a query's sums of gains or pair weights, as the host's longest query does
    (not the padded width)."""
    slot = torch.where(mask, relevance.clamp(max=PRESENCE_GRADES), PRESENCE_GRADES + 1)
    flags = torch.zeros(PRESENCE_GRADES + 2, dtype=torch.int64, device=relevance.device)
    flags.scatter_(0, slot.reshape(-1), 1)
    longest = mask.sum(dim=1).max() if mask.shape[0] else torch.zeros((), dtype=torch.int64, device=mask.device)
    return torch.cat((flags[: PRESENCE_GRADES + 1], longest.reshape(1)))


def _present_levels(facts) -> np.ndarray | None:
    """The grades present (host, increasing) from :func:`_grade_facts`; None when some grade is
    PRESENCE_GRADES or more."""
    flags = np.asarray(facts, dtype=np.float64)
    if flags[PRESENCE_GRADES]:
        return None
    return np.flatnonzero(flags[:PRESENCE_GRADES]).astype(np.int64)


def _longest_row(facts) -> int:
    """The most documents a row keeps, from :func:`_grade_facts` (at least 1: a batch keeping none is refused)."""
    return max(int(facts[PRESENCE_GRADES + 1]), 1)


def _grade_table(constants, grades, mask, table_of_levels, levels):
    """Per document, ``table_of_levels(levels)`` at its grade (0 on padding), for the host's ``levels``."""
    values = np.asarray(table_of_levels(levels))
    table = _device_constant(constants, values, torch.from_numpy(values[:0]).dtype, grades.device)
    index = torch.bucketize(
        torch.where(mask, grades, 0), _device_constant(constants, levels, torch.int64, grades.device)
    )
    return index.clamp(max=max(levels.size - 1, 0)), table


# ---------------------------------------------------------------- binary rank losses


class BinaryTensorKernel(TensorKernel):
    """A binary rank loss with a compiled form satisfying C1–C4: every negative takes its best rank."""

    structure = None
    label = "binary rank loss"

    def unsupported_reason(self, loss, structure, width):
        if width > BINARY_LONGEST:
            return f"rows of {width} documents: its table is O(|N| |P|), taken up to {BINARY_LONGEST} documents"
        form = loss.compiled_form(1, max(width - 1, 1))
        if form is None:
            return f"loss {loss.name!r} has no compiled form"
        code, _ = kernel_arguments(loss, form, 1, max(width - 1, 1))
        if code is KernelCode.POSITION_DISCOUNT and form.first_concave_position is not None:
            return f"its discount is concave at position {form.first_concave_position} (C3 fails)"
        return None

    def facts(self, loss, structure, relevance, mask):
        """The most positives and negatives of a row: the work tensors' shape."""
        return torch.stack(((mask & (relevance > 0)).sum(dim=1).max(), (mask & (relevance == 0)).sum(dim=1).max()))

    def hinge(self, loss, structure, scores, relevance, mask, facts):
        positive, negative = mask & (relevance > 0), mask & (relevance == 0)
        n_pos, n_neg = positive.sum(dim=1), negative.sum(dim=1)
        usable = (n_pos > 0) & (n_neg > 0)
        longest_pos, longest_neg = (int(v) for v in facts)
        values = torch.zeros(scores.shape[0], dtype=scores.dtype, device=scores.device)
        coef = torch.zeros_like(scores)
        if longest_pos == 0 or longest_neg == 0:
            return TensorHinge(values, coef, usable)
        form = loss.compiled_form(1, max(scores.shape[1] - 1, 1))
        code, host_table = kernel_arguments(loss, form, 1, max(scores.shape[1] - 1, 1))
        # Only a position discount reads its table: AP and AUC copy nothing to the device.
        table = (
            _device_constant(self.constants, np.array(host_table), scores.dtype, scores.device)
            if code is KernelCode.POSITION_DISCOUNT
            else None
        )
        rows = max(1, BINARY_CHUNK_ENTRIES // (longest_neg * (longest_pos + 1)))
        for start in range(0, scores.shape[0], rows):
            part = slice(start, start + rows)
            values[part], coef[part] = _binary_rows(
                code,
                table,
                scores[part],
                positive[part],
                negative[part],
                (n_pos[part], n_neg[part]),
                (longest_pos, longest_neg),
            )
        zero = torch.zeros_like(values)
        return TensorHinge(torch.where(usable, values, zero), coef * usable[:, None].to(coef.dtype), usable)


def _step_prefix(code, table, longest_neg: int, longest_pos: int, device) -> torch.Tensor:
    """G[j − 1, r] = Σ_{m ≤ r} g(j, m), float64, (|N|, |P| + 1): the δ-differences without their per-row factor
    (:func:`_step_factor`), δ_j(m + 1) − δ_j(m) = g(j, m) · c, which depend on j and m alone (C4)."""
    j = torch.arange(1, longest_neg + 1, device=device, dtype=torch.float64)[:, None]
    m = torch.arange(1, longest_pos + 1, device=device, dtype=torch.float64)[None, :]
    if code is KernelCode.AP:
        g = -m / ((m + j - 1) * (m + j))
    elif code is KernelCode.AUC:
        g = torch.full((longest_neg, longest_pos), -1.0, dtype=torch.float64, device=device)
    else:  # a position discount: T(m + j) − T(m + j − 1), T 1-based
        last = table.shape[0] - 1
        at = (m + j).long()
        g = table[(at - 1).clamp(max=last)].double() - table[(at - 2).clamp(min=0, max=last)].double()
    return torch.nn.functional.pad(torch.cumsum(g, dim=1), (1, 0))


def _step_factor(code, table, n_pos, n_neg) -> torch.Tensor:
    """Each row's factor c of the δ-differences (float64): 1/|P| for AP, 1/(|P||N|) for AUC, and for a
    position discount 1/Σ_{i ≤ |P|} T(i)."""
    if code is KernelCode.AP:
        return 1.0 / n_pos.double()
    if code is KernelCode.AUC:
        return 1.0 / (n_pos.double() * n_neg.double())
    last = table.shape[0] - 1
    return 1.0 / torch.cumsum(table.double(), 0)[(n_pos - 1).clamp(min=0, max=last)]


def _binary_rows(code, table, scores, positive, negative, counts, longest: tuple[int, int]):
    """(values, coef) of rows with ``counts`` (|P|, |N|) per row, the largest ``longest``."""
    longest_pos, longest_neg = longest
    pos, pos_columns, pos_valid = _sorted_members(scores, positive, longest_pos)
    neg, neg_columns, neg_valid = _sorted_members(scores, negative, longest_neg)
    dtype, device = scores.dtype, scores.device
    # Rows with nothing to order (no positive or no negative) compute with 1 there and are zeroed by the caller.
    n_pos_rows, n_neg_rows = counts[0].clamp(min=1), counts[1].clamp(min=1)
    n_pos, n_neg = n_pos_rows.double()[:, None], n_neg_rows.double()[:, None]
    scale = 2.0 / (n_pos * n_neg)  # (B, 1): moving a negative above a positive costs 2 (s⁺ − s⁻) / (|P||N|)
    # The rank axis runs r = |P| … 0 (positives above the negative), so that the first maximiser torch.max
    # returns is the highest r: the compiled kernels' tie rule.
    r = torch.arange(longest_pos, -1, -1, device=device, dtype=torch.float64)[None, :]
    # Per row and rank, in float64: the positives' score terms, −inf beyond the row's positives.
    cumulative = _prefix(pos.double()).flip(1)  # Σ of the r highest positives
    row_terms = torch.where(
        r <= n_pos, -scale * (cumulative[:, :1] - cumulative), torch.full_like(cumulative, -torch.inf)
    )
    # δ_j at r: c (G[j, r] − G[j, |P|]), 0 at r = |P|; G's differences are taken in float64, where they
    # cancel without harm, and the table is cast to the scores' dtype once.
    prefix = _step_prefix(code, table, longest_neg, longest_pos, device)
    factor = _step_factor(code, table, n_pos_rows, n_neg_rows)[:, None]
    at_all = prefix[:, n_pos_rows].T  # (B, |N|): G[j, |P| of the row]
    base = row_terms[:, None, :] - (factor * at_all)[:, :, None]
    objective = torch.addcmul(base, factor[:, :, None], prefix.flip(1)[None]).to(dtype)
    # The negative's own term: (|P| − r) · 2 s⁻ / (|P||N|).
    objective.addcmul_((scale * (n_pos - r)).to(dtype)[:, None, :], neg[:, :, None])
    best, first = objective.max(dim=2)
    rank = longest_pos - first  # (B, |N|): positives above each negative
    values = torch.where(neg_valid, best, 0).sum(dim=1)
    row_scale = scale.to(dtype)
    neg_coef = torch.where(neg_valid, row_scale * (n_pos.to(dtype) - rank.to(dtype)), 0)
    # Positive a has negative j above it when j's rank ≤ a.
    placed = torch.zeros((scores.shape[0], longest_pos + 1), dtype=dtype, device=device)
    placed.scatter_add_(1, rank, neg_valid.to(dtype))
    above = torch.cumsum(placed, dim=1)[:, :longest_pos]
    pos_coef = torch.where(pos_valid, -row_scale * above, 0)
    pos_coef, neg_coef = _tie_runs_mean(pos, pos_coef, pos_valid), _tie_runs_mean(neg, neg_coef, neg_valid)
    coef = _scatter_rows(scores.shape, scores, pos_columns, pos_coef)
    coef.scatter_add_(1, neg_columns, neg_coef)
    return values.clamp(min=0.0), coef


# ---------------------------------------------------------------- top-k count losses


class TopKTensorKernel(TensorKernel):
    """A binary loss whose Δ counts the positives in the top k: the best ranking for each count m."""

    structure = TopKCountStructure
    label = "top-k count"

    def facts(self, loss, structure, relevance, mask):
        """Every row's positives and negatives: Δ(m) is the loss's own function of them, asked on the host."""
        return torch.cat(((mask & (relevance > 0)).sum(dim=1), (mask & (relevance == 0)).sum(dim=1)))

    def hinge(self, loss, structure, scores, relevance, mask, facts):
        positive, negative = mask & (relevance > 0), mask & (relevance == 0)
        counts = (positive.sum(dim=1), negative.sum(dim=1))
        n_pos_host, n_neg_host = np.asarray(facts, dtype=np.int64).reshape(2, -1)
        usable_host = (n_pos_host > 0) & (n_neg_host > 0)
        usable = (counts[0] > 0) & (counts[1] > 0)
        values = torch.zeros(scores.shape[0], dtype=scores.dtype, device=scores.device)
        coef = torch.zeros_like(scores)
        if not usable_host.any():
            return TensorHinge(values, coef, usable)
        width = min(structure.k, scores.shape[1])
        loss_key = loss.cache_key()
        pool = self.constants.get_or_build(
            None if loss_key is None else ("count losses", loss_key), lambda: CountLossPool.of_loss(loss)
        )
        deltas = _count_table(pool, n_pos_host, n_neg_host, width)
        longest = (max(int(n_pos_host.max()), 1), max(int(n_neg_host.max()), 1))
        values, coef = _topk_rows(
            scores,
            positive,
            negative,
            _copied_without_waiting(deltas, scores.dtype, scores.device),
            structure.k,
            counts,
            longest,
        )
        zero = torch.zeros_like(values)
        return TensorHinge(torch.where(usable, values, zero), coef * usable[:, None].to(coef.dtype), usable)


def _count_table(pool: CountLossPool, n_pos, n_neg, width: int) -> np.ndarray:
    """Δ(m) for m = 0 … width per row, from the loss's :class:`CountLossPool` (asked once per (|P|, |N|));
    −inf where m is infeasible."""
    table = np.full((n_pos.size, width + 1), -np.inf)
    usable = (n_pos > 0) & (n_neg > 0)
    if not usable.any():
        return table
    p, n = n_pos[usable], n_neg[usable]
    values, starts = pool.entries(p, n)
    kept = np.minimum(pool.structure.k, p + n)
    low, high = np.maximum(0, kept - n)[:, None], np.minimum(kept, p)[:, None]
    m = np.arange(width + 1)[None, :]
    feasible = (m >= low) & (m <= high)
    rows = np.full((p.size, width + 1), -np.inf)
    rows[feasible] = values[(starts[:, None] + m - low)[feasible]]
    table[usable] = rows
    return table


def _topk_rows(scores, positive, negative, deltas, k: int, counts, longest: tuple[int, int]):
    """(values, coef) of the top-k count hinge: for each count m of positives among the top k', the top
    group holds the m highest positives and the k' − m highest negatives, each group in score order.
    ``counts``: each row's (|P|, |N|); ``longest``: the most of a row (at least 1 each)."""
    dtype, device = scores.dtype, scores.device
    n_pos_i, n_neg_i = counts
    longest_pos, longest_neg = longest
    n_pos, n_neg = n_pos_i.to(dtype), n_neg_i.to(dtype)
    pos, pos_columns, pos_valid = _sorted_members(scores, positive, longest_pos)
    neg, neg_columns, neg_valid = _sorted_members(scores, negative, longest_neg)
    pos_up = torch.sort(torch.where(pos_valid, pos, torch.inf), dim=1).values
    neg_up = torch.sort(torch.where(neg_valid, neg, torch.inf), dim=1).values
    pos_up_sums = _prefix(torch.where(pos_valid, pos_up, 0))  # valid entries come first
    neg_up_sums = _prefix(torch.where(neg_valid, neg_up, 0))
    # A[a, b] = (s⁻_b − s⁺_a)⁺: each positive's negatives above it, each negative's positives below it.
    neg_at_most = torch.searchsorted(neg_up, pos, right=True)
    neg_above = n_neg_i[:, None] - neg_at_most  # negatives strictly above positive a
    neg_above_sum = neg_up_sums[:, -1:] - neg_up_sums.gather(1, neg_at_most)
    row_a = torch.where(pos_valid, neg_above_sum - neg_above.to(dtype) * pos, 0)
    under = torch.searchsorted(pos_up, neg, right=False)  # positives strictly below negative b
    col_a = torch.where(neg_valid, under.to(dtype) * neg - pos_up_sums.gather(1, under), 0)
    width = deltas.shape[1] - 1
    top_pos, top_neg = min(width, longest_pos), min(width, longest_neg)
    block = (neg[:, None, :top_neg] - pos[:, :top_pos, None]).clamp(min=0.0)
    block = block * (pos_valid[:, :top_pos, None] & neg_valid[:, None, :top_neg]).to(dtype)
    block_sums = torch.nn.functional.pad(torch.cumsum(torch.cumsum(block, 1), 2), (1, 0, 1, 0))
    kept = torch.clamp(n_pos_i + n_neg_i, max=k)
    m = torch.arange(width + 1, device=device)[None, :]
    q = kept[:, None] - m
    feasible = torch.isfinite(deltas) & (q >= 0) & (m <= top_pos) & (q <= top_neg)
    m_at, q_at = m.clamp(max=top_pos).expand_as(q), q.clamp(min=0, max=top_neg)
    a_top = block_sums[torch.arange(scores.shape[0], device=device)[:, None], m_at, q_at]
    a_bottom = row_a.sum(1, keepdim=True) - _prefix(row_a).gather(1, m_at) - _prefix(col_a).gather(1, q_at) + a_top
    pos_sums, neg_sums = _prefix(pos), _prefix(neg)
    cross = q_at.to(dtype) * (pos_sums[:, -1:] - pos_sums.gather(1, m_at)) - (
        n_pos[:, None] - m_at.to(dtype)
    ) * neg_sums.gather(1, q_at)
    scale = (2.0 / (n_pos * n_neg).clamp(min=1.0))[:, None]
    objective = torch.where(feasible, deltas + scale * (a_top + a_bottom - cross), -torch.inf)
    best_m = _highest_argmax(objective, dim=1)
    values = objective.gather(1, best_m[:, None])[:, 0]
    values = torch.where(torch.isfinite(values), values, 0).clamp(min=0.0)
    best_q = (kept - best_m)[:, None]
    best_m = best_m[:, None]
    index = torch.arange(longest_neg, device=device)[None, :]
    top_pos_below = (best_m - (n_pos_i[:, None] - under)).clamp(min=0)
    in_top = index < best_q
    neg_coef = torch.where(in_top, top_pos_below + (n_pos_i[:, None] - best_m), under - top_pos_below)
    neg_coef = torch.where(neg_valid, scale * neg_coef.to(dtype), 0)
    index = torch.arange(longest_pos, device=device)[None, :]
    pos_top = index < best_m
    pos_coef = torch.where(pos_top, torch.minimum(best_q, neg_above), (neg_above - best_q).clamp(min=0) + best_q)
    pos_coef = torch.where(pos_valid, -scale * pos_coef.to(dtype), 0)
    pos_coef, neg_coef = _tie_runs_mean(pos, pos_coef, pos_valid), _tie_runs_mean(neg, neg_coef, neg_valid)
    coef = _scatter_rows(scores.shape, scores, pos_columns, pos_coef)
    coef.scatter_add_(1, neg_columns, neg_coef)
    return values, coef


# ---------------------------------------------------------------- graded position losses


class GradedPositionTensorKernel(TensorKernel):
    """Gain of each grade, discount of each position, cutoff k: the top k' of each document's utility."""

    structure = GradedPositionStructure
    graded = True
    label = "graded position"

    def facts(self, loss, structure, relevance, mask):
        return _grade_facts(relevance, mask)

    def hinge(self, loss, structure, scores, relevance, mask, facts):
        dtype, device = scores.dtype, scores.device
        levels = _present_levels(facts)
        if levels is None:  # grades from PRESENCE_GRADES on: the levels read from the data, a second read
            levels = np.unique(relevance[mask].cpu().numpy()).astype(np.int64)
        # The host's tables and their bound on a query's Σ G·D, for the longest row it keeps.
        host_gains, host_discount = structure.tables(levels, _longest_row(facts))
        level, level_gains = _grade_table(self.constants, relevance, mask, lambda _: host_gains, levels)
        gains = torch.where(mask, level_gains.to(dtype)[level], torch.zeros((), dtype=dtype, device=device))
        discount = _device_constant(self.constants, host_discount, dtype, device)
        width = discount.shape[0]
        sizes = mask.sum(dim=1)
        kept = torch.clamp(sizes, max=width)
        position = torch.arange(width, device=device)[None, :]
        weight = torch.where(position < kept[:, None], discount[None, :], torch.zeros((), dtype=dtype, device=device))
        total = weight.sum(dim=1, keepdim=True)
        ideal_gains, ideal_order = torch.sort(torch.where(mask, gains, -1.0), dim=1, descending=True, stable=True)
        ideal = (weight * ideal_gains[:, :width].clamp(min=0.0)).sum(dim=1, keepdim=True)
        usable = (ideal_gains[:, :1] > torch.where(mask, gains, torch.inf).min(dim=1, keepdim=True).values)[:, 0]
        safe_total = torch.where(total > 0, total, torch.ones_like(total))
        safe_ideal = torch.where(ideal > 0, ideal, torch.ones_like(ideal))
        utility = torch.where(mask, scores / safe_total - gains / safe_ideal, -torch.inf)
        # Every document by utility, then gain (two stable sorts): a tie group (equal utility and gain) shares
        # the weights of the positions it spans, as on the host, so that no subgradient depends on the order
        # the documents come in.
        by_gain = torch.sort(gains, dim=1, descending=True, stable=True).indices  # equal utility: higher gain first
        ranked, at = torch.sort(utility.gather(1, by_gain), dim=1, descending=True, stable=True)
        order = by_gain.gather(1, at)
        ranked_gains = gains.gather(1, order)
        placed = position < kept[:, None]
        best = 1.0 + torch.where(placed, weight * ranked[:, :width], 0).sum(dim=1)
        tied = (ranked[:, 1:] == ranked[:, :-1]) & (ranked_gains[:, 1:] == ranked_gains[:, :-1])
        coef = _tie_group_mean(order, tied, torch.where(placed, weight / safe_total, 0), mask)
        ideal_tied = ideal_gains[:, 1:] == ideal_gains[:, :-1]
        truth = _tie_group_mean(ideal_order, ideal_tied, weight / safe_total, mask)
        values = best - (truth * torch.where(mask, scores, 0)).sum(dim=1)
        zero = torch.zeros_like(values)
        return TensorHinge(
            torch.where(usable, values.clamp(min=0.0), zero), (coef - truth) * usable[:, None].to(dtype), usable
        )


def _tie_group_mean(order, tied, position_weight, mask):
    """Each document's coefficient in a ranking ``order`` (B, L) whose position j holds ``position_weight[:, j]``
    (0 past its width): the mean weight of its tie group, ``tied[:, j]`` saying that positions j and j + 1 tie.
    Ψ*'s coefficients (the ideal order, ties of equal gain) and the most violated ranking's (ties of equal
    utility and gain) alike."""
    weight = torch.nn.functional.pad(position_weight, (0, order.shape[1] - position_weight.shape[1]))
    coef = torch.zeros_like(weight).scatter_(1, order, _run_means(weight, tied))
    return torch.where(mask, coef, 0)


# ---------------------------------------------------------------- graded pair losses


class GradedPairTensorKernel(TensorKernel):
    """SVM^rank's pairs over grades, weighted by their two grades or all alike: batched binary searches."""

    structure = GradedPairStructure
    graded = True
    label = "graded pairwise"

    def facts(self, loss, structure, relevance, mask):
        return _grade_facts(relevance, mask)

    def hinge(self, loss, structure, scores, relevance, mask, facts):
        dtype, device = scores.dtype, scores.device
        levels = _present_levels(facts)
        if levels is None:
            raise TensorKernelUnsupported(f"grades of {PRESENCE_GRADES} or more in a batch")
        level, _ = _grade_table(self.constants, relevance, mask, lambda levels: np.arange(levels.size), levels)
        weights = structure.weight_matrix(levels, _longest_row(facts))
        member = [mask & (level == t) for t in range(levels.size)]
        count = torch.stack([m.sum(dim=1) for m in member], dim=1).to(dtype)  # (B, K)
        values = torch.zeros(scores.shape[0], dtype=dtype, device=device)
        coef = torch.zeros_like(scores)
        total = torch.zeros_like(values)
        shifted = scores - 0.5  # a pair (i above j in grade) is violated when s_j > s_i − 1/2
        for higher, lower, w in _level_pairs(weights, structure.weight is None):
            upper = member[higher]
            lower_mask = member[lower] if lower is not None else mask & (level < higher)
            pair_weight = float(w)
            n_lower = lower_mask.sum(dim=1, keepdim=True)
            lower_up = torch.sort(torch.where(lower_mask, scores, torch.inf), dim=1).values
            lower_sums = _prefix(torch.where(torch.isfinite(lower_up), lower_up, 0))
            at = torch.searchsorted(lower_up, shifted, right=True)
            violated = torch.where(upper, n_lower - at, 0).to(dtype)
            above_sum = lower_sums[:, -1:] - lower_sums.gather(1, at.clamp(max=scores.shape[1]))
            terms = violated * (1.0 - 2.0 * scores) + 2.0 * torch.where(upper, above_sum, 0)
            values += pair_weight * torch.where(upper, terms, 0).sum(dim=1)
            upper_up = torch.sort(torch.where(upper, shifted, torch.inf), dim=1).values
            beaten = torch.searchsorted(upper_up, scores, right=False).to(dtype)
            coef += pair_weight * (2.0 * torch.where(lower_mask, beaten, 0) - 2.0 * violated)
            total += pair_weight * count[:, higher] * n_lower[:, 0].to(dtype)
        usable = total > 0
        safe = torch.where(usable, total, torch.ones_like(total))
        zero = torch.zeros_like(values)
        return TensorHinge(torch.where(usable, (values / safe).clamp(min=0.0), zero), coef / safe[:, None], usable)


def _level_pairs(weights: np.ndarray, unweighted: bool):
    """(higher level, lower level or None for every lower one, weight) of the pairs to sweep."""
    if unweighted:
        return [(higher, None, 1.0) for higher in range(1, weights.shape[0])]
    return [
        (higher, lower, weights[higher, lower])
        for higher in range(weights.shape[0])
        for lower in range(higher)
        if weights[higher, lower] > 0
    ]


def _register() -> None:
    from rankopt.inference.structure_table import register_kernel

    for kernel in (BinaryTensorKernel(), TopKTensorKernel(), GradedPositionTensorKernel(), GradedPairTensorKernel()):
        register_kernel(kernel)


_register()
