"""Exact inference for binary pairwise models with graph cuts (PyMaxflow).

The score of a labeling Y ∈ {0,1}ⁿ is

    score(Y) = Σ_i unary_{y_i}[i] − Σ_{e=(a,b)∈E, y_a≠y_b} edge_penalty[e],

with ``edge_penalty ≥ 0``.  Maximising it is minimising a submodular energy
(Dokania et al. (2014) §3: w₂ ≤ 0 makes the HOB score supermodular), which a
single s-t minimum cut solves exactly (Kolmogorov & Zabih 2004).

Graph construction: label 1 is the source side of the cut.  A node whose
label-1 unary exceeds its label-0 unary by δ > 0 gets a source edge of
capacity δ (cut when it takes label 0), otherwise a sink edge of capacity −δ;
each similar pair gets an edge of capacity ``edge_penalty[e]`` both ways.  The
cut value is then Σ_i max(unary1, unary0) − score(Y).

Max-marginals (eqs. 9–10) use dynamic graph cuts (Kohli & Torr 2005/2006):
after one full max-flow, each node is clamped in turn to the label opposite
to its optimal one by a terminal edge no cut can afford, the flow is
re-optimised from the previous residual graph (``maxflow(reuse_trees=True)``
with the node marked), and the clamp is removed again.  The label the node
already has in the optimum needs no cut: its max-marginal is the optimum
itself.

The clamp's capacity is 2·Σ_i |unary1[i] − unary0[i]|, whatever the edge
penalties: under any clamp, the constant labeling with the clamped label cuts
no edge and costs at most Σ_i |unary1[i] − unary0[i]|, so no minimum cut can
pay the clamp.  A clamp built from the penalties instead (1e16 on one edge)
would be added to and subtracted from residual capacities of the size of the
unaries, rounding them away; this one moves them by rounding at the scale of
the unaries only, so the max-marginals are exact to that rounding for any
finite penalties, however large (an edge heavier than all unaries together is
never cut by an optimal labeling, and its own residual's rounding never
binds).  Unaries whose sums overflow float64 are refused with a ValueError.

PyMaxflow terminates the whole process if ``maxflow(reuse_trees=True)`` runs
on a graph that has not had a plain ``maxflow()`` yet (also on a ``copy()``).
:class:`_DynamicCut` is the only place that reuses trees, and its constructor
runs the plain max-flow, so no code path can reach that state.
"""

from __future__ import annotations

from dataclasses import dataclass

import maxflow
import numpy as np
import scipy.sparse as sp

from rankopt._validation import as_float_vector

__all__ = ["Labelings", "check_edges", "loss_augmented_labeling", "max_marginals", "maximize"]


def check_edges(edges, n_nodes: int, name: str = "edges") -> np.ndarray:
    """Validate an edge list over nodes 0…n_nodes−1: an (m, 2) intp array.

    Unknown nodes, self-loops, non-integer entries and wrong shapes raise a
    ValueError.  Repeated pairs are kept (each contributes its own penalty).
    """
    try:
        arr = np.asarray(edges)
    except Exception as exc:
        raise ValueError(
            f"expected {name} to be an (m, 2) array of node indices, got {type(edges).__name__}: {exc}"
        ) from exc
    if arr.size == 0:
        return np.zeros((0, 2), dtype=np.intp)
    if arr.ndim != 2 or arr.shape[1] != 2:
        raise ValueError(f"expected {name} to have shape (m, 2), got an array of shape {arr.shape} instead")
    if arr.dtype == np.bool_ or not np.issubdtype(arr.dtype, np.number):
        raise ValueError(f"expected {name} to hold integer node indices, got dtype {arr.dtype} instead")
    if not np.issubdtype(arr.dtype, np.integer):
        if not np.all(np.isfinite(arr)) or np.any(arr != np.round(arr)):
            raise ValueError(f"expected {name} to hold integer node indices, got non-integer values instead")
    arr = arr.astype(np.intp)
    bad = (arr < 0) | (arr >= n_nodes)
    if bad.any():
        row = int(np.flatnonzero(bad.any(axis=1))[0])
        raise ValueError(
            f"expected {name} to name nodes 0..{n_nodes - 1}, got the unknown node in edge "
            f"{tuple(arr[row].tolist())} (row {row}) instead"
        )
    loops = arr[:, 0] == arr[:, 1]
    if loops.any():
        row = int(np.flatnonzero(loops)[0])
        raise ValueError(
            f"expected {name} without self-loops, got the edge {tuple(arr[row].tolist())} (row {row}) instead"
        )
    return np.ascontiguousarray(arr)


