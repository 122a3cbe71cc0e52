"""Batched inference over many queries: one compiled call against the single-query path.

Each benchmark times one public call
``rankopt.inference.batched.most_violated_rankings(loss, scores, relevance,
offsets, method, n_threads=...)`` — validation and every query's inference —
on Q queries of n documents each, 10 % of them relevant, scores
"mid-training" (relevant ~ N(1, 1), others ~ N(0, 1)); graded cases draw
grades 0–4 (relevant at ≥ 1 for the binary losses).

Sweep (``--bench-scale full``; ``small`` uses tiny sizes):
Q ∈ {10², 10³, 10⁴} × n ∈ {10, 100, 1000}, up to 10⁶ documents in all
(Q = 10⁴ with n = 1000 is left out), for AP ("auto", i.e. qs) and the
graded pairwise loss, on 1 and 2 threads; and the reference it replaces,
one single-query call per query in Python
(``most_violated_rankings_per_query``), up to 10⁵ documents.

The targets are paired ratios, both sides timed in alternation in one run
(``test_paired_ratio``; medians in ``extra_info``):

* ``per_doc`` — AP over 10⁴ queries of 100 documents, 1 thread, per
  document, against single-query qs with |P| = 10³, |N| = 10⁶ per document
  (target ≤ 2);
* ``threads`` — the same batch on 1 thread against 2 threads, wall clock
  whatever ``--benchmark-timer`` says, since CPU time adds the threads' times
  up (target ≥ 1.6; needs two idle cores);
* ``loop`` — the Python loop over 10³ queries of 100 documents against the
  batch (1 thread), per call;
* ``ndcg_graded`` — graded NDCG@10 (the position-based Ψ, grades 0–4) over 10⁴
  queries of 100 documents against the AP batch of the same shape, 1 thread
  each (target ≤ 20);
* ``graded_plugin`` — the example plugin's ``dcg_zipf`` (k = 10, a gain table,
  D(j) = 1/j; ``plugins/rankopt-graded``, no compiled code) against the
  built-in ``ndcg_graded`` on the same batch, 1 thread each (issue 29: target
  ≤ 1.5, aim ≤ 1.1).

``graded_plugin_rbp`` is reported without a target: the plugin's
``rbp_graded`` (no cutoff: all 100 positions carry weight, a full sort per
query) against ``ndcg_graded``.

One paired ratio is reported without a target: ``per_doc_balanced``, the
``per_doc`` batch against single-query qs with the batch's class balance
(|N| = 10⁶, |P| = |N|/9, 10 % relevant).  qs's cost per document grows with
|P| (Theorem 2: O(|N| log |P| + |P| log |N|)), so the ``per_doc`` baseline, at
0.1 % relevant, is qs's fastest regime; this one compares like with like.
"""

from __future__ import annotations

import functools
import time
from dataclasses import dataclass

import numpy as np
import pytest
from bench_inference import _alternate
from pytest_benchmark.utils import load_timer

import rankopt
from rankopt.api import most_violated_rankings, most_violated_rankings_per_query
from rankopt.inference import batched

MAX_DOCS = 1_000_000
MAX_LOOP_DOCS = 100_000
PAIRED_ROUNDS = {"small": (3, 0.0), "full": (15, 10.0)}


@dataclass(frozen=True)
class Batch:
    n_queries: int
    n_docs: int  # per query
    seed: int = 0

    @property
    def id(self) -> str:
        return f"Q{self.n_queries}-n{self.n_docs}"

    @functools.cache  # noqa: B019 - a handful of frozen cases, kept for the whole run on purpose
    def arrays(self):
        """(scores, 0/1 relevance, grades 0–4, offsets)."""
        rng = np.random.default_rng(self.seed)
        total = self.n_queries * self.n_docs
        grades = np.where(rng.random(total) < 0.1, rng.integers(1, 5, total), 0)
        relevance = (grades >= 1).astype(np.int64)
        scores = np.where(relevance == 1, rng.normal(1, 1, total), rng.normal(0, 1, total))
        offsets = np.arange(self.n_queries + 1, dtype=np.int64) * self.n_docs
        return scores, relevance, grades, offsets


def batches(scale: str) -> list[Batch]:
    if scale == "full":
        return [Batch(q, n) for q in (100, 1000, 10_000) for n in (10, 100, 1000) if q * n <= MAX_DOCS]
    return [Batch(q, n) for q in (3, 10) for n in (5, 20)]


def pytest_generate_tests(metafunc):
    scale = metafunc.config.rankopt_bench_scale
    if "batch" in metafunc.fixturenames:
        cases = batches(scale)
        if "n_threads" not in metafunc.fixturenames:  # the Python loop
            cases = [b for b in cases if b.n_queries * b.n_docs <= MAX_LOOP_DOCS]
        metafunc.parametrize("batch", cases, ids=[b.id for b in cases])
    if "target" in metafunc.fixturenames:
        metafunc.parametrize(
            "target",
            ["per_doc", "per_doc_balanced", "threads", "loop", "ndcg_graded", "graded_plugin", "graded_plugin_rbp"],
        )


