"""Latent AP-SVM over queries of bags: layout, brute force per query, the estimator API."""

import itertools

import numpy as np
import pytest
from test_latent import _bag_rows, _latent_ap_brute, _tiny, _value

from rankopt.data.bags import Bags, check_bags
from rankopt.estimators.latent import LatentAPSVM, LatentSSVM, LatentSVM
from rankopt.features.linear import LinearFeatureMap
from rankopt.losses.ap import APLoss
from rankopt.metrics import mean_average_precision
from rankopt.models.latent import BagQueries, LatentRankingCCCP
from rankopt.plugins import default_registry

FM = LinearFeatureMap()
AP = APLoss()


def _with_qid(bags: Bags, qid) -> Bags:
    return check_bags(bags, qid=np.asarray(qid))[0]


def _cccp(pos, neg):
    return LatentRankingCCCP(pos, neg, AP, FM, model="apsvm", inference="auto", registry=default_registry())


def test_bag_queries_layout():
    # Query 7 has no negative bag and is left out; within a query positives come first.
    queries = BagQueries.from_qid(np.array([3, 7, 3, 5]), np.array([5, 3, 3, 5, 5]))
    assert (queries.n_queries, queries.n_used) == (3, 2)
    np.testing.assert_array_equal(queries.offsets, [0, 4, 8])
    np.testing.assert_array_equal(queries.relevance, [1, 1, 0, 0, 1, 0, 0, 0])
    np.testing.assert_array_equal(queries.pos_items, [0, 2, 3])
    np.testing.assert_array_equal(queries.neg_items, [1, 2, 0, 3, 4])
    np.testing.assert_allclose(queries.pos_weight, [1 / 4, 0, 1 / 4, 1 / 2])
    np.testing.assert_allclose(queries.neg_weight, [1 / 6, 1 / 4, 1 / 4, 1 / 6, 1 / 6])


def test_no_query_with_both_labels_is_an_error():
    with pytest.raises(ValueError, match="positive and a negative bag"):
        BagQueries.from_qid(np.array([0, 0]), np.array([1, 2]))


@pytest.mark.parametrize("sizes", [[(1, 1), (2, 1)], [(1, 2), (1, 1), (2, 0)], [(2, 2), (1, 1)]])
def test_loss_augmented_inference_is_the_mean_of_the_queries_brute_force(rng, sizes):
    # Each query's value by brute force over its negatives' candidates and all
    # its rankings; the multi-query value must be their mean over the queries
    # holding both labels (a query without negatives is left out).
    for trial in range(3):
        parts = [_tiny(rng, n_pos, max(n_neg, 1), integer=trial % 2 == 0) for n_pos, n_neg in sizes]
        used = [n_neg > 0 for _, n_neg in sizes]
        pos = _with_qid(
            check_bags([p.X[p.offsets[b] : p.offsets[b + 1]] for p, _ in parts for b in range(p.n_bags)])[0],
            np.concatenate([np.full(p.n_bags, q) for q, (p, _) in enumerate(parts)]),
        )
        neg_parts = [(q, n) for q, ((_, n), u) in enumerate(zip(parts, used, strict=True)) if u]
        neg = _with_qid(
            check_bags([n.X[n.offsets[b] : n.offsets[b + 1]] for _, n in neg_parts for b in range(n.n_bags)])[0],
            np.concatenate([np.full(n.n_bags, q) for q, n in neg_parts]),
        )
        w = rng.normal(size=2)
        cccp = _cccp(pos, neg)
        assert cccp.queries.n_used == sum(used)
        for pos_rows in itertools.product(*_bag_rows(pos)):
            value = _value(cccp.fixed(np.array(pos_rows)), w)
            expected, start = [], 0
            for (p, n), u in zip(parts, used, strict=True):
                rows = [pos_rows[start + b] - pos.offsets[start + b] + p.offsets[b] for b in range(p.n_bags)]
                if u:
                    expected.append(_latent_ap_brute(rows, p, n, w))
                start += p.n_bags
            assert value == pytest.approx(np.mean(expected), abs=1e-9)


