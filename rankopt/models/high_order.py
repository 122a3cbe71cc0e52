"""HOB-SVM's and HOAP-SVM's problems (Dokania et al. 2014).

Both rank samples by the difference of max-marginals s_i = m_i⁺ − m_i⁻
(eq. 11) of the HOB score w·Ψ(X, Y) (:mod:`rankopt.features.high_order`),
computed exactly with dynamic graph cuts because training keeps w₂ ≤ 0.

HOB-SVM (§3) is a convex structural SVM over labelings with the weighted 0-1
loss of eq. (7); its loss-augmented inference is one graph cut.

HOAP-SVM (§4) optimises the AP loss of the ranking by s.  With
α_i = γ Σ_j (R*_ij − R_ij) ≥ 0 for positives and β_j = γ Σ_i (R*_ij − R_ij) ≥ 0
for negatives (γ = 1/(|P||N|), a correction listed in docs/maths.md), the margin violation of a
ranking R is

    Δ(R) + S(R) − S(R*) = Δ(R) + f(w; R) − g(w; R),
    f = Σ_P α_i m_i⁻ + Σ_N β_j m_j⁺,   g = Σ_P α_i m_i⁺ + Σ_N β_j m_j⁻,

a difference of convex functions (max-marginals are maxima of linear
functions of w).  CCCP (Algorithm 1) replaces g by its linearisation at w_t
(Prop. 4), Σ α_i w·Ψ(X, Ȳ_i⁺) + Σ β_j w·Ψ(X, Ȳ_j⁻) with the max-marginal
labelings Ȳ of w_t, and solves the resulting convex problem by the cutting
plane: its most violated constraint is the most violated *ranking* for the
scores s̄ of Prop. 5 (max-marginals at w against the frozen labelings),
found by :func:`rankopt.most_violated_ranking`, together with the labelings
Y_i⁻, Y_j⁺ attaining f.  The constraint's joint feature is therefore
Σ_P α_i (Ψ(Y_i⁻) − Ψ(Ȳ_i⁺)) + Σ_N β_j (Ψ(Y_j⁺) − Ψ(Ȳ_j⁻)), with Ψ(X, R*)
contributing nothing (α = β = 0 for R*).

The baselines of §5 are the same models with w₂ = 0, i.e. without pairs.
The estimators are in :mod:`rankopt.estimators.high_order`; the plugins that
build these problems in :mod:`rankopt.models.high_order_plugin`.
"""

from __future__ import annotations

import logging

import numpy as np

from rankopt.engine.cccp import CCCPProblem
from rankopt.engine.problem import Constraint, LinearConstraints, StructuredProblem
from rankopt.features.high_order import HighOrderFeatureMap, HighOrderInput
from rankopt.graphcut import loss_augmented_labeling, max_marginals
from rankopt.inference.base import most_violated_ranking
from rankopt.losses.base import LabelingLoss, RankLoss

logger = logging.getLogger(__name__)

__all__ = ["HOAPConvexProblem", "HOAPProblem", "HOBProblem", "check_input", "project"]


def _pairwise_constraints(X: HighOrderInput) -> LinearConstraints | None:
    """w₂ ≤ 0 — only needed when Ψ₂ can be non-zero (otherwise the QP keeps w₂ = 0)."""
    if not X.has_pairwise:
        return None
    d = X.d
    return LinearConstraints.nonpositive(3 * d, np.arange(2 * d, 3 * d))


def project(X: HighOrderInput, w: np.ndarray) -> np.ndarray:
    """w with w₂ clipped to ≤ 0: the interior-point QP meets w₂ ≤ 0 only to its tolerance."""
    w = np.asarray(w, dtype=np.float64).copy()
    np.minimum(w[2 * X.d :], 0.0, out=w[2 * X.d :])
    return w


def check_input(X, feature_map) -> None:
    if not isinstance(X, HighOrderInput):
        raise ValueError(f"expected a HighOrderInput, got {type(X).__name__} instead")
    if not isinstance(feature_map, HighOrderFeatureMap):
        raise ValueError(f"expected the 'high_order' feature map, got {feature_map.name!r} instead")


class HOBProblem(StructuredProblem):
    """Problem (8): labelings, weighted 0-1 loss, w₂ ≤ 0; inference by one cut.

    The joint feature is Ψ(X, Y)/n, the mean rather than the sum of eqs.
    (4)–(5), like the γ = 1/(|P||N|) of the ranking joint feature.  This only
    re-parameterises the problem — its solution w is n·u for the solution u of
    eq. (8) with C/n² — but keeps the cutting planes' norms O(‖ψ‖) whatever n,
    which the working-set QP needs (planes of norm ~10³ stall it), and lets C
    range over the same values as for AP-SVM.  :attr:`scale` converts back:
    u = scale · w scores labelings with the unnormalised Ψ.
    """

    def __init__(self, X: HighOrderInput, y: np.ndarray, loss: LabelingLoss, feature_map: HighOrderFeatureMap):
        self.X, self.y = X, np.asarray(y, dtype=bool)
        self.feature_map = feature_map
        self.cost = np.asarray(loss.sample_weights(self.y), dtype=np.float64)
        self.n_features = feature_map.n_features(X)
        self.linear_constraints = _pairwise_constraints(X)
        self.scale = 1.0 / X.n_samples
        self._psi_star = self.scale * feature_map.joint_feature(X, self.y)

    def ground_truth_feature(self):
        return self._psi_star

    def most_violated(self, w):
        u1, u0, edges, penalty = self.feature_map.energy(self.X, self.scale * project(self.X, w))
        labels, loss = loss_augmented_labeling(u1, u0, edges, penalty, self.y, self.cost)
        return Constraint(self.scale * self.feature_map.joint_feature(self.X, labels), loss)


