"""rankopt.graphcut against brute force over all 2ⁿ labelings and a networkx min-cut reference."""

import itertools
import subprocess
import sys
import tempfile
import textwrap

import networkx as nx
import numpy as np
import pytest

from rankopt.graphcut import Labelings, check_edges, loss_augmented_labeling, max_marginals, maximize


def all_labelings(n):
    return np.array(list(itertools.product([False, True], repeat=n)), dtype=bool).reshape(-1, n)


def brute_scores(Y, u1, u0, edges, penalty):
    """score(Y) for every row of Y, straight from the definition."""
    unary = np.where(Y, u1, u0).sum(axis=1)
    if len(edges) == 0:
        return unary
    cut = Y[:, edges[:, 0]] != Y[:, edges[:, 1]]
    return unary - (cut * penalty).sum(axis=1)


def random_problem(rng, n, density=None, integer=False, penalty_scale=1.0):
    pairs = [(a, b) for a in range(n) for b in range(a + 1, n)]
    density = rng.uniform(0, 1) if density is None else density
    keep = [p for p in pairs if rng.uniform() < density]
    edges = np.array(keep, dtype=np.intp).reshape(-1, 2)
    flip = rng.uniform(size=len(edges)) < 0.5
    edges[flip] = edges[flip, ::-1]
    u1, u0 = rng.normal(size=n), rng.normal(size=n)
    penalty = rng.exponential(size=len(edges)) * penalty_scale
    if integer:  # many ties
        u1, u0, penalty = np.round(u1), np.round(u0), np.round(penalty)
    return u1, u0, edges, penalty


@pytest.mark.parametrize("n", [1, 2, 3, 5, 8, 12])
def test_max_marginals_match_brute_force(rng, n):
    Y = all_labelings(n)
    for trial in range(12 if n < 12 else 3):
        u1, u0, edges, penalty = random_problem(
            rng, n, integer=trial % 3 == 0, penalty_scale=[0.0, 0.3, 1.0, 3.0][trial % 4]
        )
        scores = brute_scores(Y, u1, u0, edges, penalty)
        expect_plus = np.array([scores[Y[:, i]].max() for i in range(n)])
        expect_minus = np.array([scores[~Y[:, i]].max() for i in range(n)])
        m_plus, m_minus, plus, minus = max_marginals(u1, u0, edges, penalty, return_labelings=True)
        np.testing.assert_allclose(m_plus, expect_plus, atol=1e-9)
        np.testing.assert_allclose(m_minus, expect_minus, atol=1e-9)
        # The returned labelings attain the max-marginals and fix their node.
        P, M = plus.toarray(), minus.toarray()
        assert P[np.arange(n), np.arange(n)].all() and not M[np.arange(n), np.arange(n)].any()
        np.testing.assert_allclose(brute_scores(P, u1, u0, edges, penalty), expect_plus, atol=1e-9)
        np.testing.assert_allclose(brute_scores(M, u1, u0, edges, penalty), expect_minus, atol=1e-9)
        np.testing.assert_allclose(plus.scores(u1, u0, edges, penalty), expect_plus, atol=1e-9)
        # plain return value
        a, b = max_marginals(u1, u0, edges, penalty)
        np.testing.assert_array_equal(a, m_plus)
        np.testing.assert_array_equal(b, m_minus)


def test_maximize_matches_brute_force(rng):
    for n in (1, 4, 9):
        Y = all_labelings(n)
        for _ in range(10):
            u1, u0, edges, penalty = random_problem(rng, n)
            labels, value = maximize(u1, u0, edges, penalty)
            scores = brute_scores(Y, u1, u0, edges, penalty)
            assert value == pytest.approx(scores.max(), abs=1e-9)
            assert brute_scores(labels[None], u1, u0, edges, penalty)[0] == pytest.approx(value, abs=1e-9)


def test_labelings_weighted_sums(rng):
    u1, u0, edges, penalty = random_problem(rng, 10, density=0.4)
    _, _, plus, minus = max_marginals(u1, u0, edges, penalty, return_labelings=True)
    for labelings in (plus, minus):
        dense = labelings.toarray()
        coef = rng.normal(size=10)
        np.testing.assert_allclose(labelings.weighted_sum(coef), coef @ dense)
        cuts = dense[:, edges[:, 0]] != dense[:, edges[:, 1]]
        np.testing.assert_allclose(labelings.weighted_cut_sum(coef, edges), coef @ cuts)
        sub = labelings.rows([3, 1])
        np.testing.assert_array_equal(sub.toarray(), dense[[3, 1]])


