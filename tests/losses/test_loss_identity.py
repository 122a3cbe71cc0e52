"""Loss identity (issue 14, cases 1 and 3): parameters, equality, cache keys, scikit-learn tools.

A loss's identity is its class and the values of its ``__init__`` parameters
(scikit-learn's convention).  Everything rankopt derives from a loss — the
C1–C4 verdict, compiled tables, normalisers — is keyed on that identity, so
two instances with different parameters never share a verdict, a loss whose
parameter changes is looked at afresh, and equal losses share the work.
"""

from __future__ import annotations

import pickle

import numpy as np
import pytest
from oracles.brute_force import brute_force_max, ndcg_loss
from sklearn.base import clone
from sklearn.model_selection import GridSearchCV, cross_val_score
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler

import rankopt
from rankopt import check_qs_suitable, most_violated_ranking
from rankopt.inference import qs_check
from rankopt.losses import APLoss, NDCGLoss, PositionDiscountLoss, ZeroOneLoss
from rankopt.losses import discount as discount_module


class Disc(PositionDiscountLoss):
    """The issue's reproducer, written from the plugin guide: no get_params of its own."""

    name = "d"

    def __init__(self, flat=False):
        self.flat = flat

    def discount(self, p):
        p = np.asarray(p, float)
        return np.where(p <= 2, 1.0, 1 / np.maximum(p - 1, 1)) if self.flat else 1 / p


def disc_oracle(flat):
    return lambda pattern: ndcg_loss(pattern, lambda i: (1.0 if i <= 2 else 1 / (i - 1)) if flat else 1 / i)


class Geometric(PositionDiscountLoss):
    """A parameterised convex discount p^(i−1), like the example plugin's RBP."""

    name = "geometric_test"

    def __init__(self, p=0.8):
        self.p = p

    def discount(self, positions):
        return self.p ** (np.asarray(positions, dtype=np.float64) - 1.0)


# --------------------------------------------------------------------------
# Parameters and equality


def test_parameters_come_from_init():
    assert Disc().get_params() == {"flat": False}
    assert Disc(True).get_params(deep=False) == {"flat": True}
    assert APLoss().get_params(deep=True) == {}
    assert ZeroOneLoss(J=2.0).get_params() == {"J": 2.0}
    assert repr(Disc(True)) == "Disc(flat=True)"


def test_instances_with_different_parameters_differ():
    assert Disc() == Disc() and hash(Disc()) == hash(Disc())
    assert Disc() != Disc(True)
    assert Disc().cache_key() != Disc(True).cache_key()
    assert Geometric(0.5) != Geometric(0.8)
    assert NDCGLoss() != APLoss()


def test_set_params_changes_identity_and_returns_the_loss():
    loss = Disc()
    assert loss.set_params(flat=True) is loss
    assert loss == Disc(True)
    with pytest.raises(ValueError, match="expected a parameter of Disc"):
        loss.set_params(nope=1)


def test_nested_loss_parameters():
    class Wrapper(PositionDiscountLoss):
        name = "wrapper_test"

        def __init__(self, inner=None, scale=1.0):
            self.inner = inner
            self.scale = scale

        def discount(self, positions):
            return self.inner.discount(positions)

    loss = Wrapper(Geometric(0.5))
    assert loss.get_params()["inner__p"] == 0.5
    assert "inner__p" not in loss.get_params(deep=False)
    loss.set_params(inner__p=0.7)
    assert loss.inner.p == 0.7 and loss == Wrapper(Geometric(0.7))
    with pytest.raises(ValueError, match="to be a loss"):
        loss.set_params(scale__x=1)


def test_missing_attribute_is_a_clear_error():
    class Forgetful(PositionDiscountLoss):
        name = "forgetful_test"

        def __init__(self, p=0.5):
            self._p = p

        def discount(self, positions):
            return self._p ** np.asarray(positions, dtype=float)

    with pytest.raises(AttributeError, match="store its constructor parameter 'p'"):
        Forgetful().get_params()
    loss = Forgetful()
    assert loss.cache_key() is None and loss == loss and loss != Forgetful()