class HOAPConvexProblem(StructuredProblem):
    """Problem (17): the convex bound of HOAP-SVM tight at w_t (one CCCP step)."""

    def __init__(self, parent: HOAPProblem, w_t: np.ndarray):
        self.parent = parent
        X, fmap = parent.X, parent.feature_map
        self.n_features = parent.n_features
        self.linear_constraints = parent.linear_constraints
        _, _, plus, minus = max_marginals(*fmap.energy(X, parent.scale * project(X, w_t)), return_labelings=True)
        self.bar_plus = plus.rows(parent.pos)  # Ȳ_i⁺, i ∈ P (Prop. 4)
        self.bar_minus = minus.rows(parent.neg)  # Ȳ_j⁻, j ∈ N

    def ground_truth_feature(self):
        return np.zeros(self.n_features)  # f − l vanishes at R* (α = β = 0)

    def most_violated(self, w):
        p = self.parent
        X, fmap = p.X, p.feature_map
        energy = fmap.energy(X, p.scale * project(X, w))
        m_plus, m_minus, plus, minus = max_marginals(*energy, return_labelings=True)
        s_pos = self.bar_plus.scores(*energy) - m_minus[p.pos]  # Prop. 5
        s_neg = m_plus[p.neg] - self.bar_minus.scores(*energy)
        ranking = most_violated_ranking(p.loss, s_pos, s_neg, p.inference, registry=p.registry)
        n_pos, n_neg = p.pos.size, p.neg.size
        # α, β ≥ 0 exactly; the clip removes rounding of 1/|P| − coef.
        alpha = np.maximum(1.0 / n_pos - ranking.pos_coef, 0.0)
        beta = np.maximum(ranking.neg_coef + 1.0 / n_neg, 0.0)
        feature = p.scale * (
            fmap.combine_labelings(X, minus.rows(p.pos), alpha)
            - fmap.combine_labelings(X, self.bar_plus, alpha)
            + fmap.combine_labelings(X, plus.rows(p.neg), beta)
            - fmap.combine_labelings(X, self.bar_minus, beta)
        )
        return Constraint(feature, ranking.loss)


class HOAPProblem(CCCPProblem):
    """Problem (14)/(16) of HOAP-SVM, for :func:`rankopt.engine.solve_cccp`.

    Like :class:`HOBProblem`, it scores with Ψ/n (``scale`` = 1/n): the
    max-marginal labelings at two parameter vectors can differ on whole
    communities, and the unnormalised planes (norms ~10³–10⁴ on Cora) stall
    the working-set QP.  Its w is therefore in HOB-SVM's units (HOB-SVM's
    solution is a valid start), but its C is not on HOB-SVM's scale: the
    margins here are γ-weighted max-marginal differences of Ψ/n, against a
    weighted 0-1 loss whose per-sample costs sum to 1 in HOB-SVM.  Without
    pairs the objective is (n²/2)·(AP-SVM's objective with C_AP = 2C/n²)
    (tests/estimators/test_high_order.py), so at HOB-SVM's C the regulariser
    dominates and CCCP mostly shrinks w.
    """

    def __init__(self, X: HighOrderInput, y, loss: RankLoss, feature_map: HighOrderFeatureMap, inference, registry):
        self.X, self.y = X, np.asarray(y, dtype=bool)
        self.loss, self.feature_map = loss, feature_map
        self.registry = registry
        self.inference = registry.resolve_method(inference, loss).name
        self.pos, self.neg = np.flatnonzero(self.y), np.flatnonzero(~self.y)
        self.n_features = feature_map.n_features(X)
        self.linear_constraints = _pairwise_constraints(X)
        self.scale = 1.0 / X.n_samples

    def convexify(self, w):
        return HOAPConvexProblem(self, w)

    def slack(self, w) -> float:
        """ξ(w) = max_R Δ(R) + S(R; w) − S(R*; w) for the ranking scores s = m⁺ − m⁻."""
        s = self.feature_map.scores(self.X, self.scale * project(self.X, w))
        ranking = most_violated_ranking(self.loss, s[self.pos], s[self.neg], self.inference, registry=self.registry)
        truth = float(s[self.pos].mean() - s[self.neg].mean())
        return max(0.0, ranking.value - truth)

    def objective(self, w, C):
        w = np.asarray(w, dtype=np.float64)
        return 0.5 * float(w @ w) + C * self.slack(w)
