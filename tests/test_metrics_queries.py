"""Metrics over queries against scikit-learn (per query, ties included) and ir-measures (trec_eval)."""

from __future__ import annotations

import re

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sklearn.metrics import average_precision_score, ndcg_score

from rankopt import RankSVM
from rankopt.metrics import average_precision, loss_metric, mean_average_precision, ndcg_at_k, precision_at_k

ir_measures = pytest.importorskip("ir_measures")


def _queries(rng, n_queries=25, ties=False):
    sizes = rng.integers(1, 30, n_queries)
    qid = np.repeat(rng.permutation(n_queries) * 3 + 1, sizes)
    grades = rng.integers(0, 5, qid.size) * (rng.random(qid.size) < 0.6)
    scores = np.round(rng.standard_normal(qid.size), 1) if ties else rng.standard_normal(qid.size)
    perm = rng.permutation(qid.size)  # rows of a query scattered
    return grades[perm], scores[perm], qid[perm]


def _per_query_sklearn(grades, scores, qid, fn):
    return np.array([fn(grades[qid == q], scores[qid == q]) for q in np.unique(qid)])


@pytest.mark.parametrize("ties", [False, True])
@pytest.mark.parametrize("k", [1, 5, 10])
@pytest.mark.parametrize("gains", ["linear", "exponential"])
def test_ndcg_at_k_equals_sklearn_per_query(rng, ties, k, gains):
    grades, scores, qid = _queries(rng, ties=ties)
    gain = (lambda g: g.astype(float)) if gains == "linear" else (lambda g: 2.0**g - 1)

    def reference(g, s):
        if not g.any():
            return np.nan
        if g.size == 1:
            return 1.0  # sklearn refuses one document; a lone relevant document is the ideal order
        return ndcg_score([gain(g)], [s], k=k)

    expected = _per_query_sklearn(grades, scores, qid, reference)
    values = ndcg_at_k(grades, scores, qid, k=k, gains=gains, average=False)
    np.testing.assert_allclose(values, expected, rtol=1e-12, atol=1e-12)
    assert ndcg_at_k(grades, scores, qid, k=k, gains=gains) == pytest.approx(np.nanmean(expected), abs=1e-12)


@pytest.mark.parametrize("ties", [False, True])
@pytest.mark.parametrize("relevant_at", [1, 3])
def test_mean_average_precision_equals_sklearn_per_query(rng, ties, relevant_at):
    grades, scores, qid = _queries(rng, ties=ties)

    def reference(g, s):
        relevant = g >= relevant_at
        if not relevant.any():
            return np.nan
        if relevant.all():
            return 1.0
        return average_precision_score(relevant, s)

    expected = _per_query_sklearn(grades, scores, qid, reference)
    np.testing.assert_allclose(
        mean_average_precision(grades, scores, qid, relevant_at, average=False), expected, rtol=1e-12, atol=1e-12
    )
    assert mean_average_precision(grades, scores, qid, relevant_at) == pytest.approx(np.nanmean(expected), abs=1e-12)


def _trec(grades, scores, qid):
    qrels = [ir_measures.Qrel(str(q), f"d{i}", int(g)) for i, (g, q) in enumerate(zip(grades, qid, strict=True))]
    run = [ir_measures.ScoredDoc(str(q), f"d{i}", float(s)) for i, (s, q) in enumerate(zip(scores, qid, strict=True))]
    return qrels, run


def _ir_per_query(measure, grades, scores, qid):
    qrels, run = _trec(grades, scores, qid)
    by_query = {m.query_id: m.value for m in ir_measures.iter_calc([measure], qrels, run)}
    return np.array([by_query.get(str(q), np.nan) for q in np.unique(qid)])


