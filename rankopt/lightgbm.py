"""The structured hinge of any registered rank loss as a LightGBM objective (the ``lightgbm`` extra).

::

    from lightgbm import LGBMRanker
    from rankopt.lightgbm import hinge_objective

    ranker = LGBMRanker(objective=hinge_objective("ndcg_graded"), n_estimators=100)
    ranker.fit(X, y, group=group_sizes)

With early stopping on the loss's own metric (1 − Δ per validation query; LightGBM before 4.7 takes the
validation set as ``eval_set=[(X_valid, y_valid)]``). ``metric="None"`` turns LightGBM's default ndcg@1…@5 of
a ranker off: without it, ``early_stopping`` stops on whichever of the six metrics stalls first::

    ranker = LGBMRanker(objective=hinge_objective("ndcg_graded"), metric="None", n_estimators=100)
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
    """:class:`rankopt.boosting.HingeObjective` in LightGBM's two calling forms.

    Sample weights scale each query's hinge: LightGBM gives one weight per document, and those of a query's
    documents must be equal (the hinge weighs whole queries).
    """

    def __call__(self, y_true, y_pred, weight=None, group=None):
        _refuse_dataset(y_pred, "objective", "params={'objective': objective.train_objective}")
        return self.gradients(y_pred, y_true, group, weight)

    def train_objective(self, preds, dataset):
        """``lightgbm.train``'s form: ``params={"objective": objective.train_objective}``."""
        _expect_dataset(dataset, "LGBMRanker(objective=hinge_objective(...))")
        _check_whole_queries(dataset)
        return self.gradients(preds, np.asarray(dataset.get_label()), dataset.get_group(), dataset.get_weight())


def hinge_objective(loss="ndcg_graded", *, relevant_at=1, hessian="gradient", scale=0.3, n_threads=None, **loss_params):
    """The structured hinge of ``loss`` as a LightGBM objective (see :class:`rankopt.boosting.HingeObjective`
    for the parameters)."""
    _check_lightgbm_version()
    return HingeLightGBMObjective(
        loss, relevant_at=relevant_at, hessian=hessian, scale=scale, n_threads=n_threads, **loss_params
    )


class LightGBMLossMetric(LossMetric):
    """:class:`rankopt.boosting.LossMetric` in LightGBM's two ``feval`` forms (higher is better); weighted by
    the validation set's per-query weights when it has them."""

    def __call__(self, y_true, y_pred, weight=None, group=None):
        _refuse_dataset(y_pred, "metric", "feval=metric.train_metric")
        return self.name, self.value(y_pred, y_true, group, weight), True

    def train_metric(self, preds, eval_data):
        """``lightgbm.train``'s form: ``feval=metric.train_metric``."""
        _expect_dataset(eval_data, "LGBMRanker.fit(eval_metric=eval_metric(...))")
        _check_whole_queries(eval_data)
        labels = np.asarray(eval_data.get_label())
        return self.name, self.value(preds, labels, eval_data.get_group(), eval_data.get_weight()), True


def eval_metric(loss="ndcg_graded", *, relevant_at=1, **loss_params):
    """The metric ``loss`` stands for (1 − Δ, averaged over queries) as a LightGBM eval metric, for early
    stopping on it: ``LGBMRanker.fit(eval_metric=…)``, or ``lightgbm.train(feval=….train_metric)``."""
    return LightGBMLossMetric(loss, relevant_at=relevant_at, **loss_params)


def _is_dataset(value) -> bool:
    """A LightGBM ``Dataset``, read by its methods (this module does not import LightGBM): an XGBoost DMatrix
    has ``get_group`` too, but not ``construct``."""
    return callable(getattr(value, "get_group", None)) and callable(getattr(value, "construct", None))


def _refuse_dataset(y_pred, what: str, train_form: str) -> None:
    """The scikit-learn form handed ``lightgbm.train``'s arguments (predictions, a Dataset): say which form fits."""
    if callable(getattr(y_pred, "get_uint_info", None)):
        raise TypeError(
            f"expected LightGBM's call, got an xgboost.DMatrix instead: XGBoost takes rankopt.xgboost's {what}"
        )
    if _is_dataset(y_pred):
        raise TypeError(
            f"expected LGBMRanker's call (y_true, y_pred, weight, group), got (preds, Dataset) instead: "
            f"lightgbm.train takes the {what}'s train form, {train_form}"
        )


def _expect_dataset(dataset, estimator_form: str) -> None:
    if not _is_dataset(dataset):
        raise TypeError(
            f"expected lightgbm.train's call (preds, Dataset), got {type(dataset).__name__} instead: the "
            f"scikit-learn estimators take the object itself, {estimator_form}"
        )


def _check_whole_queries(dataset) -> None:
    """Refuse a subset of a Dataset (``lightgbm.cv``'s folds) that splits a query across folds.

    LightGBM builds query-aware folds only for its named ranking objectives; with a callable one, ``cv`` splits
    rows, and each fold's groups are the pieces of the queries it got.
    """
    used = getattr(dataset, "used_indices", None)
    reference = getattr(dataset, "reference", None)
    if used is None or reference is None or reference.get_group() is None:
        return
    sizes = np.asarray(reference.get_group(), dtype=np.int64)
    kept = np.bincount(np.repeat(np.arange(sizes.size), sizes)[np.asarray(used)], minlength=sizes.size)
    split = np.flatnonzero((kept > 0) & (kept < sizes))
    if split.size:
        raise ValueError(
            f"expected folds of whole queries, got {split.size} queries split across folds (query {split[0]}: "
            f"{kept[split[0]]} of its {sizes[split[0]]} documents): lightgbm.cv splits rows for a callable "
            "objective; pass folds=sklearn.model_selection.GroupKFold(n_splits), which lightgbm.cv splits by the "
            "Dataset's queries"
        )


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
