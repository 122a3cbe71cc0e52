"""The structured hinge of any registered rank loss as an XGBoost objective (the ``xgboost`` extra).

::

    import xgboost
    from rankopt.xgboost import hinge_objective

    train = xgboost.DMatrix(X, label=y, qid=qid)       # rows sorted by qid, as XGBoost's rankers need
    booster = xgboost.train({"tree_method": "hist"}, train, num_boost_round=100, obj=hinge_objective("ap"))

``hinge_objective(...)`` is a callable of ``xgboost.train``'s form ``(preds, dtrain) → (grad, hess)``; the
queries come from the DMatrix's group or qid.  Importing :mod:`rankopt` never imports XGBoost.
"""

from __future__ import annotations

import numpy as np

from rankopt.boosting import HingeObjective

__all__ = ["HingeXGBoostObjective", "hinge_objective"]


class HingeXGBoostObjective(HingeObjective):
    """:class:`rankopt.boosting.HingeObjective` in ``xgboost.train``'s form."""

    def __call__(self, preds, dtrain):
        pointers = np.asarray(dtrain.get_uint_info("group_ptr"), dtype=np.int64)
        group = np.diff(pointers) if pointers.size > 1 else None
        return self.gradients(preds, np.asarray(dtrain.get_label()), group)


def hinge_objective(loss="ndcg_graded", *, relevant_at=1, hessian=1.0, scale=1.0, n_threads=None, **loss_params):
    """The structured hinge of ``loss`` as an XGBoost objective (see :class:`rankopt.boosting.HingeObjective`
    for the parameters)."""
    return HingeXGBoostObjective(
        loss, relevant_at=relevant_at, hessian=hessian, scale=scale, n_threads=n_threads, **loss_params
    )
