"""Boosted trees trained on rankopt's structured hinges against LightGBM's and XGBoost's own ranking objectives.

``python -m experiments.learners trees`` — the learners table.  On the MSLR-WEB30K fold-1 sample
(:func:`rankopt.data.mslr.fetch_mslr_sample`; the last 10 of the 43 training queries by qid validate, the
other 33 train, the 43 test queries test):

* LightGBM (``lightgbm.train``) with ``lambdarank`` and with the structured hinge of ``ap``,
  ``ndcg_graded`` (NDCG@10, gains 2^g − 1), ``pairwise`` and the graded plugin ``dcg_zipf``
  (``plugins/rankopt-graded``) as its objective (:func:`rankopt.lightgbm.hinge_objective`);
* XGBoost (``xgboost.train``) with ``rank:ndcg``, ``rank:pairwise`` and the ``ndcg_graded`` and ``pairwise``
  hinges (:func:`rankopt.xgboost.hinge_objective`).

``python -m experiments.learners hessian`` — the hessian study: the ``ap``, ``ndcg_graded`` and ``pairwise``
hinges on LightGBM with each hessian (the constant 1, ``"gradient"``) and score scale in :data:`SCALES`.

Protocol, the same for every objective: at most :data:`MAX_ROUNDS` trees, early stopping after
:data:`PATIENCE` rounds without a better validation NDCG@10 (the ``ndcg_graded`` loss's own metric,
:func:`rankopt.lightgbm.eval_metric`, tied predictions broken against the truth), the learning rate and the
number of leaves from :data:`TREE_GRID`, row and feature subsampling of 0.8 seeded by the seed, one thread.
Each seed stops at its own best round; the setting is chosen per objective by the mean over seeds of the
validation NDCG@10 at those rounds; the test queries are scored at that choice only.  The tables give
test NDCG@10 and MAP (relevant from grade 1; :mod:`rankopt.metrics`, scikit-learn's tie rule) as the mean
over seeds ± standard error, and the paired difference from the reference objective over the test
queries (each query's metric averaged over the seeds first).  Needs the ``lightgbm`` and ``xgboost`` extras.
"""

from __future__ import annotations

import argparse
import logging
import sys
import time
from dataclasses import dataclass, field
from itertools import product

import numpy as np

from experiments.results import DeepResult, Row, format_table, write_result
from rankopt.experiments.report import timed_reporter

__all__ = ["TreeObjective", "run_hessian_study", "run_learners_experiment", "tune_trees"]

logger = logging.getLogger(__name__)

#: The grid every objective is tuned on.
TREE_GRID = {"learning_rate": (0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5), "num_leaves": (7, 31)}
QUICK_GRID = {"learning_rate": (0.1,), "num_leaves": (7,)}
MAX_ROUNDS = 500
PATIENCE = 50
#: The score scales of the hessian study.
SCALES = (0.3, 1.0, 3.0, 10.0, 30.0)
HESSIANS = (1.0, "gradient")


@dataclass(frozen=True)
class TreeObjective:
    """One row of a table: a library and its objective, built-in (a string) or a rankopt hinge."""

    name: str
    library: str  # "lightgbm" or "xgboost"
    objective: str | None = None  # the library's own objective
    hinge: str | None = None  # a rankopt loss name
    hinge_options: dict = field(default_factory=dict)

    def describe(self) -> str:
        if self.hinge is None:
            return f"{self.library} {self.objective}"
        options = ", ".join(f"{k}={v}" for k, v in self.hinge_options.items())
        return f"{self.library}, hinge of {self.hinge}" + (f" ({options})" if options else "")


