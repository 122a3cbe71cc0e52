"""The working-set QP of the 1-slack cutting plane, solved in its dual.

With cutting planes g_k = Ψ(Y*) − Ψ(Ŷ_k), losses Δ_k and constraints A w ≤ b,
the dual over α ∈ R^K, μ ∈ R^m is

    max  Σ_k α_k Δ_k − bᵀμ − ½ ‖Gα − Aᵀμ‖²   s.t.  α ≥ 0, μ ≥ 0, Σ_k α_k ≤ C,

and w = Gα − Aᵀμ.  Its size is K + m (K is the number of cutting planes,
small), whatever the dimension of w.  It is solved with Clarabel, an
interior-point solver that accepts the positive *semi*-definite Hessian.
"""
from __future__ import annotations

import clarabel
import numpy as np
import scipy.sparse as sp

from rankopt.engine.problem import LinearConstraints


class QPSolveError(RuntimeError):
    """The QP solver did not reach an optimum."""


class WorkingSetQP:
    """Holds the cutting planes and solves the dual QP over them."""

    def __init__(self, C: float, n_features: int, linear_constraints: LinearConstraints | None = None):
        self.C = float(C)
        self.n_features = n_features
        self.constraints = linear_constraints
        self._planes: list[np.ndarray] = []
        self._losses: list[float] = []
        self._gram = np.zeros((0, 0))
        if linear_constraints is not None:
            self._AAt = linear_constraints.A @ linear_constraints.A.T
            self._cross = np.zeros((0, linear_constraints.A.shape[0]))  # rows: (A g_k)ᵀ

    @property
    def n_planes(self) -> int:
        return len(self._planes)

    def add(self, plane: np.ndarray, loss: float) -> None:
        """Add the cutting plane w·plane ≥ loss − ξ."""
        plane = np.asarray(plane, dtype=np.float64)
        k = self.n_planes
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
        if self.constraints is not None:
            self._cross = np.vstack([self._cross, self.constraints.A @ plane])

    def slack(self, w: np.ndarray) -> float:
        """ξ(w) over the working set: max(0, max_k Δ_k − w·g_k)."""
        if not self._planes:
            return 0.0
        return max(0.0, float(np.max(np.asarray(self._losses) - np.stack(self._planes) @ w)))

    def solve(self) -> tuple[np.ndarray, float]:
        """The optimal w and the dual objective (= the working-set primal optimum)."""
        k = self.n_planes
        m = 0 if self.constraints is None else self.constraints.b.size
        if k == 0 and (m == 0 or np.all(self.constraints.b >= 0)):
            return np.zeros(self.n_features), 0.0  # w = 0 is feasible, hence optimal
        hessian = np.zeros((k + m, k + m))
        hessian[:k, :k] = self._gram
        linear = np.concatenate([-np.asarray(self._losses), np.zeros(m)])
        if m:
            hessian[:k, k:] = -self._cross
            hessian[k:, :k] = -self._cross.T
            hessian[k:, k:] = self._AAt
            linear[k:] = self.constraints.b
        n_vars = k + m
        # α ≥ 0, μ ≥ 0 (−z + s = 0, s ≥ 0) and Σα ≤ C.
        rows = [-sp.identity(n_vars)]
        b = [np.zeros(n_vars)]
        if k:
            rows.append(sp.csr_matrix(np.concatenate([np.ones(k), np.zeros(m)])))
            b.append([self.C])
        A = sp.vstack(rows).tocsc()
        b = np.concatenate(b)
        settings = clarabel.DefaultSettings()
        settings.verbose = False
        # Clarabel's 1e-8 defaults leave w accurate to ~1e-4 only (the dual's
        # Hessian GᵀG is badly scaled); 1e-10 costs nothing measurable here.
        settings.tol_gap_abs = settings.tol_gap_rel = settings.tol_feas = 1e-10
        settings.tol_ktratio = 1e-8
        solver = clarabel.DefaultSolver(
            sp.triu(sp.csc_matrix(hessian)).tocsc(), linear, A, b,
            [clarabel.NonnegativeConeT(b.size)], settings,
        )
        solution = solver.solve()
        status = str(solution.status)
        if "Infeasible" in status:
            # An unbounded dual means the primal has no w with A w <= b.
            raise QPSolveError(f"the linear constraints on w admit no solution (QP status {status})")
        if "Solved" not in status:  # Solved or AlmostSolved
            raise QPSolveError(f"working-set QP with {k} planes ended with status {status}")
        z = np.maximum(np.asarray(solution.x), 0.0)
        alpha, mu = z[:k], z[k:]
        w = np.stack(self._planes).T @ alpha if k else np.zeros(self.n_features)
        if m:
            w -= self.constraints.A.T @ mu
        dual = float(alpha @ np.asarray(self._losses)) - float(
            0.0 if not m else self.constraints.b @ mu
        ) - 0.5 * float(w @ w)
        return w, dual
