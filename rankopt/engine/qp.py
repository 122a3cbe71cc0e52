"""The working-set QP of the 1-slack cutting plane.

With cutting planes g_k = Ψ(Y*) − Ψ(Ŷ_k) and losses Δ_k the problem is

    min_w,ξ  ½‖w‖² + C ξ   s.t.  w·g_k ≥ Δ_k − ξ,  ξ ≥ 0,  A w ≤ b (optional).

It is solved in one of three forms, chosen by the shape of A w ≤ b:

* **No constraints**: the dual over α ∈ R^K (K planes, few),

      max  Σ_k α_k Δ_k − ½ ‖Gα‖²   s.t.  α ≥ 0,  Σ_k α_k ≤ C,    w = Gα,

  with the Gram matrix GᵀG kept up to date one plane at a time.
* **Bounds** lo ≤ w ≤ hi (every row of A has one non-zero; HOB-SVM's w₂ ≤ 0):
  the bound multipliers have a closed form, w = clip(Gα, lo, hi), and the dual
  stays in K variables (derivation in ``docs/maths.md``),

      max  D(α) = Σ_k α_k Δ_k − Σ_i h_i((Gα)_i)   s.t.  α ≥ 0,  Σ_k α_k ≤ C,

  h_i(u) = ½ clip(u)² + hi_i (u − hi_i)₊ − lo_i (lo_i − u)₊, a concave
  piecewise-quadratic D with gradient Δ − Gᵀ clip(Gα).  It is maximised by
  Newton steps: on the current piece (which coordinates are clipped) D is a
  quadratic, whose maximiser over the constraint set is found by the same QP
  solver, followed by an exact line search along the step.  Each step
  increases D, and the search ends when the step stays on its piece (the
  KKT conditions of D then hold).  The previous solve's α is the start, so a
  new plane usually costs one or two QPs in K variables instead of one in
  d + 1 variables with K dense rows.  When a piece's Gram is too degenerate
  for the active-set solver, the piece is solved from the planes themselves,
  as a primal in their range (``_range_simplex_qp``).
* **General rows** (APPX's hard margins): the dual would grow one dense
  variable per row, so the primal in (w, ξ) is solved: d + 1 variables, a
  diagonal Hessian and sparse constraint rows.

The duals are small dense QPs over {α ≥ 0, Σα ≤ C} and go to DAQP, a dual
active-set solver; the primal goes to Clarabel, an interior-point solver that
takes sparse constraint rows.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import clarabel
import daqp
import numpy as np
import scipy.sparse as sp

from rankopt.engine.problem import LinearConstraints

__all__ = ["InfeasibleConstraintsError", "QPSolution", "QPSolveError", "WorkingSetQP", "box_bounds"]

logger = logging.getLogger(__name__)

#: Tolerances of the first attempt.  Clarabel's 1e-8 defaults leave w
#: accurate to ~1e-4 only (GᵀG is badly scaled); when the tight attempt
#: stalls numerically the solve is repeated at the defaults.
_TIGHT = {"tol_gap_abs": 1e-10, "tol_gap_rel": 1e-10, "tol_feas": 1e-10, "tol_ktratio": 1e-8}
_STALLED = ("InsufficientProgress", "NumericalError", "MaxIterations")
#: Newton steps of the bounded dual before it gives up (and the primal is solved).
_MAX_NEWTON_STEPS = 50
#: After the dual form fails, the primal goes first and the dual is retried every this many solves.
_DUAL_RETRY_EVERY = 10
#: A Newton step raising D by less than this (relative) ends the search:
#: the model QPs are themselves solved to ~1e-10.
_NEWTON_RTOL = 1e-13
#: A multiplier below this fraction of Σα counts as zero (the active-set dual
#: sets inactive planes to exactly 0; the interior-point primal's row
#: multipliers leave them at ~1e-12 of it, active ones stay above ~1e-5).
_INACTIVE_FRACTION = 1e-8


#: Relative precision every solver reaches on a healthy working set (Clarabel at
#: its tight tolerances: ~5e-11; DAQP with the face polish: ~1e-15): an answer
#: within it of its own dual is an optimum.
SOLVER_RTOL = 1e-9


class QPSolveError(RuntimeError):
    """The QP solver did not reach an optimum."""


class InfeasibleConstraintsError(QPSolveError):
    """The linear constraints on w admit no solution: no solver can help, the problem is wrong."""


@dataclass(frozen=True)
class QPSolution:
    """A working-set solve and its own certificate.

    ``dual`` is the dual objective of a feasible dual point, so it is a lower
    bound on the working-set optimum — and, the working set being a
    relaxation, on the full problem's — however inexact the solver was.
    ``primal`` is ½‖w‖² + C ξ_ws(w) at the returned w, an upper bound on the
    working-set optimum.  Their difference ``gap`` bounds how far both are
    from it, without trusting the solver's exit status.
    """

    w: np.ndarray
    dual: float
    primal: float
    #: Which form and solver produced it: "dual", "bounded dual", "primal" or "empty".
    solver: str

    @property
    def gap(self) -> float:
        return self.primal - self.dual

    def verified(self, gap_tol: float) -> bool:
        """Whether the gap is at most ``gap_tol`` plus what the solvers' own
        precision leaves (``SOLVER_RTOL`` of the objective)."""
        return self.gap <= gap_tol + SOLVER_RTOL * max(abs(self.primal), abs(self.dual))


def box_bounds(constraints: LinearConstraints | None, n_features: int):
    """(lo, hi) if A w ≤ b is a set of bounds on single coordinates, else None.

    A row without a non-zero and b < 0, or bounds with lo > hi, admit no w;
    :meth:`WorkingSetQP.solve` reports that as the solver's infeasibility.
    """
    if constraints is None:
        return None
    A = sp.csr_matrix(constraints.A)
    A.eliminate_zeros()
    per_row = np.diff(A.indptr)
    if np.any(per_row > 1):
        return None
    rows = np.flatnonzero(per_row == 1)
    coef, column = A.data, A.indices
    limit = constraints.b[rows] / coef
    lo = np.full(n_features, -np.inf)
    hi = np.full(n_features, np.inf)
    np.minimum.at(hi, column[coef > 0], limit[coef > 0])
    np.maximum.at(lo, column[coef < 0], limit[coef < 0])
    if np.any(constraints.b[per_row == 0] < 0):
        lo[:], hi[:] = np.inf, -np.inf  # 0 ≤ b fails whatever w is
    return lo, hi


class WorkingSetQP:
    """Holds the cutting planes and solves the QP over them.

    Parameters
    ----------
    C : float
    n_features : int
    linear_constraints : LinearConstraints, optional
    prune_after : int or None, default 50
        Drop a plane whose multiplier has been zero at this many consecutive
        optima (as SVMstruct does), so that long runs keep the QP small.  A
        dropped plane was inactive, so the optimum it leaves is the optimum
        of the smaller set: the dual objective still never decreases, which
        is what the cutting plane's convergence rests on.  If the plane
        becomes violated again the oracle finds it again.  None keeps every
        plane.
    """

    def __init__(
        self,
        C: float,
        n_features: int,
        linear_constraints: LinearConstraints | None = None,
        prune_after: int | None = 50,
    ):
        self.C = float(C)
        self.n_features = n_features
        self.constraints = linear_constraints
        self.prune_after = prune_after
        self._bounds = box_bounds(linear_constraints, n_features)
        self._plane_rows = np.zeros((0, n_features))  # capacity grows by doubling
        self._losses = np.zeros(0)
        self._idle = np.zeros(0, dtype=np.intp)  # consecutive optima with α_k = 0
        self._k = 0
        self._gram = np.zeros((0, 0))
        self._alpha = np.zeros(0)  # the bounded dual's last optimum, its next start
        self._dual_failures = 0  # consecutive solves whose dual form failed or was skipped
        #: Bounded-dual solves left whose pieces skip DAQP for :func:`_range_simplex_qp` (after a failure).
        self._active_set_skips = 0
        self.n_pruned = 0
        #: Counts the planes added or discarded: a solution found at one revision is the optimum of
        #: the working set only while the revision stands (pruning drops inactive planes: no change).
        self.revision = 0

    @property
    def n_planes(self) -> int:
        return self._k

    @property
    def planes(self) -> np.ndarray:
        """The planes as rows, shape (K, n_features) (a view)."""
        return self._plane_rows[: self._k]

    @property
    def losses(self) -> np.ndarray:
        return self._losses[: self._k]

    @property
    def _needs_gram(self) -> bool:
        return self.constraints is None or self._bounds is not None

    def add(self, plane: np.ndarray, loss: float) -> bool:
        """Add the cutting plane w·plane ≥ loss − ξ; False (nothing added) when the set holds it already.

        An exact copy of a plane adds nothing to the relaxation but makes its
        Gram matrix singular, which active-set solvers handle worst; cuts at
        nearby points (the optimized cutting plane's) return the same output
        more often than cuts at working-set optima do.
        """
        plane = np.asarray(plane, dtype=np.float64)
        k = self._k
        if k and self.has_plane(plane, loss):
            return False
        if k == self._plane_rows.shape[0]:
            capacity = max(8, 2 * k)
            rows = np.empty((capacity, self.n_features))
            rows[:k] = self._plane_rows[:k]
            losses = np.empty(capacity)
            losses[:k] = self._losses[:k]
            idle = np.empty(capacity, dtype=np.intp)
            idle[:k] = self._idle[:k]
            self._plane_rows, self._losses, self._idle = rows, losses, idle
        if self._needs_gram:
            gram = np.empty((k + 1, k + 1))
            gram[:k, :k] = self._gram
            column = self.planes @ plane
            gram[:k, k] = column
            gram[k, :k] = column
            gram[k, k] = plane @ plane
            self._gram = gram
        self._plane_rows[k] = plane
        self._losses[k] = float(loss)
        self._idle[k] = 0
        self._k = k + 1
        self.revision += 1
        return True

    def discard(self, plane: np.ndarray, loss: float) -> bool:
        """Remove the plane ``add`` took with this loss; False when the set does not hold it.

        A caller that adds a plane and then rejects the re-solve discards the plane, so that the
        solution it keeps is the optimum of the working set again.
        """
        held = self._index_of(np.asarray(plane, dtype=np.float64), loss)
        if held is None:
            return False
        self._keep(np.delete(np.arange(self._k), held))
        self.revision += 1
        return True

    def has_plane(self, plane: np.ndarray, loss: float) -> bool:
        """Whether the working set holds exactly this plane with this loss."""
        return self._index_of(plane, loss) is not None

    def _index_of(self, plane: np.ndarray, loss: float) -> int | None:
        same_loss = np.flatnonzero(self._losses[: self._k] == float(loss))
        return next((int(j) for j in same_loss if np.array_equal(self._plane_rows[j], plane)), None)

    def _keep(self, keep: np.ndarray) -> None:
        """Keep only the planes at the indices ``keep`` (increasing), with their Gram entries and multipliers."""
        k, n_keep = self._k, keep.size
        self._plane_rows[:n_keep] = self._plane_rows[keep]
        self._losses[:n_keep] = self._losses[keep]
        self._idle[:n_keep] = self._idle[keep]
        if self._needs_gram:
            self._gram = self._gram[np.ix_(keep, keep)]
        if self._alpha.size == k:
            self._alpha = self._alpha[keep]
        self._k = n_keep

    def _record_multipliers(self, alpha: np.ndarray) -> None:
        """Count optima at which each plane was inactive; drop the long-idle ones."""
        if self.prune_after is None:
            return
        k = self._k
        inactive = alpha <= _INACTIVE_FRACTION * float(alpha.sum())
        idle = self._idle[:k]
        idle[inactive] += 1
        idle[~inactive] = 0
        drop = idle >= self.prune_after
        if not drop.any():
            return
        keep = np.flatnonzero(~drop)
        self._keep(keep)
        self.n_pruned += k - keep.size
        logger.debug("dropped %d planes inactive at %d consecutive optima", k - keep.size, self.prune_after)

    def slack(self, w: np.ndarray) -> float:
        """ξ(w) over the working set: max(0, max_k Δ_k − w·g_k)."""
        if not self._k:
            return 0.0
        return max(0.0, float(np.max(self.losses - self.planes @ w)))

    def primal_value(self, w: np.ndarray) -> float:
        """½‖w‖² + C ξ_ws(w), or inf when w breaks A w ≤ b beyond rounding."""
        if self.constraints is not None:
            A, b = self.constraints.A, self.constraints.b
            excess = np.asarray(A @ w - b).ravel()
            # what rounding can leave in A w: a few ulps of each row's |A_i|·|w|
            allowance = np.asarray(1e-9 * (abs(A) @ np.abs(w) + np.abs(b))).ravel()
            if np.any(excess > allowance):
                return np.inf
        return 0.5 * float(w @ w) + self.C * self.slack(w)

    def solve(self, gap_tol: float = 0.0) -> QPSolution:
        """The working-set optimum, verified by its own duality gap.

        Each form's solver is tried in turn (the dual forms first, the primal
        as the last resort); an answer counts when its :class:`QPSolution`
        gap is at most ``gap_tol`` plus rounding.  When none does, the
        answer with the smallest gap is returned and the caller decides (the
        cutting plane then stops uncertified); a solver that raises is
        logged and skipped.  :class:`QPSolveError` is raised only when the
        constraints admit no w or no solver returned anything.
        """
        k = self._k
        if self._bounds is not None and np.any(self._bounds[0] > self._bounds[1]):
            raise InfeasibleConstraintsError("the linear constraints on w admit no solution (bounds with lo > hi)")
        if k == 0 and (self.constraints is None or np.all(self.constraints.b >= 0)):
            # w = 0 is feasible, hence optimal
            return QPSolution(w=np.zeros(self.n_features), dual=0.0, primal=0.0, solver="empty")
        if self.constraints is None:
            attempts = [("dual", self._solve_dual), ("primal", self._solve_primal)]
        elif self._bounds is not None:
            attempts = [("bounded dual", self._solve_bounded_dual), ("primal", self._solve_primal)]
        else:
            attempts = [("primal", self._solve_primal)]
        if self._dual_failures and self._dual_failures % _DUAL_RETRY_EVERY:
            # The dual form failed at the last solves: planes are only added (or pruned), so it
            # would most likely fail again, at the cost of DAQP's iteration limit. It is retried
            # every _DUAL_RETRY_EVERY solves, and stays the fallback after the primal.
            attempts = attempts[::-1]
        best = None
        failures = []
        for name, attempt in attempts:
            try:
                w, dual = attempt()
            except InfeasibleConstraintsError:
                raise
            except QPSolveError as exc:
                failures.append(f"{name}: {exc}")
                logger.info("working-set QP with %d planes: the %s failed (%s)", k, name, exc)
                self._alpha = np.zeros(0)
                continue
            solution = QPSolution(w=w, dual=dual, primal=self.primal_value(w), solver=name)
            if solution.verified(gap_tol):
                self._count_dual_outcome(attempts, name)
                return solution
            failures.append(f"{name}: gap {solution.gap:.3g} > {gap_tol:.3g}")
            logger.info(
                "working-set QP with %d planes: the %s answer fails its optimality check "
                "(primal %.10g, dual %.10g, gap %.3g > %.3g)",
                k,
                name,
                solution.primal,
                solution.dual,
                solution.gap,
                gap_tol,
            )
            if best is None or solution.gap < best.gap:
                best = solution
            self._alpha = np.zeros(0)  # the next form starts afresh
        self._count_dual_outcome(attempts, None)
        if best is None:
            raise QPSolveError(f"working-set QP with {k} planes: every solver failed ({'; '.join(failures)})")
        return best

    def _count_dual_outcome(self, attempts, verified_by) -> None:
        """Count consecutive solves in which the dual form was tried (or skipped) without success."""
        if len(attempts) < 2:
            return
        if verified_by is not None and verified_by != "primal":
            self._dual_failures = 0
        else:
            self._dual_failures += 1

    # -------------------------------------------------------------- dual forms

    def _simplex_qp(self, hessian: np.ndarray, linear: np.ndarray) -> np.ndarray:
        """argmax_α linear·α − ½ αᵀ hessian α  s.t.  α ≥ 0, Σα ≤ C.

        Solved for γ_k = α_k / σ_k with σ_k = min(C, |linear_k| / hessian_kk), the
        size of plane k's optimal α on its own, and the objective divided by
        κ = max_k σ_k |linear_k| (a diagonal, Jacobi scaling): the solver then
        sees hessian and linear terms ≤ 1 whatever C and the planes' norms
        (HOAP-SVM's C ~ 10⁷ against planes ~ 10⁻³; HOB-SVM's planes at η = 100
        differ in norm by 10⁵), and its absolute tolerances mean the same
        thing for every problem.
        """
        k = linear.size
        if k == 0:
            return np.zeros(0)
        if not np.any(linear > 0.0):  # linear·α − ½αᵀHα ≤ linear·α ≤ 0 for α ≥ 0: α = 0 is optimal
            return np.zeros(k)
        C = self.C
        diagonal = np.diag(hessian)
        size = np.maximum(np.abs(linear), 1e-12 * float(np.max(np.abs(linear))))
        with np.errstate(divide="ignore"):
            sigma = np.where(diagonal > 0.0, np.minimum(C, size / np.where(diagonal > 0.0, diagonal, 1.0)), C)
        kappa = float(np.max(sigma * np.abs(linear)))
        H = hessian * np.outer(sigma, sigma / kappa)
        f = linear * (-sigma / kappa)
        gamma = _dense_simplex_qp(H, f, sigma / C)
        alpha = sigma * gamma
        total = alpha.sum()
        if total > C:  # the solver's feasibility tolerance
            alpha *= C / total
        return _polish(hessian, linear, alpha, C)

    def _solve_dual(self):
        losses = self.losses
        alpha = self._simplex_qp(self._gram, losses)
        w = self.planes.T @ alpha
        value = float(alpha @ losses) - 0.5 * float(w @ w)
        self._record_multipliers(alpha)
        return w, value

    def _bounded_dual_value(self, alpha, u):
        """D(α) and w = clip(u) for u = Gα (see the module docstring)."""
        lo, hi = self._bounds
        w = np.clip(u, lo, hi)
        above, below = u > hi, u < lo
        penalty = float(hi[above] @ (u[above] - hi[above])) - float(lo[below] @ (lo[below] - u[below]))
        return float(alpha @ self.losses) - 0.5 * float(w @ w) - penalty, w

    def _solve_bounded_dual(self):
        lo, hi = self._bounds
        G = self.planes  # rows g_k
        losses = self.losses
        alpha = np.zeros(self._k)
        alpha[: self._alpha.size] = self._alpha
        u = G.T @ alpha
        value, w = self._bounded_dual_value(alpha, u)
        # After DAQP failed on a piece, the pieces of the next solves go to the range form directly
        # (the degeneracy is in the planes, which stay), with DAQP retried every _DUAL_RETRY_EVERY solves.
        skip_active_set = self._active_set_skips > 0
        self._active_set_skips = max(0, self._active_set_skips - 1)
        for _ in range(_MAX_NEWTON_STEPS):
            above, below = u > hi, u < lo
            clipped = above | below
            # On this piece D(α) = αᵀ(Δ − G_c w_c) − ½ αᵀ G_f G_fᵀ α + const,
            # f the free coordinates, c the clipped ones (w_c at its bound).
            G_clipped = G[:, clipped]
            linear = losses - G_clipped @ w[clipped]
            target = None
            if not skip_active_set:
                try:
                    target = self._simplex_qp(self._gram - G_clipped @ G_clipped.T, linear)
                except QPSolveError as exc:
                    logger.info("bounded dual: the active-set piece QP failed (%s); solving it in range(G)", exc)
                    skip_active_set, self._active_set_skips = True, _DUAL_RETRY_EVERY - 1
            if target is None:
                target = _range_simplex_qp(G[:, ~clipped], linear, self.C)
            direction = target - alpha
            v = G.T @ direction
            t = _line_search(float(direction @ losses), u, v, lo, hi)
            if t <= 0.0:
                break
            new_alpha = alpha + t * direction
            new_u = u + t * v if t < 1.0 else G.T @ target
            new_value, new_w = self._bounded_dual_value(new_alpha, new_u)
            gain = new_value - value
            if gain < 0.0:  # rounding of the line search near the optimum
                break
            alpha, u, value, w = new_alpha, new_u, new_value, new_w
            stayed = t >= 1.0 and np.array_equal(u > hi, above) and np.array_equal(u < lo, below)
            if stayed or gain <= _NEWTON_RTOL * max(1.0, abs(value)):
                break
        else:
            raise QPSolveError(f"bounded dual: no convergence in {_MAX_NEWTON_STEPS} Newton steps")
        self._alpha = alpha
        self._record_multipliers(alpha)
        return w, value

    # ------------------------------------------------------------- primal form

    def _solve_primal(self):
        d, k = self.n_features, self._k
        constraints = self.constraints
        # Variables x = (w, ξ).  Rows: −g_k·w − ξ ≤ −Δ_k;  −ξ ≤ 0;  A w ≤ b.
        blocks = []
        if k:
            blocks.append(sp.hstack([sp.csr_matrix(-self.planes), sp.csr_matrix(-np.ones((k, 1)))]))
        blocks.append(sp.csr_matrix(([-1.0], ([0], [d])), shape=(1, d + 1)))
        bounds = [-self.losses, np.zeros(1)]
        if constraints is not None:
            blocks.append(sp.hstack([sp.csr_matrix(constraints.A), sp.csr_matrix((constraints.n_constraints, 1))]))
            bounds.append(constraints.b)
        A = sp.vstack(blocks).tocsc()
        b = np.concatenate(bounds)
        P = sp.diags(np.concatenate([np.ones(d), [0.0]])).tocsc()
        q = np.concatenate([np.zeros(d), [self.C]])
        x, multipliers = _clarabel(P, q, A, b, f"working-set QP with {k} planes", constraints is not None)
        w = x[:d]
        alpha = np.maximum(multipliers[:k], 0.0)
        dual = self._lagrangian_dual(alpha, np.maximum(multipliers[k + 1 :], 0.0))
        self._record_multipliers(alpha)  # may drop planes: after the dual, which uses them all
        return w, dual

    def _lagrangian_dual(self, alpha: np.ndarray, mu: np.ndarray) -> float:
        """The dual objective at plane multipliers α and constraint multipliers μ.

        Minimising the Lagrangian over (w, ξ) gives w = Gᵀα − Aᵀμ and needs
        Σα ≤ C; α is scaled onto that set first, so the value is that of a
        feasible dual point — a lower bound whatever the solver's accuracy:
        Σ α_k Δ_k − μ·b − ½‖Gᵀα − Aᵀμ‖².
        """
        total = float(alpha.sum())
        if total > self.C:
            alpha = alpha * (self.C / total)
        v = self.planes.T @ alpha
        value = float(alpha @ self.losses)
        if self.constraints is not None and mu.size:
            v = v - self.constraints.A.T @ mu
            value -= float(mu @ self.constraints.b)
        return value - 0.5 * float(v @ v)


def _clarabel(P, q, A, b, what: str, constraints_can_be_infeasible: bool) -> tuple[np.ndarray, np.ndarray]:
    """min ½xᵀPx + qᵀx s.t. Ax ≤ b, with one retry at default tolerances: (x, row multipliers).

    Cutting planes alone are always feasible (ξ large enough): an infeasibility
    report is then numerical trouble, handled as a failed solve.
    """
    for tolerances in (_TIGHT, {}):
        settings = clarabel.DefaultSettings()
        settings.verbose = False
        for name, value in tolerances.items():
            setattr(settings, name, value)
        solution = clarabel.DefaultSolver(P, q, A, b, [clarabel.NonnegativeConeT(b.size)], settings).solve()
        status = str(solution.status)
        if "Infeasible" in status and constraints_can_be_infeasible:
            raise InfeasibleConstraintsError(f"the linear constraints on w admit no solution (QP status {status})")
        if "Solved" in status:  # Solved or AlmostSolved
            return np.asarray(solution.x), np.asarray(solution.z)
        if not any(s in status for s in _STALLED):
            break
        logger.debug("%s stalled (%s) at tight tolerances; retrying", what, status)
    raise QPSolveError(f"{what} ended with status {status}")


#: DAQP's stand-in for an absent bound.
_NO_BOUND = 1e30


def _dense_simplex_qp(H: np.ndarray, f: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """argmin_γ ½ γᵀHγ + fᵀγ  s.t.  γ ≥ 0, weights·γ ≤ 1, for a small dense PSD H.

    DAQP, a dual active-set solver, ends on an exact vertex of the active
    set where an interior-point solver stalls on near-degenerate Gram
    matrices (nearly parallel planes of very different norms, as HOB-SVM's
    at η = 100 are).  A singular H needs its proximal iterations, and a
    working set with about as many planes as features has one; DAQP's
    automatic choice (ε < 0) then runs into its iteration limit (10⁴
    iterations, ~0.13 s at 80 planes) before the proximal retry succeeds.
    So they are forced (ε = 10⁻⁶) from the first try, the automatic choice
    being the retry (docs/engine-notes.md, "The working-set QP");
    :func:`_polish` then makes the ε-optimal answer exact on its face.  Both failing raises
    :class:`QPSolveError`, and :meth:`WorkingSetQP.solve` then solves the
    primal.
    """
    k = f.size
    bupper = np.concatenate([np.full(k, _NO_BOUND), [1.0]])
    blower = np.concatenate([np.zeros(k), [-_NO_BOUND]])
    flags = []
    for eps_prox in (1e-6, -1.0):
        gamma, _, exitflag, _ = daqp.solve(
            np.ascontiguousarray(H),
            np.ascontiguousarray(f),
            np.ascontiguousarray(weights[None, :]),
            bupper,
            blower,
            np.zeros(k + 1, dtype=np.intc),
            eps_prox=eps_prox,
            eta_prox=1e-12,
            primal_tol=1e-10,
        )
        if exitflag == 1:
            return np.maximum(np.asarray(gamma), 0.0)
        flags.append(exitflag)
    raise QPSolveError(f"working-set dual with {k} planes: DAQP ended with exit flags {flags}")


def _range_simplex_qp(rows: np.ndarray, linear: np.ndarray, C: float) -> np.ndarray:
    """argmax_α linear·α − ½‖rowsᵀα‖²  s.t.  α ≥ 0, Σα ≤ C, from the planes themselves rather than their Gram.

    The dual solvers see H = rows·rowsᵀ, whose condition number is the
    square of the planes': HOAP-SVM's working sets on Cora (98 planes in
    4,299 features, norms 0.02 … 34, C ~ 2·10⁷) give H eigenvalues from
    2·10⁻¹⁰ to 3·10³, and DAQP runs into its iteration limit on every
    proximal weight.  This QP's primal, min ½‖v‖² + C ξ s.t. rows·v ≥
    linear − ξ, ξ ≥ 0, has its optimum v = rowsᵀα in the planes' range, so
    with rowsᵀ = Q R (thin QR, r ≤ K columns) it is the QP in z = Qᵀv,

        min ½‖z‖² + C ξ   s.t.   Rᵀz + ξ ≥ linear,  ξ ≥ 0,

    with r + 1 variables, an identity Hessian and R as ill-conditioned as the
    planes only.  Clarabel solves it; α is its row multipliers, put on
    {α ≥ 0, Σα ≤ C} (the caller prices α exactly, so an inexact α can only
    cost optimality, never the bound).
    """
    k = linear.size
    if k == 0:
        return np.zeros(0)
    R = np.asarray(np.linalg.qr(rows.T, mode="r"))  # rowsᵀ = Q R, R of shape (min(d, K), K); Q is not needed
    r = R.shape[0]
    rows_z = np.hstack([-R.T, -np.ones((k, 1))])
    nonnegative_slack = np.append(np.zeros(r), -1.0)[None, :]
    A = sp.csc_matrix(np.vstack([rows_z, nonnegative_slack]))
    b = np.append(-np.asarray(linear, dtype=np.float64), 0.0)
    P = sp.diags(np.append(np.ones(r), 0.0)).tocsc()
    q = np.append(np.zeros(r), C)
    _, multipliers = _clarabel(P, q, A, b, f"working-set QP in the range of {k} planes", False)
    alpha = np.maximum(multipliers[:k], 0.0)
    total = float(alpha.sum())
    if total > C:
        alpha *= C / total
    return alpha


def _polish(hessian: np.ndarray, linear: np.ndarray, alpha: np.ndarray, C: float) -> np.ndarray:
    """The exact optimum on the face ``alpha`` points at, if it is better.

    The active-set solver is exact on its active set, but with a singular
    Gram matrix (more planes than dimensions, repeated planes) it runs
    proximal iterations, whose result is only ε-optimal in objective: α (and
    w) accurate to ~√ε.  On the face it identifies (the planes with
    α_k > 0, and Σα = C or not) the optimality conditions are linear:
    H_AA α_A + λ 1 = linear_A with Σ α_A = C, or H_AA α_A = linear_A.  Their
    solution replaces α when it is feasible and no worse in objective, so a
    wrong face guess can only leave α as it was.
    """
    total = float(alpha.sum())
    if total <= 0.0:
        return alpha
    active = np.flatnonzero(alpha > _INACTIVE_FRACTION * total)
    H = hessian[np.ix_(active, active)]
    c = linear[active]
    on_sum = total >= C * (1.0 - 1e-7)
    if on_sum:
        n = active.size
        system = np.zeros((n + 1, n + 1))
        system[:n, :n] = H
        system[:n, n] = system[n, :n] = 1.0
        rhs = np.append(c, C)
    else:
        n, system, rhs = active.size, H, c

    def feasible(x):
        return np.all(np.isfinite(x)) and not np.any(x < 0.0) and x.sum() <= C * (1.0 + 1e-12)

    # Any solution of the face's optimality conditions is a face optimum (a singular face has an affine
    # set of them, all of one objective): an LU solve, 5-10 times cheaper than the least-squares one at
    # tens of planes, is taken when it solves the system and is feasible; otherwise the minimum-norm
    # least-squares solution, which is what a singular face needs.
    solution = None
    try:
        candidate = np.linalg.solve(system, rhs)
        # Row by row (the sum row's 1s must not hide a badly scaled block): backward error ≤ 1e-12.
        residual = np.abs(system @ candidate - rhs)
        scale = np.abs(system) @ np.abs(candidate) + np.abs(rhs)
        if np.all(residual <= 1e-12 * scale) and feasible(candidate[:n]):
            solution = candidate[:n]
    except np.linalg.LinAlgError:
        pass
    if solution is None:
        solution = np.linalg.lstsq(system, rhs, rcond=None)[0][:n]
        if not feasible(solution):
            return alpha
    polished = np.zeros_like(alpha)
    polished[active] = solution

    def objective(a):
        return float(linear @ a) - 0.5 * float(a @ hessian @ a)

    before = objective(alpha)
    # A wrong face is far worse or infeasible; within 1e-9 the exact face solution is
    # preferred, so that the choice does not flip with rounding-level changes of the input.
    return polished if objective(polished) >= before - 1e-9 * max(1.0, abs(before)) else alpha


def _line_search(p_delta: float, u, v, lo, hi) -> float:
    """argmax over t ∈ [0, 1] of D(α + t p), given p·Δ, u = Gα and v = Gp.

    D's derivative along p is φ'(t) = p·Δ − v·clip(u + t v), non-increasing
    and piecewise linear with breakpoints where a coordinate meets a bound;
    the root is bracketed between breakpoints by bisection, then solved on
    its linear piece.
    """

    def derivative(t):
        return p_delta - float(v @ np.clip(u + t * v, lo, hi))

    if derivative(0.0) <= 0.0:
        return 0.0
    if derivative(1.0) >= 0.0:
        return 1.0
    moving = v != 0
    with np.errstate(divide="ignore", invalid="ignore"):
        crossings = np.concatenate([(hi - u)[moving] / v[moving], (lo - u)[moving] / v[moving]])
    breaks = np.unique(crossings[(crossings > 0.0) & (crossings < 1.0)])
    left, right = 0.0, 1.0  # φ'(left) > 0 > φ'(right)
    low, high = 0, breaks.size
    while low < high:  # the last breakpoint with φ' > 0
        mid = (low + high) // 2
        if derivative(breaks[mid]) > 0.0:
            left, low = breaks[mid], mid + 1
        else:
            right, high = breaks[mid], mid
    # On (left, right) no coordinate changes piece: φ' falls at rate Σ v_i² over the free ones.
    z = u + 0.5 * (left + right) * v
    free = (z > lo) & (z < hi)
    curvature = float(v[free] @ v[free])
    if curvature <= 0.0:
        return right
    return min(right, max(left, left + derivative(left) / curvature))
