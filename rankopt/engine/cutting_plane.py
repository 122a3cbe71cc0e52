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

import numpy as np

from rankopt.engine.certificate import Certificate, IterationRecord, SolveResult, StopReason, WorkingSet, check_finite
from rankopt.engine.problem import LinearConstraints, PlaneCache, Segment, StructuredProblem
from rankopt.engine.qp import InfeasibleConstraintsError, QPSolution, QPSolveError, WorkingSetQP

__all__ = ["solve_cutting_plane"]

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
#: Line-search evaluations (one inference call each, no pass over the data) per iteration at most
#: (8 was measured too: docs/engine-notes.md).
LINE_SEARCH_EVALUATIONS = 6
#: Line-search steps are multiples of 2⁻²⁰: the same data held another way (Dask chunks, another
#: summation order) gives scores that differ in their last bits, and a step computed from them
#: would too, leading two such fits apart; rounded to this grid they take the same steps.
LINE_SEARCH_GRID = 2.0**-20
#: Cuts assembled from cached parts after each working-set solve, at most, and the violation
#: (in units of tol, beyond the working set's slack) a cut must reach to be added.
CACHE_ROUNDS = 3
CACHE_VIOLATION = 0.1
#: Features are rescaled inside the engine (by a power of two) only beyond
#: 2^±60, where the Gram matrix would leave float64's comfortable range.
_RESCALE_BEYOND = 2.0**60
#: C·scale² beyond which a working-set QP that no solver can verify is blamed on
#: the scale (a ValueError naming it) rather than reported as a convergence failure
#: (below where random planes stop being solvable: docs/engine-notes.md).
_SOLVABLE_C_SCALE2 = 1e12


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
) -> SolveResult:
    """Solve ``problem`` to a duality gap of ``C·tol`` with at most ``max_iter`` oracle calls.

    ``tol``: stop when the best primal objective is within C·tol of the best dual objective (with an
    exact QP: no constraint violated by more than ``tol`` beyond the working set's slack, Joachims et
    al.'s ε).  ``w0``: where to start (it must meet the linear constraints; default: the smallest w that
    does); it is returned if no later iterate has a smaller primal objective.  ``warn``: a
    :class:`ConvergenceWarning` when the solve ends uncertified (max_iter, or a working-set QP no solver
    could verify).  ``callback(record, w)`` is called after every iteration with its record and the
    iterate it describes (read-only); returning True stops the solve (``stop_reason="callback"``) unless
    that iterate already certified convergence.  ``line_search``: search the segment from the best point
    to each working-set optimum and cut near the best point (OCA) where the problem prices a segment
    without a pass over the data (:attr:`Segment.cheap <rankopt.engine.problem.Segment.cheap>`); where a
    point costs an oracle call the cut is still placed near the best point, at (1 − μ)·w_b + μ·w_c (the
    in-out stabilisation of Ben-Ameur and Neto, 2007); False: the plain cutting plane.  ``planes``: the
    working set of an earlier solve of the same problem (at any C) to start from.

    Raises ``ValueError`` when the oracle returns a non-finite plane or loss, or the problem's scale
    leaves the floating-point range (the message names the scale).
    """
    solve = _CuttingPlane(problem, C, tol, line_search, w0, planes)
    stop_reason = StopReason.MAX_ITER
    for iteration in range(1, max_iter + 1):
        record, shown_w = solve.iterate(iteration)
        stop_requested = callback is not None and callback(record, shown_w)
        reason = solve.stop_reason(iteration, stop_requested)
        if reason is None and iteration < max_iter:
            reason = solve.extend_working_set()
        if reason is not None:
            stop_reason = reason
            break
    return solve.result(stop_reason, warn, max_iter)


