"""The ``rankopt`` command: train, predict, evaluate, list plugins, the demo and the papers' experiments.

::

    rankopt train DATA.svmlight MODEL_FILE [--loss ap] [--C 1.0] [--tol 1e-3]
                  [--max-iter 1000] [--inference auto]
    rankopt predict MODEL_FILE DATA.svmlight [--output FILE]
    rankopt evaluate MODEL_FILE DATA.svmlight
    rankopt plugins
    rankopt demo [--output-dir DIR] [--quick] [--C 100]
    rankopt cora [--quick] [--subjects ...] [--n-jobs 1] [--output FILE]
    rankopt latent [--quick] [--datasets ...] [--methods ...] [--output FILE]

Data files are SVM-light with one-based feature indices and labels in
{0, 1} or {−1, +1}.  Each file is **one query**: a file whose ``qid:``
column holds more than one value is refused by ``train`` and ``evaluate``
(pooling several queries into one ranking would optimise, and measure, a
ranking nobody asked for; split the file by qid instead).  ``predict``
scores each line independently and accepts any file.

Models are saved in rankopt's versioned ``.npz`` format
(:mod:`rankopt.data.model_file`).

``-v``/``--verbose`` logs the ``rankopt`` logger at INFO on stderr (every
cutting-plane iteration when training).  Bad files and bad parameters end
with one line ``rankopt: error: …`` on stderr and exit status 2.
"""
from __future__ import annotations

import argparse
import logging
import sys
import warnings

from rankopt._validation import check_binary_labels
from rankopt.exceptions import ConvergenceWarning
from rankopt.plugins import PluginContractError

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
        prog="rankopt",
        description="Learning to rank by directly optimising AP, NDCG or ROC area with structural SVMs.",
    )
    parser.add_argument("--version", action="version", version=f"rankopt {__version__}")
    # Accepted before or after the subcommand; SUPPRESS keeps a subcommand's
    # default from overwriting a -v given before it.
    parser.add_argument("-v", "--verbose", action="store_true", help="log progress at INFO level on stderr")
    verbose = argparse.ArgumentParser(add_help=False)
    verbose.add_argument("-v", "--verbose", action="store_true", default=argparse.SUPPRESS,
                         help="log progress at INFO level on stderr")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    train = sub.add_parser("train", parents=[verbose], help="fit a RankSVM on one query in an SVM-light file",
                           description="Fit a RankSVM on one query (an SVM-light file) and save it.")
    train.add_argument("data", metavar="DATA.svmlight", help="training samples with labels in {0,1} or {-1,+1}")
    train.add_argument("model", metavar="MODEL_FILE", help="where to write the model (.npz format)")
    train.add_argument("--loss", default="ap",
                       help='"ap", "ndcg", "auc", "zero_one" or a plugin\'s loss (default: ap)')
    train.add_argument("--C", type=float, default=1.0, help="slack weight (default: 1.0)")
    train.add_argument("--tol", type=float, default=1e-3, help="cutting-plane tolerance (default: 1e-3)")
    train.add_argument("--max-iter", type=int, default=1000, help="cutting-plane iterations (default: 1000)")
    train.add_argument("--inference", default="auto",
                       help='loss-augmented inference method, or "auto" (default: auto)')
    train.set_defaults(handler=_train)

    predict = sub.add_parser("predict", parents=[verbose], help="write one ranking score per sample",
                             description="Score every line of an SVM-light file, one score per line.")
    predict.add_argument("model", metavar="MODEL_FILE")
    predict.add_argument("data", metavar="DATA.svmlight")
    predict.add_argument("--output", "-o", metavar="FILE", help="write the scores here (default: stdout)")
    predict.set_defaults(handler=_predict)

    evaluate = sub.add_parser("evaluate", parents=[verbose], help="print AP, NDCG, ROC AUC and P@10",
                              description="Rank one query with a model and print AP, NDCG, ROC AUC, P@10.")
    evaluate.add_argument("model", metavar="MODEL_FILE")
    evaluate.add_argument("data", metavar="DATA.svmlight")
    evaluate.set_defaults(handler=_evaluate)

    plugins = sub.add_parser("plugins", parents=[verbose], help="list the registered plugins",
                             description="List every registered loss, inference method, model and feature map.")
    plugins.set_defaults(handler=_plugins)

    demo = sub.add_parser("demo", parents=[verbose], help="compare the four SVMs on scikit-learn's digits",
                          description="Binary, AP, NDCG and ROC-area SVMs on the digits, one query per class.")
    demo.add_argument("--output-dir", default=".", metavar="DIR",
                      help="where to write rankopt-demo-pr.png and rankopt-demo-results.json (default: .)")
    demo.add_argument("--quick", action="store_true", help="three classes instead of ten")
    demo.add_argument("--C", type=float, default=DEMO_C, help=f"slack weight of every method (default: {DEMO_C:g})")
    demo.set_defaults(handler=_demo)

    # The papers' experiments own their options; they import their data lazily.
    from rankopt.experiments.cora import add_cli_subcommand as add_cora
    from rankopt.experiments.latent import add_cli_subcommand as add_latent

    add_cora(sub, parents=[verbose])
    add_latent(sub, parents=[verbose])
    return parser


