"""The certificate every solver of the engine stops on, and the records and result they share.

A solve keeps two bounds on the optimum of ½‖w‖² + C ξ(w): the best primal objective it has priced at
a point (an upper bound) and the best dual objective it has found (a lower bound).  It is *converged*
exactly when their gap is at most C·tol, and it then returns the point of that best primal; a gap below
float64's rounding of the objective proves nothing and ends the solve as "stalled".  The cutting plane,
BCFW, APPX's outer loop and CCCP's inner solves all report through :class:`Certificate` and return a
:class:`SolveResult`, so "converged" means the same thing whichever solver ran.
"""

from __future__ import annotations

import enum
import logging
import warnings
from dataclasses import dataclass, field

import numpy as np

from rankopt.exceptions import ConvergenceWarning

__all__ = [
    "STALL_ITERATIONS",
    "StopReason",
    "STALL_ROUNDING",
    "ROUNDING_LEVEL",
    "Certificate",
    "IterationRecord",
    "SolveResult",
    "StallGuard",
    "WorkingSet",
    "check_finite",
    "log_end",
    "objective_rounding",
]

logger = logging.getLogger(__name__)

#: The stall guard: a solve whose certified gap has not fallen by more than float64 rounding
#: of the objective (STALL_ROUNDING machine epsilons of its magnitude) in STALL_ITERATIONS
#: iterations stops (``stop_reason="stalled"``): a tol below what float64 can certify would
#: otherwise add planes until max_iter, each QP larger than the last.
STALL_ITERATIONS = 50
STALL_ROUNDING = 1024.0
#: A gap that stops falling within this many roundings of the objective is blamed on rounding
#: ("stalled"); one further from it is not rounding's doing, and the solve says so ("no_progress").
ROUNDING_LEVEL = 64.0


class StopReason(str, enum.Enum):
    """Why a solve ended; a str, so ``result.stop_reason == "converged"`` reads as before."""

    #: The duality gap is certified at most C·tol.
    CONVERGED = "converged"
    #: The iteration budget ran out first (uncertified, warned).
    MAX_ITER = "max_iter"
    #: The caller's callback asked to stop (early stopping on validation data).
    CALLBACK = "callback"
    #: No working-set QP solver reached a verified optimum (uncertified, warned).
    QP_FAILURE = "qp_failure"
    #: The gap stopped falling at float64's rounding of the objective: tol is below what can be certified.
    STALLED = "stalled"
    #: The gap stopped falling far above that rounding: a solver failure, said so (CCCP: an uncertified inner
    #: solve found no point below the current objective).
    NO_PROGRESS = "no_progress"

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True)
class IterationRecord:
    """One iteration (cutting plane) or pass (BCFW) of a solve."""

    iteration: int
    primal_objective: float  # ½‖w‖² + C ξ(w) at the iterate: the cut point, or the best point with the line search
    dual_objective: float  # best dual so far: a lower bound on the optimum
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
class SolveResult:
    """The solution of one solve and how it was reached, whichever solver ran.

    ``w`` is the iterate with the smallest primal objective, and
    ``duality_gap`` bounds how far that objective is from the optimum:
    ``converged`` is True exactly when it is at most C·tol.
    """

    w: np.ndarray
    n_iter: int
    converged: bool
    history: list[IterationRecord] = field(default_factory=list)
    #: Why the solve ended: "converged", "max_iter", "callback", "qp_failure", "stalled" (the gap
    #: stopped falling at float64's rounding of the objective) or "no_progress" (it stopped falling far
    #: above that rounding: a solver failure).
    stop_reason: StopReason = StopReason.CONVERGED
    #: ½‖w‖² + C ξ(w) at the returned w.
    primal_objective: float = float("nan")
    #: primal_objective − the best dual objective: a certified bound on suboptimality.
    duality_gap: float = float("nan")
    #: The working set at the end (idle planes pruned): the ``planes=`` of a solve at another C.
    working_set: WorkingSet | None = None

    @property
    def inference_seconds(self) -> float:
        return float(sum(r.inference_seconds for r in self.history))


def objective_rounding(best_primal: float, best_dual: float) -> float:
    """float64's rounding of the objective: the smallest gap any computation here can verify.

    A gap that stops falling by more (the stall guard), a C·tol or a working-set QP tolerance below it
    cannot be certified: the solve then stops as "stalled".
    """
    return STALL_ROUNDING * np.finfo(np.float64).eps * max(abs(best_primal), abs(best_dual))


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


