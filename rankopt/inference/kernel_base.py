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

import rankopt.inference._batched as _batched
from rankopt._validation import check_relevant_at
from rankopt.losses.base import RankLoss

__all__ = [
    "BatchedRankingInference",
    "Kernel",
    "PreparedKernel",
    "ReusedOutput",
    "StructureKernel",
    "log_fallback",
    "longest_query",
    "say_once",
]

#: The batched API's log (what ``most_violated_rankings`` runs, and when it falls back to Python).
logger = logging.getLogger("rankopt.inference.batched")


def longest_query(offsets) -> int:
    """The batch's longest query in documents (0 for none), from its offsets: one compiled pass
    (``_batched.query_size_range``), without the array of sizes."""
    return int(_batched.query_size_range(np.ascontiguousarray(offsets, dtype=np.int64))[1])


@dataclass(frozen=True)
class BatchedRankingInference:
    """The most violated output of every query, concatenated.

    The fields are arrays of the batch's own type: NumPy arrays on the host, as below; tensors on a tensor
    device, whose padded batches give ``coef`` the batch's (B, L) shape.

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

    coef: Any
    losses: Any
    values: Any
    usable: Any


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
    """A kernel ready for one batch (loss, relevance, layout, method): infers for any scores.

    A subclass answers :attr:`relative_inside` (a class attribute will do) and implements ``__call__``."""

    @property
    @abc.abstractmethod
    def relative_inside(self) -> bool:
        """Who subtracts the ground truth when a call asks for the hinge's form (``relative_to_truth=True``).

        True: the call itself, whose ``coef`` are then Ψ(R̂) − Ψ(R*)'s coefficients and ``values``
        Δ + w·(Ψ(R̂) − Ψ(R*)).  False: the host, with :meth:`Kernel.ground_truth`, after a call that ignores
        the flag.  Declared by every device, so that the truth is subtracted exactly once."""

    @abc.abstractmethod
    def __call__(self, scores, n_threads: int, relative_to_truth: bool) -> BatchedRankingInference:
        """The batch's inference for checked ``scores`` on ``n_threads`` threads, its fields in the batch's own
        array type (NumPy arrays on the host, tensors on a tensor device); relative to the ground truth when
        ``relative_to_truth`` and :attr:`relative_inside` are both true."""


class Kernel(abc.ABC):
    """One declared loss structure's implementation on one device: what the structure table holds, and the one
    contract of every device.

    Subclasses set :attr:`structure` (the structure class they serve; None for binary rank losses that
    declare no structure), :attr:`device` (any name: the table registers devices as their kernels come,
    :func:`rankopt.inference.structure_table.register_kernel`) and :attr:`array_type`.  Every kernel prepares a
    batch and infers on it (:meth:`prepare`), and gives the ground truth's coefficients and the Δ of a given
    ranking; what only the host's kernels offer besides (the one-query reference, the brute-force check) has
    defaults here that say so.
    """

    structure: ClassVar[type | None]
    device: ClassVar[str] = "cpu"
    #: The arrays the device's batches are made of: "numpy" (on the host: the front doors copy tensors there
    #: once) or "torch" (tensors, on the scores' own device).
    array_type: ClassVar[str] = "numpy"
    #: Whether the structure is over grades (a graded loss's) or binary relevance.
    graded: ClassVar[bool] = False
    #: The integer dtypes of checked grades that :meth:`prepare` takes as they are (NumPy devices); grades of
    #: any other dtype come as int64.  A kernel that reads narrower ones saves a training loop's step most of
    #: the bytes it moves for the labels.
    label_dtypes: ClassVar[tuple[np.dtype, ...]] = (np.dtype(np.int64),)
    #: A short name for messages ("graded position", "top-k count", ...).
    label: ClassVar[str]

    @abc.abstractmethod
    def prepare(
        self, loss: RankLoss, structure: Any, relevance, layout, method: str, *, relevant_from: int, registry
    ) -> PreparedKernel:
        """The kernel ready for one batch: ``relevance`` the checked grades (int64, or one of
        :attr:`label_dtypes`), relevant from
        ``relevant_from`` for a binary loss; ``layout`` where the queries are (the flat layout's offsets for
        NumPy arrays, the padded layout's boolean mask for tensors); ``method`` the inference asked for."""

    @abc.abstractmethod
    def ground_truth(self, loss: RankLoss, structure: Any, relevance, layout):
        """Ψ_q(R*_q)'s coefficients of every document (0 for unusable queries), in the batch's array type."""

    @abc.abstractmethod
    def ranking_loss(self, loss: RankLoss, structure: Any, ordered_relevance: np.ndarray) -> float:
        """Δ(R*, R) of the ranking R that lists documents of these relevances from the top (one query with
        something to order; a binary kernel's relevance is 0/1), or a ValueError when the structure gives
        no Δ of a ranking: the metric the loss stands for is 1 − Δ (:func:`rankopt.metrics.loss_metric`)."""

    def resolve_method(self, loss: RankLoss, structure: Any, method: str, longest: int, registry) -> str:
        """The name of the method every query of a batch whose longest query has ``longest`` documents runs,
        or a ValueError naming the accepted ones: by default the device's one inference, "auto"."""
        if method != "auto":
            raise ValueError(f"expected inference 'auto' on the {self.device!r} kernels, got {method!r} instead")
        return method

    def query(self, loss: RankLoss, structure: Any, scores, relevance, method: str, registry):
        """One query's most violated output by the reference method: (coef, Δ, value), or None when the query
        has nothing to order.  The host's kernels give it; another device's say they do not."""
        raise NotImplementedError(f"the {self.device!r} kernels have no one-query reference method")

    def check(self, loss: RankLoss, structure: Any, *, n_instances: int, random_state: int, registry) -> None:
        """Compare this structure's inference on ``loss`` with brute force on small queries; AssertionError
        describing the first difference (:func:`rankopt.testing.check_loss`).  The host's kernels run it."""
        raise NotImplementedError(f"the {self.device!r} kernels have no brute-force check of their own")

    def estimated_cost(self, method: Any, n_pos: int, n_neg: int) -> float:
        """The inference's cost on one query, in units of one document's work (the compiled sort's
        n log n is the yardstick): a fit warns when it is far above that."""
        n = n_pos + n_neg
        return float(n) * float(np.log2(n + 1.0))

    def relevance(self, grades: np.ndarray, relevant_at) -> np.ndarray:
        """What this kernel reads of integer ``grades`` (int64): the grades themselves over grades (where
        ``relevant_at`` does not apply and is not read), else 0/1 relevance, 1 from ``relevant_at`` on (checked:
        a positive finite number)."""
        if self.graded:
            return grades
        return (grades >= check_relevant_at(relevant_at)).astype(np.int64)

    def single_query_method(self, loss: RankLoss, structure: Any, method: str, n_pos: int, n_neg: int, registry):
        """The inference a one-query problem of 0/1 relevance runs (:func:`rankopt.most_violated_ranking`, a fit
        without ``qid``): an object with a ``name`` and ``solve(loss, pos, neg) -> RankingInference``.

        For a binary structure, by default this kernel on a batch of that one query (:class:`KernelOnOneQuery`),
        so that a new structure's kernel serves every entry point; the built-in binary kernels answer with the
        registry's single-query methods (qs, greedy, dp, …) instead.  A graded loss's one-query API is its
        binary view (the pairwise Ψ of its ``value``), run by the registry's methods.
        """
        if self.graded:
            return registry.resolve_method(method, loss, n_pos, n_neg)
        resolved = self.resolve_method(loss, structure, method, n_pos + n_neg, registry)
        return KernelOnOneQuery(self, structure, resolved, registry)

    def describe_method(
        self, loss: RankLoss, structure: Any, method: str, resolved: str, n_pos, n_neg, registry, size=None
    ) -> str:
        """What a fit's log says of the method ``method`` resolved to (the name ``resolved``), for queries of
        ``n_pos`` and ``n_neg`` documents (arrays, one entry per query; ``size`` the (|P|, |N|) it was
        resolved for, when not the longest query's)."""
        return f"{resolved!r}, the kernel of its declared {type(structure).__name__}"


class StructureKernel(Kernel):
    """A structure's kernel on the host, over NumPy arrays: besides the contract of every device, it gives the
    one-query reference method and the brute-force check that :func:`rankopt.testing.check_loss` runs."""

    @abc.abstractmethod
    def resolve_method(self, loss: RankLoss, structure: Any, method: str, longest: int, registry) -> Any:
        """The method every query of a batch whose longest query has ``longest`` documents runs, or a
        ValueError naming the accepted ones."""

    @abc.abstractmethod
    def query(self, loss: RankLoss, structure: Any, scores, relevance, method: str, registry):
        """One query's most violated output by the reference method: (coef, Δ, value), or None when the query
        has nothing to order."""

    @abc.abstractmethod
    def check(self, loss: RankLoss, structure: Any, *, n_instances: int, random_state: int, registry) -> None:
        """Compare this structure's inference on ``loss`` with brute force on small queries; AssertionError
        describing the first difference (:func:`rankopt.testing.check_loss`)."""


class KernelOnOneQuery:
    """A structure kernel run on one query of 0/1 relevance, in the single-query methods' form.

    The binary rank losses' Ψ is pairwise, Ψ = Σ_{i∈P, j∈N} y_ij (ψ_i − ψ_j) / (|P||N|), so the kernel's
    coefficients give each document's interleaving rank: c_j = −(2a − |P|) / (|P||N|) for a negative with a
    positives above it, c_i = (|N| − 2b) / (|P||N|) for a positive with b negatives above it.
    """

    def __init__(self, kernel: Kernel, structure: Any, method: str, registry):
        self.kernel, self.structure, self.name, self.registry = kernel, structure, method, registry

    def __repr__(self) -> str:
        return f"{type(self.kernel).__name__}({self.name!r})"

    def estimated_cost(self, n_pos: int, n_neg: int) -> float:
        return self.kernel.estimated_cost(self.name, n_pos, n_neg)

    def solve(self, loss: RankLoss, pos: np.ndarray, neg: np.ndarray):
        from rankopt.inference.base import RankingInference

        n_pos, n_neg = pos.size, neg.size
        scores = np.concatenate((np.asarray(pos, dtype=np.float64), np.asarray(neg, dtype=np.float64)))
        relevance = np.r_[np.ones(n_pos, dtype=np.int64), np.zeros(n_neg, dtype=np.int64)]
        offsets = np.array([0, n_pos + n_neg], dtype=np.int64)
        prepared = self.kernel.prepare(
            loss, self.structure, relevance, offsets, self.name, relevant_from=1, registry=self.registry
        )
        result = prepared(scores, 1, False)
        coef = result.coef
        scale = float(n_pos * n_neg)
        neg_above = np.rint((n_pos - coef[n_pos:] * scale) / 2.0).astype(np.int64)
        pos_above = np.rint((n_neg - coef[:n_pos] * scale) / 2.0).astype(np.int64)
        return RankingInference(
            float(result.losses[0]),
            coef[:n_pos].copy(),
            coef[n_pos:].copy(),
            neg_above + 1,
            pos_above + 1,
            float(result.values[0]),
        )


#: The fallbacks already said in this process (:func:`say_once`'s keys).
_LOGGED_FALLBACKS: set = set()


def say_once(key: tuple, log: logging.Logger, message: str, *args) -> None:
    """Warn with ``message`` the first time ``key`` is seen in this process: the one "said once" of every
    fallback (a batch run one query at a time here, a tensor call run on the host in :mod:`rankopt.torch`)."""
    if key not in _LOGGED_FALLBACKS:
        _LOGGED_FALLBACKS.add(key)
        log.warning(message, *args)


def log_fallback(loss: RankLoss, method_name: str, reason: str) -> None:
    """Say once per loss type and method that a batch runs one Python call per query."""
    say_once(
        ("per query", type(loss), method_name),
        logger,
        "most_violated_rankings: loss %r with method %r runs one Python call per query (%s)",
        loss.name,
        method_name,
        reason,
    )
