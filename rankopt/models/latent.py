"""The latent models' problems: latent AP-SVM (Behl et al. (2015) §4.2) and its baselines.

The structured problems and CCCP problems the estimators of
:mod:`rankopt.estimators.latent` solve.  Every sample is a bag of candidates
Φ_i(h) (:class:`rankopt.data.bags.Bags`); the right candidate h is latent.

* :class:`LatentRankingCCCP` / :class:`LatentAPProblem` — problem (9),
  Algorithm 3.  Output-consistent inference gives every positive its
  highest-scoring candidate (Prop. 2); loss-augmented inference first
  maximises every negative over its candidates (Prop. 3), then ranks with the
  batched :func:`rankopt.inference.batched.most_violated_rankings` (one call
  for all queries; one query without ``qid``).  Both are exact; one call
  costs O(total candidates) for the scores and their per-bag maxima plus the
  ranking step.
* :class:`LatentSVMCCCP` — latent binary SVM with positive weight J and the
  robustness fraction c of §5.1 (the c·100 % most confusing negative
  candidates are ignored, at least one kept per negative bag).
* :class:`LatentSSVMProblem` — the standard latent structural SVM of problem
  (6) with the AP loss and the approximate loss-augmented inference of
  Appendix C.

Queries of bags (:class:`BagQueries`): one w, one slack, the per-query
problems averaged as in :class:`~rankopt.models.ranking.QueryRankingProblem`
— Ψ = (1/Q) Σ_q Ψ_q, Δ = (1/Q) Σ_q Δ_q over the Q queries holding a positive
and a negative bag.  Props. 2 and 3 hold query by query, so the imputation and
the loss-augmented inference stay exact.

Joint features follow Behl et al. (2015) eq. (1) with the scale 1/(|P||N|) on
both s_i and s_j (a correction listed in docs/maths.md).  Because the ground-truth term
Ψ(X, Y*, {H_P, Ĥ_N}) depends on the negatives' chosen candidates Ĥ_N, the
problems report the fixed positive part (1/|P|) Σ Φ_i(h_i*) as the
ground-truth feature and move the varying negative part −(1/|N|) Σ Φ_j(ĥ_j)
to the output side, so that the engine's cutting plane Ψ* − Ψ̂ is exactly
Ψ(X, Y*, Ĥ) − Ψ(X, Ŷ, Ĥ).
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp
from scipy.optimize import linear_sum_assignment

import rankopt.models._latent_ssvm as _latent_ssvm
from rankopt._validation import group_queries
from rankopt.data.bags import Bags
from rankopt.engine.cccp import CCCPProblem
from rankopt.engine.problem import Constraint, StructuredProblem
from rankopt.inference.batched import most_violated_rankings
from rankopt.losses.base import RankLoss
from rankopt.losses.zero_one import ZeroOneLoss
from rankopt.models.binary import BinaryProblem

logger = logging.getLogger(__name__)

__all__ = [
    "BagQueries",
    "LatentAPProblem",
    "LatentRankingCCCP",
    "LatentSSVMProblem",
    "LatentSVMCCCP",
    "ssvm_pattern_value",
]


@dataclass(frozen=True, eq=False)
class BagQueries:
    """The queries positive and negative bags form, laid out for batched inference.

    Query q's bags are items ``offsets[q]:offsets[q + 1]`` of a concatenation
    (its positive bags, then its negative bags), over the ``n_used`` queries
    that hold both; the others are left out.  ``pos_slots[k]`` is the item of
    positive bag ``pos_items[k]`` (likewise for negatives).  ``pos_weight`` /
    ``neg_weight`` hold 1/(Q|P_q|) / 1/(Q|N_q|) per bag (0 in a query left
    out): the ground truth's coefficients, Q = ``n_used``.
    """

    n_queries: int
    n_used: int
    offsets: np.ndarray
    relevance: np.ndarray
    pos_slots: np.ndarray
    pos_items: np.ndarray
    neg_slots: np.ndarray
    neg_items: np.ndarray
    pos_weight: np.ndarray
    neg_weight: np.ndarray

    @classmethod
    def from_qid(cls, pos_qid: np.ndarray, neg_qid: np.ndarray) -> BagQueries:
        """From the query ids (int64) of the positive and of the negative bags."""
        n_pos = pos_qid.size
        index = group_queries(np.concatenate([pos_qid, neg_qid]))
        # Within a query the grouping keeps input order: positive bags come first.
        is_pos = index.order < n_pos
        query_of_item = np.repeat(np.arange(index.n_queries), index.sizes)
        pos_count = np.bincount(query_of_item, weights=is_pos, minlength=index.n_queries).astype(np.int64)
        neg_count = index.sizes - pos_count
        used = (pos_count > 0) & (neg_count > 0)
        n_used = int(np.count_nonzero(used))
        if n_used == 0:
            raise ValueError(
                f"expected some query to hold a positive and a negative bag, got none of the "
                f"{index.n_queries} queries instead"
            )
        if n_used < index.n_queries:
            logger.info(
                "%d of %d queries have bags of one label only and are left out",
                index.n_queries - n_used,
                index.n_queries,
            )
        kept = used[query_of_item]
        order, item_query = index.order[kept], query_of_item[kept]
        slots = np.arange(order.size)
        sizes = index.sizes[used]
        pos_weight = np.zeros(n_pos)
        neg_weight = np.zeros(neg_qid.size)
        is_pos_kept = order < n_pos
        pos_items, neg_items = order[is_pos_kept], order[~is_pos_kept] - n_pos
        pos_weight[pos_items] = 1.0 / (n_used * pos_count[item_query[is_pos_kept]])
        neg_weight[neg_items] = 1.0 / (n_used * neg_count[item_query[~is_pos_kept]])
        return cls(
            n_queries=index.n_queries,
            n_used=n_used,
            offsets=np.concatenate(([0], np.cumsum(sizes))).astype(np.int64),
            relevance=is_pos_kept.astype(np.int64),
            pos_slots=slots[is_pos_kept],
            pos_items=pos_items,
            neg_slots=slots[~is_pos_kept],
            neg_items=neg_items,
            pos_weight=pos_weight,
            neg_weight=neg_weight,
        )

    @classmethod
    def single(cls, n_pos: int, n_neg: int) -> BagQueries:
        """All bags in one query."""
        return cls.from_qid(np.zeros(n_pos, dtype=np.int64), np.zeros(n_neg, dtype=np.int64))


class LatentAPProblem(StructuredProblem):
    """Problem (12): latent AP-SVM with the positives' candidates fixed, over one query or many.

    Loss-augmented inference (13) takes every negative bag's best candidate
    (Prop. 3: its coefficient Σ_i (Y*_ij − Y_ij)/(|P||N|) is never negative)
    and then every query's most violated ranking of those scores, in one
    batched call.  Joint features and losses are averaged over the queries
    used (:class:`BagQueries`).
    """

    def __init__(
        self, X_pos, neg: Bags, loss: RankLoss, inference: str, registry, feature_map, queries: BagQueries | None = None
    ):
        self.X_pos, self.neg = X_pos, neg
        self.loss, self.inference = loss, inference
        self.registry, self.feature_map = registry, feature_map
        self.n_features = feature_map.n_features(X_pos)
        self.n_pos, self.n_neg = X_pos.shape[0], neg.n_bags
        self.queries = BagQueries.single(self.n_pos, self.n_neg) if queries is None else queries
        self._psi_star = feature_map.combine(X_pos, self.queries.pos_weight)

    def ground_truth_feature(self):
        return self._psi_star

    def most_violated(self, w):
        fm, queries = self.feature_map, self.queries
        neg_best, neg_rows = self.neg.best(fm.scores(self.neg.X, w))
        scores = np.empty(queries.relevance.size)
        scores[queries.pos_slots] = np.asarray(fm.scores(self.X_pos, w))[queries.pos_items]
        scores[queries.neg_slots] = neg_best[queries.neg_items]
        result = most_violated_rankings(
            self.loss, scores, queries.relevance, queries.offsets, self.inference, registry=self.registry
        )
        coef = result.coef / queries.n_used
        pos_coef = np.zeros(self.n_pos)
        pos_coef[queries.pos_items] = coef[queries.pos_slots]
        neg_coef = np.zeros(self.n_neg)
        neg_coef[queries.neg_items] = coef[queries.neg_slots]
        feature = fm.combine(self.X_pos, pos_coef) + fm.combine(self.neg.X[neg_rows], neg_coef + queries.neg_weight)
        return Constraint(feature, float(np.mean(result.losses)))


def _assign_to_slots(top: np.ndarray, bottom: np.ndarray, coef: np.ndarray) -> tuple[float, np.ndarray]:
    """Best assignment of samples to slots, sample s in slot a earning max(c_a·top_s, c_a·bottom_s).

    Returns the total and the slot of every sample (``linear_sum_assignment``
    on the square gain matrix; its row indices come back as 0…n−1).
    """
    gain = np.maximum(np.outer(top, coef), np.outer(bottom, coef))
    rows, slot = linear_sum_assignment(gain, maximize=True)
    return float(gain[rows, slot].sum()), slot


def ssvm_pattern_value(loss, neg_ranks, pos_max, pos_min, neg_max, neg_min):
    """Appendix C for one ranking pattern: the best assignment of samples and candidates.

    ``neg_ranks`` are the sorted (non-decreasing) interleaving ranks 1…|P|+1
    of the negative slots.  A slot with coefficient c (Σ_ij Y_ij-counts, the
    scale 1/(|P||N|) applied at the end) earns max_h c·s(h) from the sample
    placed in it: c·max s when c ≥ 0, c·min s otherwise.  The assignment of
    samples to slots is solved exactly with ``linear_sum_assignment``.

    Returns (value, loss value, positive slot coefficients, positive slot of
    each positive, negative slot coefficients, negative slot of each negative),
    value = Δ + (assignment score)/(|P||N|).
    """
    n_pos, n_neg = pos_max.size, neg_max.size
    neg_ranks = np.asarray(neg_ranks)
    above = np.searchsorted(neg_ranks, np.arange(1, n_pos + 1), side="right")  # negatives above slot k
    pos_c = (n_neg - 2 * above).astype(np.float64)
    neg_c = (n_pos + 2 - 2 * neg_ranks).astype(np.float64)
    pos_total, pos_slot = _assign_to_slots(pos_max, pos_min, pos_c)
    neg_total, neg_slot = _assign_to_slots(neg_max, neg_min, neg_c)
    loss_value = float(loss.value_at_positions(np.arange(1, n_pos + 1) + above, n_neg))
    return loss_value + (pos_total + neg_total) / (n_pos * n_neg), loss_value, pos_c, pos_slot, neg_c, neg_slot


class LatentSSVMProblem(StructuredProblem):
    """Algorithm 4, step 4: the latent SSVM's convex problem with Ĥ_P* fixed.

    Ground truth: the imputed positives and every negative's best candidate
    (eq. 39).  The incorrect output chooses ranking and all candidates
    freely; it is found approximately (Appendix C): starting from the perfect
    ranking, each negative slot in turn is shifted up to its best place with
    the others fixed, each pattern scored by :func:`ssvm_pattern_value`.
    """

    def __init__(self, X_pos_star, pos: Bags, neg: Bags, loss: RankLoss, feature_map):
        self.X_pos_star, self.pos, self.neg = X_pos_star, pos, neg
        self.loss, self.feature_map = loss, feature_map
        self.n_features = feature_map.n_features(X_pos_star)
        self.n_pos, self.n_neg = pos.n_bags, neg.n_bags
        self._psi_star = feature_map.combine(X_pos_star, np.full(self.n_pos, 1.0 / self.n_pos))
        #: Pattern values :meth:`greedy_ranks` had to take from the reference (near ties).
        self.n_exact_calls = 0
        self._delta_table: np.ndarray | None = None  # δ_j(i), j ≤ |N|, i ≤ |P| + 1: fixed by the loss and the sizes

    def ground_truth_feature(self):
        return self._psi_star

    def most_violated(self, w):
        fm = self.feature_map
        pos_scores = np.asarray(fm.scores(self.pos.X, w), dtype=np.float64)
        neg_scores = np.asarray(fm.scores(self.neg.X, w), dtype=np.float64)
        pos_max, pos_max_rows = self.pos.best(pos_scores)
        pos_min, pos_min_rows = self.pos.worst(pos_scores)
        neg_max, neg_max_rows = self.neg.best(neg_scores)
        neg_min, neg_min_rows = self.neg.worst(neg_scores)
        ranks = self.greedy_ranks(pos_max, pos_min, neg_max, neg_min)
        _, loss_value, pos_c, pos_slot, neg_c, neg_slot = ssvm_pattern_value(
            self.loss, ranks, pos_max, pos_min, neg_max, neg_min
        )
        scale = 1.0 / (self.n_pos * self.n_neg)
        pc, nc = pos_c[pos_slot], neg_c[neg_slot]  # per sample
        pos_rows = np.where(pc >= 0, pos_max_rows, pos_min_rows)
        neg_rows = np.where(nc >= 0, neg_max_rows, neg_min_rows)
        feature = (
            fm.combine(self.pos.X[pos_rows], pc * scale)
            + fm.combine(self.neg.X[neg_rows], nc * scale)
            + fm.combine(self.neg.X[neg_max_rows], np.full(self.n_neg, 1.0 / self.n_neg))
        )
        return Constraint(feature, loss_value)

    def greedy_ranks(self, pos_max, pos_min, neg_max, neg_min) -> np.ndarray:
        """Appendix C's greedy shift of the negative slots, top slot first.

        Starting from the perfect ranking (every negative at rank |P|+1), the
        negatives in turn try every rank from |P| up to the previous one's,
        each pattern scored by :func:`ssvm_pattern_value`; a strictly better
        pattern is kept.  That is O(|P||N|) patterns and, done naively, two
        fresh assignment problems each.  The compiled kernel
        (:mod:`rankopt.models._latent_ssvm`) visits the same patterns in the
        same order but repairs both assignments incrementally (one slot
        coefficient per class changes between consecutive patterns) and
        takes the loss from the C2 table δ_j(i); comparisons too close to
        call in floating point are decided by :func:`ssvm_pattern_value`
        itself, so the ranks are exactly those of the naive greedy.
        """
        n_pos, n_neg = self.n_pos, self.n_neg
        if self._delta_table is None:
            self._delta_table = np.ascontiguousarray(
                np.broadcast_to(
                    self.loss.delta(np.arange(1, n_neg + 1)[:, None], np.arange(1, n_pos + 2)[None, :], n_pos, n_neg),
                    (n_neg, n_pos + 1),
                ),
                dtype=np.float64,
            )
        # The fast values agree with the reference to rounding (~1e-16 relative
        # per operation); 1e-9 of the largest possible magnitude is ample margin.
        magnitude = 1.0 + (
            n_neg * float(np.abs(pos_max).sum() + np.abs(pos_min).sum())
            + n_pos * float(np.abs(neg_max).sum() + np.abs(neg_min).sum())
        ) / (n_pos * n_neg)
        loss = self.loss

        def exact_value(ranks):
            return ssvm_pattern_value(loss, ranks, pos_max, pos_min, neg_max, neg_min)[0]

        ranks, n_exact = _latent_ssvm.greedy_ranks(
            pos_max, pos_min, neg_max, neg_min, self._delta_table, 1e-9 * magnitude, exact_value
        )
        self.n_exact_calls += n_exact
        return ranks


# ============================================================================ CCCP problems


class _LatentCCCP(CCCPProblem):
    """The true objective ½‖w‖² + C ξ(w) through the convexification tight at w.

    Every model here minimises over the imputed quantities (the positives'
    candidates, and for LatentSVM the ignored negatives), which
    :meth:`convexify` picks optimally at w, so ξ(w) is the convex problem's
    exact slack at w: max(0, Δ̂ − w·(Ψ* − Ψ̂)).
    """

    def objective(self, w, C):
        w = np.asarray(w, dtype=np.float64)
        problem = self.convexify(w)
        constraint = problem.most_violated(w)
        xi = max(0.0, constraint.loss - float(w @ (problem.ground_truth_feature() - constraint.feature)))
        return 0.5 * float(w @ w) + C * xi


class LatentRankingCCCP(_LatentCCCP):
    """Latent AP-SVM (``model="apsvm"``) or latent SSVM (``model="ssvm"``) over bags."""

    def __init__(
        self, pos: Bags, neg: Bags, loss: RankLoss, feature_map, *, model="apsvm", inference="greedy", registry=None
    ):
        self.pos, self.neg = pos, neg
        self.loss, self.feature_map = loss, feature_map
        self.model, self.inference, self.registry = model, inference, registry
        self.n_features = feature_map.n_features(pos.X)
        if (pos.qid is None) != (neg.qid is None):
            raise ValueError("expected query ids on every bag or on none, got them on one label's bags only")
        if pos.qid is not None and model != "apsvm":
            raise ValueError(f"expected bags without query ids for model {model!r} (it ranks one query), got query ids")
        #: The queries of the AP-SVM model's problems (None for the latent SSVM, which ranks one query).
        self.queries = None
        if model == "apsvm":
            self.queries = (
                BagQueries.single(pos.n_bags, neg.n_bags)
                if pos.qid is None or neg.qid is None
                else BagQueries.from_qid(pos.qid, neg.qid)
            )

    def positive_rows(self, w) -> np.ndarray:
        """Output-consistent inference (Prop. 2): every positive's highest-scoring candidate."""
        return self.pos.best(self.feature_map.scores(self.pos.X, np.asarray(w, dtype=np.float64)))[1]

    def convexify(self, w):
        return self.fixed(self.positive_rows(w))

    def fixed(self, pos_rows) -> StructuredProblem:
        """The convex problem with the positives' candidates at rows ``pos_rows``."""
        X_pos = self.pos.X[pos_rows]
        if self.model == "apsvm":
            return LatentAPProblem(
                X_pos, self.neg, self.loss, self.inference, self.registry, self.feature_map, self.queries
            )
        return LatentSSVMProblem(X_pos, self.pos, self.neg, self.loss, self.feature_map)