def nx_max_score(u1, u0, edges, penalty, clamp=None):
    """max score by networkx's min cut on the same construction, optionally with y_i fixed."""
    g = nx.DiGraph()
    g.add_nodes_from(["s", "t"])
    n = len(u1)
    for i in range(n):
        d = u1[i] - u0[i]
        g.add_edge("s", i, capacity=max(d, 0.0))
        g.add_edge(i, "t", capacity=max(-d, 0.0))
    for (a, b), p in zip(edges, penalty, strict=True):
        for x, y in ((a, b), (b, a)):
            if g.has_edge(x, y):
                g[x][y]["capacity"] += p
            else:
                g.add_edge(x, y, capacity=p)
    if clamp is not None:
        i, label = clamp
        g.add_edge("s" if label else i, i if label else "t")  # no capacity: infinite
        del g[("s" if label else i)][(i if label else "t")]["capacity"]
    cut, _ = nx.minimum_cut(g, "s", "t")
    return float(np.maximum(u1, u0).sum()) - cut


def test_max_marginals_match_networkx_min_cut_on_a_few_hundred_nodes(rng):
    n = 300
    graph = nx.gnm_random_graph(n, 900, seed=int(rng.integers(1 << 30)))
    edges = np.array(graph.edges(), dtype=np.intp)
    u1, u0 = rng.normal(size=n), rng.normal(size=n)
    penalty = rng.exponential(0.5, size=len(edges))
    m_plus, m_minus = max_marginals(u1, u0, edges, penalty)
    best = nx_max_score(u1, u0, edges, penalty)
    np.testing.assert_allclose(np.maximum(m_plus, m_minus), best, atol=1e-8)
    for i in rng.choice(n, 12, replace=False):
        assert m_plus[i] == pytest.approx(nx_max_score(u1, u0, edges, penalty, (i, True)), abs=1e-8)
        assert m_minus[i] == pytest.approx(nx_max_score(u1, u0, edges, penalty, (i, False)), abs=1e-8)


@pytest.mark.parametrize("n", [1, 3, 7])
def test_loss_augmented_labeling_matches_brute_force(rng, n):
    Y = all_labelings(n)
    for trial in range(15):
        u1, u0, edges, penalty = random_problem(rng, n, integer=trial % 2 == 0)
        y_true = rng.uniform(size=n) < 0.5
        if n > 1:
            y_true[0], y_true[1] = True, False
        cost = rng.exponential(size=n)
        labels, loss = loss_augmented_labeling(u1, u0, edges, penalty, y_true, cost)
        objective = brute_scores(Y, u1, u0, edges, penalty) + ((Y != y_true) * cost).sum(axis=1)
        got = brute_scores(labels[None], u1, u0, edges, penalty)[0] + loss
        assert got == pytest.approx(objective.max(), abs=1e-9)
        assert loss == pytest.approx(((labels != y_true) * cost).sum())


def test_loss_augmented_default_costs_are_eq7(rng):
    n = 6
    y_true = np.array([1, 1, 0, 0, 0, 0], dtype=bool)
    u1, u0, edges, penalty = random_problem(rng, n)
    Y = all_labelings(n)
    # eq. (7) with J = |N|/|P| = 2: (J·#missed positives + #false positives) / (J|P| + |N|)
    delta = (2 * (~Y[:, :2]).sum(1) + Y[:, 2:].sum(1)) / (2 * 2 + 4)
    objective = brute_scores(Y, u1, u0, edges, penalty) + delta
    labels, loss = loss_augmented_labeling(u1, u0, edges, penalty, y_true)
    k = int((labels * (1 << np.arange(n)[::-1])).sum())
    assert loss == pytest.approx(delta[k])
    assert objective[k] == pytest.approx(objective.max())


def test_bad_input_is_rejected():
    u = np.zeros(3)
    with pytest.raises(ValueError, match="unknown node"):
        max_marginals(u, u, [[0, 3]], [1.0])
    with pytest.raises(ValueError, match="unknown node"):
        max_marginals(u, u, [[-1, 2]], [1.0])
    with pytest.raises(ValueError, match="self-loops"):
        max_marginals(u, u, [[1, 1]], [1.0])
    with pytest.raises(ValueError, match="edge_penalty >= 0"):
        max_marginals(u, u, [[0, 1]], [-0.5])
    with pytest.raises(ValueError, match="finite"):
        max_marginals(u, u, [[0, 1]], [np.nan])
    with pytest.raises(ValueError, match="finite"):
        max_marginals([0, np.nan, 0], u, [[0, 1]], [1.0])
    with pytest.raises(ValueError, match="one edge_penalty per edge"):
        max_marginals(u, u, [[0, 1], [1, 2]], [1.0])
    with pytest.raises(ValueError, match=r"shape \(m, 2\)"):
        max_marginals(u, u, [0, 1, 2], [1.0])
    with pytest.raises(ValueError, match="integer node indices"):
        max_marginals(u, u, [[0.5, 1]], [1.0])
    with pytest.raises(ValueError, match="unary0"):
        max_marginals(u, np.zeros(2), [], [])
    with pytest.raises(ValueError, match="at least one node"):
        max_marginals([], [], [], [])
    with pytest.raises(ValueError, match="y_true"):
        loss_augmented_labeling(u, u, [], [], [0, 1])
    with pytest.raises(ValueError, match="both labels"):
        loss_augmented_labeling(u, u, [], [], [1, 1, 1])
    assert check_edges([], 4).shape == (0, 2)


