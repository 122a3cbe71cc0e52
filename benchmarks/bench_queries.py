"""Training over many queries: RankSVM(qid=...) against LGBMRanker and against one inference call per query.

The targets of issue 13, each measured as a ratio of two medians timed in
alternation in the same run (the machine is shared; see ``bench_inference.py``):

* ``test_target`` — AP-SVM over 200 queries × 16 documents × 300 features
  (LETOR-like: grades 0–4, relevant from 1, tol 1e-3, C = 1) against
  ``LGBMRanker`` (lambdarank, 100 trees, its defaults): ``ratio_vs_lightgbm``
  is to stay ≤ 2.  The same fit with the multi-query problem's batched call
  replaced by one single-query ``most_violated_ranking`` call per query
  (``most_violated_rankings_per_query``, the issue's 30 s model) gives
  ``ratio_vs_per_query_loop``.
* ``test_queries_scaling[Q]`` — Q ∈ {10², 10³, 10⁴} queries of 10–100
  documents (50 features), AP-SVM against LGBMRanker; and one oracle call
  (``problem.most_violated(w)`` at the fitted w: score product, batched
  inference, combination) against the per-query loop's.

LightGBM runs on one thread (``n_jobs=1``, its other parameters the
defaults) and rankopt's batched inference on ``OMP_NUM_THREADS`` threads: run
with ``OMP_NUM_THREADS=1`` to compare one core with one core.  Times are
wall-clock medians; ``extra_info`` holds the CPU times as well.
``--bench-scale small`` runs tiny sizes once.
"""

from __future__ import annotations

import contextlib
import time

import numpy as np
import pytest

import rankopt.models.ranking as ranking_model
from rankopt import RankSVM
from rankopt._validation import check_qid
from rankopt.api import most_violated_rankings_per_query
from rankopt.features.linear import LinearFeatureMap
from rankopt.plugins import default_registry

lightgbm = pytest.importorskip("lightgbm")

TOL = 1e-3
C = 1.0
TARGET = {
    "full": dict(n_queries=200, size=16, d=300, rounds=7, loop_rounds=3),
    "small": dict(n_queries=20, size=16, d=30, rounds=1, loop_rounds=1),
}
SCALING = {"full": (100, 1_000, 10_000), "small": (10, 30)}
SCALING_FEATURES = {"full": 50, "small": 8}
SCALING_ROUNDS = {"full": 2, "small": 1}


def letor_like(n_queries: int, sizes, d: int, seed: int = 0):
    """Queries of graded documents (0–4) whose grade follows a few features plus noise."""
    rng = np.random.default_rng(seed)
    sizes = np.broadcast_to(sizes, (n_queries,))
    qid = np.repeat(np.arange(n_queries), sizes)
    X = rng.standard_normal((qid.size, d))
    signal = X[:, :5] @ np.array([1.0, 0.7, 0.5, 0.3, 0.2]) + 0.5 * rng.standard_normal(n_queries)[qid]
    grades = np.clip(np.round(signal + rng.standard_normal(qid.size)), 0, 4).astype(np.int64)
    return X, grades, qid, sizes


def _timed(call):
    wall, cpu = time.perf_counter(), time.process_time()
    out = call()
    return out, time.perf_counter() - wall, time.process_time() - cpu


@contextlib.contextmanager
def per_query_inference():
    """The multi-query problem with one single-query inference call per query instead of the batched one."""
    batched = ranking_model.most_violated_rankings
    ranking_model.most_violated_rankings = most_violated_rankings_per_query
    try:
        yield
    finally:
        ranking_model.most_violated_rankings = batched


def _fit_rankopt(X, grades, qid):
    return RankSVM(loss="ap", C=C, tol=TOL).fit(X, grades, qid=qid)


def _fit_lightgbm(X, grades, sizes):
    # One thread, as rankopt's fit under OMP_NUM_THREADS=1: on a shared machine LightGBM's
    # default (every core) spins against the other load and measured 4 s for a 0.25 s fit.
    return lightgbm.LGBMRanker(n_jobs=1, verbose=-1).fit(X, grades, group=sizes)


def _medians(times):
    return {key: float(np.median(values)) for key, values in times.items()}