def test_metrics_equal_ir_measures_without_ties(rng):
    """trec_eval breaks ties by document name, so the scores here are distinct."""
    from ir_measures import AP, P, nDCG

    grades, scores, qid = _queries(rng, n_queries=40)
    ap_at_2 = mean_average_precision(grades, scores, qid, 2, average=False)
    has_relevant = np.array([grades[qid == q].any() for q in np.unique(qid)])
    long_enough = np.array([np.count_nonzero(qid == q) >= 10 for q in np.unique(qid)])
    for ours, measure, keep in [
        (mean_average_precision(grades, scores, qid, average=False), AP, has_relevant),
        (ap_at_2, AP(rel=2), ~np.isnan(ap_at_2)),
        (ndcg_at_k(grades, scores, qid, k=10, gains="linear", average=False), nDCG @ 10, has_relevant),
        (
            ndcg_at_k(grades, scores, qid, k=5, gains="exponential", average=False),
            nDCG(gains={g: 2**g - 1 for g in range(5)}) @ 5,
            has_relevant,
        ),
        # trec_eval divides by k; ours by min(k, n): equal on queries of at least k documents
        (precision_at_k(grades, scores, qid, 10, average=False), P @ 10, has_relevant & long_enough),
    ]:
        reference = _ir_per_query(measure, grades, scores, qid)
        np.testing.assert_allclose(ours[keep], reference[keep], rtol=1e-9, atol=1e-12, err_msg=str(measure))


def test_precision_at_k_over_queries_averages_the_single_query_one_with_ties(rng):
    grades, scores, qid = _queries(rng, ties=True)
    values = precision_at_k(grades, scores, qid, 5, average=False)
    for value, q in zip(values, np.unique(qid), strict=True):
        relevant = grades[qid == q] >= 1
        if not relevant.any():
            assert np.isnan(value)
        elif relevant.all():
            assert value == 1.0
        else:
            assert value == precision_at_k(relevant.astype(int), scores[qid == q], k=5)


def test_ties_do_not_depend_on_row_order():
    # two documents tied at the top, one relevant: each order is equally likely, so AP and NDCG average them
    grades, scores, qid = np.array([0, 1, 0]), np.array([1.0, 1.0, 0.0]), np.zeros(3, int)
    assert mean_average_precision(grades, scores, qid) == pytest.approx(0.5)
    assert mean_average_precision(grades[::-1], scores[::-1], qid) == pytest.approx(0.5)
    assert ndcg_at_k(grades, scores, qid, k=1, gains="linear") == pytest.approx(0.5)
    assert precision_at_k(grades, scores, qid, 1) == pytest.approx(0.5)


def test_one_query_equals_the_single_query_metric(rng):
    y = rng.integers(0, 2, 40)
    s = rng.standard_normal(40)
    assert mean_average_precision(y, s) == average_precision(y, s)
    assert mean_average_precision(y, s, np.full(40, 7)) == average_precision(y, s)


def test_queries_without_relevant_documents_are_left_out():
    grades = np.array([0, 0, 1, 0, 2, 0])
    scores = np.array([0.3, 0.1, 0.9, 0.1, 0.2, 0.5])
    qid = np.array([1, 1, 2, 2, 3, 3])
    np.testing.assert_array_equal(mean_average_precision(grades, scores, qid, average=False), [np.nan, 1.0, 0.5])
    assert mean_average_precision(grades, scores, qid) == 0.75
    np.testing.assert_array_equal(np.isnan(ndcg_at_k(grades, scores, qid, average=False)), [True, False, False])


