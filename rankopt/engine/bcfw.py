"""Block-coordinate Frank–Wolfe over queries (Lacoste-Julien, Jaggi, Schmidt & Pletscher, ICML 2013).

For a problem whose slack is a sum over independent blocks (queries),
P(w) = ½‖w‖² + C Σ_b H_b(w) with H_b(w) = max_y Δ_b(y) − w·g_b(y), the dual
is a product of simplices, one per block: w = Σ_b w_b with w_b a convex
combination of the points C·g_b(y), and ℓ = Σ_b ℓ_b the same combination of
C·Δ_b(y)/C.  Each step picks a block, calls its oracle at the current w (one
query's scores and inference: no pass over the data), and moves that block
towards the oracle's corner with the exact line search of the dual
D = C ℓ − ½‖w‖².  Block b's Frank–Wolfe gap is C H_b(w) − (C ℓ_b − w·w_b),
and the gaps sum to P(w) − D.

Stopping is certified as in the cutting plane: after every pass the exact
primal objective is priced by one batched oracle call at the current w and
at the weighted average of the iterates (the paper's averaging, whose dual
point is feasible too), against the best of the two dual values; the solve
stops when the best primal minus the best dual is at most C·tol.
"""

from __future__ import annotations

import logging
import time

import numpy as np

from rankopt.engine.certificate import Certificate, IterationRecord, SolveResult, StopReason, check_finite
from rankopt.engine.problem import BlockProblem

logger = logging.getLogger(__name__)

__all__ = ["solve_bcfw"]

#: Block parts (n_blocks × n_features float64) beyond this many bytes are refused: use the cutting plane.
MAX_BLOCK_BYTES = 2**30
#: The blocks are visited in a random order per pass, from this seed (the fit is deterministic).
SEED = 0


def solve_bcfw(
    problem: BlockProblem, C: float, *, tol: float = 1e-3, max_iter: int = 1000, warn: bool = True, callback=None
) -> SolveResult:
    """Solve ``problem`` to a duality gap of ``C·tol`` with at most ``max_iter`` passes over its blocks.

    The result is a :class:`~rankopt.engine.certificate.SolveResult`
    whose ``n_iter`` counts passes (each a block step per query plus the
    certifying oracle call) and whose history has one record per pass;
    ``callback(record, w)`` is called after each, and returning True stops
    the solve (``stop_reason="callback"``).
    """
    C = float(C)
    n_blocks, d = problem.n_blocks, problem.n_features
    if n_blocks * d * 8 > MAX_BLOCK_BYTES:
        raise ValueError(
            f"expected at most {MAX_BLOCK_BYTES // 8} block parts for the block-coordinate solver, got "
            f"{n_blocks} queries × {d} features instead; use the cutting plane"
        )
    psi_star = np.asarray(problem.ground_truth_feature(), dtype=np.float64)
    rng = np.random.default_rng(SEED)
    dual = _BlockDual(n_blocks, d)
    cert = Certificate(C, tol, best_w=dual.w.copy())
    history: list[IterationRecord] = []
    stop_reason = StopReason.MAX_ITER
    for iteration in range(1, max_iter + 1):
        start = time.perf_counter()
        dual.block_pass(problem, C, rng.permutation(n_blocks))
        elapsed = time.perf_counter() - start
        cert.raise_dual(C * dual.loss_sum - 0.5 * float(dual.w @ dual.w))
        cert.raise_dual(C * dual.average_loss - 0.5 * float(dual.average_w @ dual.average_w))
        for candidate in (dual.w, dual.average_w):
            constraint = problem.most_violated(candidate)
            plane = psi_star - np.asarray(constraint.feature, dtype=np.float64)
            check_finite(plane, "the most violated plane Ψ(X, Y*) − Ψ(X, Ŷ)", iteration)
            xi = max(0.0, float(constraint.loss) - float(candidate @ plane))
            primal = 0.5 * float(candidate @ candidate) + C * xi
            if primal < cert.best_primal:
                cert.best_primal, cert.best_w = primal, candidate.copy()
        record = IterationRecord(
            iteration=iteration,
            primal_objective=cert.best_primal,
            dual_objective=cert.best_dual,
            duality_gap=cert.gap,
            violation=cert.gap / C,
            n_planes=n_blocks,
            inference_seconds=elapsed,
        )
        history.append(record)
        logger.debug(
            "BCFW pass %d: primal %.6g dual %.6g gap %.3g", iteration, cert.best_primal, cert.best_dual, cert.gap
        )
        stop_requested = callback is not None and callback(record, cert.best_w)
        reason = cert.verdict() or (StopReason.CALLBACK if stop_requested else None)
        if reason is None:
            reason = cert.stalled(iteration)
        if reason is not None:
            stop_reason = reason
            break
    cause = f"{stop_reason} after {len(history)} passes"
    cert.finish(
        "block-coordinate Frank-Wolfe",
        "passes",
        stop_reason,
        len(history),
        warn=warn,
        cause=cause,
        remedy="increase max_iter or tol, or use the cutting plane",
    )
    return SolveResult(
        w=cert.best_w,
        n_iter=len(history),
        converged=stop_reason is StopReason.CONVERGED,
        history=history,
        stop_reason=stop_reason,
        primal_objective=cert.best_primal,
        duality_gap=cert.gap,
    )


class _BlockDual:
    """The dual point of BCFW: each block's part w_b of w and ℓ_b of ℓ, their sums, and the weighted
    average of the iterates (iterate k weighs k)."""

    def __init__(self, n_blocks: int, n_features: int):
        self.parts = np.zeros((n_blocks, n_features))  # w_b
        self.part_losses = np.zeros(n_blocks)  # ℓ_b (in units of Δ: the dual is C ℓ − ½‖w‖²)
        self.w, self.loss_sum = np.zeros(n_features), 0.0
        self.average_w, self.average_loss, self.steps = np.zeros(n_features), 0.0, 0

    def block_pass(self, problem: BlockProblem, C: float, order: np.ndarray) -> None:
        """One Frank–Wolfe step per block, in ``order``, each with the exact line search of the dual."""
        for block in order:
            plane, loss = problem.block_most_violated(int(block), self.w)
            corner, corner_loss = C * np.asarray(plane, dtype=np.float64), float(loss)
            direction = corner - self.parts[block]
            gap = C * (corner_loss - self.part_losses[block]) - float(self.w @ direction)
            norm2 = float(direction @ direction)
            if gap > 0.0 and norm2 > 0.0:
                step = min(1.0, gap / norm2)
                self.parts[block] += step * direction
                loss_change = step * (corner_loss - self.part_losses[block])
                self.part_losses[block] += loss_change
                self.loss_sum += loss_change
                self.w = self.w + step * direction
            self.steps += 1
            rho = 2.0 / (self.steps + 1.0)  # weighted averaging: iterate k weighs k
            self.average_w = (1.0 - rho) * self.average_w + rho * self.w
            self.average_loss = (1.0 - rho) * self.average_loss + rho * self.loss_sum
        # The sums again from the parts, so that running updates do not drift.
        self.w = self.parts.sum(axis=0)
        self.loss_sum = float(self.part_losses.sum())
