"""scikit-learn's input conventions on every estimator: feature names, feature counts, label messages.

Fitting on a DataFrame stores ``feature_names_in_``; predicting on other or
reordered columns raises scikit-learn's ValueError instead of silently
scoring the wrong features.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from rankopt import HOAPSVM, HOBSVM, LatentAPSVM, LatentSSVM, LatentSVM, RankSVM
from rankopt.exceptions import ConvergenceWarning

pd = pytest.importorskip("pandas")

NAMES = ["a", "b", "c", "d"]


def _ranking_data(rng, n=40):
    X = rng.normal(size=(n, 4))
    y = (X[:, 0] + 0.5 * rng.normal(size=n) > 0).astype(int)
    y[:2] = [1, 0]
    return pd.DataFrame(X, columns=NAMES), y


def _assert_names_checked(model, X, *predict_args, **predict_kwargs):
    """``model`` fitted on DataFrame X: names stored, reordered/renamed columns refused, same columns fine."""
    np.testing.assert_array_equal(model.feature_names_in_, NAMES)
    assert model.n_features_in_ == 4
    before = model.decision_function(X, *predict_args, **predict_kwargs)
    with pytest.raises(ValueError, match="Feature names must be in the same order as they were in fit"):
        model.decision_function(X[X.columns[::-1]], *predict_args, **predict_kwargs)
    with pytest.raises(ValueError, match="Feature names unseen at fit time:\n- z\n"):
        model.decision_function(X.rename(columns={"d": "z"}), *predict_args, **predict_kwargs)
    with pytest.raises(ValueError, match="Feature names seen at fit time, yet now missing:\n- d\n"):
        model.decision_function(X.drop(columns="d"), *predict_args, **predict_kwargs)
    # names on one side only: scikit-learn warns, and the columns are taken by position
    with pytest.warns(UserWarning, match="X does not have valid feature names"):
        after = model.decision_function(X.to_numpy(), *predict_args, **predict_kwargs)
    np.testing.assert_array_equal(after, before)


def test_rank_svm_stores_and_checks_feature_names(rng):
    X, y = _ranking_data(rng)
    model = RankSVM().fit(X, y)
    _assert_names_checked(model, X)
    with pytest.raises(ValueError, match="Feature names must be in the same order"):
        model.score(X[X.columns[::-1]], y)


def test_rank_svm_fitted_on_an_array_has_no_names_and_refit_drops_them(rng):
    X, y = _ranking_data(rng)
    model = RankSVM().fit(X, y)
    model.fit(X.to_numpy(), y)
    assert not hasattr(model, "feature_names_in_")
    with pytest.warns(UserWarning, match="X has feature names, but RankSVM was fitted without feature names"):
        model.decision_function(X)


def test_rank_svm_over_queries_checks_names(rng):
    X, y = _ranking_data(rng)
    qid = np.repeat([1, 2], 20)
    model = RankSVM().fit(X, y, qid=qid)
    with pytest.raises(ValueError, match="Feature names must be in the same order"):
        model.score(X[["b", "a", "c", "d"]], y, qid=qid)


def test_hob_svm_stores_and_checks_feature_names(rng):
    X, y = _ranking_data(rng)
    groups = np.arange(40) // 4
    _assert_names_checked(HOBSVM(C=10.0).fit(X, y, groups=groups), X, groups=groups)


def test_hoap_svm_stores_and_checks_feature_names(rng):
    X, y = _ranking_data(rng, n=20)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        model = HOAPSVM(C=10.0, init="zero", cccp_max_iter=2, max_iter=50).fit(X, y)
    _assert_names_checked(model, X)


@pytest.mark.filterwarnings("ignore:CCCP did not converge")
@pytest.mark.parametrize("cls", [LatentAPSVM, LatentSVM, LatentSSVM])
def test_latent_models_check_the_names_of_a_stacked_dataframe(rng, cls):
    n_bags = 12
    bag_ids = np.repeat(np.arange(n_bags), 3)
    X = pd.DataFrame(rng.normal(size=(bag_ids.size, 4)), columns=NAMES)
    labels = np.arange(n_bags) % 2
    X.loc[np.repeat(labels, 3).astype(bool), "a"] += 2.0
    model = cls(n_init=1, random_state=0, cccp_max_iter=3).fit(X, np.repeat(labels, 3), bags=bag_ids)
    _assert_names_checked(model, X, bags=bag_ids)
    with pytest.raises(ValueError, match="Feature names must be in the same order"):
        model.score(X[X.columns[::-1]], np.repeat(labels, 3), bags=bag_ids)
    with pytest.raises(ValueError, match="Feature names must be in the same order"):
        model.latent_choices(X[X.columns[::-1]], bags=bag_ids)
    # a list of bags has no column names: nothing stored
    bags = [X.to_numpy()[bag_ids == b] for b in range(n_bags)]
    assert not hasattr(cls(n_init=1, random_state=0, cccp_max_iter=3).fit(bags, labels), "feature_names_in_")


@pytest.mark.parametrize(
    "make, fit_kwargs", [(lambda: HOBSVM(), {}), (lambda: LatentSVM(n_init=1, random_state=0), None)]
)
def test_feature_count_message_is_one_sentence(rng, make, fit_kwargs):
    if fit_kwargs is None:  # latent: a list of bags
        bags = [rng.normal(size=(3, 4)) for _ in range(6)]
        model = make().fit(bags, np.arange(6) % 2)
        bad = [np.ones((2, 3))]
    else:
        X, y = _ranking_data(rng)
        model = make().fit(X.to_numpy(), y)
        bad = np.ones((5, 3))
    with pytest.raises(ValueError) as excinfo:
        model.decision_function(bad)
    assert str(excinfo.value) == (
        f"X has 3 features, but {type(model).__name__} is expecting 4 features as input, as in fit"
    )


# ------------------------------------------------------------------ labels the user can recognise


def test_string_labels_are_shown():
    X = np.random.default_rng(0).normal(size=(4, 2))
    with pytest.raises(ValueError, match=r"got the labels 'neg', 'pos' \(dtype <U3\) instead"):
        RankSVM().fit(X, np.array(["pos", "neg", "pos", "neg"]))
    # pandas gives an object array: the labels are shown all the same
    with pytest.raises(ValueError, match=r"got the labels 'neg', 'pos' instead"):
        RankSVM().fit(X, pd.Series(["pos", "neg", "pos", "neg"]))
    with pytest.raises(ValueError, match=r"relevance grades >= 0, got the labels 'high', 'low'"):
        RankSVM().fit(X, np.array(["low", "high", "low", "high"]), qid=[1, 1, 2, 2])


def test_many_distinct_labels_are_abbreviated():
    from rankopt._validation import describe_values

    assert describe_values(np.array(list("gfedcba"))) == "'a', 'b', 'c', 'd', 'e', … (7 distinct)"
    assert describe_values(np.array(["x", 1], dtype=object)) == "'x', 1"  # unorderable: order of appearance


def test_string_query_ids_are_shown():
    X = np.random.default_rng(0).normal(size=(4, 2))
    with pytest.raises(ValueError, match=r"integer query ids, got 'q1', 'q2' \(dtype <U2\) instead"):
        RankSVM().fit(X, [1, 0, 1, 0], qid=np.array(["q1", "q1", "q2", "q2"]))
