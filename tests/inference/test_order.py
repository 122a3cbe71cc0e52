"""rankopt's descending order (``descending_order``, compiled in ``_order.pyx``).

It must be exactly NumPy's stable argsort of the negated scores — the order
every inference method and the tie rule of Mohapatra et al. (2018) §4.2 rely on —
on every input shape, including those that defeat the value buckets.
"""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from rankopt.inference.base import descending_order


def _arrangements():
    rng = np.random.default_rng(0)
    x = np.arange(5000, dtype=np.float64)
    yield "normal", rng.normal(size=5000)
    yield "small", rng.normal(size=7)
    yield "one", np.array([3.0])
    yield "empty", np.array([], dtype=np.float64)
    yield "ties", rng.integers(0, 6, 5000) / 5.0
    yield "all equal", np.full(3000, 0.25)
    yield "ascending", x
    yield "descending", x[::-1].copy()
    yield "outliers", np.concatenate([rng.normal(size=4000), [1e308, -1e308, 1e-300, -0.0, 0.0]])
    yield "tiny span", 1.0 + rng.integers(0, 3, 4000) * 2.220446049250313e-16
    yield "float32", rng.normal(size=5000).astype(np.float32)
    yield "integers", rng.integers(-50, 50, 5000)
    yield "around threshold", rng.normal(size=1024)
    yield "large", rng.standard_cauchy(size=200_000)


@pytest.mark.parametrize("case", list(_arrangements()), ids=lambda c: c[0])
def test_equals_numpy_stable_argsort(case):
    _, scores = case
    np.testing.assert_array_equal(descending_order(scores), np.argsort(-scores, kind="stable"))


@given(arrays(np.float64, st.integers(0, 3000), elements=st.floats(-1e6, 1e6) | st.sampled_from([0.0, 1.0, -1.0])))
@settings(max_examples=200, deadline=None)
def test_equals_numpy_stable_argsort_property(scores):
    np.testing.assert_array_equal(descending_order(scores), np.argsort(-scores, kind="stable"))


@pytest.mark.parametrize("bad", [np.array([1.0, np.nan]), np.array([np.inf, 0.0]), np.zeros((2, 2))])
def test_bad_input_raises(bad):
    with pytest.raises(ValueError, match="expected"):
        descending_order(bad)


def _small_order(scores: np.ndarray) -> np.ndarray:
    from rankopt.inference._order import small_descending_order_into

    order = np.empty(scores.size, dtype=np.intp)
    small_descending_order_into(np.ascontiguousarray(scores), order)
    return order


@pytest.mark.parametrize("case", [c for c in _arrangements() if c[0] != "large"], ids=lambda c: c[0])
def test_the_kernels_small_input_sort_equals_numpy_stable_argsort(case):
    """The inline sort of ``_sorting.pxd`` (buckets, then insertion; std::sort when crowded)."""
    _, scores = case
    if scores.dtype not in (np.float32, np.float64):
        scores = scores.astype(np.float64)
    np.testing.assert_array_equal(_small_order(scores), np.argsort(-scores, kind="stable"))


@given(
    arrays(
        st.sampled_from([np.float64, np.float32]),
        st.integers(0, 300),
        elements=st.floats(-1e3, 1e3, width=32) | st.sampled_from([0.0, 0.25, -0.25, 1.0]),
    )
)
@settings(max_examples=300, deadline=None)
def test_the_kernels_small_input_sort_property(scores):
    np.testing.assert_array_equal(_small_order(scores), np.argsort(-scores, kind="stable"))


@given(
    arrays(
        st.sampled_from([np.float64, np.float32]),
        st.integers(1, 300),
        elements=st.floats(-1e3, 1e3, width=32) | st.sampled_from([0.0, 0.25, -0.25, 1.0]),
    ),
    st.floats(-1.2e3, 1.2e3) | st.sampled_from([0.0, 0.25, -np.inf, np.inf]),
    st.integers(1, 300),
)
@settings(max_examples=300, deadline=None)
def test_the_top_k_partial_sort_orders_all_it_promises(scores, floor, n_first):
    """The top-k method's sort (``descending_keyed_down_to``): rankopt's order up to the place it returns,
    which passes the first ``n_first`` and every score at or above ``floor``; every score after it lower
    than all before it."""
    from rankopt.inference._order import small_descending_order_into

    n_first = min(n_first, scores.size)
    order = np.empty(scores.size, dtype=np.intp)
    upto = small_descending_order_into(np.ascontiguousarray(scores), order, floor, n_first)
    expected = np.argsort(-scores, kind="stable")
    assert n_first <= upto <= scores.size
    np.testing.assert_array_equal(order[:upto], expected[:upto])
    np.testing.assert_array_equal(np.sort(order), np.arange(scores.size))
    rest = scores[order[upto:]].astype(np.float64)  # floor is a double: NumPy would compare in float32 (NEP 50)
    assert np.all(rest < floor) or upto == scores.size
    if upto < scores.size:
        assert rest.max() < scores[order[upto - 1]]


def test_the_top_k_partial_sort_refuses_a_count_outside_the_scores():
    from rankopt.inference._order import small_descending_order_into

    with pytest.raises(ValueError, match="expected n_first in 1 … 3, got 4 instead"):
        small_descending_order_into(np.zeros(3), np.empty(3, dtype=np.intp), 0.0, 4)
