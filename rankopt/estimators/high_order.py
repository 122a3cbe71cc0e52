"""HOB-SVM and HOAP-SVM (Dokania et al. 2014): the estimators.

Both rank samples by the difference of max-marginals s_i = m_i⁺ − m_i⁻
(eq. 11) of the HOB score w·Ψ(X, Y) (:mod:`rankopt.features.high_order`).
HOB-SVM (§3) is a convex structural SVM over labelings; HOAP-SVM (§4)
optimises the AP loss of the ranking by s with CCCP.  Their problems, and the
derivation of HOAP-SVM's convex-concave split, are in
:mod:`rankopt.models.high_order`.
"""

from __future__ import annotations

import logging

import numpy as np

from rankopt._validation import check_binary_labels, check_feature_names, check_n_features
from rankopt.data.model_file import FITTED_COMMON, per_feature, register_model_export
from rankopt.engine.cccp import best_on_ray, solve_cccp
from rankopt.engine.solvers import DEFAULT_SOLVER, get_solver
from rankopt.estimators.base import LinearRanker
from rankopt.estimators.parameters import (
    CCCP_PARAMETERS,
    check_parameters,
    eta,
    initial_point,
    plugin_registry,
    positive_float,
    positive_int,
    verbosity,
)
from rankopt.estimators.progress import iteration_callback, verbose_logging
from rankopt.features.high_order import HighOrderFeatureMap, HighOrderInput, check_eta
from rankopt.models.high_order import project

logger = logging.getLogger(__name__)

__all__ = ["HOAPSVM", "HOBSVM"]


class _HighOrderRanker(LinearRanker):
    """Shared input handling and prediction of HOB-SVM and HOAP-SVM."""

    def _input(self, X, edges, groups, eta) -> HighOrderInput:
        return HighOrderInput.build(X, edges=edges, groups=groups, eta=eta)

    def _store(self, X: HighOrderInput, w: np.ndarray, with_pairs: bool) -> None:
        w = project(X, w)
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
        self._check_for_scoring(X)
        with_pairs = edges is not None or groups is not None
        if with_pairs != self.fitted_with_pairs_:
            if self.fitted_with_pairs_:
                raise ValueError(
                    "expected similar pairs (edges or groups) for the samples to rank, as at fit, got neither instead"
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
        return self._ranking_score(y, self.decision_function(X, edges=edges, groups=groups))


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

    _parameter_checks = {
        "C": positive_float,
        "eta": eta,
        "tol": positive_float,
        "max_iter": positive_int,
        "verbose": verbosity,
    }

    def __init__(self, *, C=1.0, eta=1.0, tol=1e-3, max_iter=1000, verbose=False):
        self.C = C
        self.eta = eta
        self.tol = tol
        self.max_iter = max_iter
        self.verbose = verbose

    def fit(self, X, y, edges=None, groups=None):
        """Fit on samples X with binary relevance y and similar pairs (edges or groups)."""
        params = check_parameters(self)
        C, tol, max_iter = params["C"], params["tol"], params["max_iter"]
        eta = check_eta(self.eta)
        check_feature_names(self, X, reset=True)
        inp = self._input(X, edges, groups, eta)
        y = check_binary_labels(y, inp.n_samples)
        registry = plugin_registry()
        problem = registry.get_model("high_order_binary").build_problem(
            inp, y, registry.get_loss("zero_one"), registry.get_feature_map("high_order"), registry=registry
        )
        callback = iteration_callback(type(self).__name__, verbose=self.verbose)
        with verbose_logging(self.verbose):
            result = get_solver(DEFAULT_SOLVER).run(problem, C, tol=tol, max_iter=max_iter, callback=callback)
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
        (:mod:`rankopt.estimators.progress`).

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

    _parameter_checks = {**CCCP_PARAMETERS, "eta": eta, "init": initial_point}

    def __init__(
        self,
        *,
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
        params = check_parameters(self)
        C, tol, max_iter = params["C"], params["tol"], params["max_iter"]
        cccp_tol, cccp_max_iter = params["cccp_tol"], params["cccp_max_iter"]
        eta = check_eta(self.eta)
        check_feature_names(self, X, reset=True)
        inp = self._input(X, edges, groups, eta)
        y = check_binary_labels(y, inp.n_samples)
        registry = plugin_registry()
        problem = registry.get_model("high_order_ap").build_problem(
            inp,
            y,
            registry.get_loss("ap"),
            registry.get_feature_map("high_order"),
            inference=self.inference,
            registry=registry,
        )
        callback = iteration_callback(type(self).__name__, verbose=self.verbose, cccp=True)
        with verbose_logging(self.verbose):
            w0 = self._initial_w(inp, y, edges, groups, eta)
            # The start's direction is kept, its length chosen by J: HOB-SVM's w is in other
            # units (its C is on another scale), and J is convex along the ray (docs/maths.md).
            ray_scale, _ = best_on_ray(problem, C, w0 / problem.scale)
            result = solve_cccp(
                problem,
                C,
                ray_scale * w0 / problem.scale,
                tol=cccp_tol,
                max_iter=cccp_max_iter,
                inner_tol=tol,
                inner_max_iter=max_iter,
                callback=callback,
                inner_solver=get_solver(DEFAULT_SOLVER),
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
        return project(inp, w0)


_HIGH_ORDER_ARRAYS = {"coef_": lambda d: (3 * d,), "unary_coef_": lambda d: (2, d), "pairwise_coef_": per_feature}
register_model_export(HOBSVM, values=(*FITTED_COMMON, "eta_", "fitted_with_pairs_"), arrays=_HIGH_ORDER_ARRAYS)
register_model_export(
    HOAPSVM,
    values=(*FITTED_COMMON, "eta_", "fitted_with_pairs_", "objectives_"),
    arrays={**_HIGH_ORDER_ARRAYS, "init_coef_": lambda d: (3 * d,)},
)
