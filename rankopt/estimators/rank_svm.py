"""RankSVM: a linear ranker trained by the 1-slack structural SVM on any loss."""

from __future__ import annotations

import hashlib
import logging
import warnings
from dataclasses import dataclass
from typing import Any

import numpy as np
import scipy.sparse as sp

from rankopt._validation import (
    QueryIndex,
    check_binary_labels,
    check_eval_sets,
    check_feature_names,
    check_grades,
    check_n_features,
    check_one_query_labels,
    check_qid,
    check_relevant_at,
    qid_or_group,
    query_ids,
    relevant_from_grades,
)
from rankopt.data.backends import backend_for, check_matrix, column_max_abs
from rankopt.data.model_file import FITTED_COMMON, register_model_export
from rankopt.engine.appx import solve_appx
from rankopt.engine.certificate import WorkingSet
from rankopt.engine.solvers import FitNeeds, SolverSpec, get_solver
from rankopt.estimators.base import LinearRanker
from rankopt.estimators.evaluation import eval_metrics
from rankopt.estimators.parameters import (
    boolean,
    check_parameters,
    loss_parameters,
    loss_spec,
    method_name,
    metric_spec,
    optional,
    percentage,
    plugin_name,
    plugin_registry,
    positive_float,
    positive_int,
    relevance_threshold,
    solver_name,
    verbosity,
)
from rankopt.estimators.progress import ValidationMonitor, iteration_callback, verbose_logging
from rankopt.exceptions import ConstantRankerWarning
from rankopt.inference.batched import check_queries_the_loss_orders
from rankopt.inference.structure_table import reads_grades
from rankopt.losses.base import Loss, OutputKind, RankLoss
from rankopt.models.approx import ApproxProblem, check_approx

__all__ = ["RankSVM"]

logger = logging.getLogger(__name__)

#: The plain model for each kind of loss.
MODEL_FOR_OUTPUT = {OutputKind.RANKING: "ranking", OutputKind.LABELING: "binary"}


