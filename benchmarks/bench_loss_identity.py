"""A loss passed by name costs what the same loss passed as an object costs (issue 14).

``most_violated_ranking("ndcg", ...)`` builds a new ``NDCGLoss`` at every
call.  Its compiled form — the table D(1…|P|+|N|) of |P| + |N| logarithms,
checked once — is cached under the loss's parameters and shared by equal
losses, so the name no longer rebuilds it at every call (before: 1.5–2.4×
the object's time at |N| = 10⁶).  The two calls are timed in alternation
(``_alternate`` of ``bench_inference``) and ``extra_info`` records both
medians and their ratio, the target being about 1.

Sizes: ``full`` — |P| = 10³, |N| = 10⁶, mid-training scores; ``small`` —
|P| = 10, |N| = 10³.
"""

from __future__ import annotations

import functools

import numpy as np
from bench_inference import _alternate
from pytest_benchmark.utils import load_timer

import rankopt
from rankopt.plugins import default_registry

SIZES = {"full": (1_000, 1_000_000), "small": (10, 1_000)}
ROUNDS = {"full": (15, 3.0), "small": (2, 0.0)}


def test_loss_by_name_vs_object(benchmark, request):
    scale = request.config.rankopt_bench_scale
    n_pos, n_neg = SIZES[scale]
    rng = np.random.default_rng(0)
    pos, neg = rng.normal(1.0, 1.0, n_pos), rng.normal(0.0, 1.0, n_neg)
    by_object = functools.partial(
        rankopt.most_violated_ranking, default_registry().resolve_loss("ndcg"), pos, neg, "qs"
    )
    by_name = functools.partial(rankopt.most_violated_ranking, "ndcg", pos, neg, "qs")
    by_name(), by_object()  # the first call builds the table, as the first iteration of a training run does
    timer = load_timer(request.config.getoption("benchmark_timer")).target
    rounds, seconds = ROUNDS[scale]
    benchmark.group = "loss-by-name"
    times_name, times_object = benchmark.pedantic(
        _alternate, args=(by_name, by_object, timer, rounds, seconds), rounds=1, iterations=1
    )
    name_median, object_median = float(np.median(times_name)), float(np.median(times_object))
    benchmark.extra_info.update(
        n_pos=n_pos,
        n_neg=n_neg,
        loss="ndcg",
        method="qs",
        name_median=name_median,
        object_median=object_median,
        ratio=name_median / object_median,
    )