def test_target(benchmark, request):
    scale = request.config.rankopt_bench_scale
    spec = TARGET[scale]
    X, grades, qid, sizes = letor_like(spec["n_queries"], spec["size"], spec["d"])

    def run():
        times = {k: [] for k in ("rankopt", "lightgbm", "rankopt_cpu", "lightgbm_cpu", "loop", "loop_cpu")}
        for r in range(spec["rounds"]):
            model, wall, cpu = _timed(lambda: _fit_rankopt(X, grades, qid))
            times["rankopt"].append(wall), times["rankopt_cpu"].append(cpu)
            _, wall, cpu = _timed(lambda: _fit_lightgbm(X, grades, sizes))
            times["lightgbm"].append(wall), times["lightgbm_cpu"].append(cpu)
            if r < spec["loop_rounds"]:
                with per_query_inference():
                    looped, wall, cpu = _timed(lambda: _fit_rankopt(X, grades, qid))
                times["loop"].append(wall), times["loop_cpu"].append(cpu)
                np.testing.assert_allclose(looped.coef_, model.coef_, rtol=1e-9, atol=1e-12)
        return model, times

    benchmark.group = "queries-target"
    model, times = benchmark.pedantic(run, rounds=1, iterations=1)
    m = _medians(times)
    benchmark.extra_info.update(
        bench="queries-target",
        **{k: v for k, v in spec.items() if k != "rounds"},
        n_iter=int(model.n_iter_),
        converged=bool(model.converged_),
        **{f"{k}_median": v for k, v in m.items()},
        ratio_vs_lightgbm=m["rankopt"] / m["lightgbm"],
        ratio_vs_lightgbm_cpu=m["rankopt_cpu"] / m["lightgbm_cpu"],
        ratio_vs_per_query_loop=m["rankopt"] / m["loop"],
    )
    assert model.converged_


def pytest_generate_tests(metafunc):
    if "n_queries" in metafunc.fixturenames:
        metafunc.parametrize("n_queries", SCALING[metafunc.config.rankopt_bench_scale])


def test_queries_scaling(benchmark, request, n_queries):
    scale = request.config.rankopt_bench_scale
    rng = np.random.default_rng(n_queries)
    X, grades, qid, sizes = letor_like(n_queries, rng.integers(10, 101, n_queries), SCALING_FEATURES[scale])

    def run():
        times = {k: [] for k in ("rankopt", "lightgbm", "rankopt_cpu", "lightgbm_cpu")}
        for _ in range(SCALING_ROUNDS[scale]):
            model, wall, cpu = _timed(lambda: _fit_rankopt(X, grades, qid))
            times["rankopt"].append(wall), times["rankopt_cpu"].append(cpu)
            _, wall, cpu = _timed(lambda: _fit_lightgbm(X, grades, sizes))
            times["lightgbm"].append(wall), times["lightgbm_cpu"].append(cpu)
        return model, times

    benchmark.group = "queries-scaling"
    model, times = benchmark.pedantic(run, rounds=1, iterations=1)
    m = _medians(times)
    # One oracle call at the fitted w, batched against the per-query loop, alternated.
    problem = ranking_model.QueryRankingProblem(
        X, grades >= 1, check_qid(qid, qid.size), model.loss_, LinearFeatureMap(), "auto", default_registry()
    )
    oracle = {"batched": [], "loop": []}
    for _ in range(3):
        _, wall, _ = _timed(lambda: problem.most_violated(model.coef_))
        oracle["batched"].append(wall)
        with per_query_inference():
            _, wall, _ = _timed(lambda: problem.most_violated(model.coef_))
        oracle["loop"].append(wall)
    o = _medians(oracle)
    benchmark.extra_info.update(
        bench="queries-scaling",
        n_queries=n_queries,
        n_documents=int(qid.size),
        d=X.shape[1],
        n_iter=int(model.n_iter_),
        converged=bool(model.converged_),
        **{f"{k}_median": v for k, v in m.items()},
        ratio_vs_lightgbm=m["rankopt"] / m["lightgbm"],
        oracle_batched_median=o["batched"],
        oracle_loop_median=o["loop"],
        oracle_ratio_batched_vs_loop=o["batched"] / o["loop"],
    )
