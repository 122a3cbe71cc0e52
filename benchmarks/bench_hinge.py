"""The structured hinge's forward plus backward against the losses neural rankers use (issue 30).

10⁴ queries × 100 documents (``--bench-scale full``; ``small``: 50 × 20), 10 % relevant, grades 0–4,
scores "mid-training".  Each case times ``RankHingeLoss(loss)(scores, y)`` in the padded (B, L) layout
and its ``backward()``, against ``binary_cross_entropy_with_logits`` forward plus backward on the same
scores, both sides alternated, in two protocols:

* ``cached`` (``test_hinge_against_bce``): the same label tensor at every call and no mask, so the layer's
  prepared-batch cache skips the labels' preparation after the first call;
* ``loop`` (``test_training_loop_against_bce``): new label and mask tensors at every call, as a
  ``DataLoader`` yields them (queries of 60–100 documents padded to 100), against BCE weighted by the same
  mask (``bce="masked"``, what a padded batch's BCE costs) and against the unmasked BCE on new labels
  (``bce="unmasked"``, the cheaper yardstick, which also scores the padding) — what a training loop pays;

 one thread (``torch.set_num_threads(1)``, ``OMP_NUM_THREADS=1``) or two
(``n_threads=2``; CPU time adds the threads up, so time those rows with ``--benchmark-timer
time.perf_counter``).  Target: every hinge ≤ 4× BCE (aim ≤ 2×).  The hinge against LambdaLoss is in
``bench_lambdaloss.py``.  Medians in ``extra_info``.

**The sort-floor grid** (``test_hinge_at_the_sort_floor``, issue 59): the data people bring, not the data a
kernel likes — shapes 10⁵ × 10, 10⁴ × 100, 10³ × 10³ and 10 × 10⁵ (queries × documents); 1 %, 10 %, 50 % and
90 % of the documents relevant (grades 1–4 among them); a mask that pads the ends of rows (60–100 % of a row
kept) or one with holes (a tenth of the documents dropped at random); scores at random, or following the labels
(one standard deviation higher for a relevant document).  Each hinge's forward and backward with new label and
mask tensors at every call (the ``loop``), and with the same labels and no mask (the ``cached`` case), are timed
against *the floor*: the unmasked BCE on new labels, forward and backward, plus one ``np.argsort`` of the scores
along rows — the one sort any hinge needs.  All four are timed in alternation (CPU time, one thread), five rounds;
medians.  Must: loop and cached ≤ 1.5× the floor in every cell.  In CI one small cell per hinge runs once; the
whole grid and its table::

    OMP_NUM_THREADS=1 python benchmarks/bench_hinge.py --grid [--out results.jsonl]
"""

from __future__ import annotations

import argparse
import functools
import json
import sys
import time

import numpy as np
import pytest
from bench_inference import _alternate
from pytest_benchmark.utils import load_timer

torch = pytest.importorskip("torch")
from rankopt.torch import RankHingeLoss  # noqa: E402

SIZES = {"small": (50, 20), "full": (10_000, 100)}
ROUNDS = {"small": (3, 0.0), "full": (15, 10.0)}


def _batch(scale: str):
    n_queries, n_docs = SIZES[scale]
    rng = np.random.default_rng(0)
    grades = np.where(rng.random((n_queries, n_docs)) < 0.1, rng.integers(1, 5, (n_queries, n_docs)), 0)
    scores = np.where(grades > 0, rng.normal(1, 1, grades.shape), rng.normal(0, 1, grades.shape))
    return torch.tensor(scores, dtype=torch.float32), torch.tensor(grades)


def _hinge_step(layer, scores, y):
    s = scores.detach().requires_grad_(True)
    layer(s, y).backward()


def _bce_step(scores, y):
    s = scores.detach().requires_grad_(True)
    torch.nn.functional.binary_cross_entropy_with_logits(s, (y > 0).to(s.dtype)).backward()


def _padded_batch(scale: str):
    """The batch with each query's documents kept by a mask: 60–100 of every row's (all of them at small
    scale's 20)."""
    scores, y = _batch(scale)
    n_queries, n_docs = scores.shape
    lengths = np.random.default_rng(1).integers(min(60, n_docs), n_docs + 1, n_queries)
    mask = torch.from_numpy(np.arange(n_docs)[None, :] < lengths[:, None])
    return scores, y, mask


def _loop_hinge_step(layer, scores, y, mask):
    s = scores.detach().requires_grad_(True)
    layer(s, y.clone(), mask=mask.clone()).backward()  # a DataLoader's new tensors at every step


