"""The demo: four structural SVMs ranking scikit-learn's digits, one query per class.

Each of the ten digit classes is a query: its images are relevant, all the
others are not.  The 1,797 images are split once into a stratified half
for training and a half for testing (seed 0), with the pixels scaled to
[0, 1] (divided by 16, a constant of the data set).  Per class, four linear
rankers are fitted on the training half with the 1-slack cutting-plane
algorithm:

============  ============  ==========================================
method        loss          optimises
============  ============  ==========================================
binary SVM    ``zero_one``  class-weighted 0-1 loss (the baseline)
AP-SVM        ``ap``        1 − average precision
NDCG-SVM      ``ndcg``      1 − NDCG
ROC-SVM       ``auc``       1 − ROC area
============  ============  ==========================================

and the test half is ranked by each to measure test AP and NDCG.

All methods share one slack weight, ``C = 100`` (:data:`DEMO_C`), chosen
on the training half alone: on a stratified 70/30 split of it (seed 1),
C = 1, 10, 100, 1000, 10000 gave a mean validation AP over the ten classes
and four methods of 0.961, 0.972, 0.972, 0.971, 0.969; C = 100 was the
highest (0.9720 against 0.9718 for C = 10).  The test half played no part.
"""

from __future__ import annotations

import logging
import os
import sys
import time
from dataclasses import dataclass, field

import numpy as np

logger = logging.getLogger(__name__)

__all__ = ["DEMO_C", "METHODS", "QUICK_CLASSES", "DemoResult", "main", "run_demo"]

#: (display name, loss name) of the four methods, in table order.
METHODS = (("binary SVM", "zero_one"), ("AP-SVM", "ap"), ("NDCG-SVM", "ndcg"), ("ROC-SVM", "auc"))
#: The slack weight every method uses; see the module docstring for its choice.
DEMO_C = 100.0
DIGIT_CLASSES = tuple(range(10))
#: The classes ``--quick`` runs: an easy one (0) and the two hardest (1, 8).
QUICK_CLASSES = (0, 1, 8)
TEST_SIZE = 0.5
SEED = 0
PLOT_FILE = "rankopt-demo-pr.png"
JSON_FILE = "rankopt-demo-results.json"
#: The columns of every row of :attr:`DemoResult.rows`.
ROW_COLUMNS = ("class", "method", "loss", "test_ap", "test_ndcg", "fit_time_s", "n_iter", "converged")


@dataclass
class DemoResult:
    """The demo's results.

    Attributes
    ----------
    rows : list of dict
        One row per (class, method), keys :data:`ROW_COLUMNS`.
    classes : tuple of int
    methods : tuple of str
        Method display names, in table order.
    C, test_size : float
    seed, n_train, n_test : int
    y_test : ndarray of shape (n_test,)
        The digit class of each test image.
    test_scores : dict
        ``(class, method) -> ndarray`` of test ranking scores, for plots.
    """

    rows: list
    classes: tuple
    methods: tuple
    C: float
    test_size: float
    seed: int
    n_train: int
    n_test: int
    y_test: np.ndarray = field(repr=False)
    test_scores: dict = field(repr=False)

    def mean_rows(self) -> dict:
        """Per method, the mean over classes of test AP and test NDCG."""
        return {
            method: {
                "test_ap": float(np.mean([r["test_ap"] for r in self.rows if r["method"] == method])),
                "test_ndcg": float(np.mean([r["test_ndcg"] for r in self.rows if r["method"] == method])),
            }
            for method in self.methods
        }

    def method_summary(self) -> dict:
        """Per method: total fit time, mean and max iterations, fits that converged."""
        summary = {}
        for method in self.methods:
            rows = [r for r in self.rows if r["method"] == method]
            summary[method] = {
                "loss": rows[0]["loss"],
                "fit_time_s": float(sum(r["fit_time_s"] for r in rows)),
                "mean_n_iter": float(np.mean([r["n_iter"] for r in rows])),
                "max_n_iter": int(max(r["n_iter"] for r in rows)),
                "n_converged": int(sum(r["converged"] for r in rows)),
                "n_fits": len(rows),
            }
        return summary

    def to_dict(self) -> dict:
        """Everything but the scores, JSON-serialisable."""
        from rankopt import __version__

        return {
            "rankopt_version": __version__,
            "dataset": "scikit-learn digits, one query per class (class c relevant, the rest not)",
            "features": "pixels / 16",
            "split": {
                "test_size": self.test_size,
                "seed": self.seed,
                "stratified": True,
                "n_train": self.n_train,
                "n_test": self.n_test,
            },
            "C": self.C,
            "classes": list(self.classes),
            "methods": [{"name": name, "loss": loss} for name, loss in METHODS if name in self.methods],
            "columns": list(ROW_COLUMNS),
            "rows": self.rows,
            "mean": self.mean_rows(),
            "per_method": self.method_summary(),
        }


