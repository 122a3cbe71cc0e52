"""The binary, pairwise and graded position kernels of issue 59 (a sort, then linear passes) against slower exact ones.

The batch reads each query in one order — NumPy's sort of packed float32 keys, or the kernel's own sort — and
the QS sweep scans the block above its walk only as far as a step can still be positive.  Both orders, at every
share of relevant documents, with ties, must give the single-query methods' answers bit for bit (those sort
their negatives themselves and, on long queries, select instead of sorting), and the brute force's optimum.
"""

import numpy as np
import pytest

from rankopt import get_loss
from rankopt.api import most_violated_rankings, most_violated_rankings_per_query
from rankopt.inference import _batched, _graded_position, binary_kernels, graded_kernels
from rankopt.inference.batched import PreparedRankings
from rankopt.inference.brute_force import brute_force_most_violated
from rankopt.losses import GradedNDCGLoss
from rankopt.plugins import default_registry

SHARES = [0.01, 0.1, 0.5, 0.9]
#: Every binary loss with the methods its batch runs compiled, and the top-k count.
BINARY = [
    ("ap", "auto"),
    ("ap", "select"),
    ("ap", "search"),
    ("ap", "greedy"),
    ("ndcg", "auto"),
    ("ndcg", "greedy"),
    ("auc", "auto"),
    ("precision_at_k", "auto"),
]


@pytest.fixture(params=["packed", "kernel"])
def order(request, monkeypatch):
    """The two ways a batch is put in order: NumPy's sort of packed keys (forced on every batch of float32
    scores), or each query sorted in the kernel."""
    if request.param == "packed":
        monkeypatch.setattr(binary_kernels, "PACKED_SORT_MIN", 0)
        monkeypatch.setattr(binary_kernels, "PACKED_SORT_MIN_WIDTH", 0)
    else:
        monkeypatch.setattr(binary_kernels, "PACKED_SORT_MIN", np.iinfo(np.int64).max)
    return request.param


def _batch(rng, share, sizes, kind):
    offsets = np.concatenate(([0], np.cumsum(sizes))).astype(np.int64)
    n = int(offsets[-1])
    relevance = (rng.random(n) < share).astype(np.int64)
    if kind == "ties":  # exact ties within and across classes, differences of exactly 1/2
        scores = rng.integers(-4, 5, n) / 4.0
    elif kind == "labels":
        scores = rng.normal(0, 1, n) + relevance
    else:
        scores = rng.normal(0, 1, n)
    return scores.astype(np.float32), relevance, offsets


