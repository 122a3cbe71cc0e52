"""HOB-SVM / HOAP-SVM: the feature map of eqs. (4)–(5), exact inference, CCCP monotonicity, bad input."""

import itertools
import warnings

import numpy as np
import pytest
import scipy.sparse as sp
from oracles.brute_force import brute_force_max

from rankopt import HOAPSVM, HOBSVM
from rankopt.exceptions import ConvergenceWarning
from rankopt.features.high_order import HighOrderFeatureMap, HighOrderInput, similar_pairs
from rankopt.models.high_order import HOAPConvexProblem
from rankopt.plugins import default_registry

FMAP = HighOrderFeatureMap()


def all_labelings(n):
    return np.array(list(itertools.product([False, True], repeat=n)), dtype=bool)


def psi_by_definition(X, pairs, eta, y):
    """Ψ(X, Y) straight from eqs. (4)–(5)."""
    X = np.asarray(X, dtype=float)
    pair_part = np.zeros(X.shape[1])
    for a, b in pairs:
        if y[a] != y[b]:
            pair_part += np.exp(-((X[a] - X[b]) ** 2))
    return np.concatenate([X[y].sum(0), X[~y].sum(0), eta * pair_part])


def random_input(rng, n=7, d=3, eta=0.8, density=0.4, sparse=False):
    X = rng.normal(size=(n, d)).round(1)
    X[rng.uniform(size=X.shape) < 0.4] = 0.0
    edges = [(a, b) for a in range(n) for b in range(a + 1, n) if rng.uniform() < density]
    Xin = sp.csr_matrix(X) if sparse else X
    return X, HighOrderInput.build(Xin, edges=np.array(edges, dtype=int).reshape(-1, 2), eta=eta)


def random_w(rng, d):
    return np.concatenate([rng.normal(size=2 * d), -rng.exponential(size=d)])


def brute_max_marginal_scores(inp, w):
    X = inp.X.toarray() if sp.issparse(inp.X) else inp.X
    Y = all_labelings(inp.n_samples)
    scores = np.array([w @ psi_by_definition(X, inp.pairs, inp.eta, y) for y in Y])
    m_plus = np.array([scores[Y[:, i]].max() for i in range(inp.n_samples)])
    m_minus = np.array([scores[~Y[:, i]].max() for i in range(inp.n_samples)])
    return m_plus - m_minus


# ---------------------------------------------------------------- feature map


@pytest.mark.parametrize("sparse", [False, True])
def test_joint_feature_matches_eqs_4_5(rng, sparse):
    X, inp = random_input(rng, sparse=sparse)
    assert FMAP.n_features(inp) == 9
    for y in all_labelings(7)[::9]:
        np.testing.assert_allclose(FMAP.joint_feature(inp, y), psi_by_definition(X, inp.pairs, 0.8, y))
        np.testing.assert_allclose(FMAP.combine(inp, y.astype(int)), FMAP.joint_feature(inp, y))


def test_score_is_the_graph_cut_energy(rng):
    X, inp = random_input(rng)
    w = random_w(rng, 3)
    u1, u0, edges, penalty = FMAP.energy(inp, w)
    assert np.all(penalty >= 0)
    for y in all_labelings(7)[::5]:
        cut = y[edges[:, 0]] != y[edges[:, 1]]
        energy = np.where(y, u1, u0).sum() - penalty[cut].sum()
        assert energy == pytest.approx(w @ psi_by_definition(X, inp.pairs, 0.8, y))


def test_scores_are_max_marginal_differences(rng):
    for sparse in (False, True):
        _, inp = random_input(rng, sparse=sparse)
        w = random_w(rng, 3)
        np.testing.assert_allclose(FMAP.scores(inp, w), brute_max_marginal_scores(inp, w), atol=1e-9)


def test_combine_labelings(rng):
    from rankopt.graphcut import max_marginals

    X, inp = random_input(rng)
    w = random_w(rng, 3)
    _, _, plus, _ = max_marginals(*FMAP.energy(inp, w), return_labelings=True)
    coef = rng.normal(size=7)
    expected = sum(c * psi_by_definition(X, inp.pairs, 0.8, y) for c, y in zip(coef, plus.toarray(), strict=True))
    np.testing.assert_allclose(FMAP.combine_labelings(inp, plus, coef), expected)


def test_similar_pairs_from_edges_and_groups():
    np.testing.assert_array_equal(similar_pairs(4, edges=[[2, 0], [0, 2], [1, 3]]), [[0, 2], [1, 3]])
    np.testing.assert_array_equal(similar_pairs(5, groups=["a", "b", "a", "c", "a"]), [[0, 2], [0, 4], [2, 4]])
    assert similar_pairs(3).shape == (0, 2)
    with pytest.raises(ValueError, match="unknown node"):
        similar_pairs(3, edges=[[0, 3]])
    with pytest.raises(ValueError, match="self-loops"):
        similar_pairs(3, edges=[[1, 1]])
    with pytest.raises(ValueError, match="either edges or groups"):
        similar_pairs(3, edges=[[0, 1]], groups=[0, 0, 1])
    with pytest.raises(ValueError, match="one id per sample"):
        similar_pairs(3, groups=[0, 1])
    with pytest.raises(ValueError, match="eta"):
        HighOrderInput.build(np.eye(3), eta=-1.0)
    with pytest.raises(ValueError, match="eta"):
        HighOrderInput.build(np.eye(3), eta=np.nan)


