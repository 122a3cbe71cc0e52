"""The structure table (issue 39): one kernel per declared structure and device, looked up by the structure's
class; a new structure is its class, its kernel and one registration, all in this file."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np
import pytest

import rankopt
from rankopt.api import most_violated_rankings
from rankopt.exceptions import PluginContractError
from rankopt.inference import structure_table
from rankopt.inference.binary_kernels import BinaryRankKernel, TopKCountKernel, per_query
from rankopt.inference.graded_kernels import GradedKernel, GradedPairKernel, GradedPositionKernel
from rankopt.inference.kernel_base import PreparedKernel
from rankopt.losses import PairwiseLoss
from rankopt.losses.structure import GradedPairStructure
from rankopt.testing import brute_force_pairs, check_plugin


@pytest.fixture
def table(monkeypatch):
    """The table, restored after the test."""
    monkeypatch.setattr(structure_table, "_KERNELS", dict(structure_table._KERNELS))
    return structure_table


@pytest.mark.parametrize(
    ("loss", "kernel"),
    [
        ("ap", BinaryRankKernel),
        ("rbp", BinaryRankKernel),
        ("precision_at_k", TopKCountKernel),
        ("ndcg_graded", GradedPositionKernel),
        ("dcg_zipf", GradedPositionKernel),
        ("pairwise", GradedPairKernel),
    ],
)
def test_every_registered_loss_finds_its_kernel(loss, kernel):
    found, _ = structure_table.kernel_for_loss(rankopt.get_loss(loss))
    assert type(found) is kernel


def test_a_second_kernel_for_the_same_structure_and_device_is_refused(table):
    class Another(GradedPairKernel):
        pass

    with pytest.raises(ValueError, match="one kernel per structure and device.*GradedPairStructure on 'cpu'.*unreg"):
        table.register_kernel(Another())


def test_the_same_kernel_class_registered_again_replaces_itself(table):
    """Issue 47, point 18: re-importing a plugin module raised "expected one kernel per structure and device"."""
    again = GradedPairKernel()
    table.register_kernel(again)
    assert table.kernel_for(GradedPairStructure()) is again


def test_a_kernel_can_be_unregistered_and_replaced(table):
    class Another(GradedPairKernel):
        pass

    removed = table.unregister_kernel(GradedPairStructure)
    assert isinstance(removed, GradedPairKernel)
    with pytest.raises(ValueError, match="registered kernel on 'cpu'"):
        table.kernel_for(GradedPairStructure())
    table.register_kernel(Another())
    assert type(table.kernel_for(GradedPairStructure())) is Another
    with pytest.raises(KeyError, match="GradedPairStructure"):
        table.unregister_kernel(GradedPairStructure, device="cuda")
    with pytest.raises(TypeError, match="structure class"):
        table.unregister_kernel(GradedPairStructure())


def test_reloading_the_table_keeps_every_registration(table):
    import importlib

    table.register_kernel(UnitPairKernel())
    before = dict(table._KERNELS)
    reloaded = importlib.reload(table)
    assert set(reloaded._KERNELS) == set(before)
    assert isinstance(reloaded.kernel_for(UnitPairStructure()), UnitPairKernel)


def test_an_unknown_device_is_named_as_such():
    with pytest.raises(ValueError, match=r"expected a device with registered kernels \(cpu, torch\), got 'cuda'"):
        structure_table.kernel_for(GradedPairStructure(), "cuda")


def test_rankopt_plugins_lists_the_structures_and_their_kernels(capsys):
    from rankopt.cli import main

    assert main(["plugins"]) == 0
    out = capsys.readouterr().out
    assert (
        "structure" in out
        and "GradedPairStructure" in out
        and "rankopt.inference.graded_kernels.GradedPairKernel" in out
    )


def test_a_structure_without_a_kernel_is_refused_at_registration_naming_the_registered_ones():
    @dataclass(frozen=True)
    class Unknown:
        methods: ClassVar[tuple[str, ...]] = ("x",)

        def contract_problem(self, loss=None):
            return None

    class Orphan(PairwiseLoss):
        name = "orphan"

        def structure(self):
            return Unknown()

    class Plugin:
        @rankopt.hookimpl
        def rankopt_losses(self):
            return [Orphan]

    with pytest.raises(
        PluginContractError, match="'orphan'.*returns a .*Unknown, which no kernel serves.*GradedPairStructure"
    ):
        check_plugin(Plugin())


# ------------------------------------------------------------------ a new structure, in one file


@dataclass(frozen=True)
class UnitPairStructure:
    """SVM^rank's unweighted pairs, as a structure of its own: the test's new structure."""

    methods: ClassVar[tuple[str, ...]] = ("unit-pairs",)

    def contract_problem(self, loss=None):
        return None


class UnitPairKernel(GradedKernel):
    """Its kernel: every query by the pairs' definition, in NumPy."""

    structure = UnitPairStructure
    label = "unit pairs"
    _pairs = GradedPairStructure()

    def prepare(self, loss, structure, relevance, offsets, method, *, relevant_from, registry):
        method = self.resolve_method(loss, structure, method, 0, registry)
        kernel = self

        class Prepared(PreparedKernel):
            def __init__(self):
                self.relevance = relevance

            def __call__(self, scores, n_threads, relative_to_truth):
                return per_query(kernel, loss, structure, scores, relevance, offsets, method, registry)

        return Prepared()

    def query(self, loss, structure, scores, relevance, method, registry):
        return GradedPairKernel().query(loss, self._pairs, scores, relevance, method, registry)

    def ground_truth(self, loss, structure, relevance, offsets):
        return GradedPairKernel().ground_truth(loss, self._pairs, relevance, offsets)

    def ranking_loss(self, loss, structure, ordered_relevance):
        return GradedPairKernel().ranking_loss(loss, self._pairs, ordered_relevance)

    def check(self, loss, structure, *, n_instances, random_state, registry):
        rng = np.random.default_rng(random_state)
        for _ in range(n_instances // 10):
            grades, scores = rng.integers(0, 3, 4), rng.integers(-2, 3, 4) / 2.0
            result = most_violated_rankings(loss, scores, grades, [0, 4], registry=registry)
            if result.usable[0] and not np.isclose(result.values[0], brute_force_pairs(self._pairs, scores, grades)):
                raise AssertionError(f"unit pairs on {loss.name!r}: not the brute-force maximum")


class UnitPairLoss(PairwiseLoss):
    name = "unit_pairs"

    def structure(self):
        return UnitPairStructure()


def test_a_new_structure_is_its_class_its_kernel_and_one_registration(table):
    table.register_kernel(UnitPairKernel())

    class Plugin:
        @rankopt.hookimpl
        def rankopt_losses(self):
            return [UnitPairLoss]

    check_plugin(Plugin())
    rng = np.random.default_rng(0)
    qid = np.repeat(np.arange(8), 6)
    X, grades = rng.normal(size=(48, 3)), rng.integers(0, 3, 48)
    new = rankopt.RankSVM(loss=UnitPairLoss(), C=1.0).fit(X, grades, qid=qid)
    built_in = rankopt.RankSVM(loss="pairwise", C=1.0).fit(X, grades, qid=qid)
    assert new.converged_ and new.inference_ == "unit-pairs"
    np.testing.assert_allclose(new.coef_, built_in.coef_, atol=1e-6)