def assert_same(fast, slow):
    np.testing.assert_array_equal(fast.usable, slow.usable)
    np.testing.assert_array_equal(fast.coef, slow.coef)
    np.testing.assert_array_equal(fast.losses, slow.losses)
    np.testing.assert_allclose(fast.values, slow.values, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("lengths", [(1, 17), (20, 120)], ids=["short", "long"])
@pytest.mark.parametrize("kind", ["normal", "labels", "ties"])
@pytest.mark.parametrize("share", SHARES)
@pytest.mark.parametrize(("loss", "method"), BINARY)
def test_one_order_per_query_gives_the_single_query_methods_answers(order, loss, method, share, kind, lengths):
    """Queries of 1 to 17 documents (at most 16 put in order by counting, unless two scores tie) and of 20 to 120."""
    rng = np.random.default_rng([int(share * 100), len(kind), len(loss), len(method)])
    sizes = rng.integers(lengths[0], lengths[1] + 1, 60 if lengths[0] > 1 else 300)
    scores, relevance, offsets = _batch(rng, share, sizes, kind)
    fast = most_violated_rankings(loss, scores, relevance, offsets, method)
    assert_same(fast, most_violated_rankings_per_query(loss, scores, relevance, offsets, method))


@pytest.mark.parametrize("share", SHARES)
def test_long_queries_swept_in_one_order_equal_the_selection(order, share):
    """Queries of 3·10⁴ documents: the single-query path selects (its distribution level), the batch sweeps the
    sorted negatives."""
    rng = np.random.default_rng(int(share * 100))
    scores, relevance, offsets = _batch(rng, share, [30_000, 20_000], "normal")
    for loss in ["ap", "ndcg", "auc"]:
        fast = most_violated_rankings(loss, scores, relevance, offsets)
        assert_same(fast, most_violated_rankings_per_query(loss, scores, relevance, offsets))


@pytest.mark.parametrize("share", SHARES)
@pytest.mark.parametrize("loss", ["ap", "ndcg", "auc", "precision_at_k"])
def test_the_batchs_optimum_is_the_brute_forces(order, loss, share):
    """Queries of up to 6 documents, tied scores often: the batch's value is the enumeration's maximum."""
    rng = np.random.default_rng([int(share * 100), len(loss)])
    sizes = rng.integers(1, 7, 60)
    scores, relevance, offsets = _batch(rng, share, sizes, "ties")
    relevance[offsets[:-1]] = 1  # at least one relevant document a query, and one other when there are two
    relevance[offsets[1:] - 1] = np.where(sizes > 1, 0, 1)
    fast = most_violated_rankings(loss, scores, relevance, offsets)
    rank_loss = default_registry().get_loss(loss)
    for q in np.flatnonzero(fast.usable):
        lo, hi = offsets[q], offsets[q + 1]
        s, y = scores[lo:hi].astype(np.float64), relevance[lo:hi].astype(bool)
        assert fast.values[q] == pytest.approx(brute_force_most_violated(rank_loss, s[y], s[~y]), abs=1e-12)
    assert np.count_nonzero(fast.usable) > 40


@pytest.mark.parametrize("share", SHARES)
@pytest.mark.parametrize("kind", ["normal", "ties"])
@pytest.mark.parametrize("top_grade", [4, 14, 15, 16])
def test_the_tabled_pairwise_sweeps_equal_the_pair_matrix(share, kind, top_grade):
    """Queries with more than 32 graded documents take the tabled sweeps below 16 levels (grades 0 … 14), the
    loops from 16 levels on; the reference is the O(n²) definition."""
    rng = np.random.default_rng([int(share * 100), len(kind), top_grade])
    sizes = rng.integers(40, 140, 40)
    if top_grade == 4:
        sizes = np.append(sizes, [4_096, 4_097])
    scores, relevance, offsets = _batch(rng, share, sizes, kind)
    grades = relevance * rng.integers(1, top_grade + 1, relevance.size)
    fast = most_violated_rankings("pairwise", scores, grades, offsets)
    assert_same(fast, most_violated_rankings_per_query("pairwise", scores, grades, offsets))


def _pairwise_outputs(scores, grades, offsets, relative, keys):
    """Every output of the unweighted pairwise batch, in the order of ``keys`` (sorted packed keys) or its own."""
    n_queries = offsets.size - 1
    coef = np.full(scores.size, np.nan)
    losses, values, usable = np.zeros(n_queries), np.zeros(n_queries), np.zeros(n_queries, dtype=np.uint8)
    top = int(grades.max(initial=0))
    _batched.pairwise_batch(
        scores, grades, offsets, coef, losses, values, usable, 1, top + 1, None, relative, keys
    )  # fmt: skip
    return coef, losses, values, usable


@pytest.mark.parametrize("kind", ["normal", "labels", "ties", "signed_zeros", "huge"])
@pytest.mark.parametrize("top_grade", [1, 4, 16])
def test_pairwise_queries_read_in_the_packed_order_equal_their_own_sort(kind, top_grade):
    """The pairwise sweeps reading NumPy's sort of packed keys give every output of the kernel's own sort, to the
    bit: 1–300 documents a query (the dense test below 33 above the lowest level, the tabled sweeps, the loops
    from 16 levels), every share, ties, ±0 (one key) and scores at float32's edge, with the truth and without."""
    rng = np.random.default_rng([len(kind), top_grade])
    sizes = rng.integers(1, 301, 120)
    offsets = np.concatenate(([0], np.cumsum(sizes))).astype(np.int64)
    n = int(offsets[-1])
    grades = (rng.random(n) < rng.choice(SHARES, n)) * rng.integers(1, top_grade + 1, n)
    scores = {
        "normal": lambda: rng.normal(0, 1, n),
        "labels": lambda: rng.normal(0, 1, n) + 0.4 * grades,
        "ties": lambda: rng.integers(-4, 5, n) / 4.0,
        "signed_zeros": lambda: rng.choice([-0.0, 0.0, 0.5, -1.0], n),
        "huge": lambda: rng.uniform(-1.0, 1.0, n) * float(np.finfo(np.float32).max),
    }[kind]().astype(np.float32)
    keys = np.empty((sizes.size, int(sizes.max())), dtype=np.uint64)
    _batched.packed_descending_keys(scores, grades, 1, offsets, keys)
    keys.sort(axis=1)
    for relative in (False, True):
        packed = _pairwise_outputs(scores, grades, offsets, relative, keys)
        own = _pairwise_outputs(scores, grades, offsets, relative, None)
        for a, b in zip(packed, own, strict=True):
            np.testing.assert_array_equal(a.view(np.uint8), b.view(np.uint8))


def _pairwise_counts_reference(scores, grades):
    """Each document's pairs kept above a lower grade (A) and kept below a higher one (B), by sorting: for float32
    scores ``(double)s_i − (double)s_j >= 0.5`` is exact, so the documents s_i keeps below it are those of
    ascending scores up to s_i − 0.5."""
    s, levels = scores.astype(np.float64), np.unique(grades, return_inverse=True)[1]
    order = np.argsort(s, kind="stable")
    below_per_level = np.cumsum(levels[order][:, None] < np.arange(levels.max() + 2)[None, :], axis=0)
    below_per_level = np.vstack([np.zeros(levels.max() + 2, dtype=np.int64), below_per_level])
    kept_below = np.searchsorted(s[order], s - 0.5, side="right")  # s_j ≤ s_i − 1/2
    above_from = np.searchsorted(s[order], s + 0.5, side="left")  # s_j ≥ s_i + 1/2
    lower = below_per_level[kept_below, levels]
    n = s.size
    not_higher = below_per_level[n, levels + 1] - below_per_level[above_from, levels + 1]
    return lower, (n - above_from) - not_higher


@pytest.mark.parametrize("top_grade", [4, 14])
def test_long_pairwise_queries_on_both_sides_of_the_tables_length(top_grade):
    """Queries of 2¹⁷ documents sweep with the table, one more with the loops: each one's coefficients and loss
    are those of the pairs' counts (a sorting reference; the pair matrix would hold 10¹⁰ pairs)."""
    rng = np.random.default_rng(top_grade)
    sizes = [2**17, 2**17 + 1]
    offsets = np.concatenate(([0], np.cumsum(sizes))).astype(np.int64)
    scores = rng.normal(0, 2, offsets[-1]).astype(np.float32)
    grades = (rng.random(offsets[-1]) < 0.5) * rng.integers(1, top_grade + 1, offsets[-1])
    fast = most_violated_rankings("pairwise", scores, grades, offsets)
    for q in range(2):
        s, g = scores[offsets[q] : offsets[q + 1]], grades[offsets[q] : offsets[q + 1]]
        lower_kept, higher_kept = _pairwise_counts_reference(s, g)
        levels = np.unique(g, return_inverse=True)[1]
        sizes_by_level = np.bincount(levels)
        lower = np.concatenate(([0], np.cumsum(sizes_by_level)))[levels]
        higher = s.size - lower - sizes_by_level[levels]
        n_pairs = int(np.sum(lower))
        coef = ((2 * lower_kept - lower) - (2 * higher_kept - higher)) / n_pairs
        np.testing.assert_allclose(fast.coef[offsets[q] : offsets[q + 1]], coef, rtol=0, atol=1e-15)
        assert fast.losses[q] == pytest.approx(np.sum(lower - lower_kept) / n_pairs, rel=1e-12)


def test_packed_keys_sort_in_rankopts_order():
    """Keys of ±0.0, subnormals, ±FLT_MAX and ties: their ascending order is descending score, ties by index,
    each key holds its document's index and class, and every key of a document is below the padding's."""
    rng = np.random.default_rng(0)
    special = np.array([0.0, -0.0, 1e-45, -1e-45, 3.4028235e38, -3.4028235e38, 1.0, -1.0], dtype=np.float32)
    scores = np.concatenate([special, rng.choice(special, 40), rng.normal(0, 1, 20).astype(np.float32)])
    grades = rng.integers(0, 4, scores.size).astype(np.int64)
    offsets = np.array([0, scores.size], dtype=np.int64)
    keys = np.empty((1, scores.size + 3), dtype=np.uint64)
    _batched.packed_descending_keys(scores, grades, 2, offsets, keys)
    keys.sort(axis=1)
    index = np.arange(scores.size)
    expected = np.lexsort((index, -scores.astype(np.float64)))
    low = keys[0, : scores.size] & np.uint64(0xFFFFFFFF)
    np.testing.assert_array_equal(low >> np.uint64(1), expected)
    np.testing.assert_array_equal(low & np.uint64(1), grades[expected] >= 2)
    assert np.all(keys[0, scores.size :] == np.iinfo(np.uint64).max)
    assert np.all(keys[0, : scores.size] < np.iinfo(np.uint64).max)


def test_the_packed_sort_is_used_where_it_pays():
    """float32 batches of rows of 17 documents or more; never float64, short rows or mostly padding."""
    offsets, labels = np.arange(0, 8_001, 100, dtype=np.int64), np.zeros(8_000, np.int8)
    assert binary_kernels.packed_sorted_keys(np.zeros(8_000, np.float32), offsets, labels, 1) is not None
    assert binary_kernels.packed_sorted_keys(np.zeros(8_000, np.float64), offsets, labels, 1) is None
    short = np.arange(0, 8_001, 10, dtype=np.int64)
    assert binary_kernels.packed_sorted_keys(np.zeros(8_000, np.float32), short, labels, 1) is None
    unequal = np.array([0, 4_000, *range(4_001, 8_001)], dtype=np.int64)  # one long query, 4,000 of one document
    assert binary_kernels.packed_sorted_keys(np.zeros(8_000, np.float32), unequal, labels, 1) is None


def _ap_query(rng, n, share, kind):
    """One query's (scores, relevance, positives descending, negatives), a relevant first and an irrelevant last
    document: scores at random, following the labels, tied on a grid, or a few ulps apart ("close": steps
    within rounding of 0 around the AP terms)."""
    y = rng.random(n) < share
    y[0], y[-1] = True, False
    if kind == "ties":
        s = rng.integers(-3, 4, n) / 4.0
    elif kind == "close":
        s = 0.25 + rng.integers(-3, 4, n) * np.finfo(np.float64).eps
    else:
        s = rng.normal(0, 1, n) + (y if kind == "labels" else 0.0)
    return s, y, np.sort(s[y])[::-1].copy(), s[~y].copy()


def _assert_the_sweep_is_the_recursion(pos, neg):
    """AP's ranks by the sorted sweep (``qs_ranks``' automatic strategy) and by Algorithm 2's selection
    recursion (``n_buckets=0``), which bisects the concave part and scans each interval to its end."""
    from rankopt.inference import _qs

    swept, recursed = (np.empty(neg.size, dtype=np.intc) for _ in range(2))
    _qs.qs_ranks(pos, neg, 1, np.zeros(1), True, swept)
    _qs.qs_ranks(pos, neg, 1, np.zeros(1), True, recursed, n_buckets=0)
    np.testing.assert_array_equal(swept, recursed)


@pytest.mark.parametrize("share", SHARES)
@pytest.mark.parametrize("kind", ["normal", "labels", "ties", "close"])
def test_the_swept_ap_ranks_equal_the_bisecting_recursion(share, kind):
    """AP's sweep walks the concave part and bounds its scans (``_best_rank_walked``); Algorithm 2's recursion
    (``n_buckets=0``) bisects and scans to the end: the same ranks, on scores tied or a few ulps apart."""
    rng = np.random.default_rng([int(share * 100), len(kind)])
    for _ in range(150):
        _, _, pos, neg = _ap_query(rng, int(rng.integers(2, 160)), share, kind)
        _assert_the_sweep_is_the_recursion(pos, neg)


@pytest.mark.parametrize("share", [0.5, 0.9])
@pytest.mark.parametrize("kind", ["labels", "ties", "close"])
def test_the_bounded_recursion_equals_the_scan_to_the_end(share, kind):
    """A block above the walk too large to scan goes through Algorithm 2's recursion, whose scans stop at the
    first positive not above the median (``_falling_from``): the same ranks as the selection recursion, which
    scans each median's interval to its end, with most documents relevant, ties and steps within rounding."""
    rng = np.random.default_rng([int(share * 100), len(kind)])
    for _ in range(6):
        s, y, pos, neg = _ap_query(rng, int(rng.integers(1_000, 4_000)), share, kind)
        _assert_the_sweep_is_the_recursion(pos, neg)
        offsets = np.array([0, s.size], dtype=np.int64)
        for loss in ["ndcg", "ap"]:
            fast = most_violated_rankings(loss, s.astype(np.float32), y.astype(np.int64), offsets)
            assert_same(fast, most_violated_rankings_per_query(loss, s.astype(np.float32), y.astype(np.int64), offsets))


def _position_outputs(loss, scores, grades, offsets, relative, short_queries, with_levels):
    """Every output of the graded position kernel over one batch, by its short-query path or not."""
    structure = loss.structure()
    longest = int(np.max(np.diff(offsets)))
    level_of, _, level_gains, discount = graded_kernels._levels_and_gains(structure, grades, longest)
    gains = None if with_levels else level_gains[level_of]
    n_queries = offsets.size - 1
    coef = np.full(scores.size, np.nan)
    losses, values, usable = np.zeros(n_queries), np.zeros(n_queries), np.zeros(n_queries, dtype=np.uint8)
    _graded_position.position_batch(
        scores, gains, offsets, discount, coef, losses, values, usable, 1, relative,
        level_of if with_levels else None, level_gains if with_levels else None, short_queries=short_queries,
    )  # fmt: skip
    return coef, losses, values, usable


def _short_batch(rng, n_queries, kind, dtype):
    """Scores, grades 0–4 and offsets of queries of 1 … 17 documents, every share of relevant documents mixed:
    scores of ``kind`` — normal, following the grades, tied on a coarse grid, at the edge of ``dtype``, or ±0
    and 1."""
    sizes = rng.integers(1, 18, n_queries)
    offsets = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
    n = int(offsets[-1])
    grades = (rng.random(n) < rng.choice(SHARES, n)) * rng.integers(1, 5, n)
    scores = {
        "normal": lambda: rng.standard_normal(n),
        "follow": lambda: rng.standard_normal(n) + 0.5 * grades,
        "ties": lambda: rng.integers(-1, 2, n) * 0.37,
        "huge": lambda: rng.uniform(-1.0, 1.0, n) * float(np.finfo(dtype).max),
        "signed_zeros": lambda: rng.choice([-0.0, 0.0, 1.0], n),
    }[kind]().astype(dtype)
    return scores, grades, offsets


@pytest.mark.parametrize("k", [3, 10, 16, 40])
@pytest.mark.parametrize("kind", ["normal", "follow", "ties", "huge"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_short_queries_ranked_by_counting_equal_the_partial_sorts(k, kind, dtype):
    """Queries of 1 … 17 documents (at most 16 within the cutoff are placed by counting, the others by the
    partial sorts): every output equals the general path's to the bit, at every share of relevant documents,
    with tied grades, tied keys (the counting path hands those to the general one), all-equal grades, and
    scores at the edge of the dtype; with the ground truth looked up by level or not."""
    scores, grades, offsets = _short_batch(np.random.default_rng(k), 600, kind, dtype)
    loss = GradedNDCGLoss(k=k)
    for relative in (False, True):
        for with_levels in (False, True):
            counted = _position_outputs(loss, scores, grades, offsets, relative, True, with_levels)
            sorted_ = _position_outputs(loss, scores, grades, offsets, relative, False, with_levels)
            for a, b in zip(counted, sorted_, strict=True):
                np.testing.assert_array_equal(a.view(np.uint8), b.view(np.uint8))


def _binary_outputs(prepared, scores, labels, relevant_from, relative, short_queries):
    """Every output of the binary batch over one prepared batch's queries, by its short-query paths or not."""
    kernel, offsets, (count_loss, count_offsets) = prepared.kernel, prepared.offsets, prepared.count_tables
    n_queries = offsets.size - 1
    coef = np.full(scores.size, np.nan)
    losses, values, usable = np.zeros(n_queries), np.zeros(n_queries), np.zeros(n_queries, dtype=np.uint8)
    _batched.binary_batch(
        scores, labels, offsets, kernel.method_code, kernel.loss_code, kernel.table, kernel.unimodal, coef, losses,
        values, usable, 1, kernel.top_k, count_loss, count_offsets, relative, relevant_from, None,
        short_queries=short_queries,
    )  # fmt: skip
    return coef, losses, values, usable


@pytest.mark.parametrize("loss", ["auc", ("precision_at_k", 3), ("precision_at_k", 10), ("precision_at_k", 20)])
@pytest.mark.parametrize("kind", ["normal", "follow", "ties", "huge", "signed_zeros"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_short_queries_ranked_by_counting_equal_the_walk(loss, kind, dtype):
    """AUC's queries of 1 … 17 documents, and a top-k count's whose cutoff holds every document (at most 16
    ranked by counting each negative's verdicts, the others sorted and walked): every output equals the
    general path's to the bit, at every share of relevant documents, with tied scores (handed to the general
    path), ±0, scores at the edge of the dtype, 0/1 labels as int64 and int8 and grades relevant from 3 on,
    with the ground truth subtracted and without."""
    loss = loss if isinstance(loss, str) else get_loss(loss[0], k=loss[1])
    scores, grades, offsets = _short_batch(np.random.default_rng(len(kind)), 800, kind, dtype)
    for relevant_at in (1, 3):
        labels = grades if relevant_at > 1 else (grades > 0).astype(np.int64)
        prepared = PreparedRankings(loss, labels, offsets, relevant_at=relevant_at, registry=default_registry())
        for narrow in (np.int64, np.int8):
            for relative in (False, True):
                args = (prepared._prepared, scores, labels.astype(narrow), relevant_at, relative)
                counted, walked = _binary_outputs(*args, True), _binary_outputs(*args, False)
                for a, b in zip(counted, walked, strict=True):
                    np.testing.assert_array_equal(a.view(np.uint8), b.view(np.uint8))


@pytest.mark.parametrize("loss", [GradedNDCGLoss(k=3), GradedNDCGLoss(k=10), GradedNDCGLoss(k=10, gains="linear")])
def test_graded_position_batches_read_int8_grades_as_int64_ones(loss):
    """A training loop's narrowed labels (int8) give the graded position kernel's every output to the bit, short
    and long queries, with the ground truth and without."""
    rng = np.random.default_rng(5)
    sizes = rng.integers(1, 60, 400)
    offsets = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
    n = int(offsets[-1])
    grades = (rng.random(n) < 0.5) * rng.integers(1, 100, n)
    scores = (rng.standard_normal(n) + 0.02 * grades).astype(np.float32)
    for relative in (False, True):
        options = dict(relative_to_truth=relative, registry=default_registry())
        wide = PreparedRankings(loss, grades, offsets, "auto", **options)(scores, n_threads=1)
        narrow = PreparedRankings(loss, grades.astype(np.int8), offsets, "auto", **options)(scores, n_threads=1)
        for a, b in ((wide.coef, narrow.coef), (wide.losses, narrow.losses), (wide.values, narrow.values)):
            np.testing.assert_array_equal(a.view(np.uint8), b.view(np.uint8))
        np.testing.assert_array_equal(wide.usable, narrow.usable)
