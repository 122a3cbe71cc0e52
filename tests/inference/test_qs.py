"""The quicksort-flavoured method "qs" and the dynamic-programming method "dp".

Exactness (developers' guide): on small instances — tied scores, P = 1,
N = 1 and P > N included — both equal the maximum of w·Ψ(X, R) + Δ(R*, R)
over all (P + N)! rankings (``tests/oracles/brute_force.py``); "qs" also
equals the greedy method on many random instances up to |N| = 5,000, and
"dp" equals "qs" where both apply.
"""

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from oracles.brute_force import brute_force_max, ndcg_loss
from oracles.losses import ChakrabartiLoss, PrecisionAtKLoss

import rankopt
from rankopt import api
from rankopt._validation import check_scores
from rankopt.inference import _qs
from rankopt.inference.base import kernel_arguments, ranking_from_ranks
from rankopt.inference.general import DPMethod
from rankopt.inference.qs import QSMethod
from rankopt.losses import APLoss, AUCLoss, CompiledForm, KernelCode, NDCGLoss, PositionDiscountLoss, RankLoss
from rankopt.plugins import default_registry

TOL = 1e-9


class ReciprocalDiscountLoss(PositionDiscountLoss):
    """A third-party member of the discount family, D(i) = 1/i: runs compiled through its table."""

    name = "reciprocal_qs_test"

    def discount(self, positions):
        return 1.0 / np.asarray(positions, dtype=np.float64)


class GeometricPythonLoss(RankLoss):
    """A third-party rank loss without a compiled form (it runs on the Python path).

    Rank-biased discount D(t) = ρ^(t−1), ρ = 0.7 (convex), with O(1) closed forms:
    Z = Σ_{t≤|P|} D(t) = (1 − ρ^|P|)/(1 − ρ), δ_j(i) = (D(i+j−1) − D(|P|+j))/Z.
    """

    name = "geometric_python_qs_test"
    rho = 0.7

    def _z(self, n_pos):
        return (1.0 - self.rho**n_pos) / (1.0 - self.rho)

    def value(self, pattern):
        positions = np.flatnonzero(np.asarray(pattern, dtype=bool)) + 1.0
        return float(1.0 - np.sum(self.rho ** (positions - 1.0)) / self._z(positions.size))

    def delta(self, j, i, n_pos, n_neg):
        j, i = np.asarray(j, dtype=np.float64), np.asarray(i, dtype=np.float64)
        return (self.rho ** (i + j - 2.0) - self.rho ** (n_pos + j - 1.0)) / self._z(n_pos)

    def delta_diff(self, j, i, n_pos, n_neg):
        j, i = np.asarray(j, dtype=np.float64), np.asarray(i, dtype=np.float64)
        return (self.rho - 1.0) * self.rho ** (i + j - 2.0) / self._z(n_pos)


class PythonAPLoss(APLoss):
    """AP on the Python path."""

    name = "ap_python_qs_test"

    def compiled_form(self, n_pos, n_neg):
        return None


class LinearScanQS(QSMethod):
    """ "qs" with AP's median ranks found by the linear scan instead of §5's unimodal search."""

    ap_unimodal_search = False


class TinyBudgetDP(DPMethod):
    """ "dp" forced through the divide-and-conquer recursion down to single negatives."""

    memory_budget = 1


def _oracle_for(loss):
    """The brute-force oracle's loss: independent definitions for the built-ins."""
    if type(loss) is APLoss or type(loss) is PythonAPLoss:
        return "ap"
    if type(loss) is NDCGLoss:
        return "ndcg"
    if type(loss) is AUCLoss:
        return "auc"
    if isinstance(loss, ReciprocalDiscountLoss):
        return lambda pattern: ndcg_loss(pattern, discount=lambda i: 1.0 / i)
    if isinstance(loss, GeometricPythonLoss):
        return lambda pattern: ndcg_loss(pattern, discount=lambda i: 0.7 ** (i - 1))
    return lambda pattern: float(loss.value(np.asarray(pattern, dtype=bool)))


def _run(method, loss, pos, neg):
    """most_violated_ranking with a method instance (registered or a test variant)."""
    assert method.unsupported_reason(loss) is None
    pos, neg = check_scores(pos, neg)
    return ranking_from_ranks(loss, pos, neg, method.interleaving_ranks(loss, pos, neg))


QS_LOSSES = [APLoss(), NDCGLoss(), AUCLoss(), ReciprocalDiscountLoss(), GeometricPythonLoss(), PythonAPLoss()]
QS_IDS = [loss.name for loss in QS_LOSSES]
QS_METHODS = [QSMethod(), LinearScanQS(), DPMethod(), TinyBudgetDP()]
# Every (|P|, |N|) with both ≤ 4, and a few with 5 (P + N ≤ 8 keeps enumeration fast).
SIZES = list(itertools.product(range(1, 5), range(1, 5))) + [(5, 1), (1, 5), (5, 2), (2, 5), (5, 3)]


def _instances(rng, n_pos, n_neg):
    """Continuous scores at three scales, and scores on a tiny grid (ties within and across classes)."""
    for scale in (0.05, 0.5, 3.0):
        yield scale * rng.normal(size=n_pos), scale * rng.normal(size=n_neg)
    for scale in (0.02, 0.3):
        yield scale * rng.integers(0, 3, n_pos).astype(float), scale * rng.integers(0, 3, n_neg).astype(float)
    yield np.full(n_pos, 0.1), np.full(n_neg, 0.1)


# --------------------------------------------------------------------------
# Exactness against brute force


