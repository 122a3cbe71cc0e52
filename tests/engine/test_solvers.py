"""The solver table: every estimator reaches its solver through it, and a solver refuses what it cannot take."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from rankopt import HOAPSVM, HOBSVM, LatentAPSVM, RankSVM
from rankopt.engine import cccp
from rankopt.engine.solvers import SOLVERS, FitNeeds, SolverSpec, get_solver
from rankopt.exceptions import ConvergenceWarning

#: Every estimator × solver pair that makes sense, and how it reaches the solver: directly, or as the
#: inner solver of CCCP.
EXPECTED_PAIRS = {
    ("RankSVM", "cutting_plane"),
    ("RankSVM", "bcfw"),
    ("HOBSVM", "cutting_plane"),
    ("HOAPSVM", "cutting_plane"),
    ("LatentAPSVM", "cutting_plane"),
}


def _ranking_data(rng, n_queries=6, size=8):
    qid = np.repeat(np.arange(n_queries), size)
    X = rng.standard_normal((qid.size, 4))
    grades = np.clip(np.round(X[:, 0] + rng.standard_normal(qid.size)), 0, 3).astype(int)
    grades[::size] = 2  # every query has something to order
    grades[1::size] = 0
    return X, grades, qid


def _fits(rng):
    X, grades, qid = _ranking_data(rng)
    yield "RankSVM", lambda: RankSVM(C=1.0).fit(X, grades, qid=qid)
    yield "RankSVM", lambda: RankSVM(C=1.0, solver="bcfw").fit(X, grades, qid=qid)
    yield "RankSVM", lambda: RankSVM(C=1.0, approx=50).fit(X, grades >= 1)  # APPX: both stages via the table
    groups = rng.integers(0, 5, 30)
    y = (rng.uniform(size=5) < 0.5)[groups]
    y[:2] = [True, False]
    Xg = rng.normal(size=(30, 3)) + 0.6 * y[:, None] * (np.arange(3) == 0)
    yield "HOBSVM", lambda: HOBSVM(C=1.0).fit(Xg, y, groups=groups)
    yield "HOAPSVM", lambda: HOAPSVM(C=1.0, cccp_max_iter=2).fit(Xg, y, groups=groups)
    bags = [rng.normal(size=(3, 2)) + (i % 2) for i in range(8)]
    yield "LatentAPSVM", lambda: LatentAPSVM(C=1.0, n_init=1, cccp_max_iter=2).fit(bags, np.arange(8) % 2)


def test_every_estimator_reaches_its_solver_through_the_table(rng, monkeypatch):
    seen = set()
    run = SolverSpec.run
    current = {}

    calls = []

    def spy(self, *args, **kwargs):
        seen.add((current["estimator"], self.name))
        calls.append(self.name)
        return run(self, *args, **kwargs)

    monkeypatch.setattr(SolverSpec, "run", spy)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        for estimator, fit in _fits(rng):
            current["estimator"] = estimator
            before = len(calls)
            fit()
            assert len(calls) > before, estimator  # every fit ran a solver through the table
    assert seen == EXPECTED_PAIRS


def test_the_table_lists_the_solvers_and_refuses_an_unknown_name():
    assert sorted(SOLVERS) == ["bcfw", "cutting_plane"]
    assert all(get_solver(name) is SOLVERS[name] for name in SOLVERS)
    with pytest.raises(ValueError, match="expected solver to be 'cutting_plane' or 'bcfw', got 'sgd' instead"):
        get_solver("sgd")


@pytest.mark.parametrize(
    ("needs", "message"),
    [
        (dict(queries=False), "expected queries .* got no queries instead; use solver='cutting_plane'"),
        (dict(ranking=False), "expected a rank loss with solver='bcfw'"),
        (dict(in_memory=False), "expected NumPy or CSR data with solver='bcfw' .* Dask array"),
        (dict(warm_start=True), "expected warm_start=False with solver='bcfw'"),
        (dict(approx=True), "expected approx=None with solver='bcfw'"),
    ],
)
def test_a_solver_refuses_a_fit_it_cannot_take_with_the_solver_to_use(needs, message):
    fit = FitNeeds(**{**dict(queries=True, ranking=True, in_memory=True, warm_start=False, approx=False), **needs})
    assert SOLVERS["bcfw"].refusal(fit) is not None
    assert SOLVERS["cutting_plane"].refusal(fit) is None
    with pytest.raises(ValueError, match=message):
        raise ValueError(SOLVERS["bcfw"].refusal(fit))


def test_a_solver_refuses_a_problem_of_the_wrong_type_before_any_work(rng):
    from rankopt.plugins import default_registry

    registry = default_registry()
    X, grades, _ = _ranking_data(rng)
    problem = registry.get_model("ranking").build_problem(
        X, grades >= 1, registry.get_loss("ap"), registry.get_feature_map("linear"), registry=registry
    )
    with pytest.raises(ValueError, match="expected a BlockProblem with solver='bcfw'"):
        SOLVERS["bcfw"].run(problem, 1.0, tol=1e-3, max_iter=10)


def test_cccp_refuses_an_inner_solver_that_cannot_start_from_w_t():
    with pytest.raises(ValueError, match="expected an inner solver that starts from w_t, got solver='bcfw'"):
        cccp.solve_cccp(None, 1.0, np.zeros(2), inner_solver=SOLVERS["bcfw"])
