"""WorkingSetQP against an independent solve of the PRIMAL working-set problem.

The engine solves the dual with Clarabel; the reference here solves

    min_{w, ξ}  ½‖w‖² + C ξ   s.t.  w·g_k ≥ Δ_k − ξ,  ξ ≥ 0,  A w ≤ b

directly with SciPy's SLSQP, sharing no code with rankopt.  The two must
agree on w (the primal is strongly convex, so w* is unique) and the dual
objective Clarabel reports must equal the primal optimum (strong duality).
``solve_primal_reference`` is reused by the cutting-plane and CCCP tests.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp
from scipy.optimize import minimize

from rankopt.engine import LinearConstraints, WorkingSetQP
from rankopt.engine.qp import QPSolveError

# Clarabel stops at a relative duality gap of 1e-8 and SLSQP at ftol=1e-12, so
# objective values agree to ~1e-8 relative (measured: <= 3e-8 over 1800
# random instances).  w is compared through strong convexity of the primal P:
# ½‖w − w*‖² ≤ P(w) − P(w*), so an objective accuracy ε bounds ‖w − w*‖ by
# sqrt(2ε) — an interior-point dual cannot pin w down more tightly than that.
OBJ_RTOL = 1e-7
DATA = Path(__file__).parent / "data"


def objective_tol(opt):
    return OBJ_RTOL * max(1.0, abs(opt))


def w_tol(opt):
    return float(np.sqrt(2.0 * objective_tol(opt)))


def assert_matches_reference(w, dual, planes, losses, C, constraints=None):
    """w and the dual optimum of the engine against the SLSQP primal optimum."""
    A = None if constraints is None else constraints.A
    b = None if constraints is None else constraints.b
    w_ref, opt = solve_primal_reference(planes, losses, C, A, b)
    np.testing.assert_allclose(w, w_ref, atol=w_tol(opt), rtol=0)
    # strong duality: the dual optimum is the primal optimum ...
    assert dual == pytest.approx(opt, abs=objective_tol(opt), rel=0)
    # ... and the returned w attains it (its exact slack, not the solver's)
    assert primal_value(w, planes, losses, C) == pytest.approx(opt, abs=objective_tol(opt), rel=0)
    if constraints is not None:
        assert np.all(constraints.A @ w <= constraints.b + 1e-7), "w violates A w <= b"
    return opt


def solve_primal_reference(planes, losses, C, A=None, b=None):
    """min ½‖w‖² + Cξ s.t. G w ≥ Δ − ξ, ξ ≥ 0, A w ≤ b, by SLSQP on (w, ξ).

    Returns (w, objective).  Raises AssertionError when SLSQP fails, so a
    reference failure is never mistaken for agreement.
    """
    planes = np.atleast_2d(np.asarray(planes, dtype=np.float64))
    losses = np.asarray(losses, dtype=np.float64)
    d = planes.shape[1]

    # SLSQP's line search stalls on a large linear term: scale the objective to O(1).
    scale = max(1.0, C)

    def objective(z):
        return (0.5 * z[:d] @ z[:d] + C * z[d]) / scale

    def gradient(z):
        return np.concatenate([z[:d], [C]]) / scale

    constraints = []
    if losses.size:
        jac = np.hstack([planes, np.ones((losses.size, 1))])
        constraints.append({"type": "ineq", "fun": lambda z: planes @ z[:d] + z[d] - losses, "jac": lambda z: jac})
    if A is not None:
        A = np.atleast_2d(A.toarray() if sp.issparse(A) else np.asarray(A, dtype=np.float64))
        b = np.asarray(b, dtype=np.float64)
        jac_a = np.hstack([-A, np.zeros((A.shape[0], 1))])
        constraints.append({"type": "ineq", "fun": lambda z: b - A @ z[:d], "jac": lambda z: jac_a})
    bounds = [(None, None)] * d + [(0.0, None)]
    z0 = np.zeros(d + 1)
    if losses.size:
        z0[d] = max(0.0, float(losses.max()))
    result = minimize(
        objective,
        z0,
        jac=gradient,
        method="SLSQP",
        bounds=bounds,
        constraints=constraints,
        options={"ftol": 1e-12, "maxiter": 2000},
    )
    assert result.success, f"reference SLSQP failed: {result.message}"
    w = result.x[:d]
    # Report the objective with the exact slack of w, not SLSQP's ξ variable.
    xi = max(0.0, float(np.max(losses - planes @ w))) if losses.size else 0.0
    return w, 0.5 * float(w @ w) + C * xi


def random_instance(rng, d, k):
    planes = rng.normal(size=(k, d))
    losses = rng.uniform(0.05, 1.0, size=k)
    return planes, losses


def solve_engine(C, d, planes, losses, constraints=None):
    qp = WorkingSetQP(C, d, constraints)
    for plane, loss in zip(planes, losses, strict=True):
        qp.add(plane, loss)
    solution = qp.solve()
    return qp, solution.w, solution.dual


def primal_value(w, planes, losses, C):
    xi = max(0.0, float(np.max(np.asarray(losses) - np.asarray(planes) @ w))) if len(losses) else 0.0
    return 0.5 * float(w @ w) + C * xi


# ---------------------------------------------------------------- no constraints


@pytest.mark.parametrize("C", [0.3, 1.0, 4.0])
def test_one_dimensional_closed_form(C):
    """min ½w² + C max(0, 1 − w) has w* = min(C, 1): checks engine and reference alike."""
    w_star = min(C, 1.0)
    opt = 0.5 * w_star**2 + C * (1.0 - w_star)
    _, w, dual = solve_engine(C, 1, np.array([[1.0]]), np.array([1.0]))
    assert w[0] == pytest.approx(w_star, abs=w_tol(opt))
    assert dual == pytest.approx(opt, abs=objective_tol(opt))
    w_ref, opt_ref = solve_primal_reference(np.array([[1.0]]), np.array([1.0]), C)
    assert w_ref[0] == pytest.approx(w_star, abs=1e-6)
    assert opt_ref == pytest.approx(opt, abs=1e-9)


@pytest.mark.parametrize("d,k", [(1, 1), (2, 3), (3, 6), (5, 4), (4, 10)])
@pytest.mark.parametrize("C", [0.1, 1.0, 25.0])
def test_unconstrained_matches_primal_reference(rng, d, k, C):
    planes, losses = random_instance(rng, d, k)
    qp, w, dual = solve_engine(C, d, planes, losses)
    assert_matches_reference(w, dual, planes, losses, C)
    assert qp.n_planes == k


def test_incremental_planes_match_reference_after_every_add(rng):
    """The Gram matrix and cross terms are grown one plane at a time; check every stage."""
    d, C = 4, 2.0
    planes, losses = random_instance(rng, d, 7)
    constraints = LinearConstraints.nonpositive(d, [1, 3])
    qp = WorkingSetQP(C, d, constraints)
    for k in range(1, 8):
        qp.add(planes[k - 1], losses[k - 1])
        solution = qp.solve()
        w, dual = solution.w, solution.dual
        assert_matches_reference(w, dual, planes[:k], losses[:k], C, constraints)


def test_empty_working_set_gives_zero():
    qp = WorkingSetQP(1.0, 3)
    solution = qp.solve()
    w, dual = solution.w, solution.dual
    np.testing.assert_array_equal(w, np.zeros(3))
    assert dual == 0.0
    assert qp.slack(np.ones(3)) == 0.0


def test_slack_is_the_max_violation_over_planes():
    qp = WorkingSetQP(1.0, 2)
    qp.add(np.array([1.0, 0.0]), 1.0)
    qp.add(np.array([0.0, 2.0]), 0.5)
    assert qp.slack(np.array([0.2, 0.1])) == pytest.approx(max(1.0 - 0.2, 0.5 - 0.2))
    assert qp.slack(np.array([5.0, 5.0])) == 0.0


def test_duplicate_and_zero_planes_are_handled(rng):
    """A singular Gram matrix (repeated or zero planes) is fine for the PSD solver."""
    d, C = 3, 1.5
    plane = rng.normal(size=d)
    planes = np.stack([plane, plane, np.zeros(d), 2 * plane])
    losses = np.array([0.5, 0.5, 0.0, 0.7])
    _, w, dual = solve_engine(C, d, planes, losses)
    assert_matches_reference(w, dual, planes, losses, C)


# ------------------------------------------------------------ linear constraints


def _constraint_cases(d, rng):
    general_A = rng.normal(size=(2, d))
    return {
        "nonpositive-first": LinearConstraints.nonpositive(d, [0]),
        "nonpositive-two": LinearConstraints.nonpositive(d, [0, d - 1]),
        "general-feasible-at-zero": LinearConstraints(general_A, rng.uniform(0.0, 0.5, size=2)),
        # w[0] >= 0.5: w = 0 is infeasible (APPX's hard margins have this shape)
        "infeasible-at-zero": LinearConstraints(-np.eye(d)[:1], np.array([-0.5])),
        "infeasible-at-zero-with-nonpositive": LinearConstraints(
            np.vstack([-np.eye(d)[0], np.eye(d)[1]]), np.array([-0.5, 0.0])
        ),
    }


CONSTRAINT_CASES = [
    "nonpositive-first",
    "nonpositive-two",
    "general-feasible-at-zero",
    "infeasible-at-zero",
    "infeasible-at-zero-with-nonpositive",
]


@pytest.mark.parametrize("case", CONSTRAINT_CASES)
@pytest.mark.parametrize("d,k,C", [(2, 3, 1.0), (3, 5, 10.0), (4, 2, 0.2)])
def test_constrained_matches_primal_reference(rng, case, d, k, C):
    constraints = _constraint_cases(d, rng)[case]
    planes, losses = random_instance(rng, d, k)
    _, w, dual = solve_engine(C, d, planes, losses, constraints)
    assert_matches_reference(w, dual, planes, losses, C, constraints)


@pytest.mark.parametrize("case", CONSTRAINT_CASES)
def test_constraints_alone_give_the_smallest_feasible_w(rng, case):
    """With no planes yet, solve() returns argmin ‖w‖ over A w ≤ b (the cutting plane's start)."""
    d = 3
    constraints = _constraint_cases(d, rng)[case]
    qp = WorkingSetQP(1.0, d, constraints)
    solution = qp.solve()
    w, dual = solution.w, solution.dual
    assert_matches_reference(w, dual, np.zeros((0, d)), np.zeros(0), 1.0, constraints)
    if case.startswith("infeasible-at-zero"):
        assert w[0] == pytest.approx(0.5, abs=w_tol(0.125))


def test_nonpositive_builds_unit_rows():
    constraints = LinearConstraints.nonpositive(4, [1, 3])
    np.testing.assert_array_equal(constraints.A.toarray(), [[0, 1, 0, 0], [0, 0, 0, 1]])
    np.testing.assert_array_equal(constraints.b, [0, 0])


def test_linear_constraints_validate_shapes_and_values():
    with pytest.raises(ValueError, match="one bound per row"):
        LinearConstraints(np.eye(2), np.zeros(3))
    with pytest.raises(ValueError, match="finite"):
        LinearConstraints(np.eye(2), np.array([0.0, np.nan]))


# ----------------------------------------------------------------- infeasibility


@pytest.mark.parametrize("n_planes", [0, 2])
def test_infeasible_constraints_raise_qp_solve_error(rng, n_planes):
    d = 3
    # w[0] <= -1 and w[0] >= 1 together admit no w.
    constraints = LinearConstraints(np.vstack([np.eye(d)[0], -np.eye(d)[0]]), np.array([-1.0, -1.0]))
    qp = WorkingSetQP(1.0, d, constraints)
    planes, losses = random_instance(rng, d, n_planes)
    for plane, loss in zip(planes, losses, strict=True):
        qp.add(plane, loss)
    with pytest.raises(QPSolveError, match="linear constraints on w admit no solution"):
        qp.solve()


def test_qp_solve_error_is_a_runtime_error():
    assert issubclass(QPSolveError, RuntimeError)


# ------------------------------------------------------------- the bounded dual

from rankopt.engine import qp as qp_module  # noqa: E402
from rankopt.engine.qp import box_bounds  # noqa: E402


def test_box_bounds_reads_single_coordinate_rows():
    A = sp.csr_matrix(np.array([[0, 2.0, 0], [0, 1.0, 0], [-4.0, 0, 0], [0, 0, 0]]))
    lo, hi = box_bounds(LinearConstraints(A, np.array([1.0, 3.0, 2.0, 0.0])), 3)
    # 2 w1 ≤ 1 and w1 ≤ 3: the tighter; −4 w0 ≤ 2 is w0 ≥ −½; the empty row 0 ≤ 0 holds.
    np.testing.assert_array_equal(hi, [np.inf, 0.5, np.inf])
    np.testing.assert_array_equal(lo, [-0.5, -np.inf, -np.inf])


def test_box_bounds_leaves_general_rows_to_the_primal():
    assert box_bounds(None, 3) is None
    assert box_bounds(LinearConstraints(np.array([[1.0, 1.0, 0.0]]), np.zeros(1)), 3) is None


def test_empty_row_with_negative_bound_is_infeasible():
    qp = WorkingSetQP(1.0, 2, LinearConstraints(np.zeros((1, 2)), np.array([-1.0])))
    with pytest.raises(qp_module.InfeasibleConstraintsError, match="admit no solution"):
        qp.solve()


def _random_box(rng, d):
    """Upper bounds on some coordinates, lower on others, both on a few, as rows of A."""
    rows, b = [], []
    for i in rng.choice(d, size=d // 2, replace=False):
        kind = rng.integers(3)
        scale = rng.uniform(0.5, 2.0)
        if kind in (0, 2):  # scale · w_i ≤ scale · hi
            rows.append(scale * np.eye(d)[i])
            b.append(scale * rng.choice([0.0, rng.normal(scale=0.3)]))
        if kind in (1, 2):  # w_i ≥ lo, written −w_i ≤ −lo
            rows.append(-np.eye(d)[i])
            b.append(-(b[-1] / scale - 0.5) if kind == 2 else -rng.normal(scale=0.3))
    return LinearConstraints(sp.csr_matrix(np.array(rows)), np.array(b))


@pytest.mark.parametrize("seed", range(6))
def test_bounded_dual_matches_the_primal_after_every_add(seed):
    """The warm-started Newton dual against the primal QP on the same planes, plane by plane."""
    rng = np.random.default_rng(seed)
    d, C = 40, [0.5, 10.0, 1e3][seed % 3]
    constraints = _random_box(rng, d)
    qp = WorkingSetQP(C, d, constraints)
    assert qp._bounds is not None
    for _ in range(25):
        qp.add(rng.normal(size=d) * (rng.random(d) < 0.4), rng.uniform(0.1, 1.0))
        solution = qp.solve()
        w, dual = solution.w, solution.dual
        w_primal, opt = qp._solve_primal()
        assert dual == pytest.approx(opt, abs=objective_tol(opt), rel=0)
        np.testing.assert_allclose(w, w_primal, atol=w_tol(opt), rtol=0)
        # ξ(w) moves by C·‖g‖·‖w − w*‖: at C = 1e3 a 1e-10 error in w (the
        # interior-point accuracy of α) shows as ~4e-7 in the primal value.
        slack_tol = objective_tol(opt) * max(1.0, C / 100.0)
        assert primal_value(w, qp.planes, qp.losses, C) == pytest.approx(opt, abs=slack_tol, rel=0)
        assert np.all(constraints.A @ w <= constraints.b + 1e-12), "w = clip(Gα) meets the bounds exactly"


def test_bounded_dual_hands_over_to_the_primal_when_newton_does_not_settle(rng, monkeypatch, caplog):
    d, C = 6, 2.0
    constraints = LinearConstraints.nonpositive(d, [0, 2, 4])
    planes, losses = random_instance(rng, d, 5)
    monkeypatch.setattr(qp_module, "_MAX_NEWTON_STEPS", 0)
    with caplog.at_level("INFO", logger="rankopt.engine.qp"):
        _, w, dual = solve_engine(C, d, planes, losses, constraints)
    assert "the bounded dual failed (bounded dual: no convergence in 0 Newton steps)" in caplog.text
    assert_matches_reference(w, dual, planes, losses, C, constraints)


@pytest.mark.parametrize("seed", range(20))
def test_line_search_maximises_the_dual_along_the_step(seed):
    """φ(t) = D(α + t p) on [0, 1], against a fine grid of t."""
    rng = np.random.default_rng(seed)
    d = 12
    lo = np.where(rng.random(d) < 0.4, rng.normal(size=d) - 1.0, -np.inf)
    hi = np.where(rng.random(d) < 0.5, rng.normal(size=d) + 0.5, np.inf)
    hi = np.maximum(hi, lo)
    u, v = rng.normal(size=d), rng.normal(size=d)
    p_delta = float(rng.normal() + v @ np.clip(u, lo, hi))  # φ'(0) of either sign

    def phi(t):  # D along the step, up to a constant: t p·Δ − Σ h_i(u_i + t v_i)
        z = u + t * v
        w = np.clip(z, lo, hi)
        above, below = z > hi, z < lo
        return t * p_delta - 0.5 * w @ w - hi[above] @ (z[above] - hi[above]) + lo[below] @ (lo[below] - z[below])

    t = qp_module._line_search(p_delta, u, v, lo, hi)
    grid = np.linspace(0.0, 1.0, 20001)
    best = max(phi(s) for s in grid)
    assert 0.0 <= t <= 1.0
    assert phi(t) >= best - 1e-9


# ------------------------------------------------------------------ pruning


@pytest.mark.parametrize("bounded", [False, True])
def test_pruning_drops_idle_planes_and_keeps_the_dual_non_decreasing(rng, bounded):
    """Dropping a plane idle at the current optimum leaves that optimum; later optima
    are over fewer planes (never above the full set's), and still never decrease."""
    d, C, prune_after = 5, 3.0, 4
    constraints = LinearConstraints.nonpositive(d, [1, 3]) if bounded else None
    pruned = WorkingSetQP(C, d, constraints, prune_after=prune_after)
    kept = WorkingSetQP(C, d, constraints, prune_after=None)
    # A plane any w meeting the others satisfies by far: inactive from the start.
    for qp in (pruned, kept):
        qp.add(np.zeros(d), -5.0)
    duals = []
    for step in range(12):
        plane, loss = rng.normal(size=d), rng.uniform(0.2, 1.0)
        before = pruned.n_pruned
        for qp in (pruned, kept):
            qp.add(plane, loss)
        w, dual = (lambda s: (s.w, s.dual))(pruned.solve())
        w_all, dual_all = (lambda s: (s.w, s.dual))(kept.solve())
        if before == 0:  # the same planes so far: the same optimum
            assert dual == pytest.approx(dual_all, abs=objective_tol(dual_all), rel=0)
            np.testing.assert_allclose(w, w_all, atol=w_tol(dual_all), rtol=0)
        assert dual <= dual_all + objective_tol(dual_all)
        duals.append(dual)
        if step + 1 < prune_after:
            assert pruned.n_pruned == 0
    assert np.all(np.diff(duals) >= -1e-9 * max(1.0, max(duals)))
    assert pruned.n_pruned >= 1
    assert not np.any(np.all(pruned.planes == 0.0, axis=1)), "the idle zero plane was dropped"
    assert pruned.n_planes == kept.n_planes - pruned.n_pruned
    assert kept.n_pruned == 0


def test_primal_form_prunes_from_its_row_multipliers(rng):
    """APPX-shaped general rows take the primal; its multipliers drive pruning the same way."""
    d = 4
    constraints = LinearConstraints(rng.normal(size=(2, d)), np.full(2, 0.5))
    qp = WorkingSetQP(2.0, d, constraints, prune_after=2)
    qp.add(np.zeros(d), -5.0)
    for _ in range(3):
        qp.add(rng.normal(size=d), 1.0)
        qp.solve()
    assert qp.n_pruned == 1


# ---------------------------------------------------- near-degenerate Gram matrices

# Model QPs of HOB-SVM's bounded dual on Cora at η = 100 (two nearly opposite
# planes whose norms differ by 10²–10³): Clarabel, the interior-point solver
# used before, ran out of iterations on the first and called the second dual
# infeasible.  The dual QP always has an optimum (its feasible set is compact).
DEGENERATE_DUALS = {
    "C=1": (
        [
            [1.8270056916436321, -0.02166364837080107, -0.08412365027709319],
            [-0.02166364837080107, 122016.52126281941, -5772.567338652647],
            [-0.08412365027709319, -5772.567338652647, 273.94539649994977],
        ],
        [1.0, 0.5618908382066277, 0.5029239766081872],
        1.0,
    ),
    "C=1000": (
        [
            [1.2481744641486412, -0.12057564816898733, -0.1477543748251054],
            [-0.12057564816898733, 263884.32133061567, -106579.41105172796],
            [-0.1477543748251054, -106579.41105172796, 43090.5972116847],
        ],
        [1.0, 0.5475929978118161, 0.5060175054704594],
        1000.0,
    ),
}


@pytest.mark.parametrize("case", sorted(DEGENERATE_DUALS))
def test_near_degenerate_dual_is_solved_to_its_kkt_conditions(case):
    hessian, linear, C = (np.asarray(v, dtype=float) if i < 2 else v for i, v in enumerate(DEGENERATE_DUALS[case]))
    alpha = WorkingSetQP(C, 1)._simplex_qp(hessian, linear)
    gradient = linear - hessian @ alpha  # of the maximised objective
    assert np.all(alpha >= 0.0) and alpha.sum() <= C * (1 + 1e-12)
    # KKT: one multiplier λ ≥ 0 for Σα ≤ C (0 unless it binds); gradient = λ on
    # the support, ≤ λ off it.
    lam = max(0.0, float(np.max(gradient)))
    support = alpha > 1e-12 * alpha.sum()
    scale = np.abs(linear).max()
    np.testing.assert_allclose(gradient[support], lam, atol=1e-9 * scale)
    assert np.all(gradient[~support] <= lam + 1e-9 * scale)
    if lam > 1e-9 * scale:
        assert alpha.sum() == pytest.approx(C, rel=1e-12)


def test_rank_deficient_dual_needs_forced_proximal_iterations():
    """A HOAP-SVM model QP from Cora (η = 100, 61 planes, Gram eigenvalues down to 1e-12) on
    which DAQP's automatic proximal choice runs out of iterations; the forced one solves it."""
    data = np.load(DATA / "rank_deficient_dual.npz")
    H, f, weights = data["H"], data["f"], data["weights"]
    gamma = qp_module._dense_simplex_qp(H, f, weights)
    assert np.all(gamma >= 0.0) and weights @ gamma <= 1.0 + 1e-9
    # KKT of min ½γᵀHγ + fᵀγ: gradient + λ·weights ≥ 0, = 0 on the support.
    gradient = H @ gamma + f
    support = gamma > 1e-9 * gamma.max()
    lam = float(np.median(-gradient[support] / weights[support]))
    assert lam >= -1e-9
    scale = np.abs(f).max()
    np.testing.assert_allclose(gradient[support] + lam * weights[support], 0.0, atol=1e-6 * scale)
    assert np.all(gradient[~support] + lam * weights[~support] >= -1e-6 * scale)


@pytest.mark.parametrize("bounded", [False, True])
def test_primal_is_the_last_resort_when_both_dual_solvers_fail(rng, monkeypatch, caplog, bounded):
    d, C = 4, 2.0
    constraints = LinearConstraints.nonpositive(d, [0, 3]) if bounded else None
    planes, losses = random_instance(rng, d, 5)

    def daqp_stops_short(*args, **kwargs):
        return np.zeros(args[1].size), 0.0, -4, {}

    monkeypatch.setattr(qp_module.daqp, "solve", daqp_stops_short)
    if bounded:  # the bounded dual's own fallback (its pieces in the planes' range) fails too

        def range_form_fails(*args):
            raise qp_module.QPSolveError("working-set dual with 5 planes: DAQP ended with exit flags [-4, -4]")

        monkeypatch.setattr(qp_module, "_range_simplex_qp", range_form_fails)
    with caplog.at_level("INFO", logger="rankopt.engine.qp"):
        _, w, dual = solve_engine(C, d, planes, losses, constraints)
    assert (
        f"the {'bounded dual' if bounded else 'dual'} failed (working-set dual with 5 planes: DAQP ended with "
        "exit flags [-4, -4])"
    ) in caplog.text
    assert_matches_reference(w, dual, planes, losses, C, constraints)


def _counting_daqp(monkeypatch):
    """Wrap daqp.solve to record each call's exit flag and eps_prox."""
    calls = []
    original = qp_module.daqp.solve

    def solve(*args, **kwargs):
        result = original(*args, **kwargs)
        calls.append((result[2], kwargs.get("eps_prox")))
        return result

    monkeypatch.setattr(qp_module.daqp, "solve", solve)
    return calls


def test_a_tight_fit_with_more_planes_than_features_needs_no_retry(monkeypatch):
    """breast_cancer (30 features) at C = 100, tol 1e-6 ends with ~60 planes: every working-set
    dual is solved by DAQP's first try (the automatic proximal choice failed 24 of 77 there)."""
    from sklearn.datasets import load_breast_cancer

    import rankopt

    X, y = load_breast_cancer(return_X_y=True)
    X = (X - X.mean(axis=0)) / X.std(axis=0)
    registry = rankopt.plugins.default_registry()
    problem = registry.get_model("ranking").build_problem(
        X, y.astype(bool), registry.get_loss("auc"), registry.get_feature_map("linear"), registry=registry
    )
    calls = _counting_daqp(monkeypatch)
    # The plain cutting plane: the optimized one (line search) ends with fewer planes than features here.
    result = rankopt.solve_cutting_plane(problem, 100.0, tol=1e-6, line_search=False)
    assert result.converged and result.duality_gap <= 100.0 * 1e-6
    assert max(record.n_planes for record in result.history) > X.shape[1]
    assert len(calls) == result.n_iter - 1  # one DAQP call per working-set solve
    assert all(flag == 1 for flag, _ in calls)


def test_rounding_level_changes_of_a_rank_deficient_working_set_leave_w_unchanged(rng):
    """The polish lands on the face's exact optimum, so two solves whose planes differ by
    rounding (as the same fit's on NumPy and on Dask do) give the same w, not two different
    ε-optimal points of DAQP's proximal iterations (which then lead the fits apart)."""
    d, C = 3, 10.0
    planes, losses = random_instance(rng, d, 12)  # more planes than features: a singular Gram matrix
    nudged = planes * (1.0 + 1e-15 * rng.normal(size=planes.shape))
    solutions = []
    for rows in (planes, nudged):
        qp = WorkingSetQP(C, d, prune_after=None)
        for plane, loss in zip(rows, losses, strict=True):
            qp.add(plane, loss)
        solutions.append(qp.solve(gap_tol=1e-3 * C))
    np.testing.assert_allclose(solutions[0].w, solutions[1].w, rtol=0, atol=1e-12)
    assert_matches_reference(solutions[0].w, solutions[0].dual, planes, losses, C, None)


@pytest.mark.parametrize("bounded", [False, True])
def test_after_the_dual_fails_the_primal_goes_first_and_the_dual_is_retried(rng, monkeypatch, bounded):
    """A failed dual form costs DAQP's iteration limit: the next solves skip to the primal, retrying the
    dual every _DUAL_RETRY_EVERY solves, and every answer is still the verified optimum."""
    d, C = 6, 2.0
    constraints = LinearConstraints.nonpositive(d, [0, 3]) if bounded else None
    calls = []
    original = qp_module.daqp.solve

    def daqp_fails_for_a_while(*args, **kwargs):
        calls.append(len(calls))
        if len(calls) <= 2:  # both DAQP settings of the first solve
            return np.zeros(args[1].size), 0.0, -4, {}
        return original(*args, **kwargs)

    monkeypatch.setattr(qp_module.daqp, "solve", daqp_fails_for_a_while)
    qp = WorkingSetQP(C, d, constraints, prune_after=None)
    planes, losses = random_instance(rng, d, 2 + qp_module._DUAL_RETRY_EVERY + 3)
    solvers, daqp_calls = [], []
    for k, (plane, loss) in enumerate(zip(planes, losses, strict=True)):
        qp.add(plane, loss)
        before = len(calls)
        solution = qp.solve()
        solvers.append(solution.solver)
        daqp_calls.append(len(calls) - before)
        assert_matches_reference(solution.w, solution.dual, planes[: k + 1], losses[: k + 1], C, constraints)
    dual = "bounded dual" if bounded else "dual"
    retry = qp_module._DUAL_RETRY_EVERY
    if bounded:
        # The bounded dual solves the pieces DAQP failed on in the planes' range instead: no solve
        # falls back to the primal; DAQP is skipped until the retry, which succeeds.
        assert solvers == [dual] * len(solvers)
        assert daqp_calls[0] == 2 and daqp_calls[1:retry] == [0] * (retry - 1) and min(daqp_calls[retry:]) >= 1
        return
    # solve 1: the dual fails (both DAQP settings) and the primal answers; solves 2..retry: the primal
    # first, DAQP not called; solve retry + 1: the dual is retried, succeeds, and stays first
    assert solvers[:retry] == ["primal"] * retry
    assert solvers[retry:] == [dual] * (len(solvers) - retry)
    assert daqp_calls[0] == 2 and daqp_calls[1:retry] == [0] * (retry - 1) and min(daqp_calls[retry:]) >= 1


def test_bounded_dual_solves_degenerate_pieces_in_the_range_of_the_planes(rng, monkeypatch, caplog):
    """When DAQP fails on a piece of the bounded dual, the piece is solved as a primal in range(G)
    (Clarabel, r + 1 variables): the answer is the verified optimum, without the primal in d + 1."""
    d, C = 7, 3.0
    constraints = LinearConstraints.nonpositive(d, [0, 2, 5])
    planes, losses = random_instance(rng, d, 6)

    def daqp_stops_short(*args, **kwargs):
        return np.zeros(args[1].size), 0.0, -4, {}

    monkeypatch.setattr(qp_module.daqp, "solve", daqp_stops_short)
    with caplog.at_level("INFO", logger="rankopt.engine.qp"):
        qp = WorkingSetQP(C, d, constraints)
        for plane, loss in zip(planes, losses, strict=True):
            qp.add(plane, loss)
        solution = qp.solve()
    assert solution.solver == "bounded dual" and solution.verified(0.0)
    assert "solving it in range(G)" in caplog.text
    assert_matches_reference(solution.w, solution.dual, planes, losses, C, constraints)


@pytest.mark.parametrize("n_planes", [1, 3, 12])
def test_range_simplex_qp_equals_the_active_set_answer(rng, n_planes):
    """_range_simplex_qp (thin QR + Clarabel) against DAQP on the Gram, including more planes than features."""
    d, C = 8, 2.5
    rows = rng.normal(size=(n_planes, d)) * rng.uniform(0.1, 3.0, size=(n_planes, 1))
    linear = rng.uniform(0.2, 1.0, size=n_planes)
    alpha = qp_module._range_simplex_qp(rows, linear, C)
    assert np.all(alpha >= 0.0) and alpha.sum() <= C * (1 + 1e-12)

    def value(a):
        return float(linear @ a) - 0.5 * float(np.sum((rows.T @ a) ** 2))

    reference = WorkingSetQP(C, d)._simplex_qp(rows @ rows.T, linear)
    assert value(alpha) == pytest.approx(value(reference), rel=1e-8, abs=1e-10)


@pytest.mark.parametrize("repeat", [False, True])
@pytest.mark.parametrize("on_sum", [False, True])
def test_polish_gives_the_face_optimum_with_or_without_a_singular_face(rng, monkeypatch, repeat, on_sum):
    """_polish solves the face's optimality conditions by LU when that solves them, by least squares
    when the face is singular (a repeated plane): either way it returns the face optimum, feasible."""
    d, k, C = 6, 4, 2.0
    rows = rng.normal(size=(k, d))
    if repeat:
        rows = np.vstack([rows, rows[:1]])  # a singular Gram: two equal planes
    n = rows.shape[0]
    hessian = rows @ rows.T
    # A face optimum by construction: α* > 0 solves H α* + λ 1 = linear, with Σα* = C and λ > 0 on the sum.
    optimum = rng.uniform(0.5, 1.5, size=n)
    optimum *= (C if on_sum else 0.5 * C) / optimum.sum()
    linear = hessian @ optimum + (0.3 if on_sum else 0.0)
    start = optimum * rng.uniform(0.8, 1.0, size=n)  # on the same face (every plane active), not optimal
    if on_sum:
        start *= C / start.sum()
    least_squares = []
    original = np.linalg.lstsq
    monkeypatch.setattr(np.linalg, "lstsq", lambda *a, **k: least_squares.append(1) or original(*a, **k))
    polished = qp_module._polish(hessian, linear, start, C)
    assert bool(least_squares) == repeat  # LU where it solves the system, least squares where it is singular

    def objective(a):
        return float(linear @ a) - 0.5 * float(a @ hessian @ a)

    assert np.all(polished >= 0.0) and polished.sum() <= C * (1 + 1e-12)
    assert objective(polished) == pytest.approx(objective(optimum), rel=1e-12)
    assert objective(polished) > objective(start)
    if not repeat:
        np.testing.assert_allclose(polished, optimum, rtol=1e-9)
