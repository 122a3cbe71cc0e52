"""The Cora citation graph shipped inside the ``graphdatascience`` package.

``graphdatascience`` carries Cora as two parquet files under
``graphdatascience/resources/cora/``: one row per paper (``nodeId``,
``subject`` 0…6, ``features`` — the 1,433 binary word indicators) and one row
per citation (``sourceNodeId`` → ``targetNodeId``).  Importing
``graphdatascience`` needs its Neo4j driver, so the files are located with
:func:`importlib.util.find_spec` (which does not import the package) and read
with pyarrow.  Nothing is downloaded at run time.  Both come with the
``experiments`` extra: ``pip install "rankopt[experiments]"`` (from a
checkout, ``pip install ".[experiments]"``).

For ranking (Dokania et al. (2014) §5 transposed to documents), each subject
is a query whose relevant samples are the papers of that subject, and the
citation links are the similar pairs E.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import scipy.sparse as sp

__all__ = ["CORA_SUBJECTS", "CoraDataset", "check_cora_available", "cora_dir", "load_cora"]

#: Subject names by id, as ``graphdatascience``'s serialize_cora.py numbers them.
CORA_SUBJECTS = (
    "Neural_Networks",
    "Rule_Learning",
    "Reinforcement_Learning",
    "Probabilistic_Methods",
    "Theory",
    "Genetic_Algorithms",
    "Case_Based",
)

#: What needs the optional packages, in the message of a missing one.
PURPOSE = "reading Cora (the cora experiment, python -m experiments.cora)"


@dataclass(frozen=True, eq=False)
class CoraDataset:
    """Cora as arrays.

    Attributes
    ----------
    X : csr_matrix of float64, shape (2708, 1433)
        Binary word indicators, one row per paper.
    subject : ndarray of int, shape (2708,)
        Subject id 0…6 (names in :data:`CORA_SUBJECTS`).
    citations : ndarray of intp, shape (n_links, 2)
        (citing row, cited row) for every link in the file, as rows of X.
    paper_ids : ndarray of int64
        Cora's paper id of each row.
    """

    X: sp.csr_matrix
    subject: np.ndarray
    citations: np.ndarray
    paper_ids: np.ndarray

    @property
    def n_samples(self) -> int:
        return self.X.shape[0]

    @property
    def n_features(self) -> int:
        return self.X.shape[1]

    @property
    def subjects(self) -> tuple[str, ...]:
        return CORA_SUBJECTS

    def labels(self, subject) -> np.ndarray:
        """Relevance (bool) of every paper to the query ``subject`` (id or name)."""
        if isinstance(subject, str):
            if subject not in CORA_SUBJECTS:
                raise ValueError(f"expected a subject in {CORA_SUBJECTS}, got {subject!r} instead")
            subject = CORA_SUBJECTS.index(subject)
        if isinstance(subject, bool) or not isinstance(subject, (int, np.integer)) or not 0 <= subject < 7:
            raise ValueError(f"expected a subject id 0..6 or name, got {subject!r} instead")
        return self.subject == subject

    def similar_pairs(self) -> np.ndarray:
        """The citation links as undirected pairs (i < j), each once, sorted."""
        pairs = np.sort(self.citations, axis=1)
        return np.unique(pairs, axis=0)


def cora_dir() -> Path:
    """The directory holding the Cora parquet files, without importing graphdatascience."""
    from rankopt._optional import install_hint, package_dirs

    for root in package_dirs("graphdatascience", purpose=PURPOSE):
        path = root / "resources" / "cora"
        if (path / "cora_nodes.parquet.gzip").is_file():
            return path
    raise FileNotFoundError(
        "graphdatascience is installed but has no resources/cora/cora_nodes.parquet.gzip; reinstall it: "
        + install_hint("experiments")
    )


def check_cora_available() -> None:
    """Raise the install hint now if Cora's files or pyarrow are missing (before a long run starts)."""
    from rankopt._optional import require

    cora_dir()
    require("pyarrow.parquet", purpose=PURPOSE)


def load_cora(dtype=np.float64) -> CoraDataset:
    """Read Cora (2,708 papers, 1,433 binary features, 7 subjects, 5,429 links)."""
    from rankopt._optional import require

    path = cora_dir()
    pq = require("pyarrow.parquet", purpose=PURPOSE)
    nodes = pq.read_table(path / "cora_nodes.parquet.gzip", columns=["nodeId", "subject", "features"])
    rels = pq.read_table(path / "cora_rels.parquet.gzip", columns=["sourceNodeId", "targetNodeId"])

    paper_ids = nodes.column("nodeId").to_numpy()
    subject = nodes.column("subject").to_numpy().astype(np.int64)
    features = nodes.column("features").combine_chunks()
    lengths = np.diff(features.offsets.to_numpy())
    if lengths.size == 0 or np.any(lengths != lengths[0]):
        raise ValueError("expected every Cora paper to have the same number of features, got ragged rows")
    dense = features.values.to_numpy().reshape(len(paper_ids), int(lengths[0]))
    if not ((dense == 0) | (dense == 1)).all():
        raise ValueError("expected binary word features in Cora, got other values")
    if np.unique(paper_ids).size != paper_ids.size:
        raise ValueError("expected unique Cora paper ids, got duplicates")

    order = np.argsort(paper_ids)
    ends = np.stack([rels.column("sourceNodeId").to_numpy(), rels.column("targetNodeId").to_numpy()], axis=1)
    pos = np.searchsorted(paper_ids, ends, sorter=order).clip(max=paper_ids.size - 1)
    citations = order[pos]
    unknown = paper_ids[citations] != ends
    if unknown.any():
        raise ValueError(f"a Cora citation names the unknown paper id {int(ends[unknown][0])}")
    return CoraDataset(
        X=sp.csr_matrix(dense.astype(dtype)),
        subject=subject,
        citations=citations.astype(np.intp).reshape(-1, 2),
        paper_ids=paper_ids,
    )
