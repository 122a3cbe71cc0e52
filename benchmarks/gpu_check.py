"""The structured hinge on a GPU: the tensor backend against the host-copy path, BCE, ApproxNDCG and LambdaLoss.

Run on a machine with a CUDA GPU (about 3 minutes on one card)::

    python benchmarks/gpu_check.py --output gpu-check.md

For every batch shape [B, L] of :data:`SHAPES` (float32 scores, 10 % relevant documents with grades 1–4, as
``bench_hinge.py``), it times forward plus backward on the device, the device synchronised around each
call, medians of :data:`REPEATS` calls after a warm-up:

* ``RankHingeLoss(loss, device="torch")`` — the tensor-op kernels, the scores never leaving the device;
* ``RankHingeLoss(loss, device="cpu")`` — the compiled kernels on the host, scores copied there and
  the gradient back (the host-copy path);
* ``binary_cross_entropy_with_logits``, ApproxNDCG and LambdaLoss@10 (``experiments.neural_losses``) on the
  same device and batch.

It also checks exactness on the device: the tensor backend's values and gradients against the compiled
kernels' on random float64 batches with ties and masks, for every loss timed.  ``--device cpu --quick``
runs the whole script on the CPU at small shapes (the tests do, so that it keeps working).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # experiments.neural_losses, from a checkout

from experiments.neural_losses import approx_ndcg_loss, lambda_loss  # noqa: E402
from rankopt.torch import RankHingeLoss  # noqa: E402

SHAPES = ((1024, 100), (10_000, 100), (256, 256))
QUICK_SHAPES = ((32, 20), (8, 16))
LOSSES = ("ap", "ndcg", "auc", "precision_at_k", "ndcg_graded", "pairwise")
REPEATS = 10


def _batch(shape, device, seed=0):
    rng = np.random.default_rng(seed)
    grades = np.where(rng.random(shape) < 0.1, rng.integers(1, 5, shape), 0)
    scores = np.where(grades > 0, rng.normal(1, 1, shape), rng.normal(0, 1, shape))
    return torch.tensor(scores, dtype=torch.float32, device=device), torch.tensor(grades, device=device)


def _timed(step, device, repeats: int) -> float:
    """Median wall-clock milliseconds of ``step()``, the device synchronised around each call."""
    synchronise = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    step()  # warm-up: kernels compiled, memory pools filled
    times = []
    for _ in range(repeats):
        synchronise()
        start = time.perf_counter()
        step()
        synchronise()
        times.append(time.perf_counter() - start)
    return 1e3 * statistics.median(times)


def _step(loss_fn, batch):
    scores, grades, mask = batch
    s = scores.detach().requires_grad_(True)
    loss_fn(s, grades, mask).backward()


def _as_loss_fn(layer):
    """``layer`` called as the baselines are, ``fn(scores, grades, mask)``."""
    return lambda s, y, m: layer(s, y, mask=m)


def timing_rows(device, shapes, repeats: int):
    """(shape, method, milliseconds) for every shape and method."""
    rows = []
    for shape in shapes:
        scores, grades = _batch(shape, device)
        batch = (scores, grades, torch.ones_like(grades, dtype=torch.bool))
        baselines = {
            "BCE": lambda s, y, m: torch.nn.functional.binary_cross_entropy_with_logits(s, (y > 0).to(s.dtype)),
            "ApproxNDCG": approx_ndcg_loss,
            "LambdaLoss@10": lambda s, y, m: lambda_loss(s, y, m, k=10),
        }
        for name, fn in baselines.items():
            rows.append((shape, name, _timed(lambda fn=fn, batch=batch: _step(fn, batch), device, repeats)))
        for loss in LOSSES:
            for kernels in ("torch", "cpu"):
                fn = _as_loss_fn(RankHingeLoss(loss, device=kernels))
                rows.append(
                    (shape, f"{loss} ({kernels})", _timed(lambda fn=fn, batch=batch: _step(fn, batch), device, repeats))
                )
    return rows


def exactness_rows(device, n_batches: int):
    """(loss, batches, batches whose values agree, largest value difference, largest gradient difference where untied).

    Values agree as the CI test asks: to 1e-9 relative, 1e-12 absolute (hinges near 0 compare absolutely).
    """
    rows = []
    rng = np.random.default_rng(1)
    for loss in LOSSES:
        agreeing = 0
        worst_value = worst_grad = 0.0
        for trial in range(n_batches):
            shape = (int(rng.integers(1, 64)), int(rng.integers(2, 80)))
            tied = trial % 4 == 0
            scores = rng.integers(-3, 4, shape) / 2.0 if tied else rng.normal(size=shape)
            grades = np.where(rng.random(shape) < 0.3, rng.integers(1, 5, shape), 0)
            mask = rng.random(shape) < 0.9
            mask[:, 0] = True
            out = {}
            for kernels, where in (("torch", device), ("cpu", torch.device("cpu"))):
                s = torch.tensor(scores, dtype=torch.float64, device=where, requires_grad=True)
                value = RankHingeLoss(loss, device=kernels, reduction="none")(
                    s, torch.tensor(grades, device=where), mask=torch.tensor(mask, device=where)
                )
                value.sum().backward()
                out[kernels] = (value.detach().cpu().numpy(), s.grad.cpu().numpy())
            agreeing += bool(np.allclose(out["torch"][0], out["cpu"][0], rtol=1e-9, atol=1e-12))
            worst_value = max(worst_value, float(np.max(np.abs(out["torch"][0] - out["cpu"][0]))))
            if not tied:
                worst_grad = max(worst_grad, float(np.max(np.abs(out["torch"][1] - out["cpu"][1]))))
        rows.append((loss, n_batches, agreeing, worst_value, worst_grad))
    return rows


def _synchronisations(fn, batch) -> int:
    """How many operations of one forward + backward wait for the device (CUDA's sync debug mode counts them)."""
    import warnings

    torch.cuda.set_sync_debug_mode("warn")
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            _step(fn, batch)
    finally:
        torch.cuda.set_sync_debug_mode("default")
    return sum("synchroniz" in str(w.message) for w in caught)


def profile_text(device, shape, repeats: int) -> str:
    """torch.profiler's table of the tensor backend's operators, forward + backward, for every loss at ``shape``."""
    from torch.profiler import ProfilerActivity, profile

    scores, grades = _batch(shape, device)
    batch = (scores, grades, torch.ones_like(grades, dtype=torch.bool))
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
    sort_by = "cuda_time_total" if device.type == "cuda" else "cpu_time_total"
    parts = []
    for loss in LOSSES:
        fn = _as_loss_fn(RankHingeLoss(loss, device="torch"))
        _step(fn, batch)
        with profile(activities=activities) as prof:
            for _ in range(repeats):
                _step(fn, batch)
            if device.type == "cuda":
                torch.cuda.synchronize()
        parts.append(f"## {loss}, {list(shape)}, {repeats} calls\n")
        if device.type == "cuda":
            parts.append(f"operations that synchronise the device, per call: {_synchronisations(fn, batch)}\n")
        parts.append(prof.key_averages().table(sort_by=sort_by, row_limit=25))
    return "\n".join(parts)


def compile_rows(device, shape=(256, 64)):
    """(loss, largest |compiled − eager| of the three losses, of the parameters after three steps, whether the
    forward (ranker and hinge) compiles as one graph): a small ranker's training step under ``torch.compile``
    (default backend) on ``device``."""
    features = torch.randn(3, *shape, 5, generator=torch.Generator().manual_seed(0)).to(device)
    grades = (features[..., 0] > 1.0).long() + (features[..., 1] > 1.5).long()
    mask = torch.ones(shape, dtype=torch.bool, device=device)
    rows = []
    for loss in LOSSES:
        layer, runs = RankHingeLoss(loss, device="torch"), {}
        for mode in ("eager", "compiled"):
            torch.manual_seed(1)
            model = torch.nn.Sequential(torch.nn.Linear(5, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1)).to(device)
            optimiser = torch.optim.SGD(model.parameters(), lr=0.1)

            def step(x, y, m, model=model, optimiser=optimiser, layer=layer):
                optimiser.zero_grad()
                value = layer(model(x).squeeze(-1), y, mask=m)
                value.backward()
                optimiser.step()
                return value.detach()

            run = torch.compile(step) if mode == "compiled" else step
            losses = torch.stack([run(features[i], grades[i], mask) for i in range(3)])
            runs[mode] = losses, torch.cat([p.detach().reshape(-1) for p in model.parameters()])
        forward = torch.compile(
            lambda x, model=model, layer=layer: layer(model(x).squeeze(-1), grades[0], mask=mask), fullgraph=True
        )
        try:
            forward(features[0])
            whole = "yes"
        except Exception as exc:  # the compiler's own error types: report, do not stop the check
            whole = f"no ({type(exc).__name__})"
        rows.append(
            (
                loss,
                float((runs["compiled"][0] - runs["eager"][0]).abs().max()),
                float((runs["compiled"][1] - runs["eager"][1]).abs().max()),
                whole,
            )
        )
        torch._dynamo.reset()
    return rows


def report(device, shapes, repeats: int, n_batches: int, compiled: bool = False) -> str:
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else f"{device} (no GPU: a dry run)"
    lines = [
        f"Device: {name}; torch {torch.__version__}; float32 scores, forward + backward, medians of {repeats}.",
        "",
    ]
    lines += ["| [B, L] | method | ms |", "|---|---|---:|"]
    lines += [f"| {list(shape)} | {method} | {ms:.2f} |" for shape, method, ms in timing_rows(device, shapes, repeats)]
    lines += [
        "",
        "| loss | float64 batches | values agree (1e-9 rel., 1e-12 abs.) | max value difference | "
        "max gradient difference (untied) |",
        "|---|---:|---:|---:|---:|",
    ]
    lines += [
        f"| {loss} | {n} | {agree} | {v:.2e} | {g:.2e} |" for loss, n, agree, v, g in exactness_rows(device, n_batches)
    ]
    if compiled:
        lines += [
            "",
            "| loss (torch.compile, 3 training steps) | max loss difference | max parameter difference | "
            "forward in one graph (fullgraph=True) |",
            "|---|---:|---:|---:|",
        ]
        lines += [f"| {loss} | {d:.2e} | {p:.2e} | {whole} |" for loss, d, p, whole in compile_rows(device)]
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda", help="the torch device (default: cuda)")
    parser.add_argument("--quick", action="store_true", help="small shapes and few repeats: a dry run")
    parser.add_argument("--output", default=None, help="also write the tables to this file")
    parser.add_argument(
        "--compile", action="store_true", help="also compile a small ranker's training step and compare it with eager"
    )
    parser.add_argument(
        "--profile", default=None, help="also write torch.profiler's operator table of the tensor backend here"
    )
    args = parser.parse_args(argv)
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        print("gpu_check: no CUDA device here; run with --device cpu --quick for a dry run", file=sys.stderr)
        return 2
    text = report(
        device,
        QUICK_SHAPES if args.quick else SHAPES,
        2 if args.quick else REPEATS,
        5 if args.quick else 100,
        compiled=args.compile,
    )
    print(text)
    if args.output:
        Path(args.output).write_text(text + "\n", encoding="utf-8")
    if args.profile:
        shape = QUICK_SHAPES[0] if args.quick else SHAPES[1]
        Path(args.profile).write_text(profile_text(device, shape, 2 if args.quick else 5) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
