"""Latent AP-SVM, latent SVM and latent SSVM: inference against brute force, CCCP, estimator API."""

import itertools
import warnings

import numpy as np
import pytest
import scipy.sparse as sp

from rankopt import ConvergenceWarning
from rankopt.data.bags import check_bags
from rankopt.estimators.latent import LatentAPSVM, LatentSSVM, LatentSVM
from rankopt.features.linear import LinearFeatureMap
from rankopt.losses.ap import APLoss
from rankopt.models.latent import LatentRankingCCCP, LatentSSVMProblem, LatentSVMCCCP, ssvm_pattern_value
from rankopt.plugins import default_registry

FM = LinearFeatureMap()
AP = APLoss()


def _tiny(rng, n_pos, n_neg, max_size=2, d=2, integer=True):
    """Random tiny bags; integer features make tied scores common."""

    def bag():
        size = int(rng.integers(1, max_size + 1))
        return rng.integers(-2, 3, size=(size, d)).astype(float) if integer else rng.normal(size=(size, d))

    pos, _ = check_bags([bag() for _ in range(n_pos)])
    neg, _ = check_bags([bag() for _ in range(n_neg)])
    return pos, neg


def _bag_rows(bags):
    return [range(bags.offsets[b], bags.offsets[b + 1]) for b in range(bags.n_bags)]


def _psi(X_pos, X_neg, order_is_pos):
    """Ψ(X, Y, H) of eq. (1) for the ranking whose ±-pattern lists the samples in order.

    ``order_is_pos`` is a list of (is_positive, index) from the top.
    """
    n_pos, n_neg = X_pos.shape[0], X_neg.shape[0]
    pos_coef, neg_coef = np.zeros(n_pos), np.zeros(n_neg)
    for a, (is_pos_a, ia) in enumerate(order_is_pos):
        for b, (is_pos_b, ib) in enumerate(order_is_pos):
            if is_pos_a and not is_pos_b:
                y = 1.0 if a < b else -1.0
                pos_coef[ia] += y
                neg_coef[ib] -= y
    scale = 1.0 / (n_pos * n_neg)
    return scale * (X_pos.T @ pos_coef + X_neg.T @ neg_coef)


def _orders(n_pos, n_neg):
    samples = [(True, i) for i in range(n_pos)] + [(False, j) for j in range(n_neg)]
    return itertools.permutations(samples)


def _delta(order):
    return float(AP.value(np.array([is_pos for is_pos, _ in order])))


def _latent_ap_brute(pos_rows, pos, neg, w):
    """max over H_N and all rankings of Δ + w·(Ψ(Y, H) − Ψ(Y*, H)), positives at pos_rows."""
    X_pos = pos.X[list(pos_rows)]
    best = -np.inf
    for neg_rows in itertools.product(*_bag_rows(neg)):
        X_neg = neg.X[list(neg_rows)]
        star = X_pos.mean(0) - X_neg.mean(0)
        for order in _orders(pos.n_bags, neg.n_bags):
            best = max(best, _delta(order) + w @ (_psi(X_pos, X_neg, order) - star))
    return best


def _value(problem, w):
    c = problem.most_violated(w)
    return c.loss - w @ (problem.ground_truth_feature() - c.feature)


def _ap_cccp(pos, neg):
    return LatentRankingCCCP(pos, neg, AP, FM, model="apsvm", inference="greedy", registry=default_registry())


@pytest.mark.parametrize("n_pos, n_neg", [(1, 1), (1, 3), (2, 2), (3, 1), (3, 2)])
def test_latent_ap_loss_augmented_inference_equals_brute_force(rng, n_pos, n_neg):
    for trial in range(4):
        pos, neg = _tiny(rng, n_pos, n_neg, integer=trial % 2 == 0)
        w = rng.normal(size=2) if trial % 2 else rng.integers(-1, 2, size=2).astype(float)
        cccp = _ap_cccp(pos, neg)
        for pos_rows in itertools.product(*_bag_rows(pos)):
            problem = cccp.fixed(np.array(pos_rows))
            assert _value(problem, w) == pytest.approx(_latent_ap_brute(pos_rows, pos, neg, w), abs=1e-9)


