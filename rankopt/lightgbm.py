"""The structured hinge of any registered rank loss as a LightGBM objective (the ``lightgbm`` extra).

::

    from lightgbm import LGBMRanker
    from rankopt.lightgbm import hinge_objective

    ranker = LGBMRanker(objective=hinge_objective("ndcg_graded"), n_estimators=100)
    ranker.fit(X, y, group=group_sizes)

``hinge_objective(...)`` is a callable of LightGBM's scikit-learn form ``(y_true, y_pred, weight, group)
→ (grad, hess)``; its :meth:`~HingeLightGBMObjective.train_objective` is the form ``lightgbm.train`` takes in
``params["objective"]``: ``(preds, dataset) → (grad, hess)``.  Importing :mod:`rankopt` never imports
LightGBM; this module imports nothing of it either, so it works with any LightGBM that takes callables
(4.0 and newer).
"""

from __future__ import annotations

import numpy as np

from rankopt.boosting import HingeObjective

__all__ = ["HingeLightGBMObjective", "hinge_objective"]


class HingeLightGBMObjective(HingeObjective):
    """:class:`rankopt.boosting.HingeObjective` in LightGBM's two calling forms."""

    def __call__(self, y_true, y_pred, weight=None, group=None):
        if weight is not None:
            raise ValueError(
                "expected no sample weights: the structured hinge weighs documents by its loss; drop sample_weight"
            )
        return self.gradients(y_pred, y_true, group)

    def train_objective(self, preds, dataset):
        """``lightgbm.train``'s form: ``params={"objective": objective.train_objective}``."""
        group = dataset.get_group()
        return self.gradients(preds, np.asarray(dataset.get_label()), group)


def hinge_objective(loss="ndcg_graded", *, relevant_at=1, hessian=1.0, scale=1.0, n_threads=None, **loss_params):
    """The structured hinge of ``loss`` as a LightGBM objective (see :class:`rankopt.boosting.HingeObjective`
    for the parameters)."""
    return HingeLightGBMObjective(
        loss, relevant_at=relevant_at, hessian=hessian, scale=scale, n_threads=n_threads, **loss_params
    )
