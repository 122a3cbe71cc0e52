"""RankSVM: a linear ranker trained by the 1-slack structural SVM on any loss."""
from __future__ import annotations

import logging

import numpy as np
from sklearn.base import BaseEstimator
from sklearn.utils.validation import check_is_fitted

from rankopt._validation import (
    QueryIndex,
    check_binary_labels,
    check_grades,
    check_matrix,
    check_positive_float,
    check_positive_int,
    check_qid,
    check_relevant_at,
    relevant_from_grades,
)
from rankopt.data.backends import backend_for
from rankopt.engine.cutting_plane import solve_cutting_plane
from rankopt.losses.base import Loss, OutputKind, RankLoss
from rankopt.metrics import average_precision, mean_average_precision
from rankopt.models.approx import check_approx, fit_approx
from rankopt.models.ranking import queries_to_order

logger = logging.getLogger(__name__)

#: The plain model for each kind of loss.
MODEL_FOR_OUTPUT = {OutputKind.RANKING: "ranking", OutputKind.LABELING: "binary"}


class RankSVM(BaseEstimator):
    """Linear ranker minimising a convex upper bound on a rank loss.

    Solves ``qs-rank-losses`` problem (4), min ½‖w‖² + C ξ over all rankings
    (or labelings, for a labeling loss), with the 1-slack cutting-plane
    algorithm.  Samples are ranked by s(x) = w·x.

    Parameters
    ----------
    loss : str or Loss, default "ap"
        ``"ap"`` (AP-SVM), ``"ndcg"`` (NDCG-SVM), ``"auc"`` (ROC-area SVM),
        ``"zero_one"`` (the class-weighted binary SVM baseline), any loss a
        plugin registers, or a :class:`~rankopt.losses.Loss` instance.
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
        Log every iteration at INFO level on the ``rankopt`` logger.
    approx : float or None, default None
        AP-SVM-APPX (``efficient-ap-svm`` §3.3, ``loss="ap"`` only): a
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

    Many queries
    ------------
    ``fit(X, y, qid=qid)`` trains one w over every query: the 1-slack
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

    Attributes
    ----------
    coef_ : ndarray of shape (n_features,)
        The weight vector w.
    n_iter_ : int
        Cutting-plane iterations run.
    converged_ : bool
        Whether ``tol`` was reached within ``max_iter``.
    loss_ : Loss
        The resolved loss instance.
    inference_ : str or None
        The inference method used (None for labeling losses).
    history_ : list of IterationRecord
        Primal objective, dual objective and duality gap per iteration.
    n_features_in_ : int
    n_easy_ : int or None
        With ``approx``: samples the binary SVM classified with margin ≥ 1.
    n_hard_constraints_ : int or None
        With ``approx``: easy samples kept as hard constraints.
    n_queries_ : int
        Distinct query ids seen in fit (1 without ``qid``).
    n_queries_used_ : int
        Queries with documents of two relevance levels, which the fit
        averages over (1 without ``qid``).
    """

    def __init__(self, loss="ap", C=1.0, tol=1e-3, max_iter=1000, inference="auto", verbose=False,
                 approx=None, relevant_at=1):
        self.loss = loss
        self.C = C
        self.tol = tol
        self.max_iter = max_iter
        self.inference = inference
        self.verbose = verbose
        self.approx = approx
        self.relevant_at = relevant_at

    def _registry(self):
        from rankopt.plugins import default_registry

        return default_registry()

    def fit(self, X, y, qid=None):
        """Fit w on samples X (n_samples, n_features) with relevance y.

        Without ``qid`` the rows are one query and y binary ({0, 1} or
        {-1, 1}); with ``qid`` (one integer query id per row) y holds
        relevance grades, integers ≥ 0, and w is fitted over all queries
        (see "Many queries" above).

        X may be a NumPy array (float32 stays float32), a scipy.sparse
        matrix, or a Dask array (dense or CSR chunks, e.g. on disk): its
        products run on Dask's active scheduler — a ``dask.distributed``
        client if one is active (:func:`rankopt.data.backends.dask_client`)
        — and only the N scores and d-vectors reach this process.  See
        ``docs/scale.md``.
        """
        X = check_matrix(X)
        if qid is None:
            y_checked = _check_one_query_labels(y, X.shape[0])
        C = check_positive_float(self.C, "C")
        tol = check_positive_float(self.tol, "tol")
        max_iter = check_positive_int(self.max_iter, "max_iter")
        if not isinstance(self.inference, str):
            raise ValueError(f"expected inference to be a method name, got {self.inference!r} instead")
        registry = self._registry()
        if not isinstance(self.loss, (str, Loss)):
            raise ValueError(f"expected loss to be a loss name or a Loss instance, got {self.loss!r} instead")
        loss = registry.resolve_loss(self.loss)
        approx = check_approx(self.approx, loss)
        model = registry.get_model(MODEL_FOR_OUTPUT[loss.output_kind])
        y, queries, n_queries, n_queries_used = self._relevance(
            y_checked if qid is None else y, qid, X.shape[0], loss, model, approx
        )
        feature_map = registry.get_feature_map("linear")
        callback = _log_iteration if self.verbose else None
        if queries is not None:
            problem = model.build_problem(X, y, loss, feature_map, inference=self.inference, registry=registry,
                                          queries=queries)
            result = solve_cutting_plane(problem, C, tol=tol, max_iter=max_iter, callback=callback)
            split = None
        elif approx is None:
            problem = model.build_problem(X, y, loss, feature_map, inference=self.inference, registry=registry)
            result = solve_cutting_plane(problem, C, tol=tol, max_iter=max_iter, callback=callback)
            split = None
        else:
            problem, result, split = fit_approx(
                X, y, loss, feature_map, approx, C=C, tol=tol, max_iter=max_iter,
                inference=self.inference, registry=registry, callback=callback,
            )
        self.coef_ = result.w
        self.n_iter_ = result.n_iter
        self.converged_ = result.converged
        self.history_ = result.history
        self.loss_ = loss
        self.inference_ = problem.inference if loss.output_kind is OutputKind.RANKING else None
        self.n_features_in_ = X.shape[1]
        self.n_easy_ = None if split is None else split.n_easy
        self.n_hard_constraints_ = None if split is None else split.n_hard_constraints
        self.n_queries_ = n_queries
        self.n_queries_used_ = n_queries_used
        return self

    def _relevance(self, y, qid, n_samples, loss, model, approx):
        """The relevance the model trains on, the queries it is given (None for one
        query of binary labels, or a model without queries), and the counts of
        queries seen and used.

        Without qid and with a binary loss, ``y`` arrives checked as today's
        binary labels.  Otherwise the labels are grades: a graded loss takes
        them as they are, a binary one thresholds them at ``relevant_at``.
        """
        relevant_at = check_relevant_at(self.relevant_at)
        graded = is_graded(loss)
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
        n_used = int(np.count_nonzero(queries_to_order(relevance, queries)))
        if n_used == 0:
            _raise_no_query_orders(queries, graded, relevant_at)
        if not model.supports_queries:
            logger.info(
                "the %s loss %r scores documents one by one: qid only sets which documents are relevant",
                loss.output_kind.value, loss.name,
            )
            return relevance, None, queries.n_queries, n_used
        return relevance, queries, queries.n_queries, n_used

    def decision_function(self, X) -> np.ndarray:
        """Ranking scores w·x, shape (n_samples,); higher ranks first.

        A NumPy array in X's float type, also for a Dask X (the N scores
        are gathered; the data is not).
        """
        check_is_fitted(self, "coef_")
        X = check_matrix(X)
        if X.shape[1] != self.n_features_in_:
            raise ValueError(
                f"expected X with {self.n_features_in_} features, as in fit, got {X.shape[1]} instead "
                f"(X has {X.shape[1]} features, but RankSVM is expecting {self.n_features_in_} features as input)"
            )
        return backend_for(X).scores(X, self.coef_)

    def score(self, X, y, qid=None) -> float:
        """Average precision of the ranking of X against relevance y.

        With ``qid``, the mean over queries of each query's AP, a document
        relevant when its grade reaches ``relevant_at``
        (:func:`rankopt.metrics.mean_average_precision`).
        """
        if qid is None:
            return average_precision(y, self.decision_function(X))
        return mean_average_precision(y, self.decision_function(X), qid, relevant_at=self.relevant_at)

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.sparse = True
        tags.target_tags.required = True
        return tags


