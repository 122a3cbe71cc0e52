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

import numpy as np

from rankopt._validation import check_positive_float

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
        self.relevant_at = relevant_at
        self.hessian = hessian if isinstance(hessian, str) and hessian in HESSIANS else _constant_hessian(hessian)
        self.scale = check_positive_float(scale, "scale")
        self.n_threads = n_threads

    def __repr__(self) -> str:
        return f"HingeObjective(loss={self.loss!r}, hessian={self.hessian!r}, scale={self.scale!r})"

    def gradients(self, predictions, labels, group_sizes) -> tuple[np.ndarray, np.ndarray]:
        """(grad, hess) at ``predictions`` for documents grouped in contiguous queries of ``group_sizes``."""
        from rankopt.hinge import structured_hinge

        predictions = np.asarray(predictions, dtype=np.float64)
        if predictions.ndim != 1:
            raise ValueError(
                f"expected one prediction per document (a ranking objective), got predictions of shape "
                f"{predictions.shape} instead: a multiclass or multi-output booster cannot take a ranking loss"
            )
        if predictions.size and not math.isfinite(float(np.max(np.abs(predictions)))):
            raise ValueError(
                "expected finite predictions, got NaN or infinity instead: the booster diverged (lower the "
                "learning rate or raise the hessian)"
            )
        group_sizes = _check_groups(group_sizes)
        _, grad = structured_hinge(
            self.scale * predictions,
            labels,
            group=group_sizes,
            loss=self.loss,
            relevant_at=self.relevant_at,
            reduction="sum",
            n_threads=self.n_threads,
        )
        grad = self.scale * grad
        if self.hessian == "gradient":
            return grad, np.maximum(np.abs(grad), HESSIAN_FLOOR)
        return grad, np.full(predictions.size, self.hessian)


class LossMetric:
    """The metric ``loss`` stands for, 1 − Δ(R*, R) averaged over the queries, at a booster's predictions.

    Higher is better; queries with one relevance level are left out; tied predictions are broken against
    the ground truth (:func:`rankopt.metrics.loss_metric`).  ``name`` is the loss's name.
    """

    def __init__(self, loss="ndcg_graded", *, relevant_at=1, **loss_params):
        self.loss = _resolve_loss(loss, loss_params)
        self.relevant_at = relevant_at
        self.name = self.loss.name

    def __repr__(self) -> str:
        return f"{type(self).__name__}(loss={self.loss!r})"

    def value(self, predictions, labels, group_sizes) -> float:
        """The mean metric over the queries of contiguous ``group_sizes``."""
        from rankopt.metrics import loss_metric

        return loss_metric(
            labels, predictions, group=_check_groups(group_sizes), loss=self.loss, relevant_at=self.relevant_at
        )


def _resolve_loss(loss, loss_params: dict):
    """A loss instance from a name (with its parameters) or an instance; no registry is kept, since boosters
    deep-copy their objective."""
    from rankopt.plugins import default_registry

    registry = default_registry()
    if loss_params:
        if not isinstance(loss, str):
            raise ValueError(f"expected loss parameters only with a loss name, got {sorted(loss_params)}")
        loss = registry.get_loss(loss, **loss_params)
    return registry.resolve_loss(loss)


def _constant_hessian(hessian) -> float:
    if isinstance(hessian, str):
        raise ValueError(f"expected hessian to be a positive number or one of {HESSIANS}, got {hessian!r} instead")
    return check_positive_float(hessian, "hessian")


def _check_groups(group_sizes):
    """The queries' group sizes, refused when absent; their sizes against the predictions are checked where
    every ``group=`` is (:func:`rankopt._validation.check_group_sizes`, inside the hinge)."""
    if group_sizes is None:
        raise ValueError(
            "expected the queries' group sizes (a ranking dataset: LGBMRanker's group=, a Dataset's group, a "
            "DMatrix's group or qid), got none: a regression or classification objective slot cannot take a "
            "ranking loss"
        )
    return group_sizes
