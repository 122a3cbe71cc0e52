"""The per-query plane cache: cuts assembled from each query's parts are valid, and change no optimum."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import scipy.sparse as sp

import rankopt.engine.cutting_plane as cutting_plane
from rankopt import RankSVM
from rankopt._validation import check_qid
from rankopt.data.backends import backend_for
from rankopt.engine import WorkingSet, solve_cutting_plane
from rankopt.engine.problem import BlockPlanes
from rankopt.models.ranking import QueryRankingProblem
from rankopt.plugins import default_registry


def _queries(rng, n_queries=30, d=6):
    sizes = rng.integers(3, 9, n_queries)
    qid = np.repeat(rng.permutation(n_queries), sizes)  # queries not in row order
    X = rng.standard_normal((qid.size, d))
    grades = rng.integers(0, 3, qid.size)
    return X, grades, qid


def _problem(X, grades, qid, loss="ap"):
    registry = default_registry()
    loss = registry.resolve_loss(loss)
    relevance = grades if loss.graded else grades >= 1
    return QueryRankingProblem(
        X, relevance, check_qid(qid, qid.size), loss, registry.get_feature_map("linear"), "auto", registry
    )


@pytest.mark.parametrize("kind", ["float64", "float32", "csr"])
def test_combine_groups_sums_each_groups_rows(rng, kind):
    X = rng.standard_normal((40, 5))
    X = X.astype(np.float32) if kind == "float32" else sp.csr_matrix(np.where(X > 0.5, X, 0.0)) if kind == "csr" else X
    coef = rng.standard_normal(40)
    group = rng.integers(-1, 4, 40)  # -1: in no group
    dense = X.toarray() if sp.issparse(X) else X.astype(np.float64)
    expected = np.array([dense[group == g].T @ coef[group == g] for g in range(4)])
    got = backend_for(X).combine_groups(X, coef, group, 4)
    assert got.dtype == np.float64 and got.shape == (4, 5)
    np.testing.assert_allclose(got, expected, rtol=1e-5 if kind == "float32" else 1e-12, atol=1e-5)


@pytest.mark.parametrize("loss", ["ap", "ndcg", "pairwise"])
def test_the_parts_sum_to_the_cut_and_any_choice_of_parts_is_a_valid_cut(rng, loss):
    X, grades, qid = _queries(rng)
    problem = _problem(X, grades, qid, loss)
    psi_star = problem.ground_truth_feature()
    parts = []
    for _ in range(3):
        w = rng.standard_normal(X.shape[1])
        constraint = problem.most_violated(w)
        blocks = constraint.blocks
        assert isinstance(blocks, BlockPlanes)
        np.testing.assert_allclose(blocks.planes().sum(axis=0), psi_star - constraint.feature, atol=1e-12)
        assert blocks.losses.sum() == pytest.approx(constraint.loss, abs=1e-12)
        parts.append(blocks)
    # Any choice of one stored part per query bounds the true slack from below, everywhere.
    for _ in range(20):
        choice = rng.integers(0, 3, parts[0].losses.size)
        blocks = np.arange(choice.size)
        plane = sum(parts[k].planes()[blocks[choice == k]].sum(axis=0) for k in range(3))
        loss_value = sum(parts[k].losses[choice == k].sum() for k in range(3))
        w = 3.0 * rng.standard_normal(X.shape[1])
        exact = problem.most_violated(w)
        xi = exact.loss - float(w @ (psi_star - exact.feature))
        assert loss_value - float(w @ plane) <= xi + 1e-9


def test_one_query_or_a_dask_array_gives_no_parts(rng):
    X, grades, qid = _queries(rng, n_queries=1)
    assert _problem(X, grades, qid).most_violated(np.ones(X.shape[1])).blocks is None
    dask_array = pytest.importorskip("dask.array")
    X, grades, qid = _queries(rng)
    blocks = _problem(dask_array.from_array(X, chunks=50), grades, qid).most_violated(np.ones(X.shape[1])).blocks
    assert blocks is not None and blocks.planes() is None  # the losses come free, the planes are not computed


def test_the_parts_are_computed_only_when_asked_for_and_once(rng, monkeypatch):
    X, grades, qid = _queries(rng)
    problem = _problem(X, grades, qid)
    calls = []
    original = problem.feature_map.combine_groups

    def counting(*args):
        calls.append(1)
        return original(*args)

    monkeypatch.setattr(problem.feature_map, "combine_groups", counting)
    blocks = problem.most_violated(np.ones(X.shape[1])).blocks
    assert not calls
    first = blocks.planes()
    assert blocks.planes() is first and len(calls) == 1


@pytest.mark.parametrize("loss,C", [("ap", 100.0), ("pairwise", 100.0), ("ndcg_graded", 30.0)])
def test_the_cache_changes_no_optimum_and_saves_oracle_calls(rng, monkeypatch, loss, C):
    X, grades, qid = _queries(rng, n_queries=60, d=8)
    problem = _problem(X, grades, qid, loss)
    with_cache = solve_cutting_plane(problem, C, tol=1e-4)
    monkeypatch.setattr(cutting_plane, "CACHE_ROUNDS", 0)
    without = solve_cutting_plane(problem, C, tol=1e-4)
    assert with_cache.converged and without.converged
    # Both certified to C·tol: their objectives agree to within it.
    assert abs(with_cache.primal_objective - without.primal_objective) <= C * 1e-4
    assert with_cache.n_iter <= without.n_iter


def test_a_working_set_seeds_the_next_solve_and_is_checked(rng):
    X, grades, qid = _queries(rng)
    problem = _problem(X, grades, qid)
    first = solve_cutting_plane(problem, 1.0)
    assert isinstance(first.working_set, WorkingSet) and first.working_set.planes.shape[1] == X.shape[1]
    cold = solve_cutting_plane(problem, 10.0, tol=1e-4)
    seeded = solve_cutting_plane(problem, 10.0, tol=1e-4, w0=first.w, planes=first.working_set)
    assert cold.converged and seeded.converged
    assert abs(cold.primal_objective - seeded.primal_objective) <= 10.0 * 1e-4
    # The seeded dual bound holds from the first iteration on: never above the optimum.
    assert max(r.dual_objective for r in seeded.history) <= cold.primal_objective + 1e-9
    with pytest.raises(ValueError, match="expected a working set of planes with 6 features"):
        solve_cutting_plane(problem, 1.0, planes=WorkingSet(np.zeros((2, 5)), np.zeros(2)))
    with pytest.raises(ValueError, match="finite"):
        solve_cutting_plane(problem, 1.0, planes=WorkingSet(np.full((1, 6), np.nan), np.zeros(1)))


def test_warm_start_reuses_planes_only_on_the_same_data(rng):
    X, grades, qid = _queries(rng)
    model = RankSVM(C=1.0, warm_start=True).fit(X, grades, qid=qid)
    kept = model._warm_planes
    assert kept is not None and kept[1].planes.shape[1] == X.shape[1]
    model.set_params(C=10.0).fit(X, grades, qid=qid)
    cold = RankSVM(C=10.0).fit(X, grades, qid=qid)
    assert model.converged_ and abs(model.history_[-1].primal_objective - cold.history_[-1].primal_objective) < 0.1
    # Other labels: the previous planes would give a false bound, so they are not used.
    other = grades[::-1].copy()
    seen = {}
    original = cutting_plane.solve_cutting_plane

    def spy(*args, **kwargs):
        seen["planes"] = kwargs.get("planes")
        return original(*args, **kwargs)

    # The estimator reaches the cutting plane through the solver table, which looks it up at each call.
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        cutting_plane.solve_cutting_plane = spy
        try:
            model.fit(X, other, qid=qid)
            assert seen["planes"] is None
            model.fit(X, other, qid=qid)
            assert seen["planes"] is not None  # the same data again
        finally:
            cutting_plane.solve_cutting_plane = original
    import pickle

    assert not hasattr(pickle.loads(pickle.dumps(model)), "_warm_planes")
