"""Large C: iterations and CPU time of the data sets of issue 21, and RankSVMCV against one cold fit.

Four measurements, each in one run with its baseline timed alongside:

* ``test_ap_svm_against_linear_svc`` — AP-SVM on n × d float32 samples (1 %
  relevant, shifted by 0.5 along a random unit direction; 2·10⁵ × 100 at
  ``--bench-scale full``) at C ∈ {1, 10, 100, 1000}, tol 1e-3, against
  scikit-learn's ``LinearSVC`` (hinge, no intercept, the 0-1 loss's class
  weights, tol 1e-3) on the same data, the two called in alternation, CPU
  time, one BLAS thread (set ``OMP_NUM_THREADS=1``).  ``extra_info``:
  iterations, certificate, both medians and ``ratio`` (target ≤ 2 at C = 10
  and 100, aim ≤ 1).
* ``test_queries_iterations`` — AP and the pairwise loss over 201 queries of
  5–25 documents × 300 standardised features (grades 0–4 by quantiles of a
  noisy linear score, relevant from grade 2; 30 queries × 50 features at
  ``small``) at the same Cs: iterations and CPU time; the only assertion is
  that every fit is certified.
* ``test_queries_against_lgbm_ranker`` — the AP and pairwise fits over those
  queries at C = 1000 against LightGBM's ``LGBMRanker`` (lambdarank, 100
  trees, one thread) on the same data, alternated, CPU time; ``ratio`` (aim
  ≤ 1).
* ``test_letor_like_against_lgbm_ranker`` — the same comparison on data of the
  shape of LightGBM's lambdarank example (``letor_like_data``: 200 queries of
  1–30 documents, 300 features in [0, 1] at two decimals, about a third of
  them present per row, a third constant within a query, correlated; grades
  0–4, relevant from 2; 30 × 50 at ``small``), RankSVM on standardised
  features, LightGBM on the raw ones: ``ratio`` (target ≤ 1.5, aim ≤ 1) and
  the iterations at C = 1 (aim: those at C = 1000 ≤ 5× them).
* ``test_rank_svm_cv_against_one_cold_fit`` — ``RankSVMCV`` over
  Cs = 10⁻² … 10³ with 3 folds (``GroupKFold`` over queries) on the AP case
  above, against one cold ``RankSVM(C=1000)`` on all of it, alternated, CPU
  time; ``ratio`` (target ≤ 3).

Speed is reported, not asserted (the machine is shared and noisy); the
tables print at the end of the module.  ``python benchmarks/bench_large_c.py
[--scale full]`` prints them without pytest.
"""

from __future__ import annotations

import argparse
import time
import warnings

import numpy as np

import rankopt

TOL = 1e-3
CS = (1.0, 10.0, 100.0, 1000.0)
SIZES = {
    "full": dict(ap=(200_000, 100), queries=(201, 300), letor=(200, 300)),
    "small": dict(ap=(5_000, 20), queries=(30, 50), letor=(30, 50)),
}


def ap_data(n: int, d: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, d)).astype(np.float32)
    y = rng.random(n) < 0.01
    direction = rng.standard_normal(d)
    X[y] += (0.5 * direction / np.linalg.norm(direction)).astype(np.float32)
    return X, y


def query_data(n_queries: int, d: int, seed: int = 1) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    sizes = rng.integers(5, 26, n_queries)
    qid = np.repeat(np.arange(n_queries), sizes)
    X = rng.standard_normal((qid.size, d))
    w = np.zeros(d)
    w[:5] = rng.standard_normal(5)
    latent = X @ w + rng.standard_normal(n_queries)[qid] * 0.5 + rng.standard_normal(qid.size)
    grades = np.digitize(latent, np.quantile(latent, [0.5, 0.75, 0.9, 0.97]))
    return (X - X.mean(0)) / X.std(0), grades, qid


