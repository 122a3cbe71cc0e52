"""The example graded-loss plugin package ``plugins/rankopt-graded`` end to end (issue 29).

Like ``test_example_plugin.py``, these tests fail rather than skip when the package is not installed,
so that CI cannot pass without the entry-point path of a graded plugin.
"""

from __future__ import annotations

import importlib
import importlib.metadata

import numpy as np
import pytest

import rankopt
from rankopt import hookimpl
from rankopt.api import ground_truth_coefficients, most_violated_rankings
from rankopt.losses import GradedPositionLoss
from rankopt.metrics import ndcg_at_k
from rankopt.plugins import PluginContractError, create_plugin_manager
from rankopt.testing import brute_force_graded, check_plugin

INSTALL_HINT = (
    "the example plugin package rankopt-graded is not installed; install it with "
    "`pip install ./plugins/rankopt-graded` from the repository root"
)


@pytest.fixture(scope="module")
def graded_module():
    try:
        return importlib.import_module("rankopt_graded")
    except ImportError as exc:
        pytest.fail(f"{INSTALL_HINT} ({exc})", pytrace=False)


def test_entry_point_and_registry(graded_module):
    entry_points = importlib.metadata.entry_points(group="rankopt")
    assert ("graded", "rankopt_graded") in {(ep.name, ep.value) for ep in entry_points}
    infos = {info.name: info for info in rankopt.list_plugins("loss")}
    assert infos["rbp_graded"].provider == infos["dcg_zipf"].provider == "graded"


def _queries(rng, n_queries, max_size):
    sizes = rng.integers(1, max_size + 1, n_queries)
    offsets = np.concatenate(([0], np.cumsum(sizes)))
    grades = rng.integers(0, 5, offsets[-1])
    scores = np.round(rng.normal(size=offsets[-1]) * rng.choice([0.3, 3.0], offsets[-1]), 1)
    return scores, grades, offsets


@pytest.mark.parametrize(
    "name, params",
    [
        ("dcg_zipf", {"k": 1}),
        ("dcg_zipf", {"k": 3}),
        ("dcg_zipf", {"k": 10}),
        ("rbp_graded", {"persistence": 0.5, "k": 2}),
        ("rbp_graded", {"persistence": 0.8}),
        ("rbp_graded", {"persistence": 0.95, "max_grade": 2}),
    ],
)
def test_inference_is_the_best_of_all_rankings(graded_module, name, params):
    """≥ 500 small queries per loss (three settings each): ties in scores and grades, k ≥ n and k < n."""
    loss = rankopt.get_loss(name, **params)
    structure = loss.structure()
    rng = np.random.default_rng(sum(map(ord, name)) + len(params))
    scores, grades, offsets = _queries(rng, 250, 6)
    checked = 0
    for method in ("auto", "assignment"):
        result = most_violated_rankings(loss, scores, grades, offsets, method)
        for q in range(offsets.size - 1):
            s, g = scores[offsets[q] : offsets[q + 1]], grades[offsets[q] : offsets[q + 1]]
            gains = structure.gains(g)
            if gains.max() == gains.min():
                assert not result.usable[q] and result.values[q] == 0
                continue
            assert result.values[q] == pytest.approx(brute_force_graded(structure, s, g), abs=1e-12)
            coef = result.coef[offsets[q] : offsets[q + 1]]
            assert result.values[q] == pytest.approx(coef @ s + result.losses[q], abs=1e-12)
            checked += method == "auto"
    assert checked >= 170  # three settings per loss: >= 510 queries checked for each


def test_the_loss_definition_and_the_ground_truth(graded_module):
    loss = rankopt.get_loss("dcg_zipf", k=2)
    # Ideal order (grade 3, 2, 0): DCG@2 = 7 + 3/2; the order 0, 3, 2 has DCG@2 = 0 + 7/2.
    assert loss.graded_value([0, 3, 2], [1, 2, 0]) == 0.0
    assert loss.graded_value([0, 3, 2], [0, 1, 2]) == pytest.approx(1 - 3.5 / 8.5)
    coef = ground_truth_coefficients(loss, [0, 3, 2], [0, 3])
    np.testing.assert_allclose(coef, [0.0, 1 / 1.5, 0.5 / 1.5])
    rbp = rankopt.get_loss("rbp_graded", persistence=0.5, max_grade=2)
    np.testing.assert_allclose(rbp.gain(np.array([0, 1, 2, 7])), [0.0, 0.5, 1.0, 1.0])


def test_ranksvm_trains_certified_with_both_losses(graded_module, rng):
    n_queries, size, d = 30, 12, 5
    X = rng.normal(size=(n_queries * size, d))
    latent = X @ np.array([1.0, 0.5, 0.0, 0.0, -0.5]) + 0.3 * rng.normal(size=X.shape[0])
    grades = np.digitize(latent, np.quantile(latent, [0.5, 0.8, 0.95]))
    qid = np.repeat(np.arange(n_queries), size)
    for name in ("rbp_graded", "dcg_zipf"):
        model = rankopt.RankSVM(loss=name, C=10.0).fit(X, grades, qid=qid)
        assert model.converged_ and model.inference_ == "sort"
        assert ndcg_at_k(grades, model.decision_function(X), qid) > 0.8
        reference = rankopt.RankSVM(loss=name, C=10.0, inference="assignment").fit(X, grades, qid=qid)
        assert reference.converged_
        primal = model.history_[-1].primal_objective
        assert reference.history_[-1].primal_objective == pytest.approx(primal, abs=2 * 10.0 * 1e-3)


def test_the_plugin_passes_rankopts_plugin_checks(graded_module):
    check_plugin(graded_module)


class _Declared(GradedPositionLoss):
    name = "declared_test"

    def __init__(self, k=3, rising=False, falling_gain=False):
        self.k, self.rising, self.falling_gain = k, rising, falling_gain

    def gain(self, grades):
        grades = np.asarray(grades, dtype=np.float64)
        return 1.0 / (1.0 + grades) if self.falling_gain else grades

    def position_discount(self, positions):
        positions = np.asarray(positions, dtype=np.float64)
        return positions if self.rising else 1.0 / positions


@pytest.mark.parametrize(
    "params, message",
    [
        ({"rising": True}, r"discount: D\(1\) = 1.0 < D\(2\) = 2.0"),
        ({"falling_gain": True}, r"gain: G\(0\) = 1.0 > G\(1\) = 0.5"),
        ({"k": 0}, r"expected k to be an integer >= 1"),
    ],
)
def test_a_structure_its_numbers_contradict_is_refused_at_registration(params, message):
    class Plugin:
        @hookimpl
        def rankopt_losses(self):
            return [type("Contradicting", (_Declared,), {"__init__": _init_with(params)})]

    pm = create_plugin_manager(autoload=False)
    with pytest.raises(PluginContractError, match=f"plugin 'contradicting': loss 'declared_test'.*{message}"):
        pm.register(Plugin(), name="contradicting")


def _init_with(params):
    defaults = {"k": 3, "rising": False, "falling_gain": False, **params}

    def __init__(self, k=defaults["k"], rising=defaults["rising"], falling_gain=defaults["falling_gain"]):
        _Declared.__init__(self, k, rising, falling_gain)

    return __init__
