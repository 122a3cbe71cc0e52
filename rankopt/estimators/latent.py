"""Weakly supervised rankers: latent AP-SVM (Behl et al. (2015) §4.2) and its baselines.

Every sample is a bag of candidates Φ_i(h) (:class:`rankopt.data.bags.Bags`);
the right candidate h is latent.  All three models predict with the two-step
rule of §4.2.1 — each bag scores as its best candidate, max_h w·Φ(h), and bags
are ranked by that score — and learn with CCCP (:func:`rankopt.solve_cccp`):
the positives' latent choices are imputed at the current w, then the
resulting convex structural SVM is solved by the 1-slack cutting plane.

* :class:`LatentAPSVM` — problem (9), Algorithm 3.  Output-consistent
  inference gives every positive its highest-scoring candidate (Prop. 2);
  loss-augmented inference first maximises every negative over its
  candidates (Prop. 3), then ranks with the batched
  :func:`rankopt.inference.batched.most_violated_rankings` (one call for all
  queries; one query without ``qid``).
  Both are exact; one call costs O(total candidates) for the scores and their
  per-bag maxima plus the ranking step.
* :class:`LatentSVM` — latent binary SVM with positive weight J and the
  robustness fraction c of §5.1 (the c·100 % most confusing negative
  candidates are ignored, at least one kept per negative bag).
* :class:`LatentSSVM` — the standard latent structural SVM of problem (6)
  with the AP loss, trained with the approximate loss-augmented inference of
  Appendix C.

Queries of bags.  :class:`LatentAPSVM` also trains over many queries, each a
set of bags ranked on its own (``fit(..., qid=...)``, one query id per bag):
one w, one slack, the per-query problems averaged as in
:class:`~rankopt.models.ranking.QueryRankingProblem` — Ψ = (1/Q) Σ_q Ψ_q,
Δ = (1/Q) Σ_q Δ_q over the Q queries holding a positive and a negative bag —
with every query's inference in one batched call
(:func:`rankopt.inference.batched.most_violated_rankings`).  Props. 2 and 3
hold query by query, so the imputation and the loss-augmented inference stay
exact.  The baselines keep one ranking: LatentSVM is a classifier (queries do
not enter its loss), and LatentSSVM's Appendix C patterns span one ranking.

The joint features and how the problems report them are in :mod:`rankopt.models.latent`.
"""

from __future__ import annotations

import logging

import numpy as np
import scipy.sparse as sp
from sklearn.utils import check_random_state

from rankopt._validation import check_feature_names, check_n_features
from rankopt.data.bags import Bags, check_bags
from rankopt.data.model_file import FITTED_COMMON, register_model_export
from rankopt.engine.cccp import solve_cccp
from rankopt.engine.solvers import DEFAULT_SOLVER, get_solver
from rankopt.estimators.base import LinearRanker
from rankopt.estimators.parameters import (
    CCCP_PARAMETERS,
    boolean,
    check_parameters,
    fraction,
    loss_spec,
    optional,
    plugin_registry,
    positive_float,
    positive_int,
    random_state,
)
from rankopt.estimators.progress import iteration_callback, verbose_logging
from rankopt.losses.base import RankLoss

logger = logging.getLogger(__name__)

__all__ = ["LatentAPSVM", "LatentSSVM", "LatentSVM"]


