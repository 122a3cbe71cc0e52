"""Plot and tabulate a pytest-benchmark JSON report of benchmarks/.

    python benchmarks/plot_results.py results/bench.json [--out results/bench_inference.png]

Renders the inference sweeps (``bench_inference.py``) as log-log plots of
the median time of one call against the problem size — one panel per sweep
and loss, one line per method, with ``numpy.sort`` / ``numpy.argsort`` of
the negative scores as references — and prints Markdown tables of the
medians, the speed targets as ratios (also from ``test_paired_ratio``, whose
two calls were timed in alternation), and the training runs
(``bench_training.py``) and the tight-tolerance ratios (``bench_tight_tol.py``)
when the report holds them.

Only the JSON is read; nothing is re-run.  Sizes a report does not hold
(e.g. a ``--bench-scale small`` run) show as "not measured".
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

REFERENCES = ("numpy.sort", "numpy.argsort")
SWEEPS = {  # sweep -> (x axis quantity, label, title)
    "total": ("total", "|P| + |N|", "|P| : |N| = 1 : 10"),
    "neg": ("n_neg", "|N|", "|P| fixed"),
    "pos": ("n_pos", "|P|", "|N| fixed"),
}
LOSSES = ("ap", "ndcg")


def load(path: Path, stat: str = "median") -> tuple[list[dict], list[dict], list[dict]]:
    """The inference, training and paired-ratio records: extra_info plus one time statistic in seconds.

    The statistic (pytest-benchmark's ``median`` by default, or ``min``) is
    stored under the key "median" whichever it is, so the rest of the script
    reads one field.
    """
    with open(path) as handle:
        report = json.load(handle)
    inference, training, paired = [], [], []
    for bench in report.get("benchmarks", []):
        info = dict(bench.get("extra_info", {}))
        stats = bench.get("stats") or {}
        if stat not in stats:
            continue  # a --benchmark-disable run records no timings
        info["median"] = float(stats[stat])
        info["rounds"] = int(stats.get("rounds", 0))
        if info.get("bench") == "inference":
            info["total"] = info["n_pos"] + info["n_neg"]
            inference.append(info)
        elif info.get("bench") == "training":
            training.append(info)
        elif info.get("bench") in ("paired", "tight-tol", "tight-tol-scale"):  # medians in extra_info
            paired.append(info)
    return inference, training, paired


def median_of(records, *, dist, n_pos, n_neg, method, loss=None) -> float | None:
    """The median time of one (case, method[, loss]), or None when not measured."""
    for r in records:
        if (r["dist"], r["n_pos"], r["n_neg"], r["method"]) == (dist, n_pos, n_neg, method) and (
            r["method"] in REFERENCES or r["loss"] == loss
        ):
            return r["median"]
    return None


def _methods(records) -> list[str]:
    names = sorted({r["method"] for r in records if r["method"] not in REFERENCES and r["method"] != "auto"})
    return names + (["auto"] if any(r["method"] == "auto" for r in records) else [])


def plot(records, out: Path, stat: str = "median") -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    methods = _methods(records)
    colours = {m: f"C{k}" for k, m in enumerate(methods)}
    fig, axes = plt.subplots(len(LOSSES), len(SWEEPS), figsize=(5 * len(SWEEPS), 4 * len(LOSSES)), squeeze=False)
    for row, loss in enumerate(LOSSES):
        for col, (sweep, (xkey, xlabel, title)) in enumerate(SWEEPS.items()):
            ax = axes[row][col]
            in_sweep = [r for r in records if sweep in r["sweeps"]]
            fixed = sorted({(r["n_pos"] if xkey == "n_neg" else r["n_neg"]) for r in in_sweep})
            for method in methods + list(REFERENCES):
                points = sorted(
                    (r[xkey], r["median"])
                    for r in in_sweep
                    if r["method"] == method and (method in REFERENCES or r["loss"] == loss)
                )
                if not points:
                    continue
                xs, ys = zip(*points, strict=True)
                if method in REFERENCES:
                    style = dict(color="black", linestyle="--" if method == "numpy.sort" else ":", marker="")
                else:
                    style = dict(
                        color=colours[method], marker="o", markersize=3, linestyle="-" if method != "auto" else "-."
                    )
                ax.plot(xs, ys, label=method, **style)
            ax.set_xscale("log")
            ax.set_yscale("log")
            fixed_note = ""
            if xkey == "n_neg" and len(fixed) == 1:
                fixed_note = f" (|P| = {fixed[0]})"
            elif xkey == "n_pos" and len(fixed) == 1:
                fixed_note = f" (|N| = {fixed[0]})"
            ax.set_title(f"{loss.upper()}: {title}{fixed_note}", fontsize=10)
            ax.set_xlabel(xlabel)
            ax.set_ylabel(f"{stat} time of one call (s)")
            ax.grid(True, which="both", alpha=0.3)
            if row == 0 and col == 0:
                ax.legend(fontsize=8)
    fig.suptitle(
        f"rankopt loss-augmented inference: {stat} time of one most_violated_ranking call (mid-training scores)"
    )
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=120)
    plt.close(fig)


def _ms(seconds: float | None) -> str:
    return "–" if seconds is None else f"{1e3 * seconds:.3g}"


def median_table(records) -> str:
    """Markdown: one row per (case, loss), one column per method and reference (median ms)."""
    methods = _methods(records)
    columns = methods + list(REFERENCES)
    header = "| case | sweeps | loss | " + " | ".join(columns) + " |"
    lines = [header, "|" + "---|" * (3 + len(columns))]
    cases = sorted(
        {(r["dist"], r["n_pos"], r["n_neg"], tuple(r["sweeps"])) for r in records},
        key=lambda c: (c[0] != "mid", c[0], c[2], c[1]),
    )
    for dist, n_pos, n_neg, sweeps in cases:
        for loss in LOSSES:
            cells = [_ms(median_of(records, dist=dist, n_pos=n_pos, n_neg=n_neg, method=m, loss=loss)) for m in columns]
            lines.append(f"| {dist} P={n_pos} N={n_neg} | {','.join(sweeps)} | {loss} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _size(n: int) -> str:
    """10⁶ for powers of ten, the plain number otherwise."""
    digits = str(n)
    if digits.startswith("1") and set(digits[1:]) <= {"0"} and len(digits) > 1:
        return "10" + str(len(digits) - 1).translate(str.maketrans("0123456789", "⁰¹²³⁴⁵⁶⁷⁸⁹"))
    return digits


def _ratio_line(label, num, den, target, *, note="") -> str:
    if num is None or den is None:
        return f"| {label} | not measured | {target} | – |{note}"
    ratio = num / den
    op, bound = target.split()
    met = ratio <= float(bound) if op == "≤" else ratio >= float(bound)
    return f"| {label} | {ratio:.3g} ({_ms(num)} ms / {_ms(den)} ms) | {target} | {'yes' if met else 'NO'} |{note}"


def targets_table(records) -> str:
    """The speed targets of the brief, as ratios of medians."""

    def t(method, loss=None, dist="mid", n_pos=1000, n_neg=1_000_000):
        return median_of(records, dist=dist, n_pos=n_pos, n_neg=n_neg, method=method, loss=loss)

    lines = ["| ratio | measured | target | met |", "|---|---|---|---|"]
    for loss in LOSSES:
        lines.append(_ratio_line(f"qs({loss}) / argsort, P=10³ N=10⁶", t("qs", loss), t("numpy.argsort"), "≤ 1"))
    for loss in LOSSES:
        greedy_at, n_neg = t("greedy", loss), 1_000_000
        note = ""
        if greedy_at is None:  # excluded at 10⁶: use the largest |N| of the |P| = 10³ sweep measured
            measured = sorted(
                r["n_neg"]
                for r in records
                if r["method"] == "greedy"
                and r["loss"] == loss
                and r["dist"] == "mid"
                and r["n_pos"] == 1000
                and "neg" in r["sweeps"]
            )
            if measured:
                n_neg = measured[-1]
                greedy_at = t("greedy", loss, n_neg=n_neg)
                note = f" greedy excluded at N=10⁶; measured at N={_size(n_neg)}"
        lines.append(
            _ratio_line(
                f"greedy({loss}) / qs({loss}), P=10³ N={_size(n_neg)}",
                greedy_at,
                t("qs", loss, n_neg=n_neg),
                "≥ 50",
                note=note,
            )
        )
    for loss in LOSSES:
        lines.append(_ratio_line(f"auto({loss}) / qs({loss}), P=10³ N=10⁶", t("auto", loss), t("qs", loss), "≤ 1.1"))
    lines.append(
        _ratio_line(
            "greedy(ap) / search(ap), P=10³ N=10⁵",
            t("greedy", "ap", n_neg=100_000),
            t("search", "ap", n_neg=100_000),
            "≥ 5",
        )
    )
    lines.append(
        _ratio_line(
            "search(ap) / select(ap), late training, P=10³ N=10⁵",
            t("search", "ap", dist="late", n_neg=100_000),
            t("select", "ap", dist="late", n_neg=100_000),
            "≥ 1",
        )
    )
    for loss in LOSSES:
        lines.append(
            _ratio_line(
                f"greedy({loss}) / qs({loss}), first iteration (w = 0), P=10³ N=10⁶",
                t("greedy", loss, dist="first"),
                t("qs", loss, dist="first"),
                "≥ 50",
            )
        )
    return "\n".join(lines)


#: Targets of the ratios test_paired_ratio measures: (numerator, denominator) -> target.
PAIRED_TARGETS = {("greedy", "qs"): "≥ 50", ("auto", "qs"): "≤ 1.1"}


def paired_table(records) -> str:
    """The targets at |P| = 10³, |N| = 10⁶ from calls timed in alternation (medians of each side)."""
    lines = ["| ratio, calls alternated | measured | target | met |", "|---|---|---|---|"]
    at_target_size = [r for r in records if (r["n_pos"], r["n_neg"]) == (1000, 1_000_000)]
    if not at_target_size:
        return "\n".join(lines + ["| (P=10³ N=10⁶ not measured: run with --bench-scale full) | – | – | – |"])
    for r in sorted(at_target_size, key=lambda r: (r["numerator"] != "greedy", r["loss"])):
        target = PAIRED_TARGETS.get((r["numerator"], r["denominator"]))
        if target is None:
            continue
        label = (
            f"{r['numerator']}({r['loss']}) / {r['denominator']}({r['loss']}), P={_size(r['n_pos'])} "
            f"N={_size(r['n_neg'])}, {r['numerator_calls']} + {r['denominator_calls']} calls"
        )
        lines.append(_ratio_line(label, r["numerator_median"], r["denominator_median"], target))
    return "\n".join(lines)


def training_table(records) -> str:
    lines = [
        "| query | P / N | run | fit (ms) | iterations | inference (ms) | inference ms/iter | train AP |",
        "|---|---|---|---|---|---|---|---|",
    ]

    def key(r):
        return (r["dataset"], r["query_class"], r["loss"] != "zero_one", r["loss"], r["method"])

    for r in sorted(records, key=key):
        lines.append(
            f"| {r['dataset']} {r['query_class']} | {r['n_pos']} / {r['n_neg']} | {r['method']} | "
            f"{_ms(r['median'])} | {r['n_iter']} | {_ms(r['inference_seconds'])} | "
            f"{r['inference_ms_per_iter']:.3g} | {r['train_ap']:.4f} |"
        )
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "json",
        type=Path,
        nargs="?",
        default=Path("results/bench.json"),
        help="pytest-benchmark report (--benchmark-json); default results/bench.json",
    )
    parser.add_argument(
        "--out",
        type=Path,
        default=Path("results/bench_inference.png"),
        help="where to write the sweep plot; default results/bench_inference.png",
    )
    parser.add_argument(
        "--stat",
        choices=("median", "min"),
        default="median",
        help="time statistic to plot and tabulate (min resists a loaded machine); default median",
    )
    args = parser.parse_args(argv)
    if not args.json.is_file():
        print(
            f"plot_results: expected a pytest-benchmark JSON report at {args.json}, found none; run "
            f"`pytest benchmarks/ --benchmark-json={args.json}` first",
            file=sys.stderr,
        )
        return 2
    inference, training, paired = load(args.json, args.stat)
    if not inference and not training and not paired:
        print(f"plot_results: {args.json} holds no timings (was it a --benchmark-disable run?)", file=sys.stderr)
        return 2
    if inference:
        plot(inference, args.out, args.stat)
        print(f"Sweep plot: {args.out}\n")
        print(f"### Loss-augmented inference, {args.stat} of one call (ms)\n")
        print(median_table(inference))
        print(f"\n### Speed targets (ratios of {args.stat}s)\n")
        print(targets_table(inference))
    ratios = [r for r in paired if r.get("bench") == "paired"]
    if ratios:
        print("\n### Speed targets, the two calls timed in alternation (ratios of medians)\n")
        print(paired_table(ratios))
    tight = [r for r in paired if r.get("bench") == "tight-tol"]
    if tight:
        from bench_tight_tol import TOL, tight_tol_table

        print(f"\n### RankSVM at tol {TOL:g} / LinearSVC, CPU-time medians (bench_tight_tol.py)\n")
        print(tight_tol_table(tight))
    for info in (r for r in paired if r.get("bench") == "tight-tol-scale"):
        from bench_tight_tol import scale_table

        print("\n### AP-SVM at scale, C = 100 against C = 10 (bench_tight_tol.py)\n")
        print(scale_table(info))
    if training:
        print(f"\n### Training on digits (one-vs-rest), C = {training[0]['C']:g}\n")
        print(training_table(training))
    return 0


if __name__ == "__main__":
    sys.exit(main())