def _check_problem(unary1, unary0, edges, edge_penalty):
    u1 = as_float_vector(unary1, "unary1").astype(np.float64)
    u0 = as_float_vector(unary0, "unary0").astype(np.float64)
    if u1.size == 0:
        raise ValueError("expected at least one node, got empty unaries instead")
    if u0.shape != u1.shape:
        raise ValueError(f"expected unary0 to have {u1.size} entries like unary1, got {u0.size} instead")
    edges = check_edges(edges, u1.size)
    if edges.shape[0] == 0 and np.size(edge_penalty) == 0:
        penalty = np.zeros(0)
    else:
        penalty = as_float_vector(edge_penalty, "edge_penalty").astype(np.float64)
    if penalty.size != edges.shape[0]:
        raise ValueError(f"expected one edge_penalty per edge ({edges.shape[0]}), got {penalty.size} instead")
    if penalty.size and penalty.min() < 0:
        e = int(np.argmin(penalty))
        raise ValueError(
            f"expected edge_penalty >= 0 (a submodular energy, w2 <= 0), got {penalty[e]!r} for edge "
            f"{tuple(edges[e].tolist())} instead"
        )
    with np.errstate(over="ignore", invalid="ignore"):
        # Every score and every clamped cut lies within these sums (module docstring).
        scale = 4.0 * (np.abs(u1).sum() + np.abs(u0).sum())
    if not np.isfinite(scale):
        raise ValueError(
            "expected unaries whose absolute values sum to less than 4.4e307 (the cut's arithmetic "
            "must stay within float64), got larger unary1/unary0 instead; rescale them"
        )
    return u1, u0, edges, penalty


class _DynamicCut:
    """A solved cut graph whose nodes can be clamped one at a time.

    The constructor runs the plain max-flow; only then may
    ``maxflow(reuse_trees=True)`` be called (see the module docstring).
    """

    def __init__(self, u1, u0, edges, penalty):
        n = u1.size
        self.n = n
        graph = maxflow.Graph[float](n, max(edges.shape[0], 1))
        nodes = graph.add_nodes(n)
        diff = u1 - u0
        graph.add_grid_tedges(np.asarray(nodes), np.maximum(diff, 0.0), np.maximum(-diff, 0.0))
        if edges.shape[0]:
            graph.add_edges(edges[:, 0], edges[:, 1], penalty, penalty)
        self.offset = float(np.maximum(u1, u0).sum())
        # Larger than every cut that keeps a clamp (see the module docstring),
        # and no larger: it is added to and subtracted from residuals.
        imbalance = float(np.abs(diff).sum())
        self.big = 2.0 * imbalance if imbalance > 0 else 1.0
        self.graph = graph
        self._nodes = np.arange(n, dtype=np.intp)
        self.flow = graph.maxflow()
        self.labels = self.segment_labels()

    def segment_labels(self) -> np.ndarray:
        """The current optimal labeling (source side = label 1)."""
        return ~np.asarray(self.graph.get_grid_segments(self._nodes), dtype=bool)

    @property
    def best(self) -> float:
        return self.offset - self.flow

    def clamped(self, i: int, label: bool) -> float:
        """max score with y_i = label; the graph keeps that clamp until :meth:`release`."""
        self._clamp = (i, label)
        if label:
            self.graph.add_tedge(i, self.big, 0.0)
        else:
            self.graph.add_tedge(i, 0.0, self.big)
        self.graph.mark_node(i)
        return self.offset - self.graph.maxflow(reuse_trees=True)

    def release(self) -> None:
        i, label = self._clamp
        if label:
            self.graph.add_tedge(i, -self.big, 0.0)
        else:
            self.graph.add_tedge(i, 0.0, -self.big)
        self.graph.mark_node(i)


