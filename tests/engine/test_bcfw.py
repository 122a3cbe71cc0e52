"""Block-coordinate Frank–Wolfe over queries: the same certified optimum as the cutting plane."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import scipy.sparse as sp

from rankopt import ConvergenceWarning, RankSVM
from rankopt._validation import check_qid
from rankopt.engine import solve_bcfw, solve_cutting_plane
from rankopt.models.ranking import QueryRankingProblem
from rankopt.plugins import default_registry


def _problem(rng, loss="ap", n_queries=15, d=4, X=None):
    sizes = rng.integers(2, 7, n_queries)
    qid = np.repeat(rng.permutation(n_queries), sizes)
    X = rng.standard_normal((qid.size, d)) if X is None else X
    grades = rng.integers(0, 3, qid.size)
    registry = default_registry()
    resolved = registry.resolve_loss(loss)
    relevance = grades if resolved.graded else grades >= 1
    return QueryRankingProblem(
        X, relevance, check_qid(qid, qid.size), resolved, registry.get_feature_map("linear"), "auto", registry
    ), (X, grades, qid)


@pytest.mark.parametrize("loss", ["ap", "ndcg", "pairwise", "ndcg_graded"])
@pytest.mark.parametrize("C", [0.3, 10.0])
def test_bcfw_certifies_the_cutting_planes_optimum(rng, loss, C):
    problem, _ = _problem(rng, loss)
    tol = 1e-4
    reference = solve_cutting_plane(problem, C, tol=tol)
    result = solve_bcfw(problem, C, tol=tol, max_iter=3000)
    assert reference.converged and result.converged and result.duality_gap <= C * tol
    # Two certified points: each objective within its own C·tol of the optimum.
    assert abs(result.primal_objective - reference.primal_objective) <= 2 * C * tol
    # The dual bound never passes the optimum.
    assert max(r.dual_objective for r in result.history) <= reference.primal_objective + 1e-9


def test_the_parts_of_one_block_come_from_its_own_rows(rng):
    problem, (X, _, qid) = _problem(rng)
    w = rng.standard_normal(X.shape[1])
    parts = [problem.block_most_violated(b, w) for b in range(problem.n_blocks)]
    constraint = problem.most_violated(w)
    np.testing.assert_allclose(
        sum(p for p, _ in parts), problem.ground_truth_feature() - constraint.feature, atol=1e-12
    )
    assert sum(loss for _, loss in parts) == pytest.approx(constraint.loss, abs=1e-12)


def test_ranksvm_solver_bcfw_fits_csr_and_numpy_alike_and_refuses_what_it_cannot_do(rng):
    _, (X, grades, qid) = _problem(rng)
    dense = RankSVM(C=1.0, solver="bcfw").fit(X, grades, qid=qid)
    sparse = RankSVM(C=1.0, solver="bcfw").fit(sp.csr_matrix(X), grades, qid=qid)
    assert dense.converged_ and sparse.converged_
    np.testing.assert_allclose(dense.coef_, sparse.coef_, atol=1e-8)
    cutting = RankSVM(C=1.0).fit(X, grades, qid=qid)
    assert abs(dense.history_[-1].primal_objective - cutting.history_[-1].primal_objective) <= 2e-3
    with pytest.raises(ValueError, match="expected solver to be 'cutting_plane' or 'bcfw'"):
        RankSVM(solver="sgd").fit(X, grades, qid=qid)
    with pytest.raises(ValueError, match="expected queries"):
        RankSVM(solver="bcfw").fit(X, grades >= 1)
    with pytest.raises(ValueError, match="expected a rank loss with solver='bcfw'"):
        RankSVM(loss="zero_one", solver="bcfw").fit(X, grades, qid=qid)
    model = RankSVM(solver="bcfw", warm_start=True).fit(X, grades, qid=qid)
    with pytest.raises(ValueError, match="warm_start=False with solver='bcfw'"):
        model.fit(X, grades, qid=qid)
    dask_array = pytest.importorskip("dask.array")
    with pytest.raises(ValueError, match="NumPy or CSR data with solver='bcfw'"):
        RankSVM(solver="bcfw").fit(dask_array.from_array(X, chunks=20), grades, qid=qid)


def test_bcfw_warns_when_its_passes_run_out(rng):
    problem, _ = _problem(rng)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = solve_bcfw(problem, 1000.0, tol=1e-8, max_iter=2)
    assert not result.converged and result.stop_reason == "max_iter" and result.n_iter == 2
    assert any(issubclass(w.category, ConvergenceWarning) and "passes" in str(w.message) for w in caught)
