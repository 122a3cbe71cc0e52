"""The ``rankopt`` command: train, predict, evaluate, list plugins and the demo.

::

    rankopt train DATA.svmlight MODEL_FILE [--loss ap] [--C 1.0] [--tol 1e-3]
                  [--max-iter 1000] [--inference auto] [--relevant-at 1] [--zero-based auto]
    rankopt predict MODEL_FILE DATA.svmlight [--output FILE] [--zero-based auto]
    rankopt evaluate MODEL_FILE DATA.svmlight [--per-query FILE] [--relevant-at R] [--zero-based auto]
    rankopt plugins
    rankopt demo [--output-dir DIR] [--quick] [--C 100]

The papers' experiments are outside the package, one command each from the repository root
(``python -m experiments.cora``, ``.latent``, ``.letor``, ``.deep``; see ``experiments/__init__.py``).

Data files are SVM-light or LETOR: feature indices one- or zero-based
(``--zero-based auto`` guesses as scikit-learn does: zero-based exactly when
index 0 occurs), labels in {0, 1} or {−1, +1}, or relevance grades (integers
≥ 0).  A file with a ``qid:`` column holds many queries: ``train`` fits one
model over them (``RankSVM.fit(X, y, qid=...)``, a document relevant for a
binary loss when its grade reaches ``--relevant-at``) and ``evaluate``
prints MAP, NDCG@1/5/10 and P@10 averaged over queries (``--per-query FILE``
writes each query's).  A file without ``qid:`` takes its queries from
LightGBM's sidecar ``FILE.query`` (one group size per line, rows in file
order) when there is one, and says so on stderr; without either it is one
query of binary labels, and graded labels are refused.  ``predict`` scores
each line independently and accepts any file with features.

Models are saved in rankopt's versioned ``.npz`` format
(:mod:`rankopt.data.model_file`).

``-v``/``--verbose`` logs the ``rankopt`` logger at INFO on stderr (every
cutting-plane iteration when training).  Bad files and bad parameters end
with one line ``rankopt: error: …`` on stderr and exit status 2.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import warnings

# Only the standard library at the top: ``rankopt --version``, ``--help`` and
# ``plugins`` must start in well under a second, and scikit-learn, SciPy, the
# estimators and the experiments' data sets are imported by the commands that
# use them (benchmarks/bench_cli_startup.py measures it).

__all__ = ["main", "build_parser"]

logger = logging.getLogger(__name__)

EXIT_OK = 0
EXIT_ERROR = 2


class CommandError(ValueError):
    """A user error the command reports in one line."""


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of the ``rankopt`` command."""
    from rankopt import __version__
    from rankopt.experiments.demo import DEMO_C

    parser = argparse.ArgumentParser(
        prog="rankopt", description="Learning to rank by directly optimising AP, NDCG or ROC area with structural SVMs."
    )
    parser.add_argument("--version", action="version", version=f"rankopt {__version__}")
    # Accepted before or after the subcommand; SUPPRESS keeps a subcommand's
    # default from overwriting a -v given before it.
    parser.add_argument("-v", "--verbose", action="store_true", help="log progress at INFO level on stderr")
    verbose = verbose_parent()
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    _add_train(sub, verbose)

    _add_predict_and_evaluate(sub, verbose)

    plugins = sub.add_parser(
        "plugins",
        parents=[verbose],
        help="list the registered plugins",
        description="List every registered loss, inference method, model and feature map.",
    )
    plugins.set_defaults(handler=_plugins)

    demo = sub.add_parser(
        "demo",
        parents=[verbose],
        help="compare the four SVMs on scikit-learn's digits",
        description="Binary, AP, NDCG and ROC-area SVMs on the digits, one query per class.",
    )
    demo.add_argument(
        "--output-dir",
        default=".",
        metavar="DIR",
        help="where to write rankopt-demo-pr.png and rankopt-demo-results.json (default: .)",
    )
    demo.add_argument("--quick", action="store_true", help="three classes instead of ten")
    demo.add_argument("--C", type=float, default=DEMO_C, help=f"slack weight of every method (default: {DEMO_C:g})")
    demo.set_defaults(handler=_demo)
    return parser


