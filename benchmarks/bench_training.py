"""Whole training runs on scikit-learn's digits, per loss and inference method.

The analogue of Tables 2–3 of ``qs-rank-losses`` and ``efficient-ap-svm``:
AP-SVM and NDCG-SVM trained one-vs-rest (one query per digit class) with
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

``--bench-scale small`` trains one class on the first 300 samples.
"""
from __future__ import annotations

import functools

import numpy as np
import pytest
from sklearn.datasets import load_digits

import rankopt
from rankopt.plugins import PluginKind, default_registry

C = 10.0
TOL = 1e-3
CLASSES = {"full": (3, 5, 8, 9), "small": (3,)}
N_SAMPLES = {"full": None, "small": 300}
ROUNDS = {"full": 3, "small": 1}


@functools.lru_cache(maxsize=None)
def _digits(n_samples):
    X, digit = load_digits(return_X_y=True)
    return (X / 16.0)[:n_samples], digit[:n_samples]


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
    if "digit_class" in metafunc.fixturenames:
        metafunc.parametrize("digit_class", CLASSES[scale])


def test_training(benchmark, request, config, digit_class):
    scale = request.config.rankopt_bench_scale
    loss, method, approx = config
    X, digit = _digits(N_SAMPLES[scale])
    y = digit == digit_class

    def fit():
        return rankopt.RankSVM(loss=loss, C=C, tol=TOL, inference=method, approx=approx).fit(X, y)

    benchmark.group = f"training-digit{digit_class}"
    ranker = benchmark.pedantic(fit, rounds=ROUNDS[scale], iterations=1)
    inference_seconds = float(sum(record.inference_seconds for record in ranker.history_))
    benchmark.extra_info.update(
        bench="training",
        digit_class=int(digit_class),
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
