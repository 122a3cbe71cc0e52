"""Progress of a fit, shared by every estimator: ``verbose`` output and validation monitoring.

``verbose=True`` logs one INFO line per cutting-plane iteration (primal
objective, duality gap, violation, and the validation score when there is
one) on this module's logger, through the engine's
``solve_cutting_plane(callback=...)``.  :func:`verbose_logging` makes those
lines appear in a plain script: for the fit's duration it lets the
``rankopt`` logger's INFO records through and, when no logging handler is
configured anywhere, attaches a stderr handler.  CCCP models pass the same
callback to ``solve_cccp``, which hands it to every inner cutting plane;
their lines carry the CCCP step.  Logging rather than a
progress bar: the number of cutting-plane iterations is not known in
advance (``max_iter`` is a cap, rarely reached), the lines stay readable in
files and CI logs where a bar's carriage returns do not, tqdm is only an
optional dependency, and a user who configured logging keeps full control
(their handlers and format are used, nothing is attached).

:class:`ValidationMonitor` scores every iterate on held-out data and can
stop the solve after ``patience`` iterations without improvement.
"""

from __future__ import annotations

import logging
import sys
from contextlib import contextmanager
from dataclasses import dataclass, fields

import numpy as np

from rankopt.engine.certificate import IterationRecord

__all__ = [
    "IterationProgress",
    "MonitoredIterationRecord",
    "ValidationMonitor",
    "iteration_callback",
    "verbose_logging",
]

logger = logging.getLogger(__name__)

#: The package logger whose records ``verbose`` shows.
_PACKAGE_LOGGER = "rankopt"


@contextmanager
def verbose_logging(verbose):
    """Show rankopt's INFO records on stderr while the block runs, if ``verbose``.

    The ``rankopt`` logger's level is lowered to INFO if it is higher, and a
    :class:`logging.StreamHandler` on stderr is attached to it when no
    handler is configured (``logger.hasHandlers()`` is False: Python would
    otherwise only print warnings, through its last-resort handler).  Both
    are undone when the block ends, also on an error.  With handlers
    configured (``logging.basicConfig``, pytest's capture, an application's
    setup), the records go to them.  A nested verbose fit (HOAPSVM's HOB-SVM
    start) finds the handler attached and adds nothing.
    """
    if not verbose:
        yield
        return
    package = logging.getLogger(_PACKAGE_LOGGER)
    previous_level = package.level
    handler = None
    if package.getEffectiveLevel() > logging.INFO:
        package.setLevel(logging.INFO)
    if not package.hasHandlers():
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("%(message)s"))
        package.addHandler(handler)
    try:
        yield
    finally:
        if handler is not None:
            package.removeHandler(handler)
        package.setLevel(previous_level)


@dataclass(frozen=True)
class MonitoredIterationRecord(IterationRecord):
    """An :class:`~rankopt.engine.IterationRecord` with the validation score of its iterate."""

    validation_score: float = float("nan")


class ValidationMonitor:
    """Scores every cutting-plane iterate on validation sets and keeps the best one.

    Parameters
    ----------
    evaluators : list of (set name, metric name, callable(w) -> float)
        Every metric of every validation set, higher is better.  The first
        metric of the last set is the one that decides the best iterate and
        early stopping (LightGBM's convention).
    patience : int or None
        Ask the solve to stop once this many iterations in a row have not
        improved on the best score; None never stops it.

    Attributes
    ----------
    results : dict
        ``results[set][metric]``: one value per iteration seen, in order.
    scores : list of float
        The deciding metric's values (``results[stopping_set][stopping_metric]``).
    best_index : int or None
        Index in ``scores`` of the best (first best on ties).
    best_w : ndarray or None
        A copy of the best iterate.
    """

    def __init__(self, evaluators, patience=None):
        if callable(evaluators):  # one score(w): a set "valid_0" with the metric "score"
            evaluators = [("valid_0", "score", evaluators)]
        self.evaluators = list(evaluators)
        self.patience = patience
        self.results: dict[str, dict[str, list[float]]] = {}
        for set_name, metric_name, _ in self.evaluators:
            self.results.setdefault(set_name, {})[metric_name] = []
        last_set = self.evaluators[-1][0]
        self.stopping_set = last_set
        self.stopping_metric = next(metric for name, metric, _ in self.evaluators if name == last_set)
        self.scores = self.results[self.stopping_set][self.stopping_metric]
        self.best_index: int | None = None
        self.best_w: np.ndarray | None = None

    @property
    def best_score(self) -> float:
        return self.scores[self.best_index] if self.best_index is not None else float("nan")

    @property
    def stopping_label(self) -> str:
        """``"<metric> on <set>"``, for messages."""
        return f"{self.stopping_metric} on {self.stopping_set}"

    def __call__(self, record: IterationRecord, w: np.ndarray) -> bool:
        for set_name, metric_name, score in self.evaluators:
            self.results[set_name][metric_name].append(float(score(w)))
        value = self.scores[-1]
        if self.best_index is None or value > self.best_score:
            self.best_index = len(self.scores) - 1
            self.best_w = np.array(w, dtype=np.float64, copy=True)
        since_best = len(self.scores) - 1 - self.best_index
        return self.patience is not None and since_best >= self.patience

    def annotate(self, history: list[IterationRecord]) -> list[MonitoredIterationRecord]:
        """``history`` with each record's validation score (the records and scores align)."""
        if len(history) != len(self.scores):
            raise RuntimeError(
                f"expected one validation score per iteration, got {len(self.scores)} scores for "
                f"{len(history)} iterations instead"
            )
        return [
            MonitoredIterationRecord(
                **{f.name: getattr(record, f.name) for f in fields(record)}, validation_score=value
            )
            for record, value in zip(history, self.scores, strict=True)
        ]


class IterationProgress:
    """The ``callback(record, w)`` an estimator gives the cutting plane.

    Runs the validation monitor (if any) and, if ``verbose``, logs the
    iteration.  ``cccp=True`` labels the lines with the CCCP step, counted
    from the inner solves' restarts at iteration 1.
    """

    def __init__(self, label: str, *, verbose=False, monitor: ValidationMonitor | None = None, cccp: bool = False):
        self.label = label
        self.verbose = bool(verbose)
        self.monitor = monitor
        self.cccp = cccp
        self.cccp_step = 0

    def __call__(self, record: IterationRecord, w: np.ndarray) -> bool:
        stop = self.monitor(record, w) if self.monitor is not None else False
        if self.verbose:
            if self.cccp and record.iteration == 1:
                self.cccp_step += 1
            where = f"{self.label} CCCP step {self.cccp_step}" if self.cccp else self.label
            validation = (
                ""
                if self.monitor is None
                else "".join(
                    f", {metric} on {name} {values[-1]:.4f}"
                    for name, metrics in self.monitor.results.items()
                    for metric, values in metrics.items()
                )
            )
            logger.info(
                "%s iteration %d: primal %.6g, gap %.3g, violation %.3g%s",
                where,
                record.iteration,
                record.primal_objective,
                record.duality_gap,
                record.violation,
                validation,
            )
        return stop


def iteration_callback(label: str, *, verbose=False, monitor: ValidationMonitor | None = None, cccp: bool = False):
    """An :class:`IterationProgress`, or None when there is nothing to show or monitor."""
    if not verbose and monitor is None:
        return None
    return IterationProgress(label, verbose=verbose, monitor=monitor, cccp=cccp)