def _add_train(sub, verbose) -> None:
    """The ``train`` subcommand."""
    train = sub.add_parser(
        "train",
        parents=[verbose],
        formatter_class=_TrainHelpFormatter,
        help="fit a RankSVM on an SVM-light/LETOR file",
        description="Fit a RankSVM on an SVM-light/LETOR file (one query, or every qid: in it) and save it.",
    )
    train.add_argument(
        "data",
        metavar="DATA.svmlight",
        help="training samples: labels in {0,1} or {-1,+1}, or grades >= 0 with queries from qid: or "
        "LightGBM's group sizes in DATA.svmlight.query",
    )
    train.add_argument("model", metavar="MODEL_FILE", help="where to write the model (.npz format)")
    train.add_argument("--loss", default="ap", help=LOSS_HELP)
    train.add_argument("--C", type=float, default=1.0, help="slack weight (default: 1.0)")
    # SVM^rank's -c: refused with a hint (its C is scaled otherwise), never read as --C silently.
    train.add_argument(
        "-c", dest="svm_rank_c", metavar="C", help="SVM^rank's slack weight: refused, use --C (scaled otherwise)"
    )
    train.add_argument("--tol", type=float, default=1e-3, help="cutting-plane tolerance (default: 1e-3)")
    train.add_argument("--max-iter", type=int, default=1000, help="cutting-plane iterations (default: 1000)")
    train.add_argument("--inference", default="auto", help='loss-augmented inference method, or "auto" (default: auto)')
    train.add_argument(
        "--relevant-at",
        type=_grade,
        default=1,
        metavar="GRADE",
        help="grades from this one on count as relevant for a binary loss (default: 1, LETOR's convention for MAP)",
    )
    train.add_argument(
        "--scale",
        choices=("none", "max-abs"),
        default="none",
        help="max-abs: train on every feature divided by its largest absolute value in DATA "
        "(sparsity kept), then fold the scales into the saved weights, which score raw "
        "features; much faster on raw features of very different ranges (default: none)",
    )
    _add_workers(train, "fit")
    _add_file_options(train)
    train.set_defaults(handler=_train)

    store = sub.add_parser(
        "store",
        parents=[verbose],
        help="write an SVM-light/LETOR file with qid: into a query store for out-of-core training",
        description="Write an SVM-light/LETOR file with qid: (or LightGBM's DATA.query beside it; gzip or bzip2 "
        "too) into a zarr query store, every query whole in one partition, in bounded memory; `rankopt train "
        "STORE MODEL`, `evaluate` and `predict` then read it with Dask. The file is checked whole before "
        "anything is written; progress goes to stderr (a bar on a terminal, else a line per 5%%).",
    )
    store.add_argument("data", metavar="DATA.svmlight", help="the file to read (qid: on every line)")
    store.add_argument(
        "store",
        metavar="STORE",
        help="the directory to write, renamed into place only when complete (refused if it exists, unless "
        "--overwrite and it is a query store)",
    )
    store.add_argument(
        "--partition-rows",
        type=int,
        default=1 << 20,
        metavar="N",
        help="rows a partition holds at least before it closes at the next query (default: 1048576)",
    )
    store.add_argument("--dtype", choices=("float32", "float64"), default="float32", help="features' type")
    store.add_argument(
        "--overwrite", action="store_true", help="replace STORE when it is a query store (never anything else)"
    )
    _add_file_options(store)
    store.set_defaults(handler=_store)


