"""Neural rankers trained with rankopt's structured hinge against the losses neural users pick.

``python -m experiments.deep mslr`` — learning to rank on the MSLR-WEB30K fold-1 sample
(:func:`rankopt.data.mslr.fetch_mslr_sample`).  An MLP 136 → 256 → 256 → 1 (ReLU, Adam) is trained on
33 of the 43 training queries with the ``ndcg_graded``, ``ap`` and ``pairwise`` hinges
(:class:`rankopt.torch.RankHingeLoss`) and with LambdaLoss, ListNet and ApproxNDCG
(:mod:`experiments.neural_losses`).  The learning rate and the number of epochs are chosen
per loss by the mean validation NDCG@10 over the seeds on the other 10 training queries; the test
queries are scored at that choice only.  Baselines: ``LGBMRanker`` (lambdarank, 100 trees, one thread)
and linear RankSVM (``ndcg_graded`` and ``pairwise``, C chosen the same way), on the same 33 queries.

``python -m experiments.deep digits`` — retrieval on scikit-learn's digits.  An embedding network 64 → 128 → 32
(L2-normalised) is trained on batches of 128 images: every image is a query against the rest of its
batch (cosine similarities), its positives the images of its class.  Losses: the AP hinge (scores
scaled by a factor chosen on validation), FastAP (Cakir et al., CVPR 2019), the contrastive and the
triplet-margin loss, the last three from pytorch-metric-learning.  The epochs are chosen by validation
mAP; each test image then queries the other test images: mAP and Recall@1.

Every run repeats over ``--seeds`` seeds (initialisation and batch order); the tables give the mean
over seeds with its standard error, and the paired differences over test queries against the
reference loss (each query's metric averaged over the seeds first).  Features are standardised on the
training rows.  Needs the ``torch`` extra (and pytorch-metric-learning for digits).
"""

from __future__ import annotations

import argparse
import logging
import sys
import time
import warnings

import numpy as np

from experiments.results import DeepResult, Row, format_table, write_result
from rankopt.experiments.report import timed_reporter

__all__ = ["DeepResult", "run_digits_experiment", "run_mslr_experiment"]

logger = logging.getLogger(__name__)

MSLR_LOSSES = (
    "hinge_ndcg_graded",
    "hinge_ap",
    "hinge_pairwise",
    "lambdaloss@10",
    "lambdaloss",
    "listnet",
    "approx_ndcg",
)
MSLR_BASELINES = ("lightgbm", "ranksvm_ndcg_graded", "ranksvm_pairwise")
DIGITS_LOSSES = ("hinge_ap", "fastap", "contrastive", "triplet")
LEARNING_RATES = (1e-4, 3e-4, 1e-3, 3e-3, 1e-2)
WEIGHT_DECAYS = (0.0, 1e-5, 1e-4)
#: Epochs without a better validation NDCG@10 after which a seed's training stops.
PATIENCE = 10
C_GRID = (0.1, 1.0, 10.0, 100.0)
#: Score scales of the AP hinge on cosine similarities, chosen on validation.
HINGE_SCALES = (1.0, 4.0, 16.0)


# ---------------------------------------------------------------- shared pieces


def _torch():
    from rankopt._optional import require

    return require("torch", purpose="rankopt deep (the torch extra: pip install 'rankopt[torch]')")


def _padded(X, y, qid, torch):
    """(features [Q, L, d], grades [Q, L], mask [Q, L]) of the queries, by increasing qid."""
    ids, starts, sizes = np.unique(qid, return_index=True, return_counts=True)
    order = np.argsort(qid, kind="stable")
    width = int(sizes.max())
    feats = np.zeros((ids.size, width, X.shape[1]), dtype=np.float32)
    grades = np.zeros((ids.size, width), dtype=np.int64)
    mask = np.zeros((ids.size, width), dtype=bool)
    offsets = np.concatenate(([0], np.cumsum(sizes)))
    for q in range(ids.size):
        rows = order[offsets[q] : offsets[q + 1]]
        feats[q, : rows.size] = X[rows]
        grades[q, : rows.size] = y[rows]
        mask[q, : rows.size] = True
    return torch.from_numpy(feats), torch.from_numpy(grades), torch.from_numpy(mask)


# ---------------------------------------------------------------- MSLR