class _LatentEstimator(LinearRanker):
    """Shared fit/predict of the latent models (bag input, CCCP with random restarts)."""

    #: Bags' labels are not offered as two-class targets to scikit-learn's checks (as before the shared base).
    binary_targets = False

    @property
    def _fit_intercept(self) -> bool:
        return False

    _parameter_checks = {**CCCP_PARAMETERS, "loss": loss_spec, "n_init": positive_int, "random_state": random_state}

    def _check_common(self):
        params = check_parameters(self)
        return tuple(params[name] for name in ("C", "tol", "max_iter", "cccp_tol", "cccp_max_iter", "n_init"))

    def _design(self, X):
        """The design matrix the model sees (LatentSVM appends a constant bias feature)."""
        if not self._fit_intercept:
            return X
        if sp.issparse(X):
            return sp.hstack([X, np.ones((X.shape[0], 1), dtype=X.dtype)], format="csr")
        return np.hstack([X, np.ones((X.shape[0], 1), dtype=X.dtype)])

    #: Whether ``fit`` takes ``qid`` (queries of bags).
    _fits_queries = False

    def fit(self, X, y, bags=None, known=None, qid=None):
        """Fit on bags X with one binary label per bag.

        Parameters
        ----------
        X : list of 2-D arrays, stacked matrix (with ``bags``) or Bags
            The candidates of every bag (dense or sparse).
        y : array-like
            Labels in {0, 1} or {−1, 1}, one per bag (or per row of a stacked X).
        bags : array-like, optional
            Bag ids (one per row) or offsets for a stacked X.
        known : array-like of int, optional
            Per bag, the index of its known candidate, −1 when latent
            (partial annotation); a known candidate is the only one used in training.
        qid : array-like of int, optional
            :class:`LatentAPSVM` only: query ids, one per bag (or per row of a
            stacked X, equal within a bag); the bags of each query are ranked
            on their own and the per-query problems averaged.
        """
        if qid is not None and not self._fits_queries:
            raise ValueError(
                f"expected qid=None: {type(self).__name__} ranks one query (LatentAPSVM trains over queries "
                "of bags), got query ids instead"
            )
        check_feature_names(self, X, reset=True)
        data, labels = check_bags(X, bags, y=y, known=known, qid=qid)
        C, tol, max_iter, cccp_tol, cccp_max_iter, n_init = self._check_common()
        problem = self._build(data.restrict_to_known(), labels)
        rng = check_random_state(self.random_state)
        best = None
        init_objectives = []
        with verbose_logging(self.verbose):
            for init in range(n_init):
                direction = rng.standard_normal(problem.n_features)
                # A tiny random w: only its direction matters, through the first imputation.
                w0 = 1e-3 * direction / np.linalg.norm(direction)
                callback = iteration_callback(f"{type(self).__name__} init {init}", verbose=self.verbose, cccp=True)
                result = solve_cccp(
                    problem,
                    C,
                    w0,
                    tol=cccp_tol,
                    max_iter=cccp_max_iter,
                    inner_tol=tol,
                    inner_max_iter=max_iter,
                    callback=callback,
                    inner_solver=get_solver(DEFAULT_SOLVER),
                )
                init_objectives.append(result.objectives[-1])
                logger.info(
                    "%s init %d: objective %.6g after %d CCCP iterations",
                    type(self).__name__,
                    init,
                    result.objectives[-1],
                    result.n_iter,
                )
                if best is None or result.objectives[-1] < best.objectives[-1]:
                    best = result
        assert best is not None  # n_init ≥ 1
        w = best.w
        if self._fit_intercept:
            self.coef_, self.intercept_ = w[:-1].copy(), float(w[-1])
        else:
            self.coef_, self.intercept_ = w.copy(), 0.0
        self.objective_ = best.objectives[-1]
        self.objectives_ = list(best.objectives)
        self.init_objectives_ = init_objectives
        self.n_iter_ = best.n_iter
        self.converged_ = best.converged
        self.duality_gap_ = best.inner[-1].duality_gap
        self.n_features_in_ = data.n_features
        return self

    def _candidate_scores(self, X, bags):
        self._check_for_scoring(X)
        data, _ = check_bags(X, bags)
        return data, self._scores_of(data)

    def _scores_of(self, data) -> np.ndarray:
        """Every candidate's score w·Φ(h) + b."""
        check_n_features(self, data.n_features)
        return np.asarray(data.X @ self.coef_.astype(data.X.dtype, copy=False)).ravel() + self.intercept_

    def decision_function(self, X, bags=None) -> np.ndarray:
        """Per-bag scores max_h w·Φ(h) (step 1 of the two-step rule); rank bags by them."""
        data, scores = self._candidate_scores(X, bags)
        return data.best(scores)[0]

    def latent_choices(self, X, bags=None) -> np.ndarray:
        """Per bag, the index (within the bag) of its highest-scoring candidate."""
        data, scores = self._candidate_scores(X, bags)
        return data.best(scores)[1] - data.starts

    def score(self, X, y, bags=None, qid=None) -> float:
        """Average precision of the ranking of the bags against their labels y.

        With ``qid`` (one query id per bag, or per row of a stacked X), the
        mean over queries of each query's AP; queries without a positive bag
        are left out, as in :func:`rankopt.metrics.mean_average_precision`.
        """
        self._check_for_scoring(X)
        data, labels = check_bags(X, bags, y=y, qid=qid)
        assert labels is not None  # y given, labels returned
        best = data.best(self._scores_of(data))[0]
        return self._ranking_score(labels if data.qid is None else labels.astype(np.int64), best, data.qid)


