"""CCCP on toy difference-of-convex problems whose pieces are solved exactly by brute force.

The latent toy has the shape of a latent structural SVM:

    f(w) = ½‖w‖² + C [ max_k (Δ_k + w·a_k) − max_h w·b_h ],

with the outputs a_k including every b_h at Δ = 0 (so the bracket is ≥ 0).
Linearising the concave part at w picks h*(w) = argmax_h w·b_h and gives the
convex structural SVM with Ψ* = b_{h*} — an upper bound of f, tight at w.
For a fixed h that convex problem is a QP over the K outputs, solved by the
reference of ``test_qp``, and min_w f = min_h OPT_h.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from test_cutting_plane import all_ranking_constraints, full_primal, make_data, ranking_problem
from test_qp import objective_tol, solve_primal_reference

import rankopt
from rankopt.engine import CCCPProblem, Constraint, StructuredProblem, solve_cccp


class _FixedLatentProblem(StructuredProblem):
    """The convex problem for one latent choice: Ψ* = b_h, outputs (a_k, Δ_k)."""

    def __init__(self, psi_star, outputs, losses):
        self.n_features = psi_star.size
        self._psi_star = psi_star
        self.outputs, self.losses = outputs, losses

    def ground_truth_feature(self):
        return self._psi_star

    def most_violated(self, w):
        k = int(np.argmax(self.losses + self.outputs @ w))
        return Constraint(self.outputs[k], float(self.losses[k]))


class LatentToy(CCCPProblem):
    def __init__(self, rng, d=3, n_outputs=8, n_latent=3):
        self.n_features = d
        self.latent = rng.normal(size=(n_latent, d))
        extra = rng.normal(size=(n_outputs, d))
        self.outputs = np.vstack([self.latent, extra])
        self.losses = np.concatenate([np.zeros(n_latent), rng.uniform(0.2, 1.0, size=n_outputs)])
        self.convexified_at: list[np.ndarray] = []

    def choice(self, w):
        return int(np.argmax(self.latent @ w))

    def convexify(self, w):
        self.convexified_at.append(np.array(w))
        return _FixedLatentProblem(self.latent[self.choice(w)], self.outputs, self.losses)

    def objective(self, w, C):
        w = np.asarray(w, dtype=np.float64)
        bracket = np.max(self.losses + self.outputs @ w) - np.max(self.latent @ w)
        return 0.5 * float(w @ w) + C * float(bracket)

    def surrogate_optimum(self, h, C):
        """OPT_h: the convex problem for latent choice h, by the reference QP."""
        planes = self.latent[h] - self.outputs
        return solve_primal_reference(planes, self.losses, C)


@pytest.mark.parametrize("C", [1.0, 10.0])
@pytest.mark.parametrize("start", ["zero", "far"])
def test_latent_toy_objective_is_non_increasing_and_converges(rng, C, start):
    toy = LatentToy(rng)
    w0 = np.zeros(3) if start == "zero" else 5.0 * rng.normal(size=3)
    with warnings.catch_warnings():
        warnings.simplefilter("error", rankopt.ConvergenceWarning)
        result = solve_cccp(toy, C, w0, tol=1e-6, inner_tol=1e-7, max_iter=50)
    assert result.converged
    objectives = np.array(result.objectives)
    assert objectives[0] == pytest.approx(toy.objective(w0, C))
    assert np.all(np.diff(objectives) <= 0.0), objectives
    assert objectives[-1] == pytest.approx(toy.objective(result.w, C), abs=1e-12)
    assert result.n_iter == len(result.inner) == len(toy.convexified_at)

    # The global optimum is min_h OPT_h; CCCP cannot go below it ...
    global_opt = min(toy.surrogate_optimum(h, C)[1] for h in range(len(toy.latent)))
    assert objectives[-1] >= global_opt - objective_tol(global_opt)
    # ... and ends at a fixed point: the convex problem for the final latent
    # choice cannot improve on f(w) by more than the tolerances.
    _, opt_final = toy.surrogate_optimum(toy.choice(result.w), C)
    slack = C * 1e-7 + 1e-6 * max(1.0, abs(objectives[-1])) + objective_tol(opt_final)
    assert objectives[-1] <= opt_final + slack


def test_latent_toy_far_start_decreases_the_objective(rng):
    toy = LatentToy(rng)
    w0 = np.array([8.0, -6.0, 7.0])
    result = solve_cccp(toy, 1.0, w0, tol=1e-6, inner_tol=1e-7)
    assert result.objectives[-1] < result.objectives[0] - 1.0


def test_warns_at_max_iter(rng):
    toy = LatentToy(rng)
    w0 = np.array([8.0, -6.0, 7.0])  # far from optimum: the first step is a large decrease
    with pytest.warns(rankopt.ConvergenceWarning, match="max_iter=1"):
        result = solve_cccp(toy, 1.0, w0, tol=1e-9, inner_tol=1e-7, max_iter=1)
    assert not result.converged
    assert result.n_iter == 1
    assert len(result.objectives) == 2 and result.objectives[1] < result.objectives[0]


class ConvexAsCCCP(CCCPProblem):
    """A convex problem seen through CCCP: convexify returns the same problem every time."""

    def __init__(self, X, y, loss):
        self.problem = ranking_problem(X, y, loss)
        self.n_features = self.problem.n_features
        self.planes, self.losses = all_ranking_constraints(X[y], X[~y], loss)

    def convexify(self, w):
        return self.problem

    def objective(self, w, C):
        return full_primal(np.asarray(w, dtype=np.float64), self.planes, self.losses, C)


@pytest.mark.parametrize("loss", ["ap", "ndcg"])
def test_fixed_convex_problem_converges_to_the_full_qp_optimum(rng, loss):
    X, y = make_data(rng, 2, 3, 3)
    C, inner_tol = 3.0, 1e-6
    problem = ConvexAsCCCP(X, y, loss)
    result = solve_cccp(problem, C, np.zeros(3), tol=1e-6, inner_tol=inner_tol)
    assert result.converged
    assert result.n_iter <= 3  # one solve reaches the optimum; CCCP then sees no decrease
    assert np.all(np.diff(result.objectives) <= 0.0)
    _, opt = solve_primal_reference(problem.planes, problem.losses, C)
    assert opt - objective_tol(opt) <= result.objectives[-1] <= opt + C * inner_tol + objective_tol(opt)


class _BoundBreakingToy(LatentToy):
    """An objective that exceeds the convex bound its own convexify() gives."""

    def __init__(self, rng, w0):
        super().__init__(rng)
        self.w0 = np.asarray(w0, dtype=np.float64)

    def objective(self, w, C):
        return super().objective(self.w0, C) + float(np.sum(np.abs(np.asarray(w) - self.w0)))


def test_a_model_whose_objective_exceeds_its_bound_is_reported(rng):
    w0 = np.array([1.0, 2.0, -1.0])
    with pytest.raises(RuntimeError, match="_BoundBreakingToy broke the CCCP contract: J"):
        solve_cccp(_BoundBreakingToy(rng, w0), 1.0, w0)


@pytest.mark.parametrize("inner_max_iter", [2, 3, 5])
def test_capped_inner_solves_never_raise_the_objective(rng, inner_max_iter):
    toy = LatentToy(rng)
    w0 = 5.0 * rng.normal(size=3)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", rankopt.ConvergenceWarning)
        result = solve_cccp(toy, 10.0, w0, tol=1e-9, inner_tol=1e-9, inner_max_iter=inner_max_iter, max_iter=8)
    assert np.all(np.diff(result.objectives) <= 0.0), result.objectives
    assert result.objectives[-1] == toy.objective(result.w, 10.0)
    assert result.converged == (result.stop_reason == "converged")
    if result.converged:
        assert result.steps[-1].inner_converged
    for step in result.steps:
        if step.accepted:
            # J ≤ B where they meet, up to the rounding of two evaluations of the same sums
            assert step.objective_after <= step.bound * (1 + 1e-12) and step.bound <= step.objective_before


def test_an_inner_solve_that_cannot_move_ends_cccp_uncertified(rng):
    toy = LatentToy(rng)
    w0 = 5.0 * rng.normal(size=3)
    with pytest.warns(rankopt.ConvergenceWarning, match="CCCP did not converge: the last inner cutting plane"):
        result = solve_cccp(toy, 10.0, w0, inner_max_iter=1)  # one oracle call: w0 is its only iterate
    assert not result.converged and result.stop_reason == "no_progress"
    np.testing.assert_array_equal(result.w, w0)
    assert result.objectives == [toy.objective(w0, 10.0)]
    assert result.steps[0].bound == pytest.approx(result.objectives[0], rel=1e-12) and not result.steps[0].accepted
