"""HOB-SVM and HOAP-SVM (Dokania et al. 2014).

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
"""
from __future__ import annotations

import logging

import numpy as np
from sklearn.base import BaseEstimator
from sklearn.utils import ClassifierTags
from sklearn.utils.validation import check_is_fitted

from rankopt._validation import (
    check_binary_labels,
    check_feature_names,
    check_n_features,
    check_positive_float,
    check_positive_int,
)
from rankopt.engine.cccp import CCCPProblem, best_on_ray, solve_cccp
from rankopt.engine.cutting_plane import solve_cutting_plane
from rankopt.engine.problem import Constraint, LinearConstraints, StructuredProblem
from rankopt.features.high_order import HighOrderFeatureMap, HighOrderInput, check_eta
from rankopt.graphcut import loss_augmented_labeling, max_marginals
from rankopt.inference.base import most_violated_ranking
from rankopt.losses.base import LabelingLoss, RankLoss
from rankopt.metrics import average_precision
# HOBModel and HOAPModel, the plugins, live in a module of their own that imports
# neither scikit-learn nor the engine's solvers (``rankopt plugins`` lists them).
from rankopt.models.high_order_plugin import HOAPModel, HOBModel
from rankopt.models.progress import iteration_callback, verbose_logging

logger = logging.getLogger(__name__)

__all__ = [
    "HOAPModel",
    "HOAPProblem",
    "HOAPSVM",
    "HOBModel",
    "HOBProblem",
    "HOBSVM",
]


def _pairwise_constraints(X: HighOrderInput) -> LinearConstraints | None:
    """w₂ ≤ 0 — only needed when Ψ₂ can be non-zero (otherwise the QP keeps w₂ = 0)."""
    if not X.has_pairwise:
        return None
    d = X.d
    return LinearConstraints.nonpositive(3 * d, np.arange(2 * d, 3 * d))


def _project(X: HighOrderInput, w: np.ndarray) -> np.ndarray:
    """w with w₂ clipped to ≤ 0: the interior-point QP meets w₂ ≤ 0 only to its tolerance."""
    w = np.asarray(w, dtype=np.float64).copy()
    np.minimum(w[2 * X.d :], 0.0, out=w[2 * X.d :])
    return w


def _check_input(X, feature_map) -> None:
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
        u1, u0, edges, penalty = self.feature_map.energy(self.X, self.scale * _project(self.X, w))
        labels, loss = loss_augmented_labeling(u1, u0, edges, penalty, self.y, self.cost)
        return Constraint(self.scale * self.feature_map.joint_feature(self.X, labels), loss)


class HOAPConvexProblem(StructuredProblem):
    """Problem (17): the convex bound of HOAP-SVM tight at w_t (one CCCP step)."""

    def __init__(self, parent: "HOAPProblem", w_t: np.ndarray):
        self.parent = parent
        X, fmap = parent.X, parent.feature_map
        self.n_features = parent.n_features
        self.linear_constraints = parent.linear_constraints
        _, _, plus, minus = max_marginals(*fmap.energy(X, parent.scale * _project(X, w_t)), return_labelings=True)
        self.bar_plus = plus.rows(parent.pos)  # Ȳ_i⁺, i ∈ P (Prop. 4)
        self.bar_minus = minus.rows(parent.neg)  # Ȳ_j⁻, j ∈ N

    def ground_truth_feature(self):
        return np.zeros(self.n_features)  # f − l vanishes at R* (α = β = 0)

    def most_violated(self, w):
        p = self.parent
        X, fmap = p.X, p.feature_map
        energy = fmap.energy(X, p.scale * _project(X, w))
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
    (tests/models/test_high_order.py), so at HOB-SVM's C the regulariser
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
        s = self.feature_map.scores(self.X, self.scale * _project(self.X, w))
        ranking = most_violated_ranking(self.loss, s[self.pos], s[self.neg], self.inference, registry=self.registry)
        truth = float(s[self.pos].mean() - s[self.neg].mean())
        return max(0.0, ranking.value - truth)

    def objective(self, w, C):
        w = np.asarray(w, dtype=np.float64)
        return 0.5 * float(w @ w) + C * self.slack(w)


