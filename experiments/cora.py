"""Dokania et al. (2014) Table 1 on the Cora citation graph.

Each of Cora's 7 subjects is a query (its papers are the relevant samples)
and the citation links are the similar pairs.  Four rankers are compared by
the average precision of their ranking of held-out papers:

* **SVM** — HOB-SVM without pairs (w₂ = 0; docs/maths.md, corrections to the papers);
* **AP-SVM** — :class:`rankopt.RankSVM` with the AP loss, which is HOAP-SVM
  with w₂ = 0 (for w₂ = 0 the max-marginal difference is (w⁺ − w⁻)·x, and
  HOAP's ½(‖w⁺‖² + ‖w⁻‖²) at its optimum is ¼‖w⁺ − w⁻‖², i.e. AP-SVM with 2C);
* **HOB-SVM** and **HOAP-SVM** (initialised from that fold's HOB-SVM, the
  paper's Algorithm 1 start).

Folds.  As persons in one image stay in one fold in the paper, the papers
are grouped into citation communities (networkx's Louvain method, resolution
3, seeded) and the communities are dealt into folds stratified by subject
(scikit-learn's StratifiedGroupKFold); the graph of a fold is the citation
graph induced on its papers, so most links stay inside their fold.  The same
folds serve all 7 subjects.

Hyperparameters are chosen per subject, per method and per outer fold by
inner cross-validation (same grouping, stratified by the subject) on that
outer fold's training part.  HOAP-SVM has its own search over C (in AP-SVM
units, see :func:`hoap_C`), with HOB-SVM's chosen η and started from the
HOB-SVM chosen for the same training part.

C units.  SVM, AP-SVM and HOB-SVM take C as their estimators do (HOB-SVM's
Ψ/n with a weighted 0-1 loss that sums to at most 1 keeps its C on the
scale of AP-SVM's).  HOAP-SVM's own C (the estimator's, for Ψ/n) is
*not* on that scale: its margins are γ-weighted max-marginal differences of
Ψ/n, so its slack only responds to w once ‖w‖ is ~|P| times HOB-SVM's, and at
HOB-SVM's C the regulariser wins (measured: the CCCP objective falls while
the training AP drops).  HOAP-SVM with w₂ = 0 is AP-SVM with C_AP = 2 C/n²,
so the HOAP grid is given in AP-SVM units and converted by :func:`hoap_C`.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time
import warnings
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from rankopt.experiments.report import timed_reporter

logger = logging.getLogger(__name__)

__all__ = [
    "CoraExperimentResult",
    "METHODS",
    "add_cli_subcommand",
    "cora_folds",
    "hoap_C",
    "load_result",
    "merge_results",
    "run_cora_experiment",
]

METHODS = ("SVM", "AP-SVM", "HOB-SVM", "HOAP-SVM")

#: The settings of a full run and of ``--quick`` (a smoke test of a few seconds).
#: ``C_grid``: SVM and AP-SVM; ``hob_C_grid`` × ``eta_grid``: HOB-SVM;
#: ``hoap_C_grid`` (AP-SVM units, :func:`hoap_C`): HOAP-SVM.  ``inner_hoap_*``
#: cap HOAP-SVM's fits inside the inner cross-validation, ``hoap_*`` the outer ones;
#: inner-CV fits stop at ``inner_tol``, outer fits at the ``tol`` of :func:`run_cora_experiment`.
FULL: dict[str, Any] = dict(
    n_folds=5,
    inner_folds=2,
    C_grid=(0.1, 1.0, 10.0, 100.0, 1000.0),
    hob_C_grid=(1.0, 10.0, 100.0, 1000.0),
    eta_grid=(1e-4, 1e-2, 1.0, 100.0),
    hoap_C_grid=(1.0, 10.0),
    hoap_cccp_max_iter=20,
    hoap_max_iter=300,
    inner_hoap_cccp_max_iter=2,
    inner_hoap_max_iter=100,
    inner_tol=1e-2,
    subsample=None,
)
QUICK: dict[str, Any] = dict(
    n_folds=2,
    inner_folds=2,
    C_grid=(1.0,),
    hob_C_grid=(1.0,),
    eta_grid=(1.0,),
    hoap_C_grid=(1.0,),
    hoap_cccp_max_iter=1,
    hoap_max_iter=5,
    inner_hoap_cccp_max_iter=1,
    inner_hoap_max_iter=5,
    inner_tol=1e-2,
    subsample=300,
)


def hoap_C(C_ap: float, n_samples: int) -> float:
    """HOAPSVM's C equivalent to AP-SVM's ``C_ap`` on ``n_samples`` training samples.

    With w₂ = 0, HOAPSVM(C) (Ψ/n) minimises ¼‖v‖² + C ξ(v/n) over v = w⁺ − w⁻,
    which is (n²/2)(½‖a‖² + (2C/n²) ξ(a)) for a = v/n: AP-SVM with C_ap = 2C/n²
    (tests/estimators/test_high_order.py checks it against RankSVM).
    """
    return 0.5 * float(n_samples) ** 2 * float(C_ap)


@dataclass
class CoraExperimentResult:
    """Per-fold AP, fit seconds and chosen hyperparameters, by method and subject.

    ``params[method][subject]`` lists the hyperparameters chosen for each
    outer fold; ``hoap_diagnostics`` has one record per outer HOAP-SVM fit
    (training AP of its HOB-SVM start and of its result, CCCP objectives,
    inner cutting-plane iterations and whether each met its tolerance).
    """

    subjects: list[str]
    ap: dict[str, dict[str, list[float]]]  # method -> subject -> AP per fold
    fit_seconds: dict[str, list[float]]  # method -> seconds per outer fit
    params: dict[str, dict[str, list[dict]]]  # method -> subject -> chosen hyperparameters per fold
    config: dict
    n_samples: int
    n_links: int
    links_within_folds: float
    wall_seconds: float = 0.0
    search_seconds: float = 0.0
    unconverged: dict[str, int] = field(default_factory=dict)
    hoap_diagnostics: list[dict] = field(default_factory=list)

    def mean_std(self, method: str, subject: str) -> tuple[float, float]:
        """Mean and std over folds (failed fits, NaN, left out and counted in the fit table)."""
        values = np.asarray(self.ap[method][subject], dtype=float)
        return float(np.nanmean(values)), float(np.nanstd(values))

    def average(self, method: str) -> tuple[float, float]:
        """Mean over subjects of the per-subject mean AP, and the std over folds of the subject-averaged AP."""
        per_fold = np.nanmean(np.asarray([self.ap[method][s] for s in self.subjects], dtype=float), axis=0)
        return float(np.nanmean(per_fold)), float(np.nanstd(per_fold))

    def chosen_summary(self, method: str) -> str:
        """How often each hyperparameter setting was chosen, over subjects and folds."""
        counts = Counter(
            ", ".join(f"{k}={v:g}" for k, v in p.items()) for s in self.subjects for p in self.params[method][s]
        )
        return "; ".join(f"{setting} ×{n}" for setting, n in counts.most_common())

    def to_markdown(self) -> str:
        short = [s.replace("_", " ") for s in self.subjects]
        lines = ["| method | " + " | ".join(short) + " | average |", "|---|" + "---|" * (len(short) + 1)]
        for method in METHODS:
            cells = [f"{100 * m:.1f} ± {100 * s:.1f}" for m, s in (self.mean_std(method, k) for k in self.subjects)]
            m, s = self.average(method)
            lines.append(f"| {method} | " + " | ".join(cells) + f" | **{100 * m:.1f}** ± {100 * s:.1f} |")
        lines += [
            "",
            "| method | mean fit (s) | max fit (s) | fits | certified converged | QP failed |",
            "|---|---|---|---|---|---|",
        ]
        for method in METHODS:
            t = np.asarray(self.fit_seconds[method])
            failed = sum(int(np.isnan(np.asarray(self.ap[method][s], dtype=float)).sum()) for s in self.subjects)
            lines.append(
                f"| {method} | {t.mean():.2f} | {t.max():.2f} | {t.size} | "
                f"{t.size - self.unconverged.get(method, 0)} of {t.size} | {failed} |"
            )
        lines += ["", "Chosen hyperparameters (inner CV per subject and outer fold; count over all of them):", ""]
        for method in METHODS:
            unit = " (C in AP-SVM units)" if method == "HOAP-SVM" else ""
            lines.append(f"- {method}{unit}: {self.chosen_summary(method)}")
        if self.hoap_diagnostics:
            lines += ["", self._hoap_markdown()]
        return "\n".join(lines) + "\n"

    def _hoap_markdown(self) -> str:
        d = self.hoap_diagnostics
        hob_tr = np.array([r["train_ap_init"] for r in d], dtype=float)
        hoap_tr = np.array([r["train_ap"] for r in d], dtype=float)
        drop = np.array([(r["objectives"][0] - r["objectives"][-1]) / r["objectives"][0] for r in d], dtype=float)
        capped = sum(not all(r["inner_converged"]) for r in d)
        accepted = np.array([len(r["objectives"]) - 1 for r in d])
        certified = sum(bool(r.get("converged", False)) for r in d)
        scales = np.array([r.get("init_scale", np.nan) for r in d], dtype=float)
        return (
            f"HOAP-SVM outer fits ({len(d)}): {certified} certified converged (CCCP stopped on a certified "
            f"inner solve); start t* on the ray of the HOB-SVM solution: median {np.nanmedian(scales):.3g} "
            f"(range {np.nanmin(scales):.3g}–{np.nanmax(scales):.3g}); CCCP objective fell by "
            f"{100 * np.nanmean(drop):.1f} % on average from that start "
            f"(min {100 * np.nanmin(drop):.1f} %, never rose); accepted CCCP steps {accepted.mean():.1f} on "
            f"average; {capped} fits had an inner cutting plane stopped uncertified (its best point kept, "
            f"accepted only below J); training AP "
            f"{100 * np.nanmean(hob_tr):.1f} at the HOB-SVM start → {100 * np.nanmean(hoap_tr):.1f} after "
            f"(higher in {int(np.sum(hoap_tr > hob_tr + 1e-12))}, lower in {int(np.sum(hoap_tr < hob_tr - 1e-12))})."
        )


def load_result(path: str | Path) -> CoraExperimentResult:
    """A result saved by ``run_cora_experiment(json_output=...)``, to rebuild its tables."""
    return CoraExperimentResult(**json.loads(Path(path).read_text()))


def merge_results(results: list[CoraExperimentResult]) -> CoraExperimentResult:
    """One result from runs over disjoint subjects with the same settings (e.g. one run per
    subject, so that an interrupted experiment keeps its finished subjects); times add up."""
    first = results[0]
    for other in results[1:]:
        if other.config != first.config or other.n_samples != first.n_samples:
            raise ValueError("expected runs with the same settings and data, got different ones instead")
    subjects = [s for r in results for s in r.subjects]
    if len(set(subjects)) != len(subjects):
        raise ValueError(f"expected runs over disjoint subjects, got {subjects} instead")
    return CoraExperimentResult(
        subjects=subjects,
        ap={m: {s: v for r in results for s, v in r.ap[m].items()} for m in METHODS},
        fit_seconds={m: [t for r in results for t in r.fit_seconds[m]] for m in METHODS},
        params={m: {s: v for r in results for s, v in r.params[m].items()} for m in METHODS},
        config=first.config,
        n_samples=first.n_samples,
        n_links=first.n_links,
        links_within_folds=first.links_within_folds,
        wall_seconds=sum(r.wall_seconds for r in results),
        search_seconds=sum(r.search_seconds for r in results),
        unconverged={m: sum(r.unconverged.get(m, 0) for r in results) for m in METHODS},
        hoap_diagnostics=[d for r in results for d in r.hoap_diagnostics],
    )


def _induced_pairs(pairs: np.ndarray, index: np.ndarray, n: int) -> np.ndarray:
    new_id = np.full(n, -1, dtype=np.intp)
    new_id[index] = np.arange(index.size)
    ends = new_id[pairs]
    return ends[(ends >= 0).all(axis=1)]


def _communities(pairs: np.ndarray, n: int, seed: int) -> np.ndarray:
    import networkx as nx

    graph = nx.Graph()
    graph.add_nodes_from(range(n))
    graph.add_edges_from(map(tuple, pairs.tolist()))
    groups = np.empty(n, dtype=np.intp)
    for k, members in enumerate(nx.community.louvain_communities(graph, resolution=3.0, seed=seed)):
        groups[list(members)] = k
    return groups


def cora_folds(labels: np.ndarray, groups: np.ndarray, n_folds: int, seed: int) -> np.ndarray:
    """Fold id of every sample: whole groups per fold, stratified by ``labels``."""
    from sklearn.model_selection import StratifiedGroupKFold

    fold = np.empty(labels.size, dtype=np.intp)
    splitter = StratifiedGroupKFold(n_splits=n_folds, shuffle=True, random_state=seed)
    for k, (_, test) in enumerate(splitter.split(np.zeros(labels.size), labels, groups)):
        fold[test] = k
    return fold


def _fit(method: str, params: dict, X, y, pairs, cfg: dict, init=None, outer: bool = True):
    """Fit one method; returns (model, seconds, converged), model None if its QP failed."""
    from rankopt.engine.qp import QPSolveError

    start = time.perf_counter()
    try:
        return _fit_or_raise(method, params, X, y, pairs, cfg, init, start, outer)
    except QPSolveError as exc:  # counted and reported as a failed fit, never hidden
        logger.warning("%s %s: %s", method, params, exc)
        return None, time.perf_counter() - start, False


def _fit_or_raise(method, params, X, y, pairs, cfg, init, start, outer):
    from rankopt import HOAPSVM, HOBSVM, RankSVM

    cfg = dict(cfg, tol=cfg["tol"] if outer else cfg["inner_tol"])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # convergence is recorded instead
        if method == "SVM":
            model = HOBSVM(C=params["C"], tol=cfg["tol"]).fit(X, y)
        elif method == "AP-SVM":
            model = RankSVM(loss="ap", C=params["C"], tol=cfg["tol"]).fit(X, y)
        elif method == "HOB-SVM":
            model = HOBSVM(C=params["C"], eta=params["eta"], tol=cfg["tol"]).fit(X, y, edges=pairs)
        elif method == "HOAP-SVM":
            prefix = "hoap_" if outer else "inner_hoap_"
            model = HOAPSVM(
                C=hoap_C(params["C"], X.shape[0]),
                eta=params["eta"],
                init=init,
                tol=cfg["tol"],
                max_iter=cfg[prefix + "max_iter"],
                cccp_max_iter=cfg[prefix + "cccp_max_iter"],
            ).fit(X, y, edges=pairs)
        else:  # pragma: no cover - METHODS is closed
            raise ValueError(f"unknown method {method!r}")
    # certified: the duality gap of the (last inner) solve is within C·tol, and for HOAP-SVM CCCP
    # stopped on a step whose inner solve was certified
    return model, time.perf_counter() - start, bool(model.converged_)


def _ap(method: str, model, X, y, pairs) -> float:
    from rankopt.metrics import average_precision

    if model is None:
        return float("nan")
    if method in ("HOB-SVM", "HOAP-SVM"):
        scores = model.decision_function(X, edges=pairs)
    else:
        scores = model.decision_function(X)
    return float(average_precision(y, scores))


def _grids(cfg: dict) -> dict:
    return {
        "SVM": [{"C": c} for c in cfg["C_grid"]],
        "AP-SVM": [{"C": c} for c in cfg["C_grid"]],
        "HOB-SVM": [{"C": c, "eta": e} for c in cfg["hob_C_grid"] for e in cfg["eta_grid"]],
    }


def _split(pairs_all, train, inner_fold, j):
    pairs, n = pairs_all
    fit_idx, val_idx = train[inner_fold != j], train[inner_fold == j]
    return fit_idx, val_idx, _induced_pairs(pairs, fit_idx, n), _induced_pairs(pairs, val_idx, n)


def _inner_task(key, X, y, pairs_all, train, inner_fold, j, cfg):
    """Validation AP of every SVM / AP-SVM / HOB-SVM grid point on inner split j, and HOB-SVM's coefficients."""
    fit_idx, val_idx, fit_pairs, val_pairs = _split(pairs_all, train, inner_fold, j)
    scores, hob_coef = {}, {}
    for method, grid in _grids(cfg).items():
        if len(grid) == 1 and method != "HOB-SVM":
            continue
        for p, params in enumerate(grid):
            model, _, _ = _fit(method, params, X[fit_idx], y[fit_idx], fit_pairs, cfg, outer=False)
            if len(grid) > 1:
                scores[(method, p)] = _ap(method, model, X[val_idx], y[val_idx], val_pairs)
            if method == "HOB-SVM":
                hob_coef[p] = None if model is None else model.coef_
    return key, scores, hob_coef