@pytest.mark.parametrize("loss", QS_LOSSES, ids=QS_IDS)
def test_qs_and_dp_equal_brute_force(loss):
    rng = np.random.default_rng(sum(map(ord, loss.name)))
    oracle = _oracle_for(loss)
    for n_pos, n_neg in SIZES:
        for pos, neg in _instances(rng, n_pos, n_neg):
            expected = brute_force_max(oracle, pos, neg)
            for method in QS_METHODS:
                got = _run(method, loss, pos, neg)
                assert got.value == pytest.approx(expected, abs=TOL), (method, n_pos, n_neg, pos, neg)


@pytest.mark.parametrize("k", [1, 2, 3, 5])
def test_dp_equals_brute_force_for_precision_at_k(k):
    loss = PrecisionAtKLoss(k)
    rng = np.random.default_rng(k)
    for n_pos, n_neg in SIZES:
        for pos, neg in _instances(rng, n_pos, n_neg):
            expected = brute_force_max(_oracle_for(loss), pos, neg)
            for method in (DPMethod(), TinyBudgetDP()):
                assert _run(method, loss, pos, neg).value == pytest.approx(expected, abs=TOL)


def test_dp_solves_remark_1_where_greedy_would_fail():
    # Mohapatra et al. (2018) Remark 1: Chakrabarti's discount, negatives 3ε and ε, positive 5ε.

    loss, eps = ChakrabartiLoss(), 0.01
    pos, neg = np.array([5 * eps]), np.array([3 * eps, eps])
    expected = brute_force_max(_oracle_for(loss), pos, neg)
    assert rankopt.most_violated_ranking(loss, pos, neg).value == pytest.approx(expected, abs=TOL)
    assert rankopt.most_violated_ranking(loss, pos, neg, inference="dp").value == pytest.approx(expected, abs=TOL)
    for method in ("qs", "greedy"):
        with pytest.raises(ValueError, match="C3 fails"):
            rankopt.most_violated_ranking(loss, pos, neg, inference=method)


# --------------------------------------------------------------------------
# qs against greedy, and dp against qs, on larger instances


def _random_instance(rng, n_pos, n_neg):
    kind = rng.integers(3)
    if kind == 0:
        return rng.normal(size=n_pos) + rng.uniform(0, 2), rng.normal(size=n_neg)
    if kind == 1:  # coarse grid: many ties
        return rng.integers(0, 5, n_pos) / 4.0, rng.integers(0, 5, n_neg) / 4.0
    # small margins: the loss term decides most ranks
    return 1e-3 * rng.normal(size=n_pos), 1e-3 * rng.normal(size=n_neg)


def test_qs_equals_greedy_on_1000_random_instances():
    rng = np.random.default_rng(2024)
    compiled = [APLoss(), NDCGLoss(), AUCLoss(), ReciprocalDiscountLoss()]
    for k in range(1000):
        if k < 960:
            n_pos, n_neg = int(rng.integers(1, 40)), int(rng.integers(1, 300))
        else:  # a few large ones, P > N among them
            n_pos, n_neg = int(rng.integers(1, 1500)), int(rng.integers(1, 5001))
        loss = compiled[k % len(compiled)]
        pos, neg = _random_instance(rng, n_pos, n_neg)
        greedy = rankopt.most_violated_ranking(loss, pos, neg, inference="greedy")
        for method in (QSMethod(), LinearScanQS()) if isinstance(loss, APLoss) else (QSMethod(),):
            got = _run(method, loss, pos, neg)
            assert got.value == pytest.approx(greedy.value, rel=TOL, abs=1e-12), (k, loss.name, n_pos, n_neg)
        # These sizes stay below the distribution level's threshold: run it forced, too.
        np.testing.assert_array_equal(_bucketed_ranks(loss, pos, neg), greedy.neg_ranks, err_msg=str(k))