class _CuttingPlane:
    """The state of one cutting-plane solve, advanced by :func:`solve_cutting_plane` in named steps.

    Each iteration: :meth:`iterate` chooses the cut point (the first point, the best point to verify,
    or a point on the segment from the best point to the working-set optimum, after a line search),
    calls the oracle there, feeds the plane cache, prices the point and updates the certificate;
    :meth:`stop_reason` applies the stop test; :meth:`extend_working_set` adds the plane and re-solves
    the working-set QP.
    """

    def __init__(self, problem: StructuredProblem, C, tol, line_search, w0, planes):
        self.problem, self.C, self.line_search = problem, float(C), line_search
        self.psi_star = _ground_truth_feature(problem)
        self.target_gap = self.C * tol
        self.tol = tol
        self.qp_gap_tol = QP_GAP_FRACTION * self.target_gap
        self.qp = _ScaledQP(self.C, problem.n_features, problem.linear_constraints, self.psi_star, self.qp_gap_tol)
        if planes is not None:
            _check_working_set(planes, problem.n_features)
            for plane, loss in zip(planes.planes, planes.losses, strict=True):
                self.qp.add(plane, float(loss))
        if w0 is None:
            self._take(self.qp.solve(self.qp_gap_tol))  # the smallest w meeting the linear constraints (0 without)
        else:
            # ½‖w‖² + C ξ ≥ 0: zero is a lower bound until the first working-set solve.
            self.w, self.dual, self.qp_gap, self.qp_solver = np.asarray(w0, dtype=np.float64).copy(), 0.0, 0.0, ""
            self.solved_revision = -1  # no working-set optimum yet
        self.certificate = Certificate(self.C, tol, best_w=self.w, best_dual=self.dual)
        self.history: list[IterationRecord] = []
        self.qp_failed = False
        #: The problem from the best point (at t = 0) to the working-set optimum (t = 1); None before the first QP.
        self.segment: Segment | None = None
        #: Where the best point lies on ``segment``, and whether its primal came from an oracle call at it
        #: (a line-search point's slack comes from interpolated scores: verified before a stop).
        self.best_t, self.best_exact, self.verify = 0.0, True, False
        #: Cut at the working-set optimum next (after a cut that returned a plane the set holds).
        self.plain_cut = False
        #: The last working-set optimum the line search priced, and its primal (exact: its scores are X·w).
        self.optimum_w, self.optimum_primal = self.w, np.inf
        #: Each query's parts of the cuts seen so far (problems that split their cuts by block only).
        self.cache: PlaneCache | None = None
        self.cache_usable = True
        self.last_plane, self.last_loss = np.zeros(0), 0.0

    def _take(self, solution: QPSolution) -> None:
        self.w, self.dual, self.qp_gap, self.qp_solver = solution.w, solution.dual, solution.gap, solution.solver
        self.solved_revision = self.qp.revision

    def iterate(self, iteration: int) -> tuple[IterationRecord, np.ndarray]:
        """One oracle call and its bookkeeping: the iteration's record and the point it describes."""
        start = time.perf_counter()
        constraint, cut_t, optimized = self._cut()
        elapsed = time.perf_counter() - start
        self._feed_cache(constraint)
        primal, violation = self._price(constraint, iteration)
        to_optimum = self._update_bounds(primal, cut_t)
        cert = self.certificate
        # With the line search the solve's current point is the best one (the cut only feeds the
        # working set), and once the working-set optimum is certified it is the point returned: the
        # record, the callback and a validation monitor see that point.
        shown_primal, shown_w = (cert.best_primal, cert.best_w) if optimized or to_optimum else (primal, self.w)
        record = IterationRecord(
            iteration=iteration,
            primal_objective=shown_primal,
            dual_objective=cert.best_dual,
            duality_gap=cert.gap,
            violation=violation,
            n_planes=self.qp.n_planes,
            inference_seconds=elapsed,
            qp_gap=self.qp_gap,
            qp_solver=self.qp_solver,
        )
        self.history.append(record)
        logger.debug(
            "iter %d: primal %.6g dual %.6g gap %.3g violation %.3g planes %d (QP %s, gap %.3g)",
            iteration,
            shown_primal,
            cert.best_dual,
            cert.gap,
            violation,
            self.qp.n_planes,
            self.qp_solver or "-",
            self.qp_gap,
        )
        return record, shown_w

    def _cut(self):
        """The oracle's answer at this iteration's cut point: (constraint, where on the segment, line-searched)."""
        if self.segment is None or self.verify:
            if self.verify:
                self.w = self.certificate.best_w
            return self.problem.most_violated(self.w), self.best_t, False
        segment, cert = self.segment, self.certificate
        optimized = self.line_search and segment.cheap
        if optimized:
            t, value, self.optimum_primal = _search_segment(segment, self.C, cert.best_primal, 0.1 * self.target_gap)
            self.optimum_w = segment.w1
            if value < cert.best_primal:
                cert.best_primal, cert.best_w, self.best_t, self.best_exact = value, segment.point(t), t, False
        # Without a cheap line search the cut point's own oracle call prices it exactly (the best point
        # moves with the cuts); with it, the cut lands beyond the point just found.
        mu = CUT_TOWARDS_OPTIMUM if optimized else IN_OUT_CUT
        cut_t = self.best_t + mu * (1.0 - self.best_t) if self.line_search and not self.plain_cut else 1.0
        self.plain_cut = False
        self.w = segment.point(cut_t)
        return segment.most_violated(cut_t), cut_t, optimized

    def _feed_cache(self, constraint) -> None:
        """Keep each query's part of the cut, where the problem splits its cuts by block."""
        if constraint.blocks is None or not self.cache_usable:
            return
        if self.cache is None:
            self.cache = constraint.blocks.open_cache(self.problem.n_features)
        if self.cache is None:  # the data cannot be split by query, or the cache would not fit
            self.cache_usable = False
        else:
            self.cache.add(constraint.blocks)

    def _price(self, constraint, iteration: int) -> tuple[float, float]:
        """The primal objective at the cut point and its violation beyond the working set's slack."""
        plane = self.psi_star - np.asarray(constraint.feature, dtype=np.float64)
        check_finite(plane, "the most violated plane Ψ(X, Y*) − Ψ(X, Ŷ)", iteration)
        loss = float(constraint.loss)
        check_finite(np.array([loss]), "the most violated output's loss Δ", iteration)
        xi = max(0.0, loss - float(self.w @ plane))
        primal = 0.5 * float(self.w @ self.w) + self.C * xi
        if not np.isfinite(primal):
            raise ValueError(
                _scale_message(f"the primal objective at iteration {iteration} is {primal}", self.w, plane)
            )
        self.last_plane, self.last_loss = plane, loss
        return primal, xi - self.qp.slack(self.w)

    def _update_bounds(self, primal: float, cut_t: float) -> bool:
        """Offer the cut point's primal and the QP's dual; whether the certified working-set optimum
        became the best point."""
        cert = self.certificate
        if self.verify:  # the best point's primal, now from an oracle call at it
            cert.best_primal, self.best_exact, self.verify = primal, True, False
        elif primal <= cert.best_primal:  # on a tie the later iterate, a working-set optimum
            cert.best_primal, cert.best_w, self.best_t, self.best_exact = primal, self.w, cut_t, True
        cert.raise_dual(self.dual)
        if cert.gap <= self.target_gap and self.optimum_primal - cert.best_dual <= self.target_gap:
            # The working-set optimum is certified too: return it, the canonical point (the QP's
            # polished optimum), which rounding-level changes of the data do not move.
            cert.best_w, cert.best_primal, self.best_exact = self.optimum_w, self.optimum_primal, True
            return True
        return False

    def stop_reason(self, iteration: int, stop_requested: bool) -> StopReason | None:
        """Why the solve stops after this iteration, or None (a certified gap at an interpolated best
        point is verified by an oracle call at it first)."""
        cert = self.certificate
        verdict = cert.verdict()
        if verdict is StopReason.STALLED or (verdict is StopReason.CONVERGED and self.best_exact):
            return verdict
        if verdict is StopReason.CONVERGED:
            self.verify = True  # certify on an oracle call at the best point itself, next iteration
        if self.qp_failed:
            return StopReason.STALLED if self.qp_gap_tol < cert.rounding else StopReason.QP_FAILURE
        if stop_requested:
            return StopReason.CALLBACK
        return cert.stalled(iteration)

    def extend_working_set(self) -> StopReason | None:
        """Add the last plane and re-solve the working-set QP; a stop reason when no QP solver succeeds."""
        added = self.qp.add(self.last_plane, self.last_loss)
        if not added and self.segment is not None and self.solved_revision == self.qp.revision:
            # The working set holds this plane already, and its optimum was solved for the set as it
            # stands: the optimum stands.  Cutting there next either finds a new plane or shows the
            # working set's slack exact there (converged).  (Before the first solve — planes given — and
            # whenever the set changed since its last solve, the set's optimum is found below.)
            self.segment = self.segment.next(self.best_t, self.segment.w1)
            self.best_t, self.plain_cut = 0.0, True
            return None
        try:
            solution = self.qp.solve(self.qp_gap_tol)
        except InfeasibleConstraintsError:
            raise
        except QPSolveError as exc:
            self.qp.refuse_if_out_of_scale(str(exc))
            reason = StopReason.STALLED if self.qp_gap_tol < self.certificate.rounding else StopReason.QP_FAILURE
            if reason is StopReason.QP_FAILURE:
                logger.warning("cutting plane: %s", exc)
            return reason
        # An unverified answer still has a valid dual bound, and its w is a point the oracle can price
        # (it may improve the best primal): one more iteration does both, then the solve stops, since
        # the next planes would rest on it.
        self._take(solution)
        solution = self._assembled(solution)
        best_w = self.certificate.best_w
        self.segment = (
            self.problem.segment(best_w, self.w) if self.segment is None else self.segment.next(self.best_t, self.w)
        )
        self.best_t = 0.0
        self.qp_failed = not solution.verified(self.qp_gap_tol)
        if self.qp_failed:
            self.qp.refuse_if_out_of_scale(f"working-set QP gap {solution.gap:.3g} > {self.qp_gap_tol:.3g}")
        return None

    def _assembled(self, solution: QPSolution) -> QPSolution:
        """The solution after the cuts assembled from the plane cache, where they are worth a solve."""
        if self.cache is not None and solution.solver == "primal" and self.problem.linear_constraints is None:
            # The dual form failed: assembled cuts are linear combinations of one another's parts, and a
            # working set of them can be too degenerate for the active-set dual. The cache stops here.
            self.cache, self.cache_usable = None, False
            logger.debug("plane cache off after iteration %d: the working-set dual failed", len(self.history))
        if (
            self.cache is not None
            and solution.verified(self.qp_gap_tol)
            and _solve_cheaper_than_oracle(self.qp, self.problem)
        ):
            solution = _assemble_cuts(self.cache, self.qp, solution, self.qp_gap_tol, CACHE_VIOLATION * self.tol)
            self._take(solution)
        return solution

    def result(self, stop_reason: StopReason, warn: bool, max_iter: int) -> SolveResult:
        """Warn if uncertified, log the end, and return the best point with its certificate."""
        cert = self.certificate
        if stop_reason is StopReason.MAX_ITER:
            cause, remedy = f"max_iter={max_iter} was reached", "increase max_iter or tol"
        else:
            cause, remedy = "no working-set QP solver reached a verified optimum", "rescale the features or loosen tol"
        cert.finish(
            "cutting plane",
            "iterations",
            stop_reason,
            len(self.history),
            warn=warn,
            cause=cause,
            remedy=remedy,
            stacklevel=4,
        )
        return SolveResult(
            w=cert.best_w,
            n_iter=len(self.history),
            converged=stop_reason is StopReason.CONVERGED,
            history=self.history,
            stop_reason=stop_reason,
            primal_objective=cert.best_primal,
            duality_gap=cert.gap,
            working_set=self.qp.working_set(),
        )


