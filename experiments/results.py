"""The results of the neural and boosting comparisons (``experiments.deep``, ``experiments.learners``): one row per
method, the table with paired differences against a reference, and the files they are written to.  Both
experiments import this module; neither imports the other's results.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field

import numpy as np

from rankopt.experiments.report import QUICK_WARNING

__all__ = ["DeepResult", "Row", "format_table", "mean_se", "write_result"]


@dataclass
class Row:
    """One method's chosen setting and its test metrics, per seed and per test query."""

    method: str
    setting: str
    validation: float
    test: dict = field(default_factory=dict)  # metric → list over seeds
    per_query: dict = field(default_factory=dict)  # metric → list over test queries (mean over seeds)
    seconds: float = 0.0
    note: str = ""


@dataclass
class DeepResult:
    task: str
    seeds: list
    description: str
    reference: str
    metrics: tuple
    rows: list = field(default_factory=list)
    quick: bool = False

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=2)


def mean_se(values) -> tuple[float, float]:
    values = np.asarray(values, dtype=float)
    se = float(np.std(values, ddof=1) / np.sqrt(values.size)) if values.size > 1 else float("nan")
    return float(np.mean(values)), se


def _paired(values, reference) -> str:
    diff = np.asarray(values, dtype=float) - np.asarray(reference, dtype=float)
    diff = diff[np.isfinite(diff)]
    mean, se = mean_se(diff)
    return f"{mean:+.4f} ± {se:.4f}"


def format_table(result: DeepResult) -> str:
    """A markdown table: each metric's mean ± SE over seeds, and paired differences against the reference."""
    reference = next(row for row in result.rows if row.method == result.reference)
    head = ["method", "chosen on validation", "validation"]
    for metric in result.metrics:
        head += [f"test {metric} (mean ± SE over seeds)", f"{metric} − {result.reference} (paired over queries)"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for row in result.rows:
        cells = [row.method + (f" ({row.note})" if row.note else ""), row.setting, f"{row.validation:.4f}"]
        for metric in result.metrics:
            mean, se = mean_se(row.test[metric])
            cells.append(f"{mean:.4f} ± {se:.4f}")
            cells.append("—" if row is reference else _paired(row.per_query[metric], reference.per_query[metric]))
        lines.append("| " + " | ".join(cells) + " |")
    table = "\n".join(lines)
    return f"{QUICK_WARNING}\n\n{table}" if result.quick else table


def write_result(result: DeepResult, output, json_output) -> None:
    """The description and markdown table to ``output`` (once the reference row is in: the table's paired
    differences need it), the raw results to ``json_output``; either may be None."""
    if output is not None and any(row.method == result.reference for row in result.rows):
        with open(output, "w", encoding="utf-8") as handle:
            handle.write(result.description + "\n\n" + format_table(result) + "\n")
    if json_output is not None:
        with open(json_output, "w", encoding="utf-8") as handle:
            handle.write(result.to_json() + "\n")
