"""1-slack cutting-plane training (Joachims, Finley & Yu 2009, Algorithm 4), optimized by a line search.

Each iteration asks the problem for the most violated output at a point,
adds its plane to the working set and re-solves the working-set QP.  The
plain method asks at the working-set optimum w_c.  Where the problem prices
points on a segment cheaply (:class:`~rankopt.engine.problem.LinearProblem`:
the scores along a segment are interpolated, so the slack anywhere on it is
one inference call and no pass over the data), the engine runs Franc &
Sonnenburg's optimized cutting plane (OCA, "Optimized cutting plane
algorithm for large-scale risk minimization", JMLR 2009): it keeps the best
point w_b found so far, searches the true objective on the segment from w_b
to w_c for a better one, and cuts near the new best point, at
(1 − μ)·w_b + μ·w_c.  The planes are the same kind of cut at other points,
so the working set and its dual bound are those of the plain method.

Stopping is certified, not taken on the solver's word.  Every oracle call
gives the exact primal objective ½‖w‖² + C ξ(w) at its w, an upper bound on
the optimum; every working-set solve gives the objective of a feasible dual
point, a lower bound (the working set is a relaxation).  The fit stops as
converged when the best primal minus the best dual is at most C·tol, and
returns the w of that best primal.  With an exact QP this is Joachims et
al.'s test (the violation at a working-set optimum is that gap over C); with
an inexact one — a solver that stalls, returns its previous point or an
approximate one — the gap stays open and the fit does not claim what it has
not shown.  A QP answer whose own working-set gap is not small is a QP
failure: the next solver is tried (:meth:`WorkingSetQP.solve`), and when all
fail the fit stops with a :class:`ConvergenceWarning` that gives the gap.
"""

from __future__ import annotations

import logging
import time
import warnings
from dataclasses import dataclass, field

import numpy as np

from rankopt.engine.problem import LinearConstraints, Segment, StructuredProblem
from rankopt.engine.qp import InfeasibleConstraintsError, QPSolution, QPSolveError, WorkingSetQP
from rankopt.exceptions import ConvergenceWarning

logger = logging.getLogger(__name__)


#: Fraction of the stopping gap C·tol within which a working-set solve must
#: verify its own optimality; the rest is left for the cutting planes.
QP_GAP_FRACTION = 0.1
#: OCA's cut after a line search: the fraction of the way from the best point to the working-set
#: optimum (Franc and Sonnenburg's μ, 0.1 in their paper; why 0.05: docs/engine-notes.md).
CUT_TOWARDS_OPTIMUM = 0.05
#: The in-out cut where a point costs an oracle call (no line search): the fraction of the way from
#: the best point to the working-set optimum (docs/engine-notes.md).
IN_OUT_CUT = 0.1
#: Line-search evaluations (one inference call each, no pass over the data) per iteration at most.
LINE_SEARCH_EVALUATIONS = 6
#: Line-search steps are multiples of 2⁻²⁰: the same data held another way (Dask chunks, another
#: summation order) gives scores that differ in their last bits, and a step computed from them
#: would too, leading two such fits apart; rounded to this grid they take the same steps.
LINE_SEARCH_GRID = 2.0**-20
#: Parts kept per block (query) by the plane cache, and the cache's memory at most (it shrinks the
#: parts per block to stay below; under 2 parts a block it is not kept).
CACHE_PARTS = 8
CACHE_BYTES = 2**28
#: Cuts assembled from cached parts after each working-set solve, at most, and the violation
#: (in units of tol, beyond the working set's slack) a cut must reach to be added.
CACHE_ROUNDS = 3
CACHE_VIOLATION = 0.1
#: The stall guard: a solve whose certified gap has not fallen by more than float64 rounding
#: of the objective (STALL_ROUNDING machine epsilons of its magnitude) in STALL_ITERATIONS
#: iterations stops (``stop_reason="stalled"``): a tol below what float64 can certify would
#: otherwise add planes until max_iter, each QP larger than the last.
STALL_ITERATIONS = 50
STALL_ROUNDING = 1024.0
#: Features are rescaled inside the engine (by a power of two) only beyond
#: 2^±60, where the Gram matrix would leave float64's comfortable range.
_RESCALE_BEYOND = 2.0**60
#: C·scale² beyond which a working-set QP that no solver can verify is blamed on
#: the scale (a ValueError naming it) rather than reported as a convergence failure
#: (below where random planes stop being solvable: docs/engine-notes.md).
_SOLVABLE_C_SCALE2 = 1e12


