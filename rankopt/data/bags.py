"""Bags of candidates: the input of the weakly supervised (latent) models.

Each sample of Behl et al. (2015) is a bag of candidate feature vectors Φ_i(h)
(the boxes of an image, the instances of a multiple-instance bag); which
candidate is the right one is the latent variable h.  :class:`Bags` stores
all candidates stacked in one matrix (dense or CSR) with bag ``offsets``, so
that per-bag maxima of the scores are one vectorised ``reduceat`` — no Python
loop over bags.

:func:`check_bags` accepts what users have:

* a list of 2-D arrays (dense or sparse), one per bag;
* one stacked matrix with ``bags`` — either one bag id per row (any
  hashable values; rows of a bag need not be contiguous) or bag offsets
  ``0 = o_0 < o_1 < … < o_n = n_rows``.  An index with one entry per row is
  read as ids, any other length as offsets;
* a :class:`Bags` instance.

Labels ``y`` may be given per bag or, with ids or offsets, per row (all rows
of a bag must then agree); so may query ids ``qid``, which group the bags
into queries ranked separately (a query of bags: the boxes of the images
returned for one search, say).  ``known`` optionally fixes the candidate of
some bags (partial annotation, Behl et al. (2015) §5.1): one entry per bag,
the index of the known candidate within its bag or −1 when it is latent.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import scipy.sparse as sp

from rankopt._validation import check_binary_labels, query_ids
from rankopt.data.backends import check_matrix

__all__ = ["Bags", "check_bags"]


@dataclass(frozen=True, eq=False)
class Bags:
    """Candidates of ``n_bags`` bags stacked row-wise.

    Attributes
    ----------
    X : ndarray or csr_matrix of shape (n_candidates, n_features)
        Finite float32/float64 candidates, the rows of bag ``b`` being
        ``offsets[b]:offsets[b + 1]``.
    offsets : ndarray of int64, shape (n_bags + 1,)
        Strictly increasing (no empty bag), from 0 to ``n_candidates``.
    known : ndarray of int64, shape (n_bags,), or None
        Index within its bag of each bag's known candidate, −1 when latent.
    ids : ndarray, shape (n_bags,), or None
        The bag ids the bags were built from, in bag order (first appearance).
    qid : ndarray of int64, shape (n_bags,), or None
        The query of each bag, when the bags come in queries.
    """

    X: Any  # a dense float array or a CSR matrix
    offsets: np.ndarray
    known: np.ndarray | None = None
    ids: np.ndarray | None = None
    qid: np.ndarray | None = None

    @property
    def n_bags(self) -> int:
        return self.offsets.size - 1

    @property
    def n_candidates(self) -> int:
        return int(self.offsets[-1])

    @property
    def n_features(self) -> int:
        return self.X.shape[1]

    @property
    def sizes(self) -> np.ndarray:
        return np.diff(self.offsets)

    @property
    def starts(self) -> np.ndarray:
        return self.offsets[:-1]

    def bag_of_row(self) -> np.ndarray:
        """The bag index of every candidate row."""
        return np.repeat(np.arange(self.n_bags), self.sizes)

    def best(self, scores: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Per-bag maximum of ``scores`` (one per candidate) and the row attaining it.

        Ties go to the candidate with the lowest index.  O(n_candidates).
        """
        return self._extreme(scores, np.maximum)

    def worst(self, scores: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Per-bag minimum of ``scores`` and the row attaining it (lowest index on ties)."""
        return self._extreme(scores, np.minimum)

    def _extreme(self, scores, ufunc):
        scores = np.asarray(scores)
        if scores.shape != (self.n_candidates,):
            raise ValueError(
                f"expected one score per candidate ({self.n_candidates}), got shape {scores.shape} instead"
            )
        values = ufunc.reduceat(scores, self.starts)
        hits = np.flatnonzero(scores == np.repeat(values, self.sizes))
        # Every bag has at least one hit; keep the first hit of each bag.
        hit_bags = np.searchsorted(self.offsets, hits, side="right") - 1
        first = np.ones(hits.size, dtype=bool)
        first[1:] = hit_bags[1:] != hit_bags[:-1]
        return values, hits[first]

    def take(self, indices) -> Bags:
        """The bags at ``indices`` (in that order), as a new :class:`Bags`."""
        indices = np.asarray(indices, dtype=np.intp)
        if indices.ndim != 1 or indices.size == 0:
            raise ValueError(f"expected a non-empty 1-D array of bag indices, got shape {indices.shape} instead")
        if indices.min() < -self.n_bags or indices.max() >= self.n_bags:
            raise ValueError(
                f"expected bag indices in [0, {self.n_bags}), got {indices.min()}..{indices.max()} instead"
            )
        sizes = self.sizes[indices]
        offsets = np.concatenate(([0], np.cumsum(sizes))).astype(np.int64)
        # Row r of bag k comes from starts[indices[k]] + (r - offsets[k]).
        rows = np.repeat(self.starts[indices] - offsets[:-1], sizes) + np.arange(offsets[-1])
        return Bags(
            self.X[rows],
            offsets,
            None if self.known is None else self.known[indices],
            None if self.ids is None else self.ids[indices],
            None if self.qid is None else self.qid[indices],
        )

    def restrict_to_known(self) -> Bags:
        """Bags whose candidate is known keep only that candidate (used for training)."""
        if self.known is None or np.all(self.known < 0):
            return self
        keep = np.ones(self.n_candidates, dtype=bool)
        annotated = np.flatnonzero(self.known >= 0)
        keep[np.repeat(self.starts[annotated], self.sizes[annotated]) + _ranges(self.sizes[annotated])] = False
        keep[self.starts[annotated] + self.known[annotated]] = True
        sizes = self.sizes.copy()
        sizes[annotated] = 1
        offsets = np.concatenate(([0], np.cumsum(sizes))).astype(np.int64)
        return Bags(self.X[np.flatnonzero(keep)], offsets, None, self.ids, self.qid)


def _ranges(sizes: np.ndarray) -> np.ndarray:
    """0…s−1 for every s in ``sizes``, concatenated."""
    offsets = np.concatenate(([0], np.cumsum(sizes)))
    return np.arange(offsets[-1]) - np.repeat(offsets[:-1], sizes)


def _stack_list(bags_list) -> tuple[object, np.ndarray]:
    if len(bags_list) == 0:
        raise ValueError("expected at least one bag, got an empty list instead")
    blocks = []
    width = None
    for b, bag in enumerate(bags_list):
        if not sp.issparse(bag):
            try:
                bag = np.asarray(bag)
            except Exception as exc:
                raise ValueError(f"expected bag {b} to be a 2-D array, got {type(bag).__name__}: {exc}") from exc
        if bag.ndim != 2:
            raise ValueError(
                f"expected bag {b} to be a 2-D array (candidates × features), got shape {bag.shape} instead"
            )
        if bag.shape[0] == 0:
            raise ValueError(f"expected every bag to hold at least one candidate, got an empty bag {b} instead")
        if width is None:
            width = bag.shape[1]
        elif bag.shape[1] != width:
            raise ValueError(
                f"expected every bag to have {width} features (as bag 0), got {bag.shape[1]} in bag {b} instead"
            )
        blocks.append(bag)
    sizes = np.array([block.shape[0] for block in blocks], dtype=np.int64)
    if any(sp.issparse(block) for block in blocks):
        X = sp.vstack([sp.csr_matrix(block) for block in blocks], format="csr")
    else:
        X = np.concatenate(blocks, axis=0)
    return X, np.concatenate(([0], np.cumsum(sizes))).astype(np.int64)


def _group_ids(ids: np.ndarray):
    """Bag order (first appearance), the row permutation grouping bags, offsets, ids."""
    if ids.dtype.kind == "f" and not np.all(np.isfinite(ids)):
        raise ValueError("expected finite bag ids, got NaN or infinity instead")
    unique, first, inverse = np.unique(ids, return_index=True, return_inverse=True)
    appearance = np.argsort(first, kind="stable")
    rank = np.empty(unique.size, dtype=np.int64)
    rank[appearance] = np.arange(unique.size)
    bag_of_row = rank[inverse.ravel()]
    perm = np.argsort(bag_of_row, kind="stable")
    sizes = np.bincount(bag_of_row, minlength=unique.size)
    return perm, np.concatenate(([0], np.cumsum(sizes))).astype(np.int64), unique[appearance]


def _check_offsets(offsets, n_rows: int) -> np.ndarray:
    if not (
        np.issubdtype(offsets.dtype, np.integer)
        or (offsets.dtype.kind == "f" and np.all(np.isfinite(offsets)) and np.all(offsets == np.round(offsets)))
    ):
        raise ValueError(f"expected integer bag offsets, got dtype {offsets.dtype} instead")
    offsets = offsets.astype(np.int64)
    if offsets.size < 2 or offsets[0] != 0 or offsets[-1] != n_rows:
        raise ValueError(
            f"expected bag offsets running from 0 to the number of rows ({n_rows}), or one bag id per "
            f"row, got {offsets.size} entries"
            f"{'' if offsets.size == 0 else f' from {offsets[0]} to {offsets[-1]}'} instead"
        )
    steps = np.diff(offsets)
    if np.any(steps < 0):
        raise ValueError("expected non-decreasing bag offsets, got a decreasing step instead")
    if np.any(steps == 0):
        raise ValueError(
            f"expected every bag to hold at least one candidate, got an empty bag {int(np.argmin(steps))} instead"
        )
    return offsets


def _check_known(known, sizes: np.ndarray) -> np.ndarray | None:
    if known is None:
        return None
    known = np.asarray(known)
    if known.ndim != 1 or known.size != sizes.size:
        raise ValueError(f"expected known to hold one entry per bag ({sizes.size}), got shape {known.shape} instead")
    if not np.issubdtype(known.dtype, np.integer):
        raise ValueError(
            f"expected known to hold candidate indices (integers, −1 for latent), got dtype {known.dtype} instead"
        )
    known = known.astype(np.int64)
    bad = np.flatnonzero((known < -1) | (known >= sizes))
    if bad.size:
        b = int(bad[0])
        raise ValueError(
            f"expected known[{b}] to be −1 or a candidate index in [0, {sizes[b]}), got {known[b]} instead"
        )
    return known


def check_bags(X, bags=None, *, y=None, known=None, qid=None, name: str = "X") -> tuple[Bags, np.ndarray | None]:
    """Validate bag input; return the :class:`Bags` and the per-bag bool labels (None without ``y``).

    Parameters
    ----------
    X : list of 2-D arrays / sparse matrices, 2-D array / sparse matrix, or Bags
    bags : array-like, optional
        With a stacked ``X``: one bag id per row, or bag offsets.  Must be
        None otherwise.
    y : array-like, optional
        Binary labels in {0, 1} or {−1, 1}, one per bag (bag order) or one per
        row of a stacked ``X``.
    known : array-like of int, optional
        Per bag, the index of its known candidate or −1.
    qid : array-like of int, optional
        Query ids, one per bag or one per row of a stacked ``X`` (then equal
        within a bag); stored as the returned bags' ``qid``.  None keeps a
        :class:`Bags` instance's own.
    """
    ids = None
    perm = None
    if isinstance(X, Bags):
        if bags is not None:
            raise ValueError("expected bags=None when X is already a Bags instance, got a bags index instead")
        result = X
        if known is not None or qid is not None:
            result = Bags(
                X.X,
                X.offsets,
                X.known if known is None else _check_known(known, X.sizes),
                X.ids,
                X.qid if qid is None else _bag_qid(qid, X, None, None),
            )
        return result, _bag_labels(y, result, None, None)
    if isinstance(X, (list, tuple)):
        if bags is not None:
            raise ValueError(
                "expected bags=None when X is a list of bags (each element is one bag), got a bags index instead"
            )
        matrix, offsets = _stack_list(X)
        matrix = check_matrix(matrix, name)
    else:
        if bags is None:
            raise ValueError(
                f"expected either a list of 2-D bags or a stacked {name} with a bags index (ids or offsets), "
                f"got a single matrix without bags instead"
            )
        matrix = check_matrix(X, name)
        bags = np.asarray(bags)
        if bags.ndim != 1:
            raise ValueError(f"expected bags to be 1-D, got an array of shape {bags.shape} instead")
        n_rows = matrix.shape[0]
        if bags.size == n_rows:
            perm, offsets, ids = _group_ids(bags)
            if np.any(perm != np.arange(n_rows)):
                matrix = matrix[perm]
            else:
                perm = None
        else:
            offsets = _check_offsets(bags, n_rows)
    sizes = np.diff(offsets)
    result = Bags(matrix, offsets, _check_known(known, sizes), ids)
    if qid is not None:
        result = Bags(result.X, result.offsets, result.known, result.ids, _bag_qid(qid, result, perm, X))
    return result, _bag_labels(y, result, perm, X)


def _per_bag(values, bags: Bags, perm, X, name: str, what: str, check):
    """One value per bag from ``values`` given per bag or per row of a stacked X (equal within a bag).

    ``check(array, n)`` validates n values (labels, query ids) and returns them.
    """
    values = np.asarray(values)
    if values.ndim != 1:
        raise ValueError(f"expected {name} to be 1-D, got an array of shape {values.shape} instead")
    if values.size == bags.n_bags:
        return check(values, bags.n_bags)
    if values.size == bags.n_candidates and not isinstance(X, (list, tuple, Bags)):
        per_row = check(values, bags.n_candidates)
        if perm is not None:
            per_row = per_row[perm]
        first = per_row[bags.starts]
        mixed = np.flatnonzero(np.repeat(first, bags.sizes) != per_row)
        if mixed.size:
            b = int(np.searchsorted(bags.offsets, mixed[0], side="right") - 1)
            which = f"bag id {bags.ids[b].item()!r}" if bags.ids is not None else f"bag {b}"
            raise ValueError(f"expected one {what} per bag, got mixed {what}s within {which} instead")
        return first
    raise ValueError(
        f"expected {name} to hold one {what} per bag ({bags.n_bags})"
        + ("" if isinstance(X, (list, tuple, Bags)) else f" or one per row ({bags.n_candidates})")
        + f", got {values.size} instead"
    )


def _bag_labels(y, bags: Bags, perm, X) -> np.ndarray | None:
    if y is None:
        return None
    return _per_bag(y, bags, perm, X, "y", "label", check_binary_labels)


def _bag_qid(qid, bags: Bags, perm, X) -> np.ndarray:
    return _per_bag(
        qid, bags, perm, X, "qid", "query id", lambda values, n: query_ids(values, n, "qid", per="bag or row")
    )