def main(argv=None) -> int:
    """Run the command with ``argv`` (default ``sys.argv[1:]``); return the exit status."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.verbose:
        logging.basicConfig(format="%(name)s: %(message)s")
        logging.getLogger("rankopt").setLevel(logging.INFO)
    try:
        args.handler(args)
    except OSError as exc:
        return _fail(_describe_os_error(exc))
    except (ValueError, PluginContractError) as exc:
        return _fail(str(exc))
    return EXIT_OK


def _fail(message: str) -> int:
    one_line = " ".join(message.split())
    print(f"rankopt: error: {one_line}", file=sys.stderr)
    return EXIT_ERROR


def _describe_os_error(exc: OSError) -> str:
    if exc.filename is not None and exc.strerror:
        return f"cannot open {exc.filename!r}: {exc.strerror}"
    return str(exc)


def _read_query(path, *, n_features=None):
    """An SVM-light file holding one query, with validated binary labels."""
    from rankopt.data.loaders import read_svmlight

    data = read_svmlight(path, n_features=n_features)
    if data.n_queries > 1:
        raise CommandError(
            f"expected one query in {data.path!r}, got {data.n_queries} distinct qid values instead; "
            "rankopt fits and evaluates one query per file: split the file by qid"
        )
    return data, check_binary_labels(data.y, name=f"the labels of {data.path!r}")


def _train(args) -> None:
    from rankopt.data.model_file import save_model
    from rankopt.models.rank_svm import RankSVM

    data, relevant = _read_query(args.data)
    model = RankSVM(loss=args.loss, C=args.C, tol=args.tol, max_iter=args.max_iter,
                    inference=args.inference, verbose=args.verbose)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", ConvergenceWarning)
        model.fit(data.X, relevant)
    for warning in caught:
        print(f"rankopt: warning: {warning.message}", file=sys.stderr)
    save_model(model, args.model)
    status = "converged" if model.converged_ else "NOT converged"
    print(
        f"trained RankSVM(loss={model.loss_.name!r}, C={model.C:g}) on {data.X.shape[0]} samples "
        f"({int(relevant.sum())} relevant) x {data.X.shape[1]} features: {model.n_iter_} iterations, "
        f"{status}; wrote {args.model}"
    )


def _load_model_and_data(args, *, one_query: bool):
    from rankopt.data.loaders import read_svmlight
    from rankopt.data.model_file import load_model

    # These commands score flat samples, which only a RankSVM ranks (a latent
    # model ranks bags): another model type is refused by name.
    model = load_model(args.model, model_type="RankSVM")
    if one_query:
        data, relevant = _read_query(args.data, n_features=model.n_features_in_)
    else:
        data, relevant = read_svmlight(args.data, n_features=model.n_features_in_), None
    return model, data, relevant


def _predict(args) -> None:
    model, data, _ = _load_model_and_data(args, one_query=False)
    text = "".join(f"{score:.12g}\n" for score in model.decision_function(data.X))
    if args.output is None:
        sys.stdout.write(text)
    else:
        with open(args.output, "w", encoding="utf-8") as handle:
            handle.write(text)
        logger.info("wrote %d scores to %s", data.X.shape[0], args.output)


def _evaluate(args) -> None:
    from rankopt.metrics import average_precision, ndcg, precision_at_k, roc_auc

    model, data, relevant = _load_model_and_data(args, one_query=True)
    scores = model.decision_function(data.X)
    print(f"{'samples':<9}{data.X.shape[0]} ({int(relevant.sum())} relevant)")
    for label, metric in (("AP", average_precision), ("NDCG", ndcg), ("ROC AUC", roc_auc),
                          ("P@10", precision_at_k)):
        print(f"{label:<9}{metric(relevant, scores):.4f}")


def _plugins(args) -> None:
    from rankopt.plugins import list_plugins

    rows = [tuple(info) for info in list_plugins()]
    header = ("name", "kind", "provider")
    widths = [max(len(str(row[i])) for row in [header, *rows]) for i in range(3)]
    for row in [header, *rows]:
        print("  ".join(f"{cell:<{w}}" for cell, w in zip(row, widths)).rstrip())


def _demo(args) -> None:
    try:
        import matplotlib  # noqa: F401
        import tqdm  # noqa: F401
    except ModuleNotFoundError as exc:
        raise CommandError(f"the demo needs matplotlib and tqdm ({exc}): pip install 'rankopt[demo]'") from None
    from rankopt.experiments.demo import main as run

    run(args.output_dir, quick=args.quick, C=args.C, progress=True)
