"""RankSVMCV: RankSVM with C chosen by cross-validation over queries, along a warm-started C path.

As scikit-learn's ``LogisticRegressionCV`` / ``RidgeCV``: one estimator that
searches its own regularisation.  Each fold walks C from the smallest value to
the largest, every fit starting from the previous one's w and working set
(``RankSVM(warm_start=True)``: cutting planes bound the slack whatever C, so the
planes cut at one C are valid at the next); the C with the best mean
validation score is refitted on all the data, cold.  Queries
are never split: with ``qid`` the folds are ``GroupKFold`` over query ids, and
``fit(X, y, qid=...)`` needs no metadata routing.
"""

from __future__ import annotations

import logging

import numpy as np
from sklearn.base import BaseEstimator
from sklearn.model_selection import GroupKFold, StratifiedKFold
from sklearn.utils.validation import check_is_fitted

from rankopt._validation import check_one_query_labels, qid_or_group, query_ids
from rankopt.data.backends import check_matrix
from rankopt.estimators.evaluation import eval_metrics
from rankopt.estimators.parameters import (
    check_parameters,
    loss_parameters,
    loss_spec,
    method_name,
    n_jobs,
    positive_float,
    positive_floats,
    positive_int,
    relevance_threshold,
    scoring_spec,
    splitter,
    verbosity,
)
from rankopt.estimators.progress import verbose_logging
from rankopt.estimators.rank_svm import RankSVM

logger = logging.getLogger(__name__)

__all__ = ["RankSVMCV"]

#: LogisticRegressionCV's grid of Cs, in the range where rank losses reach their best test scores.
DEFAULT_CS = (0.01, 0.1, 1.0, 10.0, 100.0, 1000.0)