def _add_predict_and_evaluate(sub, verbose) -> None:
    """The ``predict`` and ``evaluate`` subcommands."""
    predict = sub.add_parser(
        "predict",
        parents=[verbose],
        help="write one ranking score per sample",
        description="Score every line of an SVM-light file, one score per line.",
    )
    predict.add_argument("model", metavar="MODEL_FILE")
    predict.add_argument("data", metavar="DATA", help="an SVM-light/LETOR file, or a query store (`rankopt store`)")
    predict.add_argument("--output", "-o", metavar="FILE", help="write the scores here (default: stdout)")
    _add_workers(predict)
    _add_file_options(predict)
    predict.set_defaults(handler=_predict)

    evaluate = sub.add_parser(
        "evaluate",
        parents=[verbose],
        help="print MAP, NDCG@k and P@10 (AP, NDCG, ROC AUC, P@10 for one query)",
        description="Rank a file's queries with a model and print MAP, NDCG@1/5/10 and P@10 averaged over "
        "queries; a file without qid: is one query, scored by AP, NDCG, ROC AUC and P@10. NDCG@k takes "
        "exponential gains 2^g - 1 by default, as LETOR, LightGBM and XGBoost do; --gains linear takes g, as "
        "scikit-learn's ndcg_score does.",
    )
    evaluate.add_argument("model", metavar="MODEL_FILE")
    evaluate.add_argument("data", metavar="DATA", help="an SVM-light/LETOR file, or a query store (`rankopt store`)")
    _add_workers(evaluate)
    evaluate.add_argument(
        "--per-query", metavar="FILE", help="also write each query's metrics here (tab-separated, one line per qid)"
    )
    evaluate.add_argument(
        "--relevant-at",
        type=_grade,
        default=None,
        metavar="GRADE",
        help="grades from this one on count as relevant for MAP and P@10 (default: the model's)",
    )
    evaluate.add_argument(
        "--gains",
        choices=("exponential", "linear"),
        default="exponential",
        help="the gain of a grade g in NDCG@k: 2^g - 1 (default) or g (scikit-learn's ndcg_score)",
    )
    _add_file_options(evaluate)
    evaluate.set_defaults(handler=_evaluate)


def _add_workers(parser: argparse.ArgumentParser, what: str = "compute") -> None:
    parser.add_argument(
        "--workers",
        type=int,
        default=0,
        metavar="N",
        help=f"for a query store (DATA a directory written by `rankopt store`): {what} on a local Dask cluster of "
        "N worker processes (default: 0, Dask's threads in this process)",
    )


def verbose_parent() -> argparse.ArgumentParser:
    """The ``-v`` option every subcommand takes (also after its name); SUPPRESS keeps a subcommand's default
    from overwriting a -v given before it.  The experiments outside the package share it."""
    verbose = argparse.ArgumentParser(add_help=False)
    verbose.add_argument(
        "-v", "--verbose", action="store_true", default=argparse.SUPPRESS, help="log progress at INFO level on stderr"
    )
    return verbose


#: The --loss help; "{losses}" is filled in with the registered losses when the help is printed.
LOSS_HELP = "the loss to train on, one of {losses} (default: ap)"


class _TrainHelpFormatter(argparse.HelpFormatter):
    """Lists the registered losses, plugins' included, in ``train --help`` only when the help is shown."""

    def _get_help_string(self, action):
        if action.help == LOSS_HELP:
            return LOSS_HELP.format(losses=", ".join(_loss_names()))
        return super()._get_help_string(action)


def _loss_names() -> list[str]:
    """Every registered loss, graded ones marked: what ``--loss`` accepts."""
    from rankopt.inference.structure_table import reads_grades
    from rankopt.plugins import PluginKind, default_registry

    registry = default_registry()
    names = []
    for info in registry.list(PluginKind.LOSS):
        loss = registry.get_loss(info.name)
        names.append(f'"{info.name}" (trains on the grades)' if reads_grades(loss) else f'"{info.name}"')
    return names


def _grade(text: str) -> int | float:
    """A relevance threshold as given: an int when it is a whole number (``2``, not ``2.0``)."""
    value = float(text)
    return int(value) if value.is_integer() else value


def _add_file_options(parser: argparse.ArgumentParser) -> None:
    """The options of every command that reads an SVM-light file."""
    from rankopt.data.loaders import DEFAULT_MAX_FEATURES

    parser.add_argument(
        "--zero-based",
        choices=("auto", "yes", "no"),
        default="auto",
        help="whether feature indices start at 0; auto: when index 0 occurs in the file (default: auto)",
    )
    parser.add_argument(
        "--max-features",
        type=int,
        default=DEFAULT_MAX_FEATURES,
        metavar="N",
        help=f"refuse a file whose feature indices go beyond N (default: {DEFAULT_MAX_FEATURES}, 2^20)",
    )
    parser.add_argument(
        "--threads",
        type=int,
        default=None,
        metavar="N",
        help="threads parsing the file (default: every core this process may use)",
    )


_ZERO_BASED = {"auto": "auto", "yes": True, "no": False}


def main(argv=None) -> int:
    """Run the command with ``argv`` (default ``sys.argv[1:]``); return the exit status."""
    return run_handler(build_parser().parse_args(argv))


