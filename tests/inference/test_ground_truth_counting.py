"""The position structure's ground truth without sorting (issue 40, point 1): equal, to the bit, to the
definition by a sort of every document."""

from __future__ import annotations

import numpy as np
import pytest

import rankopt
from rankopt.inference.graded_kernels import _position_ground_truth
from rankopt.losses import GradedNDCGLoss


def sorted_ground_truth(structure, grades, offsets):
    """The definition: sort each query's documents by gain, high to low; each tie group of equal gain gets the
    mean of A = D / Σ_{j ≤ k'} D(j) over the positions it occupies (0 beyond k'), its weights added in order."""
    sizes = np.diff(offsets)
    n_queries = sizes.size
    if grades.size == 0:
        return np.zeros(0)
    gains, discount = structure.tables(grades, int(sizes.max(initial=0)))
    query_of = np.repeat(np.arange(n_queries), sizes)
    order = np.lexsort((-gains, query_of))
    position = np.arange(grades.size) - offsets[query_of[order]]
    kept = np.minimum(sizes, discount.size)
    totals = np.concatenate(([0.0], np.cumsum(discount)))[kept]
    q_sorted, g_sorted = query_of[order], gains[order]
    weight = np.where(position < kept[q_sorted], discount[np.minimum(position, discount.size - 1)], 0.0)
    with np.errstate(invalid="ignore", divide="ignore"):
        weight = weight / totals[q_sorted]
    new_group = np.ones(order.size, dtype=bool)
    new_group[1:] = (q_sorted[1:] != q_sorted[:-1]) | (g_sorted[1:] != g_sorted[:-1])
    group = np.cumsum(new_group) - 1
    mean = np.bincount(group, weights=weight) / np.bincount(group)
    nonempty = sizes > 0
    usable = np.zeros(n_queries, dtype=bool)
    usable[nonempty] = g_sorted[offsets[:-1][nonempty]] > g_sorted[offsets[1:][nonempty] - 1]
    coef = np.zeros(grades.size)
    coef[order] = np.where(usable[q_sorted], mean[group], 0.0)
    return coef


LOSSES = [
    GradedNDCGLoss(),
    GradedNDCGLoss(k=3),
    GradedNDCGLoss(k=1, gains="linear"),
    "dcg_zipf",
    "rbp_graded",  # grades past max_grade share one gain: tie groups span several grades
]


@pytest.mark.parametrize("loss", LOSSES, ids=lambda loss: getattr(loss, "name", loss) + str(getattr(loss, "k", "")))
def test_counting_equals_the_sort_to_the_bit(loss):
    loss = rankopt.get_loss(loss) if isinstance(loss, str) else loss
    structure = loss.structure()
    rng = np.random.default_rng(40)
    for _ in range(400):
        n_queries = int(rng.integers(1, 30))
        sizes = rng.integers(0, 15, n_queries)  # empty and one-document queries included
        offsets = np.concatenate(([0], np.cumsum(sizes))).astype(np.int64)
        grades = rng.integers(0, int(rng.integers(1, 8)), offsets[-1]).astype(np.int64)
        np.testing.assert_array_equal(
            _position_ground_truth(structure, grades, offsets), sorted_ground_truth(structure, grades, offsets)
        )


def test_large_grades_are_counted_by_sorting_their_levels():
    structure = GradedNDCGLoss(gains="linear").structure()
    grades = np.array([70000, 3, 70000, 0, 5, 5], dtype=np.int64)
    offsets = np.array([0, 3, 6], dtype=np.int64)
    np.testing.assert_array_equal(
        _position_ground_truth(structure, grades, offsets), sorted_ground_truth(structure, grades, offsets)
    )


def sorted_grade_counts(grades, offsets):
    """The definition by a sort: a document's lower and higher documents in its query."""
    sizes = np.diff(offsets)
    query_of = np.repeat(np.arange(sizes.size), sizes)
    order = np.lexsort((grades, query_of))
    q_sorted, g_sorted = query_of[order], grades[order]
    new_group = np.ones(order.size, dtype=bool)
    new_group[1:] = (q_sorted[1:] != q_sorted[:-1]) | (g_sorted[1:] != g_sorted[:-1])
    group_start = np.maximum.accumulate(np.where(new_group, np.arange(order.size), 0))
    group_size = np.bincount(np.cumsum(new_group) - 1)[np.cumsum(new_group) - 1]
    lower = np.empty(order.size, dtype=np.int64)
    lower[order] = group_start - offsets[q_sorted]
    higher = np.empty(order.size, dtype=np.int64)
    higher[order] = sizes[q_sorted] - (group_start - offsets[q_sorted]) - group_size
    return lower, higher


def test_pair_counts_equal_the_sort():
    from rankopt.inference.graded_kernels import _grade_counts

    rng = np.random.default_rng(41)
    for trial in range(500):
        n_queries = int(rng.integers(1, 30))
        sizes = rng.integers(0, 15, n_queries)
        offsets = np.concatenate(([0], np.cumsum(sizes))).astype(np.int64)
        grades = rng.integers(0, int(rng.integers(1, 8)), offsets[-1]).astype(np.int64) * (
            70000 if trial % 50 == 0 else 1
        )
        for got, want in zip(_grade_counts(grades, offsets), sorted_grade_counts(grades, offsets), strict=True):
            np.testing.assert_array_equal(got, want)
