"""The protocol between the engine and the models it drives.

A structural SVM problem (Joachims, Finley & Yu 2009, 1-slack form)::

    min_w,ξ  ½‖w‖² + C ξ
    s.t.     w·(Ψ(X, Y*) − Ψ(X, Ŷ)) ≥ Δ(Y*, Ŷ) − ξ   for all Ŷ,
             A w ≤ b                                  (optional)

is given to the engine by three things: the ground-truth joint feature
Ψ(X, Y*), an oracle returning the most violated output's Ψ(X, Ŷ) and Δ for
a given w, and optional linear constraints on w.
"""

from __future__ import annotations

import abc
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

__all__ = [
    "CACHE_BYTES",
    "CACHE_PARTS",
    "BlockCuts",
    "BlockPlaneCache",
    "BlockPlanes",
    "BlockProblem",
    "Constraint",
    "LinearConstraints",
    "LinearProblem",
    "OracleSegment",
    "PlaneCache",
    "RowInference",
    "ScoreSegment",
    "Segment",
    "StructuredProblem",
    "cache_parts",
]


#: Parts kept per block (query) by the plane cache, and the cache's memory at most (it shrinks the
#: parts per block to stay below; under 2 parts a block it is not kept).
CACHE_PARTS = 8
CACHE_BYTES = 2**28