def test_unkeyable_parameters_are_never_cached_and_stay_correct(rng):
    class Holder:  # a mutable object: identity is no key for its contents
        def __init__(self, p):
            self.p = p

    class Held(PositionDiscountLoss):
        name = "held_test"

        def __init__(self, holder=None):
            self.holder = holder

        def discount(self, positions):
            return self.holder.p ** (np.asarray(positions, dtype=float) - 1)

    holder = Holder(0.5)
    loss = Held(holder)
    assert loss.cache_key() is None
    pos, neg = rng.normal(size=3), rng.normal(size=3)
    for p in (0.5, 0.9):
        holder.p = p  # mutated behind the loss's back: nothing cached may be reused
        oracle = lambda pattern, p=p: ndcg_loss(pattern, lambda i: p ** (i - 1))  # noqa: E731
        with pytest.warns(UserWarning, match="cannot be keyed"):
            got = most_violated_ranking(loss, pos, neg, "qs").value
        assert got == pytest.approx(brute_force_max(oracle, pos, neg), abs=1e-12)


def test_pickle_round_trip_keeps_identity():
    loss = Geometric(0.3)
    loss.compiled_form(4, 5)
    copy = pickle.loads(pickle.dumps(loss))
    assert copy == loss and copy.compiled_form(4, 5) is loss.compiled_form(4, 5)


def test_old_style_get_params_override_still_works():
    class OldStyle(PositionDiscountLoss):
        name = "old_style_test"

        def __init__(self, p=0.5):
            self.p = p

        def get_params(self, deep=True):
            return {"p": self.p}

        def discount(self, positions):
            return self.p ** np.asarray(positions, dtype=float)

    assert OldStyle(0.2).get_params(deep=True) == {"p": 0.2}
    assert clone(OldStyle(0.2)) == OldStyle(0.2)


# --------------------------------------------------------------------------
# Case 1: a parameterised plugin loss and the cached C1–C4 verdict


def test_case1_verdict_of_one_instance_is_not_reused_for_another():
    most_violated_ranking(Disc(), [1.0], [0.0], inference="qs")  # Disc() is QS-suitable (1/p is convex)
    assert not check_qs_suitable(Disc(True)).suitable
    with pytest.raises(ValueError, match="inference method 'qs' cannot be used with loss 'd': C3 fails"):
        most_violated_ranking(Disc(True), [-0.35, 0.52], [-0.15, 0.1, -0.08], inference="qs")
    pos, neg = [-0.35, 0.52], [-0.15, 0.1, -0.08]
    got = most_violated_ranking(Disc(True), pos, neg)  # auto: an exact general method
    assert got.value == pytest.approx(brute_force_max(disc_oracle(True), pos, neg), abs=1e-12)
    assert got.value == pytest.approx(0.81, abs=0.005)


@pytest.mark.parametrize("how", ["attribute", "set_params"])
def test_case1_changing_a_parameter_invalidates_the_compiled_form(rng, how):
    loss = Disc()
    for _ in range(3):
        pos, neg = rng.normal(size=3), rng.normal(size=4)
        most_violated_ranking(loss, pos, neg, "qs")
    if how == "attribute":
        loss.flat = True
    else:
        loss.set_params(flat=True)
    assert loss.value(np.array([True, True, False, False])) == 0.0  # was −0.333 with the stale normaliser
    for _ in range(20):
        pos, neg = rng.normal(size=3), rng.normal(size=4)
        got = most_violated_ranking(loss, pos, neg)
        assert got.value == pytest.approx(brute_force_max(disc_oracle(True), pos, neg), abs=1e-12)
        assert got.loss == pytest.approx(disc_oracle(True)(_pattern(got)), abs=1e-12)


def _pattern(result):
    n_pos = result.pos_ranks.size
    pattern = []
    for rank in range(1, n_pos + 2):
        pattern += [False] * int(np.sum(result.neg_ranks == rank))
        if rank <= n_pos:
            pattern.append(True)
    return pattern


