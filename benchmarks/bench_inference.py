"""One loss-augmented inference call per method, over the sweeps of Mohapatra et al. (2018) Figs. 1–2.

Each benchmark times one public call ``rankopt.most_violated_ranking(loss,
pos_scores, neg_scores, method)`` — validation, the method's interleaving
ranks and the output of Observation 2 — for the losses AP and NDCG and every
inference method registered for them (found through rankopt's registry, so a
new method plugin is benchmarked without editing this file), plus
``method="auto"``.  ``numpy.sort`` and ``numpy.argsort`` of the negative
scores are timed in the same run as the references a comparison-based
method is measured against.

Sweeps (``--bench-scale full``; ``small`` uses tiny sizes):

* ``total`` — |P| : |N| = 1 : 10, |P| + |N| from 1.1·10³ to 1.1·10⁶;
* ``neg``   — |P| = 10³, |N| from 10³ to 10⁶;
* ``pos``   — |N| = 10⁵, |P| from 10 to 10⁵.

Scores there are "mid-training": s⁺ ~ N(1, 1), s⁻ ~ N(0, 1).  Two more
cases at |P| = 10³, |N| ∈ {10⁵, 10⁶}:

* ``late``  — late training, s⁺ ~ N(3, 0.5²), s⁻ ~ N(0, 0.5²): about 90 %
  of the negatives end below every positive (the sweet spot of "select");
* ``first`` — the first cutting-plane iteration, w = 0: every score is 0.

``test_breakdown`` takes the public call apart at |P| = 10³, |N| ∈ {10⁶, 10⁷}
(full scale), float32 and float64, mid / late / first scores, AP and NDCG —
every part timed in each round in turn, medians over the rounds:

* ``call`` — ``most_violated_ranking(loss, pos, neg, "qs")``;
* ``qs_inference`` — its one kernel call (``_qs.qs_inference``: the
  negatives checked in the kernel's first pass over them, the ranks,
  Observation 2), outputs allocated beforehand;
* ``ranks`` — the kernel's ranks alone (``_qs.qs_ranks``, no check, no output);
* ``check_scores`` and ``observation_2`` (``ranking_from_ranks``) — the NumPy
  check and the separate output pass the other methods still run;
* ``numpy.sum`` (one read of the scores) and ``numpy.argsort`` (of the same
  negatives) — the references.

``python benchmarks/bench_inference.py`` prints that breakdown as the table of
the user guide (docs/user-guide.md, "Speed of one inference call").

Documented exclusions (left out at collection, so they are neither timed
nor reported as skips): a method not exact for a loss (e.g. "search" and
"select" are AP-only), and the O(|P||N|) methods above the limits of
:data:`WORK_LIMITS` ("greedy" above |P||N| = 2·10⁹, where one call takes
from seconds to minutes; "dp", whose loop over the negatives runs in
Python, above |P||N| = 10⁷ or |N| = 10⁴).

On a machine shared with other jobs, ``--benchmark-timer=time.process_time``
times the process's CPU rather than the wall clock, which preemption inflates.
Such a machine also drifts between consecutive benchmarks ("auto" and "qs",
one code path, have measured 40 % apart in one run), so the targets' ratios
at |P| = 10³, |N| = 10⁶ are measured a second way too: ``test_paired_ratio``
times the two calls of a ratio in alternation (see there).

``extra_info`` of each benchmark records the case (sweeps it belongs to,
score distribution, |P|, |N|), the loss, the method (and the one "auto"
resolved to), and the fraction of negatives the call put below every
positive; ``benchmarks/plot_results.py`` reads it from the JSON report.
"""

from __future__ import annotations

import argparse
import functools
import os
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pytest
from pytest_benchmark.utils import load_timer

import rankopt
from rankopt._validation import check_scores, largest_magnitude, score_sum_bound
from rankopt.inference import _qs
from rankopt.inference.base import descending_order, kernel_arguments, ranking_from_ranks
from rankopt.plugins import PluginKind, default_registry

LOSSES = ("ap", "ndcg")
REFERENCES = ("numpy.sort", "numpy.argsort")