def _inner_hoap_task(key, params, init, X, y, pairs_all, train, inner_fold, j, cfg):
    """Validation AP of HOAP-SVM with ``params`` on inner split j, started from that split's HOB-SVM."""
    if init is None:  # that HOB-SVM's QP failed
        return key, float("nan")
    fit_idx, val_idx, fit_pairs, val_pairs = _split(pairs_all, train, inner_fold, j)
    model, _, _ = _fit("HOAP-SVM", params, X[fit_idx], y[fit_idx], fit_pairs, cfg, init=init, outer=False)
    return key, _ap("HOAP-SVM", model, X[val_idx], y[val_idx], val_pairs)


def _best(grid: list, scores: list) -> dict:
    """The grid point with the highest mean validation AP (NaN: failed; ties: the first)."""
    means = [np.nan_to_num(np.nanmean(s), nan=-np.inf) if np.any(np.isfinite(s)) else -np.inf for s in scores]
    return grid[int(np.argmax(means))]


def _outer_task(subject_index, fold_k, params, X, y, pairs_all, fold, cfg):
    train, test = np.flatnonzero(fold != fold_k), np.flatnonzero(fold == fold_k)
    n = pairs_all[1]
    train_pairs = _induced_pairs(pairs_all[0], train, n)
    test_pairs = _induced_pairs(pairs_all[0], test, n)
    out, diag = {}, None
    hob = None
    for method in METHODS:
        if method == "HOAP-SVM" and hob is None:  # its start, HOB-SVM, failed
            out[method] = (float("nan"), 0.0, False)
            continue
        init = hob.coef_ if method == "HOAP-SVM" and hob is not None else None
        model, seconds, converged = _fit(method, params[method], X[train], y[train], train_pairs, cfg, init=init)
        if method == "HOB-SVM":
            hob = model
        if method == "HOAP-SVM" and model is not None and hob is not None:
            diag = dict(
                subject=subject_index,
                fold=fold_k,
                C=params[method]["C"],
                eta=params[method]["eta"],
                train_ap_init=_ap(method, hob, X[train], y[train], train_pairs),
                train_ap=_ap(method, model, X[train], y[train], train_pairs),
                objectives=[float(o) for o in model.objectives_],
                inner_iterations=[int(r.n_iter) for r in model.inner_results_],
                inner_converged=[bool(r.converged) for r in model.inner_results_],
                inner_gap_over_tol=[float(r.duality_gap / (model.C * cfg["tol"])) for r in model.inner_results_],
                accepted=[bool(step.accepted) for step in model.steps_],
                converged=bool(model.converged_),
                init_scale=float(model.init_scale_),
                coef_norm_init=float(np.linalg.norm(hob.coef_)),
                coef_norm=float(np.linalg.norm(model.coef_)),
            )
        out[method] = (_ap(method, model, X[test], y[test], test_pairs), seconds, converged)
    return subject_index, fold_k, out, diag