class _StderrHandler(logging.StreamHandler):
    """``-v``'s handler: writes to the ``sys.stderr`` of the moment (a command run twice in one process, as the
    tests do, must not write to a stream replaced since)."""

    def emit(self, record):
        self.stream = sys.stderr
        super().emit(record)


def run_handler(args) -> int:
    """Run a parsed command's handler with ``-v``'s logging; a user's error becomes one line and exit status 1."""
    if vars(args).get("verbose", False):  # the experiments' parsers leave it unset without -v
        # rankopt's own logger only: a handler on the root logger would also print the INFO lines of every
        # library beneath (a Dask cluster's scheduler and nannies), which Dask's own logging config governs.
        ours = logging.getLogger("rankopt")
        if not any(isinstance(h, _StderrHandler) for h in ours.handlers):
            handler = _StderrHandler()
            handler.setFormatter(logging.Formatter("%(name)s: %(message)s"))
            ours.addHandler(handler)
        ours.setLevel(logging.INFO)
    try:
        args.handler(args)
    except ImportError as exc:
        from rankopt._optional import MissingDependencyError

        if not isinstance(exc, MissingDependencyError):
            raise
        return _fail(str(exc))
    except OSError as exc:
        return _fail(_describe_os_error(exc))
    except ValueError as exc:
        return _fail(str(exc))
    except TypeError as exc:
        from rankopt.plugins import PluginContractError

        if not isinstance(exc, PluginContractError):
            raise
        return _fail(str(exc))
    return EXIT_OK


def _fail(message: str) -> int:
    one_line = " ".join(message.split())
    print(f"rankopt: error: {one_line}", file=sys.stderr)
    return EXIT_ERROR


def _refuse_overwrite(output, *inputs) -> None:
    """Refuse to write ``output`` over one of the command's ``inputs`` (same path, link or not)."""
    if output is None:
        return
    for path in inputs:
        same = os.path.realpath(output) == os.path.realpath(path)
        if not same and os.path.exists(output) and os.path.exists(path):
            same = os.path.samefile(output, path)
        if same:
            raise CommandError(f"expected an output path other than the input {path!r}, got {output!r} instead")


def _warn_if_narrow(data, model) -> None:
    """A file that spans fewer features than the model is read with the rest as 0: say so."""
    if data.file_width < model.n_features_in_:
        print(
            f"rankopt: warning: {data.path!r} spans {data.file_width} features, the model {model.n_features_in_}: "
            f"features {data.file_width + 1}-{model.n_features_in_} are read as 0 (right when they are 0 on every "
            "line; if the file comes from another feature set, its scores mean nothing)",
            file=sys.stderr,
        )


def _describe_os_error(exc: OSError) -> str:
    if exc.filename is not None and exc.strerror:
        return f"cannot open {exc.filename!r}: {exc.strerror}"
    return str(exc)


def _read_data(path, args, *, n_features=None):
    """An SVM-light/LETOR file, and its binary labels when it is one query of binary labels (else None).

    A file without ``qid:`` whose labels are {0, 1} or {-1, +1} is one query
    as it always was (and ``relevant_at`` must be 1); any other file is read
    as queries of graded labels.
    """
    import numpy as np

    from rankopt._validation import check_binary_labels, check_grades
    from rankopt.data.loaders import read_svmlight

    data = read_svmlight(
        path,
        n_features=n_features,
        zero_based=_ZERO_BASED[args.zero_based],
        max_features=max(args.max_features, n_features or 0),
        n_threads=args.threads,
        progress=_worth_reporting(path),
    )
    if data.zero_based:
        logger.info("%s: feature index 0 occurs, read as zero-based", data.path)
    data = _with_sidecar_queries(data)
    values = set(np.unique(data.y).tolist())
    if data.qid is None:
        if (values <= {0, 1} or values <= {-1, 1}) and args.relevant_at in (1, None):
            return data, check_binary_labels(data.y, name=f"the labels of {data.path!r}")
        check_grades(data.y, name=f"the labels of {data.path!r}")  # a bad label is named first
        labels = "graded labels" if not (values <= {0, 1} or values <= {-1, 1}) else "--relevant-at other than 1"
        raise CommandError(
            f"expected queries for {data.path!r}, whose {labels} are scored per query, got neither qid: on "
            f"its lines nor LightGBM's group-size file {data.path + '.query'!r}; add qid: to each line "
            "or write that file (one query size per line)"
        )
    return data, None