def _greedy_limit(n_pos: int, n_neg: int) -> str | None:
    if n_pos * n_neg > 2e9:
        return f"|P||N| = {n_pos * n_neg:.1e} > 2e9, where the O(|P||N|) greedy takes up to minutes per call"
    return None


def _dp_limit(n_pos: int, n_neg: int) -> str | None:
    if n_pos * n_neg > 1e7 or n_neg > 10_000:
        return (
            f"|P||N| = {n_pos * n_neg:.1e}, |N| = {n_neg}: above |P||N| = 1e7 or |N| = 1e4 the "
            f"O(|P||N|) dynamic programme, which loops over the negatives in Python, takes seconds per call"
        )
    return None


#: Sizes at which a slow method is not run: method -> f(|P|, |N|) giving the reason, or None.
WORK_LIMITS = {"greedy": _greedy_limit, "dp": _dp_limit}

#: Target ratios (numerator, denominator) that test_paired_ratio times in alternation.
PAIRED_RATIOS = (("greedy", "qs"), ("auto", "qs"))
#: Its least rounds and seconds per ratio at each scale (a round: one numerator call, then
#: denominator calls for as long); it stops when both are reached.
PAIRED_ROUNDS = {"full": (9, 2.0), "small": (2, 0.0)}


@dataclass(frozen=True)
class Case:
    """Scores for one problem size and distribution, and the sweeps it is a point of."""

    dist: str  # "mid", "late" or "first"
    n_pos: int
    n_neg: int
    sweeps: tuple[str, ...]

    @property
    def id(self) -> str:
        return f"{self.dist}-P{self.n_pos}-N{self.n_neg}"

    def scores(self) -> tuple[np.ndarray, np.ndarray]:
        return _scores(self.dist, self.n_pos, self.n_neg)