def test_dynamic_cuts_never_reuse_trees_before_a_plain_maxflow():
    """PyMaxflow exits the process on that misuse; run the edge cases in a child process."""
    code = textwrap.dedent(
        """
        import numpy as np
        from rankopt.graphcut import max_marginals
        for n, edges in [(1, []), (2, []), (2, [[0, 1]]), (4, [[0, 1], [2, 3]])]:
            z = np.zeros(n)
            max_marginals(z, z, edges, np.zeros(len(edges)), return_labelings=True)
            max_marginals(np.arange(n, dtype=float), -np.arange(n, dtype=float), edges, np.ones(len(edges)))
        print("ok")
        """
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=tempfile.gettempdir()
    )  # the checkout would shadow the installed package
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "ok"


def test_labelings_is_public():
    lab = Labelings(np.array([True, False]), __import__("scipy.sparse").sparse.csr_matrix((1, 2)))
    assert lab.shape == (1, 2)


# --------------------------------------------------------------------------
# Issue 14, cases 6 and 7: precision and finiteness for penalties up to the float range


def exact_max_marginals(u1, u0, edges, penalty):
    """m⁺ and m⁻ in exact rational arithmetic over all 2ⁿ labelings."""
    from fractions import Fraction

    n = len(u1)
    U1, U0 = [Fraction(float(v)) for v in u1], [Fraction(float(v)) for v in u0]
    P = [Fraction(float(v)) for v in penalty]
    plus, minus = [None] * n, [None] * n
    for Y in itertools.product([False, True], repeat=n):
        score = sum(U1[i] if Y[i] else U0[i] for i in range(n))
        score -= sum(P[e] for e, (a, b) in enumerate(edges) if Y[a] != Y[b])
        for i in range(n):
            best = plus if Y[i] else minus
            if best[i] is None or score > best[i]:
                best[i] = score
    return plus, minus


@pytest.mark.parametrize("penalty", [1e12, 1e14, 1e16, 1e100, 1e300, 1.7976931348623157e308])
def test_case6_one_huge_penalty_leaves_the_small_max_marginals_exact(penalty):
    m_plus, m_minus = max_marginals([0, 1, 0], [0.5, 0, 0.3], [(0, 1), (1, 2)], [penalty, 0.2])
    np.testing.assert_allclose(m_plus, [1.1, 1.1, 1.0], rtol=1e-15)  # m_plus[2] was 0.7 at 1e16
    np.testing.assert_allclose(m_minus, [0.8, 0.8, 1.1], rtol=1e-15)


def test_case7_duplicate_edges_near_the_float_limit_give_finite_exact_values():
    m_plus, m_minus = max_marginals([1, 2], [0, 0], [(0, 1), (0, 1)], [1e308, 1e308])
    np.testing.assert_array_equal(m_plus, [3.0, 3.0])
    np.testing.assert_array_equal(m_minus, [0.0, 0.0])  # was [0, nan]


def test_max_marginals_exact_to_rounding_for_penalties_across_the_float_range(rng):
    eps = np.finfo(float).eps
    for trial in range(40):
        n = int(rng.integers(2, 8))
        u1, u0, edges, penalty = random_problem(rng, n, density=0.6)
        scale = 10.0 ** rng.uniform(-6, 6)
        u1, u0 = u1 * scale, u0 * scale
        huge = rng.uniform(size=len(edges)) < 0.4
        penalty = np.where(huge, 10.0 ** rng.uniform(-3, 308, size=len(edges)), penalty * scale)
        if len(edges) and trial % 3 == 0:  # repeated pairs, each with its own penalty
            edges = np.vstack([edges, edges[:1]])
            penalty = np.append(penalty, 10.0 ** rng.uniform(100, 308))
        plus, minus = exact_max_marginals(u1, u0, edges, penalty)
        m_plus, m_minus, lab_plus, lab_minus = max_marginals(u1, u0, edges, penalty, return_labelings=True)
        assert np.all(np.isfinite(m_plus)) and np.all(np.isfinite(m_minus))
        # Every score is a sum of inputs, so rounding at the scale of the unaries is all there is.
        tol = 64 * eps * (np.abs(u1).sum() + np.abs(u0).sum())
        np.testing.assert_allclose(m_plus, [float(v) for v in plus], rtol=0, atol=tol)
        np.testing.assert_allclose(m_minus, [float(v) for v in minus], rtol=0, atol=tol)
        Yp, Ym = lab_plus.toarray(), lab_minus.toarray()
        assert Yp[np.arange(n), np.arange(n)].all() and not Ym[np.arange(n), np.arange(n)].any()


def test_unaries_beyond_the_cuts_arithmetic_are_refused():
    with pytest.raises(ValueError, match="rescale"):
        max_marginals([1e308, 1e308], [-1e308, 0], [(0, 1)], [1.0])
    with pytest.raises(ValueError, match="rescale"):
        maximize([1e308, 1e308], [-1e308, 0], [(0, 1)], [1.0])