class LatentAPSVM(_LatentEstimator):
    """Latent AP-SVM (Behl et al. (2015) problem 9, Algorithm 3), over one query of bags or many.

    Without ``qid`` the bags of ``X`` are one query, ranked together.
    ``fit(X, y, qid=qid)`` — one query id per bag — trains one w over every
    query, as ``RankSVM.fit(X, y, qid=...)`` does: one slack, the per-query
    joint features and AP losses averaged over the queries holding a
    positive and a negative bag (the others are left out and logged,
    ``n_queries_used_`` counts the rest; with none left, fit raises).
    ``score(X, y, qid=qid)`` is then the mean AP over queries.

    Parameters
    ----------
    C : float, default 1.0
        Weight of the slack (the AP-loss upper bound, on a [0, 1] scale).
    loss : str or RankLoss, default "ap"
        The rank loss; Props. 2 and 3 hold for any rank loss, AP is the paper's.
    n_init : int, default 3
        Random initialisations (random first imputation of the positives);
        the run with the lowest final objective is kept.
    random_state : int, RandomState or None
        Seeds the initialisations.
    tol, max_iter : float, int
        Tolerance and iteration cap of each inner cutting-plane solve.
    cccp_tol, cccp_max_iter : float, int
        CCCP stops when the objective drops by less than ``cccp_tol``
        (relative) or after ``cccp_max_iter`` steps.
    inference : str, default "auto"
        Ranking method of the loss-augmented inference (see
        :func:`rankopt.most_violated_ranking`).
    verbose : bool, default False
        Show the progress on stderr during the fit: every inner
        cutting-plane iteration labelled with its initialisation and CCCP
        step, and each step's objective (:mod:`rankopt.estimators.progress`).

    Attributes
    ----------
    coef_ : ndarray (n_features,)
    objective_ : float
        Final objective ½‖w‖² + C ξ of the kept run.
    objectives_ : list of float
        Its CCCP objective trace (non-increasing).
    init_objectives_ : list of float
        Final objective of every initialisation.
    n_iter_, converged_ : CCCP iterations and convergence of the kept run (converged only on
        a certified inner solve, see :func:`rankopt.solve_cccp`).
    duality_gap_ : float
        The kept run's last inner solve's certified duality gap.
    n_features_in_ : int
    feature_names_in_ : ndarray of str
        Column names of a stacked X (with ``bags``) in fit, when it was a
        DataFrame with string column names; prediction then refuses other
        or reordered columns.
    inference_ : str
        The ranking method used.
    n_queries_ : int
        Distinct query ids seen in fit (1 without ``qid``).
    n_queries_used_ : int
        Queries with a positive and a negative bag, which the fit averages
        over (1 without ``qid``).
    """

    _fits_queries = True

    def __init__(
        self,
        *,
        C=1.0,
        loss="ap",
        n_init=3,
        random_state=None,
        tol=1e-3,
        max_iter=1000,
        cccp_tol=1e-3,
        cccp_max_iter=50,
        inference="auto",
        verbose=False,
    ):
        self.C = C
        self.loss = loss
        self.n_init = n_init
        self.random_state = random_state
        self.tol = tol
        self.max_iter = max_iter
        self.cccp_tol = cccp_tol
        self.cccp_max_iter = cccp_max_iter
        self.inference = inference
        self.verbose = verbose

    def _build(self, data, labels):
        registry = plugin_registry()
        loss = _rank_loss(registry, self.loss)
        if not isinstance(self.inference, str):
            raise ValueError(f"expected inference to be a method name, got {self.inference!r} instead")
        self.inference_ = registry.resolve_method(self.inference, loss).name
        self.loss_ = loss
        problem = registry.get_model("latent_ap").build_problem(
            data, labels, loss, registry.get_feature_map("linear"), inference=self.inference_, registry=registry
        )
        assert problem.queries is not None  # the AP-SVM model lays out its queries
        self.n_queries_, self.n_queries_used_ = problem.queries.n_queries, problem.queries.n_used
        return problem