def _mlp(torch, n_features: int, seed: int):
    torch.manual_seed(seed)
    return torch.nn.Sequential(
        torch.nn.Linear(n_features, 256),
        torch.nn.ReLU(),
        torch.nn.Linear(256, 256),
        torch.nn.ReLU(),
        torch.nn.Linear(256, 1),
    )


def _ranking_loss(name: str, torch):
    from experiments import neural_losses
    from rankopt.torch import RankHingeLoss

    if name.startswith("hinge_"):
        layer = RankHingeLoss(name[len("hinge_") :], n_threads=1)
        return lambda scores, y, mask: layer(scores, y, mask=mask)
    return {
        "lambdaloss@10": lambda scores, y, mask: neural_losses.lambda_loss(scores, y, mask, k=10),
        "lambdaloss": neural_losses.lambda_loss,
        "listnet": neural_losses.listnet_loss,
        "approx_ndcg": neural_losses.approx_ndcg_loss,
    }[name]


def _query_scores(model, feats, mask, torch) -> np.ndarray:
    with torch.no_grad():
        return model(feats).squeeze(-1)[mask].double().numpy()


def _train_mlp(name, lr, weight_decay, seed, n_epochs, train, validate, torch, batch_queries=8):
    """Train one MLP, stopping :data:`PATIENCE` epochs after its best ``validate(model)``: (best validation,
    its epoch, the model's weights then)."""
    import copy

    feats, grades, mask = train
    model = _mlp(torch, feats.shape[-1], seed)
    optimiser = torch.optim.Adam(model.parameters(), lr=lr, weight_decay=weight_decay)
    loss_fn = _ranking_loss(name, torch)
    generator = torch.Generator().manual_seed(seed)
    best, best_epoch, best_state = -np.inf, 0, None
    for epoch in range(n_epochs):
        for batch in torch.randperm(feats.shape[0], generator=generator).split(batch_queries):
            optimiser.zero_grad()
            scores = model(feats[batch]).squeeze(-1)
            loss_fn(scores, grades[batch], mask[batch]).backward()
            optimiser.step()
        score = validate(model)
        if score > best:
            best, best_epoch, best_state = score, epoch + 1, copy.deepcopy(model.state_dict())
        elif epoch + 1 - best_epoch >= PATIENCE:
            break
    model.load_state_dict(best_state)
    return best, best_epoch, model


