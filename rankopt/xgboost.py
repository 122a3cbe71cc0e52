"""The structured hinge of any registered rank loss as an XGBoost objective (the ``xgboost`` extra).

::

    import xgboost
    from rankopt.xgboost import hinge_objective

    train = xgboost.DMatrix(X, label=y, qid=qid)       # rows sorted by qid, as XGBoost's rankers need
    booster = xgboost.train({"tree_method": "hist"}, train, num_boost_round=100, obj=hinge_objective("ap"))

``hinge_objective(...)`` is a callable of ``xgboost.train``'s form ``(preds, dtrain) → (grad, hess)``; the
queries come from the DMatrix's group or qid.  :func:`eval_metric` is the loss's own metric for
``custom_metric=`` (pass ``maximize=True`` to ``xgboost.train`` for early stopping on it).

``XGBRanker`` takes no custom objective (XGBoost 3.2 refuses one in its constructor), and XGBoost's other
scikit-learn estimators hand a custom objective ``(y_true, y_pred)`` without the queries: with them the
objective refuses to run and says to use ``xgboost.train``.  Importing :mod:`rankopt` never imports XGBoost.
"""

from __future__ import annotations

import numpy as np

from rankopt.boosting import HingeObjective, LossMetric

__all__ = ["HingeXGBoostObjective", "XGBoostLossMetric", "eval_metric", "hinge_objective"]


class HingeXGBoostObjective(HingeObjective):
    """:class:`rankopt.boosting.HingeObjective` in ``xgboost.train``'s form; a ranking DMatrix's weights (one
    per query) scale each query's hinge."""

    def __call__(self, preds, dtrain):
        matrix = _matrix(dtrain, "objective")
        return self.gradients(preds, np.asarray(matrix.get_label()), _group_sizes(matrix), matrix.get_weight())


def hinge_objective(loss="ndcg_graded", *, relevant_at=1, hessian="gradient", scale=0.3, n_threads=None, **loss_params):
    """The structured hinge of ``loss`` as an XGBoost objective (see :class:`rankopt.boosting.HingeObjective`
    for the parameters)."""
    return HingeXGBoostObjective(
        loss, relevant_at=relevant_at, hessian=hessian, scale=scale, n_threads=n_threads, **loss_params
    )


class XGBoostLossMetric(LossMetric):
    """:class:`rankopt.boosting.LossMetric` in ``xgboost.train``'s ``custom_metric`` form (higher is better),
    weighted by the DMatrix's per-query weights when it has them."""

    def __call__(self, preds, dmatrix):
        matrix = _matrix(dmatrix, "metric")
        return self.name, self.value(preds, np.asarray(matrix.get_label()), _group_sizes(matrix), matrix.get_weight())


def eval_metric(loss="ndcg_graded", *, relevant_at=1, **loss_params):
    """The metric ``loss`` stands for (1 − Δ, averaged over queries) for ``xgboost.train(custom_metric=…,
    maximize=True)``."""
    return XGBoostLossMetric(loss, relevant_at=relevant_at, **loss_params)


def _matrix(dmatrix, what: str):
    """``dmatrix``, refused with what to do when it is not one (an array: a scikit-learn estimator's call; a
    LightGBM Dataset: the other library's objective)."""
    if callable(getattr(dmatrix, "get_uint_info", None)):
        return dmatrix
    if callable(getattr(dmatrix, "construct", None)):
        raise TypeError(
            f"expected an xgboost.DMatrix, got a LightGBM {type(dmatrix).__name__} instead: LightGBM takes "
            f"rankopt.lightgbm's {what}"
        )
    if what == "metric":
        raise TypeError(
            f"expected an xgboost.DMatrix carrying the queries (group or qid), got {type(dmatrix).__name__} "
            "instead: XGBoost's scikit-learn estimators (XGBRanker included) call a custom metric with "
            "(y_true, y_pred) and no queries; use xgboost.train(params, dtrain, evals=[(dvalid, 'valid')], "
            "custom_metric=eval_metric(...), maximize=True)"
        )
    raise TypeError(
        f"expected an xgboost.DMatrix carrying the queries (group or qid), got {type(dmatrix).__name__} "
        "instead: XGBoost's scikit-learn estimators pass a custom objective no queries (and XGBRanker takes "
        "none); train with xgboost.train(params, xgboost.DMatrix(X, label=y, qid=qid), obj=hinge_objective(...))"
    )


def _group_sizes(dmatrix):
    pointers = np.asarray(dmatrix.get_uint_info("group_ptr"), dtype=np.int64)
    return np.diff(pointers) if pointers.size > 1 else None