def _bucketed_ranks(loss, pos, neg):
    """The compiled qs kernel's ranks with the distribution level forced (about 4 negatives per bucket)."""
    return _kernel_ranks(loss, pos, neg, n_buckets=max(3, neg.size // 4))


def _kernel_ranks(loss, pos, neg, *, unimodal=None, exact_median=False, n_buckets=-1):
    """The compiled qs kernel's ranks under one of its exact strategies."""
    code, table = kernel_arguments(loss, loss.compiled_form(pos.size, neg.size), pos.size, neg.size)
    pos_desc = np.ascontiguousarray(pos[np.argsort(-pos, kind="stable")])
    ranks = np.empty(neg.size, dtype=np.intc)
    if unimodal is None:
        unimodal = code is KernelCode.AP
    _qs.qs_ranks(pos_desc, np.ascontiguousarray(neg), int(code), table, unimodal, ranks, exact_median, n_buckets)
    return ranks


def test_small_input_strategies_equal_greedy_ranks():
    # Below 2**14 negatives the default strategy sorts the negatives and
    # sweeps them (walking the concave part, Algorithm 2 on the sorted block
    # elsewhere); the selection recursion (n_buckets=0) and exact medians are
    # the other exact strategies.  All must give greedy's ranks exactly, on
    # random, tied and small-margin scores, P > N included.
    rng = np.random.default_rng(77)
    compiled = [APLoss(), NDCGLoss(), AUCLoss(), ReciprocalDiscountLoss()]
    for k in range(800):
        if k < 780:
            n_pos, n_neg = int(rng.integers(1, 60)), int(rng.integers(1, 400))
        else:
            n_pos, n_neg = int(rng.integers(1, 3000)), int(rng.integers(200, 16_384))
        loss = compiled[k % len(compiled)]
        pos, neg = _random_instance(rng, n_pos, n_neg)
        greedy = rankopt.most_violated_ranking(loss, pos, neg, inference="greedy").neg_ranks
        for unimodal in (True, False) if isinstance(loss, APLoss) else (None,):
            for options in ({}, {"n_buckets": 0}, {"exact_median": True}):
                got = _kernel_ranks(loss, pos, neg, unimodal=unimodal, **options)
                np.testing.assert_array_equal(got, greedy, err_msg=f"{k} {loss.name} {unimodal} {options}")


def _sweep_sort_cases():
    rng = np.random.default_rng(8)
    yield "one negative", rng.normal(size=4), rng.normal(size=1)
    yield "stack limit", rng.normal(1, 1, 30), rng.normal(size=256)
    yield "heap", rng.normal(1, 1, 30), rng.normal(size=257)
    yield "largest small input", rng.normal(1, 1, 300), rng.normal(size=2**14 - 1)
    # One outlier crowds every other score into the last bucket: the
    # insertion pass gives up and std::sort finishes.
    yield "crowded", rng.normal(0, 1e-9, 20), np.r_[1e6, rng.normal(0, 1e-9, 300)]
    yield "all equal", np.full(5, 0.5), np.full(200, 0.5)
    # The widest span inference accepts (|score| × documents ≤ 2**1016): the bucket map's range is 1.2e304.
    yield "span at the accepted limit", np.array([1.0, -1.0]), np.r_[6e303, -6e303, rng.normal(size=100)]
    yield "ties", rng.integers(0, 4, 15) / 3.0, rng.integers(0, 4, 180) / 3.0
    yield "subnormal", rng.normal(0, 1e-310, 10), rng.normal(0, 1e-310, 150)
    yield "float32", rng.normal(1, 1, 12).astype(np.float32), rng.normal(size=200).astype(np.float32)


@pytest.mark.parametrize("case", list(_sweep_sort_cases()), ids=lambda c: c[0])
def test_small_input_sort_handles_any_scores(case):
    _, pos, neg = case
    for loss in (APLoss(), NDCGLoss(), AUCLoss(), ReciprocalDiscountLoss()):
        greedy = rankopt.most_violated_ranking(loss, pos, neg, inference="greedy").neg_ranks
        np.testing.assert_array_equal(_kernel_ranks(loss, pos, neg), greedy, err_msg=loss.name)
        np.testing.assert_array_equal(rankopt.most_violated_ranking(loss, pos, neg, "qs").neg_ranks, greedy)


class KinkedDiscountLoss(PositionDiscountLoss):
    """A convex discount made of three lines: its second differences are 0 but at two kinks, so they do not
    fall with the position (the walk must take the largest bend still ahead, not the next one)."""

    name = "kinked_discount_qs_test"

    def discount(self, positions):
        t = np.asarray(positions, dtype=np.float64) - 1.0
        return np.maximum(np.maximum(1.0 - 0.08 * t, 0.4 - 0.01 * t), 0.2 / (1.0 + 0.001 * t))


def _discount_walk_instances(rng):
    """Where a position discount's sweep walks (distinct positives) and where it must not (ties, near-ties)."""
    for k in range(240):
        n_pos, n_neg = int(rng.integers(1, 30)), int(rng.integers(1, 300))
        kind = k % 6
        if kind == 0:  # mid-training: positives above, every gap open
            yield rng.normal(1, 1, n_pos), rng.normal(0, 1, n_neg)
        elif kind == 1:  # far apart: the walk starts at the first negative
            yield 1e3 * rng.normal(1, 1, n_pos), 1e3 * rng.normal(0, 1, n_neg)
        elif kind == 2:  # two positives tied: no walk
            pos = rng.normal(1, 1, n_pos)
            pos[-1] = pos[0]
            yield pos, rng.normal(0, 1, n_neg)
        elif kind == 3:  # gaps at rounding's scale
            pos = 1.0 + 1e-13 * np.arange(n_pos)
            yield pos, rng.normal(1, 1e-12, n_neg)
        elif kind == 4:
            yield rng.normal(1, 1, n_pos).astype(np.float32), rng.normal(0, 1, n_neg).astype(np.float32)
        else:  # small margins: the loss term decides most ranks
            yield 1e-3 * rng.normal(size=n_pos), 1e-3 * rng.normal(size=n_neg)
    # The block above the walk start is scanned negative by negative up to 4,096 steps, beyond by the
    # recursion: tied positives (no walk) with 400 negatives × 41 ranks take the recursion.
    pos = rng.normal(1, 1, 40)
    pos[1] = pos[0]
    yield pos, rng.normal(0, 1, 400)


@pytest.mark.parametrize(
    "loss", [NDCGLoss(), ReciprocalDiscountLoss(), KinkedDiscountLoss()], ids=["ndcg", "reciprocal", "kinked"]
)
def test_discount_walk_equals_greedy_and_the_recursion(loss):
    # A position discount's sweep walks the negatives from the j where every f_j is concave (its bends
    # against the positives' gaps); the ranks stay greedy's and the selection recursion's, to the bit, in
    # the single-query kernel and in the batched one.
    rng = np.random.default_rng(40)
    instances = list(_discount_walk_instances(rng))
    for k, (pos, neg) in enumerate(instances):
        greedy = rankopt.most_violated_ranking(loss, pos, neg, inference="greedy").neg_ranks
        np.testing.assert_array_equal(_kernel_ranks(loss, pos, neg), greedy, err_msg=f"{k}")
        np.testing.assert_array_equal(_kernel_ranks(loss, pos, neg, n_buckets=0), greedy, err_msg=f"{k}")
    for dtype in (np.float64, np.float32):
        scores = np.concatenate([np.r_[pos, neg] for pos, neg in instances]).astype(dtype)
        labels = np.concatenate([np.r_[np.ones(pos.size), np.zeros(neg.size)] for pos, neg in instances])
        offsets = np.cumsum([0] + [pos.size + neg.size for pos, neg in instances])
        batch = api.most_violated_rankings(loss, scores, labels, offsets, inference="qs", n_threads=1)
        reference = api.most_violated_rankings_per_query(loss, scores, labels, offsets, inference="greedy")
        np.testing.assert_array_equal(batch.coef, reference.coef)
        np.testing.assert_array_equal(batch.losses, reference.losses)


def test_python_path_qs_equals_greedy():
    rng = np.random.default_rng(5)
    for k, loss in enumerate([GeometricPythonLoss(), PythonAPLoss()] * 8):
        n_pos, n_neg = int(rng.integers(1, 60)), int(rng.integers(1, 1500))
        pos, neg = _random_instance(rng, n_pos, n_neg)
        qs = rankopt.most_violated_ranking(loss, pos, neg, inference="qs")
        greedy = rankopt.most_violated_ranking(loss, pos, neg, inference="greedy")
        assert qs.value == pytest.approx(greedy.value, rel=TOL, abs=1e-12), (k, n_pos, n_neg)


@pytest.mark.parametrize("loss", [APLoss(), NDCGLoss(), PrecisionAtKLoss(7)], ids=["ap", "ndcg", "p@7"])
def test_dp_divide_and_conquer_equals_full_table(loss):
    rng = np.random.default_rng(8)
    for _ in range(6):
        n_pos, n_neg = int(rng.integers(1, 30)), int(rng.integers(1, 120))
        pos, neg = _random_instance(rng, n_pos, n_neg)
        full = _run(DPMethod(), loss, pos, neg)
        assert _run(TinyBudgetDP(), loss, pos, neg).value == pytest.approx(full.value, rel=TOL, abs=1e-12)
        if not isinstance(loss, PrecisionAtKLoss):
            qs = rankopt.most_violated_ranking(loss, pos, neg, inference="qs")
            assert full.value == pytest.approx(qs.value, rel=TOL, abs=1e-12)


def test_qs_many_negatives_few_positives():
    # deep recursion on the negatives, intervals collapse quickly
    rng = np.random.default_rng(9)
    pos, neg = rng.normal(size=3), rng.normal(size=200_000)
    for loss in ("ap", "ndcg"):
        qs = rankopt.most_violated_ranking(loss, pos, neg, inference="qs")
        greedy = rankopt.most_violated_ranking(loss, pos, neg, inference="greedy")
        np.testing.assert_array_equal(qs.neg_ranks, greedy.neg_ranks)


@pytest.mark.parametrize(
    "arrangement", ["random", "ties", "ascending", "descending", "organ_pipe", "three_values", "all_equal"]
)
def test_kernel_split_strategies_equal_greedy_ranks(arrangement):
    # Large blocks are split at a sample median by a branch-free partition,
    # small ones (and all with exact_median) at the exact median: both must
    # give greedy's ranks, on input orders that stress pivot choice.
    rng = np.random.default_rng(len(arrangement))
    for n_pos, n_neg in [(1, 3000), (7, 20000), (150, 9000), (600, 300)]:
        x = np.arange(n_neg, dtype=np.float64)
        neg = {
            "random": rng.normal(size=n_neg),
            "ties": rng.integers(0, 6, n_neg) / 5.0,
            "ascending": x / n_neg,
            "descending": x[::-1] / n_neg,
            "organ_pipe": np.concatenate([x[: n_neg // 2], x[n_neg // 2 :][::-1]]) / n_neg,
            "three_values": np.repeat([0.2, 0.5, 0.8], n_neg // 3 + 1)[:n_neg],
            "all_equal": np.full(n_neg, 0.5),
        }[arrangement]
        pos = rng.uniform(0, 1, n_pos)
        for loss in (APLoss(), NDCGLoss()):
            greedy = rankopt.most_violated_ranking(loss, pos, neg, inference="greedy").neg_ranks
            form = loss.compiled_form(n_pos, n_neg)
            code, table = kernel_arguments(loss, form, n_pos, n_neg)
            pos_desc = np.sort(pos)[::-1].copy()
            for exact_median in (False, True):
                for unimodal in (False, True) if code is KernelCode.AP else (False,):
                    ranks = np.empty(n_neg, dtype=np.intc)
                    _qs.qs_ranks(pos_desc, neg, int(code), table, unimodal, ranks, exact_median)
                    np.testing.assert_array_equal(ranks, greedy)


def _distribution_cases():
    rng = np.random.default_rng(123)
    yield "random", rng.uniform(0, 1, 7), rng.normal(size=3000)
    yield "P > N", rng.normal(0.5, 1, 400), rng.normal(size=300)
    yield "P = 1", rng.normal(size=1), rng.normal(size=2000)
    yield "N = 1", rng.normal(size=5), rng.normal(size=1)
    yield "ties", rng.integers(0, 6, 30) / 5.0, rng.integers(0, 6, 4000) / 5.0
    yield "all equal", np.zeros(20), np.zeros(1000)
    yield "outliers", rng.normal(1, 1, 50), np.concatenate([rng.normal(size=3000), [1e300, -1e300, 7e10]])
    yield "tiny span", 1.0 + rng.integers(0, 4, 10) * 1e-15, 1.0 + rng.integers(0, 5, 3000) * 1e-15
    yield "near zero", rng.normal(0, 1e-300, 20), rng.normal(0, 1e-300, 2000)
    yield "sorted", np.linspace(1, 0, 60), np.linspace(2, -1, 5000)
    yield "float32", rng.normal(1, 1, 40).astype(np.float32), rng.normal(size=3000).astype(np.float32)


@pytest.mark.parametrize("case", list(_distribution_cases()), ids=lambda c: c[0])
def test_distribution_level_equals_greedy_ranks(case):
    # The value-bucketed first level (any bucket count, the automatic one
    # included) must give greedy's ranks: its buckets' rank bounds come from
    # points that need not be scores (bucket edges), and scores outside the
    # sampled range, ties and float32 all go through it.
    _, pos, neg = case
    for loss in (APLoss(), NDCGLoss(), AUCLoss(), ReciprocalDiscountLoss()):
        n_pos, n_neg = pos.size, neg.size
        greedy = rankopt.most_violated_ranking(loss, pos, neg, inference="greedy").neg_ranks
        code, table = kernel_arguments(loss, loss.compiled_form(n_pos, n_neg), n_pos, n_neg)
        pos_desc = np.ascontiguousarray(pos[np.argsort(-pos, kind="stable")])
        for n_buckets in (3, 4, 17, 256, 5000, -1):
            for unimodal in (False, True) if code is KernelCode.AP else (False,):
                ranks = np.empty(n_neg, dtype=np.intc)
                _qs.qs_ranks(pos_desc, neg, int(code), table, unimodal, ranks, False, n_buckets)
                np.testing.assert_array_equal(ranks, greedy, err_msg=f"{loss.name}, {n_buckets} buckets")


def test_distribution_level_used_by_default_on_large_inputs():
    # 2**14 negatives and up go through the distribution level; same ranks as greedy.
    rng = np.random.default_rng(5)
    pos, neg = rng.normal(1, 1, 300), rng.normal(size=50_000)
    for loss in ("ap", "ndcg"):
        qs = rankopt.most_violated_ranking(loss, pos, neg, inference="qs")
        greedy = rankopt.most_violated_ranking(loss, pos, neg, inference="greedy")
        np.testing.assert_array_equal(qs.neg_ranks, greedy.neg_ranks)
        assert qs.value == pytest.approx(greedy.value, rel=TOL)


def test_bucket_count_is_validated():
    ranks = np.empty(3, dtype=np.intc)
    for bad in (2, -2, 2**31):  # bucket ids are 32-bit
        with pytest.raises(ValueError, match="n_buckets"):
            _qs.qs_ranks(np.ones(2), np.zeros(3), int(KernelCode.AUC), np.zeros(1), False, ranks, False, bad)
    with pytest.raises(ValueError, match="size"):
        _qs.bucket_upper_edge(0.0, 1.0, 2**31, 1)


@given(
    top=st.floats(-1e6, 1e6, allow_nan=False) | st.floats(-1e-300, 1e-300, allow_nan=False),
    scale=st.floats(1e-3, 1e12),
    size=st.integers(3, 1 << 16),
    data=st.data(),
)
@settings(max_examples=300, deadline=None)
def test_bucket_upper_edge_is_the_largest_double_in_reach(top, scale, size, data):
    b = data.draw(st.integers(1, size - 1))
    edge, bucket, bucket_above = _qs.bucket_upper_edge(top, scale, size, b)
    assert bucket >= b
    assert bucket_above < b or edge == np.finfo(np.float64).max


@given(
    top=st.floats(-1e6, 1e6, allow_nan=False), scale=st.floats(1e-3, 1e12), size=st.integers(3, 1 << 16), data=st.data()
)
@settings(max_examples=200, deadline=None)
def test_block_and_single_bucket_ids_agree_with_the_edges(top, scale, size, data):
    # The vectorised block map (AVX2 or baseline clone) must equal the scalar
    # one exactly: pass 1 counts with one, upper_edge bounds with the other.
    near = st.floats(top - 4 * size / scale, top + 4 / scale, allow_nan=False, allow_infinity=False)
    scores = np.array(data.draw(st.lists(near | st.floats(allow_nan=False), min_size=1, max_size=600)))
    for dtype in (np.float64, np.float32):
        s = np.clip(scores, np.finfo(dtype).min, np.finfo(dtype).max).astype(dtype)
        block, single = _qs.bucket_ids(s, top, scale, size)
        np.testing.assert_array_equal(block, single)
        assert block.min() >= 0 and block.max() <= size - 1
        for b in np.unique(block[block >= 1]):
            edge = _qs.bucket_upper_edge(top, scale, size, int(b))[0]
            assert np.all(s[block == b].astype(np.float64) <= edge)


def test_python_path_calls_delta_diff_once_per_open_median():
    calls = []

    class Counting(GeometricPythonLoss):
        name = "counting_qs_test"

        def delta_diff(self, j, i, n_pos, n_neg):
            calls.append(np.size(i))
            return super().delta_diff(j, i, n_pos, n_neg)

    loss = Counting()
    QSMethod().unsupported_reason(loss)  # the suitability check calls delta_diff too
    calls.clear()
    rng = np.random.default_rng(10)
    n_pos, n_neg = 8, 4000
    pos, neg = check_scores(rng.normal(size=n_pos), rng.normal(size=n_neg))
    QSMethod().interleaving_ranks(loss, pos, neg)
    # at most |P| medians with an open interval per level, ~log2 |N| levels
    assert 0 < len(calls) <= n_pos * int(np.ceil(np.log2(n_neg + 1)))
    assert sum(calls) <= (n_pos + 1) * int(np.ceil(np.log2(n_neg + 1)))


# --------------------------------------------------------------------------
# Dtypes, the kernel's own contract, ties


def test_float32_scores():
    rng = np.random.default_rng(11)
    for loss in ("ap", "ndcg", "auc"):
        pos = rng.normal(size=30).astype(np.float32)
        neg = rng.normal(size=700).astype(np.float32)
        qs32 = rankopt.most_violated_ranking(loss, pos, neg, inference="qs")
        qs64 = rankopt.most_violated_ranking(loss, pos.astype(np.float64), neg.astype(np.float64), inference="qs")
        greedy32 = rankopt.most_violated_ranking(loss, pos, neg, inference="greedy")
        np.testing.assert_array_equal(qs32.neg_ranks, qs64.neg_ranks)
        assert qs32.value == pytest.approx(greedy32.value, rel=TOL)
    # mixed dtypes are promoted to float64
    mixed = rankopt.most_violated_ranking("ap", pos, neg.astype(np.float64), inference="qs")
    both64 = rankopt.most_violated_ranking("ap", pos.astype(np.float64), neg.astype(np.float64), inference="qs")
    np.testing.assert_array_equal(mixed.neg_ranks, both64.neg_ranks)


def test_kernel_breaks_ties_by_index():
    # equal negatives: the lower index counts as higher, so its rank is never larger
    pos = np.array([0.5, 0.0, -0.5])
    neg = np.zeros(50)
    for loss in ("ap", "ndcg", "auc"):
        ranks = rankopt.most_violated_ranking(loss, pos, neg, inference="qs").neg_ranks
        assert np.all(np.diff(ranks) >= 0)
        greedy = rankopt.most_violated_ranking(loss, pos, neg, inference="greedy").neg_ranks
        np.testing.assert_array_equal(ranks, greedy)


def test_kernel_codes_match_pxd_constants():
    assert _qs.KERNEL_CODES == {code.name: code.value for code in KernelCode}


def test_compiled_delta_diff_matches_losses():
    j, i = np.meshgrid(np.arange(1, 8), np.arange(1, 6), indexing="ij")
    for loss in (APLoss(), NDCGLoss(), AUCLoss(), ReciprocalDiscountLoss()):
        form = loss.compiled_form(5, 7)
        got = _qs.compiled_delta_diff(int(form.code), j, i, 5, 7, form.table)
        np.testing.assert_allclose(got, loss.delta_diff(j, i, 5, 7), rtol=1e-12, atol=1e-15)
    with pytest.raises(ValueError, match="out of range"):
        _qs.compiled_delta_diff(int(KernelCode.AP), 8, 1, 5, 7, None)
    with pytest.raises(ValueError, match="kernel code"):
        _qs.compiled_delta_diff(9, 1, 1, 5, 7, None)


def test_kernel_arguments_validate_the_compiled_form():
    loss = NDCGLoss()
    code, table = kernel_arguments(loss, loss.compiled_form(3, 4), 3, 4)
    assert code is KernelCode.POSITION_DISCOUNT and table.shape == (7,)
    with pytest.raises(RuntimeError, match="shape"):
        kernel_arguments(loss, CompiledForm(KernelCode.POSITION_DISCOUNT, np.ones(3)), 3, 4)
    with pytest.raises(RuntimeError, match="shape"):
        kernel_arguments(loss, CompiledForm(KernelCode.POSITION_DISCOUNT), 3, 4)
    with pytest.raises(RuntimeError, match="code"):
        kernel_arguments(loss, CompiledForm(7), 3, 4)
    for bad in (np.nan, np.inf):
        with pytest.raises(RuntimeError, match="finite table"):
            kernel_arguments(
                loss, CompiledForm(KernelCode.POSITION_DISCOUNT, [1.0, 0.5, bad, 0.2, 0.1, 0.1, 0.1]), 3, 4
            )


def test_compiled_form_checks_its_own_read_only_copy_of_the_table():
    # Checked once, on construction: the kernels trust form.table_is_finite at every call.
    source = np.linspace(1.0, 0.1, 7)
    form = CompiledForm(KernelCode.POSITION_DISCOUNT, source)
    assert form.table_is_finite and form.table.dtype == np.float64 and not form.table.flags.writeable
    source[2] = np.nan  # the caller's array is not the one the kernels read
    assert np.all(np.isfinite(form.table))
    assert kernel_arguments(NDCGLoss(), form, 3, 4)[1] is form.table
    assert not CompiledForm(KernelCode.AP).table_is_finite  # no table at all
    assert CompiledForm(KernelCode.POSITION_DISCOUNT, np.arange(3, dtype=np.int64)).table.dtype == np.float64


# --------------------------------------------------------------------------
# Registration, auto, refusals, bad input


def test_registered_and_chosen_by_auto():
    registry = default_registry()
    names = {info.name for info in rankopt.list_plugins("inference_method")}
    assert {"qs", "dp", "greedy"} <= names
    assert QSMethod.auto_priority == 10 and DPMethod.auto_priority == 1000
    for loss in ("ap", "ndcg", "auc"):
        assert registry.resolve_method("auto", registry.resolve_loss(loss)).name == "qs"
    assert registry.resolve_method("auto", ReciprocalDiscountLoss()).name == "qs"
    # failing C3: only dp is exact
    assert registry.resolve_method("auto", PrecisionAtKLoss(3)).name == "dp"


def test_precision_at_k_refused_by_qs_and_greedy():
    pos, neg = [0.3, 0.1], [0.2, 0.0, -0.1]
    for method in ("qs", "greedy"):
        with pytest.raises(ValueError, match="C3 fails for loss 'precision_at_k_test'") as info:
            rankopt.most_violated_ranking(PrecisionAtKLoss(3), pos, neg, inference=method)
        assert "j=" in str(info.value) and "i=" in str(info.value)
    result = rankopt.most_violated_ranking(PrecisionAtKLoss(3), pos, neg, inference="dp")
    assert result.value == pytest.approx(brute_force_max(_oracle_for(PrecisionAtKLoss(3)), pos, neg), abs=TOL)


@pytest.mark.parametrize("method", ["qs", "dp"])
def test_bad_input(method):
    with pytest.raises(ValueError, match="finite"):
        rankopt.most_violated_ranking("ap", [0.1, np.nan], [0.0], inference=method)
    with pytest.raises(ValueError, match="at least one negative"):
        rankopt.most_violated_ranking("ap", [0.1], [], inference=method)
    with pytest.raises(ValueError, match="1-D"):
        rankopt.most_violated_ranking("ap", [[0.1]], [0.0], inference=method)
    with pytest.raises(ValueError, match="real numbers"):
        rankopt.most_violated_ranking("ap", ["a"], [0.0], inference=method)
    with pytest.raises(ValueError, match="rank loss"):
        rankopt.most_violated_ranking("zero_one", [0.1], [0.0], inference=method)


@pytest.mark.parametrize("n_pos, n_neg", [(3000, 1000), (2000, 2000), (500, 50)])
def test_ap_unimodal_search_equals_the_linear_scan_when_positives_outnumber_negatives(n_pos, n_neg):
    # Regression: with |P| > j the rank interval of a median can start above the
    # concave part 1 … min(|P|, j) + 1; the search must stay inside the interval.
    rng = np.random.default_rng(n_pos + n_neg)
    pos, neg = rng.normal(size=n_pos), rng.normal(size=n_neg)
    linear = QSMethod()
    linear.ap_unimodal_search = False
    expected = linear.interleaving_ranks(APLoss(), pos, neg)
    np.testing.assert_array_equal(QSMethod().interleaving_ranks(APLoss(), pos, neg), expected)
    greedy = rankopt.most_violated_ranking("ap", pos, neg, "greedy")
    assert rankopt.most_violated_ranking("ap", pos, neg, "qs").value == pytest.approx(greedy.value, rel=1e-9)


def test_ranking_from_ranks_refuses_ranks_out_of_range():
    pos, neg = np.array([1.0, 0.5]), np.array([0.2, 0.1, 0.0])
    for bad in ([1, 4, 2], [0, 1, 1], [-3, 1, 1]):
        with pytest.raises(ValueError, match=r"expected ranks in 1\.\.3"):
            ranking_from_ranks(APLoss(), pos, neg, np.array(bad))
    with pytest.raises(ValueError, match="expected 3 ranks"):
        ranking_from_ranks(APLoss(), pos, neg, np.array([1, 2]))


def test_a_method_returning_ranks_out_of_range_is_named():
    from rankopt.hookspecs import hookimpl
    from rankopt.inference.base import InferenceMethod
    from rankopt.plugins import PluginRegistry

    class OffByOne(InferenceMethod):
        name = "off_by_one_test"

        def interleaving_ranks(self, loss, pos_scores, neg_scores):
            return np.full(neg_scores.size, pos_scores.size + 2, dtype=np.intc)

    class Plugin:
        @hookimpl
        def rankopt_inference_methods(self):
            return [OffByOne]

    pm = rankopt.create_plugin_manager()
    pm.register(Plugin(), name="off-by-one")
    with pytest.raises(RuntimeError, match=r"'off_by_one_test' broke its contract: expected ranks in 1\.\.3"):
        rankopt.most_violated_ranking(
            "ap", np.array([1.0, 0.5]), np.array([0.2, 0.1]), inference="off_by_one_test", registry=PluginRegistry(pm)
        )


def test_scores_whose_sums_overflow_are_refused_by_every_method():
    """[1.7e308, 1e308, -1e308] against [0]: greedy returned rank 4, the optimum is 3 (sums overflowed)."""
    for method in ("auto", "qs", "greedy", "select", "search", "dp"):
        with pytest.raises(ValueError, match="sums over a query stay finite"):
            rankopt.most_violated_ranking("ap", [1.7e308, 1e308, -1e308], [0.0], inference=method)
    for loss in ("ndcg", "auc"):
        with pytest.raises(ValueError, match="sums over a query stay finite"):
            rankopt.most_violated_ranking(loss, [1.0], [1e308, -1e308], inference="greedy")
    with pytest.raises(ValueError, match="2\\*\\*120 .* float32"):
        rankopt.most_violated_ranking("ap", np.float32([3e37, 1.0]), np.float32([0.0, -3e37]))
    from rankopt.api import most_violated_rankings

    with pytest.raises(ValueError, match="sums over a query stay finite"):
        most_violated_rankings("ap", [1e308, 1.0, 0.0, 2.0, 1.0, 0.0], [1, 0, 0, 1, 0, 0], [0, 3, 6])


@settings(max_examples=150, deadline=None)
@given(
    n_pos=st.integers(1, 4),
    n_neg=st.integers(1, 4),
    exponent=st.integers(250, 1013),
    seed=st.integers(0, 2**32 - 1),
    loss=st.sampled_from(["ap", "ndcg", "auc"]),
)
def test_huge_scores_below_the_limit_are_exact(n_pos, n_neg, exponent, seed, loss):
    """Every method's optimum equals brute force for scores up to the accepted limit, ties included."""
    rng = np.random.default_rng(seed)
    scale = 2.0**exponent / 8  # |score| × (≤ 8 documents) ≤ 2**exponent ≤ 2**1013
    pos = rng.integers(-3, 4, n_pos) / 3.0 * scale
    neg = rng.integers(-3, 4, n_neg) / 3.0 * scale
    best = brute_force_max(loss, pos, neg)
    for method in ("qs", "greedy", "select", "search", "dp"):
        if method in ("select", "search") and loss != "ap":
            continue
        got = rankopt.most_violated_ranking(loss, pos, neg, inference=method).value
        assert got == pytest.approx(best, rel=1e-12, abs=1e-12), method


def test_ranking_from_ranks_equals_observation_2_written_out(rng):
    """The one-kernel Observation 2 against its NumPy statement (Lemma 6's coefficients), float32 and float64."""
    for dtype in (np.float64, np.float32):
        for n_pos, n_neg in [(1, 1), (1, 7), (7, 1), (9, 4), (40, 300)]:
            pos = rng.normal(size=n_pos).astype(dtype)
            neg = np.round(rng.normal(size=n_neg), 1).astype(dtype)  # ties
            ranks = rng.integers(1, n_pos + 2, size=n_neg)
            got = ranking_from_ranks(APLoss(), pos, neg, ranks)
            scale = 1.0 / (n_pos * n_neg)
            neg_coef = (n_pos + 2.0 - 2.0 * ranks) * scale
            above = np.cumsum(np.bincount(ranks, minlength=n_pos + 2)[1:])[:n_pos]
            order = np.argsort(-pos, kind="stable")
            pos_ranks = np.empty(n_pos, dtype=np.int64)
            pos_ranks[order] = above + 1
            pos_coef = (n_neg + 2.0 - 2.0 * pos_ranks) * scale
            loss = APLoss().value_at_positions(np.arange(1, n_pos + 1) + above, n_neg)
            np.testing.assert_array_equal(got.neg_coef, neg_coef)
            np.testing.assert_array_equal(got.pos_ranks, pos_ranks)
            np.testing.assert_array_equal(got.pos_coef, pos_coef)
            assert got.loss == loss
            expected = pos_coef @ pos.astype(np.float64) + neg_coef @ neg.astype(np.float64) + loss
            assert got.value == pytest.approx(expected, rel=1e-12, abs=1e-12)


def test_observation_kernel_refuses_mismatched_arrays_and_orders():
    from rankopt.inference import _observation

    pos, neg = np.array([1.0, 0.5]), np.array([0.2, 0.1, 0.0])
    ranks = np.array([1, 2, 3])
    out = (np.empty(3), np.empty(2), np.empty(2, dtype=np.int64), np.empty(2, dtype=np.int64))
    with pytest.raises(ValueError, match="permutation of 0..1"):
        _observation.observation_terms(ranks, neg, pos, np.array([0, 2], dtype=np.intp), *out)
    with pytest.raises(ValueError, match="to match"):
        _observation.observation_terms(ranks, neg[:2], pos, np.array([0, 1], dtype=np.intp), *out)
    with pytest.raises(ValueError, match="at least one positive"):
        empty = (a[:0] for a in out[1:])
        _observation.observation_terms(ranks, neg, pos[:0], np.empty(0, dtype=np.intp), out[0], *empty)


@pytest.mark.parametrize("where", ["pos", "neg"])
@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_check_scores_names_the_non_finite_side(where, bad, dtype):
    pos, neg = np.array([1.0, 0.5, 0.2], dtype=dtype), np.array([0.3, 0.1], dtype=dtype)
    (pos if where == "pos" else neg)[1] = bad
    with pytest.raises(ValueError, match=f"expected {where}_scores to be finite"):
        check_scores(pos, neg)
    with pytest.raises(ValueError, match=f"expected {where}_scores to be finite"):  # the converting path too
        check_scores(list(pos), neg[::-1][::-1].copy() if where == "pos" else neg[::-1])


def test_solve_ranking_equals_the_looked_up_call(rng):
    from rankopt.inference.base import solve_ranking

    registry = default_registry()
    for name in ("ap", "auc", "ndcg"):
        loss = registry.resolve_loss(name)
        pos, neg = check_scores(rng.normal(size=30), rng.normal(size=200))
        loss.compiled_form(pos.size, neg.size)  # solve_ranking's caller builds it (most_violated_ranking per call)
        solver = registry.resolve_method("auto", loss, pos.size, neg.size)
        got, expected = solve_ranking(loss, pos, neg, solver), rankopt.most_violated_ranking(name, pos, neg)
        assert got.loss == expected.loss and got.value == expected.value
        np.testing.assert_array_equal(got.neg_ranks, expected.neg_ranks)


def test_a_ranking_problem_refuses_scores_it_cannot_infer_on(rng):
    """RankingProblem.infer checks the whole score array once: NaN / inf, and sums that could overflow."""
    registry = default_registry()
    X = rng.normal(size=(12, 3))
    y = np.arange(12) % 3 == 0
    problem = registry.get_model("ranking").build_problem(
        X, y, registry.resolve_loss("ap"), registry.get_feature_map("linear"), registry=registry
    )
    scores = problem.scores(np.ones(3))
    assert problem.infer(scores).loss == rankopt.most_violated_ranking("ap", scores[y], scores[~y]).loss
    for bad in (np.nan, np.inf):
        broken = scores.copy()
        broken[4] = bad
        with pytest.raises(ValueError, match="expected finite scores"):
            problem.infer(broken)
    with pytest.raises(ValueError, match="sums over a query stay finite"):
        problem.infer(scores * 1e306)


def test_the_walks_division_free_ap_test_gives_the_steps_own_verdict():
    """AP's walk decides a step's sign by comparing products where the answer is clear, dividing only near
    the tie.  At scores within a few ulps of each step's zero, on both sides, and far from it, the verdict
    is that of ``_step(…) >= 0.0``, and the near ones take both verdicts."""
    rng = np.random.default_rng(38)
    checked = {True: 0, False: 0}
    for _ in range(300):
        n_pos, n_neg = int(rng.integers(1, 40)), int(rng.integers(1, 200))
        pos_desc = np.sort(rng.normal(0, rng.choice([1e-3, 1.0, 1e3]), n_pos))[::-1].copy()
        scale = 2.0 / (n_pos * n_neg)
        j = rng.integers(1, n_neg + 1, 40)
        i = rng.integers(1, n_pos + 1, 40)
        tie = pos_desc[i - 1] - (i / (n_pos * (i + j - 1.0) * (i + j))) / scale  # step 0 in exact arithmetic
        near = tie + rng.integers(-6, 7, 40) * np.spacing(tie)
        s_neg = np.concatenate([near, tie + rng.normal(0, 1, 40)])
        fast, exact = _qs.walk_step_verdicts(
            pos_desc, s_neg, np.tile(j, 2), np.tile(i, 2), int(KernelCode.AP), n_pos, n_neg, np.zeros(n_pos + n_neg)
        )
        np.testing.assert_array_equal(fast, exact)
        for verdict in (True, False):
            checked[verdict] += int(np.count_nonzero(exact[:40] == verdict))
    assert min(checked.values()) > 1000