@pytest.mark.parametrize("n_pos, n_neg", [(1, 2), (2, 2), (3, 1)])
def test_output_consistent_inference_equals_brute_force(rng, n_pos, n_neg):
    """Prop. 2: min over H_P of the slack is attained at every positive's best candidate."""
    for trial in range(4):
        pos, neg = _tiny(rng, n_pos, n_neg, max_size=3, integer=trial % 2 == 0)
        w = rng.normal(size=2)
        cccp = _ap_cccp(pos, neg)
        brute = min(_latent_ap_brute(rows, pos, neg, w) for rows in itertools.product(*_bag_rows(pos)))
        assert _value(cccp.convexify(w), w) == pytest.approx(brute, abs=1e-9)
        assert cccp.objective(w, 2.0) == pytest.approx(0.5 * w @ w + 2.0 * max(brute, 0.0), abs=1e-9)


@pytest.mark.parametrize("model", ["apsvm", "ssvm"])
def test_cccp_bound_is_an_upper_bound_tight_at_w(rng, model):
    """The convexification at w bounds the objective everywhere and touches it at w: CCCP cannot go up."""
    pos, neg = _tiny(rng, 4, 5, max_size=3, integer=False)
    cccp = LatentRankingCCCP(pos, neg, AP, FM, model=model, inference="greedy", registry=default_registry())
    C = 3.0
    for _ in range(10):
        w, v = rng.normal(size=2), rng.normal(size=2)
        convex = cccp.convexify(w)
        bound = lambda u: 0.5 * u @ u + C * max(0.0, _value(convex, u))  # noqa: E731
        assert bound(w) == pytest.approx(cccp.objective(w, C), abs=1e-9)
        if model == "apsvm":  # exact inference: a true bound everywhere
            assert cccp.objective(v, C) <= bound(v) + 1e-9


def _synthetic_mil(rng, n_pos=12, n_neg=12, d=5, size=(2, 5), sparse=False):
    """Positive bags hide one instance shifted along a direction; everything else is noise."""
    direction = np.zeros(d)
    direction[0] = 3.0
    bags, y = [], []
    for label in [1] * n_pos + [0] * n_neg:
        bag = rng.normal(size=(int(rng.integers(*size)), d))
        if label:
            bag[rng.integers(bag.shape[0])] += direction
        bags.append(sp.csr_matrix(bag) if sparse else bag)
        y.append(label)
    return bags, np.array(y)


@pytest.mark.parametrize("cls", [LatentAPSVM, LatentSVM, LatentSSVM])
def test_fit_monotone_objective_and_learns_the_hidden_instance(rng, cls):
    bags, y = _synthetic_mil(rng)
    kwargs = dict(n_init=2, random_state=0)
    if cls is LatentSSVM:
        kwargs.update(max_iter=40, cccp_max_iter=6)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        model = cls(C=10.0, **kwargs).fit(bags, y)
    assert np.all(np.diff(model.objectives_) <= 1e-12)
    assert model.objective_ == min(model.init_objectives_)
    assert len(model.init_objectives_) == 2
    test_bags, test_y = _synthetic_mil(rng)
    assert model.score(test_bags, test_y) > 0.8
    assert model.decision_function(test_bags).shape == (len(test_bags),)


def test_random_state_reproducible_and_inputs_equivalent(rng):
    bags, y = _synthetic_mil(rng)
    a = LatentAPSVM(C=5.0, n_init=2, random_state=3).fit(bags, y)
    b = LatentAPSVM(C=5.0, n_init=2, random_state=3).fit(bags, y)
    np.testing.assert_array_equal(a.coef_, b.coef_)
    stacked = np.vstack(bags)
    ids = np.repeat(np.arange(len(bags)) * 7, [len(bag) for bag in bags])
    c = LatentAPSVM(C=5.0, n_init=2, random_state=3).fit(stacked, np.repeat(y, [len(bag) for bag in bags]), bags=ids)
    np.testing.assert_allclose(c.coef_, a.coef_, atol=1e-8)
    # CSR products round differently from dense ones, and CCCP is not convex: at the default tol two
    # inner solves a rounding apart can impute different latent choices and end in different local
    # optima. Solved tightly, both reach the same optimum.
    dense = LatentAPSVM(C=5.0, n_init=2, random_state=3, tol=1e-7).fit(bags, y)
    sparse = LatentAPSVM(C=5.0, n_init=2, random_state=3, tol=1e-7).fit([sp.csr_matrix(bag) for bag in bags], y)
    assert sparse.objective_ == pytest.approx(dense.objective_, rel=1e-9)
    np.testing.assert_allclose(sparse.coef_, dense.coef_, atol=1e-6)


