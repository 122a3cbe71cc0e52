"""The example plugin package ``plugins/rankopt-rbp`` end to end.

These tests need the package installed (``pip install ./plugins/rankopt-rbp``,
which the CI command does); they fail, rather than skip, when it is missing,
so that a CI run cannot pass without exercising the entry-point path.
"""

from __future__ import annotations

import importlib
import importlib.metadata

import numpy as np
import pytest
from oracles.brute_force import brute_force_max, ndcg_loss
from sklearn.datasets import load_digits

import rankopt
from rankopt.losses import PositionDiscountLoss
from rankopt.metrics import average_precision

INSTALL_HINT = (
    "the example plugin package rankopt-rbp is not installed; install it with "
    "`pip install ./plugins/rankopt-rbp` (or, for development, "
    "`pip install --no-deps -e plugins/rankopt-rbp`) from the repository root"
)


@pytest.fixture(scope="module")
def rbp_module():
    try:
        return importlib.import_module("rankopt_rbp.plugin")
    except ImportError as exc:
        pytest.fail(f"{INSTALL_HINT} ({exc})", pytrace=False)


def rbp_oracle_loss(persistence):
    """1 − RBP/ideal RBP straight from the definition, via the oracle's discount loss."""
    return lambda pattern: ndcg_loss(pattern, discount=lambda i: persistence ** (i - 1))


def test_entry_point_is_declared(rbp_module):
    entry_points = importlib.metadata.entry_points(group="rankopt")
    assert ("rbp", "rankopt_rbp.plugin") in {(ep.name, ep.value) for ep in entry_points}


def test_list_plugins_includes_rbp_from_the_entry_point(rbp_module):
    infos = {info.name: info for info in rankopt.list_plugins("loss")}
    assert "rbp" in infos, f"rbp missing from {sorted(infos)}; is RANKOPT_DISABLE_PLUGIN_AUTOLOAD set?"
    info = infos["rbp"]
    assert info.provider == "rbp"  # pluggy names an entry-point plugin after the entry point
    assert info.cls is rbp_module.RBPLoss
    assert issubclass(info.cls, PositionDiscountLoss)
    # The provider is the module the installed distribution's entry point names.
    assert rankopt.get_plugin_manager().get_plugin("rbp") is rbp_module
    (entry_point,) = [ep for ep in importlib.metadata.entry_points(group="rankopt") if ep.name == "rbp"]
    assert entry_point.dist.name == "rankopt-rbp"


def test_rbp_loss_definition(rbp_module):
    loss = rankopt.get_loss("rbp")
    assert loss.persistence == 0.8
    assert rankopt.get_loss("rbp", persistence=0.5) == rbp_module.RBPLoss(0.5)
    rng = np.random.default_rng(0)
    for persistence in (0.3, 0.8, 0.99):
        loss = rbp_module.RBPLoss(persistence)
        oracle = rbp_oracle_loss(persistence)
        for _ in range(10):
            pattern = rng.permutation(np.arange(9) < rng.integers(1, 9))
            assert loss.value(pattern) == pytest.approx(oracle(pattern.tolist()), abs=1e-12)
    # The discount is convex and decreasing (what makes the loss QS-suitable).
    d = rbp_module.RBPLoss(0.8).discount(np.arange(1.0, 50.0))
    assert np.all(np.diff(d) < 0) and np.all(np.diff(d, 2) > 0)


@pytest.mark.parametrize("persistence", [0.0, 1.0, -0.5, 1.5, float("nan"), float("inf"), True, "0.8", None])
def test_bad_persistence_raises(rbp_module, persistence):
    with pytest.raises(ValueError, match="persistence"):
        rbp_module.RBPLoss(persistence)


def _tiny_instances():
    rng = np.random.default_rng(12345)
    shapes = [(1, 1), (1, 4), (4, 1), (2, 3), (3, 2), (4, 2), (2, 2), (3, 3)]
    for n_pos, n_neg in shapes:
        for _ in range(3):
            # Scores on a coarse grid so that ties within and across classes are common.
            yield rng.integers(-2, 3, n_pos) / 4.0, rng.integers(-2, 3, n_neg) / 4.0
    yield np.zeros(3), np.zeros(3)  # everything tied


@pytest.mark.parametrize("persistence", [0.5, 0.8])
def test_most_violated_ranking_matches_brute_force(rbp_module, persistence):
    loss = rbp_module.RBPLoss(persistence)
    oracle = rbp_oracle_loss(persistence)
    methods = [
        info.name for info in rankopt.list_plugins("inference_method") if info.cls().unsupported_reason(loss) is None
    ]
    assert "greedy" in methods
    for pos, neg in _tiny_instances():
        expected = brute_force_max(oracle, pos, neg)
        for method in methods + ["auto"]:
            result = rankopt.most_violated_ranking(loss, pos, neg, inference=method)
            assert result.value == pytest.approx(expected, abs=1e-9), (method, pos, neg)
        by_name = rankopt.most_violated_ranking("rbp", pos, neg)
        if persistence == 0.8:  # the registered name builds the default persistence
            assert by_name.value == pytest.approx(expected, abs=1e-9)


def test_rank_svm_with_rbp_on_digits(rbp_module):
    X, digit = load_digits(return_X_y=True)
    X = X / 16.0
    y = digit == 3
    ranker = rankopt.RankSVM(loss="rbp", C=10.0).fit(X, y)
    assert isinstance(ranker.loss_, rbp_module.RBPLoss)
    assert ranker.converged_
    ap = average_precision(y, ranker.decision_function(X))
    # A ranker trained for the top of the list still ranks 3s well overall.
    assert ap > 0.9
    # Far better than chance (the positive rate, ~0.1).
    assert ap > 5 * y.mean()


def test_plugin_passes_rankopts_plugin_checks(rbp_module):
    """What the package README tells plugin authors to run."""
    from rankopt.testing import check_loss, check_plugin

    check_plugin(rbp_module, name="rbp")
    check_loss(rbp_module.RBPLoss(persistence=0.3))