@dataclass(frozen=True)
class IterationRecord:
    """One cutting-plane iteration."""

    iteration: int
    primal_objective: float  # ½‖w‖² + C ξ(w) at the iterate: the cut point, or the best point with the line search
    dual_objective: float  # best working-set dual so far: a lower bound on the optimum
    duality_gap: float  # best primal so far − dual_objective: what the stopping test reads
    violation: float  # ξ(w) − working-set slack at w
    n_planes: int
    inference_seconds: float
    qp_gap: float = 0.0  # the working-set solve's own gap (primal − dual of the QP that gave w)
    qp_solver: str = ""  # which form solved it ("dual", "bounded dual", "primal"; "" for a start point)


@dataclass(frozen=True)
class WorkingSet:
    """Cutting planes w·g_k ≥ Δ_k − ξ of one problem, in its units: rows ``planes`` (K, n_features), ``losses`` (K,).

    A plane bounds the slack ξ(w) from below whatever C, so the planes of a
    solve at one C are a valid start at another C for the *same* problem (the
    same data, loss and labels): a C path then begins from a working-set
    optimum that is already close, and its dual bound holds from the first
    iteration.  Planes of another problem would give a false dual bound.
    """

    planes: np.ndarray
    losses: np.ndarray


@dataclass
class CuttingPlaneResult:
    """The solution and how it was reached.

    ``w`` is the iterate with the smallest primal objective, and
    ``duality_gap`` bounds how far that objective is from the optimum:
    ``converged`` is True exactly when it is at most C·tol.
    """

    w: np.ndarray
    n_iter: int
    converged: bool
    history: list[IterationRecord] = field(default_factory=list)
    #: Why the solve ended: "converged", "max_iter", "callback", "qp_failure" or "stalled"
    #: (the gap stopped falling at float64's rounding of the objective).
    stop_reason: str = "converged"
    #: ½‖w‖² + C ξ(w) at the returned w.
    primal_objective: float = float("nan")
    #: primal_objective − the best dual objective: a certified bound on suboptimality.
    duality_gap: float = float("nan")
    #: The working set at the end (idle planes pruned): the ``planes=`` of a solve at another C.
    working_set: WorkingSet | None = None

    @property
    def inference_seconds(self) -> float:
        return float(sum(r.inference_seconds for r in self.history))


