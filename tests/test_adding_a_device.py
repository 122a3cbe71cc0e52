"""A new device is one module of kernels and its registrations (issue 48, point 1; CONTRIBUTING, "Adding a
device"): this file adds a NumPy reference device — each query by its structure's one-query reference method,
in a Python loop — and runs ``structured_hinge``, ``loss_metric`` and ``RankHingeLoss`` through it, against the
compiled kernels."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import rankopt
from rankopt.inference.batched import BatchedRankingInference
from rankopt.inference.kernel_base import Kernel, PreparedKernel
from rankopt.inference.structure_table import kernel_for, register_kernel, registered_devices, unregister_kernel
from rankopt.losses.structure import GradedPositionStructure

DEVICE = "numpy-reference"
#: The batches the reference device ran: the tests check that the front doors reached it.
BATCHES: list[int] = []


# ---------------------------------------------------------------- the device: one module's worth of code


class ReferencePrepared(PreparedKernel):
    """A batch on the reference device: each query by the host kernel's one-query reference method."""

    #: Who subtracts the ground truth when a call asks for the hinge's form: this device, in its call.
    relative_inside = True

    def __init__(self, host: Kernel, loss, structure, relevance, offsets, registry):
        self.host, self.loss, self.structure, self.registry = host, loss, structure, registry
        self.relevance, self.offsets = relevance, offsets

    def __call__(self, scores, n_threads, relative_to_truth):
        n_queries = self.offsets.size - 1
        BATCHES.append(n_queries)
        coef = np.zeros(scores.size)
        losses, values, usable = np.zeros(n_queries), np.zeros(n_queries), np.zeros(n_queries, dtype=bool)
        for q in range(n_queries):
            start, stop = self.offsets[q], self.offsets[q + 1]
            found = self.host.query(
                self.loss, self.structure, scores[start:stop], self.relevance[start:stop], "auto", self.registry
            )
            if found is not None:
                coef[start:stop], losses[q], values[q] = found
                usable[q] = True
        if relative_to_truth:  # the hinge's form: Ψ(R̂) − Ψ(R*) and Δ + w·(Ψ(R̂) − Ψ(R*))
            truth = self.host.ground_truth(self.loss, self.structure, self.relevance, self.offsets)
            for q in np.flatnonzero(usable):
                start, stop = self.offsets[q], self.offsets[q + 1]
                values[q] -= float(truth[start:stop] @ scores[start:stop])
            coef = coef - truth
        return BatchedRankingInference(coef, losses, values, usable)


class ReferenceKernel(Kernel):
    """A structure's kernel on the reference device: the contract of every device, in NumPy."""

    device = DEVICE
    array_type = "numpy"

    def prepare(self, loss, structure, relevance, layout, method, *, relevant_from, registry):
        if not self.graded:
            relevance = (relevance >= relevant_from).astype(np.int64)
        return ReferencePrepared(kernel_for(structure, "cpu"), loss, structure, relevance, layout, registry)

    def ground_truth(self, loss, structure, relevance, layout):
        return kernel_for(structure, "cpu").ground_truth(loss, structure, relevance, layout)

    def ranking_loss(self, loss, structure, ordered_relevance):
        return kernel_for(structure, "cpu").ranking_loss(loss, structure, ordered_relevance)


class BinaryReference(ReferenceKernel):
    structure = None
    label = "reference binary"


class GradedPositionReference(ReferenceKernel):
    structure = GradedPositionStructure
    graded = True
    label = "reference graded position"


def register_reference_device():
    for kernel in (BinaryReference(), GradedPositionReference()):
        register_kernel(kernel)


# ---------------------------------------------------------------- the tests


@pytest.fixture
def reference_device():
    register_reference_device()
    yield DEVICE
    for structure in (None, GradedPositionStructure):
        unregister_kernel(structure, device=DEVICE)


def _queries(seed=0, n_queries=12):
    rng = np.random.default_rng(seed)
    qid = np.repeat(np.arange(n_queries), rng.integers(2, 9, n_queries))
    grades = rng.integers(0, 4, qid.size)
    scores = np.round(rng.normal(size=qid.size), 1)  # ties
    return scores, grades, qid