def run_mslr_experiment(
    *,
    seeds=(0, 1, 2),
    n_epochs: int = 100,
    data=None,
    data_home=None,
    quick=False,
    output=None,
    json_output=None,
    progress=None,
) -> DeepResult:
    """The MSLR comparison (module docstring); ``data`` = (train, test) SvmLightData or the MSLR sample."""
    torch = _torch()
    from rankopt.exceptions import ConstantRankerWarning, ConvergenceWarning
    from rankopt.metrics import mean_average_precision, ndcg_at_k

    report = timed_reporter(logger, progress)
    torch.set_num_threads(1)
    if data is None:
        from rankopt.data.mslr import fetch_mslr_sample

        data = (fetch_mslr_sample("train", data_home=data_home), fetch_mslr_sample("test", data_home=data_home))
    train, test = data
    X, y, qid = train.X.toarray(), np.asarray(train.y, dtype=np.int64), np.asarray(train.qid)
    X_test, y_test, q_test = test.X.toarray(), np.asarray(test.y, dtype=np.int64), np.asarray(test.qid)
    train_ids = np.unique(qid)
    learning_rates: tuple[float, ...] = LEARNING_RATES
    weight_decays: tuple[float, ...] = WEIGHT_DECAYS
    if quick:
        n_epochs, seeds = 3, tuple(seeds)[:2]
        learning_rates, weight_decays = (1e-3,), (0.0,)
        train_ids = train_ids[:12]
        keep = np.isin(q_test, np.unique(q_test)[:8])
        X_test, y_test, q_test = X_test[keep], y_test[keep], q_test[keep]
    n_valid = max(2, train_ids.size * 10 // 43)
    valid_ids = train_ids[-n_valid:]
    is_fit = np.isin(qid, train_ids[:-n_valid])
    is_valid = np.isin(qid, valid_ids)
    from sklearn.preprocessing import StandardScaler

    scaler = StandardScaler().fit(X[is_fit])
    X_fit, X_valid, X_test_s = (scaler.transform(A).astype(np.float32) for A in (X[is_fit], X[is_valid], X_test))
    y_fit, q_fit, y_valid, q_valid = y[is_fit], qid[is_fit], y[is_valid], qid[is_valid]
    fit_set = _padded(X_fit, y_fit, q_fit, torch)
    valid_set = _padded(X_valid, y_valid, q_valid, torch)
    test_set = _padded(X_test_s, y_test, q_test, torch)
    # Documents of the padded sets come out by increasing qid, as the metrics group them.
    y_valid_sorted = y_valid[np.argsort(q_valid, kind="stable")]
    q_valid_sorted = np.sort(q_valid, kind="stable")
    y_test_sorted, q_test_sorted = y_test[np.argsort(q_test, kind="stable")], np.sort(q_test, kind="stable")

    def metrics(scores, grades, queries) -> dict:
        return {
            "NDCG@10": ndcg_at_k(grades, scores, queries, k=10, average=False),
            "MAP": mean_average_precision(grades, scores, queries, relevant_at=1, average=False),
        }

    result = DeepResult(
        task="mslr",
        seeds=list(seeds),
        description=(
            f"MSLR-WEB30K sample: {int(is_fit.sum())} documents in {train_ids.size - n_valid} training queries, "
            f"{int(is_valid.sum())} in {n_valid} validation queries, {y_test.size} in "
            f"{np.unique(q_test).size} test queries; {n_epochs} epochs at most, early stopping after {PATIENCE} "
            "epochs without a better validation NDCG@10"
        ),
        reference="hinge_ndcg_graded",
        metrics=("NDCG@10", "MAP"),
        quick=bool(quick),
    )

    def validate(model) -> float:
        scores = _query_scores(model, valid_set[0], valid_set[2], torch)
        return float(np.nanmean(metrics(scores, y_valid_sorted, q_valid_sorted)["NDCG@10"]))

    for name in MSLR_LOSSES:
        start = time.process_time()
        # (lr, weight decay) → per seed (best validation NDCG@10, its epoch, the model then)
        runs = {
            (lr, decay): [_train_mlp(name, lr, decay, seed, n_epochs, fit_set, validate, torch) for seed in seeds]
            for lr in learning_rates
            for decay in weight_decays
        }
        (lr, decay), chosen = max(runs.items(), key=lambda item: np.mean([run[0] for run in item[1]]))
        epochs = [run[1] for run in chosen]
        row = Row(
            name,
            f"lr={lr:g}, wd={decay:g}, epochs {min(epochs)}–{max(epochs)}",
            float(np.mean([run[0] for run in chosen])),
            seconds=time.process_time() - start,
        )
        per_seed = [
            metrics(_query_scores(model, test_set[0], test_set[2], torch), y_test_sorted, q_test_sorted)
            for _, _, model in chosen
        ]
        for metric in result.metrics:
            row.test[metric] = [float(np.nanmean(values[metric])) for values in per_seed]
            row.per_query[metric] = np.nanmean([values[metric] for values in per_seed], axis=0).tolist()
        report(
            f"{name}: {row.setting}, validation NDCG@10 {row.validation:.4f}, "
            f"test NDCG@10 {np.mean(row.test['NDCG@10']):.4f}"
        )
        result.rows.append(row)
        write_result(result, output, json_output)
    with warnings.catch_warnings():
        # Counted instead, from converged_; a constant ranker at small C loses the validation choice.
        warnings.simplefilter("ignore", ConvergenceWarning)
        warnings.simplefilter("ignore", ConstantRankerWarning)
        for name in MSLR_BASELINES:
            result.rows.append(
                _mslr_baseline(
                    name,
                    seeds,
                    (X_fit, y_fit, q_fit),
                    (X_valid, y_valid, q_valid),
                    (X_test_s, y_test, q_test),
                    metrics,
                    quick,
                )
            )
            report(f"{name}: test NDCG@10 {np.mean(result.rows[-1].test['NDCG@10']):.4f}")
    write_result(result, output, json_output)
    return result


def _mslr_baseline(name, seeds, fit, valid, test, metrics, quick=False) -> Row:
    from rankopt.estimators.rank_svm import RankSVM

    start = time.process_time()
    if name == "lightgbm":
        from experiments.learners import LEARNERS, QUICK_GRID, Split, tune_trees

        def split(X, y, qid):
            order = np.argsort(qid, kind="stable")
            return Split(X[order], y[order], qid[order])

        # Tuned as in the learners table; the test queries' rows come out sorted, as the metrics sort them.
        tuned = tune_trees(
            LEARNERS[0], seeds, split(*fit), split(*valid), split(*test), grid=QUICK_GRID if quick else None
        )
        return Row(name, tuned.setting, tuned.validation, tuned.test, tuned.per_query, tuned.seconds, tuned.note)
    else:
        fits = [RankSVM(loss=name[len("ranksvm_") :], C=C).fit(fit[0], fit[1], qid=fit[2]) for C in C_GRID]
        scores = [float(np.nanmean(metrics(m.decision_function(valid[0]), *valid[1:])["NDCG@10"])) for m in fits]
        chosen = int(np.argmax(scores))
        model = fits[chosen]
        # Convex and deterministic: one fit serves every seed.
        outcomes = [(None, model.decision_function(test[0]))] * len(seeds)
        certified = sum(bool(m.converged_) for m in fits)
        row = Row(name, f"C={C_GRID[chosen]:g}", scores[chosen], note=f"{certified}/{len(fits)} fits certified")
    for metric in ("NDCG@10", "MAP"):
        per_seed = [metrics(t, *test[1:])[metric] for _, t in outcomes]
        row.test[metric] = [float(np.nanmean(v)) for v in per_seed]
        row.per_query[metric] = np.nanmean(per_seed, axis=0).tolist()
    row.seconds = time.process_time() - start
    return row


# ---------------------------------------------------------------- digits


def _embedder(torch, seed: int):
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 32))