class RankSVMCV(BaseEstimator):
    """A :class:`~rankopt.RankSVM` whose C is chosen by cross-validation.

    Parameters
    ----------
    Cs : sequence of float, default (0.01, 0.1, 1, 10, 100, 1000)
        The values of C to try (positive; walked in increasing order).
    cv : int or cross-validation splitter, default 3
        Folds.  An int k means ``GroupKFold(k)`` over the query ids with
        ``qid`` (or ``group``), and ``StratifiedKFold(k)`` over the samples
        of one query without.  A splitter object (anything with
        ``split(X, y, groups)`` and ``get_n_splits``) is called with the
        query ids as ``groups``; it must not split a query.
    scoring : str or callable, default None ("map")
        The validation score, higher is better: ``"map"`` (AP for one
        query), ``"ndcg@k"``, ``"p@k"``, a rank loss's name (the metric it
        stands for), or ``metric(y_true, scores, qid)`` (as ``eval_metric``
        of :class:`RankSVM`).
    loss, loss_params, tol, max_iter, inference, relevant_at :
        As for :class:`RankSVM`, for every fit.
    n_jobs : int or None, default None
        Folds walked in parallel (joblib; None is one process, -1 every core).
        The CPU time is the same; the wall time shrinks.
    verbose : bool, default False
        Log every fit of the path (C, iterations, validation score).

    Attributes
    ----------
    C_ : float
        The chosen C: the best mean validation score (the smallest such C on a tie).
    Cs_ : ndarray
        The Cs tried, increasing.
    cv_results_ : dict
        ``"C"``, ``"mean_test_score"``, ``"std_test_score"``, ``"split{k}_test_score"``,
        ``"mean_n_iter"`` and ``"n_certified"`` (fits whose duality gap
        certified them, of ``n_splits_``), one entry per C, as
        ``GridSearchCV.cv_results_``.
    best_score_ : float
        The chosen C's mean validation score.
    estimator_ : RankSVM
        The model refitted on all the data at ``C_`` (a cold fit: ``RankSVM(C=C_)``'s).
    coef_, converged_, duality_gap_, n_iter_ :
        The refitted model's.
    path_n_iter_ : int
        Cutting-plane iterations of every fit, folds and refit included.
    n_splits_ : int
    n_features_in_ : int
    feature_names_in_ : ndarray of str
        As for :class:`RankSVM`.
    """

    _parameter_checks = {
        "Cs": positive_floats,
        "cv": splitter,
        "scoring": scoring_spec,
        "loss": loss_spec,
        "loss_params": loss_parameters,
        "tol": positive_float,
        "max_iter": positive_int,
        "inference": method_name,
        "relevant_at": relevance_threshold,
        "n_jobs": n_jobs,
        "verbose": verbosity,
    }

    def __init__(
        self,
        Cs=DEFAULT_CS,
        *,
        cv=3,
        scoring=None,
        loss="ap",
        loss_params=None,
        tol=1e-3,
        max_iter=1000,
        inference="auto",
        relevant_at=1,
        n_jobs=None,
        verbose=False,
    ):
        self.Cs = Cs
        self.cv = cv
        self.scoring = scoring
        self.loss = loss
        self.loss_params = loss_params
        self.tol = tol
        self.max_iter = max_iter
        self.inference = inference
        self.relevant_at = relevant_at
        self.n_jobs = n_jobs
        self.verbose = verbose

    def __sklearn_tags__(self):
        return RankSVM().__sklearn_tags__()

    def fit(self, X, y, qid=None, group=None):
        """Choose C by cross-validation on (X, y[, qid]), then refit at it on all of them."""
        params = check_parameters(self)
        Cs = params["Cs"]  # increasing: the path warm-starts each C from the smaller one before it
        X_checked = check_matrix(X)
        n_samples = X_checked.shape[0]
        qid = qid_or_group(qid, group, n_samples)
        if qid is None:
            labels = check_one_query_labels(y, n_samples)
        else:
            qid = query_ids(qid, n_samples)
            labels = np.asarray(y)
        try:
            ((metric_name, metric),) = eval_metrics(self.scoring, relevant_at=self.relevant_at)
        except ValueError as exc:
            raise ValueError(str(exc).replace("eval_metric", "scoring")) from None
        splitter = self._splitter(params["cv"], qid)
        folds = list(splitter.split(X_checked, labels, qid))
        if len(folds) < 2:
            raise ValueError(f"expected at least 2 cross-validation folds, got {len(folds)} instead")
        scores = np.full((len(folds), len(Cs)), np.nan)
        n_iter = np.zeros((len(folds), len(Cs)), dtype=np.int64)
        certified = np.zeros((len(folds), len(Cs)), dtype=bool)
        from joblib import Parallel, delayed

        paths = Parallel(n_jobs=self.n_jobs)(
            delayed(_fold_path)(self._path_model(), X_checked, labels, qid, train, test, Cs, metric)
            for train, test in folds
        )
        with verbose_logging(self.verbose):
            for k, (fold_scores, fold_iterations, fold_certified, stop_reasons) in enumerate(paths):
                scores[k], n_iter[k], certified[k] = fold_scores, fold_iterations, fold_certified
                for j, C in enumerate(Cs):
                    logger.log(
                        logging.INFO if self.verbose else logging.DEBUG,
                        "RankSVMCV fold %d, C=%g: %d iterations (%s), validation %s %.4f",
                        k,
                        C,
                        n_iter[k, j],
                        stop_reasons[j],
                        metric_name,
                        scores[k, j],
                    )
        mean = scores.mean(axis=0)
        if not np.any(np.isfinite(mean)):
            raise ValueError(f"expected a finite validation {metric_name} for some C, got none instead")
        best = int(np.nanargmax(mean))  # the first (smallest) C on a tie
        # One cold fit at the chosen C: walking the path up to it costs every smaller C's fit, warm starts
        # save little (docs/engine-notes.md), and estimator_ is then exactly RankSVM(C=C_) fitted on all
        # the data.
        model = self._path_model().set_params(C=float(Cs[best]), warm_start=False)
        model.fit(X, y, **({} if qid is None else {"qid": qid}))
        refit_iterations = model.n_iter_
        self.Cs_ = Cs
        self.C_ = float(Cs[best])
        self.best_score_ = float(mean[best])
        self.n_splits_ = len(folds)
        self.cv_results_ = {
            "C": Cs.copy(),
            "mean_test_score": mean,
            "std_test_score": scores.std(axis=0),
            **{f"split{k}_test_score": scores[k] for k in range(len(folds))},
            "mean_n_iter": n_iter.mean(axis=0),
            "n_certified": certified.sum(axis=0),
        }
        self.path_n_iter_ = int(n_iter.sum()) + refit_iterations
        self.estimator_ = model
        self.coef_ = model.coef_
        self.converged_ = model.converged_
        self.duality_gap_ = model.duality_gap_
        self.n_iter_ = model.n_iter_
        self.n_features_in_ = model.n_features_in_
        if hasattr(model, "feature_names_in_"):
            self.feature_names_in_ = model.feature_names_in_
        return self

    def decision_function(self, X):
        """The refitted model's scores, X·w."""
        check_is_fitted(self, "estimator_")
        return self.estimator_.decision_function(X)

    def predict(self, X):
        """The refitted model's scores (LightGBM's ``predict`` of a ranker)."""
        check_is_fitted(self, "estimator_")
        return self.estimator_.predict(X)

    def score(self, X, y, qid=None, group=None):
        """The refitted model's :meth:`RankSVM.score` (mean AP over queries with ``qid`` or ``group``)."""
        check_is_fitted(self, "estimator_")
        return self.estimator_.score(X, y, qid=qid, group=group)

    def _path_model(self) -> RankSVM:
        return RankSVM(
            loss=self.loss,
            loss_params=self.loss_params,
            tol=self.tol,
            max_iter=self.max_iter,
            inference=self.inference,
            relevant_at=self.relevant_at,
            warm_start=True,
        )

    @staticmethod
    def _splitter(cv, qid):
        """The splitter of the checked ``cv``: folds of whole queries with ``qid``, stratified without."""
        if not isinstance(cv, int):
            return cv
        if qid is None:
            return StratifiedKFold(cv)
        n_queries = np.unique(qid).size
        if n_queries < cv:
            raise ValueError(
                f"expected at least as many queries as folds, got {n_queries} queries for cv={cv} folds instead: "
                "a fold must hold whole queries"
            )
        return GroupKFold(cv)


def _fold_path(model: RankSVM, X, labels, qid, train, test, Cs, metric):
    """One fold's C path: validation scores, iterations, certificates and stop reasons, one per C."""
    X_train, X_test = X[train], X[test]  # check_matrix gave an array or CSR: both index rows
    queries = {} if qid is None else {"qid": qid[train]}
    scores, iterations, certified, reasons = [], [], [], []
    for C in Cs:
        model.set_params(C=C).fit(X_train, labels[train], **queries)
        scores.append(metric(labels[test], model.decision_function(X_test), None if qid is None else qid[test]))
        iterations.append(model.n_iter_)
        certified.append(model.converged_)
        reasons.append("certified" if model.converged_ else model.stop_reason_)
    return np.array(scores, dtype=np.float64), np.array(iterations), np.array(certified), reasons