def run_cora_experiment(
    *,
    subjects=None,
    quick: bool = False,
    n_jobs: int = 1,
    seed: int = 0,
    tol: float = 1e-3,
    output: str | Path | None = None,
    json_output: str | Path | None = None,
    progress=None,
    **overrides,
) -> CoraExperimentResult:
    """Run the four rankers on Cora and optionally write the markdown report and the raw JSON.

    Parameters
    ----------
    subjects : list of int or str, optional
        Subjects (queries) to run; all 7 by default.
    quick : bool
        A seconds-long smoke run (300 papers, 2 folds, one grid point each).
    n_jobs : int
        joblib processes for the independent fits.
    output : path, optional
        Write the result table there (markdown).
    json_output : path, optional
        Write the raw result there (JSON; :func:`load_result` reads it back).
    progress : callable(str), optional
        Called with a one-line message as the run goes: after every inner
        cross-validation fit and every outer fold (``python -m experiments.cora`` prints
        them on stderr).
    **overrides
        Any of the keys of ``FULL``.
    """
    from joblib import Parallel

    from rankopt.data.cora import CORA_SUBJECTS

    cfg: dict[str, Any] = dict(QUICK if quick else FULL)
    unknown = set(overrides) - set(cfg)
    if unknown:
        raise ValueError(f"expected settings among {sorted(cfg)}, got {sorted(unknown)} instead")
    cfg.update(overrides)
    cfg.update(tol=tol, seed=seed, quick=quick)
    start = time.perf_counter()
    report = timed_reporter(logger, progress)
    X, subject_ids, pairs, groups = _cora_data(cfg, seed)
    n = X.shape[0]
    names = list(CORA_SUBJECTS)
    chosen = [names.index(s) if isinstance(s, str) else int(s) for s in (subjects or range(7))]
    fold = cora_folds(subject_ids, groups, cfg["n_folds"], seed)
    within = float(np.mean(fold[pairs[:, 0]] == fold[pairs[:, 1]])) if len(pairs) else 1.0
    report(f"Cora: {n} papers, {len(pairs)} links ({100 * within:.0f}% inside folds)")
    # Results stream back in order as they finish, so progress keeps up with the work.
    parallel = Parallel(n_jobs=n_jobs, return_as="generator")
    search = _Search(cfg, X, subject_ids, (pairs, n), groups, fold, chosen, names, parallel, report)
    params = search.choose()
    search_seconds = time.perf_counter() - start
    report(f"hyperparameters chosen; step 3/3: {len(search.cells)} outer folds, the four methods each")
    ap, fit_seconds, unconverged, diagnostics = search.outer_folds(params)
    result = CoraExperimentResult(
        subjects=[names[s] for s in chosen],
        ap=ap,
        fit_seconds=fit_seconds,
        params=params,
        config={k: (list(v) if isinstance(v, tuple) else v) for k, v in cfg.items()},
        n_samples=n,
        n_links=len(pairs),
        links_within_folds=within,
        wall_seconds=time.perf_counter() - start,
        search_seconds=search_seconds,
        unconverged=unconverged,
        hoap_diagnostics=diagnostics,
    )
    if output is not None:
        Path(output).write_text(_report(result))
    if json_output is not None:
        Path(json_output).write_text(json.dumps(asdict(result), indent=1))
    return result