class RankSVM(LinearRanker):
    """Linear ranker minimising a convex upper bound on a rank loss.

    Solves Mohapatra et al. (2018) problem (4), min ½‖w‖² + C ξ over all rankings
    (or labelings, for a labeling loss), with the 1-slack cutting-plane
    algorithm.  Samples are ranked by s(x) = w·x.

    Parameters
    ----------
    loss : str or Loss, default "ap"
        ``"ap"`` (AP-SVM), ``"ndcg"`` (NDCG-SVM), ``"auc"`` (ROC-area SVM),
        ``"zero_one"`` (the class-weighted binary SVM baseline), any loss a
        plugin registers, or a :class:`~rankopt.losses.Loss` instance.  A
        metric's name spells a loss with its cutoff, as ``eval_metric``
        writes it: ``"ndcg@5"`` is ``"ndcg_graded"`` with ``k=5``, ``"p@5"``
        ``"precision_at_k"`` with ``k=5``, ``"map"`` is ``"ap"``.
    loss_params : dict, optional
        The loss's parameters, for a loss given by name (the keywords
        ``RankHingeLoss("ndcg_graded", k=5)`` takes):
        ``RankSVM(loss="ndcg_graded", loss_params={"k": 5})``.
    C : float, default 1.0
        Weight of the slack; larger fits the training ranking harder.
    tol : float, default 1e-3
        Stop when no constraint is violated by more than ``tol`` beyond the
        working set's slack (the loss is on a [0, 1] scale).
    max_iter : int, default 1000
        Cutting-plane iterations allowed; a ``ConvergenceWarning`` is issued
        when they run out.
    inference : str, default "auto"
        Loss-augmented inference method for rank losses (``"greedy"``, a
        plugin's, or ``"auto"`` for the fastest exact one).
    verbose : bool, default False
        Show every cutting-plane iteration (primal objective, duality gap,
        violation, and the validation AP with ``eval_set``): INFO records on
        the ``rankopt`` logger, printed on stderr during the fit when logging
        is not configured (:mod:`rankopt.estimators.progress`).
    approx : float or None, default None
        AP-SVM-APPX (Mohapatra et al. (2014) §3.3, ``loss="ap"`` only): a
        percentage k in (0, 100].  A binary SVM (same C, tol, max_iter)
        first finds the easy samples, y·w₀·x ≥ 1; the top k % of them by
        margin become hard constraints y·w·x ≥ 1 and the AP loss is
        optimised over the remaining samples only.  None trains the exact
        AP-SVM.  See :mod:`rankopt.models.approx`.
    relevant_at : float, default 1
        With ``qid``, labels are relevance grades (integers ≥ 0, LETOR's
        0–4 say) and a binary loss (AP, NDCG, ROC area, ``zero_one``, a
        plugin's) counts a document relevant when its grade is at least
        ``relevant_at`` — 1 is LETOR's convention for MAP.  A graded loss
        (``"pairwise"``) trains on the grades themselves and ignores it.
        Without ``qid`` the labels are binary, as for one query, and
        ``relevant_at`` must stay 1.
    early_stopping_patience : int or None, default None
        With ``fit(..., eval_set=...)``: stop the cutting plane once this
        many iterations in a row have not improved the best validation
        score, and keep the iterate with the best validation score as
        ``coef_``.  This is a deviation from the exact optimum of the
        training problem — regularisation by early stopping, as in
        gradient-boosted rankers — so ``converged_`` is then False unless
        the kept iterate is the solve's certified solution, and
        ``duality_gap_`` is the kept iterate's gap (its primal objective
        against the solve's best dual bound).  None (the default) solves to
        ``tol`` and keeps the optimum.
    solver : {"cutting_plane", "bcfw"}, default "cutting_plane"
        The optimizer.  ``"cutting_plane"``: the 1-slack cutting plane with
        line search (and, over queries, cuts assembled from each query's
        parts).  ``"bcfw"``: block-coordinate Frank–Wolfe with one block
        per query (Lacoste-Julien et al., ICML 2013), for a rank loss over
        queries (``qid``) on NumPy or CSR data; ``max_iter`` then counts
        passes over the queries.  Both stop on the same certified duality
        gap; BCFW is slower on the data measured so far, hence not the
        default (docs/engine-notes.md, ``docs/maths.md``).
    warm_start : bool, default False
        Start the cutting plane from the previous fit's ``coef_`` instead of
        w = 0 (scikit-learn's convention): refitting at a nearby C, or on a
        little more data, then needs fewer iterations.  The previous fit must
        have the same number of features and the same loss; the answer is
        certified as usual.  Not with ``approx``.
    eval_metric : str, callable or list of them, default None ("map")
        What ``eval_set`` is scored by at every iteration: ``"map"`` (AP for
        one query), ``"ndcg@k"``, ``"p@k"`` or a callable
        ``metric(y_true, scores, qid)`` (higher is better).  The first metric
        of the last validation set decides the best iterate and early
        stopping, as in LightGBM.  See :mod:`rankopt.estimators.evaluation`.
    model : str, default "auto"
        The model plugin that builds the structured problem
        (:func:`rankopt.list_plugins` lists them): "auto" takes "ranking" for a
        rank loss and "binary" for a labelling one; a third-party model
        registered for the loss's kind of output is reached by its name.  Not
        with ``approx`` (APPX builds its own two problems).
    feature_map : str, default "linear"
        The joint feature map plugin the model sees the rows of X through.

    Attributes
    ----------
    coef_ : ndarray of shape (n_features,)
        The weight vector w.
    n_iter_ : int
        Cutting-plane iterations run.
    converged_ : bool
        Whether the fit is certified optimal: its duality gap is at most
        ``C * tol`` (see ``duality_gap_``).
    duality_gap_ : float
        Primal objective at ``coef_`` minus the best dual objective found: a
        bound on how far ``coef_``'s objective is from the optimum.
    stop_reason_ : str
        Why the cutting plane ended: ``"converged"``, ``"max_iter"``,
        ``"callback"`` (early stopping), ``"qp_failure"``, ``"stalled"`` (the gap stopped falling at
        float64's rounding: ``tol`` was below what can be certified; the ConvergenceWarning gives the
        attainable one) or ``"no_progress"`` (it stopped falling far above that rounding: a solver
        failure, with a ConvergenceWarning that says so).
    loss_ : Loss
        The resolved loss instance.
    inference_ : str or None
        The inference method used (None for labeling losses).
    history_ : list of IterationRecord
        Primal objective, dual objective and duality gap per iteration; with
        ``eval_set``, :class:`~rankopt.estimators.progress.MonitoredIterationRecord`
        whose ``validation_score`` is the validation metric of that iterate.
        Each record describes the best point so far, so its primal never
        increases, except at the last record of a converged fit: that one
        is the point returned (``coef_``), the working-set optimum, certified
        to C·tol like the best point, and its primal may lie up to C·tol
        above it.
    best_iteration_ : int or None
        With ``eval_set``: the iteration (1-based, as in ``history_``) with
        the best validation score; None without.
    best_validation_score_ : float or None
        With ``eval_set``: that score; None without.
    evals_result_ : dict or None
        With ``eval_set``: ``evals_result_[set][metric]``, one value per
        iteration (as LightGBM's); None without.
    n_features_in_ : int
    feature_names_in_ : ndarray of str
        Column names of X in fit, when X was a DataFrame with string column
        names; prediction then refuses other or reordered columns.
    n_easy_ : int or None
        With ``approx``: samples the binary SVM classified with margin ≥ 1.
    n_hard_constraints_ : int or None
        With ``approx``: easy samples kept as hard constraints.
    n_queries_ : int
        Distinct query ids seen in fit (1 without ``qid``).
    n_queries_used_ : int
        Queries with documents of two relevance levels, which the fit
        averages over (1 without ``qid``).
    fitted_with_qid_ : bool
        Whether ``fit`` was given queries (``qid`` or ``group``): ``score``
        then needs them too, so that a model search never compares pooled
        AP over all documents in silence.

    Notes
    -----
    **Many queries.** ``fit(X, y, qid=qid)`` trains one w over every query: the 1-slack
    problem whose constraint averages each query's Δ_q and Ψ_q (SVM^map,
    Yue et al., SIGIR 2007; SVM^rank, Joachims, KDD 2006), with each
    query's most violated ranking found in one batched inference call.
    Rows of a query need not be contiguous.  A query whose documents all
    share one relevance level has nothing to order and is left out (logged;
    ``n_queries_used_`` counts the others); with none left, fit raises.
    ``score(X, y, qid=qid)`` is then the mean AP over queries
    (:func:`rankopt.metrics.mean_average_precision`).  In
    ``GridSearchCV``/``cross_validate``, split with ``GroupKFold`` on the
    query ids and route them with scikit-learn's metadata routing::

        sklearn.set_config(enable_metadata_routing=True)
        model = RankSVM().set_fit_request(qid=True).set_score_request(qid=True)
        GridSearchCV(model, {"C": [0.1, 1, 10]}, cv=GroupKFold(3)).fit(X, y, qid=qid, groups=qid)

    A labeling loss (``zero_one``) classifies documents one by one, so
    queries only set which documents are relevant; the approximation
    ``approx`` is for one query and refuses ``qid``.

    **Validation monitoring.** ``fit(X, y, eval_set=(X_val, y_val))`` — or ``(X_val, y_val, qid_val)``
    when fitting with ``qid``, or a list of such sets (LightGBM's form;
    ``eval_group=`` gives their group sizes instead of qids) — scores every
    cutting-plane iterate on the validation data by ``eval_metric`` (MAP by
    default: AP of the ranking of X_val, mean AP over queries with
    ``qid_val``, documents relevant from ``relevant_at``).
    ``evals_result_[set][metric]`` holds every value (sets named
    ``valid_0``, ``valid_1``, …; :func:`rankopt.estimators.evaluation.plot_metric`
    plots them).  Each record of ``history_`` carries the deciding metric as
    its ``validation_score`` (the first metric of the last set);
    ``best_iteration_`` and ``best_validation_score_`` say where its best
    was.  Only
    ``early_stopping_patience`` changes the fit; without it, monitoring only
    observes.  The validation data is checked like X and y (features, names,
    labels, qid).  In ``GridSearchCV`` with metadata routing, request it
    with ``set_fit_request(eval_set=True)``; each candidate is then
    monitored on the same validation set.
    """

    _parameter_checks = {
        "loss": loss_spec,
        "loss_params": loss_parameters,
        "C": positive_float,
        "tol": positive_float,
        "max_iter": positive_int,
        "inference": method_name,
        "verbose": verbosity,
        "approx": optional(percentage),
        "relevant_at": relevance_threshold,
        "early_stopping_patience": optional(positive_int),
        "eval_metric": metric_spec,
        "warm_start": boolean,
        "solver": solver_name,
        "model": plugin_name,
        "feature_map": plugin_name,
    }

    def __init__(
        self,
        *,
        loss="ap",
        loss_params=None,
        C=1.0,
        tol=1e-3,
        max_iter=1000,
        inference="auto",
        verbose=False,
        approx=None,
        relevant_at=1,
        early_stopping_patience=None,
        eval_metric=None,
        warm_start=False,
        solver="cutting_plane",
        model="auto",
        feature_map="linear",
    ):
        self.loss = loss
        self.loss_params = loss_params
        self.C = C
        self.tol = tol
        self.max_iter = max_iter
        self.inference = inference
        self.verbose = verbose
        self.approx = approx
        self.relevant_at = relevant_at
        self.early_stopping_patience = early_stopping_patience
        self.eval_metric = eval_metric
        self.warm_start = warm_start
        self.solver = solver
        self.model = model
        self.feature_map = feature_map

    def fit(self, X, y, qid=None, eval_set=None, group=None, eval_group=None):
        """Fit w on samples X (n_samples, n_features) with relevance y.

        Without ``qid`` the rows are one query and y binary ({0, 1} or
        {-1, 1}); with ``qid`` (one integer query id per row) y holds
        relevance grades, integers ≥ 0, and w is fitted over all queries
        (see "Many queries" in the class's Notes).

        X may be a NumPy array (float32 stays float32), a scipy.sparse
        matrix, or a Dask array (dense or CSR chunks, e.g. on disk): its
        products run on Dask's active scheduler — a ``dask.distributed``
        client if one is active (:func:`rankopt.data.dask_client`)
        — and only the N scores and d-vectors reach this process.  See
        ``docs/scale.md``.

        ``group`` (LightGBM's form) gives the sizes of contiguous queries
        instead of ``qid``: rows 0…group[0]−1 are the first query, and so on.

        ``eval_set=(X_val, y_val)`` or ``(X_val, y_val, qid_val)``, or a list
        of such sets, scores every iterate on validation data (see
        "Validation monitoring" in the class's Notes); give queries exactly when fitting
        with them, as ``qid_val`` or in ``eval_group`` (one list of group
        sizes per set).
        """
        fit = self._check_fit(X, y, qid, group)
        monitor = self._validation_monitor(eval_set, eval_group, fit.qid, fit.patience, fit.approx)
        callback = iteration_callback(type(self).__name__, verbose=self.verbose, monitor=monitor)
        with verbose_logging(self.verbose):
            problem, result, split = self._solve(fit, callback)
            if result.stop_reason == "callback":  # only the validation monitor stops a solve
                _log_early_stop(type(self).__name__, result, monitor, fit.patience)
        _warn_if_constant_solution(type(self).__name__, result, fit.X, fit.loss, fit.C)
        self._store(fit, problem, result, split, monitor)
        return self

    def _check_fit(self, X, y, qid, group) -> _Fit:
        """Every parameter and input of ``fit`` checked, before any work."""
        check_feature_names(self, X, reset=True)
        X = check_matrix(X)
        qid = qid_or_group(qid, group, X.shape[0])
        labels = check_one_query_labels(y, X.shape[0]) if qid is None else y
        params = check_parameters(self)
        C, tol, max_iter, patience = params["C"], params["tol"], params["max_iter"], params["early_stopping_patience"]
        registry = plugin_registry()
        loss = registry.resolve_loss(params["loss"], **params["loss_params"])
        approx = check_approx(self.approx, loss)
        model = _resolve_model(registry, params["model"], loss, approx)
        row_chunks = self._row_chunks(X, labels, qid, loss, model, approx)
        if row_chunks is None:
            relevance, queries, n_queries, n_queries_used = self._relevance(
                labels, qid, X.shape[0], loss, model, approx, registry
            )
        else:  # the labels and query ids are checked where their chunks are, as the problem is built
            relevance, queries, n_queries, n_queries_used = None, None, 0, 0
        solver = self._check_solver(X, qid, approx, ranking=queries is not None or row_chunks is not None)
        w0 = self._warm_start_point(X.shape[1], loss, approx)
        fingerprint = _fit_fingerprint(X, labels, qid, self.relevant_at, loss) if self.warm_start else None
        self.n_features_in_ = X.shape[1]
        _check_scale(X)
        return _Fit(
            X,
            qid,
            relevance,
            queries,
            n_queries,
            n_queries_used,
            C,
            tol,
            max_iter,
            patience,
            registry,
            loss,
            approx,
            model,
            solver,
            w0,
            self._warm_start_planes(w0, fingerprint),
            fingerprint,
            row_chunks,
        )

    def _solve(self, fit: _Fit, callback):
        """Build the problem and run the solver: (problem, result, APPX split or None)."""
        feature_map = fit.registry.get_feature_map(self.feature_map)
        if fit.approx is not None:
            approx = ApproxProblem(
                fit.X, fit.relevance, fit.loss, feature_map, fit.approx, inference=self.inference, registry=fit.registry
            )
            problem, result, split = solve_appx(
                approx, fit.C, tol=fit.tol, max_iter=fit.max_iter, callback=callback, solver=fit.solver
            )
            _log_inference(type(self).__name__, problem, fit.loss)  # APPX's stage 2 is built in the solve
            return problem, result, split
        by_query = {} if fit.queries is None else {"queries": fit.queries}
        if fit.row_chunks is not None:
            by_query = {"row_chunks": fit.row_chunks, "relevant_at": check_relevant_at(self.relevant_at)}
        problem = fit.model.build_problem(
            fit.X, fit.relevance, fit.loss, feature_map, inference=self.inference, registry=fit.registry, **by_query
        )
        _log_inference(type(self).__name__, problem, fit.loss)
        result = fit.solver.run(
            problem, fit.C, tol=fit.tol, max_iter=fit.max_iter, callback=callback, w0=fit.w0, planes=fit.planes
        )
        return problem, result, None

    def _store(self, fit: _Fit, problem, result, split, monitor) -> None:
        """The fitted attributes, from the solve (and the validation monitor's kept iterate)."""
        self.coef_ = result.w
        # The planes are a valid start only for this very problem: kept (in memory, not in pickles)
        # with the fingerprint of the data they came from.
        self._warm_planes = (fit.fingerprint, result.working_set) if self.warm_start and fit.approx is None else None
        self.n_iter_ = result.n_iter
        self.converged_ = result.converged
        self.duality_gap_ = result.duality_gap
        self.stop_reason_ = result.stop_reason
        self.history_ = result.history
        self.evals_result_: dict | None = None
        self.best_iteration_ = self.best_validation_score_ = None
        if monitor is not None:
            self._store_monitor(monitor, result, fit.patience)
        self.loss_ = fit.loss
        self.inference_ = problem.inference if fit.loss.output_kind is OutputKind.RANKING else None
        self.n_easy_ = None if split is None else split.n_easy
        self.n_hard_constraints_ = None if split is None else split.n_hard_constraints
        chunked = fit.row_chunks is not None  # the problem counted the queries on the chunks
        self.n_queries_ = problem.n_queries if chunked else fit.n_queries
        self.n_queries_used_ = problem.n_queries_used if chunked else fit.n_queries_used
        self.fitted_with_qid_ = fit.qid is not None

    def _store_monitor(self, monitor, result, patience) -> None:
        self.history_ = monitor.annotate(result.history)
        self.evals_result_ = {
            name: {m: list(v) for m, v in metrics.items()} for name, metrics in monitor.results.items()
        }
        self.best_iteration_ = monitor.best_index + 1
        self.best_validation_score_ = monitor.best_score
        if patience is not None:
            self.coef_ = monitor.best_w
            # The kept iterate's own gap: its primal against the best dual bound of the solve.
            self.duality_gap_ = result.history[monitor.best_index].primal_objective - result.history[-1].dual_objective
            self.converged_ = result.converged and np.array_equal(monitor.best_w, result.w)

    def _warm_start_point(self, n_features: int, loss: Loss, approx) -> np.ndarray | None:
        """The previous ``coef_`` to start from with ``warm_start``, checked against this fit; else None."""
        if not self.warm_start or not hasattr(self, "coef_"):
            return None
        if approx is not None:
            raise ValueError(f"expected approx=None with warm_start=True, got approx={approx!r} instead")
        if self.coef_.shape != (n_features,):
            raise ValueError(
                f"expected X with the previous fit's {self.coef_.shape[0]} features to warm-start from it, "
                f"got {n_features} features instead"
            )
        previous = self.loss_
        if type(previous) is not type(loss) or previous.get_params() != loss.get_params():
            raise ValueError(
                f"expected the previous fit's loss {previous!r} to warm-start from it, got {loss!r} instead"
            )
        return np.array(self.coef_, dtype=np.float64)

    def _check_solver(self, X, qid, approx, *, ranking: bool) -> SolverSpec:
        """The solver of the table (:mod:`rankopt.engine.solvers`), refused before any work if it cannot
        take this fit."""
        solver = get_solver(self.solver)
        needs = FitNeeds(
            queries=qid is not None,
            ranking=ranking,  # False for a labeling loss: queries only threshold the grades
            in_memory=sp.issparse(X) or isinstance(X, np.ndarray),
            warm_start=bool(self.warm_start) and hasattr(self, "coef_"),
            approx=approx is not None,
        )
        reason = solver.refusal(needs)
        if reason is not None:
            raise ValueError(reason)
        return solver

    def _warm_start_planes(self, w0, fingerprint):
        """The previous fit's working set, when warm-starting on the same data, labels and loss; else None.

        Cutting planes bound the slack whatever C, but only of the problem they were cut from: planes
        from other data would give a false dual bound, so they are reused only on a fingerprint match.
        """
        kept = getattr(self, "_warm_planes", None)
        if w0 is None or kept is None or fingerprint is None or kept[0] != fingerprint:
            return None
        return kept[1]

    def __getstate__(self):
        state = dict(super().__getstate__())
        state.pop("_warm_planes", None)  # a (K, n_features) array per model: not worth a pickle's bytes
        return state

    def _validation_monitor(self, eval_set, eval_group, qid, patience, approx):
        """A :class:`ValidationMonitor` over the checked validation sets, or None without any.

        Called in fit once ``feature_names_in_`` and ``n_features_in_`` are
        set, which the validation X must match.
        """
        if eval_set is None:
            if patience is not None:
                raise ValueError(
                    f"expected eval_set=(X_val, y_val[, qid_val]) with early_stopping_patience={patience}, "
                    "got no eval_set instead"
                )
            if eval_group is not None:
                raise ValueError("expected eval_group only with eval_set, got eval_group without eval_set")
            return None
        if patience is not None and approx is not None:
            raise ValueError(
                f"expected approx=None with early_stopping_patience (AP-SVM-APPX re-solves until its hard "
                f"constraints hold, which an earlier iterate may not), got approx={approx!r} instead"
            )
        sets = check_eval_sets(eval_set)
        if eval_group is not None:
            if not isinstance(eval_group, (list, tuple)) or len(eval_group) != len(sets):
                raise ValueError(
                    f"expected eval_group to hold one list of group sizes per eval_set ({len(sets)}), "
                    f"got {eval_group!r} instead"
                )
        metrics = eval_metrics(self.eval_metric, relevant_at=check_relevant_at(self.relevant_at))
        evaluators = []
        for index, (X_val, y_val, qid_val) in enumerate(sets):
            name = f"valid_{index}"
            check_feature_names(self, X_val, reset=False)
            X_val = check_matrix(X_val, "X_val")
            check_n_features(self, X_val.shape[1], "X_val")
            group_val = None if eval_group is None else eval_group[index]
            qid_val = qid_or_group(qid_val, group_val, X_val.shape[0], names=("qid_val", f"eval_group[{index}]"))
            if qid is not None and qid_val is None:
                raise ValueError(
                    f"expected queries for {name} (eval_set=(X_val, y_val, qid_val) or eval_group) when "
                    "fitting with qid or group, got (X_val, y_val) instead"
                )
            if qid is None and qid_val is not None:
                raise ValueError(
                    f"expected eval_set=(X_val, y_val) without queries for {name} when fitting without qid, "
                    "got queries instead"
                )
            if qid_val is None:
                y_val = check_binary_labels(y_val, X_val.shape[0], name="y_val").astype(np.int64)
            else:
                qid_val = query_ids(qid_val, X_val.shape[0], name="qid_val")
                y_val = check_grades(y_val, X_val.shape[0], name="y_val")
                relevant_from_grades(y_val, check_relevant_at(self.relevant_at), name="y_val")
            backend = backend_for(X_val)
            for metric_name, metric in metrics:
                evaluators.append((name, metric_name, _scorer(metric, X_val, y_val, qid_val, backend)))
        return ValidationMonitor(evaluators, patience)

    def _row_chunks(self, X, labels, qid, loss, model, approx):
        """X's row chunks with the labels and query ids, where the fit's inference can run on them: many
        queries on a backend that keeps X elsewhere (Dask), a rank loss, a model that takes them; else None.
        """
        if qid is None or approx is not None or not model.supports_row_chunks or not isinstance(loss, RankLoss):
            return None
        if labels is None:
            raise ValueError("expected y to hold integer relevance grades >= 0, got None instead")
        check_relevant_at(self.relevant_at)
        return backend_for(X).row_chunks(X, {"y": labels, "qid": qid})

    def _relevance(self, y, qid, n_samples, loss, model, approx, registry):
        """The relevance the model trains on, the queries it is given (None for one
        query of binary labels, or a model without queries), and the counts of
        queries seen and used.

        Without qid and with a binary loss, ``y`` arrives checked as today's
        binary labels.  Otherwise the labels are grades: a graded loss takes
        them as they are, a binary one thresholds them at ``relevant_at``.
        """
        relevant_at = check_relevant_at(self.relevant_at)
        graded = reads_grades(loss)
        if qid is None and not graded:
            if relevant_at != 1:
                raise ValueError(
                    f"expected relevant_at=1 without qid (binary labels are their own relevance), "
                    f"got relevant_at={self.relevant_at!r} instead; pass qid (one value for a single "
                    "query) to threshold graded labels"
                )
            return y, None, 1, 1
        if approx is not None:
            raise ValueError(f"expected approx=None with qid (AP-SVM-APPX is for one query), got {approx!r} instead")
        queries = QueryIndex.single(n_samples) if qid is None else check_qid(qid, n_samples)
        grades = check_grades(y, n_samples)
        relevance = grades if graded else relevant_from_grades(grades, relevant_at)
        if not model.supports_queries:
            # Documents are classified one by one: how they group into queries changes nothing, so
            # every query's documents are used, and only the pooled labels need both classes.
            if relevance.all():
                raise ValueError(
                    f"expected some document below relevant_at={relevant_at:g} for the {loss.output_kind.value} "
                    f"loss {loss.name!r}, got every label at or above it instead"
                )
            logger.info(
                "the %s loss %r scores documents one by one: qid only sets which documents are relevant",
                loss.output_kind.value,
                loss.name,
            )
            return relevance, None, queries.n_queries, queries.n_queries
        orders = check_queries_the_loss_orders(
            loss, relevance, queries, self.inference, registry=registry, relevant_at=relevant_at
        )
        n_used = int(np.count_nonzero(orders))
        return relevance, queries, queries.n_queries, n_used

    def decision_function(self, X) -> np.ndarray:
        """Ranking scores w·x, shape (n_samples,); higher ranks first.

        A NumPy array in X's float type, also for a Dask X (the N scores
        are gathered; the data is not).
        """
        self._check_for_scoring(X)
        X = check_matrix(X)
        check_n_features(self, X.shape[1])
        return backend_for(X).scores(X, self.coef_)

    def predict(self, X) -> np.ndarray:
        """Ranking scores w·x, as ``LGBMRanker.predict``: :meth:`decision_function`."""
        return self.decision_function(X)

    def score(self, X, y, qid=None, sample_weight=None, group=None) -> float:
        """Average precision of the ranking of X against relevance y.

        With ``qid`` (or ``group``, LightGBM's contiguous group sizes, as in
        :meth:`fit`), the mean over queries of each query's AP, a document
        relevant when its grade reaches ``relevant_at``
        (:func:`rankopt.metrics.mean_average_precision`).

        ``sample_weight`` must be None: scikit-learn's ``Pipeline.score``
        passes it under metadata routing even when nobody gave one, and AP
        is not weighted here.
        """
        if sample_weight is not None:
            raise ValueError(
                f"expected sample_weight=None ({type(self).__name__}.score does not weight documents), "
                f"got {type(sample_weight).__name__} instead"
            )
        scores = self.decision_function(X)
        qid = qid_or_group(qid, group, scores.size)
        if qid is None:
            if getattr(self, "fitted_with_qid_", False):
                raise ValueError(_SCORE_WITHOUT_QID)
            return self._ranking_score(check_one_query_labels(y, scores.size, advice=_SCORE_GRADES), scores)
        return self._ranking_score(y, scores, qid, relevant_at=self.relevant_at)