@dataclass(frozen=True)
class Labelings:
    """k labelings of n nodes, stored as flips of a common base labeling.

    Row k is ``base XOR flips[k]``.  Max-marginal labelings differ from the
    optimum in few nodes, so this is far smaller than a dense k × n array, and
    the weighted sums a joint feature needs are sparse products.
    """

    base: np.ndarray  # (n,) bool
    flips: sp.csr_matrix  # (k, n), entries 1 where row k differs from base

    @property
    def shape(self) -> tuple[int, int]:
        return self.flips.shape

    def toarray(self) -> np.ndarray:
        """The labelings as a dense (k, n) bool array."""
        return self.base[None, :] ^ (self.flips.toarray() != 0)

    def rows(self, index) -> Labelings:
        return Labelings(self.base, self.flips[np.asarray(index)])

    def _edge_flips(self, edges: np.ndarray) -> sp.csr_matrix:
        """(k, m): 1 where edge e's cut status differs from the base's in row k."""
        n, m = self.base.size, edges.shape[0]
        incidence = sp.csr_matrix((np.ones(2 * m), (edges.T.ravel(), np.tile(np.arange(m), 2))), shape=(n, m))
        touched = (self.flips @ incidence).tocsr()
        touched.data = (touched.data.round() % 2 == 1).astype(np.float64)  # one endpoint flipped
        touched.eliminate_zeros()
        return touched

    def weighted_sum(self, coef) -> np.ndarray:
        """Σ_k coef_k Y_k, shape (n,)."""
        coef = np.asarray(coef, dtype=np.float64)
        sign = 1.0 - 2.0 * self.base
        return self.base * coef.sum() + sign * (self.flips.T @ coef)

    def weighted_cut_sum(self, coef, edges) -> np.ndarray:
        """Σ_k coef_k [y_k,a ≠ y_k,b] for every edge (a, b), shape (m,)."""
        coef = np.asarray(coef, dtype=np.float64)
        edges = np.asarray(edges, dtype=np.intp)
        if edges.shape[0] == 0:
            return np.zeros(0)
        base_cut = self.base[edges[:, 0]] != self.base[edges[:, 1]]
        return base_cut * coef.sum() + (1.0 - 2.0 * base_cut) * (self._edge_flips(edges).T @ coef)

    def scores(self, unary1, unary0, edges, edge_penalty) -> np.ndarray:
        """score(Y_k) of every row (the energy of the module docstring), shape (k,)."""
        u1 = np.asarray(unary1, dtype=np.float64)
        u0 = np.asarray(unary0, dtype=np.float64)
        edges = np.asarray(edges, dtype=np.intp)
        penalty = np.asarray(edge_penalty, dtype=np.float64)
        base_score = float(np.where(self.base, u1, u0).sum())
        gain = np.where(self.base, u0 - u1, u1 - u0)  # change of the unary term when a node flips
        out = base_score + self.flips @ gain
        if edges.shape[0]:
            base_cut = self.base[edges[:, 0]] != self.base[edges[:, 1]]
            out -= float(penalty[base_cut].sum())
            out -= self._edge_flips(edges) @ (penalty * (1.0 - 2.0 * base_cut))
        return np.asarray(out, dtype=np.float64)


def maximize(unary1, unary0, edges, edge_penalty) -> tuple[np.ndarray, float]:
    """The labeling maximising the score (one cut) and its score.

    Returns
    -------
    labels : ndarray of bool, shape (n,)
    score : float
    """
    u1, u0, edges, penalty = _check_problem(unary1, unary0, edges, edge_penalty)
    cut = _DynamicCut(u1, u0, edges, penalty)
    return cut.labels, cut.best


