"""The high-order joint feature map of HOB-SVM (Dokania et al. (2014) eqs. 4–5).

For samples ψ(x_i) ∈ R^d, similar pairs E and a labeling Y ∈ {0,1}ⁿ,

    Ψ(X, Y) = ( Σ_{i: y_i=1} ψ(x_i),  Σ_{i: y_i=0} ψ(x_i),  η Σ_{(i,j)∈E, y_i≠y_j} Φ(ψ(x_i), ψ(x_j)) )

with Φ(z, z') = exp(−(z − z')²) element-wise, so Ψ has 3d entries and
w = (w⁺, w⁻, w₂).  The score w·Ψ(X, Y) is the graph-cut energy of
:mod:`rankopt.graphcut` with unaries X w⁺ and X w⁻ and edge penalties
−η Φ_e·w₂, which are non-negative exactly when w₂ ≤ 0 (Φ > 0).

Φ is stored as 1 − G with G = 1 − exp(−(x_i − x_j)²): G is zero wherever the
two samples agree, so it stays sparse for sparse X (Cora's word indicators).

The structured input — samples, similar pairs and η — is a
:class:`HighOrderInput`; pairs come as an edge list or as group ids (all
samples of a group are pairwise similar) and are validated with networkx.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import scipy.sparse as sp

from rankopt.data.backends import backend_for, check_matrix
from rankopt.features.base import FeatureMap
from rankopt.graphcut import Labelings, check_edges, max_marginals
from rankopt.hookspecs import hookimpl

__all__ = ["HighOrderFeatureMap", "HighOrderInput", "check_eta", "similar_pairs"]


def check_eta(eta) -> float:
    """η ≥ 0, finite."""
    if isinstance(eta, bool) or not isinstance(eta, (int, float, np.integer, np.floating)):
        raise ValueError(f"expected eta to be a non-negative finite number, got {eta!r} instead")
    if not np.isfinite(eta) or eta < 0:
        raise ValueError(f"expected eta to be a non-negative finite number, got {eta!r} instead")
    return float(eta)


def similar_pairs(n_samples: int, edges=None, groups=None) -> np.ndarray:
    """The similar pairs E over samples 0…n−1 as sorted unique (i, j), i < j.

    Parameters
    ----------
    n_samples : int
    edges : array-like of shape (m, 2), optional
        Pairs of sample indices; direction and repeats are ignored.
    groups : array-like of shape (n_samples,), optional
        A group id per sample; every two samples of a group are similar.

    Give at most one of ``edges`` and ``groups``; with neither, E is empty.
    """
    if edges is not None and groups is not None:
        raise ValueError("expected either edges or groups, got both instead")
    import networkx as nx  # only where a graph is built: loading the plugins (every fit) does not pay for it

    graph = nx.Graph()
    graph.add_nodes_from(range(n_samples))
    if edges is not None:
        graph.add_edges_from(map(tuple, check_edges(edges, n_samples).tolist()))
    elif groups is not None:
        groups = np.asarray(groups)
        if groups.ndim != 1 or groups.shape[0] != n_samples:
            raise ValueError(
                f"expected groups to hold one id per sample ({n_samples}), got an array of shape {groups.shape} instead"
            )
        if groups.dtype.kind == "f" and not np.all(np.isfinite(groups)):
            raise ValueError("expected finite group ids, got NaN or infinity instead")
        _, inverse = np.unique(groups, return_inverse=True)
        order = np.argsort(inverse, kind="stable")
        bounds = np.flatnonzero(np.diff(inverse[order])) + 1
        for members in np.split(order, bounds):
            if members.size > 1:
                graph.add_edges_from(nx.complete_graph(members.tolist()).edges())
    if graph.number_of_nodes() != n_samples:  # pragma: no cover - check_edges guards this
        raise ValueError("similar pairs name unknown samples")
    pairs = np.array(sorted((min(a, b), max(a, b)) for a, b in graph.edges()), dtype=np.intp)
    return pairs.reshape(-1, 2)


@dataclass(frozen=True, eq=False)
class HighOrderInput:
    """The structured input of HOB-/HOAP-SVM: samples, similar pairs and η.

    Build it with :meth:`build`, which validates everything.

    Attributes
    ----------
    X : ndarray, csr_matrix or Dask array (:mod:`rankopt.data.backends`), shape (n, d)
    pairs : ndarray of intp, shape (m, 2)
    eta : float
    gap : ndarray or csr_matrix, shape (m, d)
        G = 1 − Φ = 1 − exp(−(ψ(x_i) − ψ(x_j))²) per pair.
    """

    X: Any  # a dense float array or a CSR matrix
    pairs: np.ndarray
    eta: float
    gap: Any  # a CSR matrix

    @classmethod
    def build(cls, X, edges=None, groups=None, eta=1.0) -> HighOrderInput:
        X = check_matrix(X)
        eta = check_eta(eta)
        pairs = similar_pairs(X.shape[0], edges=edges, groups=groups)
        return cls(X, pairs, eta, _pair_gap(X, pairs))

    @property
    def n_samples(self) -> int:
        return self.X.shape[0]

    @property
    def d(self) -> int:
        return self.X.shape[1]

    @property
    def has_pairwise(self) -> bool:
        """Whether Ψ₂ can be non-zero (some pair and η > 0)."""
        return self.pairs.shape[0] > 0 and self.eta > 0

    def subset(self, index) -> HighOrderInput:
        """The input induced on the samples ``index`` (pairs with both ends kept)."""
        index = np.asarray(index, dtype=np.intp)
        new_id = np.full(self.n_samples, -1, dtype=np.intp)
        new_id[index] = np.arange(index.size)
        ends = new_id[self.pairs]
        keep = (ends >= 0).all(axis=1)
        gap = self.gap[np.flatnonzero(keep)]
        return HighOrderInput(self.X[index], ends[keep], self.eta, gap)


def _pair_gap(X, pairs):
    if sp.issparse(X):
        diff = (X[pairs[:, 0]] - X[pairs[:, 1]]).tocsr().astype(np.float64)
        diff.data = -np.expm1(-(diff.data**2))
        diff.eliminate_zeros()
        return diff
    diff = np.asarray(X[pairs[:, 0]] - X[pairs[:, 1]], dtype=np.float64)
    return -np.expm1(-(diff**2))


class HighOrderFeatureMap(FeatureMap):
    """Ψ(X, Y) of eqs. (4)–(5) over a :class:`HighOrderInput`.

    The per-sample contract of :class:`FeatureMap` reads here: ``scores`` are
    the ranking scores s_i = m_i⁺ − m_i⁻ (eq. 11, max-marginal differences)
    and ``combine(X, Y)`` is Ψ(X, Y) of a labeling Y.
    """

    name = "high_order"

    def n_features(self, X: HighOrderInput) -> int:
        return 3 * X.d

    def split(self, X: HighOrderInput, w: np.ndarray):
        """(w⁺, w⁻, w₂), views of w."""
        d = X.d
        w = np.asarray(w, dtype=np.float64)
        if w.shape != (3 * d,):
            raise ValueError(f"expected w of shape ({3 * d},), got {w.shape} instead")
        return w[:d], w[d : 2 * d], w[2 * d :]

    def unary_scores(self, X: HighOrderInput, w) -> tuple[np.ndarray, np.ndarray]:
        """(X w⁺, X w⁻): the score of labelling each sample 1 and 0."""
        w_pos, w_neg, _ = self.split(X, w)
        backend = backend_for(X.X)
        return (
            np.asarray(backend.scores(X.X, w_pos), dtype=np.float64),
            np.asarray(backend.scores(X.X, w_neg), dtype=np.float64),
        )

    def edge_penalties(self, X: HighOrderInput, w) -> np.ndarray:
        """−η Φ_e·w₂ per pair; non-negative when w₂ ≤ 0."""
        _, _, w_pair = self.split(X, w)
        if X.pairs.shape[0] == 0:
            return np.zeros(0)
        phi_w = w_pair.sum() - np.asarray(X.gap @ w_pair, dtype=np.float64).ravel()
        penalty = -X.eta * phi_w
        # Φ·w₂ with w₂ ≤ 0 is ≤ 0 exactly; computing it as Σw₂ − G·w₂ can leave
        # rounding residue of either sign, which must not read as w₂ > 0.
        residue = 1e-12 * X.eta * (np.abs(w_pair).sum() + 1.0)
        penalty[(penalty < 0) & (penalty > -residue)] = 0.0
        return penalty

    def energy(self, X: HighOrderInput, w):
        """(unary1, unary0, edges, edge_penalty) for :mod:`rankopt.graphcut`."""
        u1, u0 = self.unary_scores(X, w)
        return u1, u0, X.pairs, self.edge_penalties(X, w)

    def scores(self, X: HighOrderInput, w) -> np.ndarray:
        """s_i = m_i⁺ − m_i⁻ (eq. 11) for every sample; needs w₂ ≤ 0."""
        m_plus, m_minus = max_marginals(*self.energy(X, w))
        return m_plus - m_minus

    def _assemble(self, X: HighOrderInput, label_sum, total, cut_sum) -> np.ndarray:
        """Σ_k c_k Ψ(X, Y_k) from u = Σ c_k Y_k, Σ c_k and v = Σ c_k cut(Y_k)."""
        label_sum = np.asarray(label_sum, dtype=np.float64)
        backend = backend_for(X.X)
        first = backend.combine(X.X, label_sum)
        second = backend.combine(X.X, total - label_sum)
        if X.pairs.shape[0]:
            cut_sum = np.asarray(cut_sum, dtype=np.float64)
            phi_sum = cut_sum.sum() - np.asarray(X.gap.T @ cut_sum, dtype=np.float64).ravel()
            third = X.eta * phi_sum
        else:
            third = np.zeros(X.d)
        return np.concatenate([first, second, third])

    def joint_feature(self, X: HighOrderInput, labels) -> np.ndarray:
        """Ψ(X, Y) for one labeling Y ∈ {0,1}ⁿ."""
        labels = np.asarray(labels)
        if labels.shape != (X.n_samples,) or not (labels.dtype == np.bool_ or ((labels == 0) | (labels == 1)).all()):
            raise ValueError(f"expected a labeling of {X.n_samples} values in {{0, 1}}, got {labels!r} instead")
        y = labels.astype(np.float64)
        cut = (labels[X.pairs[:, 0]] != labels[X.pairs[:, 1]]).astype(np.float64)
        return self._assemble(X, y, 1.0, cut)

    def combine(self, X: HighOrderInput, coef) -> np.ndarray:
        """Ψ(X, Y) for the labeling Y = ``coef`` ∈ {0,1}ⁿ."""
        return self.joint_feature(X, coef)

    def combine_labelings(self, X: HighOrderInput, labelings: Labelings, coef) -> np.ndarray:
        """Σ_k coef_k Ψ(X, Y_k) over the rows of ``labelings``, without densifying them."""
        coef = np.asarray(coef, dtype=np.float64)
        return self._assemble(
            X, labelings.weighted_sum(coef), float(coef.sum()), labelings.weighted_cut_sum(coef, X.pairs)
        )


@hookimpl
def rankopt_feature_maps():
    return [HighOrderFeatureMap]