def _loop_bce_step(scores, y, mask):
    s = scores.detach().requires_grad_(True)
    mask = mask.clone()
    target = (y.clone() > 0).to(s.dtype)
    torch.nn.functional.binary_cross_entropy_with_logits(s, target, weight=mask.to(s.dtype)).backward()


def _loop_unmasked_bce_step(scores, y, mask):
    s = scores.detach().requires_grad_(True)
    target = (y.clone() > 0).to(s.dtype)  # the DataLoader's new labels, as the hinge gets them
    torch.nn.functional.binary_cross_entropy_with_logits(s, target).backward()


#: The loop protocol's two yardsticks: BCE weighted by the mask, and the unmasked BCE on new labels.
LOOP_BCE = {"masked": _loop_bce_step, "unmasked": _loop_unmasked_bce_step}


def _paired(benchmark, request, group: str, numerator, denominator, threads: int = 1, rounds=None, **info) -> None:
    """``numerator()`` against ``denominator()`` in alternation (``_alternate``) with torch on ``threads``
    threads, ``rounds`` (per scale: rounds and seconds at least; this module's ``ROUNDS`` by default); their
    medians and ratio in ``extra_info`` with ``info``."""
    rounds, seconds = (rounds or ROUNDS)[request.config.rankopt_bench_scale]
    timer = load_timer(request.config.getoption("benchmark_timer")).target
    previous = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        benchmark.group = group
        times_num, times_den = benchmark.pedantic(
            _alternate, args=(numerator, denominator, timer, rounds, seconds), rounds=1
        )
    finally:
        torch.set_num_threads(previous)
    num, den = float(np.median(times_num)), float(np.median(times_den))
    benchmark.extra_info.update(**info, numerator_median=num, denominator_median=den, ratio=num / den)


#: Every built-in hinge and a graded plugin's (the example package's dcg_zipf); precision_at_k and
#: ndcg_graded at their default cutoff, k = 10.
HINGES = ["ap", "ndcg", "auc", "precision_at_k", "ndcg_graded", "pairwise", "dcg_zipf"]


@pytest.mark.parametrize("n_threads", [1, 2])
@pytest.mark.parametrize("loss", HINGES)
def test_hinge_against_bce(benchmark, request, loss, n_threads):
    scores, y = _batch(request.config.rankopt_bench_scale)
    hinge = functools.partial(_hinge_step, RankHingeLoss(loss, n_threads=n_threads), scores, y)
    bce = functools.partial(_bce_step, scores, y)
    _paired(
        benchmark,
        request,
        f"hinge-{n_threads}-threads",
        hinge,
        bce,
        n_threads,
        bench="hinge",
        loss=loss,
        n_threads=n_threads,
    )


@pytest.mark.parametrize("bce", sorted(LOOP_BCE))
@pytest.mark.parametrize("loss", HINGES)
def test_training_loop_against_bce(benchmark, request, loss, bce):
    """New labels and a mask at every call, one thread (the ``loop`` protocol of the module docstring)."""
    scores, y, mask = _padded_batch(request.config.rankopt_bench_scale)
    hinge = functools.partial(_loop_hinge_step, RankHingeLoss(loss, n_threads=1), scores, y, mask)
    baseline = functools.partial(LOOP_BCE[bce], scores, y, mask)
    _paired(
        benchmark, request, f"hinge-training-loop-{bce}-bce", hinge, baseline, bench="hinge-loop", loss=loss, bce=bce
    )


# ---- the sort-floor grid (issue 59) -------------------------------------------------------------------------------

GRID_SHAPES = {"small": [(40, 50)], "full": [(100_000, 10), (10_000, 100), (1_000, 1_000), (10, 100_000)]}
GRID_SHARES = {"small": [0.1, 0.9], "full": [0.01, 0.1, 0.5, 0.9]}
GRID_MASKS = ("ends", "holes")
GRID_SCORES = ("random", "labels")
GRID_ROUNDS = {"small": 1, "full": 5}
#: The built-in hinges the must names, and the example package's graded plugin (dcg_zipf).
GRID_HINGES = ["ap", "ndcg", "auc", "precision_at_k", "ndcg_graded", "pairwise", "dcg_zipf"]


