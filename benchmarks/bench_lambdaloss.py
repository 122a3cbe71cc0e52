"""LambdaLoss as neural rankers run it: the pair-restricted NDCG-Loss2++ against allRank's, and the hinge against it.

The batch of ``bench_hinge.py``: 10⁴ queries × 100 documents (``--bench-scale full``; ``small``: 50 × 20),
float32, 10 % relevant with grades 1–4, no padding.  Forward plus backward, one thread, the two sides
alternated (``bench_inference._alternate``), CPU time with ``--benchmark-timer time.process_time``.

* ``test_lambdaloss_against_allrank``: ``experiments.neural_losses.lambda_loss`` (pairs only from the graded
  documents, B × R × L; at k = 10 only among the top 10, B × 10 × 10) against ``allrank_lambda_loss``, the
  step-by-step transcription of allRank 1.4.3's ``lambdaLoss`` (B × L × L), at k = 10 and untruncated.
  Both sides run in chunks of 1,000 queries (allRank's B × L × L float32 tensors would take gigabytes at
  once).  Target: ours ≤ allRank's at k = 10.
* ``test_graded_hinge_against_lambdaloss``: the ``ndcg_graded`` hinge (NDCG@10) against the fastest
  LambdaLoss@10, ours, in one call.
"""

from __future__ import annotations

import functools

import pytest
from bench_hinge import _batch, _hinge_step, _paired

torch = pytest.importorskip("torch")
from experiments.neural_losses import allrank_lambda_loss, lambda_loss  # noqa: E402
from rankopt.torch import RankHingeLoss  # noqa: E402

ROUNDS = {"small": (3, 0.0), "full": (7, 10.0)}
CHUNK = 1_000


def _lambda_step(loss, k, scores, y, chunk=CHUNK):
    s = scores.detach().requires_grad_(True)
    mask = torch.ones_like(y, dtype=torch.bool)
    total = sum(loss(s[i : i + chunk], y[i : i + chunk], mask[i : i + chunk], k=k) for i in range(0, len(y), chunk))
    total.backward()


@pytest.mark.parametrize("k", [10, None])
def test_lambdaloss_against_allrank(benchmark, request, k):
    scores, y = _batch(request.config.rankopt_bench_scale)
    ours = functools.partial(_lambda_step, lambda_loss, k, scores, y)
    theirs = functools.partial(_lambda_step, allrank_lambda_loss, k, scores, y)
    _paired(
        benchmark, request, "lambdaloss-vs-allrank", ours, theirs, rounds=ROUNDS, bench="lambdaloss-vs-allrank", k=k
    )


def test_graded_hinge_against_lambdaloss(benchmark, request):
    scores, y = _batch(request.config.rankopt_bench_scale)
    hinge = functools.partial(_hinge_step, RankHingeLoss("ndcg_graded", n_threads=1), scores, y)
    fastest = functools.partial(_lambda_step, lambda_loss, 10, scores, y, len(y))
    _paired(
        benchmark,
        request,
        "hinge-vs-lambdaloss",
        hinge,
        fastest,
        rounds=ROUNDS,
        bench="hinge-vs-lambdaloss",
        loss="ndcg_graded",
        k=10,
    )