def letor_like_data(n_queries: int, d: int, seed: int = 2) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Raw features of the shape of a small real LETOR set (LightGBM's lambdarank example): query sizes
    1–30 (geometric), values in [0, 1] at two decimals, each feature present in 5–60 % of the rows, a
    third of the features constant within a query, the rest mixed from 30 latent factors (groups of
    correlated features); grades 0–4 by quantiles of a noisy score of a tenth of the features."""
    rng = np.random.default_rng(seed)
    sizes = np.minimum(1 + rng.geometric(1 / 14, n_queries), 30)
    qid = np.repeat(np.arange(n_queries), sizes)
    n = qid.size
    per_query = rng.random(d) < 1 / 3
    presence = rng.uniform(0.05, 0.6, d)
    mixing = rng.standard_normal((30, d)) * (rng.random((30, d)) < 0.1)
    raw = rng.standard_normal((n, 30)) @ mixing + 0.3 * rng.standard_normal((n, d))
    raw[:, per_query] = rng.standard_normal((n_queries, d))[qid][:, per_query]
    present = rng.random((n, d)) < presence
    present[:, per_query] = (rng.random((n_queries, d)) < presence)[qid][:, per_query]
    X = np.where(present, np.round(1 / (1 + np.exp(-raw)), 2), 0.0)
    w = rng.standard_normal(d) * (rng.random(d) < 0.1)
    score = X @ w + 0.3 * rng.standard_normal(n_queries)[qid] + 0.7 * rng.standard_normal(n)
    return X, np.digitize(score, np.quantile(score, [0.5, 0.75, 0.9, 0.97])), qid


def standardised(X: np.ndarray) -> np.ndarray:
    """Columns to mean 0 and variance 1 (constant columns to 0)."""
    std = X.std(0)
    return (X - X.mean(0)) / np.where(std > 0, std, 1.0)


def alternate(first, second, rounds: int = 3):
    """CPU seconds of ``first()`` and ``second()`` called in alternation, ``rounds`` each, and their last results."""
    first(), second()  # warm up
    times_first, times_second = [], []
    for _ in range(rounds):
        start = time.process_time()
        result_first = first()
        times_first.append(time.process_time() - start)
        start = time.process_time()
        result_second = second()
        times_second.append(time.process_time() - start)
    return times_first, times_second, result_first, result_second


def linear_svc(C: float, y: np.ndarray):
    from sklearn.svm import LinearSVC

    from rankopt.losses.zero_one import ZeroOneLoss

    weights = ZeroOneLoss().sample_weights(y)
    class_weight = {True: float(weights[y][0]), False: float(weights[~y][0])}
    return LinearSVC(
        loss="hinge", fit_intercept=False, C=C, class_weight=class_weight, dual=True, tol=TOL, max_iter=1_000_000
    )


def measure_ap(n: int, d: int, C: float, rounds: int = 3) -> dict:
    X, y = ap_data(n, d)

    def fit_svc():
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return linear_svc(C, y).fit(X, y)

    times, times_svc, ranker, _ = alternate(lambda: rankopt.RankSVM(loss="ap", C=C, tol=TOL).fit(X, y), fit_svc, rounds)
    return dict(
        case=f"ap-{n}x{d}",
        C=C,
        n_iter=int(ranker.n_iter_),
        converged=bool(ranker.converged_),
        gap_over_tol=float(ranker.duality_gap_ / (C * TOL)),
        rankopt_median=float(np.median(times)),
        linearsvc_median=float(np.median(times_svc)),
        ratio=float(np.median(times) / np.median(times_svc)),
    )


def measure_queries(n_queries: int, d: int, loss: str, C: float) -> dict:
    X, grades, qid = query_data(n_queries, d)
    start = time.process_time()
    ranker = rankopt.RankSVM(loss=loss, C=C, tol=TOL, relevant_at=2).fit(X, grades, qid=qid)
    return dict(
        case=f"{loss}-{n_queries}q-x{d}",
        C=C,
        n_iter=int(ranker.n_iter_),
        converged=bool(ranker.converged_),
        gap_over_tol=float(ranker.duality_gap_ / (C * TOL)),
        seconds=time.process_time() - start,
    )


def measure_lgbm(
    n_queries: int, d: int, loss: str, C: float = 1000.0, rounds: int = 3, data: str = "synthetic"
) -> dict:
    import lightgbm

    if data == "letor-like":
        X_raw, grades, qid = letor_like_data(n_queries, d)
        X = standardised(X_raw)
    else:
        X, grades, qid = query_data(n_queries, d)
        X_raw = X
    group = np.bincount(qid)  # both generators' qids are 0 … n_queries − 1, rows grouped

    def lgbm():
        return lightgbm.LGBMRanker(n_estimators=100, n_jobs=1, verbose=-1).fit(X_raw, grades, group=group)

    times, times_lgbm, ranker, _ = alternate(
        lambda: rankopt.RankSVM(loss=loss, C=C, tol=TOL, relevant_at=2).fit(X, grades, qid=qid), lgbm, rounds
    )
    at_one = rankopt.RankSVM(loss=loss, C=1.0, tol=TOL, relevant_at=2).fit(X, grades, qid=qid)
    return dict(
        case=f"{loss}-{n_queries}q-x{d}" + ("-letor-like" if data == "letor-like" else ""),
        n_iter_C1=int(at_one.n_iter_),
        C=C,
        n_iter=int(ranker.n_iter_),
        converged=bool(ranker.converged_),
        rankopt_median=float(np.median(times)),
        lgbm_median=float(np.median(times_lgbm)),
        ratio=float(np.median(times) / np.median(times_lgbm)),
    )


def measure_cv(n_queries: int, d: int, rounds: int = 2) -> dict:
    X, grades, qid = query_data(n_queries, d)
    Cs = (0.01, 0.1, 1.0, 10.0, 100.0, 1000.0)
    times_cv, times_cold, cv, cold = alternate(
        lambda: rankopt.RankSVMCV(Cs=Cs, cv=3, relevant_at=2, tol=TOL).fit(X, grades, qid=qid),
        lambda: rankopt.RankSVM(C=1000.0, relevant_at=2, tol=TOL).fit(X, grades, qid=qid),
        rounds,
    )
    return dict(
        case=f"ap-{n_queries}q-x{d}",
        C_=float(cv.C_),
        cv_iterations=int(cv.path_n_iter_),
        cold_iterations=int(cold.n_iter_),
        n_certified=int(cv.cv_results_["n_certified"].sum()),
        n_fits=3 * len(Cs),
        refit_converged=bool(cv.converged_),
        cold_converged=bool(cold.converged_),
        cv_median=float(np.median(times_cv)),
        cold_median=float(np.median(times_cold)),
        ratio=float(np.median(times_cv) / np.median(times_cold)),
    )


def ratio_table(records, baseline: str, key: str) -> str:
    """RankSVM against a baseline timed alongside (``key``: the baseline's median in each record)."""
    lines = [
        f"| case | C | iterations (at C = 1) | certified | rankopt CPU s | {baseline} CPU s | ratio |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in records:
        at_one = f" ({r['n_iter_C1']})" if "n_iter_C1" in r else ""
        lines.append(
            f"| {r['case']} | {r['C']:g} | {r['n_iter']}{at_one} | {'yes' if r['converged'] else 'NO'} | "
            f"{r['rankopt_median']:.3g} | {r[key]:.3g} | {r['ratio']:.2f} |"
        )
    return "\n".join(lines)


def ap_table(records) -> str:
    return ratio_table(records, "LinearSVC", "linearsvc_median")


def lgbm_table(records) -> str:
    return ratio_table(records, "LGBMRanker", "lgbm_median")


def queries_table(records) -> str:
    lines = ["| case | C | iterations | certified | CPU s |", "|---|---|---|---|---|"]
    for r in records:
        lines.append(
            f"| {r['case']} | {r['C']:g} | {r['n_iter']} | {'yes' if r['converged'] else 'NO'} | {r['seconds']:.3g} |"
        )
    return "\n".join(lines)


def cv_table(r) -> str:
    return (
        "| case | chosen C | CV iterations (18 fits + refit) | certified fits | CV CPU s | cold C = 1000 CPU s "
        "(iterations) | ratio |\n|---|---|---|---|---|---|---|\n"
        f"| {r['case']} | {r['C_']:g} | {r['cv_iterations']} | {r['n_certified']} / {r['n_fits']} | "
        f"{r['cv_median']:.3g} | {r['cold_median']:.3g} ({r['cold_iterations']}) | {r['ratio']:.2f} |"
    )


# ------------------------------------------------------------------ pytest

try:
    import pytest
except ModuleNotFoundError:  # pragma: no cover - the script needs no pytest
    pytest = None

if pytest is not None:

    @pytest.fixture(scope="module")
    def report(request):
        records = {"ap": [], "queries": [], "lgbm": [], "cv": []}
        yield records
        if request.config.getoption("benchmark_disable"):
            return  # a run that times nothing (CI's smoke run) has no table to show
        capture = request.config.pluginmanager.getplugin("capturemanager")
        with capture.global_and_fixture_disabled():
            if records["ap"]:
                print("\n\n### AP-SVM against LinearSVC, CPU-time medians\n")
                print(ap_table(records["ap"]))
            if records["queries"]:
                print("\n### Over queries: iterations\n")
                print(queries_table(records["queries"]))
            if records["lgbm"]:
                print("\n### Over queries at C = 1000 against LGBMRanker (100 trees, one thread)\n")
                print(lgbm_table(records["lgbm"]))
            for r in records["cv"]:
                print("\n### RankSVMCV (6 Cs × 3 folds) against one cold fit at C = 1000\n")
                print(cv_table(r))

    @pytest.mark.parametrize("C", CS)
    def test_ap_svm_against_linear_svc(benchmark, request, report, C):
        benchmark.group = "large-C-ap"
        n, d = SIZES[request.config.rankopt_bench_scale]["ap"]
        info = benchmark.pedantic(measure_ap, args=(n, d, C), rounds=1, iterations=1)
        benchmark.extra_info.update(info)
        report["ap"].append(info)
        assert info["converged"] and info["gap_over_tol"] <= 1.0, info

    @pytest.mark.parametrize("loss", ["ap", "pairwise"])
    @pytest.mark.parametrize("C", CS)
    def test_queries_iterations(benchmark, request, report, loss, C):
        benchmark.group = "large-C-queries"
        n_queries, d = SIZES[request.config.rankopt_bench_scale]["queries"]
        info = benchmark.pedantic(measure_queries, args=(n_queries, d, loss, C), rounds=1, iterations=1)
        benchmark.extra_info.update(info)
        report["queries"].append(info)
        assert info["converged"] and info["gap_over_tol"] <= 1.0, info

    @pytest.mark.parametrize("loss", ["ap", "pairwise"])
    def test_queries_against_lgbm_ranker(benchmark, request, report, loss):
        benchmark.group = "large-C-lgbm"
        n_queries, d = SIZES[request.config.rankopt_bench_scale]["queries"]
        rounds = 3 if request.config.rankopt_bench_scale == "full" else 1
        info = benchmark.pedantic(measure_lgbm, args=(n_queries, d, loss), kwargs={"rounds": rounds}, rounds=1)
        benchmark.extra_info.update(info)
        report["lgbm"].append(info)
        assert info["converged"], info

    @pytest.mark.parametrize("loss", ["ap", "pairwise"])
    def test_letor_like_against_lgbm_ranker(benchmark, request, report, loss):
        benchmark.group = "large-C-letor-like"
        n_queries, d = SIZES[request.config.rankopt_bench_scale]["letor"]
        rounds = 3 if request.config.rankopt_bench_scale == "full" else 1
        info = benchmark.pedantic(
            measure_lgbm, args=(n_queries, d, loss), kwargs={"rounds": rounds, "data": "letor-like"}, rounds=1
        )
        benchmark.extra_info.update(info)
        report["lgbm"].append(info)
        assert info["converged"], info

    def test_rank_svm_cv_against_one_cold_fit(benchmark, request, report):
        benchmark.group = "large-C-cv"
        n_queries, d = SIZES[request.config.rankopt_bench_scale]["queries"]
        info = benchmark.pedantic(measure_cv, args=(n_queries, d), rounds=1, iterations=1)
        benchmark.extra_info.update(info)
        report["cv"].append(info)
        assert info["refit_converged"] and info["cold_converged"], info


# ------------------------------------------------------------------ script


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scale", choices=tuple(SIZES), default="small")
    args = parser.parse_args(argv)
    sizes = SIZES[args.scale]
    print("### AP-SVM against LinearSVC, CPU-time medians\n")
    print(ap_table([measure_ap(*sizes["ap"], C) for C in CS]), flush=True)
    print("\n### Over queries: iterations\n")
    print(queries_table([measure_queries(*sizes["queries"], loss, C) for loss in ("ap", "pairwise") for C in CS]))
    print("\n### Over queries at C = 1000 against LGBMRanker (100 trees, one thread)\n")
    print(lgbm_table([measure_lgbm(*sizes["queries"], loss) for loss in ("ap", "pairwise")]))
    print("\n### LETOR-like data at C = 1000 against LGBMRanker (100 trees, one thread)\n")
    print(lgbm_table([measure_lgbm(*sizes["letor"], loss, data="letor-like") for loss in ("ap", "pairwise")]))
    print("\n### RankSVMCV (6 Cs × 3 folds) against one cold fit at C = 1000\n")
    print(cv_table(measure_cv(*sizes["queries"])))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
