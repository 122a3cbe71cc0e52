"""LightGBM's ``group=`` sizes: checked before any cast, accepted wherever ``qid=`` is."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rankopt import RankSVM, RankSVMCV
from rankopt._validation import check_group_sizes, query_ids_from_group
from rankopt.metrics import mean_average_precision, ndcg_at_k, precision_at_k

#: Sizes whose int64 sum wraps to 20: the sum must not be taken in int64.
WRAPPING = [2**62, 2**62, 2**62, 2**62 + 20]


@pytest.fixture
def queries(rng):
    X = rng.normal(size=(40, 3))
    y = (X[:, 0] + rng.normal(size=40) > 0).astype(int) + (X[:, 1] > 1)
    return X, y, np.repeat(np.arange(4), 10), [10, 10, 10, 10]


def test_sizes_whose_int64_sum_wraps_are_refused_without_a_crash(tmp_path):
    """A segfault before: the sum wrapped to 20 and np.repeat wrote out of bounds."""
    script = textwrap.dedent(
        f"""
        import numpy as np
        from rankopt import RankSVM, RankSVMCV
        X, y = np.ones((20, 3)), np.arange(20) % 3
        for call in (
            lambda: RankSVM().fit(X, y, group={WRAPPING}),
            lambda: RankSVM().fit(X, y, qid=np.repeat([0, 1], 10), eval_set=[(X, y)], eval_group=[{WRAPPING}]),
            lambda: RankSVMCV(Cs=[1.0]).fit(X, y, group={WRAPPING}),
        ):
            try:
                call()
            except ValueError as exc:
                print("refused:", "passes it at" in str(exc))
        """
    )
    # Outside the checkout: from its root, python -c would import the source tree (no compiled kernels).
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split("\n")[:3] == ["refused: True"] * 3


@pytest.mark.parametrize(
    "group, message",
    [
        (np.array([10, None, 10, 10], dtype=object), r"integer group sizes, got None at group\[1\]"),
        (np.array([5.5, 5.5, 5, 5], dtype=object), r"integer group sizes, got 5.5 at group\[0\]"),
        (np.array([20.5, 19.5]), r"got 20.5 at group\[0\]"),
        (np.array([10, "10", 10, 10], dtype=object), r"got '10' at group\[1\]"),
        (np.array([10.0, np.nan, 10, 10]), r"got nan at group\[1\]"),
        (np.array([10, True, 10, 19], dtype=object), r"got True at group\[1\]"),
    ],
)
def test_object_and_float_sizes_are_checked_entry_by_entry(queries, group, message):
    """TypeError or a silent truncation to [5, 5, 5, 5] before."""
    X, y, _, _ = queries
    with pytest.raises(ValueError, match=message):
        RankSVM().fit(X, y, group=group)
    with pytest.raises(ValueError, match=message):
        RankSVMCV(Cs=[1.0]).fit(X, y, group=group)


def test_whole_number_sizes_in_float_or_object_arrays_are_accepted(queries):
    X, y, qid, sizes = queries
    expected = RankSVM().fit(X, y, qid=qid).coef_
    for group in (np.array(sizes, dtype=float), np.array(sizes, dtype=object), np.array(sizes, dtype=np.uint8)):
        np.testing.assert_array_equal(RankSVM().fit(X, y, group=group).coef_, expected)


def test_a_zero_size_is_named_with_its_position(queries):
    """Was "... got 5 sizes summing to 40 instead", which hid the empty query."""
    X, y, _, _ = queries
    with pytest.raises(ValueError, match=r"positive group sizes, got 0 at group\[2\]"):
        RankSVM().fit(X, y, group=[10, 10, 0, 10, 10])


def test_eval_group_names_the_set(queries):
    X, y, qid, _ = queries
    with pytest.raises(ValueError, match=r"got None at eval_group\[1\]\[0\]"):
        RankSVM().fit(X, y, qid=qid, eval_set=[(X, y), (X, y)], eval_group=[[40], [None, 40]])


def test_score_takes_group_like_fit(queries):
    """score(X, y, group=sizes) raised TypeError before."""
    X, y, qid, sizes = queries
    model = RankSVM().fit(X, y, group=sizes)
    assert model.score(X, y, group=sizes) == model.score(X, y, qid=qid)
    cv = RankSVMCV(Cs=[1.0, 10.0], cv=2).fit(X, y, group=sizes)
    assert cv.score(X, y, group=sizes) == cv.score(X, y, qid=qid)
    with pytest.raises(ValueError, match="expected qid or group, got both"):
        model.score(X, y, qid=qid, group=sizes)


@pytest.mark.parametrize(
    "metric", [mean_average_precision, ndcg_at_k, lambda y, s, **kw: precision_at_k(y, s, k=3, **kw)]
)
def test_metrics_over_queries_take_group(queries, metric):
    X, y, qid, sizes = queries
    scores = X[:, 0]
    assert metric(y, scores, group=sizes) == metric(y, scores, qid=qid)
    with pytest.raises(ValueError, match="summing to the number of rows"):
        metric(y, scores, group=[10, 10])


sizes_entries = st.one_of(
    st.integers(min_value=-(2**70), max_value=2**70),
    st.integers(min_value=0, max_value=30),
    st.floats(allow_nan=True, allow_infinity=True),
    st.none(),
    st.text(max_size=3),
    st.booleans(),
)


@settings(max_examples=300, deadline=None)
@given(entries=st.lists(sizes_entries, min_size=0, max_size=6), n_samples=st.integers(1, 60))
def test_fuzzed_group_sizes_give_a_value_error_or_a_valid_split(entries, n_samples):
    for group in (entries, np.array(entries, dtype=object)):
        try:
            qid = query_ids_from_group(group, n_samples)
        except ValueError:
            continue
        assert qid.shape == (n_samples,) and np.all(np.diff(qid) >= 0)
        sizes = check_group_sizes(group, n_samples)
        assert np.all(sizes >= 1) and sum(int(s) for s in sizes) == n_samples