@pytest.mark.parametrize("loss", ["ap", "ndcg", "ndcg_graded"])
def test_structured_hinge_and_loss_metric_run_on_the_new_device(reference_device, loss):
    assert reference_device in registered_devices()
    scores, grades, qid = _queries()
    for reduction in ("mean", "none"):
        on_device = rankopt.structured_hinge(
            scores, grades, qid=qid, loss=loss, reduction=reduction, device=reference_device
        )
        compiled = rankopt.structured_hinge(scores, grades, qid=qid, loss=loss, reduction=reduction)
        np.testing.assert_allclose(on_device[0], compiled[0], rtol=1e-12, atol=1e-12)
    assert BATCHES and BATCHES[-1] == 12
    metric = rankopt.metrics.loss_metric(grades, scores, qid, loss=loss, device=reference_device)
    assert metric == pytest.approx(rankopt.metrics.loss_metric(grades, scores, qid, loss=loss), rel=1e-12)


@pytest.mark.parametrize("loss", ["ap", "ndcg_graded"])
def test_the_torch_layer_runs_on_the_new_device(reference_device, loss):
    torch = pytest.importorskip("torch")
    from rankopt.torch import RankHingeLoss

    rng = np.random.default_rng(1)
    y = torch.as_tensor(rng.integers(0, 3, (6, 7)))
    mask = torch.as_tensor(rng.random((6, 7)) < 0.85)
    base = rng.normal(size=(6, 7))
    values = {}
    BATCHES.clear()
    for device in (reference_device, "cpu"):
        scores = torch.tensor(base, requires_grad=True)
        value = RankHingeLoss(loss, device=device)(scores, y, mask=mask)
        value.backward()
        values[device] = value.item(), scores.grad.clone()
    assert BATCHES == [6]  # the reference device's one batch; the compiled kernels' ran apart
    assert values[reference_device][0] == pytest.approx(values["cpu"][0], rel=1e-12)
    torch.testing.assert_close(values[reference_device][1], values["cpu"][1])


def test_an_unknown_device_is_named_with_the_registered_ones():
    with pytest.raises(ValueError, match="expected a device with registered kernels .*cpu.*, got 'abacus'"):
        rankopt.structured_hinge(np.zeros(3), np.array([0, 1, 0]), device="abacus")


def test_a_tensor_device_that_hands_a_call_back_runs_it_on_the_compiled_kernels():
    """A second tensor device whose kernel cannot take a loss: the call runs on the host's compiled kernels (the
    host path asks a device's arrays, not its name)."""
    torch = pytest.importorskip("torch")
    from rankopt.inference.tensor_kernels import TensorKernel
    from rankopt.torch import RankHingeLoss

    class Unwilling(TensorKernel):
        structure = None
        device = "tensor-twin"
        label = "unwilling binary"

        def unsupported_reason(self, loss, structure, width):
            return "it takes nothing"

        def hinge(self, loss, structure, scores, relevance, mask, facts):
            raise AssertionError("never reached")

    register_kernel(Unwilling())
    try:
        scores, y = torch.tensor([[0.3, -0.2, 0.5]], dtype=torch.float64), torch.tensor([[1, 0, 0]])
        assert RankHingeLoss("ap", device="tensor-twin")(scores, y).item() == RankHingeLoss("ap")(scores, y).item()
    finally:
        unregister_kernel(None, device="tensor-twin")


def test_a_device_says_who_subtracts_the_ground_truth():
    """Issue 61, points 3 and 18: a device written from CONTRIBUTING alone failed on an attribute the host read and
    CONTRIBUTING never named (relevance), and one whose call honoured relative_to_truth=True got the truth
    subtracted a second time ([0.0, 1.1] for [0.0, 0.9]), relative_inside defaulting to False.  Now the host
    reads no attribute but relative_inside, which every prepared batch must declare; the reference device above
    subtracts the truth itself and says so, and its hinges equal the compiled kernels' (the tests above)."""

    class Undeclared(PreparedKernel):
        def __call__(self, scores, n_threads, relative_to_truth):
            raise AssertionError("never called")

    with pytest.raises(TypeError, match="relative_inside"):
        Undeclared()
    assert ReferencePrepared.relative_inside is True
    text = (Path(__file__).resolve().parents[1] / "CONTRIBUTING.md").read_text(encoding="utf-8")
    recipe = text.split("## Adding a device", 1)[1].split("\n## ", 1)[0]
    assert "relative_inside" in recipe and "who subtracts" in recipe