def _cora_data(cfg: dict, seed: int):
    """(X, subject ids, similar pairs, communities), subsampled by whole communities when asked."""
    from rankopt.data.cora import load_cora

    data = load_cora()
    X, subject_ids, pairs = data.X, data.subject, data.similar_pairs()
    n = X.shape[0]
    groups = _communities(pairs, n, seed)
    if cfg["subsample"] is None:
        return X, subject_ids, pairs, groups
    rng = np.random.default_rng(seed)  # whole communities, so the subgraph keeps its links
    keep = np.zeros(n, dtype=bool)
    for g in rng.permutation(groups.max() + 1):
        if keep.sum() >= cfg["subsample"]:
            break
        keep |= groups == g
    index = np.flatnonzero(keep)
    return X[index], subject_ids[index], _induced_pairs(pairs, index, n), groups[index]


class _Search:
    """The nested cross-validation of the Cora experiment: inner folds choose each method's parameters
    per subject and outer fold; the outer folds then score the four methods."""

    def __init__(self, cfg, X, subject_ids, pairs_all, groups, fold, chosen, names, parallel, report):
        self.cfg, self.X, self.subject_ids, self.pairs_all = cfg, X, subject_ids, pairs_all
        self.fold, self.chosen, self.names, self.parallel, self.report = fold, chosen, names, parallel, report
        n_folds, self.n_inner = cfg["n_folds"], cfg["inner_folds"]
        self.n_folds = n_folds
        self.cells = [(s, k) for s in chosen for k in range(n_folds)]
        self.train = {k: np.flatnonzero(fold != k) for k in range(n_folds)}
        self.inner = {
            (s, k): cora_folds((subject_ids == s)[self.train[k]], groups[self.train[k]], self.n_inner, cfg["seed"] + 1)
            for s, k in self.cells
        }

    def choose(self) -> dict:
        """Each method's parameters per subject and outer fold (steps 1 and 2)."""
        cfg, names, n_inner = self.cfg, self.names, self.n_inner
        grids, hoap_grid = _grids(cfg), list(cfg["hoap_C_grid"])
        needs_hob_start = len(hoap_grid) > 1
        results = self._inner_results() if needs_hob_start or any(len(g) > 1 for g in grids.values()) else {}
        params: dict = {m: {names[s]: [None] * self.n_folds for s in self.chosen} for m in METHODS}
        hob_index = {}
        for s, k in self.cells:
            for method, grid in grids.items():
                if len(grid) == 1:
                    params[method][names[s]][k] = grid[0]
                    hob_index[(s, k)] = 0
                    continue
                scores = [[results[(s, k, j)][0][(method, p)] for j in range(n_inner)] for p in range(len(grid))]
                best = _best(grid, scores)
                params[method][names[s]][k] = best
                if method == "HOB-SVM":
                    hob_index[(s, k)] = grid.index(best)
        hoap_params = {
            (s, k, c): {"C": c, "eta": params["HOB-SVM"][names[s]][k]["eta"]} for s, k in self.cells for c in hoap_grid
        }
        hoap_scores = self._hoap_scores(hoap_params, hoap_grid, results, hob_index) if needs_hob_start else {}
        for s, k in self.cells:
            if needs_hob_start:
                grid = [hoap_params[(s, k, c)] for c in hoap_grid]
                best = _best(grid, [[hoap_scores[(s, k, c, j)] for j in range(n_inner)] for c in hoap_grid])
            else:
                best = hoap_params[(s, k, hoap_grid[0])]
            params["HOAP-SVM"][names[s]][k] = best
        return params

    def _inner_results(self) -> dict:
        """Step 1: the inner folds of SVM, AP-SVM and HOB-SVM, (s, k, j) → (scores, coefficients)."""
        from joblib import delayed

        n_tasks = len(self.cells) * self.n_inner
        self.report(f"step 1/3: inner cross-validation of SVM, AP-SVM and HOB-SVM, {n_tasks} training parts")
        results = {}
        tasks = (
            delayed(_inner_task)(
                (s, k, j), self.X, self.subject_ids == s, self.pairs_all, self.train[k], self.inner[(s, k)], j, self.cfg
            )
            for s, k in self.cells
            for j in range(self.n_inner)
        )
        for done, (key, scores, coef) in enumerate(self.parallel(tasks), start=1):
            results[key] = (scores, coef)
            s, k, j = key
            self.report(f"inner CV {done}/{n_tasks} done (subject {self.names[s]}, outer fold {k}, inner fold {j})")
        return results

    def _hoap_scores(self, hoap_params, hoap_grid, results, hob_index) -> dict:
        """Step 2: HOAP-SVM's inner folds, each started from its inner fold's chosen HOB-SVM."""
        from joblib import delayed

        self.report(
            f"step 2/3: inner cross-validation of HOAP-SVM, {len(self.cells) * len(hoap_grid) * self.n_inner} fits"
        )
        tasks = (
            delayed(_inner_hoap_task)(
                (s, k, c, j),
                hoap_params[(s, k, c)],
                results[(s, k, j)][1][hob_index[(s, k)]],
                self.X,
                self.subject_ids == s,
                self.pairs_all,
                self.train[k],
                self.inner[(s, k)],
                j,
                self.cfg,
            )
            for s, k in self.cells
            for c in hoap_grid
            for j in range(self.n_inner)
        )
        return dict(self.parallel(tasks))

    def outer_folds(self, params: dict):
        """Step 3: the four methods on every outer fold: (AP, fit seconds, uncertified counts, HOAP diagnostics)."""
        from joblib import delayed

        names = self.names
        outer = self.parallel(
            delayed(_outer_task)(
                s,
                k,
                {m: params[m][names[s]][k] for m in METHODS},
                self.X,
                self.subject_ids == s,
                self.pairs_all,
                self.fold,
                self.cfg,
            )
            for s, k in self.cells
        )
        ap = {m: {names[s]: [0.0] * self.n_folds for s in self.chosen} for m in METHODS}
        fit_seconds: dict = {m: [] for m in METHODS}
        unconverged = {m: 0 for m in METHODS}
        diagnostics = []
        for done, (s, k, out, diag) in enumerate(outer, start=1):
            self.report(
                f"outer fold {done}/{len(self.cells)} (subject {names[s]}, fold {k}): test AP "
                + ", ".join(f"{m} {value:.3f}" for m, (value, _, _) in out.items())
            )
            for m, (value, seconds, converged) in out.items():
                ap[m][names[s]][k] = value
                fit_seconds[m].append(seconds)
                unconverged[m] += not converged
            if diag is not None:
                diagnostics.append(dict(diag, subject=names[s]))
        return ap, fit_seconds, unconverged, diagnostics