@functools.lru_cache(maxsize=2)
def _scores(dist: str, n_pos: int, n_neg: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng([n_pos, n_neg, len(dist)])
    if dist == "mid":
        return rng.normal(1.0, 1.0, n_pos), rng.normal(0.0, 1.0, n_neg)
    if dist == "late":
        return rng.normal(3.0, 0.5, n_pos), rng.normal(0.0, 0.5, n_neg)
    if dist == "first":
        return np.zeros(n_pos), np.zeros(n_neg)
    raise ValueError(f"expected dist 'mid', 'late' or 'first', got {dist!r} instead")


def _decades(low: int, high: int) -> list[int]:
    """low, 3·low, 10·low, … up to high (half-decade steps)."""
    out, value = [], low
    while value <= high:
        out.append(value)
        value = value * 3 if str(value)[0] == "1" else value * 10 // 3
    return out


def sweep_points(scale: str) -> dict[str, list[tuple[str, int, int]]]:
    """(dist, |P|, |N|) of every sweep at ``scale``."""
    if scale == "full":
        return {
            "total": [("mid", n, 10 * n) for n in _decades(100, 100_000)],
            "neg": [("mid", 1000, n) for n in _decades(1000, 1_000_000)],
            "pos": [("mid", n, 100_000) for n in _decades(10, 100_000)],
            "late": [("late", 1000, 100_000), ("late", 1000, 1_000_000)],
            "first": [("first", 1000, 100_000), ("first", 1000, 1_000_000)],
        }
    return {
        "total": [("mid", 10, 100), ("mid", 30, 300)],
        "neg": [("mid", 10, 100), ("mid", 10, 1000)],
        "pos": [("mid", 10, 1000), ("mid", 100, 1000)],
        "late": [("late", 10, 1000)],
        "first": [("first", 10, 1000)],
    }


def cases(scale: str) -> list[Case]:
    """Every distinct (dist, |P|, |N|) once, tagged with all the sweeps it belongs to."""
    membership: dict[tuple[str, int, int], list[str]] = {}
    for sweep, points in sweep_points(scale).items():
        for point in points:
            membership.setdefault(point, []).append(sweep)
    return [Case(dist, p, n, tuple(sweeps)) for (dist, p, n), sweeps in membership.items()]


def registered_methods() -> list[str]:
    return [info.name for info in default_registry().list(PluginKind.INFERENCE_METHOD)] + ["auto"]


def resolved_method(method: str, loss: str) -> str | None:
    """The method that runs for ``method`` on ``loss``, or None when it is not exact for it."""
    registry = default_registry()
    loss_obj = registry.resolve_loss(loss)
    if method == "auto":
        return registry.resolve_method("auto", loss_obj).name
    method_cls = {info.name: info.cls for info in registry.list(PluginKind.INFERENCE_METHOD)}[method]
    return method if method_cls().unsupported_reason(loss_obj) is None else None


def inference_runs(scale: str) -> list[tuple[Case, str, str]]:
    """Every (case, loss, method) worth timing: exact for the loss and within WORK_LIMITS.

    The others are left out at collection rather than skipped: an AP-only
    method has nothing to say about NDCG, and the work limits are documented
    in the module docstring.
    """
    runs = []
    for case in cases(scale):
        for loss in LOSSES:
            for method in registered_methods():
                resolved = resolved_method(method, loss)
                if resolved is None:
                    continue
                limit = WORK_LIMITS.get(resolved)
                if limit is not None and limit(case.n_pos, case.n_neg) is not None:
                    continue
                runs.append((case, loss, method))
    return runs


def paired_case(scale: str) -> Case:
    """The case of the |N| = 10⁶ speed targets (a tiny one at small scale)."""
    if scale == "full":
        return Case("mid", 1000, 1_000_000, ("paired",))
    return Case("mid", 10, 1000, ("paired",))


def pytest_generate_tests(metafunc):
    scale = metafunc.config.rankopt_bench_scale
    if {"pair_case", "loss", "pair"} <= set(metafunc.fixturenames):
        case = paired_case(scale)
        runs = [(case, loss, pair) for loss in LOSSES for pair in PAIRED_RATIOS]
        metafunc.parametrize(
            "pair_case, loss, pair", runs, ids=[f"{case.id}-{a}-over-{b}-{loss}" for case, loss, (a, b) in runs]
        )
    elif {"case", "loss", "method"} <= set(metafunc.fixturenames):
        runs = inference_runs(scale)
        metafunc.parametrize(
            "case, loss, method", runs, ids=[f"{case.id}-{method}-{loss}" for case, loss, method in runs]
        )
    elif "case" in metafunc.fixturenames:
        all_cases = cases(scale)
        metafunc.parametrize("case", all_cases, ids=[c.id for c in all_cases])


def _case_info(case: Case) -> dict:
    return {
        "bench": "inference",
        "dist": case.dist,
        "sweeps": list(case.sweeps),
        "n_pos": case.n_pos,
        "n_neg": case.n_neg,
    }


def test_most_violated_ranking(benchmark, case, loss, method):
    loss_obj = default_registry().resolve_loss(loss)
    resolved = resolved_method(method, loss)
    pos, neg = case.scores()
    benchmark.group = f"{case.id}-{loss}"
    result = benchmark(rankopt.most_violated_ranking, loss_obj, pos, neg, method)
    benchmark.extra_info.update(
        _case_info(case),
        loss=loss,
        method=method,
        resolved_method=resolved,
        bottom_fraction=float(np.mean(result.neg_ranks == case.n_pos + 1)),
        loss_value=result.loss,
    )


@pytest.mark.parametrize("reference", REFERENCES)
def test_reference_sort(benchmark, case, reference):
    _, neg = case.scores()
    function = np.sort if reference == "numpy.sort" else np.argsort
    benchmark.group = f"{case.id}-reference"
    benchmark(function, neg)
    benchmark.extra_info.update(_case_info(case), loss=None, method=reference, resolved_method=reference)


def _alternate(numerator, denominator, timer, rounds: int, seconds: float) -> tuple[list[float], list[float]]:
    """Times of ``numerator()`` and ``denominator()`` called in alternation.

    Each round times one numerator call, then denominator calls until they
    have taken as long (at least one), so both share every stretch of the
    machine's load; rounds go on until there are ``rounds`` of them and
    ``seconds`` have been timed.
    """
    times_num, times_den = [], []
    while len(times_num) < rounds or sum(times_num) + sum(times_den) < seconds:
        start = timer()
        numerator()
        times_num.append(timer() - start)
        spent = 0.0
        while spent < times_num[-1] or spent == 0.0:
            start = timer()
            denominator()
            times_den.append(timer() - start)
            spent += times_den[-1]
    return times_num, times_den


def test_paired_ratio(benchmark, request, pair_case, loss, pair):
    """A target ratio with its two calls timed in alternation, as a second estimate.

    The sweep times each method in its own benchmark, one after the other;
    on a shared machine the load changes between them.  Here the medians of
    numerator and denominator come from the same stretch of time, round by
    round; ``plot_results.py`` reports their ratio next to the sweep's.  The
    benchmark's own timing (the whole alternation) means nothing; the
    medians are in ``extra_info``.
    """
    numerator, denominator = pair
    loss_obj = default_registry().resolve_loss(loss)
    pos, neg = pair_case.scores()
    # The timer the rest of the run uses (--benchmark-timer), loaded as pytest-benchmark does.
    timer = load_timer(request.config.getoption("benchmark_timer")).target
    rounds, seconds = PAIRED_ROUNDS[request.config.rankopt_bench_scale]

    def call(method):
        return functools.partial(rankopt.most_violated_ranking, loss_obj, pos, neg, method)

    benchmark.group = f"paired-{pair_case.id}-{loss}"
    times_num, times_den = benchmark.pedantic(
        _alternate, args=(call(numerator), call(denominator), timer, rounds, seconds), rounds=1, iterations=1
    )
    benchmark.extra_info.update(
        _case_info(pair_case),
        bench="paired",
        loss=loss,
        method=f"{numerator}/{denominator}",
        numerator=numerator,
        denominator=denominator,
        numerator_median=float(np.median(times_num)),
        denominator_median=float(np.median(times_den)),
        numerator_calls=len(times_num),
        denominator_calls=len(times_den),
    )


# ------------------------------------------------------------------------------- the call taken apart

#: |N| of the breakdown at each scale (|P| = 10³; 10 at small scale), and its rounds.
BREAKDOWN_SIZES = {"full": (1_000_000, 10_000_000), "small": (1000,)}
BREAKDOWN_ROUNDS = {"full": 9, "small": 1}
BREAKDOWN_DISTS = ("mid", "late", "first")


def breakdown_parts(loss_name: str, pos: np.ndarray, neg: np.ndarray) -> dict[str, Callable[[], object]]:
    """The public qs call, the parts it is made of or replaced, and the two references, on one problem."""
    loss = default_registry().resolve_loss(loss_name)
    n_pos, n_neg = pos.size, neg.size
    code, table = kernel_arguments(loss, loss.compiled_form(n_pos, n_neg), n_pos, n_neg)
    pos_order = descending_order(pos)
    pos_desc = np.ascontiguousarray(pos[pos_order])
    unimodal = code == _qs.KERNEL_CODES["AP"]
    ranks = np.empty(n_neg, dtype=np.intc)
    outputs = (
        np.empty(n_neg, dtype=np.int32),
        np.empty(n_neg),
        np.empty(n_pos),
        np.empty(n_pos, dtype=np.int64),
        np.empty(n_pos, dtype=np.int64),
    )
    largest, bound = largest_magnitude(pos), score_sum_bound(pos.dtype)
    _qs.qs_ranks(pos_desc, neg, int(code), table, unimodal, ranks)
    return {
        "call": functools.partial(rankopt.most_violated_ranking, loss, pos, neg, "qs"),
        "qs_inference": functools.partial(
            _qs.qs_inference, pos, pos_order, pos_desc, neg, int(code), table, unimodal, largest, bound, *outputs
        ),
        "ranks": functools.partial(_qs.qs_ranks, pos_desc, neg, int(code), table, unimodal, ranks),
        "check_scores": functools.partial(check_scores, pos, neg),
        "observation_2": functools.partial(ranking_from_ranks, loss, pos, neg, ranks),
        "numpy.sum": functools.partial(np.sum, neg),
        "numpy.argsort": functools.partial(np.argsort, neg),
    }


def time_parts(parts: dict[str, Callable[[], object]], timer, rounds: int) -> dict[str, float]:
    """Median time of each part over ``rounds`` rounds, every part once per round, in turn."""
    times: dict[str, list[float]] = {name: [] for name in parts}
    for _ in range(rounds):
        for name, part in parts.items():
            start = timer()
            part()
            times[name].append(timer() - start)
    return {name: statistics.median(values) for name, values in times.items()}


def breakdown_scores(dist: str, n_neg: int, dtype) -> tuple[np.ndarray, np.ndarray]:
    pos, neg = _scores(dist, 1000 if n_neg >= 100_000 else 10, n_neg)
    return pos.astype(dtype), neg.astype(dtype)


@pytest.mark.parametrize("loss", LOSSES)
@pytest.mark.parametrize("dist", BREAKDOWN_DISTS)
@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=["float32", "float64"])
def test_breakdown(benchmark, request, dtype, dist, loss):
    """The call and its parts in interleaved rounds; medians and ratios to the references in ``extra_info``."""
    scale = request.config.rankopt_bench_scale
    timer = load_timer(request.config.getoption("benchmark_timer")).target
    medians = {}
    for n_neg in BREAKDOWN_SIZES[scale]:
        parts = breakdown_parts(loss, *breakdown_scores(dist, n_neg, dtype))
        medians[n_neg] = time_parts(parts, timer, BREAKDOWN_ROUNDS[scale])
    benchmark.group = f"breakdown-{np.dtype(dtype).name}-{dist}-{loss}"
    benchmark.pedantic(lambda: None, rounds=1, iterations=1)
    benchmark.extra_info.update(
        bench="breakdown",
        dtype=np.dtype(dtype).name,
        dist=dist,
        loss=loss,
        medians={str(n): m for n, m in medians.items()},
        call_over_sum={str(n): m["call"] / m["numpy.sum"] for n, m in medians.items()},
        call_over_argsort={str(n): m["call"] / m["numpy.argsort"] for n, m in medians.items()},
    )


