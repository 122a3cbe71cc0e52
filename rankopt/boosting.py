"""The structured hinge of any registered rank loss as a gradient-boosting objective (shared by
:mod:`rankopt.lightgbm` and :mod:`rankopt.xgboost`; neither library is imported here).

Boosted trees take a custom objective that returns, per document, the gradient and the hessian of the
training loss at the current predictions.  The structured hinge of one query, h(s) = max_R [Δ(R*, R) +
Σ_i (c_i(R) − c_i(R*)) s_i], has the exact subgradient c(R̂) − c(R*) from one batched inference call
(:func:`rankopt.structured_hinge`, ``reduction="sum"``); it is piecewise linear, so its hessian is 0 almost
everywhere and a Newton step needs a stand-in (``hessian=``):

* a constant (``1.0``): each leaf moves by the mean gradient of its documents, Friedman's first-order
  gradient boosting;
* ``"gradient"``: each document's |gradient|, so that a leaf moves by Σ g / Σ |g| ∈ [−1, 1] — the step
  is the agreement of its documents' gradients, whatever the size of their queries (the hinge's
  coefficients are normalised per query, 1/|P| and 1/|N| for a binary loss, so their raw size says how
  large a query is, not how wrong it is).

:class:`LossMetric` is the loss's own metric, 1 − Δ per query (:func:`rankopt.metrics.loss_metric`), for
early stopping.
"""

from __future__ import annotations

import math
import sys

import numpy as np

from rankopt._validation import (
    check_group_sizes_given,
    check_positive_float,
    check_predictions,
    check_relevant_at,
    check_score_sums,
    not_finite_error,
    query_weights,
)
from rankopt.inference.structure_table import reads_grades

__all__ = ["HingeObjective", "LossMetric"]

#: The hessians a HingeObjective takes by name.
HESSIANS = ("gradient",)
#: The smallest hessian a document gets under hessian="gradient" (a document with no gradient adds nothing).
HESSIAN_FLOOR = 1e-6


class HingeObjective:
    """``(gradient, hessian)`` of the summed structured hinge of ``loss`` at a booster's predictions.

    Parameters
    ----------
    loss : str or RankLoss, default "ndcg_graded"
        Any registered rank loss: built-in or plugin, binary (thresholded at ``relevant_at``) or graded.
    relevant_at : float, default 1
        The grade from which a document counts as relevant for a binary loss.
    hessian : float or "gradient", default "gradient"
        The hinge's own hessian is 0 almost everywhere; a float is a constant every document gets,
        ``"gradient"`` gives each document its |gradient| (at least ``HESSIAN_FLOOR``), see the module
        docstring.  The default won the hessian study of ``docs/learners.md``: with the learning rate and
        the leaves tuned, it had the best validation NDCG@10 for the ``ap``, ``ndcg_graded`` and
        ``pairwise`` hinges on the MSLR sample.
    scale : float, default 0.3
        The hinge is taken at ``scale × predictions``, so its margin is 1/scale in the trees' units; the
        gradient is multiplied by ``scale`` accordingly.  0.3 had the best validation NDCG@10 averaged over
        those three losses (of 0.3, 1, 3, 10 and 30) with ``hessian="gradient"``.
    n_threads : int, optional
        Threads of the batched inference.
    **loss_params
        Parameters of a loss given by name.
    """

    def __init__(
        self, loss="ndcg_graded", *, relevant_at=1, hessian="gradient", scale=0.3, n_threads=None, **loss_params
    ):
        self.loss = _resolve_loss(loss, loss_params)
        check_relevant_at(relevant_at)
        self.relevant_at = relevant_at
        self.hessian = hessian if isinstance(hessian, str) and hessian in HESSIANS else _constant_hessian(hessian)
        self.scale = check_positive_float(scale, "scale")
        self.n_threads = n_threads

    def __repr__(self) -> str:
        return f"HingeObjective(loss={self.loss!r}, hessian={self.hessian!r}, scale={self.scale!r})"

    def gradients(self, predictions, labels, group_sizes, weights=None) -> tuple[np.ndarray, np.ndarray]:
        """(grad, hess) at ``predictions`` for documents grouped in contiguous queries of ``group_sizes``.

        ``weights``, optional: one weight per query, or one per document equal within each query
        (:func:`rankopt._validation.query_weights`); a query's weight scales its hinge, so its gradient and hessian.
        """
        from rankopt.hinge import hinge_per_query

        predictions = check_predictions(predictions)
        group_sizes = check_group_sizes_given(group_sizes)
        _check_not_diverged(self.scale * predictions, group_sizes)
        per_query = hinge_per_query(
            self.scale * predictions,
            labels,
            group=group_sizes,
            loss=self.loss,
            relevant_at=self.relevant_at,
            n_threads=self.n_threads,
        )
        if not per_query.usable.any():
            raise ValueError(_nothing_to_order(self.loss, self.relevant_at, len(group_sizes)))
        grad = self.scale * per_query.grad
        if self.hessian == "gradient":
            hess = np.maximum(np.abs(grad), HESSIAN_FLOOR)
        else:
            hess = np.full(predictions.size, self.hessian)
        per_query_weight = query_weights(weights, group_sizes, predictions.size)
        if per_query_weight is not None and per_query_weight.size and not per_query_weight.any():
            raise ValueError(
                f"expected a weight > 0 on some query, got weights of 0 on all {per_query_weight.size} queries: every "
                "gradient would be 0 and the booster would learn nothing"
            )
        if per_query_weight is not None:
            document_weight = np.repeat(per_query_weight, np.asarray(group_sizes, dtype=np.int64))
            grad, hess = grad * document_weight, hess * document_weight
        return grad, hess