def _embed(model, X, torch):
    return torch.nn.functional.normalize(model(X), dim=1)


def retrieval_metrics(embeddings: np.ndarray, labels: np.ndarray) -> dict:
    """Each sample queries all the others by cosine similarity: AP and whether its nearest is of its class."""
    from rankopt.metrics import average_precision

    similarity = embeddings @ embeddings.T
    n = labels.size
    aps, hits = np.empty(n), np.empty(n)
    for i in range(n):
        others = np.arange(n) != i
        relevant = (labels[others] == labels[i]).astype(int)
        aps[i] = average_precision(relevant, similarity[i, others])
        hits[i] = float(relevant[np.argmax(similarity[i, others])])
    return {"mAP": aps, "Recall@1": hits}


def _digits_loss(name: str, scale: float, torch):
    if name == "hinge_ap":
        from rankopt.torch import MetricHingeLoss

        # PML's calling convention: every embedding ranks the others of the batch by the scaled dot product.
        return MetricHingeLoss("ap", similarity="dot", scale=scale, n_threads=1)
    from rankopt._optional import require

    losses = require(
        "pytorch_metric_learning.losses", purpose="the digits experiment's FastAP and metric-learning baselines"
    )
    return {
        "fastap": losses.FastAPLoss(),
        "contrastive": losses.ContrastiveLoss(),
        "triplet": losses.TripletMarginLoss(),
    }[name]