def grid_batch(shape, share: float, mask_kind: str, scores_kind: str, seed: int = 0):
    """One cell's data: float32 scores, int64 grades (1–4 among the relevant share), a bool mask."""
    n_queries, n_docs = shape
    rng = np.random.default_rng(seed)
    relevant = rng.random(shape) < share
    grades = np.where(relevant, rng.integers(1, 5, shape), 0)
    scores = rng.standard_normal(shape) + (relevant if scores_kind == "labels" else 0.0)
    if mask_kind == "ends":
        lengths = rng.integers(max(1, (6 * n_docs) // 10), n_docs + 1, n_queries)
        mask = np.arange(n_docs)[None, :] < lengths[:, None]
    elif mask_kind == "holes":
        mask = rng.random(shape) >= 0.1
    else:
        raise ValueError(f"expected a mask kind in {GRID_MASKS}, got {mask_kind!r} instead")
    return torch.tensor(scores, dtype=torch.float32), torch.tensor(grades), torch.from_numpy(mask)


def _floor_step(scores, y):
    """The floor: the unmasked BCE on new labels, forward and backward, and one sort of the scores along rows."""
    _loop_unmasked_bce_step(scores, y, None)
    np.argsort(scores.detach().numpy(), axis=1)


def _cached_hinge_step(layer, scores, y):
    s = scores.detach().requires_grad_(True)
    layer(s, y).backward()  # the same label tensor at every call, no mask: the layer's prepared batch is reused


def grid_cell(loss: str, shape, share: float, mask_kind: str, scores_kind: str, rounds: int = 5) -> dict:
    """One hinge in one cell: medians (seconds, CPU time) of the loop and cached hinge, the floor and BCE,
    timed in alternation (the first side moves round by round), one thread."""
    scores, y, mask = grid_batch(shape, share, mask_kind, scores_kind)
    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        layer = RankHingeLoss(loss, n_threads=1)
        sides = {
            "loop": functools.partial(_loop_hinge_step, layer, scores, y, mask),
            "cached": functools.partial(_cached_hinge_step, RankHingeLoss(loss, n_threads=1), scores, y),
            "floor": functools.partial(_floor_step, scores, y),
            "bce": functools.partial(_loop_unmasked_bce_step, scores, y, None),
        }
        for step in sides.values():  # warm: the cached side prepares its labels, the allocator its memory
            step()
        times: dict[str, list[float]] = {name: [] for name in sides}
        names = list(sides)
        for r in range(rounds):
            for name in names[r % len(names) :] + names[: r % len(names)]:
                start = time.process_time()
                sides[name]()
                times[name].append(time.process_time() - start)
    finally:
        torch.set_num_threads(previous)
    medians = {name: float(np.median(values)) for name, values in times.items()}
    return dict(
        loss=loss,
        shape=list(shape),
        share=share,
        mask=mask_kind,
        scores=scores_kind,
        **{f"{name}_s": value for name, value in medians.items()},
        loop_to_floor=medians["loop"] / medians["floor"],
        cached_to_floor=medians["cached"] / medians["floor"],
        loop_to_bce=medians["loop"] / medians["bce"],
    )


def _grid_cells(scale: str):
    for shape in GRID_SHAPES[scale]:
        for share in GRID_SHARES[scale]:
            for mask_kind in GRID_MASKS:
                for scores_kind in GRID_SCORES:
                    yield shape, share, mask_kind, scores_kind


@pytest.mark.parametrize("loss", GRID_HINGES)
def test_hinge_at_the_sort_floor(benchmark, request, loss):
    """The grid's cells for one hinge (one small cell per mask at ``small`` scale), the worst ratios in
    ``extra_info``."""
    scale = request.config.rankopt_bench_scale
    cells = [c for c in _grid_cells(scale) if scale == "full" or c[3] == "random"]
    rows = benchmark.pedantic(lambda: [grid_cell(loss, *cell, rounds=GRID_ROUNDS[scale]) for cell in cells], rounds=1)
    benchmark.group = "hinge-sort-floor"
    benchmark.extra_info.update(
        bench="hinge-sort-floor",
        loss=loss,
        worst_loop_to_floor=max(row["loop_to_floor"] for row in rows),
        worst_cached_to_floor=max(row["cached_to_floor"] for row in rows),
        cells=rows,
    )


METRIC_BATCHES = {"small": [64], "full": [256, 1_024, 4_096]}


def _metric_step(loss, embeddings, labels):
    e = embeddings.detach().requires_grad_(True)
    loss(e, labels).backward()


@pytest.mark.parametrize(
    "batch", [pytest.param(b, id=str(b)) for b in sorted({*METRIC_BATCHES["small"], *METRIC_BATCHES["full"]})]
)
def test_metric_hinge_against_contrastive(benchmark, request, batch):
    """``rankopt.pml.MetricHingeLoss("ap")`` forward and backward against PML's ``ContrastiveLoss`` (the cheapest
    pair loss PML has) on the same batch: ``batch`` embeddings of dimension 128 in 16 classes, one thread, in
    alternation; must: ≤ 1× at 1,024 and 4,096."""
    scale = request.config.rankopt_bench_scale
    if batch not in METRIC_BATCHES[scale]:
        pytest.skip(f"batch {batch} runs at the other scale")
    pml_losses = pytest.importorskip("pytorch_metric_learning.losses")
    from rankopt.pml import MetricHingeLoss

    rng = np.random.default_rng(0)
    embeddings = torch.tensor(rng.standard_normal((batch, 128)), dtype=torch.float32)
    labels = torch.tensor(rng.integers(0, 16, batch))
    hinge = functools.partial(_metric_step, MetricHingeLoss("ap", n_threads=1), embeddings, labels)
    contrastive = functools.partial(_metric_step, pml_losses.ContrastiveLoss(), embeddings, labels)
    _paired(benchmark, request, "metric-hinge", hinge, contrastive, bench="metric-hinge", batch=batch)


def grid_table(rows: list[dict]) -> str:
    """The grid as Markdown: one row per cell, one column per hinge (loop / floor), the worst cell per hinge, and
    the cost's spread over the relevant shares at 10⁴ × 100."""
    losses = [loss for loss in GRID_HINGES if any(row["loss"] == loss for row in rows)]
    cells: dict[tuple, dict] = {}
    for row in rows:
        key = (tuple(row["shape"]), row["share"], row["mask"], row["scores"])
        cells.setdefault(key, {})[row["loss"]] = row
    head = "| queries × docs | relevant | mask | scores | floor ms | " + " | ".join(losses) + " |"
    lines = [head, "|" + "---|" * 4 + "---:|" + "---:|" * len(losses)]
    for (shape, share, mask_kind, scores_kind), by_loss in cells.items():
        floor = np.median([row["floor_s"] for row in by_loss.values()]) * 1e3
        ratios = [f"{by_loss[loss]['loop_to_floor']:.2f}" if loss in by_loss else "" for loss in losses]
        lines.append(
            f"| {shape[0]:,} × {shape[1]:,} | {share:.0%} | {mask_kind} | {scores_kind} | {floor:.1f} | "
            + " | ".join(ratios)
            + " |"
        )
    worst_loop = [max(r["loop_to_floor"] for r in rows if r["loss"] == loss) for loss in losses]
    lines.append("| **worst (loop)** | | | | | " + " | ".join(f"**{value:.2f}**" for value in worst_loop) + " |")
    worst_cached = [max(r["cached_to_floor"] for r in rows if r["loss"] == loss) for loss in losses]
    lines.append("| **worst (cached)** | | | | | " + " | ".join(f"{value:.2f}" for value in worst_cached) + " |")
    cached_over_loop = [max(r["cached_s"] / r["loop_s"] for r in rows if r["loss"] == loss) for loss in losses]
    lines.append("| cached / loop, worst | | | | | " + " | ".join(f"{value:.2f}" for value in cached_over_loop) + " |")
    spread = []
    for loss in losses:
        worst_spread = 0.0
        for mask_kind in GRID_MASKS:
            for scores_kind in GRID_SCORES:
                costs = [
                    r["loop_s"]
                    for r in rows
                    if r["loss"] == loss
                    and tuple(r["shape"]) == (10_000, 100)
                    and r["mask"] == mask_kind
                    and r["scores"] == scores_kind
                ]
                if len(costs) > 1:
                    worst_spread = max(worst_spread, max(costs) / min(costs))
        spread.append(f"{worst_spread:.2f}" if worst_spread else "")
    lines.append("| cost spread over shares, 10⁴ × 100 | | | | | " + " | ".join(spread) + " |")
    return "\n".join(lines)


def _main(argv=None) -> int:
    parser = argparse.ArgumentParser(description="The hinge against the sort floor, on the whole grid (issue 59).")
    parser.add_argument("--grid", action="store_true", help="run the grid and print its table")
    parser.add_argument("--scale", choices=sorted(GRID_SHAPES), default="full")
    parser.add_argument("--losses", default=",".join(GRID_HINGES), help="comma-separated hinges")
    parser.add_argument("--out", help="append each cell's row to this JSON-lines file as it comes")
    parser.add_argument("--table", help="print the table of a JSON-lines file instead of running")
    args = parser.parse_args(argv)
    if args.table:
        with open(args.table) as lines:
            print(grid_table([json.loads(line) for line in lines if line.strip()]))
        return 0
    if not args.grid:
        parser.error("expected --grid or --table FILE")
    rows = []
    for cell in _grid_cells(args.scale):
        for loss in args.losses.split(","):
            row = grid_cell(loss, *cell, rounds=GRID_ROUNDS[args.scale])
            rows.append(row)
            print(json.dumps(row), file=sys.stderr, flush=True)
            if args.out:
                with open(args.out, "a") as out:
                    out.write(json.dumps(row) + "\n")
    print(grid_table(rows))
    return 0


if __name__ == "__main__":
    sys.exit(_main())