def breakdown_table(sizes, rounds: int) -> str:
    """The user guide's table: milliseconds of CPU time (medians), and the call against the references."""
    rows = [
        "| scores | \\|N\\| | loss | call | qs_inference | ranks alone | check_scores | observation_2 "
        "| numpy.sum | numpy.argsort | call / sum | call / argsort |",
        "|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for n_neg in sizes:
        for dtype in (np.float32, np.float64):
            for dist in BREAKDOWN_DISTS:
                for loss in LOSSES:
                    m = time_parts(
                        breakdown_parts(loss, *breakdown_scores(dist, n_neg, dtype)), time.process_time, rounds
                    )
                    ms = {name: 1e3 * t for name, t in m.items()}
                    rows.append(
                        f"| {np.dtype(dtype).name} {dist} | {n_neg:.0e} | {loss} | {ms['call']:.2f} | "
                        f"{ms['qs_inference']:.2f} | {ms['ranks']:.2f} | {ms['check_scores']:.2f} | "
                        f"{ms['observation_2']:.2f} | {ms['numpy.sum']:.2f} | {ms['numpy.argsort']:.2f} | "
                        f"{m['call'] / m['numpy.sum']:.1f} | {m['call'] / m['numpy.argsort']:.2f} |"
                    )
                    print(rows[-1], file=sys.stderr, flush=True)  # progress; the table goes to stdout
    return "\n".join(rows)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description="Print the breakdown of one qs call (the user guide's table).")
    parser.add_argument("--sizes", default="1e6,1e7", help="numbers of negatives, comma-separated (|P| = 10³)")
    parser.add_argument("--rounds", type=int, default=9)
    arguments = parser.parse_args()
    if os.environ.get("OMP_NUM_THREADS") != "1":
        parser.error("set OMP_NUM_THREADS=1: the breakdown is timed on one thread")
    print(breakdown_table([int(float(n)) for n in arguments.sizes.split(",")], arguments.rounds))