class _HighOrderRanker(BaseEstimator):
    """Shared input handling and prediction of HOB-SVM and HOAP-SVM."""

    def _registry(self):
        from rankopt.plugins import default_registry

        return default_registry()

    def _input(self, X, edges, groups, eta) -> HighOrderInput:
        return HighOrderInput.build(X, edges=edges, groups=groups, eta=eta)

    def _store(self, X: HighOrderInput, w: np.ndarray, with_pairs: bool) -> None:
        w = _project(X, w)
        d = X.d
        self.coef_ = w
        self.unary_coef_ = w[: 2 * d].reshape(2, d)
        self.pairwise_coef_ = w[2 * d :]
        self.n_features_in_ = d
        self.fitted_with_pairs_ = with_pairs

    def decision_function(self, X, edges=None, groups=None) -> np.ndarray:
        """Ranking scores s_i = m_i⁺ − m_i⁻ (eq. 11) over the similar pairs given.

        Pass the pairs among the samples of ``X`` the same way as at fit
        (``edges`` or ``groups``); a model fitted without pairs takes none.
        """
        check_is_fitted(self, "coef_")
        check_feature_names(self, X, reset=False)
        with_pairs = edges is not None or groups is not None
        if with_pairs != self.fitted_with_pairs_:
            if self.fitted_with_pairs_:
                raise ValueError(
                    "expected similar pairs (edges or groups) for the samples to rank, as at fit, got "
                    "neither instead"
                )
            raise ValueError(
                "expected no similar pairs: this model was fitted without edges or groups, got "
                f"{'edges' if edges is not None else 'groups'} instead"
            )
        inp = self._input(X, edges, groups, self.eta_)
        check_n_features(self, inp.d)
        return HighOrderFeatureMap().scores(inp, self.coef_)

    def score(self, X, y, edges=None, groups=None) -> float:
        """Average precision of the ranking by :meth:`decision_function`."""
        return average_precision(y, self.decision_function(X, edges=edges, groups=groups))

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.sparse = True
        tags.target_tags.required = True
        # Binary relevance, as RankSVM: scikit-learn's checks then feed two-class targets.
        tags.classifier_tags = ClassifierTags(multi_class=False)
        return tags


class HOBSVM(_HighOrderRanker):
    """High-order binary SVM: convex training, ranking by max-marginal differences.

    One query: the samples and their similarity graph form one ranking, and
    ``fit`` takes no ``qid``.  The graph cut couples samples across the whole
    graph, so several queries would have to be disjoint components with a
    loss per component; that is not implemented.

    Solves problem (8) of Dokania et al. (2014): min ½‖w‖² + C ξ over all
    labelings with the weighted 0-1 loss of eq. (7) (J = |N|/|P|) and w₂ ≤ 0,
    by the 1-slack cutting plane with one graph cut per iteration.

    Parameters
    ----------
    C : float, default 1.0
        Weight of the slack, for the mean-normalised joint feature Ψ/n (see
        :class:`HOBProblem`; C/n² in the units of eq. 8).
    eta : float, default 1.0
        η ≥ 0, the weight of the pairwise features Ψ₂ (eq. 5).
    tol : float, default 1e-3
        Cutting-plane tolerance on the constraint violation.
    max_iter : int, default 1000
        Cutting-plane iterations allowed (``ConvergenceWarning`` beyond).
    verbose : bool, default False
        Show every cutting-plane iteration (primal objective, duality gap,
        violation) on stderr during the fit, as :class:`~rankopt.RankSVM` does.

    Attributes
    ----------
    coef_ : ndarray of shape (3 d,)
        w = (w⁺, w⁻, w₂), scoring labelings with the Ψ of eqs. (4)–(5).
    unary_coef_ : ndarray of shape (2, d)
        Rows w⁺ (label 1) and w⁻ (label 0).
    pairwise_coef_ : ndarray of shape (d,)
        w₂, all ≤ 0.
    n_iter_, converged_, duality_gap_, history_ : cutting-plane diagnostics
        (``converged_`` only when the duality gap is at most C·tol).
    n_features_in_ : int
        d, the number of columns of X.
    feature_names_in_ : ndarray of str
        Column names of X in fit, when X was a DataFrame with string column
        names; prediction then refuses other or reordered columns.
    fitted_with_pairs_ : bool
        Whether fit got edges or groups (prediction must match).
    """

    def __init__(self, C=1.0, eta=1.0, tol=1e-3, max_iter=1000, verbose=False):
        self.C = C
        self.eta = eta
        self.tol = tol
        self.max_iter = max_iter
        self.verbose = verbose

    def fit(self, X, y, edges=None, groups=None):
        """Fit on samples X with binary relevance y and similar pairs (edges or groups)."""
        C = check_positive_float(self.C, "C")
        tol = check_positive_float(self.tol, "tol")
        max_iter = check_positive_int(self.max_iter, "max_iter")
        eta = check_eta(self.eta)
        check_feature_names(self, X, reset=True)
        inp = self._input(X, edges, groups, eta)
        y = check_binary_labels(y, inp.n_samples)
        registry = self._registry()
        problem = registry.get_model("high_order_binary").build_problem(
            inp, y, registry.get_loss("zero_one"), registry.get_feature_map("high_order"), registry=registry
        )
        callback = iteration_callback(type(self).__name__, verbose=self.verbose)
        with verbose_logging(self.verbose):
            result = solve_cutting_plane(problem, C, tol=tol, max_iter=max_iter, callback=callback)
        self.eta_ = eta
        # coef_ scores labelings with the unnormalised Ψ of eqs. (4)–(5), as HOAP-SVM's does.
        self._store(inp, problem.scale * result.w, edges is not None or groups is not None)
        self.n_iter_ = result.n_iter
        self.converged_ = result.converged
        self.duality_gap_ = result.duality_gap
        self.history_ = result.history
        return self