def test_plugins_are_registered():
    registry = default_registry()
    assert isinstance(registry.get_feature_map("high_order"), HighOrderFeatureMap)
    assert registry.get_model("high_order_binary").name == "high_order_binary"
    assert registry.get_model("high_order_ap").name == "high_order_ap"
    _, inp = random_input(np.random.default_rng(0))
    y = np.arange(7) < 3
    with pytest.raises(ValueError, match="labeling loss"):
        registry.get_model("high_order_binary").build_problem(inp, y, registry.get_loss("ap"), FMAP, registry=registry)
    with pytest.raises(ValueError, match="rank loss"):
        registry.get_model("high_order_ap").build_problem(
            inp, y, registry.get_loss("zero_one"), FMAP, registry=registry
        )
    with pytest.raises(ValueError, match="HighOrderInput"):
        registry.get_model("high_order_ap").build_problem(
            np.eye(3), y[:3], registry.get_loss("ap"), FMAP, registry=registry
        )


# ------------------------------------------------------------------- HOB-SVM


def test_hob_loss_augmented_inference_matches_brute_force(rng):
    registry = default_registry()
    for trial in range(6):
        X, inp = random_input(rng)
        y = rng.uniform(size=7) < 0.4
        y[:2] = [True, False]
        problem = registry.get_model("high_order_binary").build_problem(
            inp, y, registry.get_loss("zero_one"), FMAP, registry=registry
        )
        w = random_w(rng, 3) * (5 if trial % 2 else 0.3)
        constraint = problem.most_violated(w)
        n_pos, n_neg = y.sum(), (~y).sum()
        best = -np.inf
        for cand in all_labelings(7):
            delta = ((y & ~cand).sum() / (2 * n_pos)) + ((~y & cand).sum() / (2 * n_neg))
            best = max(best, w @ psi_by_definition(X, inp.pairs, 0.8, cand) / 7 + delta)
        assert w @ constraint.feature + constraint.loss == pytest.approx(best, abs=1e-10)


def homophilous_data(rng, n=40, d=4, n_groups=10):
    groups = rng.integers(0, n_groups, n)
    y = (rng.uniform(size=n_groups) < 0.4)[groups] ^ (rng.uniform(size=n) < 0.1)
    y[:2] = [True, False]
    X = rng.normal(size=(n, d)) + 0.6 * y[:, None] * (np.arange(d) == 0)
    return X, y, groups


def test_hob_svm_fit_and_predict(rng):
    X, y, groups = homophilous_data(rng)
    model = HOBSVM(C=10.0, eta=1.0).fit(X, y, groups=groups)
    assert model.converged_
    assert model.unary_coef_.shape == (2, 4) and model.pairwise_coef_.shape == (4,)
    assert np.all(model.pairwise_coef_ <= 0)
    np.testing.assert_allclose(model.coef_[:8], model.unary_coef_.ravel())
    # Ranking scores are exact max-marginal differences on a held-out graph.
    Xt, yt, gt = homophilous_data(rng, n=9, n_groups=3)
    inp = HighOrderInput.build(Xt, groups=gt, eta=1.0)
    np.testing.assert_allclose(
        model.decision_function(Xt, groups=gt), brute_max_marginal_scores(inp, model.coef_), atol=1e-9
    )
    assert 0.0 <= model.score(X, y, groups=groups) <= 1.0
    edges = similar_pairs(40, groups=groups)
    np.testing.assert_allclose(model.decision_function(X, edges=edges), model.decision_function(X, groups=groups))


def test_hob_svm_without_pairs_is_the_first_order_baseline(rng):
    X, y, _ = homophilous_data(rng)
    model = HOBSVM(C=10.0).fit(X, y)
    np.testing.assert_array_equal(model.pairwise_coef_, 0.0)
    w_pos, w_neg = model.unary_coef_
    np.testing.assert_allclose(model.decision_function(X), X @ (w_pos - w_neg), atol=1e-10)


def test_pairs_at_fit_and_prediction_must_match(rng):
    X, y, groups = homophilous_data(rng)
    with_pairs = HOBSVM(C=1.0).fit(X, y, groups=groups)
    with pytest.raises(ValueError, match="expected similar pairs"):
        with_pairs.decision_function(X)
    without = HOBSVM(C=1.0).fit(X, y)
    with pytest.raises(ValueError, match="expected no similar pairs"):
        without.decision_function(X, edges=[[0, 1]])
    with pytest.raises(ValueError, match="features"):
        with_pairs.decision_function(X[:, :2], groups=groups)
    with pytest.raises(ValueError, match="unknown node"):
        with_pairs.decision_function(X, edges=[[0, 40]])


