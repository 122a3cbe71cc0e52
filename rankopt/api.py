"""The public calls that take plugin names: resolved here, on top, then handed down as objects.

The inference and loss layers never import the plugin registry; they receive
one (a :class:`rankopt.inference.base.PluginLookup`).  The functions below
are the same calls with the registry optional — the default one
(:func:`rankopt.plugins.default_registry`) when none is given.
``rankopt.most_violated_ranking`` and ``rankopt.check_qs_suitable`` are these.
"""

from __future__ import annotations

import numpy as np

from rankopt._validation import renamed_method
from rankopt.inference import base, batched, qs_check
from rankopt.inference.base import PluginLookup, RankingInference
from rankopt.inference.batched import BatchedRankingInference
from rankopt.inference.structure_table import kernel_for_loss, reads_grades
from rankopt.losses.base import RankLoss
from rankopt.plugins import default_registry

__all__ = [
    "check_qs_suitable",
    "ground_truth_coefficients",
    "most_violated_ranking",
    "most_violated_rankings",
    "most_violated_rankings_per_query",
]


def _lookup(registry: PluginLookup | None) -> PluginLookup:
    return default_registry() if registry is None else registry


def most_violated_ranking(
    loss,
    pos_scores,
    neg_scores,
    inference: str = "auto",
    *,
    registry: PluginLookup | None = None,
    method: str | None = None,
) -> RankingInference:
    """Solve loss-augmented inference: argmax_R w·Ψ(X, R) + Δ(R*, R).

    Parameters
    ----------
    loss : str or RankLoss
        A registered rank-loss name (``"ap"``, ``"ndcg"``, ``"auc"``, a
        plugin's) or a :class:`~rankopt.losses.RankLoss` instance.
    pos_scores, neg_scores : array-like of shape (|P|,) and (|N|,)
        Scores w·ψ(x) of the positive and the negative samples.
    inference : str, default "auto"
        A registered inference method (``"greedy"``, …) or ``"auto"``, the
        fastest method that is exact for ``loss``.
    registry : PluginRegistry, optional
        Where names are looked up; the default registry otherwise.
    method : str, optional
        Deprecated: ``inference=``.

    Returns
    -------
    RankingInference
    """
    inference = renamed_method(inference, method, "most_violated_ranking")
    registry = _lookup(registry)

    def resolve(method, rank_loss, n_pos, n_neg):
        """The method of the loss's structure kernel: a new binary structure's kernel serves this call too.  A
        graded loss's one-query view is binary, run by the registry's methods, whether or not it declares a
        structure over grades."""
        if reads_grades(rank_loss):
            return registry.resolve_method(method, rank_loss, n_pos, n_neg)
        kernel, structure = kernel_for_loss(rank_loss)
        return kernel.single_query_method(rank_loss, structure, method, n_pos, n_neg, registry)

    return base.most_violated_ranking(loss, pos_scores, neg_scores, inference, registry=registry, resolve=resolve)


def most_violated_rankings(
    loss,
    scores,
    relevance,
    offsets,
    inference: str = "auto",
    *,
    n_threads: int | None = None,
    relative_to_truth: bool = False,
    relevant_at: float | None = None,
    registry: PluginLookup | None = None,
    method: str | None = None,
) -> BatchedRankingInference:
    """Loss-augmented inference for every query in one call.

    :func:`rankopt.inference.batched.most_violated_rankings` (which documents
    the parameters), with ``registry`` the default registry when None; ``method=`` is the deprecated name of
    ``inference=``.
    """
    return batched.most_violated_rankings(
        loss,
        scores,
        relevance,
        offsets,
        renamed_method(inference, method, "most_violated_rankings"),
        n_threads=n_threads,
        relative_to_truth=relative_to_truth,
        relevant_at=relevant_at,
        registry=_lookup(registry),
    )


def most_violated_rankings_per_query(
    loss,
    scores,
    relevance,
    offsets,
    inference: str = "auto",
    *,
    registry: PluginLookup | None = None,
    method: str | None = None,
) -> BatchedRankingInference:
    """:func:`most_violated_rankings` by one single-query call per query, in Python (the reference)."""
    inference = renamed_method(inference, method, "most_violated_rankings_per_query")
    return batched.most_violated_rankings_per_query(
        loss, scores, relevance, offsets, inference, registry=_lookup(registry)
    )


def ground_truth_coefficients(loss, relevance, offsets, *, registry: PluginLookup | None = None) -> np.ndarray:
    """Coefficients of Ψ_q(R*_q) for every document, in input order (see the batched module)."""
    return batched.ground_truth_coefficients(loss, relevance, offsets, registry=_lookup(registry))


def check_qs_suitable(
    loss: str | RankLoss,
    n_pos_grid=qs_check.DEFAULT_N_POS_GRID,
    n_neg_grid=qs_check.DEFAULT_N_NEG_GRID,
    random_state=None,
    *,
    registry: PluginLookup | None = None,
) -> qs_check.QSReport:
    """Check conditions C1–C4 of Mohapatra et al. (2018) §4.1 numerically.

    :func:`rankopt.inference.qs_check.check_qs_suitable` (which documents the
    conditions and parameters), taking a registered rank-loss name as well
    as a :class:`~rankopt.losses.RankLoss`.
    """
    resolved = _lookup(registry).resolve_loss(loss) if isinstance(loss, str) else loss
    return qs_check.check_qs_suitable(resolved, n_pos_grid, n_neg_grid, random_state)
