"""Metric learning on classes unseen in training: ``rankopt.pml.MetricHingeLoss`` in pytorch-metric-learning's
own loop, against the losses a PML user would pick instead.

``python -m experiments.metric_learning`` — scikit-learn's digits (pixels / 16): the images of digits 0–4 train
an embedding network 64 → 128 → 32 (L2-normalised output), those of 5 and 6 validate, and those of 7–9, seen
neither in training nor in validation, are the test set.  The loop is PML's, as its users write it: an
``MPerClassSampler`` (8 images of each of the 5 training classes per batch), a miner where the loss takes one,
the default reducer, Adam (learning rate 1e-3), and PML's ``AccuracyCalculator`` (MAP@R and P@1, every image
querying all the others of its split by cosine similarity).  Losses, each with PML's defaults:

* ``hinge_ap``: ``rankopt.pml.MetricHingeLoss("ap", scale=s)``, no miner, s chosen on validation from
  {1, 4, 16};
* ``hinge_ap_miner``: the same with PML's ``MultiSimilarityMiner`` restricting what each anchor ranks;
* ``fastap``: ``FastAPLoss`` (Cakir et al., "Deep metric learning to rank", CVPR 2019);
* ``smoothap``: ``SmoothAPLoss`` (Brown et al., "Smooth-AP: smoothing the path towards large-scale image
  retrieval", ECCV 2020);
* ``triplet_miner``: ``TripletMarginLoss`` with a semi-hard ``TripletMarginMiner``.

Each trains for ``--epochs`` epochs (40); the epoch (every second one is scored) and the hinge's scale are
chosen by the mean validation MAP@R over the seeds, and the test classes are scored there only.
Every loss runs over ``--seeds`` seeds (initialisation and batch order); the table gives the mean and the
standard error over the seeds.  Needs the ``experiments`` extra (torch and pytorch-metric-learning).
"""

from __future__ import annotations

import argparse
import json
import logging
import time

import numpy as np

from experiments.results import mean_se
from rankopt.experiments.report import QUICK_WARNING, timed_reporter

__all__ = ["LOSSES", "format_table", "run_metric_learning_experiment"]

logger = logging.getLogger(__name__)

LOSSES = ("hinge_ap", "hinge_ap_miner", "fastap", "smoothap", "triplet_miner")
TRAIN_CLASSES = tuple(range(5))
VALID_CLASSES = (5, 6)
#: Score scales of the AP hinge on cosine similarities, chosen on validation.
HINGE_SCALES = (1.0, 4.0, 16.0)
#: Epochs between two scorings of the validation and test classes.
SCORED_EVERY = 2
#: Images of each class in a batch (PML's MPerClassSampler), and the batch: every training class once.
PER_CLASS = 8


def _loss_and_miner(name: str, scale: float):
    from pytorch_metric_learning import losses, miners

    from rankopt.pml import MetricHingeLoss

    return {
        "hinge_ap": (MetricHingeLoss("ap", scale=scale, n_threads=1), None),
        "hinge_ap_miner": (MetricHingeLoss("ap", scale=scale, n_threads=1), miners.MultiSimilarityMiner()),
        "fastap": (losses.FastAPLoss(), None),
        "smoothap": (losses.SmoothAPLoss(), None),
        "triplet_miner": (losses.TripletMarginLoss(), miners.TripletMarginMiner(type_of_triplets="semihard")),
    }[name]


def _accuracy(embeddings, labels) -> dict:
    from pytorch_metric_learning.distances import CosineSimilarity
    from pytorch_metric_learning.utils.accuracy_calculator import AccuracyCalculator
    from pytorch_metric_learning.utils.inference import CustomKNN

    calculator = AccuracyCalculator(
        include=("mean_average_precision_at_r", "precision_at_1"), knn_func=CustomKNN(CosineSimilarity())
    )
    found = calculator.get_accuracy(embeddings, labels, embeddings, labels, ref_includes_query=True)
    return {"MAP@R": float(found["mean_average_precision_at_r"]), "P@1": float(found["precision_at_1"])}