@pytest.mark.parametrize(
    "call, pattern",
    [
        (lambda: mean_average_precision([0, 1], [0.1, 0.2], [1]), r"expected qid to have 2 entries"),
        (lambda: mean_average_precision([0, 1], [0.1, 0.2], [1.0, np.nan]), r"expected qid.*NaN"),
        (lambda: mean_average_precision([0, 1], [0.1, 0.2], [1.5, 1]), r"expected qid to hold integer query ids"),
        (
            lambda: mean_average_precision([0, -1], [0.1, 0.2], [1, 1]),
            r"expected y_true to hold integer relevance grades >= 0",
        ),
        (
            lambda: mean_average_precision([0, 0.5], [0.1, 0.2], [1, 1]),
            r"expected y_true to hold integer relevance grades",
        ),
        (lambda: mean_average_precision([0, 1], [0.1, 0.2], [1, 1], relevant_at=2), r"relevant_at=2"),
        (
            lambda: mean_average_precision([0, 1], [0.1, 0.2], [1, 1], relevant_at=0),
            r"expected relevant_at to be a positive",
        ),
        (lambda: ndcg_at_k([0, 0], [0.1, 0.2], [1, 2]), r"some query \(qid\) to hold a document of grade > 0"),
        (lambda: ndcg_at_k([0, 1], [0.1, 0.2], [1, 2], k=0), r"expected k to be a positive integer"),
        (lambda: ndcg_at_k([0, 1], [0.1, 0.2], [1, 2], gains="log"), r"expected gains to be one of"),
        (lambda: precision_at_k([0, 1], [0.1, np.inf], qid=[1, 1]), r"expected scores to be finite"),
    ],
)
def test_bad_input_names_the_parameter(call, pattern):
    with pytest.raises(ValueError, match=pattern):
        call()


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.tuples(st.integers(0, 3), st.integers(-3, 3), st.integers(0, 2)), min_size=1, max_size=30),
    st.randoms(use_true_random=False),
)
def test_metrics_do_not_depend_on_row_order_or_qid_values(rows, random):
    """Ties included: permuting rows and renaming queries changes nothing."""
    grades, scores, qid = (np.array(c) for c in zip(*rows, strict=True))
    scores = scores.astype(float)
    if not grades.any():
        return
    perm = np.array(random.sample(range(grades.size), grades.size))
    renamed = 1000 - 7 * qid  # a decreasing renaming reverses the query order
    for metric in (
        lambda g, s, q: mean_average_precision(g, s, q, average=False),
        lambda g, s, q: ndcg_at_k(g, s, q, k=3, average=False),
        lambda g, s, q: precision_at_k(g, s, q, 2, average=False),
    ):
        base = metric(grades, scores, qid)
        np.testing.assert_allclose(metric(grades[perm], scores[perm], qid[perm]), base, rtol=1e-12)
        np.testing.assert_allclose(metric(grades, scores, renamed)[::-1], base, rtol=1e-12)


def test_ndcg_with_grades_whose_gains_overflow_float64():
    """2**1100 overflowed: that query was NaN and silently left out of the mean (0.9197)."""
    values = ndcg_at_k([0, 1, 1100, 0, 1, 1], [0.1, 0.5, 0.3, 0.2, 0.9, 0], [0, 0, 0, 1, 1, 1], average=False)
    # the grade-1100 document is second: its gain dwarfs the rest, so NDCG@10 = (1/log2 3) / 1
    np.testing.assert_allclose(values, [1 / np.log2(3), 0.9197207891481876], rtol=1e-12)
    # the same ranking with grades below 512 is computed as before, 2**g - 1 as written
    small = ndcg_at_k([0, 1, 3, 0, 1, 1], [0.1, 0.5, 0.3, 0.2, 0.9, 0], [0, 0, 0, 1, 1, 1], average=False)
    expected = (7 / np.log2(2 + 1) + 1 / np.log2(1 + 1)) / (7 / np.log2(2) + 1 / np.log2(3))
    assert small[0] == pytest.approx(expected, rel=1e-15)
    # gains scaled by a common factor give the same NDCG, at the scale boundary too
    for top in (511, 512, 513, 2000):
        g = np.array([top, top - 1, 0, top - 3])
        s = np.array([0.3, 0.9, 0.5, 0.1])
        reference = sum((2.0 ** (int(x) - top)) / np.log2(i + 2) for i, x in enumerate(g[np.argsort(-s)]))
        ideal = sum((2.0 ** (int(x) - top)) / np.log2(i + 2) for i, x in enumerate(np.sort(g)[::-1]))
        assert ndcg_at_k(g, s, np.zeros(4)) == pytest.approx(reference / ideal, rel=1e-12)


@pytest.mark.parametrize(
    "grades, shown",
    [(np.array([2**64 - 1, 1, 0, 1], dtype=np.uint64), "18446744073709551615"), (np.array([1e19, 1, 0, 1]), "1e+19")],
)
def test_grades_beyond_int64_are_refused_not_wrapped(grades, shown):
    with pytest.raises(ValueError, match=f"fit in 64-bit integers, got {re.escape(shown)} instead"):
        ndcg_at_k(grades, [0.1, 0.2, 0.3, 0.4], [0, 0, 1, 1])
    X = np.random.default_rng(0).standard_normal((4, 2))
    with pytest.raises(ValueError, match="fit in 64-bit integers"):
        RankSVM().fit(X, grades, qid=[0, 0, 1, 1])