class LatentSSVM(_LatentEstimator):
    """Latent structural SVM with a rank loss (problem 6), trained as in Appendix C.

    One query: the bags of ``X`` are ranked together, and ``fit`` refuses
    ``qid`` — Appendix C's ranking patterns and assignments span one ranking
    (:class:`LatentAPSVM` trains over queries of bags).  ``score`` takes
    ``qid`` for the mean AP over queries.

    Its loss-augmented inference is approximate (greedy over the ranking
    patterns, exact assignment of samples and candidates per pattern), so the
    reported objective is a lower estimate of the true one.  Parameters and
    attributes as :class:`LatentAPSVM` (no ``inference``), ``verbose`` included.
    """

    _parameter_checks = {
        name: check for name, check in _LatentEstimator._parameter_checks.items() if name != "inference"
    }

    def __init__(
        self,
        *,
        C=1.0,
        loss="ap",
        n_init=3,
        random_state=None,
        tol=1e-3,
        max_iter=1000,
        cccp_tol=1e-3,
        cccp_max_iter=50,
        verbose=False,
    ):
        self.C = C
        self.loss = loss
        self.n_init = n_init
        self.random_state = random_state
        self.tol = tol
        self.max_iter = max_iter
        self.cccp_tol = cccp_tol
        self.cccp_max_iter = cccp_max_iter
        self.verbose = verbose

    def _build(self, data, labels):
        registry = plugin_registry()
        self.loss_ = _rank_loss(registry, self.loss)
        return registry.get_model("latent_ssvm").build_problem(
            data, labels, self.loss_, registry.get_feature_map("linear"), registry=registry
        )


class LatentSVM(_LatentEstimator):
    """Latent binary SVM with positive weight J and robustness c (Behl et al. (2015) §5.1).

    A classifier: queries do not enter its loss, so ``fit`` refuses ``qid``
    (:class:`LatentAPSVM` trains over queries of bags); ``score`` takes
    ``qid`` for the mean AP over queries.

    Parameters
    ----------
    C : float, default 1.0
        Weight of the (normalised) hinge loss.
    J : float or None, default None
        Relative weight of the positive bags; None weighs both classes
        equally (J = M/|P| for M negative candidates).
    robust : float in [0, 1), default 0.0
        The paper's c: the fraction of negative candidates with the largest
        loss to ignore (0 is the standard latent SVM).
    fit_intercept : bool, default True
        Append a constant (regularised) bias feature.
    n_init, random_state, tol, max_iter, cccp_tol, cccp_max_iter, verbose
        As :class:`LatentAPSVM`.

    Attributes
    ----------
    coef_, intercept_ : the hyperplane; ``decision_function`` adds the intercept.
    Others as :class:`LatentAPSVM`.
    """

    _parameter_checks = {
        **{
            name: check
            for name, check in _LatentEstimator._parameter_checks.items()
            if name not in ("inference", "loss")
        },
        "J": optional(positive_float),
        "robust": fraction,
        "fit_intercept": boolean,
    }

    def __init__(
        self,
        *,
        C=1.0,
        J=None,
        robust=0.0,
        fit_intercept=True,
        n_init=3,
        random_state=None,
        tol=1e-3,
        max_iter=1000,
        cccp_tol=1e-3,
        cccp_max_iter=50,
        verbose=False,
    ):
        self.C = C
        self.J = J
        self.robust = robust
        self.fit_intercept = fit_intercept
        self.n_init = n_init
        self.random_state = random_state
        self.tol = tol
        self.max_iter = max_iter
        self.cccp_tol = cccp_tol
        self.cccp_max_iter = cccp_max_iter
        self.verbose = verbose

    @property
    def _fit_intercept(self):
        return bool(self.fit_intercept)

    def _build(self, data, labels):
        params = check_parameters(self)
        robust = params["robust"]
        design = Bags(self._design(data.X), data.offsets)
        registry = plugin_registry()
        return registry.get_model("latent_binary").build_problem(
            design,
            labels,
            registry.get_loss("zero_one", J=params["J"]),
            registry.get_feature_map("linear"),
            registry=registry,
            robust=robust,
        )


def _rank_loss(registry, loss) -> RankLoss:
    resolved = registry.resolve_loss(loss)
    if not isinstance(resolved, RankLoss):
        raise ValueError(
            f"expected loss to be a rank loss, got the {resolved.output_kind.value} loss {resolved.name!r} instead"
        )
    return resolved


_LATENT_FITTED = (*FITTED_COMMON, "intercept_", "objective_", "objectives_", "init_objectives_")
register_model_export(LatentAPSVM, values=(*_LATENT_FITTED, "inference_"))
register_model_export(LatentSSVM, values=_LATENT_FITTED)
register_model_export(LatentSVM, values=_LATENT_FITTED)