def _train(name, scale, seed, epochs, splits, torch) -> list[tuple[dict, ...]]:
    """Train one network; (validation, test) accuracy every SCORED_EVERY epochs."""
    from pytorch_metric_learning import samplers

    (train_x, train_labels), valid, test = splits
    torch.manual_seed(seed)
    model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 32))
    optimiser = torch.optim.Adam(model.parameters(), lr=1e-3)
    loss_fn, miner = _loss_and_miner(name, scale)
    batch_size = PER_CLASS * len(TRAIN_CLASSES)
    sampler = samplers.MPerClassSampler(
        train_labels.tolist(), m=PER_CLASS, batch_size=batch_size, length_before_new_iter=train_labels.numel()
    )
    loader = torch.utils.data.DataLoader(
        torch.utils.data.TensorDataset(train_x, train_labels),
        batch_size=batch_size,
        sampler=sampler,
        generator=torch.Generator().manual_seed(seed),
    )
    scored = []
    for epoch in range(1, epochs + 1):
        for data, labels in loader:
            optimiser.zero_grad()
            embeddings = torch.nn.functional.normalize(model(data), dim=1)
            tuples = None if miner is None else miner(embeddings, labels)
            loss_fn(embeddings, labels, tuples).backward()
            optimiser.step()
        if epoch % SCORED_EVERY == 0 or epoch == epochs:
            with torch.no_grad():
                scored.append(
                    tuple(_accuracy(torch.nn.functional.normalize(model(x), dim=1), y) for x, y in (valid, test))
                )
    return scored


def run_metric_learning_experiment(*, seeds=(0, 1, 2), epochs: int = 40, quick=False, progress=None) -> dict:
    """The comparison of the module docstring: {"losses": {loss: {metric: [one value per seed], "setting": ...}}}."""
    import torch

    from rankopt.data.loaders import load_digits

    report = timed_reporter(logger, progress)
    torch.set_num_threads(1)
    X, digits = load_digits()
    if quick:
        epochs, seeds = 2, tuple(seeds)[:1]

    def split(classes):
        rows = np.isin(digits, classes)
        return (
            torch.from_numpy(np.ascontiguousarray(X[rows], dtype=np.float32)),
            torch.from_numpy(digits[rows].astype(np.int64)),
        )

    splits = (split(TRAIN_CLASSES), split(VALID_CLASSES), split((7, 8, 9)))
    result: dict = {"seeds": list(seeds), "epochs": epochs, "quick": bool(quick), "losses": {}}
    for name in LOSSES:
        start = time.process_time()
        scales = HINGE_SCALES if name.startswith("hinge") else (1.0,)
        runs = {(scale, seed): _train(name, scale, seed, epochs, splits, torch) for scale in scales for seed in seeds}
        choices = {
            (scale, point): np.mean([runs[scale, seed][point][0]["MAP@R"] for seed in seeds])
            for scale in scales
            for point in range(len(runs[scales[0], seeds[0]]))
        }
        (scale, point), best = max(choices.items(), key=lambda item: item[1])
        epoch = min((point + 1) * SCORED_EVERY, epochs)
        chosen: dict = {metric: [runs[scale, seed][point][1][metric] for seed in seeds] for metric in ("MAP@R", "P@1")}
        chosen["setting"] = f"epochs={epoch}" + (f", scale={scale:g}" if name.startswith("hinge") else "")
        chosen["validation MAP@R"] = float(best)
        chosen["seconds"] = [time.process_time() - start]
        result["losses"][name] = chosen
        report(f"{name}: {chosen['setting']}, test MAP@R {np.mean(chosen['MAP@R']):.4f}")
    return result


def format_table(result: dict) -> str:
    """The result as a Markdown table: mean ± standard error over the seeds."""
    lines = [
        "| loss | chosen on validation | validation MAP@R | test MAP@R | test P@1 | CPU s (all runs) |",
        "|---|---|---:|---:|---:|---:|",
    ]
    for name, runs in result["losses"].items():
        cells = ["{:.4f} ± {:.4f}".format(*mean_se(runs[metric])) for metric in ("MAP@R", "P@1")]
        lines.append(
            f"| {name} | {runs['setting']} | {runs['validation MAP@R']:.4f} | {cells[0]} | {cells[1]} | "
            f"{runs['seconds'][0]:.0f} |"
        )
    return "\n".join(lines)


def add_cli_subcommand(subparsers, parents=()) -> argparse.ArgumentParser:
    """Add ``metric_learning`` to an argparse subparsers object."""
    parser = subparsers.add_parser(
        "metric_learning",
        parents=list(parents),
        help="metric learning on unseen digit classes: MetricHingeLoss against FastAP, Smooth-AP, triplet",
        description=__doc__.split("\n\n")[1],
    )
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--epochs", type=int, default=40)
    parser.add_argument("--quick", action="store_true", help="one seed, two epochs: a smoke test")
    parser.add_argument("--json", metavar="FILE", help="also write the results as JSON here")
    parser.set_defaults(handler=cli_main)
    return parser


def cli_main(args) -> int:
    if args.quick:
        logger.warning(QUICK_WARNING)
    result = run_metric_learning_experiment(seeds=tuple(args.seeds), epochs=args.epochs, quick=args.quick)
    print(format_table(result))
    if args.json:
        with open(args.json, "w", encoding="utf-8") as handle:
            json.dump(result, handle, indent=1)
    return 0


if __name__ == "__main__":
    from experiments import run_experiment

    raise SystemExit(run_experiment(add_cli_subcommand, "metric_learning"))