def loss_augmented_labeling(
    unary1, unary0, edges, edge_penalty, y_true, mislabel_cost=None
) -> tuple[np.ndarray, float]:
    """HOB-SVM loss-augmented inference: argmax_Y score(Y) + Δ(Y*, Y), one cut.

    Δ is the weighted 0-1 loss of Dokania et al. (2014) eq. (7): sample i
    costs ``mislabel_cost[i]`` when its label differs from ``y_true[i]``.  It
    decomposes over samples, so it folds into the unaries and the energy stays
    submodular.

    Parameters
    ----------
    unary1, unary0, edges, edge_penalty
        The score, as in :func:`max_marginals`.
    y_true : array-like of bool, shape (n,)
    mislabel_cost : array-like of shape (n,), optional
        Non-negative per-sample costs.  Default: eq. (7) with J = |N|/|P|,
        i.e. 1/(2|P|) per positive and 1/(2|N|) per negative.

    Returns
    -------
    labels : ndarray of bool, shape (n,)
    loss : float
        Δ(Y*, labels).
    """
    u1, u0, edges, penalty = _check_problem(unary1, unary0, edges, edge_penalty)
    y_true = np.asarray(y_true)
    if y_true.shape != u1.shape or not (y_true.dtype == np.bool_ or np.isin(y_true, (0, 1)).all()):
        raise ValueError(f"expected y_true to be {u1.size} labels in {{0, 1}}, got {y_true!r} instead")
    y_true = y_true.astype(bool)
    if mislabel_cost is None:
        from rankopt.losses.zero_one import ZeroOneLoss

        if y_true.all() or not y_true.any():
            raise ValueError("expected y_true to contain both labels for the default eq. (7) costs")
        cost = ZeroOneLoss().sample_weights(y_true)
    else:
        cost = as_float_vector(mislabel_cost, "mislabel_cost").astype(np.float64)
        if cost.shape != u1.shape or cost.min() < 0:
            raise ValueError(f"expected {u1.size} non-negative mislabel costs, got {cost!r} instead")
    u1 = u1 + np.where(y_true, 0.0, cost)
    u0 = u0 + np.where(y_true, cost, 0.0)
    labels = _DynamicCut(u1, u0, edges, penalty).labels
    return labels, float(cost[labels != y_true].sum())


def max_marginals(unary1, unary0, edges, edge_penalty, *, return_labelings: bool = False):
    """Max-marginals of every node by one max-flow plus dynamic graph cuts.

    m⁺[i] = max_{Y: y_i=1} score(Y) and m⁻[i] = max_{Y: y_i=0} score(Y) for

        score(Y) = Σ_i unary_{y_i}[i] − Σ_{(a,b)∈E, y_a≠y_b} edge_penalty[e].

    Parameters
    ----------
    unary1, unary0 : array-like of shape (n,)
        The score of labelling each node 1 and 0.
    edges : array-like of shape (m, 2)
        Node pairs; nodes are 0…n−1, no self-loops.
    edge_penalty : array-like of shape (m,)
        Non-negative cost of a pair taking different labels.
    return_labelings : bool, default False
        Also return the maximising labelings Y_i⁺ and Y_i⁻ of every node.

    Returns
    -------
    m_plus, m_minus : ndarray of float64, shape (n,)
    plus, minus : Labelings, only with ``return_labelings``
        Row i of ``plus`` is a labeling attaining m⁺[i]; likewise ``minus``.
    """
    u1, u0, edges, penalty = _check_problem(unary1, unary0, edges, edge_penalty)
    cut = _DynamicCut(u1, u0, edges, penalty)
    best, optimum = cut.best, cut.labels
    n = u1.size
    opposite = np.empty(n)
    flip_rows: list[np.ndarray] = []
    for i in range(n):
        opposite[i] = cut.clamped(i, not optimum[i])
        if return_labelings:
            flip_rows.append(np.flatnonzero(cut.segment_labels() != optimum))
        cut.release()
    m_plus = np.where(optimum, best, opposite)
    m_minus = np.where(optimum, opposite, best)
    if not (np.all(np.isfinite(m_plus)) and np.all(np.isfinite(m_minus))):  # pragma: no cover - bounded above
        raise ValueError("the max-marginals overflowed float64; rescale the unaries and penalties")
    if not return_labelings:
        return m_plus, m_minus
    counts = np.fromiter((r.size for r in flip_rows), dtype=np.intp, count=n)
    indptr = np.concatenate([[0], np.cumsum(counts)])
    indices = np.concatenate(flip_rows) if n else np.zeros(0, dtype=np.intp)
    flips = sp.csr_matrix((np.ones(indices.size), indices, indptr), shape=(n, n))
    empty = sp.csr_matrix((n, n))
    # Y_i⁺ is the optimum where y_i = 1 already, the clamped cut elsewhere.
    plus = Labelings(optimum, _select_rows(flips, empty, ~optimum))
    minus = Labelings(optimum, _select_rows(flips, empty, optimum))
    return m_plus, m_minus, plus, minus


def _select_rows(a: sp.csr_matrix, b: sp.csr_matrix, take_a: np.ndarray) -> sp.csr_matrix:
    """Row i from ``a`` where take_a[i], else from ``b``."""
    mask = sp.diags(take_a.astype(np.float64))
    return (mask @ a + sp.diags((~take_a).astype(np.float64)) @ b).tocsr()
