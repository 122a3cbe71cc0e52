"""The working-set QP of the 1-slack cutting plane.

With cutting planes g_k = Ψ(Y*) − Ψ(Ŷ_k) and losses Δ_k the problem is

    min_w,ξ  ½‖w‖² + C ξ   s.t.  w·g_k ≥ Δ_k − ξ,  ξ ≥ 0,  A w ≤ b (optional).

Without linear constraints it is solved in its dual over α ∈ R^K,

    max  Σ_k α_k Δ_k − ½ ‖Gα‖²   s.t.  α ≥ 0,  Σ_k α_k ≤ C,    w = Gα,

whose size is the number of planes K (small) whatever the dimension of w,
with the Gram matrix GᵀG kept up to date one plane at a time.  With linear
constraints the dual would grow one dense variable per constraint (HOB-SVM
has one per pairwise weight, APPX one per easy sample), so the primal in
(w, ξ) is solved instead: d + 1 variables, a diagonal Hessian and sparse
constraint rows.  Both go to Clarabel, an interior-point solver.
"""
from __future__ import annotations

import logging

import clarabel
import numpy as np
import scipy.sparse as sp

from rankopt.engine.problem import LinearConstraints

logger = logging.getLogger(__name__)

#: Tolerances of the first attempt.  Clarabel's 1e-8 defaults leave w
#: accurate to ~1e-4 only (GᵀG is badly scaled); when the tight attempt
#: stalls numerically the solve is repeated at the defaults.
_TIGHT = {"tol_gap_abs": 1e-10, "tol_gap_rel": 1e-10, "tol_feas": 1e-10, "tol_ktratio": 1e-8}
_STALLED = ("InsufficientProgress", "NumericalError", "MaxIterations")


class QPSolveError(RuntimeError):
    """The QP solver did not reach an optimum."""


class WorkingSetQP:
    """Holds the cutting planes and solves the QP over them."""

    def __init__(self, C: float, n_features: int, linear_constraints: LinearConstraints | None = None):
        self.C = float(C)
        self.n_features = n_features
        self.constraints = linear_constraints
        self._planes: list[np.ndarray] = []
        self._losses: list[float] = []
        self._gram = np.zeros((0, 0))

    @property
    def n_planes(self) -> int:
        return len(self._planes)

    def add(self, plane: np.ndarray, loss: float) -> None:
        """Add the cutting plane w·plane ≥ loss − ξ."""
        plane = np.asarray(plane, dtype=np.float64)
        k = self.n_planes
        if self.constraints is None:  # only the dual needs the Gram matrix
            gram = np.empty((k + 1, k + 1))
            gram[:k, :k] = self._gram
            if k:
                column = np.stack(self._planes) @ plane
                gram[:k, k] = column
                gram[k, :k] = column
            gram[k, k] = plane @ plane
            self._gram = gram
        self._planes.append(plane)
        self._losses.append(float(loss))

    def slack(self, w: np.ndarray) -> float:
        """ξ(w) over the working set: max(0, max_k Δ_k − w·g_k)."""
        if not self._planes:
            return 0.0
        return max(0.0, float(np.max(np.asarray(self._losses) - np.stack(self._planes) @ w)))

    def solve(self) -> tuple[np.ndarray, float]:
        """The optimal w and the optimal objective ½‖w‖² + C ξ of the working set."""
        k = self.n_planes
        if self.constraints is None:
            if k == 0:
                return np.zeros(self.n_features), 0.0
            return self._solve_dual()
        if k == 0 and np.all(self.constraints.b >= 0):
            return np.zeros(self.n_features), 0.0  # w = 0 is feasible, hence optimal
        return self._solve_primal()

    def _solve_dual(self):
        k = self.n_planes
        losses = np.asarray(self._losses)
        # α ≥ 0 (−α + s = 0, s ≥ 0) and Σα ≤ C.
        A = sp.vstack([-sp.identity(k), sp.csr_matrix(np.ones((1, k)))]).tocsc()
        b = np.concatenate([np.zeros(k), [self.C]])
        alpha = np.maximum(self._clarabel(sp.triu(sp.csc_matrix(self._gram)).tocsc(), -losses, A, b), 0.0)
        w = np.stack(self._planes).T @ alpha
        return w, float(alpha @ losses) - 0.5 * float(w @ w)

    def _solve_primal(self):
        d, k = self.n_features, self.n_planes
        constraints = self.constraints
        # Variables x = (w, ξ).  Rows: −g_k·w − ξ ≤ −Δ_k;  −ξ ≤ 0;  A w ≤ b.
        blocks = []
        if k:
            blocks.append(sp.hstack([sp.csr_matrix(-np.stack(self._planes)), sp.csr_matrix(-np.ones((k, 1)))]))
        blocks.append(sp.csr_matrix(([-1.0], ([0], [d])), shape=(1, d + 1)))
        blocks.append(sp.hstack([sp.csr_matrix(constraints.A), sp.csr_matrix((constraints.n_constraints, 1))]))
        A = sp.vstack(blocks).tocsc()
        b = np.concatenate([-np.asarray(self._losses), [0.0], constraints.b])
        P = sp.diags(np.concatenate([np.ones(d), [0.0]])).tocsc()
        q = np.concatenate([np.zeros(d), [self.C]])
        x = self._clarabel(P, q, A, b)
        w, xi = x[:d], max(0.0, float(x[d]))
        return w, 0.5 * float(w @ w) + self.C * xi

    def _clarabel(self, P, q, A, b) -> np.ndarray:
        """min ½xᵀPx + qᵀx s.t. Ax ≤ b, with one retry at default tolerances."""
        for tolerances in (_TIGHT, {}):
            settings = clarabel.DefaultSettings()
            settings.verbose = False
            for name, value in tolerances.items():
                setattr(settings, name, value)
            solution = clarabel.DefaultSolver(P, q, A, b, [clarabel.NonnegativeConeT(b.size)], settings).solve()
            status = str(solution.status)
            if "Infeasible" in status:
                raise QPSolveError(f"the linear constraints on w admit no solution (QP status {status})")
            if "Solved" in status:  # Solved or AlmostSolved
                return np.asarray(solution.x)
            if not any(s in status for s in _STALLED):
                break
            logger.debug("working-set QP stalled (%s) at tight tolerances; retrying", status)
        raise QPSolveError(f"working-set QP with {self.n_planes} planes ended with status {status}")