LEARNERS = (
    TreeObjective("lgbm_lambdarank", "lightgbm", objective="lambdarank"),
    TreeObjective("lgbm_hinge_ap", "lightgbm", hinge="ap"),
    TreeObjective("lgbm_hinge_ndcg_graded", "lightgbm", hinge="ndcg_graded"),
    TreeObjective("lgbm_hinge_pairwise", "lightgbm", hinge="pairwise"),
    TreeObjective("lgbm_hinge_dcg_zipf", "lightgbm", hinge="dcg_zipf"),
    TreeObjective("xgb_rank_ndcg", "xgboost", objective="rank:ndcg"),
    TreeObjective("xgb_rank_pairwise", "xgboost", objective="rank:pairwise"),
    TreeObjective("xgb_hinge_ndcg_graded", "xgboost", hinge="ndcg_graded"),
    TreeObjective("xgb_hinge_pairwise", "xgboost", hinge="pairwise"),
)


def hessian_variants(losses=("ndcg_graded", "pairwise", "ap")) -> tuple[TreeObjective, ...]:
    """The hessian study's rows: every loss with every hessian and scale."""
    return tuple(
        TreeObjective(
            f"{loss} h={hessian} s={scale:g}",
            "lightgbm",
            hinge=loss,
            hinge_options={"hessian": hessian, "scale": scale},
        )
        for loss in losses
        for hessian in HESSIANS
        for scale in SCALES
    )


# ---------------------------------------------------------------- data


@dataclass
class Split:
    """Documents sorted by qid, with their group sizes."""

    X: np.ndarray
    y: np.ndarray
    qid: np.ndarray

    @property
    def group(self) -> np.ndarray:
        return np.unique(self.qid, return_counts=True)[1]


