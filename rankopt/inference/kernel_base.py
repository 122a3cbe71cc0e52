"""What every kernel of the structure table shares: its result type, its base class, its fallback log.

A loss declares the structure of its Δ and Ψ (:meth:`rankopt.losses.RankLoss.structure`); the table
(:mod:`rankopt.inference.structure_table`) maps each structure class, and the binary rank losses that
declare none, to one :class:`StructureKernel` per device.  A kernel provides everything rankopt runs
for its structure: the batched inference over queries, the one-query reference, the ground truth's
coefficients, the brute-force check :func:`rankopt.testing.check_loss` runs, and the cost estimate.
"""

from __future__ import annotations

import abc
import logging
import sys
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from rankopt.losses.base import RankLoss

__all__ = ["BatchedRankingInference", "Kernel", "PreparedKernel", "ReusedOutput", "StructureKernel", "log_fallback"]

#: The batched API's log (what ``most_violated_rankings`` runs, and when it falls back to Python).
logger = logging.getLogger("rankopt.inference.batched")


@dataclass(frozen=True)
class BatchedRankingInference:
    """The most violated output of every query, concatenated.

    Attributes
    ----------
    coef : ndarray of float64, shape (n_docs,)
        In input order: Ψ_q(R̂_q) = Σ_{i∈q} coef[i] ψ(x_i), with the
        single-query normalisation; 0 for the documents of unusable queries.
    losses : ndarray of float64, shape (n_queries,)
        Δ_q(R*_q, R̂_q); 0 for an unusable query.
    values : ndarray of float64, shape (n_queries,)
        Σ_{i∈q} coef[i] s_i + Δ_q, the maximised objective; 0 when unusable.
    usable : ndarray of bool, shape (n_queries,)
        Whether the query has something to order.
    """

    coef: np.ndarray
    losses: np.ndarray
    values: np.ndarray
    usable: np.ndarray


class ReusedOutput:
    """The coefficient array a prepared batch hands out at every call, reused once nobody holds it any more.

    A training loop infers on one batch again and again; a fresh array at each call costs the operating
    system a page fault per 4 KiB as the kernel first writes it.  The array is handed out again only when
    this holder has the last reference to it (CPython's reference count): a caller that keeps a result, or
    any view of it, gets a new one next time.
    """

    def __init__(self):
        self._array: np.ndarray | None = None

    def __reduce__(self):  # copies and pickles start empty: the array is scratch, not state
        return (ReusedOutput, ())

    def empty(self, size: int, dtype=np.float64) -> np.ndarray:
        """An array of ``size`` entries, uninitialised (the caller writes every one)."""
        held = self._array
        # Three references when it is free: this holder, ``held``, and getrefcount's own argument.
        if held is not None and held.size == size and held.dtype == dtype and sys.getrefcount(held) <= 3:
            return held
        self._array = np.empty(size, dtype=dtype)
        return self._array


class PreparedKernel(abc.ABC):
    """A kernel ready for one batch (loss, relevance, offsets, method): infers for any scores."""

    #: Whether the results already subtract the ground truth (the hinge's form), when asked to.
    relative_inside: bool = False
    #: The relevance the batch's results refer to (int64; 0/1 where a binary loss's grades were thresholded).
    relevance: np.ndarray

    @abc.abstractmethod
    def __call__(self, scores: np.ndarray, n_threads: int, relative_to_truth: bool) -> BatchedRankingInference:
        """The batch's inference for checked ``scores`` on ``n_threads`` threads."""


class Kernel(abc.ABC):
    """One declared loss structure's implementation on one device: what the structure table holds.

    Subclasses set :attr:`structure` (the structure class they serve; None for binary rank losses that
    declare no structure) and :attr:`device`.  A kernel is registered once
    (:func:`rankopt.inference.structure_table.register_kernel`); a second implementation of the same
    structure — the tensor-op one that runs where the scores are
    (:class:`rankopt.inference.tensor_kernels.TensorKernel`) — registers under another device.
    """

    structure: ClassVar[type | None]
    device: ClassVar[str] = "cpu"
    #: Whether the structure is over grades (a graded loss's) or binary relevance.
    graded: ClassVar[bool] = False
    #: A short name for messages ("graded position", "top-k count", ...).
    label: ClassVar[str]


class StructureKernel(Kernel):
    """Everything rankopt runs for one declared loss structure on the CPU, over NumPy arrays: the batched
    inference over queries, the one-query reference, the ground truth, the brute-force check, the cost."""

    @abc.abstractmethod
    def resolve_method(self, loss: RankLoss, structure: Any, method: str, longest: int, registry) -> Any:
        """The method every query of a batch whose longest query has ``longest`` documents runs, or a
        ValueError naming the accepted ones."""

    @abc.abstractmethod
    def prepare(
        self, loss: RankLoss, structure: Any, relevance, offsets, method: str, *, relevant_from: int, registry
    ) -> PreparedKernel:
        """The kernel ready for one batch; ``relevance`` is checked (int64), relevant from ``relevant_from``."""

    @abc.abstractmethod
    def query(self, loss: RankLoss, structure: Any, scores, relevance, method: str, registry):
        """One query's most violated output by the reference method: (coef, Δ, value), or None when the query
        has nothing to order."""

    @abc.abstractmethod
    def ground_truth(self, loss: RankLoss, structure: Any, relevance, offsets) -> np.ndarray:
        """Ψ_q(R*_q)'s coefficients of every document (0 for unusable queries)."""

    @abc.abstractmethod
    def check(self, loss: RankLoss, structure: Any, *, n_instances: int, random_state: int, registry) -> None:
        """Compare this structure's inference on ``loss`` with brute force on small queries; AssertionError
        describing the first difference (:func:`rankopt.testing.check_loss`)."""

    @abc.abstractmethod
    def ranking_loss(self, loss: RankLoss, structure: Any, ordered_relevance: np.ndarray) -> float:
        """Δ(R*, R) of the ranking R that lists documents of these relevances from the top (one query with
        something to order; a binary kernel's relevance is 0/1), or a ValueError when the structure gives
        no Δ of a ranking: the metric the loss stands for is 1 − Δ (:func:`rankopt.metrics.loss_metric`)."""

    def estimated_cost(self, method: Any, n_pos: int, n_neg: int) -> float:
        """The inference's cost on one query, in units of one document's work (the compiled sort's
        n log n is the yardstick): a fit warns when it is far above that."""
        n = n_pos + n_neg
        return float(n) * float(np.log2(n + 1.0))


#: (loss type, method name) pairs already logged as running per query in Python.
_LOGGED_FALLBACKS: set = set()


def log_fallback(loss: RankLoss, method_name: str, reason: str) -> None:
    """Say once per loss type and method that a batch runs one Python call per query."""
    key = (type(loss), method_name)
    if key not in _LOGGED_FALLBACKS:
        _LOGGED_FALLBACKS.add(key)
        logger.warning(
            "most_violated_rankings: loss %r with method %r runs one Python call per query (%s)",
            loss.name,
            method_name,
            reason,
        )