def _query_data(rng, n_queries=6, bags_per_query=8, d=4):
    """Queries of bags whose relevance follows w* = e_0 within each query, with a per-query shift."""
    bags, y, qid = [], [], []
    for q in range(n_queries):
        shift = rng.normal(0, 3, size=d)
        for b in range(bags_per_query):
            label = int(b < bags_per_query // 3)
            size = int(rng.integers(1, 4))
            candidates = rng.normal(size=(size, d)) + shift
            candidates[0, 0] += 2.0 * label
            bags.append(candidates)
            y.append(label)
            qid.append(q)
    return bags, np.array(y), np.array(qid)


def test_one_query_id_fits_exactly_as_without_qid(rng):
    bags, y, _ = _query_data(rng, n_queries=2)
    plain = LatentAPSVM(C=10, n_init=2, random_state=0, cccp_max_iter=5).fit(bags, y)
    one = LatentAPSVM(C=10, n_init=2, random_state=0, cccp_max_iter=5).fit(bags, y, qid=np.full(len(bags), 4))
    np.testing.assert_array_equal(one.coef_, plain.coef_)
    assert one.objective_ == plain.objective_
    assert (one.n_queries_, one.n_queries_used_) == (plain.n_queries_, plain.n_queries_used_) == (1, 1)
    assert one.score(bags, y, qid=np.zeros(len(bags))) == pytest.approx(plain.score(bags, y))


def test_fit_over_queries(rng, caplog):
    bags, y, qid = _query_data(rng)
    # A query of negatives only is left out, and said so.
    bags += [rng.normal(size=(2, 4)) for _ in range(3)]
    y = np.r_[y, 0, 0, 0]
    qid = np.r_[qid, 99, 99, 99]
    with caplog.at_level("INFO", logger="rankopt.models.latent"):
        model = LatentAPSVM(C=10, n_init=2, random_state=0).fit(bags, y, qid=qid)
    assert "1 of 7 queries" in caplog.text
    assert (model.n_queries_, model.n_queries_used_) == (7, 6)
    assert model.converged_
    test_bags, test_y, test_qid = _query_data(np.random.default_rng(99))
    per_query = model.score(test_bags, test_y, qid=test_qid)
    assert per_query == mean_average_precision(test_y, model.decision_function(test_bags), test_qid)
    assert per_query > 0.6  # a third of the bags are relevant: random scores average about 0.4


def test_qid_per_row_of_a_stacked_matrix(rng):
    bags, y, qid = _query_data(rng, n_queries=3)
    X = np.concatenate(bags)
    bag_ids = np.repeat(np.arange(len(bags)), [len(b) for b in bags])
    by_bag = LatentAPSVM(C=10, n_init=1, random_state=0, cccp_max_iter=3).fit(bags, y, qid=qid)
    by_row = LatentAPSVM(C=10, n_init=1, random_state=0, cccp_max_iter=3).fit(
        X, y[bag_ids], bags=bag_ids, qid=qid[bag_ids]
    )
    np.testing.assert_array_equal(by_row.coef_, by_bag.coef_)
    mixed = qid[bag_ids].copy()
    b = next(b for b, bag in enumerate(bags) if bag.shape[0] > 1)
    mixed[np.flatnonzero(bag_ids == b)[1]] += 1  # bag b has rows in two queries
    with pytest.raises(ValueError, match=f"mixed query ids within bag id {b}"):
        LatentAPSVM().fit(X, y[bag_ids], bags=bag_ids, qid=mixed)


@pytest.mark.parametrize(
    "qid, match",
    [
        (np.zeros(5), "one query id per bag"),
        (np.full(24, np.nan), "NaN or infinity"),
        (np.full(24, 0.5), "integer query ids"),
        (np.array(["a"] * 24), "integer query ids"),
    ],
)
def test_bad_qid(rng, qid, match):
    bags, y, _ = _query_data(rng, n_queries=3)
    with pytest.raises(ValueError, match=match):
        LatentAPSVM().fit(bags, y, qid=qid)


def test_every_query_of_one_label_is_an_error(rng):
    bags, y, _ = _query_data(rng, n_queries=2)
    with pytest.raises(ValueError, match="positive and a negative bag"):
        LatentAPSVM().fit(bags, y, qid=np.where(y == 1, 0, 1))


@pytest.mark.filterwarnings("ignore::rankopt.ConvergenceWarning")
@pytest.mark.parametrize("model", [LatentSSVM(), LatentSVM()], ids=["ssvm", "svm"])
def test_the_baselines_refuse_qid_in_fit_and_score_with_it(rng, model):
    bags, y, qid = _query_data(rng, n_queries=2)
    with pytest.raises(ValueError, match="ranks one query"):
        model.fit(bags, y, qid=qid)
    model.set_params(n_init=1, cccp_max_iter=2).fit(bags, y)
    assert 0.0 <= model.score(bags, y, qid=qid) <= 1.0