def test_two_step_prediction(rng):
    bags, y = _synthetic_mil(rng, n_pos=5, n_neg=5)
    model = LatentAPSVM(C=5.0, n_init=1, random_state=0).fit(bags, y)
    scores = model.decision_function(bags)
    choices = model.latent_choices(bags)
    for bag, score, choice in zip(bags, scores, choices, strict=True):
        candidate_scores = bag @ model.coef_
        assert score == pytest.approx(candidate_scores.max())
        assert choice == int(np.argmax(candidate_scores))


def test_known_candidates_are_the_only_ones_trained_on(rng):
    bags, y = _synthetic_mil(rng, n_pos=4, n_neg=4)
    known = np.array([0, -1, 1, -1, 0, -1, -1, 0])
    data, labels = check_bags(bags, y=y, known=known)
    restricted = data.restrict_to_known()
    np.testing.assert_array_equal(restricted.sizes[known >= 0], 1)
    np.testing.assert_array_equal(restricted.X[restricted.offsets[0]], bags[0][0])
    model = LatentAPSVM(C=5.0, n_init=1, random_state=0).fit(bags, y, known=known)
    assert model.score(bags, y) > 0.5


# ------------------------------------------------------------------ latent SSVM (Appendix C)


def test_ssvm_pattern_assignment_equals_brute_force(rng):
    """For a fixed ranking pattern, the assignment of samples and candidates is exact."""
    for _ in range(20):
        n_pos, n_neg = int(rng.integers(1, 4)), int(rng.integers(1, 4))
        pos, neg = _tiny(rng, n_pos, n_neg, max_size=2, integer=False)
        w = rng.normal(size=2)
        ranks = np.sort(rng.integers(1, n_pos + 2, size=n_neg))
        ps, ns = pos.X @ w, neg.X @ w
        value = ssvm_pattern_value(
            AP, ranks, *pos.best(ps)[:1], *pos.worst(ps)[:1], *neg.best(ns)[:1], *neg.worst(ns)[:1]
        )[0]
        pattern = np.zeros(n_pos + n_neg, dtype=bool)
        pattern[np.arange(n_pos) + np.searchsorted(ranks, np.arange(1, n_pos + 1), side="right")] = True
        best = -np.inf
        for pos_perm in itertools.permutations(range(n_pos)):
            for neg_perm in itertools.permutations(range(n_neg)):
                it_pos, it_neg = iter(pos_perm), iter(neg_perm)
                order = [(True, next(it_pos)) if p else (False, next(it_neg)) for p in pattern]
                for pos_rows in itertools.product(*_bag_rows(pos)):
                    for neg_rows in itertools.product(*_bag_rows(neg)):
                        psi = _psi(pos.X[list(pos_rows)], neg.X[list(neg_rows)], order)
                        best = max(best, _delta(order) + w @ psi)
        assert value == pytest.approx(best, abs=1e-9)


def test_ssvm_greedy_is_a_lower_bound_of_the_exact_maximum(rng):
    for _ in range(5):
        pos, neg = _tiny(rng, 2, 3, integer=False)
        w = rng.normal(size=2)
        cccp = LatentRankingCCCP(pos, neg, AP, FM, model="ssvm")
        problem = cccp.convexify(w)
        value = _value(problem, w)
        X_pos_star = pos.X[cccp.positive_rows(w)]
        X_neg_star = neg.X[neg.best(neg.X @ w)[1]]
        star = w @ (X_pos_star.mean(0) - X_neg_star.mean(0))
        exact = -np.inf
        for order in _orders(2, 3):
            for pos_rows in itertools.product(*_bag_rows(pos)):
                for neg_rows in itertools.product(*_bag_rows(neg)):
                    exact = max(exact, _delta(order) + w @ _psi(pos.X[list(pos_rows)], neg.X[list(neg_rows)], order))
        assert -1e-9 <= value <= exact - star + 1e-9