def _relevance_for(loss: str, batch: Batch) -> np.ndarray:
    _, relevance, grades, _ = batch.arrays()
    return grades if loss in ("pairwise", "ndcg_graded") else relevance


@pytest.mark.parametrize("n_threads", [1, 2])
@pytest.mark.parametrize("loss", ["ap", "pairwise", "ndcg_graded"])
def test_batched(benchmark, batch, loss, n_threads, monkeypatch):
    monkeypatch.setattr(batched, "DOCS_PER_THREAD", 1)  # the threads asked for, even on tiny batches
    scores, _, _, offsets = batch.arrays()
    relevance = _relevance_for(loss, batch)
    benchmark.group = f"batched-{batch.id}-{loss}"
    result = benchmark(most_violated_rankings, loss, scores, relevance, offsets, "auto", n_threads=n_threads)
    benchmark.extra_info.update(
        bench="batched",
        loss=loss,
        n_queries=batch.n_queries,
        n_docs=batch.n_docs,
        n_threads=n_threads,
        queries_used=int(result.usable.sum()),
    )


@pytest.mark.parametrize("loss", ["ap", "pairwise", "ndcg_graded"])
def test_python_loop(benchmark, batch, loss):
    scores, _, _, offsets = batch.arrays()
    relevance = _relevance_for(loss, batch)
    benchmark.group = f"batched-{batch.id}-{loss}"
    benchmark(most_violated_rankings_per_query, loss, scores, relevance, offsets, "auto")
    benchmark.extra_info.update(
        bench="batched", loss=loss, n_queries=batch.n_queries, n_docs=batch.n_docs, n_threads="python loop"
    )


def _target_sizes(scale: str):
    """(batch, single-query |P|, |N|, loop batch) of the paired targets."""
    if scale == "full":
        return Batch(10_000, 100), (1000, 1_000_000), Batch(1000, 100)
    return Batch(20, 10), (10, 1000), Batch(5, 10)


def _single_query(n_pos: int, n_neg: int):
    """The single-query side of the per-document ratios: one qs call on |P| + |N| documents."""
    rng = np.random.default_rng(1)
    pos, neg = rng.normal(1, 1, n_pos), rng.normal(0, 1, n_neg)
    return functools.partial(rankopt.most_violated_ranking, "ap", pos, neg, "qs"), n_pos + n_neg


def test_paired_ratio(benchmark, request, target, monkeypatch):
    """numerator/denominator medians of one target, timed in alternation (see the module docstring)."""
    scale = request.config.rankopt_bench_scale
    big, (n_pos, n_neg), small = _target_sizes(scale)
    rounds, seconds = PAIRED_ROUNDS[scale]
    timer = load_timer(request.config.getoption("benchmark_timer")).target
    monkeypatch.setattr(batched, "DOCS_PER_THREAD", 1)

    def batch_call(b: Batch, n_threads: int):
        scores, relevance, _, offsets = b.arrays()
        return functools.partial(most_violated_rankings, "ap", scores, relevance, offsets, "auto", n_threads=n_threads)

    if target in ("per_doc", "per_doc_balanced"):
        if target == "per_doc_balanced":
            n_pos = n_neg // 9
        numerator = batch_call(big, 1)
        denominator, single_docs = _single_query(n_pos, n_neg)
        per = (big.n_queries * big.n_docs, single_docs)
    elif target == "ndcg_graded":
        scores, _, grades, offsets = big.arrays()
        numerator = functools.partial(
            most_violated_rankings, "ndcg_graded", scores, grades, offsets, "auto", n_threads=1
        )
        denominator = batch_call(big, 1)
        per = (1, 1)
    elif target in ("graded_plugin", "graded_plugin_rbp"):
        scores, _, grades, offsets = big.arrays()
        plugin_loss = "dcg_zipf" if target == "graded_plugin" else "rbp_graded"

        def graded_call(loss):
            return functools.partial(most_violated_rankings, loss, scores, grades, offsets, "auto", n_threads=1)

        numerator, denominator = graded_call(plugin_loss), graded_call("ndcg_graded")
        per = (1, 1)
    elif target == "threads":
        numerator, denominator = batch_call(big, 1), batch_call(big, 2)
        timer = time.perf_counter  # CPU time would add the two threads up
        per = (1, 1)
    else:
        scores, relevance, _, offsets = small.arrays()
        numerator = functools.partial(most_violated_rankings_per_query, "ap", scores, relevance, offsets, "auto")
        denominator = batch_call(small, 1)
        per = (1, 1)
    benchmark.group = f"batched-paired-{target}"
    times_num, times_den = benchmark.pedantic(
        _alternate, args=(numerator, denominator, timer, rounds, seconds), rounds=1, iterations=1
    )
    num, den = float(np.median(times_num)), float(np.median(times_den))
    benchmark.extra_info.update(
        bench="batched-paired",
        target=target,
        numerator_median=num,
        denominator_median=den,
        numerator_calls=len(times_num),
        denominator_calls=len(times_den),
        ratio=(num / per[0]) / (den / per[1]),
    )