@pytest.mark.parametrize("params, match", [({"eta": -1.0}, "eta"), ({"C": 0}, "C"), ({"tol": -1}, "tol")])
def test_bad_parameters(rng, params, match):
    X, y, groups = homophilous_data(rng)
    for cls in (HOBSVM, HOAPSVM):
        with pytest.raises(ValueError, match=match):
            cls(**params).fit(X, y, groups=groups)
    with pytest.raises(ValueError, match="init"):
        HOAPSVM(init="random").fit(X, y, groups=groups)
    with pytest.raises(ValueError, match="init"):
        HOAPSVM(init=np.zeros(3)).fit(X, y, groups=groups)


# ------------------------------------------------------------------ HOAP-SVM


def test_hoap_convex_bound_is_tight_at_w_t_and_above_elsewhere(rng):
    registry = default_registry()
    for _ in range(4):
        _, inp = random_input(rng, n=6, d=2)
        y = np.array([1, 0, 1, 0, 0, 1], dtype=bool)
        problem = registry.get_model("high_order_ap").build_problem(
            inp, y, registry.get_loss("ap"), FMAP, registry=registry
        )
        w_t = random_w(rng, 2)

        def brute_slack(w):  # the problem scores with Ψ/n
            s = brute_max_marginal_scores(inp, problem.scale * w)
            return brute_force_max("ap", s[y], s[~y]) - (s[y].mean() - s[~y].mean())

        assert problem.slack(w_t) == pytest.approx(brute_slack(w_t), abs=1e-9)
        bound = problem.convexify(w_t)
        assert isinstance(bound, HOAPConvexProblem)
        c = bound.most_violated(w_t)
        assert c.loss + w_t @ c.feature == pytest.approx(brute_slack(w_t), abs=1e-9)  # tight
        for _ in range(3):
            w = random_w(rng, 2)
            c = bound.most_violated(w)
            assert c.loss + w @ c.feature >= brute_slack(w) - 1e-9  # an upper bound


def test_hoap_cccp_objective_never_increases(rng):
    X, y, groups = homophilous_data(rng, n=30)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        model = HOAPSVM(C=10.0, eta=1.0, cccp_max_iter=6, cccp_tol=1e-6).fit(X, y, groups=groups)
    objectives = np.asarray(model.objectives_)
    assert objectives.size >= 2
    assert np.all(np.diff(objectives) <= 1e-12)
    assert np.all(model.pairwise_coef_ <= 0)
    # starts from HOB-SVM's solution, and never ends above it
    hob = HOBSVM(C=10.0, eta=1.0).fit(X, y, groups=groups)
    np.testing.assert_allclose(model.init_coef_, hob.coef_)
    assert 0.0 <= model.score(X, y, groups=groups) <= 1.0


def test_hoap_from_zero_and_from_array(rng):
    X, y, groups = homophilous_data(rng, n=20)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        zero = HOAPSVM(C=1.0, init="zero", cccp_max_iter=3).fit(X, y, groups=groups)
        assert np.all(np.diff(zero.objectives_) <= 1e-12)
        w0 = np.concatenate([np.ones(8), np.full(4, 0.5)])  # w₂ > 0 is clipped
        given = HOAPSVM(C=1.0, init=w0, cccp_max_iter=2).fit(X, y, groups=groups)
    np.testing.assert_array_equal(given.init_coef_[8:], 0.0)


def test_hoap_without_pairs_is_ap_svm_with_c_rescaled(rng):
    """HOAP-SVM with w₂ = 0 is AP-SVM (Prop. 5's factor γ, Ψ/n): C_AP = 2 C / n², w⁺ − w⁻ = AP-SVM's w.

    This pins HOAP-SVM's C units against RankSVM and a brute-force slack: at
    the C of HOB-SVM, HOAP-SVM is ~n² times more regularised than AP-SVM.
    """
    from rankopt import RankSVM

    n, d, C_ap = 7, 3, 5.0
    y = np.array([1, 0, 1, 0, 0, 1, 0], dtype=bool)
    X = rng.normal(size=(n, d)) + 0.8 * y[:, None] * (np.arange(d) == 0)
    a = RankSVM(loss="ap", C=C_ap, tol=1e-8, max_iter=5000).fit(X, y).coef_
    s = X @ a
    ap_objective = 0.5 * a @ a + C_ap * (brute_force_max("ap", s[y], s[~y]) - (s[y].mean() - s[~y].mean()))
    registry = default_registry()
    inp = HighOrderInput.build(X, eta=1.0)
    problem = registry.get_model("high_order_ap").build_problem(
        inp, y, registry.get_loss("ap"), FMAP, registry=registry
    )
    C = n**2 * C_ap / 2
    w_map = np.concatenate([a / 2, -a / 2, np.zeros(d)]) / problem.scale  # the problem's w is coef_ / scale
    assert problem.objective(w_map, C) == pytest.approx(n**2 / 2 * ap_objective, rel=1e-9)
    # AP-SVM's optimum is HOAP-SVM's (convex without pairs): CCCP started there cannot go lower.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        hoap = HOAPSVM(C=C, init=w_map * problem.scale, tol=1e-8, max_iter=5000, cccp_max_iter=5).fit(X, y)
    assert hoap.objectives_[-1] >= hoap.objectives_[0] * (1 - 1e-6)
