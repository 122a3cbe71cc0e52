"""Regenerate ``data/qp_corpus.npz``: working-set QPs dumped from real fits.

Each entry is the final working set (planes, losses, C, bounds) of one fit:
RankSVM (ap, auc, zero_one) on scikit-learn's digits and breast_cancer at C
from 1e-3 to 1e8, with more planes than features (rank-deficient Gram
matrices), a timestamp-like feature column (ill-conditioned), and HOB-SVM's
bounded duals on a small random graph.  ``test_qp_corpus.py`` solves every
one and checks it against an independent reference.

    python tests/engine/make_qp_corpus.py
"""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
from sklearn.datasets import load_breast_cancer, load_digits

import rankopt
from rankopt.engine import qp as qp_module

OUT = Path(__file__).parent / "data" / "qp_corpus.npz"


def capture(fit):
    """Run ``fit`` and return the last working set any WorkingSetQP held."""
    seen = []
    original = qp_module.WorkingSetQP.solve

    def solve(self, *args, **kwargs):
        seen.append(self)
        return original(self, *args, **kwargs)

    qp_module.WorkingSetQP.solve = solve
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            fit()
    finally:
        qp_module.WorkingSetQP.solve = original
    qp = seen[-1]
    lo, hi = qp._bounds if qp._bounds is not None else (np.full(qp.n_features, -np.inf), np.full(qp.n_features, np.inf))
    return qp.planes.copy(), qp.losses.copy(), qp.C, lo, hi


def main():
    entries = {}
    digits_X, digits_y = load_digits(return_X_y=True)
    cancer_X, cancer_y = load_breast_cancer(return_X_y=True)
    rng = np.random.default_rng(0)
    sets = {
        "digits8": (digits_X[:400] / 16.0, digits_y[:400] == 8),
        "cancer": ((cancer_X - cancer_X.mean(0)) / cancer_X.std(0), cancer_y == 1),
        "lowdim": (rng.normal(size=(60, 3)), rng.random(60) < 0.3),  # more planes than features
        "timestamp": (np.column_stack([rng.normal(size=(60, 3)), 1.7e9 + np.arange(60.0)]), rng.random(60) < 0.3),
    }
    for name, (X, y) in sets.items():
        for loss in ("ap", "auc", "zero_one"):
            for C in (1e-3, 1.0, 100.0, 1e4, 1e8):
                if name == "timestamp" and C > 1.0:
                    continue  # C·scale² beyond what float64 QPs solve: refused by the engine
                try:
                    planes, losses, C_, lo, hi = capture(
                        lambda: rankopt.RankSVM(loss=loss, C=C, tol=1e-4, max_iter=150).fit(X, y)
                    )
                except ValueError:
                    continue
                entries[f"{name}-{loss}-C{C:g}"] = (planes, losses, C_, lo, hi)
    X = rng.normal(size=(40, 4))
    y = rng.random(40) < 0.4
    edges = np.array([(i, (i + 1) % 40) for i in range(40)] + [(i, (i + 7) % 40) for i in range(40)])
    for eta in (1e-2, 1.0, 100.0):
        for C in (1.0, 1000.0):
            planes, losses, C_, lo, hi = capture(
                lambda: rankopt.HOBSVM(C=C, eta=eta, tol=1e-4, max_iter=150).fit(X, y, edges=edges)
            )
            entries[f"hob-eta{eta:g}-C{C:g}"] = (planes, losses, C_, lo, hi)
    arrays = {}
    for key, (planes, losses, C, lo, hi) in entries.items():
        arrays[f"{key}/planes"] = planes
        arrays[f"{key}/losses"] = losses
        arrays[f"{key}/C"] = np.array(C)
        arrays[f"{key}/lo"] = lo
        arrays[f"{key}/hi"] = hi
    np.savez_compressed(OUT, **arrays)
    print(f"{len(entries)} working sets -> {OUT} ({OUT.stat().st_size / 1e3:.0f} kB)")
    for key, (planes, *_rest) in entries.items():
        print(f"  {key}: {planes.shape[0]} planes x {planes.shape[1]} features, rank {np.linalg.matrix_rank(planes)}")


if __name__ == "__main__":
    main()
