"""Whole training runs on real data, per loss and inference method.

The analogue of Tables 2–3 of Mohapatra et al. (2018) and Mohapatra et al. (2014):
AP-SVM and NDCG-SVM trained one-vs-rest — one query per class of
scikit-learn's digits (1,797 × 64, dense) and per subject of Cora (2,708
papers × 1,433 binary word features, CSR; read from the files shipped in
``graphdatascience``, the ``experiments`` extra) — with
every inference method registered for the loss, plus ``"auto"``, next to
the binary SVM baseline (``loss="zero_one"``) and AP-SVM-APPX with k = 50
(``RankSVM(loss="ap", approx=50)``).  The benchmark's time is the whole
``fit``; ``extra_info`` adds what the papers' tables report:

* ``inference_seconds`` — time inside loss-augmented inference over the
  run, the sum of ``IterationRecord.inference_seconds`` over
  ``RankSVM.history_`` (each record times one oracle call: the score
  product, the inference method and the joint-feature combination); for
  APPX, stage 2 only (stage 1 is the ``binary`` run with the same C);
* ``n_iter`` and ``inference_ms_per_iter`` (Table 3's quantity);
* ``train_ap`` — the training AP, to check every exact method reached the
  same solution.

``--bench-scale small`` trains one digit class and one Cora subject on the
first 300 samples of each.
"""

from __future__ import annotations

import functools

import numpy as np
from sklearn.datasets import load_digits

import rankopt
from rankopt.plugins import PluginKind, default_registry

C = 10.0
TOL = 1e-3
#: (data set, class) queries.  Cora subjects 0 (Case_Based, 298 papers) and 4
#: (Probabilistic_Methods, 426): a hard and a middling one.
QUERIES = {
    "full": (("digits", 3), ("digits", 5), ("digits", 8), ("digits", 9), ("cora", 0), ("cora", 4)),
    "small": (("digits", 3), ("cora", 4)),
}
N_SAMPLES = {"full": None, "small": 300}
ROUNDS = {"full": 3, "small": 1}


@functools.cache
def _dataset(name, n_samples):
    """(X, class of each sample), the first ``n_samples`` samples."""
    if name == "digits":
        X, digit = load_digits(return_X_y=True)
        return (X / 16.0)[:n_samples], digit[:n_samples]
    from rankopt.data.cora import load_cora

    cora = load_cora()
    return cora.X[:n_samples], cora.subject[:n_samples]


def training_configs() -> list[tuple[str, str, float | None]]:
    """(loss, inference method, approx) for every method exact for the loss, plus the baselines."""
    registry = default_registry()
    methods = [info.cls() for info in registry.list(PluginKind.INFERENCE_METHOD)]
    configs = [("zero_one", "auto", None)]
    for loss_name in ("ap", "ndcg"):
        loss = registry.resolve_loss(loss_name)
        configs += [(loss_name, m.name, None) for m in methods if m.unsupported_reason(loss) is None]
        configs.append((loss_name, "auto", None))
    configs.append(("ap", "auto", 50.0))
    return configs


def _config_id(config) -> str:
    loss, method, approx = config
    if loss == "zero_one":
        return "binary"
    return f"{loss}-{method}" + ("" if approx is None else f"-appx{approx:g}")


def pytest_generate_tests(metafunc):
    scale = metafunc.config.rankopt_bench_scale
    if "config" in metafunc.fixturenames:
        configs = training_configs()
        metafunc.parametrize("config", configs, ids=[_config_id(c) for c in configs])
    if "query" in metafunc.fixturenames:
        queries = QUERIES[scale]
        metafunc.parametrize("query", queries, ids=[f"{name}{cls}" for name, cls in queries])


def test_training(benchmark, request, config, query):
    scale = request.config.rankopt_bench_scale
    loss, method, approx = config
    dataset, query_class = query
    X, label = _dataset(dataset, N_SAMPLES[scale])
    y = label == query_class

    def fit():
        return rankopt.RankSVM(loss=loss, C=C, tol=TOL, inference=method, approx=approx).fit(X, y)

    benchmark.group = f"training-{dataset}{query_class}"
    ranker = benchmark.pedantic(fit, rounds=ROUNDS[scale], iterations=1)
    inference_seconds = float(sum(record.inference_seconds for record in ranker.history_))
    benchmark.extra_info.update(
        bench="training",
        dataset=dataset,
        query_class=int(query_class),
        n_pos=int(np.count_nonzero(y)),
        n_neg=int(np.count_nonzero(~y)),
        loss=loss,
        method=_config_id(config),
        resolved_method=ranker.inference_,
        approx=approx,
        C=C,
        n_iter=int(ranker.n_iter_),
        converged=bool(ranker.converged_),
        inference_seconds=inference_seconds,
        inference_ms_per_iter=1e3 * inference_seconds / ranker.n_iter_,
        train_ap=float(ranker.score(X, y)),
    )