_SCORE_GRADES = (
    "relevance grades (integers >= 0) are scored over queries: pass qid (np.zeros(n_samples) for one "
    "query; in a scikit-learn search, route it with set_score_request(qid=True) and metadata routing enabled)"
)


_SCORE_WITHOUT_QID = (
    "expected qid: this RankSVM was fitted over queries, so score(X, y) without qid would be average "
    "precision pooled over every document, not MAP over queries, and a model search would pick C by it in "
    "silence. Pass score(X, y, qid=qid); in GridSearchCV or cross_validate enable metadata routing and "
    "request qid: sklearn.set_config(enable_metadata_routing=True); "
    "RankSVM(...).set_fit_request(qid=True).set_score_request(qid=True); search.fit(X, y, qid=qid, groups=qid)"
)


#: Column magnitudes spanning more than this many-fold make the cutting plane slow (raw LETOR features:
#: 561 iterations on the MSLR sample against 11 once scaled); fit then says so, once, in one log line.
UNSCALED_SPAN = 1e4
#: A column larger than the (lower) median column by more than this factor makes the working-set QP's
#: Gram matrix ill-conditioned beyond float64's precision (condition ~ factor² ≥ 1/eps): whether a QP
#: then solves depends on the planes a C happens to produce (a Unix-timestamp column, ~1.7e9 against
#: standardised features, fitted at C = 1 and 1000 but not at C = 10 or 100), so fit refuses every C.
UNSOLVABLE_SPAN = 1e8