def _report(result: CoraExperimentResult) -> str:
    from rankopt.experiments.report import QUICK_WARNING

    cfg = result.config
    warning = f"**{QUICK_WARNING}**\n\n" if cfg.get("quick") else ""
    return (
        "# High-order ranking on Cora (measured)\n\n"
        + warning
        + f"Mean AP (%) ± std over {cfg['n_folds']} folds; {result.n_samples} papers, {result.n_links} "
        f"undirected citation links, {100 * result.links_within_folds:.0f}% of them inside a fold. "
        f"Settings: {cfg}. Wall time {result.wall_seconds:.0f} s ({result.search_seconds:.0f} s of it "
        "hyperparameter search).\n\n" + result.to_markdown()
    )


#: Wall time of the full run, all 7 subjects with --n-jobs 2 (docs/high-order-results.md), in minutes.
#: Measured: the run of 2026-11-25 (3) took 731 s on a shared 2-core machine, its slowest fit 186 s.
FULL_RUN_MINUTES_TWO_JOBS = 12


def plan(quick: bool, subjects, n_jobs: int) -> str:
    """What ``python -m experiments.cora`` will run and roughly how long it takes, printed when it starts."""
    if quick:
        return (
            "cora --quick: the four methods on about 300 papers of Cora, 2 folds, one grid point each, "
            "capped iterations; a few seconds"
        )
    n_subjects = 7 if not subjects else len(subjects)
    minutes = 2 * FULL_RUN_MINUTES_TWO_JOBS * n_subjects / 7 / max(1, min(n_jobs, 2))
    return (
        f"cora: SVM, AP-SVM, HOB-SVM and HOAP-SVM on Cora's 2,708 papers, {n_subjects} subject(s) x "
        f"{FULL['n_folds']} folds, hyperparameters by {FULL['inner_folds']}-fold inner cross-validation; "
        f"roughly {minutes:.0f} min (the full run took {FULL_RUN_MINUTES_TWO_JOBS} min with --n-jobs 2 on a shared "
        "2-core machine); progress below, the table at the end"
    )