def test_qids_beyond_int64_are_refused():
    qid = np.array([2**64 - 1, 2**64 - 1, 0, 0], dtype=np.uint64)
    with pytest.raises(ValueError, match="qid to hold integer query ids that fit in 64-bit integers"):
        mean_average_precision([1, 0, 1, 0], [0.1, 0.2, 0.3, 0.4], qid)


@pytest.mark.parametrize("seed", range(6))
def test_the_batched_metrics_are_the_per_query_ones(seed):
    """Issue 60: MAP, NDCG@k and P@k over queries run in whole-array passes; each query's value is what the
    per-query definition (``_*_sorted``) gives it, on ties, one-document queries, queries shorter and longer
    than k, grades past 512 (the exponential gains' shift) and queries with nothing relevant."""
    from rankopt import metrics

    rng = np.random.default_rng(seed)
    sizes = rng.integers(1, 40, 300)
    qid = rng.permutation(np.repeat(np.arange(sizes.size) * 3 + 7, sizes))  # queries interleaved
    scores = rng.integers(0, 6, qid.size).astype(float)  # many ties
    grades = rng.integers(0, 5, qid.size) * (rng.random(qid.size) < 0.4)
    if seed == 5:
        grades[rng.random(qid.size) < 0.02] = 700
    g, s, queries = metrics._grouped(grades, scores, qid)
    for k in (1, 3, 10, 50):
        for gain in ("exponential", "linear"):
            batched = metrics.ndcg_at_k(grades, scores, qid, k=k, gains=gain, average=False)
            loop = [
                metrics._ndcg_at_k_sorted(g[a:b], s[a:b], k, metrics.GAINS[gain]) if g[a:b].any() else np.nan
                for a, b in zip(queries.offsets[:-1], queries.offsets[1:], strict=True)
            ]
            np.testing.assert_allclose(batched, loop, rtol=1e-13, atol=0)
        batched = metrics.precision_at_k(grades, scores, qid, k=k, relevant_at=2, average=False)
        loop = [
            metrics._precision_at_k_sorted(g[a:b] >= 2, s[a:b], k) if (g[a:b] >= 2).any() else np.nan
            for a, b in zip(queries.offsets[:-1], queries.offsets[1:], strict=True)
        ]
        np.testing.assert_allclose(batched, loop, rtol=1e-13, atol=0)
    for relevant_at in (1, 3):
        batched = metrics.mean_average_precision(grades, scores, qid, relevant_at, average=False)
        loop = [
            metrics._average_precision_sorted(g[a:b] >= relevant_at, s[a:b])
            if (g[a:b] >= relevant_at).any()
            else np.nan
            for a, b in zip(queries.offsets[:-1], queries.offsets[1:], strict=True)
        ]
        np.testing.assert_allclose(batched, loop, rtol=1e-13, atol=0)


@pytest.mark.parametrize("metric", [ndcg_at_k, mean_average_precision, precision_at_k, loss_metric])
def test_grades_without_qid_are_refused_as_the_estimator_refuses_them(metric):
    """Issue 61, point 25: ndcg_at_k(graded_y, s, k=10) scored every row as one query in silence, where
    RankSVM.fit refuses graded labels without qid; both now say to pass qid, and binary labels stay one query."""
    grades, scores = np.array([0, 3, 1, 2, 0, 1]), np.array([0.1, 0.5, 0.3, 0.2, 0.9, 0.0])
    with pytest.raises(ValueError, match=r"3\]? instead; .* pass qid=np.zeros\(n_samples\) for one query"):
        metric(grades, scores)
    with pytest.raises(ValueError, match=r"pass qid=np.zeros\(n_samples\) for one query"):
        RankSVM().fit(np.c_[scores, scores**2], grades)
    one_query = np.zeros(grades.size)
    assert metric(grades, scores, one_query) == metric(grades, scores, group=[grades.size])
    binary = (grades > 0).astype(int)
    assert metric(binary, scores) == metric(binary, scores, one_query)