def mslr_splits(data=None, data_home=None, quick=False) -> tuple[Split, Split, Split]:
    """(fit, valid, test): the MSLR sample's training queries split 33 / 10 by qid, as ``experiments.deep``."""
    if data is None:
        from rankopt.data.mslr import fetch_mslr_sample

        data = (fetch_mslr_sample("train", data_home=data_home), fetch_mslr_sample("test", data_home=data_home))

    def sorted_split(part, keep=None):
        X, y, qid = part.X.toarray(), np.asarray(part.y, dtype=np.int64), np.asarray(part.qid)
        order = np.argsort(qid, kind="stable")
        X, y, qid = X[order], y[order], qid[order]
        return X, y, qid

    X, y, qid = sorted_split(data[0])
    X_test, y_test, q_test = sorted_split(data[1])
    ids = np.unique(qid)
    if quick:
        ids = ids[:12]
        keep = np.isin(q_test, np.unique(q_test)[:8])
        X_test, y_test, q_test = X_test[keep], y_test[keep], q_test[keep]
    n_valid = max(2, ids.size * 10 // 43)
    is_fit, is_valid = np.isin(qid, ids[:-n_valid]), np.isin(qid, ids[-n_valid:])
    return (
        Split(X[is_fit], y[is_fit], qid[is_fit]),
        Split(X[is_valid], y[is_valid], qid[is_valid]),
        Split(X_test, y_test, q_test),
    )


# ---------------------------------------------------------------- fitting


def _fit_lightgbm(spec: TreeObjective, setting: dict, seed: int, fit: Split, valid: Split, max_rounds: int):
    """(predict(X), best validation NDCG@10, best round) of one LightGBM fit with early stopping."""
    import lightgbm

    from rankopt.lightgbm import eval_metric, hinge_objective

    objective = (
        spec.objective if spec.hinge is None else hinge_objective(spec.hinge, **spec.hinge_options).train_objective
    )
    params = {
        "objective": objective,
        "metric": "None",
        "learning_rate": setting["learning_rate"],
        "num_leaves": setting["num_leaves"],
        "bagging_fraction": 0.8,
        "bagging_freq": 1,
        "feature_fraction": 0.8,
        "seed": seed,
        "num_threads": 1,
        "verbose": -1,
    }
    train = lightgbm.Dataset(fit.X, fit.y, group=fit.group)
    held = lightgbm.Dataset(valid.X, valid.y, group=valid.group, reference=train)
    booster = lightgbm.train(
        params,
        train,
        num_boost_round=max_rounds,
        valid_sets=[held],
        feval=eval_metric("ndcg_graded").train_metric,
        callbacks=[lightgbm.early_stopping(PATIENCE, verbose=False)],
    )
    best = booster.best_iteration
    return (lambda X: booster.predict(X, num_iteration=best)), float(booster.best_score["valid_0"]["ndcg_graded"]), best


def _fit_xgboost(spec: TreeObjective, setting: dict, seed: int, fit: Split, valid: Split, max_rounds: int):
    import xgboost

    from rankopt.xgboost import eval_metric, hinge_objective

    params = {
        "tree_method": "hist",
        "grow_policy": "lossguide",
        "max_depth": 0,
        "max_leaves": setting["num_leaves"],
        "eta": setting["learning_rate"],
        "subsample": 0.8,
        "colsample_bytree": 0.8,
        "seed": seed,
        "nthread": 1,
        "disable_default_eval_metric": 1,
    }
    obj = None
    if spec.hinge is None:
        params["objective"] = spec.objective
    else:
        obj = hinge_objective(spec.hinge, **spec.hinge_options)
    train = xgboost.DMatrix(fit.X, fit.y, qid=fit.qid)
    held = xgboost.DMatrix(valid.X, valid.y, qid=valid.qid)
    history: dict = {}
    booster = xgboost.train(
        params,
        train,
        num_boost_round=max_rounds,
        obj=obj,
        custom_metric=eval_metric("ndcg_graded"),
        maximize=True,
        evals=[(held, "valid")],
        early_stopping_rounds=PATIENCE,
        evals_result=history,
        verbose_eval=False,
    )
    best = int(booster.best_iteration)
    scores = history["valid"]["ndcg_graded"]

    def predict(X):
        return booster.predict(xgboost.DMatrix(X), iteration_range=(0, best + 1))

    return predict, float(scores[best]), best + 1


_FITS = {"lightgbm": _fit_lightgbm, "xgboost": _fit_xgboost}


def _test_metrics(scores, split: Split) -> dict:
    from rankopt.metrics import mean_average_precision, ndcg_at_k

    return {
        "NDCG@10": ndcg_at_k(split.y, scores, split.qid, k=10, average=False),
        "MAP": mean_average_precision(split.y, scores, split.qid, relevant_at=1, average=False),
    }


def tune_trees(
    spec: TreeObjective, seeds, fit: Split, valid: Split, test: Split, *, grid=None, max_rounds=MAX_ROUNDS
) -> Row:
    """One objective through the protocol (module docstring): its chosen setting and test metrics."""
    grid = TREE_GRID if grid is None else grid
    start = time.process_time()
    outcomes = {}
    for values in product(*grid.values()):
        setting = dict(zip(grid, values, strict=True))
        runs = [_FITS[spec.library](spec, setting, seed, fit, valid, max_rounds) for seed in seeds]
        outcomes[values] = runs
    chosen = max(outcomes, key=lambda values: np.mean([run[1] for run in outcomes[values]]))
    runs = outcomes[chosen]
    rounds = [run[2] for run in runs]
    chosen_setting = ", ".join(f"{name}={value:g}" for name, value in zip(grid, chosen, strict=True))
    row = Row(
        spec.name,
        f"{chosen_setting}, rounds {min(rounds)}–{max(rounds)}",
        float(np.mean([run[1] for run in runs])),
        note=spec.describe(),
    )
    per_seed = [_test_metrics(run[0](test.X), test) for run in runs]
    for metric in ("NDCG@10", "MAP"):
        row.test[metric] = [float(np.nanmean(metrics[metric])) for metrics in per_seed]
        row.per_query[metric] = np.nanmean([metrics[metric] for metrics in per_seed], axis=0).tolist()
    row.seconds = time.process_time() - start
    return row


def _run(
    specs,
    reference,
    description,
    *,
    seeds=range(5),
    data=None,
    data_home=None,
    quick=False,
    output=None,
    json_output=None,
    progress=None,
) -> DeepResult:
    report = timed_reporter(logger, progress)
    fit, valid, test = mslr_splits(data, data_home, quick)
    grid, max_rounds = (QUICK_GRID, 20) if quick else (TREE_GRID, MAX_ROUNDS)
    seeds = tuple(seeds)[:2] if quick else tuple(seeds)
    result = DeepResult(
        task="learners",
        seeds=list(seeds),
        description=(
            f"{description}; MSLR-WEB30K sample: {fit.y.size} documents in {fit.group.size} training queries, "
            f"{valid.y.size} in {valid.group.size} validation queries, {test.y.size} in {test.group.size} test "
            f"queries; at most {max_rounds} trees, early stopping after {PATIENCE} rounds on validation NDCG@10"
        ),
        reference=reference,
        metrics=("NDCG@10", "MAP"),
        quick=bool(quick),
    )
    for spec in specs:
        row = tune_trees(spec, seeds, fit, valid, test, grid=grid, max_rounds=max_rounds)
        result.rows.append(row)
        report(
            f"{spec.name}: {row.setting}, validation {row.validation:.4f}, "
            f"test NDCG@10 {np.mean(row.test['NDCG@10']):.4f}"
        )
        write_result(result, output, json_output)  # after every row: a stopped run keeps what it measured
    return result


def run_learners_experiment(**options) -> DeepResult:
    """The learners table (module docstring).  ``options``: ``seeds`` (default 0–4), ``data`` ((train, test)
    SvmLightData, default the MSLR sample from ``data_home``), ``quick``, ``output``, ``json_output``,
    ``progress``."""
    return _run(LEARNERS, "lgbm_lambdarank", "Boosted trees, each objective tuned alike", **options)


def run_hessian_study(**options) -> DeepResult:
    """The hessian study (module docstring); ``options`` as :func:`run_learners_experiment`'s."""
    specs = hessian_variants(("ndcg_graded",) if options.get("quick") else ("ndcg_graded", "pairwise", "ap"))
    # The reference row: ndcg_graded with the constant hessian 1 at scale 1.
    return _run(
        specs, specs[SCALES.index(1.0)].name, "Hessian and scale of the hinge objectives on LightGBM", **options
    )


# ---------------------------------------------------------------- CLI


def add_cli_subcommand(subparsers, parents=()) -> argparse.ArgumentParser:
    """Add ``learners`` to an argparse subparsers object."""
    parser = subparsers.add_parser(
        "learners",
        parents=list(parents),
        help="boosted trees on rankopt's hinges against lambdarank, rank:ndcg and rank:pairwise (MSLR sample)",
        description="Trains LightGBM and XGBoost with each objective, tuned and early-stopped alike on "
        "validation queries, and prints test NDCG@10 and MAP over seeds with paired differences. Needs the "
        "lightgbm and xgboost extras.",
    )
    parser.add_argument("table", choices=("trees", "hessian"), help="the learners table or the hessian study")
    parser.add_argument("--seeds", type=int, default=5, help="number of seeds (default: 5)")
    parser.add_argument("--quick", action="store_true", help="a smoke test whose numbers mean nothing")
    parser.add_argument("--data-home", default=None, help="cache directory of the MSLR sample")
    parser.add_argument("--output", default=None, help="write the markdown table to this file")
    parser.add_argument("--json", default=None, help="write the raw results (JSON) to this file")
    parser.set_defaults(handler=cli_main)
    return parser


def cli_main(args) -> int:
    from rankopt.experiments.report import say

    if args.seeds < 1:
        raise SystemExit(f"python -m experiments.learners: expected --seeds >= 1, got {args.seeds} instead")
    run = run_learners_experiment if args.table == "trees" else run_hessian_study
    result = run(
        seeds=range(args.seeds),
        data_home=args.data_home,
        quick=args.quick,
        output=args.output,
        json_output=args.json,
        progress=say,
    )
    print(result.description)
    print(format_table(result))
    return 0


if __name__ == "__main__":
    from experiments import run_experiment

    sys.exit(run_experiment(add_cli_subcommand, "learners"))