class HOAPSVM(_HighOrderRanker):
    """High-order AP-SVM: the AP loss over max-marginal rankings, trained by CCCP.

    One query: the samples and their similarity graph form one ranking, and
    ``fit`` takes no ``qid``.  The graph cut couples samples across the whole
    graph, so several queries would have to be disjoint components with a
    loss per component; that is not implemented.

    Algorithm 1 of Dokania et al. (2014): each CCCP step fixes the
    max-marginal labelings of the current w (Prop. 4) and solves the convex
    bound by the cutting plane, whose most violated ranking comes from
    :func:`rankopt.most_violated_ranking` on the scores of Prop. 5.  The
    CCCP objective never increases.

    Parameters
    ----------
    C : float, default 1.0
        Weight of the slack for the joint feature Ψ/n.  Not AP-SVM's or
        HOB-SVM's scale: without pairs HOAPSVM(C) is AP-SVM with
        C_AP = 2C/n² (n training samples), so comparable settings are ~n²/2
        times larger (see :class:`HOAPProblem`).
    eta : float, default 1.0
        η ≥ 0, the weight of the pairwise features.
    init : {"hob", "zero"} or array of shape (3 d,), default "hob"
        Start from a HOB-SVM fitted with the same C, η, from w = 0, or from
        given coefficients (w₂ is clipped to ≤ 0) — e.g. the ``coef_`` of a
        HOB-SVM fitted with its own C, the paper's start (Algorithm 1), since
        the two C scales differ.
    tol : float, default 1e-3
        Inner cutting-plane tolerance.
    max_iter : int, default 1000
        Inner cutting-plane iterations per CCCP step.
    cccp_tol : float, default 1e-3
        Stop CCCP when the objective falls by less than this (relative).
    cccp_max_iter : int, default 50
    inference : str, default "auto"
        Loss-augmented inference method for the AP loss.
    verbose : bool, default False
        Show the progress on stderr during the fit: the HOB-SVM start's
        iterations, then every inner cutting-plane iteration labelled with
        its CCCP step, and each step's objective
        (:mod:`rankopt.models.progress`).

    Attributes
    ----------
    coef_, unary_coef_, pairwise_coef_ : as :class:`HOBSVM`.
    objectives_ : list of float
        The HOAP objective ½‖w‖² + C ξ(w) (w of the Ψ/n problem, see
        :class:`HOAPProblem`) at the start and after each accepted step.
    n_iter_ : int
        CCCP steps run.
    converged_ : bool
        Whether CCCP stopped at a step whose inner solve was certified
        (duality gap ≤ C·tol) with a decrease below ``cccp_tol``.
    duality_gap_ : float
        The last inner solve's certified duality gap.
    steps_ : list of CCCPStep
        Per CCCP step: J before, the convex bound and J after, the inner
        gap and certification, and whether the step was accepted.
    init_coef_ : ndarray
        The starting coefficients (from ``init``), in the units of ``coef_``.
    init_scale_ : float
        The t ≥ 0 minimising J(t·w_init) along the start's ray; CCCP starts
        from ``init_scale_ * init_coef_``.
    n_features_in_, feature_names_in_ : as :class:`HOBSVM`.
    """

    def __init__(
        self,
        C=1.0,
        eta=1.0,
        init="hob",
        tol=1e-3,
        max_iter=1000,
        cccp_tol=1e-3,
        cccp_max_iter=50,
        inference="auto",
        verbose=False,
    ):
        self.C = C
        self.eta = eta
        self.init = init
        self.tol = tol
        self.max_iter = max_iter
        self.cccp_tol = cccp_tol
        self.cccp_max_iter = cccp_max_iter
        self.inference = inference
        self.verbose = verbose

    def fit(self, X, y, edges=None, groups=None):
        """Fit on samples X with binary relevance y and similar pairs (edges or groups)."""
        C = check_positive_float(self.C, "C")
        tol = check_positive_float(self.tol, "tol")
        max_iter = check_positive_int(self.max_iter, "max_iter")
        cccp_tol = check_positive_float(self.cccp_tol, "cccp_tol")
        cccp_max_iter = check_positive_int(self.cccp_max_iter, "cccp_max_iter")
        eta = check_eta(self.eta)
        if not isinstance(self.inference, str):
            raise ValueError(f"expected inference to be a method name, got {self.inference!r} instead")
        check_feature_names(self, X, reset=True)
        inp = self._input(X, edges, groups, eta)
        y = check_binary_labels(y, inp.n_samples)
        registry = self._registry()
        problem = registry.get_model("high_order_ap").build_problem(
            inp, y, registry.get_loss("ap"), registry.get_feature_map("high_order"),
            inference=self.inference, registry=registry,
        )
        callback = iteration_callback(type(self).__name__, verbose=self.verbose, cccp=True)
        with verbose_logging(self.verbose):
            w0 = self._initial_w(inp, y, edges, groups, eta)
            # The start's direction is kept, its length chosen by J: HOB-SVM's w is in other
            # units (its C is on another scale), and J is convex along the ray (docs/maths.md).
            ray_scale, _ = best_on_ray(problem, C, w0 / problem.scale)
            result = solve_cccp(
                problem, C, ray_scale * w0 / problem.scale, tol=cccp_tol, max_iter=cccp_max_iter, inner_tol=tol,
                inner_max_iter=max_iter, callback=callback,
            )
        self.eta_ = eta
        self._store(inp, problem.scale * result.w, edges is not None or groups is not None)
        self.init_coef_ = w0
        self.init_scale_ = ray_scale
        self.objectives_ = result.objectives
        self.n_iter_ = result.n_iter
        self.converged_ = result.converged
        self.duality_gap_ = result.inner[-1].duality_gap
        self.steps_ = result.steps
        self.inner_results_ = result.inner
        return self

    def _initial_w(self, inp, y, edges, groups, eta) -> np.ndarray:
        n_features = 3 * inp.d
        if isinstance(self.init, str):
            if self.init == "zero":
                return np.zeros(n_features)
            if self.init == "hob":
                hob = HOBSVM(C=self.C, eta=eta, tol=self.tol, max_iter=self.max_iter, verbose=self.verbose)
                hob.fit(inp.X, y, edges=edges, groups=groups)
                return hob.coef_.copy()
            raise ValueError(f"expected init to be 'hob', 'zero' or an array, got {self.init!r} instead")
        w0 = np.asarray(self.init, dtype=np.float64)
        if w0.shape != (n_features,) or not np.all(np.isfinite(w0)):
            raise ValueError(f"expected init of shape ({n_features},) and finite, got shape {w0.shape} instead")
        return _project(inp, w0)
