"""RankSVM: a linear ranker trained by the 1-slack structural SVM on any loss."""
from __future__ import annotations

import logging

import numpy as np
from sklearn.base import BaseEstimator
from sklearn.utils.validation import check_is_fitted

from rankopt._validation import (
    check_binary_labels,
    check_matrix,
    check_positive_float,
    check_positive_int,
)
from rankopt.data.backends import backend_for
from rankopt.engine.cutting_plane import solve_cutting_plane
from rankopt.losses.base import Loss, OutputKind
from rankopt.metrics import average_precision
from rankopt.models.approx import check_approx, fit_approx

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
    """

    def __init__(self, loss="ap", C=1.0, tol=1e-3, max_iter=1000, inference="auto", verbose=False,
                 approx=None):
        self.loss = loss
        self.C = C
        self.tol = tol
        self.max_iter = max_iter
        self.inference = inference
        self.verbose = verbose
        self.approx = approx

    def _registry(self):
        from rankopt.plugins import default_registry

        return default_registry()

    def fit(self, X, y):
        """Fit w on samples X (n_samples, n_features) with binary relevance y.

        X may be a NumPy array (float32 stays float32), a scipy.sparse
        matrix, or a Dask array (dense or CSR chunks, e.g. on disk): its
        products run on Dask's active scheduler — a ``dask.distributed``
        client if one is active (:func:`rankopt.data.backends.dask_client`)
        — and only the N scores and d-vectors reach this process.  See
        ``docs/scale.md``.
        """
        X = check_matrix(X)
        y = check_binary_labels(y, X.shape[0])
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
        feature_map = registry.get_feature_map("linear")
        progress = _log_iteration if self.verbose else None
        if approx is None:
            problem = model.build_problem(X, y, loss, feature_map, inference=self.inference, registry=registry)
            result = solve_cutting_plane(problem, C, tol=tol, max_iter=max_iter, progress=progress)
            split = None
        else:
            problem, result, split = fit_approx(
                X, y, loss, feature_map, approx, C=C, tol=tol, max_iter=max_iter,
                inference=self.inference, registry=registry, progress=progress,
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
        return self

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

    def score(self, X, y) -> float:
        """Average precision of the ranking of X against relevance y."""
        return average_precision(y, self.decision_function(X))

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.sparse = True
        tags.target_tags.required = True
        return tags


def _log_iteration(record) -> None:
    logger.info(
        "iteration %d: primal %.6g, gap %.3g, violation %.3g",
        record.iteration, record.primal_objective, record.duality_gap, record.violation,
    )
