"""The shared input checks of rankopt._validation: one place for each refusal."""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.exceptions import ConvergenceWarning

from rankopt import RankSVM
from rankopt._validation import (
    QueryIndex,
    check_hinge_layout,
    check_one_query_labels,
    check_queries_to_order,
    check_whole_numbers,
    largest_magnitude,
)
from rankopt.api import most_violated_rankings


@pytest.mark.parametrize(
    ("values", "message"),
    [
        (np.array([1.0, np.nan]), "got NaN or infinity instead"),
        (np.array([1.0, np.inf]), "got NaN or infinity instead"),
        (np.array([1.0, 2.5]), "got 2.5 instead"),
    ],
)
def test_check_whole_numbers_refuses_nan_inf_and_fractions(values, message):
    with pytest.raises(ValueError, match=f"expected ids to hold integer ids, {message}"):
        check_whole_numbers(values, "ids", "integer ids")
    check_whole_numbers(np.array([1.0, -3.0]), "ids", "integer ids")
    check_whole_numbers(np.array([1, 2]), "ids", "integer ids")


def test_batched_relevance_goes_through_the_same_check():
    with pytest.raises(ValueError, match="expected relevance to hold integer relevance, got 0.5 instead"):
        most_violated_rankings("ap", [0.0, 1.0], [0.5, 1.0], [0, 2])


@pytest.mark.parametrize(
    ("graded", "relevant_at", "message"),
    [
        (True, None, "two different grades"),
        (False, None, "both a relevant and a non-relevant document"),
        (False, 2, r"y >= relevant_at=2"),
    ],
)
def test_nothing_to_order_is_refused_with_one_message(graded, relevant_at, message):
    queries = QueryIndex(np.arange(4), np.array([0, 2, 4]), np.array([0, 1]))
    with pytest.raises(ValueError, match=f"expected some query \\(qid\\) to hold .*{message}.* none of the 2 queries"):
        check_queries_to_order(np.array([1, 1, 0, 0]), queries, graded=graded, relevant_at=relevant_at)
    usable = check_queries_to_order(np.array([1, 0, 0, 0]), queries, graded=graded, relevant_at=relevant_at)
    assert usable.tolist() == [True, False]


def test_one_query_labels_say_how_to_pass_grades():
    assert check_one_query_labels([0, 1, 1], 3).tolist() == [False, True, True]
    with pytest.raises(ValueError, match="pass qid=np.zeros"):
        check_one_query_labels([0, 1, 3], 3)


def test_largest_magnitude_propagates_nan_and_infinity():
    assert largest_magnitude(np.array([-3.0, 2.0])) == 3.0
    assert np.isnan(largest_magnitude(np.array([1.0, np.nan])))
    assert largest_magnitude(np.array([1.0, -np.inf], dtype=np.float32)) == np.inf


@pytest.mark.parametrize(
    "call, message",
    [
        (dict(scores_shape=(2, 3, 4), y_shape=(2, 3, 4)), "shape \\(n,\\) or \\(B, L\\)"),
        (dict(scores_shape=(2, 3), y_shape=(2, 3), queries_given=True), "qid and group only with 1-D"),
        (dict(scores_shape=(6,), y_shape=(6,), mask_shape=(6,)), "mask only with the padded"),
        (dict(scores_shape=(6,), y_shape=(6,), y_numeric=False), "integer relevance grades"),
        (dict(scores_shape=(6,), y_shape=(5,)), "one label per score"),
        (dict(scores_shape=(2, 3), y_shape=(3, 2)), "the scores' padded layout"),
        (dict(scores_shape=(2, 3), y_shape=(2, 3), mask_shape=(2, 2)), "boolean mask of shape \\(2, 3\\)"),
        (dict(scores_shape=(2, 3), y_shape=(2, 3), mask_shape=(2, 3), mask_boolean=False), "boolean mask"),
    ],
)
def test_the_hinge_layout_is_checked_on_shapes_alone(call, message):
    """The layout rules every device's hinge shares (rankopt.torch checks only what is torch's besides)."""
    call = dict(dict(y_dtype="int64", y_numeric=True), **call)
    with pytest.raises(ValueError, match=message):
        check_hinge_layout(**call)


@pytest.mark.parametrize("scores_shape, mask_shape", [((6,), None), ((2, 3), None), ((2, 3), (2, 3))])
def test_a_sound_hinge_layout_passes(scores_shape, mask_shape):
    check_hinge_layout(scores_shape, scores_shape, y_dtype="int64", y_numeric=True, mask_shape=mask_shape)


def test_query_ids_past_2_53_stay_apart_or_are_refused():
    """Issue 61, point 5a: ids given as an object array (Python ints, a pandas or Dask string column's numeric
    strings) went through float64, so 90 distinct ids from 2**60 on merged into one query in silence."""
    from rankopt._validation import query_ids

    ids = 2**60 + np.arange(90)
    for given in (ids.astype(object), ids.astype(str).astype(object)):
        np.testing.assert_array_equal(query_ids(given, 90), ids)
    np.testing.assert_array_equal(query_ids(np.arange(90).astype(float).astype(object), 90), np.arange(90))
    # floats from 2**53 on cannot say which ids they were: refused, whether a float array or objects
    for floats in (ids.astype(float), ids.astype(float).astype(object), np.array(["1e20"] * 90, dtype=object)):
        with pytest.raises(ValueError, match="floats from 2\\*\\*53 on .* may already have merged"):
            query_ids(floats, 90)
    with pytest.raises(ValueError, match="that fit in 64-bit integers"):
        query_ids(np.array([2**64] * 90, dtype=object), 90)
    rng = np.random.default_rng(0)
    sizes = rng.integers(3, 8, 90)
    X, y = rng.normal(size=(sizes.sum(), 4)), rng.integers(0, 3, sizes.sum())
    with pytest.warns(ConvergenceWarning):
        model = RankSVM(max_iter=3).fit(X, y, qid=np.repeat(ids, sizes).astype(object))
    assert model.n_queries_ == 90