def _ground_truth_feature(problem: StructuredProblem) -> np.ndarray:
    psi_star = np.asarray(problem.ground_truth_feature(), dtype=np.float64)
    if psi_star.shape != (problem.n_features,):
        raise RuntimeError(
            f"{type(problem).__name__} broke its contract: Ψ(X, Y*) has shape {psi_star.shape}, "
            f"expected ({problem.n_features},)"
        )
    check_finite(psi_star, "Ψ(X, Y*)", 0)
    return psi_star


def _check_working_set(planes: WorkingSet, n_features: int) -> None:
    rows, losses = np.asarray(planes.planes), np.asarray(planes.losses)
    if rows.ndim != 2 or rows.shape[1] != n_features or losses.shape != (rows.shape[0],):
        raise ValueError(
            f"expected a working set of planes with {n_features} features and one loss each, got planes of shape "
            f"{rows.shape} and losses of shape {losses.shape} instead"
        )
    if not (np.all(np.isfinite(rows)) and np.all(np.isfinite(losses))):
        raise ValueError("expected a working set of finite planes and losses, got NaN or infinity instead")


def _solve_cheaper_than_oracle(qp: _ScaledQP, problem: StructuredProblem) -> bool:
    """Whether a working-set solve (~K³ for K planes) costs less than an oracle call: only then is an
    assembled cut, which saves oracle calls at the price of a solve, worth adding (docs/engine-notes.md)."""
    cost = problem.oracle_cost
    return cost is not None and float(qp.n_planes) ** 3 < cost