def _check_one_query_labels(y, n_samples: int) -> np.ndarray:
    """Binary labels of one query; graded labels without qid get an error that says how to pass them."""
    try:
        return check_binary_labels(y, n_samples)
    except ValueError as exc:
        try:
            grades = check_grades(y, n_samples)
        except ValueError:
            raise exc from None
        if grades.max() > 1:
            raise ValueError(
                f"{exc}; relevance grades (integers >= 0) train with qid: pass qid=np.zeros(n_samples) "
                "for one query"
            ) from None
        raise


def is_graded(loss: Loss) -> bool:
    """Whether ``loss`` trains on relevance grades rather than binary relevance."""
    return isinstance(loss, RankLoss) and loss.graded


def _raise_no_query_orders(queries, graded, relevant_at) -> None:
    if graded:
        raise ValueError(
            f"expected some query (qid) to hold documents of two different grades in y, got none of "
            f"the {queries.n_queries} queries instead"
        )
    raise ValueError(
        f"expected some query (qid) to hold both a relevant document (y >= relevant_at={relevant_at:g}) and a "
        f"non-relevant one, got none of the {queries.n_queries} queries instead"
    )


def _log_iteration(record, w) -> None:
    logger.info(
        "iteration %d: primal %.6g, gap %.3g, violation %.3g",
        record.iteration, record.primal_objective, record.duality_gap, record.violation,
    )