def _slot_scores(rng, n, integer):
    """Per-sample (best, worst) candidate scores; integer scores tie often, and some bags have one candidate."""
    if integer:
        top = rng.integers(-3, 4, size=n).astype(float)
        return top, top - rng.integers(0, 3, size=n)
    top = rng.normal(size=n)
    return top, top - rng.random(size=n) * (rng.random(size=n) < 0.7)


@pytest.mark.parametrize("integer", [True, False])
def test_incremental_assignment_equals_linear_sum_assignment(rng, integer):
    """After every coefficient change the repaired assignment is optimal (scipy from scratch)."""
    from scipy.optimize import linear_sum_assignment

    from rankopt.models._latent_ssvm import IncrementalAssignment

    for _ in range(60):
        n = int(rng.integers(1, 9))
        top, bottom = _slot_scores(rng, n, integer)
        coef = rng.integers(-4, 5, size=n).astype(float)
        assignment = IncrementalAssignment(top, bottom, coef)
        for _ in range(12):
            gain = np.maximum(np.outer(top, coef), np.outer(bottom, coef))
            rows, cols = linear_sum_assignment(gain, maximize=True)
            assert assignment.total() == pytest.approx(gain[rows, cols].sum(), abs=1e-9)
            slots = assignment.slots()
            assert sorted(slots) == list(range(n))
            assert gain[np.arange(n), slots].sum() == pytest.approx(assignment.total(), abs=1e-12)
            slot = int(rng.integers(n))
            coef[slot] += rng.choice([-2.0, 2.0, 5.0])
            assignment.set_coef(slot, coef[slot])


def test_incremental_assignment_bad_input():
    from rankopt.models._latent_ssvm import IncrementalAssignment

    with pytest.raises(ValueError, match="expected top, bottom and coef of one length"):
        IncrementalAssignment(np.zeros(3), np.zeros(2), np.zeros(3))
    with pytest.raises(ValueError, match="expected a slot in"):
        IncrementalAssignment(np.zeros(3), np.zeros(3), np.zeros(3)).set_coef(3, 1.0)
    with pytest.raises(ValueError, match="expected a finite coefficient"):
        IncrementalAssignment(np.zeros(3), np.zeros(3), np.zeros(3)).set_coef(0, np.nan)
    with pytest.raises(ValueError, match="expected finite top values"):
        IncrementalAssignment(np.array([0.0, np.nan]), np.zeros(2), np.zeros(2))


def test_compiled_greedy_bad_input():
    from rankopt.models._latent_ssvm import greedy_ranks

    one, two = np.zeros(1), np.zeros(2)
    with pytest.raises(ValueError, match="expected a delta table of shape"):
        greedy_ranks(two, two, one, one, np.zeros((1, 2)), 0.0, None)
    with pytest.raises(ValueError, match="expected non-empty classes"):
        greedy_ranks(two, one, one, one, np.zeros((1, 3)), 0.0, None)
    with pytest.raises(ValueError, match="expected finite"):
        greedy_ranks(np.array([np.inf]), one, one, one, np.zeros((1, 2)), 0.0, None)


def _ssvm_problem(loss, n_pos, n_neg):
    """A LatentSSVMProblem shell: greedy_ranks only needs the loss and the sizes."""
    pos, neg = _tiny(np.random.default_rng(0), n_pos, n_neg)
    return LatentSSVMProblem(pos.X[pos.best(pos.X[:, 0])[1]], pos, neg, loss, FM)