def add_cli_subcommand(subparsers, parents=()) -> argparse.ArgumentParser:
    """Add ``cora`` to an argparse subparsers object.

    The new parser's defaults carry ``handler`` (and ``func``), both
    :func:`cli_main`, which takes the parsed arguments.
    """
    parser = subparsers.add_parser(
        "cora",
        parents=list(parents),
        help=f"SVM, AP-SVM, HOB-SVM and HOAP-SVM on the Cora citation graph (~{FULL_RUN_MINUTES_TWO_JOBS} min, 2 jobs)",
        description=(
            "High-order ranking on the Cora citation graph (Dokania, Behl, Jawahar and Kumar, ECCV 2014, "
            "Table 1, transposed to documents): each of the 7 subjects is a query, the citation links are "
            "the similar pairs; SVM, AP-SVM, HOB-SVM and HOAP-SVM are compared by the test AP of 5-fold "
            "cross-validation, hyperparameters chosen by inner cross-validation. The full run took "
            f"{FULL_RUN_MINUTES_TWO_JOBS} min with --n-jobs 2 and prints progress on stderr; --quick is a "
            "seconds-long smoke "
            "test whose numbers mean nothing. Needs the experiments extra (Cora ships in graphdatascience)."
        ),
    )
    parser.add_argument(
        "--quick", action="store_true", help="a seconds-long smoke test on about 300 papers (its numbers mean nothing)"
    )
    parser.add_argument(
        "--subjects",
        nargs="*",
        default=None,
        metavar="SUBJECT",
        help="subject ids 0-6 or names to run (default: all 7)",
    )
    parser.add_argument("--n-jobs", type=int, default=1, help="joblib processes for the independent fits (default: 1)")
    parser.add_argument(
        "--seed", type=int, default=0, help="seed of the community detection, the folds and the subsample (default: 0)"
    )
    parser.add_argument("--output", default=None, metavar="FILE", help="also write the markdown table to FILE")
    parser.add_argument("--json", default=None, metavar="FILE", help="write the raw results (JSON) to FILE")
    parser.set_defaults(handler=cli_main, func=cli_main)
    return parser


def cli_main(args) -> int:
    """Run the experiment from parsed ``args``: the plan and progress on stderr, the table on stdout."""
    from rankopt.data.cora import check_cora_available
    from rankopt.experiments.report import QUICK_WARNING, say

    check_cora_available()  # a missing package fails in one line before the plan is announced
    subjects = None
    if args.subjects:
        subjects = [int(s) if s.isdigit() else s for s in args.subjects]
    say(plan(args.quick, subjects, args.n_jobs))
    if args.quick:
        say(QUICK_WARNING)
    result = run_cora_experiment(
        subjects=subjects,
        quick=args.quick,
        n_jobs=args.n_jobs,
        seed=args.seed,
        output=args.output,
        json_output=args.json,
        progress=say,
    )
    print(_report(result))
    if args.quick:
        say(QUICK_WARNING)
    return 0


if __name__ == "__main__":
    from experiments import run_experiment

    sys.exit(run_experiment(add_cli_subcommand, "cora"))
