"""Validation metrics for monitoring a fit (``RankSVM(eval_metric=...)``) and plotting them.

The names follow LightGBM's ranking metrics: ``"map"`` (mean average
precision over queries, documents relevant from ``relevant_at``),
``"ndcg@k"`` (NDCG@k with gains 2^grade − 1, averaged over queries) and
``"p@k"`` (precision@k); a rank loss's name (``"ndcg_graded"``, ``"pairwise"``,
a plugin's) is the metric it stands for, 1 − Δ averaged over queries
(:func:`rankopt.metrics.loss_metric`, the boosting doors' metric); a callable
``metric(y_true, scores, qid)`` (``qid`` None for one query) returning a
float, higher better, names itself by its ``__name__``.
"""

from __future__ import annotations

import re
from collections.abc import Callable

import numpy as np

from rankopt.metrics import average_precision, loss_metric, mean_average_precision, ndcg_at_k, precision_at_k

__all__ = ["KNOWN_METRICS", "eval_metrics", "plot_metric"]

#: The metric names ``eval_metric`` takes, besides callables.
KNOWN_METRICS = ("map", "ndcg@k", "p@k")

Metric = Callable[[np.ndarray, np.ndarray, "np.ndarray | None"], float]


def _metric(name: str, relevant_at) -> Metric:
    if name == "map":

        def mean_ap(y, scores, qid):
            if qid is None:
                return average_precision(y, scores)
            return mean_average_precision(y, scores, qid, relevant_at=relevant_at)

        return mean_ap
    match = re.fullmatch(r"(ndcg|p)@(\d+)", name)
    if match is None or int(match.group(2)) < 1:
        return _loss_metric(name, relevant_at)
    k = int(match.group(2))
    if match.group(1) == "ndcg":
        return lambda y, scores, qid: ndcg_at_k(y, scores, qid, k=k)
    return lambda y, scores, qid: precision_at_k(y, scores, qid, k=k, relevant_at=1 if qid is None else relevant_at)


def _loss_metric(name: str, relevant_at) -> Metric:
    """The metric a rank loss's name stands for, 1 − Δ (:func:`rankopt.metrics.loss_metric`): a loss door's
    spelling at a metric door."""
    from rankopt.inference.batched import rank_loss_names
    from rankopt.plugins import default_registry

    rank_losses = rank_loss_names(default_registry())
    if name not in rank_losses:
        raise ValueError(
            f"expected eval_metric to be one of {list(KNOWN_METRICS)} (k a positive integer, e.g. 'ndcg@10'), a "
            f"rank loss's name (the metric it stands for: one of {rank_losses}) or a callable "
            f"metric(y_true, scores, qid), got {name!r} instead"
        )
    return lambda y, scores, qid: loss_metric(y, scores, qid, loss=name, relevant_at=relevant_at)


def eval_metrics(spec, relevant_at=1) -> list[tuple[str, Metric]]:
    """``(name, metric(y, scores, qid))`` for ``spec``: None ("map"), a name, a callable, or a list of them."""
    if spec is None:
        spec = ["map"]
    elif isinstance(spec, str) or callable(spec):
        spec = [spec]
    elif not isinstance(spec, (list, tuple)) or not spec:
        raise ValueError(
            f"expected eval_metric to be a metric name, a callable or a non-empty list of them, got {spec!r} instead"
        )
    metrics: list[tuple[str, Metric]] = []
    for item in spec:
        if isinstance(item, str):
            metrics.append((item, _metric(item, relevant_at)))
        elif callable(item):
            metrics.append((getattr(item, "__name__", "custom"), item))
        else:
            raise ValueError(
                f"expected each eval_metric to be one of {list(KNOWN_METRICS)} or a callable, got {item!r} instead"
            )
    names = [name for name, _ in metrics]
    if len(set(names)) != len(names):
        raise ValueError(f"expected distinct eval_metric names, got {names} instead")
    return metrics


def plot_metric(model, metric: str | None = None, *, ax=None, title: str | None = "Metric during training"):
    """Plot ``model.evals_result_``: one metric per validation set against the iteration.

    As ``lightgbm.plot_metric``.  ``metric`` defaults to the first one
    recorded; ``ax`` to a new figure's axes.  Needs matplotlib (the ``demo``
    extra).  Returns the axes.
    """
    from rankopt._optional import require

    results = getattr(model, "evals_result_", None)
    if not results:
        raise ValueError(
            "expected a model fitted with eval_set (evals_result_ holds the validation metrics), got one without"
        )
    available = list(next(iter(results.values())))
    if metric is None:
        metric = available[0]
    if metric not in available:
        raise ValueError(f"expected metric to be one of {available}, got {metric!r} instead")
    pyplot = require("matplotlib.pyplot", purpose="plotting validation metrics", extra="demo")
    if ax is None:
        _, ax = pyplot.subplots()
    for set_name, metrics in results.items():
        values = metrics[metric]
        ax.plot(np.arange(1, len(values) + 1), values, label=set_name)
    best = getattr(model, "best_iteration_", None)
    if best is not None:
        ax.axvline(best, color="grey", linestyle=":", label=f"best iteration ({best})")
    ax.set_xlabel("cutting-plane iteration")
    ax.set_ylabel(metric)
    if title is not None:
        ax.set_title(title)
    ax.legend()
    return ax
