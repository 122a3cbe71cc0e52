"""A top-k declaration that lies (issue 38, point 3): checked on the instance a fit uses, past its k.

Registration probes the default-constructed class on up to 6 samples; a lie that needs another
parameter or more samples used to train silently with ``topk``.
"""

from __future__ import annotations

import numpy as np
import pytest

import rankopt
from rankopt.api import most_violated_rankings
from rankopt.exceptions import PluginContractError
from rankopt.losses import PrecisionAtKLoss
from rankopt.losses.structure import _VERDICTS, TopKCountStructure, declared_structure_problem
from rankopt.testing import check_loss, check_plugin


class Lie(PrecisionAtKLoss):
    """Δ twice what value() says: the issue's reproducer."""

    name = "lie"

    def structure(self):
        return TopKCountStructure(self.k, lambda m, p, n: 2 * (1 - np.asarray(m, float) / min(self.k, p)))


class BonusLie(PrecisionAtKLoss):
    """Truthful at the default bonus=0 (what registration probes), lying at any other."""

    name = "bonus_lie"

    def __init__(self, k=10, bonus=0.0):
        self.k, self.bonus = k, bonus

    def structure(self):
        k, bonus = self.k, self.bonus
        return TopKCountStructure(k, lambda m, p, n: 1 - np.asarray(m, float) / min(k, p) + bonus * (m == 0))


class LateLie(PrecisionAtKLoss):
    """Truthful on up to 6 samples, lying from 7 on."""

    name = "late_lie"

    def __init__(self, k=5):
        self.k = k

    def structure(self):
        k = self.k
        return TopKCountStructure(k, lambda m, p, n: 1 - np.asarray(m, float) / min(k, p) + 0.25 * (p + n >= 7))


def _fit(loss):
    rng = np.random.default_rng(0)
    X, y = rng.normal(size=(12, 2)), np.r_[np.ones(4), np.zeros(8)]
    X[:, 0] += y  # informative: w = 0 is not optimal
    return rankopt.RankSVM(loss=loss, C=100.0).fit(X, y)


@pytest.mark.parametrize("loss", [Lie(k=2), BonusLie(k=3, bonus=0.5), LateLie(k=5)], ids=["lie", "bonus", "late"])
def test_a_lying_declaration_is_refused_by_fit_with_a_counterexample(loss):
    with pytest.raises(PluginContractError, match=f"loss {loss.name!r}.*contradict: the ranking [+-]+ has"):
        _fit(loss)


def test_the_issues_reproducer_is_refused_instead_of_returning_twice_the_loss():
    with pytest.raises(PluginContractError, match="loss_of_count gives 2.0, but value\\(\\) gives 1.0"):
        most_violated_rankings(Lie(k=2), np.zeros(4), [1, 1, 0, 0], [0, 4])


@pytest.mark.parametrize("loss", [Lie(k=2), BonusLie(k=3, bonus=0.5), LateLie(k=5)], ids=["lie", "bonus", "late"])
def test_check_loss_catches_a_lying_declaration(loss):
    with pytest.raises(AssertionError, match="declares a structure its own numbers contradict"):
        check_loss(loss)


def test_check_plugin_catches_a_lie_past_six_samples_at_registration():
    class Plugin:
        @rankopt.hookimpl
        def rankopt_losses(self):
            return [LateLie]

    with pytest.raises(PluginContractError, match="late_lie"):
        check_plugin(Plugin())


def test_truthful_declarations_pass_and_train():
    for loss in [PrecisionAtKLoss(k=1), PrecisionAtKLoss(k=3), PrecisionAtKLoss(k=8), BonusLie(k=4)]:
        assert declared_structure_problem(loss) is None
        assert _fit(loss).converged_


def test_the_verdict_is_remembered_per_class_and_parameters(monkeypatch):
    calls = []
    original = TopKCountStructure.contract_problem

    def counted(self, loss):
        calls.append(loss.get_params())
        return original(self, loss)

    monkeypatch.setattr(TopKCountStructure, "contract_problem", counted)
    _VERDICTS.clear()
    for _ in range(3):
        declared_structure_problem(BonusLie(k=4, bonus=0.0))
    declared_structure_problem(BonusLie(k=4, bonus=0.25))
    assert calls == [{"k": 4, "bonus": 0.0}, {"k": 4, "bonus": 0.25}]


def test_the_plugin_guides_top_k_example_runs_and_passes_the_checks():
    """Issue 38, point 18: the top-k structure had no code example."""
    import pathlib
    import re
    import types

    guide = (pathlib.Path(__file__).parents[2] / "docs" / "plugins.md").read_text(encoding="utf-8")
    code = re.search(r"<!-- docs-example:topk-plugin -->\n```python\n(.*?)```", guide, re.S).group(1)
    module = types.ModuleType("hits_at_k_example")
    exec(compile(code, "docs/plugins.md", "exec"), module.__dict__)
    check_plugin(module)
    rng = np.random.default_rng(3)
    X = rng.normal(size=(40, 3))
    model = rankopt.RankSVM(loss=module.HitsAtKLoss(k=5), C=10.0).fit(X, X[:, 0] > 0.5)
    assert model.converged_ and model.inference_ == "topk"