def solve_cutting_plane(
    problem: StructuredProblem,
    C: float,
    *,
    tol: float = 1e-3,
    max_iter: int = 1000,
    w0: np.ndarray | None = None,
    warn: bool = True,
    callback=None,
    line_search: bool = True,
    planes: WorkingSet | None = None,
) -> CuttingPlaneResult:
    """Solve ``problem`` to a duality gap of ``C·tol`` with at most ``max_iter`` oracle calls.

    Parameters
    ----------
    problem : StructuredProblem
    C : float
        Weight of the slack, > 0.
    tol : float
        Stop when the best primal objective is within ``C·tol`` of the best
        dual objective (with an exact QP: when no constraint is violated by
        more than ``tol`` beyond the working set's slack, Joachims et al.'s ε).
    max_iter : int
        Oracle calls allowed; a :class:`ConvergenceWarning` is issued when
        they run out (unless ``warn=False``).
    w0 : ndarray, optional
        Where to start (must satisfy the linear constraints); otherwise the
        smallest w that satisfies them (w = 0 when there are none).  Its
        most violated output seeds the working set; it is returned if no
        later iterate has a smaller primal objective.
    warn : bool
        Issue a :class:`ConvergenceWarning` when the solve ends uncertified
        (max_iter, or a working-set QP no solver could verify).
    callback : callable(IterationRecord, ndarray) -> bool or None, optional
        Called after every iteration with its record and the iterate w the
        record describes (read-only; copy it to keep it), e.g. to drive a
        progress bar or to score w on validation data.  Returning True
        stops the solve there (``stop_reason="callback"``, no warning),
        unless that iterate already certified convergence.
    line_search : bool or None
        Search the segment from the best point to each working-set optimum
        and cut near the best point (OCA), where the problem prices a segment
        without passes over the data (:attr:`Segment.cheap
        <rankopt.engine.problem.Segment.cheap>`).  False: the plain cutting
        plane, each cut at the working-set optimum.  Where a point costs an
        oracle call (a pass over the data or a graph cut), no line is
        searched but the cut is still placed near the best point, at
        (1 − μ)·w_b + μ·w_c: the best point then moves by the cuts' own exact
        evaluations (the in-out stabilisation of Ben-Ameur & Neto, 2007).
    planes : WorkingSet, optional
        Planes of an earlier solve of the same problem (its
        :attr:`CuttingPlaneResult.working_set`, at any C) to start the
        working set with.

    Raises
    ------
    ValueError
        When the oracle returns a non-finite plane or loss, or the problem's
        scale leaves the floating-point range (the message names the scale).
    """
    C = float(C)
    psi_star = np.asarray(problem.ground_truth_feature(), dtype=np.float64)
    if psi_star.shape != (problem.n_features,):
        raise RuntimeError(
            f"{type(problem).__name__} broke its contract: Ψ(X, Y*) has shape {psi_star.shape}, "
            f"expected ({problem.n_features},)"
        )
    _check_finite(psi_star, "Ψ(X, Y*)", 0)
    target_gap = C * tol
    qp_gap_tol = QP_GAP_FRACTION * target_gap
    qp = _ScaledQP(C, problem.n_features, problem.linear_constraints, psi_star, qp_gap_tol)
    if planes is not None:
        _check_working_set(planes, problem.n_features)
        for plane, loss in zip(planes.planes, planes.losses, strict=True):
            qp.add(plane, float(loss))
    if w0 is None:
        solution = qp.solve(qp_gap_tol)  # the smallest w meeting the linear constraints (0 without them)
        w, dual, qp_gap, qp_solver = solution.w, solution.dual, solution.gap, solution.solver
    else:
        # ½‖w‖² + C ξ ≥ 0: zero is a lower bound until the first working-set solve.
        w, dual, qp_gap, qp_solver = np.asarray(w0, dtype=np.float64).copy(), 0.0, 0.0, ""
    best_primal, best_w, best_dual = np.inf, w, dual
    history: list[IterationRecord] = []
    stop_reason = "max_iter"
    qp_failed = False
    stall = StallGuard()
    #: The problem from the best point (at t = 0) to the working-set optimum (t = 1); None before the first QP.
    segment: Segment | None = None
    #: Where the best point lies on ``segment``, and whether its primal came from an oracle call at it
    #: (a line-search point's slack comes from interpolated scores: verified before a stop).
    best_t, best_exact, verify = 0.0, True, False
    #: Cut at the working-set optimum next (after a cut that returned a plane the set holds).
    plain_cut = False
    #: The last working-set optimum the line search priced, and its primal (exact: its scores are X·w).
    optimum_w, optimum_primal = w, np.inf
    #: Each query's parts of the cuts seen so far (problems that split their cuts by block only).
    cache: _PlaneCache | None = None
    cache_usable = True
    for iteration in range(1, max_iter + 1):
        start = time.perf_counter()
        optimized = False
        if segment is None or verify:
            if verify:
                w = best_w
            constraint = problem.most_violated(w)
            cut_t = best_t
        else:
            optimized = line_search and segment.cheap
            if optimized:
                t, value, optimum_primal = _search_segment(segment, C, best_primal, 0.1 * target_gap)
                optimum_w = segment.w1
                if value < best_primal:
                    best_primal, best_w, best_t, best_exact = value, segment.point(t), t, False
            # Without a cheap line search the cut point's own oracle call prices it exactly (the
            # best point moves with the cuts); with it, the cut lands beyond the point just found.
            mu = CUT_TOWARDS_OPTIMUM if optimized else IN_OUT_CUT
            cut_t = best_t + mu * (1.0 - best_t) if line_search and not plain_cut else 1.0
            plain_cut = False
            w = segment.point(cut_t)
            constraint = segment.most_violated(cut_t)
        elapsed = time.perf_counter() - start
        if constraint.blocks is not None and cache_usable:
            parts = constraint.blocks.planes()
            if cache is None and parts is not None:
                cache = _PlaneCache.for_blocks(constraint.blocks.losses.size, problem.n_features)
            if cache is None or parts is None:  # the data cannot be split by query, or the cache would not fit
                cache_usable = False
            else:
                cache.add(parts, constraint.blocks.losses)
        plane = psi_star - np.asarray(constraint.feature, dtype=np.float64)
        _check_finite(plane, "the most violated plane Ψ(X, Y*) − Ψ(X, Ŷ)", iteration)
        loss = float(constraint.loss)
        _check_finite(np.array([loss]), "the most violated output's loss Δ", iteration)
        xi = max(0.0, loss - float(w @ plane))
        violation = xi - qp.slack(w)
        primal = 0.5 * float(w @ w) + C * xi
        if not np.isfinite(primal):
            raise ValueError(_scale_message(f"the primal objective at iteration {iteration} is {primal}", w, plane))
        if verify:  # the best point's primal, now from an oracle call at it
            best_primal, best_exact, verify = primal, True, False
        elif primal <= best_primal:  # on a tie the later iterate, a working-set optimum
            best_primal, best_w, best_t, best_exact = primal, w, cut_t, True
        best_dual = max(best_dual, dual)
        if best_primal - best_dual <= target_gap and optimum_primal - best_dual <= target_gap:
            # The working-set optimum is certified too: return it, the canonical point (the QP's
            # polished optimum), which rounding-level changes of the data do not move.
            best_w, best_primal, best_exact = optimum_w, optimum_primal, True
        gap = best_primal - best_dual
        # With the line search the solve's current point is the best one (the cut only feeds the
        # working set): the record, the callback and a validation monitor see that point.
        shown_primal, shown_w = (best_primal, best_w) if optimized else (primal, w)
        record = IterationRecord(
            iteration, shown_primal, best_dual, gap, violation, qp.n_planes, elapsed, qp_gap, qp_solver
        )
        history.append(record)
        logger.debug(
            "iter %d: primal %.6g dual %.6g gap %.3g violation %.3g planes %d (QP %s, gap %.3g)",
            iteration,
            shown_primal,
            best_dual,
            gap,
            violation,
            qp.n_planes,
            qp_solver or "-",
            qp_gap,
        )
        stop_requested = callback is not None and callback(record, shown_w)
        if gap <= target_gap:
            if target_gap < _rounding(best_primal, best_dual):
                # C·tol is below float64's rounding of the objective: a gap that small (even negative)
                # is rounding, not a certificate.
                stop_reason = "stalled"
                break
            if best_exact:
                stop_reason = "converged"
                break
            verify = True  # certify on an oracle call at the best point itself, next iteration
        if qp_failed:
            stop_reason = "stalled" if qp_gap_tol < _rounding(best_primal, best_dual) else "qp_failure"
            break
        if stop_requested:
            stop_reason = "callback"
            break
        if stall.stalled(iteration, gap, _rounding(best_primal, best_dual)):
            stop_reason = "stalled"
            break
        if iteration == max_iter:
            break
        if not qp.add(plane, loss) and segment is not None:
            # The working set holds this plane already: its optimum stands.  Cutting there next
            # either finds a new plane or shows the working set's slack exact there (converged).
            # (Before the first solve — planes given — the set's optimum is found below.)
            segment = segment.next(best_t, segment.w1)
            best_t, plain_cut = 0.0, True
            continue
        try:
            solution = qp.solve(qp_gap_tol)
        except InfeasibleConstraintsError:
            raise
        except QPSolveError as exc:
            qp.refuse_if_out_of_scale(str(exc))
            stop_reason = "stalled" if qp_gap_tol < _rounding(best_primal, best_dual) else "qp_failure"
            if stop_reason == "qp_failure":
                logger.warning("cutting plane: %s", exc)
            break
        # An unverified answer still has a valid dual bound, and its w is a point the
        # oracle can price (it may improve the best primal): one more iteration does
        # both, then the solve stops, since the next planes would rest on it.
        w, dual, qp_gap, qp_solver = solution.w, solution.dual, solution.gap, solution.solver
        if cache is not None and solution.solver == "primal" and problem.linear_constraints is None:
            # The dual form failed: assembled cuts are linear combinations of one another's parts, and a
            # working set of them can be too degenerate for the active-set dual. The cache stops here.
            cache, cache_usable = None, False
            logger.debug("plane cache off after iteration %d: the working-set dual failed", iteration)
        if cache is not None and solution.verified(qp_gap_tol) and _solve_cheaper_than_oracle(qp, problem):
            solution = _assemble_cuts(cache, qp, solution, qp_gap_tol, CACHE_VIOLATION * tol)
            w, dual, qp_gap, qp_solver = solution.w, solution.dual, solution.gap, solution.solver
        segment = problem.segment(best_w, w) if segment is None else segment.next(best_t, w)
        best_t = 0.0
        qp_failed = not solution.verified(qp_gap_tol)
        if qp_failed:
            qp.refuse_if_out_of_scale(f"working-set QP gap {solution.gap:.3g} > {qp_gap_tol:.3g}")
    converged = stop_reason == "converged"
    final_gap = best_primal - best_dual
    if warn and stop_reason == "stalled":
        warnings.warn(
            f"cutting plane stalled: the duality gap reached {final_gap:.3g} stops at float64's rounding of the "
            f"objective ({best_primal:.6g}): it no longer falls, or the working-set QP cannot be verified below "
            f"it, so C·tol = {target_gap:.3g} cannot be certified; the tolerance attainable here is about "
            f"tol = {max(final_gap, _rounding(best_primal, best_dual)) / C:.1g}",
            ConvergenceWarning,
            stacklevel=2,
        )
    elif warn and not converged and stop_reason != "callback":
        cause = (
            f"max_iter={max_iter} was reached"
            if stop_reason == "max_iter"
            else "no working-set QP solver reached a verified optimum"
        )
        warnings.warn(
            f"cutting plane stopped uncertified: {cause}, with duality gap {final_gap:.3g} > "
            f"C·tol = {target_gap:.3g} (relative {final_gap / max(best_primal, 1e-300):.3g}); "
            + ("increase max_iter or tol" if stop_reason == "max_iter" else "rescale the features or loosen tol"),
            ConvergenceWarning,
            stacklevel=2,
        )
    log_end("cutting plane", "iterations", stop_reason, len(history), best_primal, final_gap, target_gap)
    return CuttingPlaneResult(
        best_w, len(history), converged, history, stop_reason, best_primal, final_gap, qp.working_set()
    )