def _assemble_cuts(
    cache: PlaneCache, qp: _ScaledQP, solution: QPSolution, gap_tol: float, min_violation: float
) -> QPSolution:
    """Add cuts assembled from cached parts while they cut off the working-set optimum by more than
    ``min_violation`` (at most CACHE_ROUNDS), re-solving after each: the working set then models every
    query by its own parts, as the n-slack problem would, without a pass over the data.

    Returns the last verified solution.  An unverified or failed re-solve ends the rounds, and its cut
    leaves the working set again: the solution returned must be the optimum of the set the engine goes
    on with, or the cut would sit in the set, cutting off the returned point, and the oracle's answers
    there would read as held planes while the point is never re-solved.
    """
    for _ in range(CACHE_ROUNDS):
        plane, loss = cache.most_violated(solution.w)
        if loss - float(solution.w @ plane) - qp.slack(solution.w) <= min_violation or not qp.add(plane, loss):
            break
        try:
            candidate: QPSolution | None = qp.solve(gap_tol)
        except QPSolveError:
            candidate = None
        if (
            candidate is None
            or not candidate.verified(gap_tol)
            or candidate.dual < solution.dual
            or candidate.solver == "primal"
        ):
            qp.discard(plane, loss)
            break
        solution = candidate
    return solution


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

    def discard(self, plane: np.ndarray, loss: float) -> bool:
        return self._qp.discard(plane / self.scale, loss)

    @property
    def revision(self) -> int:
        return self._qp.revision

    def slack(self, w: np.ndarray) -> float:
        return self._qp.slack(w * self.scale)

    def working_set(self) -> WorkingSet:
        return WorkingSet(self._qp.planes * self.scale, self._qp.losses.copy())

    def solve(self, gap_tol: float) -> QPSolution:
        s2 = self.scale * self.scale
        solution = self._qp.solve(gap_tol * s2)
        return QPSolution(
            w=solution.w / self.scale, dual=solution.dual / s2, primal=solution.primal / s2, solver=solution.solver
        )


def _scale_message(what: str, w: np.ndarray, plane: np.ndarray) -> str:
    return (
        f"{what}: the problem's scale leaves the float64 range (largest plane entry "
        f"{np.max(np.abs(plane)):.3g}, largest weight {np.max(np.abs(w), initial=0.0):.3g}); rescale X"
    )
