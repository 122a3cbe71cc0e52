"""Two ``gloo`` processes on the CPU, for tests/test_distributed_learners.py: ``python distributed_workers.py
MODE OUT_DIR``.  Each process saves what it computed to ``OUT_DIR/rank<r>.pt``; the test compares it with one
process on the whole batch.

* ``pml``: ``DistributedLossWrapper(rankopt.pml.MetricHingeLoss)``, half the embeddings per process.
* ``ddp``: a linear scorer under ``DistributedDataParallel`` with ``RankHingeLoss``, half the queries per
  process, reduced as ``docs/scale.md`` says gives the whole batch's gradient.
"""

from __future__ import annotations

import os
import sys

import torch
import torch.distributed as dist

WORLD_SIZE = 2


def metric_batch():
    """The whole batch of embeddings and labels (float64)."""
    generator = torch.Generator().manual_seed(0)
    labels = torch.randint(0, 4, (20,), generator=generator)
    return torch.randn(20, 6, generator=generator, dtype=torch.float64), labels


def ranking_batch():
    """The whole batch: 8 queries of 10 documents, features and grades, and the scorer's initial weights."""
    generator = torch.Generator().manual_seed(1)
    X = torch.randn(8, 10, 5, generator=generator, dtype=torch.float64)
    y = torch.randint(0, 3, (8, 10), generator=generator)
    return X, y, torch.randn(1, 5, generator=generator, dtype=torch.float64)


def whole_batch_hinge(hinge, scores, y):
    """What one process computes on the whole batch: the mean hinge over the queries with something to order."""
    return hinge(scores, y)


def _pml(rank: int, out: str) -> None:
    from pytorch_metric_learning.utils.distributed import DistributedLossWrapper

    from rankopt.pml import MetricHingeLoss

    embeddings, labels = metric_batch()
    rows = torch.arange(rank, embeddings.shape[0], WORLD_SIZE)
    local = embeddings[rows].clone().requires_grad_()
    loss = DistributedLossWrapper(MetricHingeLoss("ap", scale=2.0))(local, labels[rows])
    loss.backward()
    torch.save({"loss": loss.detach(), "grad": local.grad, "rows": rows}, os.path.join(out, f"rank{rank}.pt"))


def _ddp(rank: int, out: str) -> None:
    from rankopt.torch import RankHingeLoss

    X, y, weights = ranking_batch()
    model = torch.nn.Linear(5, 1, bias=False).double()
    with torch.no_grad():
        model.weight.copy_(weights)
    ddp = torch.nn.parallel.DistributedDataParallel(model)
    rows = torch.arange(rank, X.shape[0], WORLD_SIZE)
    scores = ddp(X[rows]).squeeze(-1)
    # The whole batch's mean: each process sums its queries' hinges, divided by every process's usable
    # queries together, times the world size (DDP averages the gradients over the processes).
    hinge = RankHingeLoss("ap", reduction="sum")
    usable = torch.tensor(float(_usable_queries(y[rows])), dtype=torch.float64)
    dist.all_reduce(usable)
    loss = hinge(scores, y[rows]) * WORLD_SIZE / usable
    loss.backward()
    torch.save({"grad": model.weight.grad.clone()}, os.path.join(out, f"rank{rank}.pt"))


def _usable_queries(y) -> int:
    """Queries with a relevant and an irrelevant document (the ones "mean" counts)."""
    relevant = y >= 1
    return int((relevant.any(dim=1) & (~relevant).any(dim=1)).sum())


def _run(rank: int, mode: str, out: str) -> None:
    dist.init_process_group(
        "gloo", init_method=f"file://{os.path.join(out, 'store')}", rank=rank, world_size=WORLD_SIZE
    )
    try:
        {"pml": _pml, "ddp": _ddp}[mode](rank, out)
        # Both processes done before either tears its connections down: gloo aborts a peer whose partner
        # closes first ("terminate called without an active exception").
        dist.barrier()
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    torch.set_num_threads(1)
    torch.multiprocessing.spawn(_run, args=(sys.argv[1], sys.argv[2]), nprocs=WORLD_SIZE, join=True)