def _check_scale(X) -> None:
    """Refuse a column that dwarfs the others (every C alike); hint at scaling when magnitudes merely span widely.

    NumPy and CSR only: a Dask array is not worth a pass over remote data.
    """
    if not (sp.issparse(X) or isinstance(X, np.ndarray)):
        return
    magnitude = column_max_abs(X)
    magnitude = np.sort(magnitude[magnitude > 0])
    if magnitude.size < 2:
        return
    largest, lower_median = magnitude[-1], magnitude[(magnitude.size - 1) // 2]
    if largest > UNSOLVABLE_SPAN * lower_median:
        raise ValueError(
            f"expected feature columns of comparable magnitude, got a column of magnitude {largest:.3g} against a "
            f"median column of {lower_median:.3g} instead (more than {UNSOLVABLE_SPAN:.0e}-fold: the working-set "
            "QP cannot be solved reliably in float64 at any C); scale the features, e.g. "
            "make_pipeline(MaxAbsScaler(), RankSVM(...)) (rankopt train --scale max-abs), or drop that column"
        )
    if largest > UNSCALED_SPAN * magnitude[0]:
        logger.warning(
            "the features' magnitudes span %.3g to %.3g: the cutting plane needs many more iterations on "
            "features this unevenly scaled; scale them, e.g. make_pipeline(MaxAbsScaler(), RankSVM(...)) "
            "(rankopt train --scale max-abs)",
            magnitude[0],
            largest,
        )


def _resolve_model(registry, name: str, loss, approx):
    """The model plugin ``name`` names ("auto": the one for the loss's kind of output), refused when it is
    for another kind of output, or not the default with ``approx``."""
    if approx is not None and name != "auto":
        raise ValueError(f"expected model='auto' with approx (APPX builds its own two problems), got {name!r} instead")
    model = registry.get_model(MODEL_FOR_OUTPUT[loss.output_kind] if name == "auto" else name)
    if model.output_kind is not loss.output_kind:
        raise ValueError(
            f"expected a model for {loss.output_kind.value} losses with loss {loss.name!r}, got model {name!r}, "
            f"which builds problems for {model.output_kind.value} losses, instead"
        )
    return model


def _log_inference(estimator: str, problem, loss: Loss) -> None:
    """Log which inference method the fit runs and why, before it runs (``verbose`` shows it first)."""
    if problem.inference_note is not None:
        logger.info("%s: inference for loss %r: %s", estimator, loss.name, problem.inference_note)


def _warn_if_constant_solution(estimator: str, result, X, loss: Loss, C: float) -> None:
    """Warn when the certified optimum ranks nothing."""
    if result.converged:
        planes = None if result.working_set is None else result.working_set.planes
        plane_scale = float(np.max(np.abs(planes), initial=0.0)) if planes is not None else 0.0
        _warn_if_constant_ranker(estimator, X, result.w, loss, C, plane_scale)


#: A w whose entries are all below this fraction of C × the largest plane entry is w = 0 to rounding: the
#: working-set optimum is w = Σ α_k g_k with Σ α_k ≤ C, so its entries are at most C·max|g|, and a solver's
#: rounding leaves ~1e-16 of that where the optimum is 0.
_ZERO_W_FRACTION = 1e-10
#: Scores whose spread is below this fraction of their magnitude are tied to rounding.
_TIED_SCORES_FRACTION = 1e-12


def _warn_if_constant_ranker(estimator: str, X, w: np.ndarray, loss: Loss, C: float, plane_scale: float) -> None:
    """Warn when a certified optimum ranks every training document alike: w = 0, or every score tied, to
    rounding (relative to the problem's scale: C and the cutting planes' entries)."""
    zero = float(np.max(np.abs(w), initial=0.0)) <= _ZERO_W_FRACTION * C * plane_scale
    if not zero:
        spread, largest = backend_for(X).score_spread(X, w)
        if spread > _TIED_SCORES_FRACTION * largest:
            return
    what = "w = 0 (to rounding)" if zero else "a w that gives every training document the same score"
    warnings.warn(
        f"{estimator}: the certified optimum is {what}: the constant ranker is optimal for loss {loss.name!r} "
        f"at C = {C:g} on this data, and the model ranks nothing. Likely causes: a hinge that is flat around "
        "w = 0 — a top-k loss whose k is far below the number of relevant documents, a graded loss at "
        "moderate C — or features squeezed towards 0 (MaxAbsScaler on heavy-tailed data). Remedies: a larger "
        "C, standardised features (StandardScaler), a larger k, or another loss",
        ConstantRankerWarning,
        stacklevel=4,
    )


def _fit_fingerprint(X, y, qid, relevant_at, loss) -> str | None:
    """A digest of what a fit's cutting planes depend on (X, labels, queries, relevance threshold, loss).

    None for a Dask array (hashing it would be a pass over remote data: its planes are not reused).
    """
    if not (sp.issparse(X) or isinstance(X, np.ndarray)):
        return None
    digest = hashlib.blake2b(digest_size=20)
    parts = [X.data, X.indices, X.indptr] if sp.issparse(X) else [X]
    parts += [np.asarray(y), np.asarray([] if qid is None else qid)]
    for part in parts:
        part = np.ascontiguousarray(part)
        digest.update(f"{part.dtype.str}{part.shape}".encode())
        digest.update(repr(part.tolist()).encode() if part.dtype == object else part.data.cast("B"))
    digest.update(repr((X.shape, relevant_at, type(loss).__qualname__, sorted(loss.get_params().items()))).encode())
    return digest.hexdigest()


def _scorer(metric, X_val, y_val, qid_val, backend):
    """``score(w)``: ``metric`` of the ranking of ``X_val`` by w."""

    def score(w):
        return metric(y_val, backend.scores(X_val, w), qid_val)

    return score


@dataclass(frozen=True)
class _Fit:
    """One ``RankSVM.fit`` call, checked: its data, parameters and the pieces the solve needs."""

    X: object
    qid: np.ndarray | None
    relevance: np.ndarray
    queries: object
    n_queries: int
    n_queries_used: int
    C: float
    tol: float
    max_iter: int
    patience: int | None
    registry: Any
    loss: Loss
    approx: float | None
    model: Any
    solver: SolverSpec
    w0: np.ndarray | None
    planes: WorkingSet | None
    fingerprint: object
    #: A Dask X's row chunks with the labels and query ids, for a multi-query fit whose inference runs
    #: where the chunks are (None: the labels are in this process).
    row_chunks: Any = None


def _log_early_stop(estimator: str, result, monitor, patience) -> None:
    best = monitor.best_index
    logger.info(
        "%s stopped early after %d iterations: %s did not improve for %d iterations; keeping "
        "iteration %d (%s %.4f), whose duality gap is %.3g: not the optimum of the training problem",
        estimator,
        result.n_iter,
        monitor.stopping_label,
        patience,
        best + 1,
        monitor.stopping_label,
        monitor.best_score,
        result.history[best].primal_objective - result.history[-1].dual_objective,
    )


register_model_export(
    RankSVM,
    values=(*FITTED_COMMON, "inference_", "n_easy_", "n_hard_constraints_", "fitted_with_qid_"),
    defaults={"fitted_with_qid_": False},
)
