"""Model plugins are real (issue 39): an estimator takes ``model=`` and ``feature_map=``, and a third-party
model registered as a plugin is reachable."""

from __future__ import annotations

import numpy as np
import pytest

import rankopt
from rankopt.models.ranking import RankingModel


class CountingRankingModel(RankingModel):
    """A third-party model: the ranking model, counting the problems it builds."""

    name = "counting_ranking"
    built = 0

    def build_problem(self, *args, **kwargs):
        type(self).built += 1
        return super().build_problem(*args, **kwargs)


class _Plugin:
    @rankopt.hookimpl
    def rankopt_models(self):
        return [CountingRankingModel]


@pytest.fixture
def plugin():
    manager = rankopt.get_plugin_manager()
    manager.register(_Plugin(), name="counting-model")
    CountingRankingModel.built = 0
    yield
    manager.unregister(name="counting-model")


def _data():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(60, 3))
    return X, (X[:, 0] + 0.3 * rng.normal(size=60) > 0.5).astype(int), np.repeat(np.arange(6), 10)


def test_a_third_party_model_is_reached_by_name_and_gives_the_built_in_answer(plugin):
    X, y, qid = _data()
    theirs = rankopt.RankSVM(loss="ap", model="counting_ranking").fit(X, y, qid=qid)
    ours = rankopt.RankSVM(loss="ap").fit(X, y, qid=qid)
    assert CountingRankingModel.built == 1
    np.testing.assert_array_equal(theirs.coef_, ours.coef_)


def test_a_model_for_another_kind_of_output_is_refused():
    X, y, _ = _data()
    with pytest.raises(ValueError, match="expected a model for ranking losses with loss 'ap', got model 'binary'"):
        rankopt.RankSVM(loss="ap", model="binary").fit(X, y)


def test_an_unknown_model_or_feature_map_is_refused_naming_the_registered_ones():
    X, y, _ = _data()
    with pytest.raises(ValueError, match="no_such_model.*ranking"):
        rankopt.RankSVM(model="no_such_model").fit(X, y)
    with pytest.raises(ValueError, match="no_such_map.*linear"):
        rankopt.RankSVM(feature_map="no_such_map").fit(X, y)


def test_approx_keeps_its_own_models():
    X, y, _ = _data()
    with pytest.raises(ValueError, match="model='auto' with approx"):
        rankopt.RankSVM(approx=50, model="ranking").fit(X, y)


@pytest.mark.parametrize(
    "name", ["ranking", "binary", "high_order_binary", "high_order_ap", "latent_ap", "latent_ssvm", "latent_binary"]
)
def test_every_model_honours_its_declared_return_type(name):
    """A model builds what its ``problem_kind`` says: a StructuredProblem (solved by a solver of the table)
    or a CCCPProblem (solved by CCCP)."""
    from rankopt.engine.cccp import CCCPProblem
    from rankopt.engine.problem import StructuredProblem
    from rankopt.plugins import default_registry

    model = default_registry().get_model(name)
    assert {"structured": StructuredProblem, "cccp": CCCPProblem}[model.problem_kind]


def test_the_latent_estimators_build_their_problems_through_their_model_plugins(monkeypatch):
    """The latent models are reached through the registry, so the return type is the declared one."""
    from rankopt.engine.cccp import CCCPProblem
    from rankopt.models.latent_plugin import LatentAPModel

    built = []
    original = LatentAPModel.build_problem

    def recording(self, *args, **kwargs):
        built.append(original(self, *args, **kwargs))
        return built[-1]

    monkeypatch.setattr(LatentAPModel, "build_problem", recording)
    rng = np.random.default_rng(1)
    bags = [rng.normal(size=(3, 2)) + (2.0 if i < 4 else 0.0) * np.eye(1, 2) for i in range(8)]
    rankopt.LatentAPSVM(C=1.0, n_init=1, random_state=0).fit(bags, [1] * 4 + [0] * 4)
    assert built and all(isinstance(problem, CCCPProblem) for problem in built)