def run_demo(
    *, classes=DIGIT_CLASSES, C: float = DEMO_C, test_size: float = TEST_SIZE, seed: int = SEED, progress: bool = False
) -> DemoResult:
    """Fit the four methods on each class's query and score them on the test half.

    Parameters
    ----------
    classes : sequence of int, default all ten
        The digit classes to use as queries.
    C : float, default :data:`DEMO_C`
    test_size : float, default 0.5
        Fraction of the images held out (stratified by class).
    seed : int, default 0
        Seed of the split.
    progress : bool, default False
        Show a tqdm bar on stderr over the fits (needs ``rankopt[demo]``).
    """
    # Imported here, not at the top: ``rankopt --help`` reads DEMO_C from this
    # module and must not pay for scikit-learn and the estimators.
    from sklearn.model_selection import train_test_split

    from rankopt._validation import check_positive_float
    from rankopt.data.loaders import load_digits

    C = check_positive_float(C, "C")
    classes = tuple(int(c) for c in classes)
    if not classes or any(c not in DIGIT_CLASSES for c in classes):
        raise ValueError(f"expected digit classes among 0 … 9, got {classes!r} instead")
    X, digit = load_digits()
    X_train, X_test, d_train, d_test = train_test_split(
        X, digit, test_size=test_size, stratify=digit, random_state=seed
    )
    jobs = [(c, name, loss) for c in classes for name, loss in METHODS]
    bar = None
    if progress:
        from tqdm import tqdm

        bar = tqdm(total=len(jobs), desc="rankopt demo", unit="fit", file=sys.stderr)
    rows, scores = [], {}
    try:
        for c, name, loss in jobs:
            row, scores[(c, name)] = _fit_one(c, name, loss, C, X_train, X_test, d_train == c, d_test == c)
            rows.append(row)
            if bar is not None:
                bar.update()
    finally:
        if bar is not None:
            bar.close()
    return DemoResult(
        rows=rows,
        classes=classes,
        methods=tuple(name for name, _ in METHODS),
        C=float(C),
        test_size=float(test_size),
        seed=int(seed),
        n_train=int(X_train.shape[0]),
        n_test=int(X_test.shape[0]),
        y_test=d_test,
        test_scores=scores,
    )


def _fit_one(c: int, name: str, loss: str, C: float, X_train, X_test, relevant_train, relevant_test):
    """One method on one class's query: its row of the table, and its test scores."""
    from rankopt.estimators.rank_svm import RankSVM
    from rankopt.metrics import average_precision, ndcg

    y_train, y_test = relevant_train.astype(np.int64), relevant_test.astype(np.int64)
    model = RankSVM(loss=loss, C=C)
    start = time.perf_counter()
    model.fit(X_train, y_train)
    elapsed = time.perf_counter() - start
    s = model.decision_function(X_test)
    row = {
        "class": c,
        "method": name,
        "loss": loss,
        "test_ap": average_precision(y_test, s),
        "test_ndcg": ndcg(y_test, s),
        "fit_time_s": elapsed,
        "n_iter": int(model.n_iter_),
        "converged": bool(model.converged_),
    }
    logger.info("class %d, %s: test AP %.4f, %d iterations, %.3f s", c, name, row["test_ap"], model.n_iter_, elapsed)
    return row, s


def main(output_dir=".", *, quick: bool = False, C: float = DEMO_C, progress: bool = True, stream=None) -> DemoResult:
    """Run the demo, write its table to ``stream`` and its plot and JSON to ``output_dir``.

    Used by ``rankopt demo``.  ``quick`` runs only :data:`QUICK_CLASSES`.
    Writes ``rankopt-demo-pr.png`` and ``rankopt-demo-results.json``.
    """
    from rankopt.experiments.report import format_table, plot_precision_recall, write_json

    stream = sys.stdout if stream is None else stream
    output_dir = os.fspath(output_dir)
    os.makedirs(output_dir, exist_ok=True)
    start = time.perf_counter()
    result = run_demo(classes=QUICK_CLASSES if quick else DIGIT_CLASSES, C=C, progress=progress)
    plot_path = os.path.join(output_dir, PLOT_FILE)
    json_path = os.path.join(output_dir, JSON_FILE)
    plot_precision_recall(result, plot_path)
    write_json(result, json_path)
    elapsed = time.perf_counter() - start
    print(format_table(result), file=stream)
    print(f"\nwrote {plot_path} and {json_path} ({elapsed:.1f} s in all)", file=stream)
    return result
