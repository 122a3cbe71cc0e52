"""The structured hinge of any registered rank loss as a gradient-boosting objective (shared by
:mod:`rankopt.lightgbm` and :mod:`rankopt.xgboost`; neither library is imported here).

Boosted trees take a custom objective that returns, per document, the gradient and the hessian of the
training loss at the current predictions.  The structured hinge of one query, h(s) = max_R [Δ(R*, R) +
Σ_i (c_i(R) − c_i(R*)) s_i], has the exact subgradient c(R̂) − c(R*) from one batched inference call
(:func:`rankopt.structured_hinge`, ``reduction="sum"``); it is piecewise linear, so its hessian is 0 almost
everywhere and a Newton step needs a stand-in: a constant (the default, 1.0, the first-order boosting of
Friedman's gradient boosting machine).
"""

from __future__ import annotations

import math

import numpy as np

from rankopt._validation import check_positive_float

__all__ = ["HingeObjective"]


class HingeObjective:
    """``(gradient, hessian)`` of the summed structured hinge of ``loss`` at a booster's predictions.

    Parameters
    ----------
    loss : str or RankLoss, default "ndcg_graded"
        Any registered rank loss: built-in or plugin, binary (thresholded at ``relevant_at``) or graded.
    relevant_at : float, default 1
        The grade from which a document counts as relevant for a binary loss.
    hessian : float, default 1.0
        The constant hessian every document gets (the hinge's own is 0 almost everywhere).
    scale : float, default 1.0
        The hinge is taken at ``scale × predictions``, so its margin is 1/scale in the trees' units; the
        gradient is multiplied by ``scale`` accordingly.
    n_threads : int, optional
        Threads of the batched inference.
    **loss_params
        Parameters of a loss given by name.
    """

    def __init__(self, loss="ndcg_graded", *, relevant_at=1, hessian=1.0, scale=1.0, n_threads=None, **loss_params):
        from rankopt.plugins import default_registry

        registry = default_registry()
        if loss_params:
            if not isinstance(loss, str):
                raise ValueError(f"expected loss parameters only with a loss name, got {sorted(loss_params)}")
            loss = registry.get_loss(loss, **loss_params)
        self.loss = registry.resolve_loss(loss)
        self.relevant_at = relevant_at
        self.hessian = check_positive_float(hessian, "hessian")
        self.scale = check_positive_float(scale, "scale")
        self.n_threads = n_threads  # no registry kept: boosters deep-copy their objective

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
        return self.scale * grad, np.full(predictions.size, self.hessian)


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
