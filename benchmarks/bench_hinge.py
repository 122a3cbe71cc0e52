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
"""

from __future__ import annotations

import functools

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


#: Every built-in hinge and a graded plugin's (the example package's dcg_zipf); precision_at_k and
#: ndcg_graded at their default cutoff, k = 10.
HINGES = ["ap", "ndcg", "auc", "precision_at_k", "ndcg_graded", "pairwise", "dcg_zipf"]


@pytest.mark.parametrize("n_threads", [1, 2])
@pytest.mark.parametrize("loss", HINGES)
def test_hinge_against_bce(benchmark, request, loss, n_threads):
    scale = request.config.rankopt_bench_scale
    scores, y = _batch(scale)
    rounds, seconds = ROUNDS[scale]
    timer = load_timer(request.config.getoption("benchmark_timer")).target
    previous = torch.get_num_threads()
    torch.set_num_threads(n_threads)
    try:
        hinge = functools.partial(_hinge_step, RankHingeLoss(loss, n_threads=n_threads), scores, y)
        bce = functools.partial(_bce_step, scores, y)
        benchmark.group = f"hinge-{n_threads}-threads"
        times_hinge, times_bce = benchmark.pedantic(_alternate, args=(hinge, bce, timer, rounds, seconds), rounds=1)
    finally:
        torch.set_num_threads(previous)
    num, den = float(np.median(times_hinge)), float(np.median(times_bce))
    benchmark.extra_info.update(
        bench="hinge", loss=loss, n_threads=n_threads, numerator_median=num, denominator_median=den, ratio=num / den
    )


@pytest.mark.parametrize("bce", sorted(LOOP_BCE))
@pytest.mark.parametrize("loss", HINGES)
def test_training_loop_against_bce(benchmark, request, loss, bce):
    """New labels and a mask at every call, one thread (the ``loop`` protocol of the module docstring)."""
    scale = request.config.rankopt_bench_scale
    scores, y, mask = _padded_batch(scale)
    rounds, seconds = ROUNDS[scale]
    timer = load_timer(request.config.getoption("benchmark_timer")).target
    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        hinge = functools.partial(_loop_hinge_step, RankHingeLoss(loss, n_threads=1), scores, y, mask)
        baseline = functools.partial(LOOP_BCE[bce], scores, y, mask)
        benchmark.group = f"hinge-training-loop-{bce}-bce"
        times_hinge, times_bce = benchmark.pedantic(
            _alternate, args=(hinge, baseline, timer, rounds, seconds), rounds=1
        )
    finally:
        torch.set_num_threads(previous)
    num, den = float(np.median(times_hinge)), float(np.median(times_bce))
    benchmark.extra_info.update(
        bench="hinge-loop", loss=loss, bce=bce, numerator_median=num, denominator_median=den, ratio=num / den
    )