#: What a booster's user reads under the hinge's refusal of its scores.
DIVERGED = "the booster diverged: lower the learning rate or raise the hessian"


def _check_not_diverged(scores: np.ndarray, group_sizes) -> None:
    """The hinge's own refusal of ``scores`` (not finite, or sums past its bound), with :data:`DIVERGED` as a
    note: the message is every door's, the note says what it means for a booster."""
    largest = float(np.max(np.abs(scores))) if scores.size else 0.0
    try:
        if not math.isfinite(largest):
            raise not_finite_error("scores")
        check_score_sums(largest, int(np.max(group_sizes, initial=0)), np.float64)
    except ValueError as exc:
        if sys.version_info >= (3, 11):  # notes are Python 3.11's; 3.10 shows the message alone
            exc.add_note(DIVERGED)
        raise


class LossMetric:
    """The metric ``loss`` stands for, 1 − Δ(R*, R) averaged over the queries, at a booster's predictions.

    Higher is better; queries the loss cannot order (one relevance level, gains all equal) are left out;
    tied predictions are broken against the ground truth (:func:`rankopt.metrics.loss_metric`).  ``name`` is
    the loss's name with the parameters that differ from its defaults (``"ndcg_graded(k=3)"``), so that two
    metrics of one loss log apart.
    """

    def __init__(self, loss="ndcg_graded", *, relevant_at=1, **loss_params):
        self.loss = _resolve_loss(loss, loss_params)
        check_relevant_at(relevant_at)
        self.relevant_at = relevant_at
        self.name = metric_name(self.loss, relevant_at)

    def __repr__(self) -> str:
        return f"{type(self).__name__}(loss={self.loss!r})"

    def value(self, predictions, labels, group_sizes, weights=None) -> float:
        """The mean metric over the queries of contiguous ``group_sizes``, weighted by ``weights`` (one per query,
        or one per document equal within each query) when given."""
        from rankopt.metrics import loss_metric

        predictions = check_predictions(predictions)
        group_sizes = check_group_sizes_given(group_sizes)
        return loss_metric(
            labels,
            predictions,
            group=group_sizes,
            loss=self.loss,
            relevant_at=self.relevant_at,
            query_weights=query_weights(weights, group_sizes, predictions.size),
        )


def metric_name(loss, relevant_at=1) -> str:
    """The loss's name, with the parameters that differ from its class's defaults and a relevant_at ≠ 1 of a
    binary loss: ``"ndcg_graded(k=3)"``, ``"ap(relevant_at=2)"``."""
    try:
        defaults = type(loss)().get_params(deep=False)
    except TypeError:  # a loss whose parameters have no defaults: name them all
        defaults = {}
    changed = [
        f"{key}={value!r}"
        for key, value in loss.get_params(deep=False).items()
        if not _same(defaults.get(key, _NO_DEFAULT), value)
    ]
    if not reads_grades(loss) and relevant_at != 1:
        changed.append(f"relevant_at={relevant_at!r}")
    return f"{loss.name}({', '.join(changed)})" if changed else loss.name


_NO_DEFAULT = object()


def _same(default, value) -> bool:
    try:
        return bool(np.all(default == value)) and np.shape(default) == np.shape(value)
    except (TypeError, ValueError):
        return False


def _nothing_to_order(loss, relevant_at, n_queries) -> str:
    graded = reads_grades(loss)
    where = "" if graded else f" at relevant_at={relevant_at!r}"
    return (
        f"expected some query with two documents that loss {loss.name!r} orders apart{where}, got none of the "
        f"{n_queries} queries: every gradient would be 0 and the model constant"
        + ("" if graded else " (lower relevant_at to a grade the labels reach)")
    )


def _resolve_loss(loss, loss_params: dict):
    """A loss instance from a name (with its parameters) or an instance; no registry is kept, since boosters
    deep-copy their objective."""
    from rankopt.inference.batched import resolve_rank_loss
    from rankopt.plugins import default_registry

    return resolve_rank_loss(loss, default_registry(), **loss_params)


def _constant_hessian(hessian) -> float:
    if isinstance(hessian, str):
        raise ValueError(f"expected hessian to be a positive number or one of {HESSIANS}, got {hessian!r} instead")
    return check_positive_float(hessian, "hessian")