def test_verdicts_are_cached_by_value(monkeypatch):
    calls = []
    real = qs_check.check_qs_suitable
    monkeypatch.setattr(qs_check, "check_qs_suitable", lambda loss, **kw: calls.append(loss) or real(loss, **kw))
    qs_check._REPORTS.clear()
    for _ in range(3):
        qs_check.unsupported_reason(Geometric(0.25), "C4")
    assert len(calls) == 1
    qs_check.unsupported_reason(Geometric(0.5), "C4")
    assert len(calls) == 2
    qs_check._REPORTS.clear()


# --------------------------------------------------------------------------
# Sharing the compiled form between equal losses


def test_equal_losses_share_one_compiled_form():
    assert NDCGLoss().compiled_form(10, 20) is NDCGLoss().compiled_form(10, 20)
    assert Geometric(0.5).compiled_form(10, 20) is not Geometric(0.6).compiled_form(10, 20)


def test_loss_by_name_does_not_rebuild_the_table(monkeypatch, rng):
    built = []
    real = NDCGLoss.discount_table
    monkeypatch.setattr(NDCGLoss, "discount_table", lambda self, n: built.append(n) or real(self, n))
    discount_module._COMPILED_FORMS.clear()
    discount_module._NORMALISERS.clear()
    pos, neg = rng.normal(size=50), rng.normal(size=3000)
    for _ in range(4):
        most_violated_ranking("ndcg", pos, neg, "qs")
    assert built.count(50 + 3000) == 1


# --------------------------------------------------------------------------
# Case 3: scikit-learn tools on estimators holding a loss object


@pytest.fixture(scope="module")
def ranking_data():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(60, 4))
    y = (X[:, 0] + 0.5 * rng.normal(size=60) > 0.3).astype(int)
    return X, y


def test_case3_clone_of_an_estimator_with_a_loss_object():
    model = rankopt.RankSVM(loss=rankopt.get_loss("ap"))
    cloned = clone(model)
    assert cloned.loss == model.loss and cloned.loss is not model.loss
    assert "loss" in model.get_params(deep=True)
    cloned = clone(rankopt.RankSVM(loss=Geometric(0.3)))
    assert cloned.loss == Geometric(0.3) and cloned.get_params()["loss__p"] == 0.3
    assert clone(rankopt.LatentAPSVM(loss=APLoss())).loss == APLoss()


def test_case3_cross_val_score_grid_search_and_pipeline(ranking_data):
    X, y = ranking_data
    scores = cross_val_score(rankopt.RankSVM(loss=rankopt.get_loss("ndcg"), tol=1e-2), X, y, cv=2)
    assert scores.shape == (2,) and np.all(np.isfinite(scores))
    search = GridSearchCV(
        rankopt.RankSVM(loss=Geometric(0.5), tol=1e-2), {"loss__p": [0.5, 0.9], "C": [1.0]}, cv=2
    ).fit(X, y)
    assert search.best_estimator_.loss.p in (0.5, 0.9)
    search = GridSearchCV(rankopt.RankSVM(tol=1e-2), {"loss": [APLoss(), NDCGLoss()]}, cv=2).fit(X, y)
    assert search.best_estimator_.loss in (APLoss(), NDCGLoss())
    pipe = make_pipeline(StandardScaler(), rankopt.RankSVM(loss=APLoss(), tol=1e-2)).fit(X, y)
    assert np.isfinite(pipe.score(X, y))
    assert clone(pipe).steps[-1][1].loss == APLoss()


def test_case3_latent_ap_svm_with_a_loss_object_clones_and_fits():
    rng = np.random.default_rng(1)
    bags = [rng.normal(loc=(1.0 if k < 5 else 0.0), size=(3, 2)) for k in range(12)]
    y = np.array([1] * 5 + [0] * 7)
    model = clone(rankopt.LatentAPSVM(loss=rankopt.get_loss("ap"), n_init=1, random_state=0, cccp_max_iter=3))
    model.fit(bags, y)
    assert model.loss == APLoss() and np.all(np.isfinite(model.coef_))
