"""Presenting the demo's results: a text table, a JSON file, precision–recall plots."""

from __future__ import annotations

import json
import os
import sys
import time

import numpy as np

__all__ = [
    "QUICK_WARNING",
    "format_table",
    "interpolated_precision",
    "plot_precision_recall",
    "say",
    "timed_reporter",
    "write_json",
]

#: Printed when an experiment starts with ``--quick`` and written into its table.
QUICK_WARNING = (
    "WARNING: --quick is a smoke test (a sliver of the data, a reduced grid, capped iterations): "
    "its numbers mean nothing and do not compare the methods; run without --quick for results"
)


def say(message: str) -> None:
    """One line of an experiment's progress on stderr (stdout keeps the result table)."""
    print(f"rankopt: {message}", file=sys.stderr, flush=True)


def timed_reporter(logger, progress=None):
    """``report(message)``: the message with the seconds since this call, logged at INFO on
    ``logger`` and handed to ``progress`` (e.g. :func:`say`) when given."""
    start = time.perf_counter()

    def report(message: str) -> None:
        message = f"[{time.perf_counter() - start:6.0f} s] {message}"
        logger.info(message)
        if progress is not None:
            progress(message)

    return report


#: Recall levels at which per-class curves are averaged.
RECALL_GRID = np.linspace(0.0, 1.0, 101)


def format_table(result) -> str:
    """The per-class test AP and NDCG of each method, a mean row, and fit costs."""
    methods = result.methods
    by_key = {(r["class"], r["method"]): r for r in result.rows}
    width = max(10, max(len(m) for m in methods) + 2)
    header_cells = "".join(f"{m:>{width}}" for m in methods)
    lines = [
        "rankopt demo: scikit-learn digits, one query per class (class c relevant, the rest not)",
        f"train {result.n_train} / test {result.n_test} images (stratified, test fraction "
        f"{result.test_size:g}, seed {result.seed}); pixels / 16; C = {result.C:g} for every method",
        "",
    ]
    for metric, label in (("test_ap", "test AP"), ("test_ndcg", "test NDCG")):
        lines.append(f"{label:<10}" + header_cells)
        for c in result.classes:
            cells = "".join(f"{by_key[(c, m)][metric]:>{width}.4f}" for m in methods)
            lines.append(f"class {c:<4}" + cells)
        means = result.mean_rows()
        lines.append(f"{'mean':<10}" + "".join(f"{means[m][metric]:>{width}.4f}" for m in methods))
        lines.append("")
    summary = result.method_summary()
    n_fits = len(result.classes)
    # The fit time is the sum over the method's fits (one per class), and says so.
    lines.append(
        f"{'method':<12}{'loss':>10}{f'total fit time ({n_fits} fits)':>28}"
        f"{'mean iter':>12}{'max iter':>10}{'converged':>11}"
    )
    for m in methods:
        s = summary[m]
        lines.append(
            f"{m:<12}{s['loss']:>10}{s['fit_time_s']:>26.3f} s{s['mean_n_iter']:>12.1f}"
            f"{s['max_n_iter']:>10d}{s['n_converged']:>6d} / {s['n_fits']}"
        )
    lines.append(f"(total fit time: the sum of the {n_fits} fits' wall-clock times, one fit per class)")
    return "\n".join(lines)


def write_json(result, path) -> None:
    """Write ``result.to_dict()`` to ``path`` as indented JSON."""
    with open(os.fspath(path), "w", encoding="utf-8") as handle:
        json.dump(result.to_dict(), handle, indent=2)
        handle.write("\n")


def interpolated_precision(y_true, scores, recall_grid=RECALL_GRID) -> np.ndarray:
    """Interpolated precision max{P(r') : r' ≥ r} at each recall level r of the grid.

    The envelope is what makes curves of different queries comparable point
    by point, so that they can be averaged.
    """
    from sklearn.metrics import precision_recall_curve

    precision, recall, _ = precision_recall_curve(np.asarray(y_true) > 0, scores)
    order = np.argsort(recall, kind="stable")
    recall, precision = recall[order], precision[order]
    envelope = np.maximum.accumulate(precision[::-1])[::-1]
    # recall reaches 1, so every grid level r ≤ 1 has an index with recall ≥ r.
    return envelope[np.searchsorted(recall, recall_grid, side="left")]


def plot_precision_recall(result, path) -> None:
    """Write a PNG: the class-averaged interpolated PR curve of each method, and
    the PR curves of the hardest class (lowest AP averaged over the methods).

    Draws on a bare :class:`matplotlib.figure.Figure` with the Agg canvas, so
    no pyplot state or global backend is touched.
    """
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from sklearn.metrics import precision_recall_curve

    fig = Figure(figsize=(11, 4.8), layout="constrained")
    FigureCanvasAgg(fig)
    ax_mean, ax_hard = fig.subplots(1, 2, sharey=True)
    means = result.mean_rows()
    by_key = {(r["class"], r["method"]): r for r in result.rows}
    for method in result.methods:
        curves = [interpolated_precision(result.y_test == c, result.test_scores[(c, method)]) for c in result.classes]
        ax_mean.plot(
            RECALL_GRID,
            np.mean(curves, axis=0),
            linewidth=1.8,
            label=f"{method} (mean AP {means[method]['test_ap']:.3f})",
        )
    ax_mean.set_title(f"mean over {len(result.classes)} classes (interpolated precision)")

    hardest = min(result.classes, key=lambda c: np.mean([by_key[(c, m)]["test_ap"] for m in result.methods]))
    for method in result.methods:
        precision, recall, _ = precision_recall_curve(result.y_test == hardest, result.test_scores[(hardest, method)])
        ax_hard.step(
            recall,
            precision,
            where="post",
            linewidth=1.5,
            label=f"{method} (AP {by_key[(hardest, method)]['test_ap']:.3f})",
        )
    ax_hard.set_title(f"hardest class: digit {hardest}")

    for ax in (ax_mean, ax_hard):
        ax.set_xlabel("recall")
        ax.set_xlim(0.0, 1.01)
        ax.grid(True, alpha=0.3)
        ax.legend(loc="lower left", fontsize=9)
    ax_mean.set_ylabel("precision")
    low = min(ax_mean.get_ylim()[0], ax_hard.get_ylim()[0])
    ax_mean.set_ylim(max(0.0, low), 1.01)
    fig.suptitle(f"rankopt demo: precision–recall on the digits test half (C = {result.C:g})")
    fig.savefig(os.fspath(path), dpi=110)