@pytest.mark.parametrize("loss_name", ["ap", "ndcg", "auc"])
def test_ssvm_greedy_equals_the_reference_greedy(rng, loss_name):
    """The compiled greedy returns exactly the pure-Python greedy's ranks: ties, P=1, N=1, P>N."""
    from oracles.latent_ssvm import greedy_ranks_reference

    loss = default_registry().resolve_loss(loss_name)
    sizes = [(1, 1), (1, 5), (5, 1), (6, 2), (2, 6)] + [tuple(rng.integers(1, 8, size=2)) for _ in range(40)]
    n_exact = 0
    for n_pos, n_neg in sizes:
        for integer in (True, False):
            scores = _slot_scores(rng, int(n_pos), integer) + _slot_scores(rng, int(n_neg), integer)
            problem = _ssvm_problem(loss, int(n_pos), int(n_neg))
            got = problem.greedy_ranks(*scores)
            np.testing.assert_array_equal(got, greedy_ranks_reference(loss, *scores))
            assert np.all(np.diff(got) >= 0) and got.dtype == np.int64
            n_exact += problem.n_exact_calls
    if loss_name == "auc":  # AUC values are multiples of 1/(|P||N|) on integer scores: exact ties
        assert n_exact > 0  # took the reference tie-break


def test_ssvm_greedy_with_every_comparison_referred_is_the_same(rng):
    """tol = ∞ sends every comparison to the reference value: same ranks (the tie path is sound)."""
    from oracles.latent_ssvm import greedy_ranks_reference

    from rankopt.models import _latent_ssvm

    for _ in range(15):
        n_pos, n_neg = (int(x) for x in rng.integers(1, 6, size=2))
        pm, pn = _slot_scores(rng, n_pos, False)
        nm, nn = _slot_scores(rng, n_neg, False)
        delta = np.ascontiguousarray(
            AP.delta(np.arange(1, n_neg + 1)[:, None], np.arange(1, n_pos + 2)[None, :], n_pos, n_neg)
        )
        calls = []

        def exact(ranks):
            calls.append(ranks.copy())
            return ssvm_pattern_value(AP, ranks, pm, pn, nm, nn)[0]

        ranks, n_exact = _latent_ssvm.greedy_ranks(pm, pn, nm, nn, delta, np.inf, exact)
        np.testing.assert_array_equal(ranks, greedy_ranks_reference(AP, pm, pn, nm, nn))
        assert n_exact == len(calls) > 0
        assert all(np.all(np.diff(r) >= 0) for r in calls)


def test_ssvm_most_violated_equals_the_reference(rng):
    """The whole constraint (feature and loss) is bit-for-bit the reference greedy's."""
    from oracles.latent_ssvm import greedy_ranks_reference

    class Reference(LatentSSVMProblem):
        def greedy_ranks(self, pos_max, pos_min, neg_max, neg_min):
            return greedy_ranks_reference(self.loss, pos_max, pos_min, neg_max, neg_min)

    for k in range(30):
        n_pos, n_neg = (int(x) for x in rng.integers(1, 7, size=2))
        pos, neg = _tiny(rng, n_pos, n_neg, max_size=3, d=3, integer=k % 2 == 0)
        w = rng.integers(-2, 3, size=3).astype(float) if k % 2 == 0 else rng.normal(size=3)
        cccp = LatentRankingCCCP(pos, neg, AP, FM, model="ssvm")
        problem = cccp.convexify(w)
        reference = Reference(problem.X_pos_star, pos, neg, AP, FM)
        got, want = problem.most_violated(w), reference.most_violated(w)
        assert got.loss == want.loss
        np.testing.assert_array_equal(got.feature, want.feature)


# ------------------------------------------------------------------ latent SVM


def test_latent_svm_objective_is_the_trimmed_hinge_minimum(rng):
    """ξ is the minimum over the allowed ignored sets of the weighted hinge loss."""
    pos, neg = _tiny(rng, 2, 3, max_size=3, integer=False)
    robust = 0.3
    cccp = LatentSVMCCCP(pos, neg, FM, J=2.0, robust=robust)
    n_ignore = cccp.n_ignored
    assert n_ignore == min(int(robust * neg.n_candidates), neg.n_candidates - neg.n_bags)
    for _ in range(5):
        w = rng.normal(size=2)
        pos_loss = 2.0 * np.maximum(0, 1 - pos.best(pos.X @ w)[0]).sum()
        neg_hinge = np.maximum(0, 1 + neg.X @ w)
        norm = 2.0 * pos.n_bags + neg.n_candidates - n_ignore
        best = np.inf
        bag_of = neg.bag_of_row()
        for ignored in itertools.combinations(range(neg.n_candidates), n_ignore):
            kept = np.setdiff1d(np.arange(neg.n_candidates), ignored)
            if np.unique(bag_of[kept]).size < neg.n_bags:
                continue
            best = min(best, (pos_loss + neg_hinge[kept].sum()) / norm)
        assert cccp.objective(w, 1.0) == pytest.approx(0.5 * w @ w + best, abs=1e-9)