class Certificate:
    """The two bounds of one solve and its stop test.

    ``best_primal`` / ``best_w``: the smallest primal objective priced so far and its point;
    ``best_dual``: the largest dual objective found so far; ``target_gap`` = C·tol.
    """

    def __init__(self, C: float, tol: float, best_w: np.ndarray, best_dual: float = 0.0):
        self.C, self.target_gap = float(C), float(C) * float(tol)
        self.best_primal, self.best_w, self.best_dual = np.inf, best_w, float(best_dual)
        self._stall = StallGuard()

    @property
    def gap(self) -> float:
        return self.best_primal - self.best_dual

    @property
    def rounding(self) -> float:
        return objective_rounding(self.best_primal, self.best_dual)

    def raise_dual(self, dual: float) -> None:
        self.best_dual = max(self.best_dual, float(dual))

    def verdict(self) -> StopReason | None:
        """ "converged" when the gap is at most C·tol, "stalled" when C·tol is below float64's rounding of
        the objective (a gap that small, even negative, is rounding, not a certificate); None otherwise."""
        if self.gap > self.target_gap:
            return None
        return StopReason.STALLED if self.target_gap < self.rounding else StopReason.CONVERGED

    def stalled(self, iteration: int) -> StopReason | None:
        """The stall guard on this solve's gap: None while it falls; "stalled" when it stopped at float64's
        rounding of the objective, "no_progress" when it stopped far above it (no rounding explains that)."""
        if not self._stall.stalled(iteration, self.gap, self.rounding):
            return None
        return StopReason.STALLED if self.gap <= ROUNDING_LEVEL * self.rounding else StopReason.NO_PROGRESS

    def finish(
        self,
        solver: str,
        unit: str,
        stop_reason: StopReason,
        n_iter: int,
        *,
        warn: bool,
        cause: str,
        remedy: str,
        stacklevel: int = 3,
    ) -> None:
        """Warn (``warn``) when the solve ends uncertified — ``cause`` says why, ``remedy`` what to try — and
        log its end.  ``stacklevel`` points the warning at the solver's caller (3: the solver calls this)."""
        if warn and stop_reason == StopReason.STALLED:
            warnings.warn(
                f"{solver} stalled: the duality gap reached {self.gap:.3g} stops at float64's rounding of the "
                f"objective ({self.best_primal:.6g}): it no longer falls, or the working-set QP cannot be verified "
                f"below it, so C·tol = {self.target_gap:.3g} cannot be certified; the tolerance attainable here is "
                f"about tol = {max(self.gap, self.rounding) / self.C:.1g}",
                ConvergenceWarning,
                stacklevel=stacklevel,
            )
        elif warn and stop_reason == StopReason.NO_PROGRESS:
            warnings.warn(
                f"{solver} made no progress: the duality gap stayed at {self.gap:.3g} for {STALL_ITERATIONS} "
                f"{unit}, far above float64's rounding of the objective ({self.rounding:.3g}), so C·tol = "
                f"{self.target_gap:.3g} was not certified and the returned point may be far from the optimum; "
                "this is a solver failure, not a tolerance issue: please report it with the data",
                ConvergenceWarning,
                stacklevel=stacklevel,
            )
        elif warn and stop_reason not in (StopReason.CONVERGED, StopReason.CALLBACK):
            warnings.warn(
                f"{solver} stopped uncertified: {cause}, with duality gap {self.gap:.3g} > C·tol = "
                f"{self.target_gap:.3g} (relative {self.gap / max(self.best_primal, 1e-300):.3g}); {remedy}",
                ConvergenceWarning,
                stacklevel=stacklevel,
            )
        log_end(solver, unit, stop_reason, n_iter, self.best_primal, self.gap, self.target_gap)


def log_end(solver: str, unit: str, stop_reason: str, count: int, primal: float, gap: float, target: float) -> None:
    """The one INFO line a solve ends with."""
    logger.info(
        "%s %s after %d %s: primal %.6g, gap %.3g (C·tol %.3g)",
        solver,
        "converged" if stop_reason == StopReason.CONVERGED else f"stopped ({stop_reason})",
        count,
        unit,
        primal,
        gap,
        target,
    )


def check_finite(values: np.ndarray, what: str, iteration: int) -> None:
    """Refuse non-finite planes, losses or objectives: the features are beyond float64's range."""
    if not np.all(np.isfinite(values)):
        raise ValueError(
            f"expected finite values in {what} (iteration {iteration}), got NaN or infinity instead: "
            "the features are too large for float64 arithmetic (largest finite entry "
            f"{np.max(np.abs(values[np.isfinite(values)]), initial=0.0):.3g}); rescale X"
        )
