"""The structured hinge of any registered rank loss as a LightGBM objective (the ``lightgbm`` extra).

::

    from lightgbm import LGBMRanker
    from rankopt.lightgbm import hinge_objective

    ranker = LGBMRanker(objective=hinge_objective("ndcg_graded"), n_estimators=100)
    ranker.fit(X, y, group=group_sizes)

With early stopping on the loss's own metric (1 − Δ per validation query; LightGBM before 4.7 takes the
validation set as ``eval_set=[(X_valid, y_valid)]``)::

    ranker.fit(X, y, group=sizes, eval_X=(X_valid,), eval_y=(y_valid,), eval_group=[valid_sizes],
               eval_metric=eval_metric("ndcg_graded"), callbacks=[lightgbm.early_stopping(50)])

``hinge_objective(...)`` is a callable of LightGBM's scikit-learn form ``(y_true, y_pred, weight, group)
→ (grad, hess)``; its :meth:`~HingeLightGBMObjective.train_objective` is the form ``lightgbm.train`` takes in
``params["objective"]``: ``(preds, dataset) → (grad, hess)``.  Importing :mod:`rankopt` never imports
LightGBM; this module imports nothing of it either, and reads the installed version from its metadata to
refuse a LightGBM older than 4.0, which takes no callable objective in ``lightgbm.train``.
"""

from __future__ import annotations

import numpy as np

from rankopt.boosting import HingeObjective, LossMetric

__all__ = ["HingeLightGBMObjective", "LightGBMLossMetric", "eval_metric", "hinge_objective"]

#: The oldest LightGBM whose ``lightgbm.train`` takes a callable objective in its parameters.
OLDEST_LIGHTGBM = (4, 0)


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


def hinge_objective(loss="ndcg_graded", *, relevant_at=1, hessian="gradient", scale=0.3, n_threads=None, **loss_params):
    """The structured hinge of ``loss`` as a LightGBM objective (see :class:`rankopt.boosting.HingeObjective`
    for the parameters)."""
    _check_lightgbm_version()
    return HingeLightGBMObjective(
        loss, relevant_at=relevant_at, hessian=hessian, scale=scale, n_threads=n_threads, **loss_params
    )


class LightGBMLossMetric(LossMetric):
    """:class:`rankopt.boosting.LossMetric` in LightGBM's two ``feval`` forms (higher is better)."""

    def __call__(self, y_true, y_pred, weight=None, group=None):
        return self.name, self.value(y_pred, y_true, group), True

    def train_metric(self, preds, eval_data):
        """``lightgbm.train``'s form: ``feval=metric.train_metric``."""
        return self.name, self.value(preds, np.asarray(eval_data.get_label()), eval_data.get_group()), True


def eval_metric(loss="ndcg_graded", *, relevant_at=1, **loss_params):
    """The metric ``loss`` stands for (1 − Δ, averaged over queries) as a LightGBM eval metric, for early
    stopping on it: ``LGBMRanker.fit(eval_metric=…)``, or ``lightgbm.train(feval=….train_metric)``."""
    return LightGBMLossMetric(loss, relevant_at=relevant_at, **loss_params)


def _check_lightgbm_version(installed: str | None = None) -> None:
    """Refuse a LightGBM too old for callable objectives; say nothing when LightGBM is not installed
    (the objective is a plain callable until a booster calls it)."""
    if installed is None:
        from importlib import metadata

        try:
            installed = metadata.version("lightgbm")
        except metadata.PackageNotFoundError:
            return
    release = tuple(int(part) for part in installed.split(".")[:2] if part.isdigit())
    if release < OLDEST_LIGHTGBM:
        raise ImportError(
            f"expected LightGBM >= {'.'.join(map(str, OLDEST_LIGHTGBM))} for a custom ranking objective, got "
            f"LightGBM {installed} instead: pip install 'rankopt[lightgbm]'"
        )