class LatentSVMCCCP(_LatentCCCP):
    """Latent binary SVM: imputed positives, every negative candidate a negative example.

    ξ = (J Σ_{i∈P} [1 − s_i(h_i*)]₊ + Σ_{kept negative candidates k} [1 + s_k]₊) / (J|P| + M),
    the class-weighted hinge loss of :class:`~rankopt.models.binary.BinaryProblem`
    with :class:`~rankopt.losses.ZeroOneLoss` weights.  The ``robust``
    fraction of the M negative candidates with the largest loss is ignored,
    but never a bag's lowest-scoring candidate (§5.1: at least one box per
    negative image stays); the number ignored is fixed, so M is too.
    """

    def __init__(self, pos: Bags, neg: Bags, feature_map, *, J=None, robust=0.0):
        self.pos, self.neg, self.feature_map = pos, neg, feature_map
        self.n_features = feature_map.n_features(pos.X)
        self.loss = ZeroOneLoss(J)
        self.X_all = sp.vstack([pos.X, neg.X], format="csr") if sp.issparse(pos.X) else np.concatenate([pos.X, neg.X])
        droppable = neg.n_candidates - neg.n_bags
        self.n_ignored = min(int(math.floor(robust * neg.n_candidates)), droppable)
        n_kept = neg.n_candidates - self.n_ignored
        self.y = np.concatenate([np.ones(pos.n_bags, dtype=bool), np.zeros(n_kept, dtype=bool)])

    def convexify(self, w):
        w = np.asarray(w, dtype=np.float64)
        fm = self.feature_map
        pos_rows = self.pos.best(fm.scores(self.pos.X, w))[1]
        neg_rows = np.arange(self.neg.n_candidates)
        if self.n_ignored:
            scores = np.asarray(fm.scores(self.neg.X, w), dtype=np.float64)
            protected = self.neg.worst(scores)[1]
            candidates = np.setdiff1d(neg_rows, protected, assume_unique=True)
            top = np.argpartition(-scores[candidates], self.n_ignored - 1)[: self.n_ignored]
            neg_rows = np.setdiff1d(neg_rows, candidates[top], assume_unique=True)
        rows = np.concatenate([pos_rows, self.pos.n_candidates + neg_rows])
        return BinaryProblem(self.X_all[rows], self.y, self.loss, fm)
