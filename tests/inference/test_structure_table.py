"""The structure table (issue 39): one kernel per declared structure and device, looked up by the structure's
class.  A new structure, its kernel and its registration, following CONTRIBUTING line by line, are in
``test_new_structure_recipe.py``."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import pytest

import rankopt
from rankopt.exceptions import PluginContractError
from rankopt.inference import structure_table
from rankopt.inference.binary_kernels import BinaryRankKernel, TopKCountKernel
from rankopt.inference.graded_kernels import GradedPairKernel, GradedPositionKernel
from rankopt.losses import PairwiseLoss
from rankopt.losses.structure import GradedPairStructure
from rankopt.testing import check_plugin


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

    class Another(GradedPairKernel):
        pass

    table.unregister_kernel(GradedPairStructure)
    table.register_kernel(Another())
    before = dict(table._KERNELS)
    reloaded = importlib.reload(table)
    assert set(reloaded._KERNELS) == set(before)
    assert type(reloaded.kernel_for(GradedPairStructure())) is Another


def test_an_unknown_device_is_named_as_such():
    pytest.importorskip("torch")
    import rankopt.torch  # noqa: F401  (registers the tensor kernels: the test does not depend on another's import)

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


@pytest.mark.parametrize("name", ["ndcg_graded", "pairwise"])
def test_reads_grades_asks_the_kernel_and_takes_a_loss_without_one_at_its_word(name):
    """Issue 48: whether a loss trains on grades is its kernel's answer; a subclass of a built-in graded loss
    declares no structure (a subclass may change Δ), has no kernel over grades, and still reads grades."""
    loss = rankopt.get_loss(name)
    kernel, _ = structure_table.kernel_for_loss(loss)
    assert structure_table.reads_grades(loss) is kernel.graded is True
    assert structure_table.reads_grades(rankopt.get_loss("ap")) is False

    subclass_name = f"{name}_subclass"

    class Subclass(type(loss)):
        name = subclass_name

    subclass = Subclass()
    with pytest.raises(ValueError, match="no inference over graded relevance"):
        structure_table.kernel_for_loss(subclass)
    assert structure_table.reads_grades(subclass) is True
    # Its one-query view is binary, run by the registry's methods, as before the kernel was asked.
    got = rankopt.most_violated_ranking(subclass, [1.0, 0.5], [0.7, 0.1])
    expected = rankopt.most_violated_ranking(loss, [1.0, 0.5], [0.7, 0.1])
    assert got.loss == expected.loss