#: Files from this size on report their reading on stderr (a few seconds and more); smaller ones read quietly.
PROGRESS_BYTES = 256 << 20


def _worth_reporting(path) -> bool:
    try:
        return os.path.getsize(path) >= PROGRESS_BYTES
    except OSError:
        return False


def _with_sidecar_queries(data):
    """Say where the queries came from: the reader took them from LightGBM's sidecar, or ignored it."""
    from rankopt.data.loaders import sidecar_candidates

    if data.query_file is not None:
        sizes = len(set(data.qid.tolist())) if data.qid is not None else 0
        print(f"rankopt: {sizes} queries from LightGBM's group sizes in {data.query_file!r}", file=sys.stderr)
    elif data.qid is not None:
        sidecar = next((c for c in sidecar_candidates(data.path) if os.path.isfile(c)), None)
        if sidecar is not None:
            print(f"rankopt: {data.path!r} has qid: on its lines; {sidecar!r} is ignored", file=sys.stderr)
    return data


def _query_ids(data):
    import numpy as np

    return data.qid if data.qid is not None else np.zeros(data.y.size, dtype=np.int64)


def _max_abs_scaled(X):
    """X with every column divided by its largest absolute value (1 for a column of zeros), and those values."""
    import scipy.sparse as sp

    from rankopt.data.backends import column_max_abs

    scale = column_max_abs(X)
    scale[scale == 0] = 1.0
    logger.info("features scaled by their largest absolute values, from %.3g to %.3g", scale.min(), scale.max())
    if sp.issparse(X):
        return (sp.csr_matrix(X) @ sp.diags(1.0 / scale)).tocsr(), scale
    return X / scale, scale


def _train(args) -> None:
    if args.svm_rank_c is not None:  # refused before anything heavy is imported: a typo answers at once
        raise CommandError(
            f"expected --C for the slack weight, got SVM^rank's -c {args.svm_rank_c} instead: rankopt scales C "
            "otherwise (docs/maths.md), so retune it, e.g. rankopt train --C 10 ..."
        )
    from rankopt.data.model_file import save_model
    from rankopt.exceptions import ConvergenceWarning

    _refuse_overwrite(args.model, args.data)
    if _is_store(args):
        _train_on_store(args)
        return
    data, relevant = _read_data(args.data, args)
    model = _ranker(args)
    X, scale = data.X, None
    if args.scale == "max-abs":
        X, scale = _max_abs_scaled(X)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", ConvergenceWarning)
        if relevant is not None:
            model.fit(X, relevant)
        else:
            model.fit(X, data.y, qid=_query_ids(data))
    for warning in caught:
        print(f"rankopt: warning: {warning.message}", file=sys.stderr)
    if scale is not None:
        # w·(x / scale) = (w / scale)·x: the saved model scores raw features.
        model.coef_ = model.coef_ / scale
    save_model(model, args.model)
    status = "converged" if model.converged_ else "NOT converged"
    if relevant is not None:
        samples = f"{data.X.shape[0]} samples ({int(relevant.sum())} relevant)"
    else:
        samples = (
            f"{data.X.shape[0]} samples in {model.n_queries_} queries ({model.n_queries_used_} with documents to order)"
        )
    print(
        f"trained RankSVM(loss={model.loss_.name!r}, C={model.C:g}) on {samples} x {data.X.shape[1]} features: "
        f"{model.n_iter_} iterations, {status}; wrote {args.model}"
    )


def _ranker(args):
    """The RankSVM ``rankopt train``'s options describe."""
    from rankopt.estimators.rank_svm import RankSVM

    return RankSVM(
        loss=args.loss,
        C=args.C,
        tol=args.tol,
        max_iter=args.max_iter,
        inference=args.inference,
        verbose=args.verbose,
        relevant_at=args.relevant_at,
    )


