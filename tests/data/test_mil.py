"""Bag input validation (rankopt.data.bags) and the multiple-instance loaders (rankopt.data.mil)."""

import numpy as np
import pytest
import scipy.sparse as sp

from rankopt.data.bags import Bags, check_bags
from rankopt.data.mil import MIL_DATASETS, load_mil, mil_csv_dir


def _list_bags(rng, sizes, d=3):
    return [rng.normal(size=(s, d)) for s in sizes]


# --------------------------------------------------------------------- bag input forms


def test_list_ids_and_offsets_agree(rng):
    bag_list = _list_bags(rng, [2, 1, 3])
    y = [1, 0, 1]
    from_list, y1 = check_bags(bag_list, y=y)
    stacked = np.vstack(bag_list)
    from_offsets, y2 = check_bags(stacked, [0, 2, 3, 6], y=y)
    from_ids, y3 = check_bags(stacked, ["a", "a", "b", "c", "c", "c"], y=y)
    for bags, labels in [(from_offsets, y2), (from_ids, y3)]:
        np.testing.assert_array_equal(bags.offsets, from_list.offsets)
        np.testing.assert_array_equal(bags.X, from_list.X)
        np.testing.assert_array_equal(labels, y1)
    np.testing.assert_array_equal(from_ids.ids, ["a", "b", "c"])
    np.testing.assert_array_equal(y1, [True, False, True])


def test_non_contiguous_ids_grouped_by_first_appearance(rng):
    X = np.arange(10.0).reshape(5, 2)
    bags, y = check_bags(X, [7, 3, 7, 3, 9], y=[1, 0, 1, 0, 0])
    np.testing.assert_array_equal(bags.ids, [7, 3, 9])
    np.testing.assert_array_equal(bags.offsets, [0, 2, 4, 5])
    np.testing.assert_array_equal(bags.X[:, 0], [0, 4, 2, 6, 8])
    np.testing.assert_array_equal(y, [True, False, False])


def test_sparse_candidates(rng):
    dense = _list_bags(rng, [2, 2])
    bags, _ = check_bags([sp.csr_matrix(dense[0]), dense[1]])
    assert sp.issparse(bags.X)
    np.testing.assert_allclose(bags.X.toarray(), np.vstack(dense))
    stacked, _ = check_bags(sp.csr_matrix(np.vstack(dense)), [0, 2, 4])
    assert sp.issparse(stacked.X)


def test_best_and_worst_are_per_bag_extremes_with_lowest_index_on_ties():
    bags, _ = check_bags([np.zeros((3, 1)), np.zeros((1, 1)), np.zeros((2, 1))])
    scores = np.array([1.0, 5.0, 5.0, -2.0, 0.0, 0.0])
    values, rows = bags.best(scores)
    np.testing.assert_array_equal(values, [5.0, -2.0, 0.0])
    np.testing.assert_array_equal(rows, [1, 3, 4])
    values, rows = bags.worst(scores)
    np.testing.assert_array_equal(values, [1.0, -2.0, 0.0])
    np.testing.assert_array_equal(rows, [0, 3, 4])


def test_best_matches_loop(rng):
    sizes = rng.integers(1, 6, size=40)
    bags, _ = check_bags(_list_bags(rng, sizes, d=2))
    scores = rng.integers(0, 3, size=bags.n_candidates).astype(float)  # many ties
    values, rows = bags.best(scores)
    for b in range(bags.n_bags):
        chunk = scores[bags.offsets[b] : bags.offsets[b + 1]]
        assert values[b] == chunk.max()
        assert rows[b] == bags.offsets[b] + int(np.argmax(chunk))


def test_take_and_restrict_to_known(rng):
    bag_list = _list_bags(rng, [2, 3, 1])
    bags, _ = check_bags(bag_list, known=[-1, 2, 0])
    sub = bags.take([2, 1])
    np.testing.assert_array_equal(sub.X, np.vstack([bag_list[2], bag_list[1]]))
    np.testing.assert_array_equal(sub.known, [0, 2])
    restricted = bags.restrict_to_known()
    np.testing.assert_array_equal(restricted.sizes, [2, 1, 1])
    np.testing.assert_array_equal(restricted.X, np.vstack([bag_list[0], bag_list[1][2:], bag_list[2]]))


def test_per_row_labels_with_offsets():
    X = np.ones((4, 2))
    _, y = check_bags(X, [0, 1, 4], y=[0, 1, 1, 1])
    np.testing.assert_array_equal(y, [False, True])


# --------------------------------------------------------------------- bad input


@pytest.mark.parametrize(
    "make, match",
    [
        (lambda: check_bags([np.ones((2, 3)), np.ones((0, 3))]), "empty bag 1"),
        (lambda: check_bags([np.ones((2, 3)), np.ones((2, 4))]), "4 in bag 1"),
        (lambda: check_bags([np.ones(3)]), "2-D array"),
        (lambda: check_bags([]), "at least one bag"),
        (lambda: check_bags(np.ones((3, 2)), [0, 1, 1, 3]), "empty bag 1"),
        (lambda: check_bags(np.ones((3, 2)), [0, 2, 1, 3]), "non-decreasing"),
        (lambda: check_bags(np.ones((3, 2)), [0, 2]), "from 0 to the number of rows"),
        (lambda: check_bags(np.ones((3, 2))), "bags index"),
        (lambda: check_bags([np.ones((2, 2))], [0, 2]), "bags=None"),
        (lambda: check_bags(np.ones((3, 2)), [1, 1, 2], y=[1, 0, 0]), "mixed labels within bag id 1"),
        (lambda: check_bags([np.array([[1.0, np.nan]])]), "finite"),
        (lambda: check_bags(np.array([[1.0], [np.inf]]), [0, 1, 2]), "finite"),
        (lambda: check_bags([np.ones((2, 2)), np.ones((1, 2))], y=[1, 0, 1]), "one label per bag"),
        (lambda: check_bags([np.ones((2, 2)), np.ones((1, 2))], known=[2, -1]), r"known\[0\]"),
        (lambda: check_bags([np.ones((2, 2)), np.ones((1, 2))], known=[0]), "one entry per bag"),
        (lambda: check_bags([np.ones((2, 2)), np.ones((1, 2))], y=[1, 1]), "both a positive"),
    ],
)
def test_bad_input_raises_clear_value_error(make, match):
    with pytest.raises(ValueError, match=match):
        make()


# --------------------------------------------------------------------- the mil package data

EXPECTED = {"musk1": (92, 476, 166, 47), "musk2": (102, 6598, 166, 39), "elephant": (200, 1391, 230, 100)}


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_mil_shapes(name):
    data = load_mil(name)
    n_bags, n_instances, n_features, n_pos = EXPECTED[name]
    assert (data.n_bags, data.n_instances, data.n_features) == (n_bags, n_instances, n_features)
    assert int(data.y.sum()) == n_pos
    assert isinstance(data.bags, Bags) and np.all(data.bags.sizes >= 1)
    assert np.all(np.isfinite(data.bags.X))


def test_mil_every_shipped_csv_is_listed():
    shipped = {p.stem for p in mil_csv_dir().glob("*.csv")}
    assert shipped == set(MIL_DATASETS)


def test_unknown_dataset():
    with pytest.raises(ValueError, match="unknown multiple-instance dataset"):
        load_mil("musk3")