# ------------------------------------------------------------------ bad parameters


@pytest.mark.parametrize(
    "model, match",
    [
        (LatentAPSVM(C=0), "C"),
        (LatentAPSVM(n_init=0), "n_init"),
        (LatentAPSVM(loss="zero_one"), "rank loss"),
        (LatentAPSVM(inference="nope"), "inference method"),
        (LatentSVM(robust=1.0), "robust"),
        (LatentSVM(J=-1.0), "J"),
        (LatentSSVM(cccp_tol=-1), "cccp_tol"),
    ],
)
def test_bad_parameters(rng, model, match):
    bags, y = _synthetic_mil(rng, n_pos=3, n_neg=3)
    with pytest.raises(ValueError, match=match):
        model.fit(bags, y)


def test_predict_checks_width(rng):
    bags, y = _synthetic_mil(rng, n_pos=3, n_neg=3)
    model = LatentSVM(n_init=1, random_state=0).fit(bags, y)
    with pytest.raises(ValueError, match="features as input, as in fit"):
        model.decision_function([np.ones((2, 3))])
    with pytest.raises(ValueError, match="empty bag"):
        model.decision_function([np.ones((2, 5)), np.ones((0, 5))])


# ------------------------------------------------------------------ the experiment, quick mode


def test_latent_experiment_quick(tmp_path):
    from experiments.latent import run_latent_experiment

    out = tmp_path / "latent.md"
    result = run_latent_experiment(quick=True, output=out, log_file=tmp_path / "folds.jsonl")
    summary = result.summary()
    assert set(summary) == {("musk1", m) for m in ("latent_svm", "latent_ssvm", "latent_apsvm")}
    assert all(0.0 <= s["ap_mean"] <= 1.0 and s["n"] == 2 for s in summary.values())
    text = out.read_text()
    assert "Latent AP-SVM" in text and "musk1 AP" in text
    assert len((tmp_path / "folds.jsonl").read_text().splitlines()) == 6


def test_experiment_gives_the_same_folds_in_parallel():
    from experiments.latent import run_latent_experiment

    serial = run_latent_experiment(quick=True, n_jobs=1)
    parallel = run_latent_experiment(quick=True, n_jobs=2)
    key = lambda r: (r.dataset, r.method, r.seed, r.fold)  # noqa: E731
    assert [key(r) for r in serial.folds] == [key(r) for r in parallel.folds]
    assert [r.ap for r in serial.folds] == pytest.approx([r.ap for r in parallel.folds], abs=1e-12)


def test_experiment_grid_override():
    from experiments.latent import run_latent_experiment

    result = run_latent_experiment(quick=True, methods=("latent_ssvm",), grids={"latent_ssvm": {"C": [10.0, 1.0]}})
    assert result.protocol["grids"] == {"latent_ssvm": {"C": [10.0]}}  # quick: the first grid point
    assert all(r.params == {"C": 10.0} for r in result.folds)
    with pytest.raises(ValueError, match="expected grids for some of the methods run"):
        run_latent_experiment(quick=True, methods=("latent_ssvm",), grids={"latent_svm": {"C": [1.0]}})
    with pytest.raises(ValueError, match="non-empty lists"):
        run_latent_experiment(quick=True, methods=("latent_ssvm",), grids={"latent_ssvm": {"C": []}})


def test_cli_grid_option_parsing():
    from experiments.latent import METHODS, parse_grid_options

    grids = parse_grid_options(["latent_ssvm:C=1,10", "latent_svm:robust=0"])
    assert grids["latent_ssvm"] == {"C": [1.0, 10.0]}
    assert grids["latent_svm"] == {**METHODS["latent_svm"][3], "robust": [0.0]}
    assert parse_grid_options([]) == {}
    for bad in ["latent_ssvm", "latent_ssvm:C", "nope:C=1", "latent_ssvm:C=a,b", "latent_ssvm:=1"]:
        with pytest.raises(ValueError, match="expected"):
            parse_grid_options([bad])