def _train_on_store(args) -> None:
    """``rankopt train STORE MODEL``: the fit on a query store's Dask arrays, its inference on the chunks."""
    from rankopt.data.model_file import save_model
    from rankopt.data.query_store import open_query_store
    from rankopt.exceptions import ConvergenceWarning

    if args.scale != "none":
        raise CommandError("expected --scale none with a query store (it would take a pass over the store)")
    X, y, qid = open_query_store(args.data)
    model = _ranker(args)
    with _cluster(args), warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", ConvergenceWarning)
        model.fit(X, y, qid=qid)
    for warning in caught:
        if issubclass(warning.category, ConvergenceWarning):
            print(f"rankopt: warning: {warning.message}", file=sys.stderr)
    save_model(model, args.model)
    status = "converged" if model.converged_ else "NOT converged"
    print(
        f"trained RankSVM(loss={model.loss_.name!r}, C={model.C:g}) on the query store {args.data} "
        f"({X.shape[0]} rows in {model.n_queries_} queries, {model.n_queries_used_} with documents to order, "
        f"{X.numblocks[0]} partitions) x {X.shape[1]} features: {model.n_iter_} iterations, {status}; wrote "
        f"{args.model}"
    )


def _is_store(args) -> bool:
    """Whether DATA is a query store (checking --workers); a directory that is not one is refused."""
    from rankopt.data.query_store import is_query_store

    if args.workers < 0:
        raise CommandError(f"expected --workers >= 0, got {args.workers} instead")
    if is_query_store(args.data):
        return True
    if os.path.isdir(args.data):
        raise CommandError(
            f"expected an SVM-light/LETOR file or a query store written by `rankopt store`, got the directory "
            f"{args.data!r}, which is neither (no partition table: an incomplete or foreign directory)"
        )
    if args.workers:
        raise CommandError(f"expected --workers with a query store, got the file {args.data!r}: run `rankopt store`")
    return False


def _cluster(args):
    """A local Dask cluster of --workers processes (its own logs at WARNING and above), or nothing."""
    import contextlib

    from rankopt.data.dask_backend import dask_client

    if not args.workers:
        return contextlib.nullcontext()
    return dask_client(
        n_workers=args.workers, threads_per_worker=1, dashboard_address=":0", silence_logs=logging.WARNING
    )


def _store(args) -> None:
    from rankopt.data.query_store import write_query_store

    if os.path.lexists(args.store) and not args.overwrite:
        raise CommandError(
            f"expected a new directory for the store, got {args.store!r}, which exists (--overwrite replaces a "
            "query store)"
        )
    info = write_query_store(
        args.data,
        args.store,
        zero_based=_ZERO_BASED[args.zero_based],
        dtype=args.dtype,
        partition_rows=args.partition_rows,
        overwrite=args.overwrite,
        progress=True,
        max_features=args.max_features,
        n_threads=args.threads,
    )
    print(
        f"wrote {info.n_rows} rows in {info.n_queries} queries x {info.n_features} features to {info.path} "
        f"({len(info.partitions) - 1} partitions)"
    )


def _load_model_and_data(args, *, labels: bool):
    from rankopt.data.loaders import read_svmlight
    from rankopt.data.model_file import load_model

    # These commands score flat samples, which only a RankSVM ranks (a latent
    # model ranks bags): another model type is refused by name.
    model = load_model(args.model, model_type="RankSVM")
    if labels:
        data, relevant = _read_data(args.data, args, n_features=model.n_features_in_)
    else:
        data = read_svmlight(
            args.data,
            n_features=model.n_features_in_,
            zero_based=_ZERO_BASED[args.zero_based],
            max_features=max(args.max_features, model.n_features_in_),
            n_threads=args.threads,
            progress=_worth_reporting(args.data),
        )
        data = _with_sidecar_queries(data)  # checked and reported; each line is scored on its own
        relevant = None
    _warn_if_narrow(data, model)
    return model, data, relevant


def _predict(args) -> None:
    from rankopt.data.store_scoring import format_scores

    _refuse_overwrite(args.output, args.data, args.model)
    if _is_store(args):
        _predict_store(args)
        return
    model, data, _ = _load_model_and_data(args, labels=False)
    text = format_scores(model.decision_function(data.X))
    if args.output is None:
        sys.stdout.write(text)
    else:
        with open(args.output, "w", encoding="utf-8") as handle:
            handle.write(text)
        logger.info("wrote %d scores to %s", data.X.shape[0], args.output)


def _predict_store(args) -> None:
    from rankopt.data.model_file import load_model
    from rankopt.data.store_scoring import write_store_scores

    model = load_model(args.model, model_type="RankSVM")
    with _cluster(args):
        rows = write_store_scores(args.data, model.coef_, args.output)
    logger.info("wrote %d scores to %s", rows, args.output or "stdout")