def run_digits_experiment(
    *, seeds=(0, 1, 2), n_epochs: int = 150, quick=False, output=None, json_output=None, progress=None
) -> DeepResult:
    """The digits retrieval comparison (module docstring)."""
    torch = _torch()
    from sklearn.model_selection import train_test_split

    from rankopt.data.loaders import load_digits

    report = timed_reporter(logger, progress)
    torch.set_num_threads(1)
    X, labels = load_digits()
    X_train, X_rest, l_train, l_rest = train_test_split(X, labels, test_size=0.4, stratify=labels, random_state=0)
    X_valid, X_test, l_valid, l_test = train_test_split(X_rest, l_rest, test_size=0.5, stratify=l_rest, random_state=0)
    if quick:
        n_epochs, seeds = 2, tuple(seeds)[:2]
        X_test, l_test = X_test[:100], l_test[:100]
    as_tensor = lambda A: torch.from_numpy(np.ascontiguousarray(A, dtype=np.float32))  # noqa: E731
    train_x, train_l = as_tensor(X_train), torch.from_numpy(l_train.astype(np.int64))
    valid_x, test_x = as_tensor(X_valid), as_tensor(X_test)
    result = DeepResult(
        task="digits",
        seeds=list(seeds),
        description=(
            f"scikit-learn digits: {l_train.size} training, {l_valid.size} validation, {l_test.size} test images "
            f"(stratified); batches of 128; {n_epochs} epochs at most"
        ),
        reference="hinge_ap",
        metrics=("mAP", "Recall@1"),
        quick=bool(quick),
    )
    for name in DIGITS_LOSSES:
        start = time.process_time()
        runs = {}
        for scale in HINGE_SCALES if name == "hinge_ap" else (1.0,):
            loss_fn = _digits_loss(name, scale, torch)
            for seed in seeds:
                model = _embedder(torch, seed)
                optimiser = torch.optim.Adam(model.parameters(), lr=1e-3)
                generator = torch.Generator().manual_seed(seed)
                history = []
                for _ in range(n_epochs):
                    for batch in torch.randperm(train_l.numel(), generator=generator).split(128):
                        optimiser.zero_grad()
                        loss_fn(_embed(model, train_x[batch], torch), train_l[batch]).backward()
                        optimiser.step()
                    with torch.no_grad():
                        valid = retrieval_metrics(_embed(model, valid_x, torch).numpy(), l_valid)["mAP"].mean()
                        tested = retrieval_metrics(_embed(model, test_x, torch).numpy(), l_test)
                    history.append((valid, tested))
                runs[scale, seed] = history
        choices = {
            (scale, epoch): np.mean([runs[scale, seed][epoch][0] for seed in seeds])
            for scale in {key[0] for key in runs}
            for epoch in range(n_epochs)
        }
        (scale, epoch), best = max(choices.items(), key=lambda item: item[1])
        setting = f"epochs={epoch + 1}" + (f", score scale={scale:g}" if name == "hinge_ap" else "")
        row = Row(name, setting, float(best), seconds=time.process_time() - start)
        for metric in result.metrics:
            per_seed = [runs[scale, seed][epoch][1][metric] for seed in seeds]
            row.test[metric] = [float(np.mean(v)) for v in per_seed]
            row.per_query[metric] = np.mean(per_seed, axis=0).tolist()
        report(f"{name}: {setting}, validation mAP {best:.4f}, test mAP {np.mean(row.test['mAP']):.4f}")
        result.rows.append(row)
    write_result(result, output, json_output)
    return result


# ---------------------------------------------------------------- CLI


def add_cli_subcommand(subparsers, parents=()) -> argparse.ArgumentParser:
    """Add ``deep`` to an argparse subparsers object."""
    parser = subparsers.add_parser(
        "deep",
        parents=list(parents),
        help="neural rankers: the structured hinge against LambdaLoss/ListNet/ApproxNDCG (MSLR) or FastAP (digits)",
        description="Trains small torch models with rankopt's RankHingeLoss and with the losses neural "
        "rankers use, chooses epochs and learning rates on validation queries and prints test metrics "
        "over seeds with paired differences. Needs the torch extra (digits: pytorch-metric-learning).",
    )
    parser.add_argument("task", choices=("mslr", "digits"), help="the experiment")
    parser.add_argument("--seeds", type=int, default=3, help="number of seeds (default: 3)")
    parser.add_argument("--epochs", type=int, default=None, help="most epochs (default: 100 mslr, 150 digits)")
    parser.add_argument("--quick", action="store_true", help="a smoke test whose numbers mean nothing")
    parser.add_argument("--data-home", default=None, help="cache directory of the MSLR sample")
    parser.add_argument("--output", default=None, help="write the markdown table to this file")
    parser.add_argument("--json", default=None, help="write the raw results (JSON) to this file")
    parser.set_defaults(handler=cli_main)
    return parser


def cli_main(args) -> int:
    from rankopt.experiments.report import say

    if args.seeds < 1:
        raise SystemExit(f"rankopt deep: expected --seeds >= 1, got {args.seeds} instead")
    seeds = tuple(range(args.seeds))
    options = dict(seeds=seeds, quick=args.quick, output=args.output, json_output=args.json, progress=say)
    if args.epochs is not None:
        options["n_epochs"] = args.epochs
    if args.task == "mslr":
        result = run_mslr_experiment(data_home=args.data_home, **options)
    else:
        result = run_digits_experiment(**options)
    print(result.description)
    print(format_table(result))
    return 0


if __name__ == "__main__":
    from experiments import run_experiment

    sys.exit(run_experiment(add_cli_subcommand, "deep"))