def cache_parts(n_blocks: int, n_features: int) -> int:
    """How many parts per block the plane cache keeps for ``n_blocks`` blocks (under 2: no cache)."""
    return min(CACHE_PARTS, CACHE_BYTES // max(1, 8 * n_blocks * n_features))


class PlaneCache(abc.ABC):
    """The parts of past cuts by block, from which the engine assembles cuts without a pass over the data.

    Any choice of one stored part per block is a valid cut (:class:`BlockCuts`); :meth:`most_violated`
    makes the most violated choice at a w.  The engine opens one per solve with
    :meth:`BlockCuts.open_cache` and feeds it every cut the oracle returns.
    """

    @abc.abstractmethod
    def add(self, cut: BlockCuts) -> None:
        """Store the parts of one cut (the blocks of the :class:`BlockCuts` that opened this cache)."""

    @abc.abstractmethod
    def most_violated(self, w: np.ndarray) -> tuple[np.ndarray, float]:
        """The cut assembled from the part of each block most violated at w: (plane, loss)."""


class BlockCuts(abc.ABC):
    """A cut split by independent blocks (queries), for the engine's plane cache.

    A problem gives one only when its slack is a sum over blocks of per-block maxima
    (ξ(w) = Σ_b max_{Ŷ_b} Δ_b − w·g_b(Ŷ_b)): then any choice of one stored part per block is the plane
    of an output, a valid cut, and the engine assembles cuts from parts it has seen without a pass over
    the data (:func:`rankopt.engine.solve_cutting_plane`).  Where the parts are kept is the problem's
    choice: in memory (:class:`BlockPlanes`) or where its data lives.
    """

    @abc.abstractmethod
    def open_cache(self, n_features: int) -> PlaneCache | None:
        """A cache for this problem's cuts, empty; None when the cuts cannot be split or it would not fit."""


class BlockPlanes(BlockCuts):
    """A cut split by block in memory: row b of :meth:`planes` is block b's part of the plane
    Ψ(X, Y*) − Ψ(X, Ŷ), ``losses[b]`` its part of Δ.

    The planes cost a product with the data, so they are computed by ``compute`` when the engine first
    asks, and not when it keeps no cache; ``compute`` returns None when the data cannot be split so (the
    engine then keeps none).
    """

    def __init__(self, losses: np.ndarray, compute: Callable[[], np.ndarray | None]):
        self.losses = np.asarray(losses, dtype=np.float64)  # (n_blocks,)
        self._compute = compute
        self._planes: np.ndarray | None = None
        self._computed = False

    def planes(self) -> np.ndarray | None:
        """The parts, shape (n_blocks, n_features), computed once; None when the problem cannot give them."""
        if not self._computed:
            self._planes, self._computed = self._compute(), True
        return self._planes

    def open_cache(self, n_features):
        if self.planes() is None:
            return None
        return BlockPlaneCache.for_blocks(self.losses.size, n_features)


class BlockPlaneCache(PlaneCache):
    """The last parts of the cuts, per block: (n_blocks, parts, n_features) planes and their losses.

    The most violated choice at a w costs one product with the cache.  A new part takes the slot of the
    part least recently chosen or added.  A problem that keeps its parts where its data lives keeps one of
    these per piece of its data (its blocks there), so the choices are the same.
    """

    def __init__(self, n_blocks: int, n_features: int, parts: int):
        self.planes = np.zeros((n_blocks, parts, n_features))
        self.losses = np.full((n_blocks, parts), -np.inf)  # an empty slot is never chosen
        self.last_used = np.zeros((n_blocks, parts), dtype=np.int64)
        self.clock = 0
        self._blocks = np.arange(n_blocks)

    @classmethod
    def for_blocks(cls, n_blocks: int, n_features: int) -> BlockPlaneCache | None:
        parts = cache_parts(n_blocks, n_features)
        return cls(n_blocks, n_features, parts) if parts >= 2 else None

    def add(self, cut):
        self.add_parts(cut.planes(), cut.losses)

    def add_parts(self, planes: np.ndarray, losses: np.ndarray) -> None:
        """Store one cut's parts: its planes (n_blocks, n_features) and losses (n_blocks,)."""
        planes = np.asarray(planes, dtype=np.float64)
        losses = np.asarray(losses, dtype=np.float64)
        if planes.shape != self.planes[:, 0].shape or losses.shape != self.losses[:, 0].shape:
            raise RuntimeError(
                f"a problem broke its contract: its cuts came split into {self.losses.shape[0]} blocks, then into "
                f"planes of shape {planes.shape} and losses of shape {losses.shape}"
            )
        from rankopt.engine.certificate import check_finite  # its warnings import scikit-learn: not at plugin listing

        check_finite(planes, "a cut's parts by block", 0)
        self.clock += 1
        held = np.all(self.planes == planes[:, None, :], axis=2) & (self.losses == losses[:, None])
        new = np.flatnonzero(~held.any(axis=1))
        self.last_used[held] = self.clock
        slot = np.argmin(self.last_used[new], axis=1)
        self.planes[new, slot] = planes[new]
        self.losses[new, slot] = losses[new]
        self.last_used[new, slot] = self.clock

    def most_violated(self, w):
        chosen = np.argmax(self.losses - self.planes @ w, axis=1)
        self.clock += 1
        self.last_used[self._blocks, chosen] = self.clock
        return self.planes[self._blocks, chosen].sum(axis=0), float(self.losses[self._blocks, chosen].sum())


@dataclass(frozen=True)
class Constraint:
    """The most violated output: its joint feature Ψ(X, Ŷ) and loss Δ(Y*, Ŷ), and optionally its plane by block."""

    feature: np.ndarray
    loss: float
    blocks: BlockCuts | None = None


@dataclass(frozen=True)
class LinearConstraints:
    """A w ≤ b; A dense or sparse (kept sparse: bound constraints are one entry a row).

    The cutting plane starts from the smallest feasible w.
    """

    A: np.ndarray | sp.csr_matrix
    b: np.ndarray

    def __post_init__(self):
        if sp.issparse(self.A):
            A = sp.csr_matrix(self.A, dtype=np.float64)
            values = A.data
        else:
            A = np.atleast_2d(np.asarray(self.A, dtype=np.float64))
            values = A
        b = np.asarray(self.b, dtype=np.float64).ravel()
        if A.shape[0] != b.size:
            raise ValueError(f"expected one bound per row of A ({A.shape[0]}), got {b.size} instead")
        if not np.all(np.isfinite(values)) or not np.all(np.isfinite(b)):
            raise ValueError("expected finite linear constraints, got NaN or infinity instead")
        object.__setattr__(self, "A", A)
        object.__setattr__(self, "b", b)

    @property
    def n_constraints(self) -> int:
        return self.b.size

    @classmethod
    def nonpositive(cls, n_features: int, indices) -> LinearConstraints:
        """w[indices] ≤ 0 — HOB-SVM's w₂ ≤ 0."""
        indices = np.asarray(indices, dtype=np.intp)
        A = sp.csr_matrix((np.ones(indices.size), (np.arange(indices.size), indices)), shape=(indices.size, n_features))
        return cls(A, np.zeros(indices.size))


class StructuredProblem(abc.ABC):
    """What a model hands to the cutting-plane engine."""

    #: Dimension of w.
    n_features: int
    #: Linear constraints on w, or None.
    linear_constraints: LinearConstraints | None = None
    #: Multiply-adds of one oracle call, roughly (None: unknown).  The engine weighs work that saves
    #: oracle calls (cuts assembled from :class:`BlockPlanes`, each a working-set solve) against it.
    oracle_cost: float | None = None
    #: Which loss-augmented inference method the oracle runs and why, for the estimators' verbose
    #: output (None: nothing to say).
    inference_note: str | None = None

    @abc.abstractmethod
    def ground_truth_feature(self) -> np.ndarray:
        """Ψ(X, Y*), shape (n_features,)."""

    @abc.abstractmethod
    def most_violated(self, w: np.ndarray) -> Constraint:
        """argmax_Ŷ w·Ψ(X, Ŷ) + Δ(Y*, Ŷ), as its Ψ and Δ."""

    def segment(self, w0: np.ndarray, w1: np.ndarray) -> Segment:
        """The problem along the segment from ``w0`` to ``w1``, for the engine's line search.

        The default prices a point with one :meth:`most_violated` call (a
        pass over the data): correct for every problem, and the engine then
        searches no line (:attr:`Segment.cheap` is False).  A problem whose
        joint feature is linear in per-row coefficients overrides it; see
        :class:`LinearProblem`.
        """
        return OracleSegment(self, w0, w1)


class BlockProblem(StructuredProblem):
    """A problem whose slack is a sum over independent blocks (queries), for block-coordinate solvers.

    ξ(w) = Σ_b max_{Ŷ_b} Δ_b(Ŷ_b) − w·g_b(Ŷ_b), the parts scaled so that they sum to the problem's
    plane and loss (:class:`BlockPlanes`); :func:`rankopt.engine.bcfw.solve_bcfw` needs these and
    :meth:`StructuredProblem.most_violated` (to certify).
    """

    n_blocks: int

    @abc.abstractmethod
    def block_most_violated(self, block: int, w: np.ndarray) -> tuple[np.ndarray, float]:
        """Block ``block``'s part (g_b, Δ_b) of the most violated output at w, from that block's data only."""


class Segment(abc.ABC):
    """A problem along w(t) = (1 − t)·w0 + t·w1, t ∈ [0, 1].

    The optimized cutting plane (Franc & Sonnenburg, "Optimized cutting
    plane algorithm for large-scale risk minimization", JMLR 2009) searches
    the true objective ½‖w(t)‖² + C ξ(w(t)) on the segment from the best
    point to the working-set optimum, and places its next cut on it.
    """

    #: Whether :meth:`slack` costs no pass over the data (the engine searches the line only then).
    cheap: bool = False

    def __init__(self, w0: np.ndarray, w1: np.ndarray):
        self.w0 = np.asarray(w0, dtype=np.float64)
        self.w1 = np.asarray(w1, dtype=np.float64)

    def point(self, t: float) -> np.ndarray:
        return self.w0 + t * (self.w1 - self.w0) if t != 1.0 else self.w1.copy()

    @abc.abstractmethod
    def slack(self, t: float) -> tuple[float, float]:
        """ξ(w(t)), exact, and a subgradient of t ↦ ξ(w(t)) at t (the argmax's slope)."""

    @abc.abstractmethod
    def most_violated(self, t: float) -> Constraint:
        """The most violated output at w(t): the cut the engine adds."""

    def next(self, t: float, w: np.ndarray) -> Segment:
        """The segment from w(t) to ``w`` (a problem may carry over what it knows about w(t))."""
        raise NotImplementedError


class OracleSegment(Segment):
    """Any problem along a segment, each point priced by one oracle call."""

    cheap = False

    def __init__(self, problem: StructuredProblem, w0, w1):
        super().__init__(w0, w1)
        self.problem = problem

    def slack(self, t):
        w = self.point(t)
        constraint = self.problem.most_violated(w)
        plane = self.problem.ground_truth_feature() - np.asarray(constraint.feature, dtype=np.float64)
        xi = float(constraint.loss) - float(w @ plane)
        return max(0.0, xi), (-float((self.w1 - self.w0) @ plane) if xi > 0 else 0.0)

    def most_violated(self, t):
        return self.problem.most_violated(self.point(t))

    def next(self, t, w):
        return OracleSegment(self.problem, self.point(t), w)


@dataclass(frozen=True)
class RowInference:
    """Loss-augmented inference at given scores, per row: Ψ(X, Ŷ) = Xᵀ coef, its Δ and the maximum coef·s + Δ."""

    coef: np.ndarray
    loss: float
    value: float
    #: Each block's (query's) Δ, for :meth:`LinearProblem.block_planes`; None for one block.
    block_losses: np.ndarray | None = None


class LinearProblem(StructuredProblem):
    """A problem whose joint features are Xᵀc, c one coefficient per row, and whose inference reads X·w only.

    Every linear model is one (RankSVM's ranking and binary problems, single
    and multi-query).  It states three things — the scores X·w, the
    inference at given scores, and the combination Xᵀc — and gets
    :meth:`most_violated` and a cheap :meth:`segment`: along a segment the
    scores are (1 − t)·s0 + t·s1, so the slack anywhere on it is one
    inference call and no pass over the data.
    """

    #: The ground truth's coefficients c*, Ψ(X, Y*) = Xᵀ c*.
    ground_truth_coef: np.ndarray

    @abc.abstractmethod
    def scores(self, w: np.ndarray) -> np.ndarray:
        """X·w, one per row (float32 for float32 data)."""

    @abc.abstractmethod
    def infer(self, scores: np.ndarray) -> RowInference:
        """argmax_Ŷ c(Ŷ)·s + Δ(Ŷ) at the scores s."""

    @abc.abstractmethod
    def combine(self, coef: np.ndarray) -> np.ndarray:
        """Xᵀ coef, float64, shape (n_features,)."""

    def block_planes(self, inference: RowInference) -> BlockCuts | None:
        """The cut of ``inference`` split by block (see :class:`BlockPlanes`), or None (the default):
        a problem over many independent queries gives them to let the engine reuse each query's parts."""
        return None

    def constraint(self, inference: RowInference) -> Constraint:
        """The cut the engine adds for an inference result."""
        return Constraint(self.combine(inference.coef), inference.loss, self.block_planes(inference))

    def most_violated(self, w):
        return self.constraint(self.infer(self.scores(w)))

    def segment(self, w0, w1):
        return ScoreSegment(self, w0, w1)


class ScoreSegment(Segment):
    """A :class:`LinearProblem` along a segment: scores interpolated, one inference call per point."""

    cheap = True

    def __init__(self, problem: LinearProblem, w0, w1, s0: np.ndarray | None = None, at_w0: RowInference | None = None):
        super().__init__(w0, w1)
        self.problem = problem
        self.s0 = np.asarray(problem.scores(self.w0) if s0 is None else s0, dtype=np.float64)
        self.s1 = np.asarray(problem.scores(self.w1), dtype=np.float64)
        self.ds = self.s1 - self.s0
        # c*·s(t) = c*·s0 + t·c*·ds: the ground truth's score along the segment without a vector per t
        # (at the ends from the scores themselves, so a working-set optimum is priced to the bit).
        self.star_ends = (float(problem.ground_truth_coef @ self.s0), float(problem.ground_truth_coef @ self.s1))
        self.star_slope = float(problem.ground_truth_coef @ self.ds)
        # Inference by t: a cut reuses its point's line-search call, and the next segment its start's.
        self._inferred: dict[float, RowInference] = {} if at_w0 is None else {0.0: at_w0}

    def _infer(self, t: float) -> RowInference:
        if t not in self._inferred:
            self._inferred[t] = self.problem.infer(self.scores(t))
        return self._inferred[t]

    def scores(self, t: float) -> np.ndarray:
        return self.s0 + t * self.ds if t != 1.0 else self.s1

    def slack(self, t):
        result = self._infer(t)
        star = self.star_ends[int(t)] if t in (0.0, 1.0) else self.star_ends[0] + t * self.star_slope
        xi = result.value - star
        return max(0.0, xi), float(result.coef @ self.ds) - self.star_slope

    def most_violated(self, t):
        return self.problem.constraint(self._infer(t))

    def next(self, t, w):
        return ScoreSegment(self.problem, self.point(t), w, s0=self.scores(t), at_w0=self._inferred.get(t))