def _evaluate(args) -> None:
    import numpy as np

    from rankopt.metrics import average_precision, ndcg, precision_at_k, roc_auc

    _refuse_overwrite(args.per_query, args.data, args.model)
    if _is_store(args):
        _evaluate_store(args)
        return
    from rankopt.data.store_scoring import query_metrics

    model, data, relevant = _load_model_and_data(args, labels=True)
    scores = model.decision_function(data.X)
    relevant_at = model.relevant_at if args.relevant_at is None else args.relevant_at
    grades = data.y if relevant is None else relevant.astype(np.int64)
    ids, sizes, per_query = query_metrics(grades, scores, _query_ids(data), relevant_at, args.gains)
    if relevant is not None:  # one query of binary labels
        print(f"{'samples':<9}{data.X.shape[0]} ({int(relevant.sum())} relevant)")
        for label, metric in (
            ("AP", average_precision),
            ("NDCG", ndcg),
            ("ROC AUC", roc_auc),
            ("P@10", precision_at_k),
        ):
            print(f"{label:<9}{metric(relevant, scores):.4f}")
    else:
        _print_query_metrics(data.path, per_query, data.X.shape[0], relevant_at, args.gains)
    if args.per_query is not None:
        _write_per_query(args.per_query, ids, sizes, per_query)


def _evaluate_store(args) -> None:
    from rankopt.data.model_file import load_model
    from rankopt.data.store_scoring import store_query_metrics

    model = load_model(args.model, model_type="RankSVM")
    relevant_at = model.relevant_at if args.relevant_at is None else args.relevant_at
    with _cluster(args):
        ids, sizes, per_query = store_query_metrics(args.data, model.coef_, relevant_at=relevant_at, gains=args.gains)
    _print_query_metrics(args.data, per_query, int(sizes.sum()), relevant_at, args.gains)
    if args.per_query is not None:
        _write_per_query(args.per_query, ids, sizes, per_query)


def _print_query_metrics(path, per_query: dict, n_documents: int, relevant_at, gains: str) -> None:
    """The summary ``rankopt evaluate`` prints: each metric averaged over the queries with a relevant document."""
    import numpy as np

    defined = ~np.isnan(per_query["AP"])
    if not defined.any():
        raise CommandError(
            f"expected some query of {path!r} to hold a relevant document (grade >= {relevant_at:g}), got none instead"
        )
    print(
        f"{'queries':<9}{defined.size} ({int(defined.sum())} with a relevant document, averaged over), "
        f"{n_documents} documents"
    )
    print(f"{'gains':<9}{'2^g - 1' if gains == 'exponential' else 'g'} in NDCG@k (--gains)")
    for label, values in per_query.items():
        name = "MAP" if label == "AP" else label
        print(f"{name:<9}{np.nanmean(values[defined]):.4f}")


def _write_per_query(path: str, ids, sizes, per_query: dict) -> None:
    with open(path, "w", encoding="utf-8") as handle:
        handle.write("\t".join(["qid", "documents", *per_query]) + "\n")
        for row, (q, size) in enumerate(zip(ids, sizes, strict=True)):
            cells = [f"{values[row]:.6f}" for values in per_query.values()]
            handle.write("\t".join([str(q), str(size), *cells]) + "\n")
    logger.info("wrote %d queries' metrics to %s", len(ids), path)


def _plugins(args) -> None:
    from rankopt.inference.structure_table import registered_kernels
    from rankopt.plugins import list_plugins

    _print_table(("name", "kind", "provider"), [tuple(info) for info in list_plugins()])
    print()
    _print_table(("structure", "device", "kernel"), registered_kernels())


def _print_table(header: tuple, rows: list) -> None:
    widths = [max(len(str(row[i])) for row in [header, *rows]) for i in range(len(header))]
    for row in [header, *rows]:
        print("  ".join(f"{cell:<{w}}" for cell, w in zip(row, widths, strict=True)).rstrip())


def _demo(args) -> None:
    from rankopt._optional import require

    # Checked before the fits, not when the plot is drawn minutes later.
    require("matplotlib", purpose="the demo's precision-recall plot")
    require("tqdm", purpose="the demo's progress bar")
    from rankopt.experiments.demo import main as run

    run(args.output_dir, quick=args.quick, C=args.C, progress=True)