def log_end(solver: str, unit: str, stop_reason: str, count: int, primal: float, gap: float, target: float) -> None:
    """The one INFO line a solve ends with."""
    logger.info(
        "%s %s after %d %s: primal %.6g, gap %.3g (C·tol %.3g)",
        solver,
        "converged" if stop_reason == "converged" else f"stopped ({stop_reason})",
        count,
        unit,
        primal,
        gap,
        target,
    )


def _check_working_set(planes: WorkingSet, n_features: int) -> None:
    rows, losses = np.asarray(planes.planes), np.asarray(planes.losses)
    if rows.ndim != 2 or rows.shape[1] != n_features or losses.shape != (rows.shape[0],):
        raise ValueError(
            f"expected a working set of planes with {n_features} features and one loss each, got planes of shape "
            f"{rows.shape} and losses of shape {losses.shape} instead"
        )
    if not (np.all(np.isfinite(rows)) and np.all(np.isfinite(losses))):
        raise ValueError("expected a working set of finite planes and losses, got NaN or infinity instead")


class _PlaneCache:
    """The last parts of the cuts, per block: (n_blocks, parts, n_features) planes and their losses.

    Any choice of one part per block is a valid cut (:class:`~rankopt.engine.problem.BlockPlanes`);
    the most violated choice at a w costs one product with the cache and no pass over the data.
    A new part takes the slot of the part least recently chosen or added.
    """

    def __init__(self, n_blocks: int, n_features: int, parts: int):
        self.planes = np.zeros((n_blocks, parts, n_features))
        self.losses = np.full((n_blocks, parts), -np.inf)  # an empty slot is never chosen
        self.last_used = np.zeros((n_blocks, parts), dtype=np.int64)
        self.clock = 0
        self._blocks = np.arange(n_blocks)

    @classmethod
    def for_blocks(cls, n_blocks: int, n_features: int) -> _PlaneCache | None:
        parts = min(CACHE_PARTS, CACHE_BYTES // max(1, 8 * n_blocks * n_features))
        return cls(n_blocks, n_features, parts) if parts >= 2 else None

    def add(self, planes: np.ndarray, losses: np.ndarray) -> None:
        """Store one cut's parts (a :class:`~rankopt.engine.problem.BlockPlanes`' planes and losses)."""
        planes = np.asarray(planes, dtype=np.float64)
        losses = np.asarray(losses, dtype=np.float64)
        if planes.shape != self.planes[:, 0].shape or losses.shape != self.losses[:, 0].shape:
            raise RuntimeError(
                f"a problem broke its contract: its cuts came split into {self.losses.shape[0]} blocks, then into "
                f"planes of shape {planes.shape} and losses of shape {losses.shape}"
            )
        _check_finite(planes, "a cut's parts by block", 0)
        self.clock += 1
        held = np.all(self.planes == planes[:, None, :], axis=2) & (self.losses == losses[:, None])
        new = np.flatnonzero(~held.any(axis=1))
        self.last_used[held] = self.clock
        slot = np.argmin(self.last_used[new], axis=1)
        self.planes[new, slot] = planes[new]
        self.losses[new, slot] = losses[new]
        self.last_used[new, slot] = self.clock

    def most_violated(self, w: np.ndarray) -> tuple[np.ndarray, float]:
        """The cut assembled from the part of each block most violated at w: (plane, loss)."""
        chosen = np.argmax(self.losses - self.planes @ w, axis=1)
        self.clock += 1
        self.last_used[self._blocks, chosen] = self.clock
        return self.planes[self._blocks, chosen].sum(axis=0), float(self.losses[self._blocks, chosen].sum())


def _solve_cheaper_than_oracle(qp: _ScaledQP, problem: StructuredProblem) -> bool:
    """Whether a working-set solve (~K³ for K planes) costs less than an oracle call: only then is an
    assembled cut, which saves oracle calls at the price of a solve, worth adding (docs/engine-notes.md)."""
    cost = problem.oracle_cost
    return cost is not None and float(qp.n_planes) ** 3 < cost


def _add_cached_cut(cache: _PlaneCache, qp: _ScaledQP, w: np.ndarray, min_violation: float) -> bool:
    """Add the cut assembled from cached parts at w if it cuts w off by more than ``min_violation``."""
    plane, loss = cache.most_violated(w)
    return loss - float(w @ plane) - qp.slack(w) > min_violation and qp.add(plane, loss)


def _assemble_cuts(
    cache: _PlaneCache, qp: _ScaledQP, solution: QPSolution, gap_tol: float, min_violation: float
) -> QPSolution:
    """Add cuts assembled from cached parts while they cut off the working-set optimum by more than
    ``min_violation`` (at most CACHE_ROUNDS), re-solving after each: the working set then models every
    query by its own parts, as the n-slack problem would, without a pass over the data.

    Returns the last verified solution (an unverified or failed re-solve ends the rounds and is not used).
    """
    for _ in range(CACHE_ROUNDS):
        if not _add_cached_cut(cache, qp, solution.w, min_violation):
            break
        try:
            candidate = qp.solve(gap_tol)
        except QPSolveError:
            break
        if not candidate.verified(gap_tol) or candidate.dual < solution.dual or candidate.solver == "primal":
            break
        solution = candidate
    return solution


class StallGuard:
    """Whether a certified gap has stopped falling: by no more than float64's rounding of the objective
    in STALL_ITERATIONS iterations (or passes)."""

    def __init__(self):
        self.gap, self.iteration = np.inf, 0

    def stalled(self, iteration: int, gap: float, rounding: float) -> bool:
        if gap < self.gap - rounding:
            self.gap, self.iteration = gap, iteration
            return False
        return iteration - self.iteration >= STALL_ITERATIONS


def _rounding(best_primal: float, best_dual: float) -> float:
    """float64's rounding of the objective: the smallest gap any computation here can verify.

    A gap that stops falling by more (the stall guard), a C·tol or a working-set QP tolerance below it
    cannot be certified: the solve then stops as "stalled".
    """
    return STALL_ROUNDING * np.finfo(np.float64).eps * max(abs(best_primal), abs(best_dual))


def _search_segment(segment: Segment, C: float, start_value: float, tolerance: float) -> tuple[float, float, float]:
    """(t, φ(t), φ(1)) with t minimising φ(t) = ½‖w(t)‖² + C ξ(w(t)) on [0, 1], to ``tolerance``.

    φ(1) is the working-set optimum's primal (inf when it was not needed).

    φ is convex: a quadratic plus C times a maximum of affine functions.  Each
    evaluation gives ξ at t and the slope of the maximising affine function,
    a support line of ξ; the next t minimises the quadratic plus the larger of
    the two support lines that bracket the minimiser (a one-dimensional
    cutting plane), until φ there is within ``tolerance`` of that model.  The
    best point evaluated is returned; t = 0, the best point so far, is never
    worse than ``start_value`` (which the caller already holds).
    """
    d = segment.w1 - segment.w0
    a, b, c0 = float(segment.w0 @ d), float(d @ d), 0.5 * float(segment.w0 @ segment.w0)
    if not b > 0.0:
        return 0.0, start_value, np.inf

    def phi(t, xi):
        return c0 + a * t + 0.5 * b * t * t + C * xi

    xi0, g0 = segment.slack(0.0)
    if a + C * g0 >= 0.0:  # φ rises from the best point: it stays best
        return 0.0, start_value, np.inf
    xi1, g1 = segment.slack(1.0)
    at_optimum = phi(1.0, xi1)
    best_t, best_value = (1.0, at_optimum) if at_optimum < start_value else (0.0, start_value)
    if a + b + C * g1 <= 0.0:  # φ still falls at the working-set optimum
        return best_t, best_value, at_optimum
    lo, hi = (0.0, xi0, g0), (1.0, xi1, g1)
    for _ in range(LINE_SEARCH_EVALUATIONS - 2):
        (t_lo, x_lo, g_lo), (t_hi, x_hi, g_hi) = lo, hi
        # Where the two support lines cross (convexity: g_lo ≤ g_hi), clamped to the bracket.
        cross = t_hi if g_hi <= g_lo else (x_hi - x_lo + g_lo * t_lo - g_hi * t_hi) / (g_lo - g_hi)
        cross = min(max(cross, t_lo), t_hi)
        left = -(a + C * g_lo) / b
        right = -(a + C * g_hi) / b
        t = left if t_lo <= left <= cross else right if cross <= right <= t_hi else cross
        t = min(max(round(t / LINE_SEARCH_GRID) * LINE_SEARCH_GRID, t_lo), t_hi)
        if t in (t_lo, t_hi):  # the bracket is down to the grid
            break
        model = phi(t, max(x_lo + g_lo * (t - t_lo), x_hi + g_hi * (t - t_hi)))
        xi, g = segment.slack(t)
        value = phi(t, xi)
        if value < best_value:
            best_t, best_value = t, value
        if value - model <= tolerance:
            break
        if a + b * t + C * g < 0.0:
            lo = (t, xi, g)
        else:
            hi = (t, xi, g)
    return best_t, best_value, at_optimum


def _feature_scale(largest: float) -> float:
    """The power of two nearest to ``largest`` (Ψ(X, Y*)'s largest entry), or 1 when
    that is within 2^±60 (or 0): the planes' scale, which the QP divides out."""
    if largest == 0.0 or 1.0 / _RESCALE_BEYOND <= largest <= _RESCALE_BEYOND:
        return 1.0
    return float(np.ldexp(1.0, int(np.round(np.log2(largest)))))


class _ScaledQP:
    """The working-set QP in units where the planes are of order one.

    With g = s·g' and w = w'/s (s a power of two, so every conversion is
    exact), ½‖w‖² + C ξ = (½‖w'‖² + C s² ξ)/s²: the QP solves the problem
    in (w', C' = C s²), whose Gram matrix neither overflows for features of
    order 10¹⁵⁰ nor underflows for 10⁻¹⁵⁰, and this wrapper converts back.
    The margins w·g = w'·g' and the slack do not change.
    """

    def __init__(self, C, n_features, linear_constraints, psi_star, gap_tol):
        magnitude = float(np.max(np.abs(psi_star), initial=0.0))
        scale = _feature_scale(magnitude)
        self.scale, self.magnitude, self.C = scale, magnitude, C
        C_scaled = C * scale * scale
        # C·magnitude², computed in the QP's units where it cannot overflow: the QP's conditioning
        self.C_magnitude2 = C_scaled * (magnitude / scale) ** 2
        # The QP's tolerance in these units must stay a normal float, or its checks mean nothing.
        if not (np.isfinite(C_scaled) and gap_tol * scale * scale >= np.finfo(np.float64).tiny):
            raise ValueError(
                f"expected features whose scale keeps C·scale² in the float64 range, got features of magnitude "
                f"{magnitude:.3g} with C={C:g} (C·scale² = {C_scaled:.3g}) instead; rescale X (e.g. standardise it)"
            )
        if linear_constraints is not None and scale != 1.0:
            linear_constraints = LinearConstraints(linear_constraints.A, linear_constraints.b * scale)
        self._qp = WorkingSetQP(C_scaled, n_features, linear_constraints)

    @property
    def n_planes(self) -> int:
        return self._qp.n_planes

    def refuse_if_out_of_scale(self, failure: str) -> None:
        """Raise a ValueError naming the scale when a QP failure is the scale's doing."""
        if self.C_magnitude2 > _SOLVABLE_C_SCALE2:
            raise ValueError(
                f"expected features and C for which the working-set QP can be solved in float64, got features "
                f"of magnitude {self.magnitude:.3g} with C={self.C:g} instead "
                f"(C·magnitude² = {self.C_magnitude2:.3g} > {_SOLVABLE_C_SCALE2:g}; {failure}); "
                "standardise X or lower C"
            )

    def add(self, plane: np.ndarray, loss: float) -> bool:
        return self._qp.add(plane / self.scale, loss)

    def slack(self, w: np.ndarray) -> float:
        return self._qp.slack(w * self.scale)

    def working_set(self) -> WorkingSet:
        return WorkingSet(self._qp.planes * self.scale, self._qp.losses.copy())

    def solve(self, gap_tol: float) -> QPSolution:
        s2 = self.scale * self.scale
        solution = self._qp.solve(gap_tol * s2)
        return QPSolution(solution.w / self.scale, solution.dual / s2, solution.primal / s2, solution.solver)


def _check_finite(values: np.ndarray, what: str, iteration: int) -> None:
    if not np.all(np.isfinite(values)):
        raise ValueError(
            f"expected finite values in {what} (iteration {iteration}), got NaN or infinity instead: "
            "the features are too large for float64 arithmetic (largest finite entry "
            f"{np.max(np.abs(values[np.isfinite(values)]), initial=0.0):.3g}); rescale X"
        )


def _scale_message(what: str, w: np.ndarray, plane: np.ndarray) -> str:
    return (
        f"{what}: the problem's scale leaves the float64 range (largest plane entry "
        f"{np.max(np.abs(plane)):.3g}, largest weight {np.max(np.abs(w), initial=0.0):.3g}); rescale X"
    )
