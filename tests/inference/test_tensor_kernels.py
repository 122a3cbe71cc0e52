"""The tensor-op kernels (device="torch") against the compiled ones (device="cpu"), issue 40.

For every built-in loss and a plugin of every structure, ≥ 500 random padded batches each (ties, masks,
queries the mask empties, float32 and float64): the values agree to 1e-9 relative in float64, the
gradients agree where the scores are untied, and where they are tied the tensor backend's gradient is a
valid subgradient of the compiled backend's hinge.
"""

from __future__ import annotations

import logging

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import rankopt  # noqa: E402
from rankopt.inference import kernel_base, tensor_kernels  # noqa: E402
from rankopt.inference.structure_table import kernel_for, kernel_for_loss  # noqa: E402
from rankopt.losses import GradedPairwiseLoss, PrecisionAtKLoss  # noqa: E402
from rankopt.losses.structure import GradedQueryStructure, TopKCountStructure  # noqa: E402
from rankopt.torch import RankHingeLoss  # noqa: E402


class GradeGapPairwise(GradedPairwiseLoss):
    """A weighted pair plugin: pairs weighted by their grades' difference."""

    name = "pairwise_gap_tensor_test"

    def pair_weight(self, higher, lower):
        return (np.asarray(higher) - np.asarray(lower)).astype(np.float64)


class PluginPrecision(PrecisionAtKLoss):
    """A top-k count plugin: a subclass declaring the count structure itself."""

    name = "precision_plugin_tensor_test"

    def structure(self):
        return TopKCountStructure(k=self.checked_k(), loss_of_count=self.loss_of_count)


#: Every built-in rank loss and a plugin of each structure (rbp: binary position discount; dcg_zipf and
#: rbp_graded: graded position; the two classes above: weighted pairs and top-k count).
LOSSES = [
    ("ap", {}),
    ("ndcg", {}),
    ("auc", {}),
    ("precision_at_k", {"k": 3}),
    ("precision_at_k", {}),
    ("ndcg_graded", {"k": 3}),
    ("ndcg_graded", {}),
    ("pairwise", {}),
    ("rbp", {}),
    ("dcg_zipf", {}),
    ("rbp_graded", {}),
    (GradeGapPairwise, {}),
    (PluginPrecision, {"k": 2}),
]


def _loss(name, params):
    return name(**params) if isinstance(name, type) else rankopt.get_loss(name, **params)


def _batch(rng, tied: bool):
    n_rows, width = int(rng.integers(1, 7)), int(rng.integers(1, 13))
    scores = rng.integers(-2, 3, (n_rows, width)) / 2.0 if tied else rng.normal(size=(n_rows, width))
    grades = rng.integers(0, 4, (n_rows, width))
    mask = rng.random((n_rows, width)) < 0.85
    if n_rows > 1 and rng.random() < 0.3:
        mask[int(rng.integers(n_rows))] = False  # a query the mask empties
    mask[0, 0] = True
    # Padding holds what must never be read.
    scores = np.where(mask, scores, np.nan)
    grades = np.where(mask, grades, -7)
    return scores, grades, mask


def _run(loss, device, scores, grades, mask, dtype):
    s = torch.tensor(scores, dtype=dtype, requires_grad=True)
    values = RankHingeLoss(loss, device=device, reduction="none")(s, torch.tensor(grades), mask=torch.tensor(mask))
    values.sum().backward()
    return values.detach().double().numpy(), s.grad.double().numpy()


@pytest.mark.parametrize("name, params", LOSSES, ids=lambda v: v.__name__ if isinstance(v, type) else str(v))
def test_the_tensor_backend_equals_the_compiled_one(name, params):
    loss = _loss(name, params)
    rng = np.random.default_rng(abs(hash((str(name), str(params)))) % 2**32)
    counts = {"untied": 0, "tied": 0, "float32": 0}
    for trial in range(520):
        tied = trial % 5 == 0
        dtype = torch.float32 if trial % 7 == 0 else torch.float64
        scores, grades, mask = _batch(rng, tied)
        values, grad = _run(loss, "torch", scores, grades, mask, dtype)
        expected, expected_grad = _run(loss, "cpu", scores, grades, mask, dtype)
        rtol, atol = (1e-5, 1e-6) if dtype == torch.float32 else (1e-9, 1e-12)
        np.testing.assert_allclose(values, expected, rtol=rtol, atol=atol)
        assert np.all(grad[~mask] == 0)
        if not tied:
            np.testing.assert_allclose(grad, expected_grad, rtol=rtol, atol=atol)
            counts["float32" if dtype == torch.float32 else "untied"] += 1
            continue
        counts["tied"] += 1
        # A subgradient of each row's hinge: h(s') ≥ h(s) + g·(s' − s), h from the compiled backend.
        for _ in range(3):
            moved = np.where(mask, scores + rng.normal(scale=0.3, size=scores.shape), np.nan)
            at_moved, _ = _run(loss, "cpu", moved, grades, mask, torch.float64)
            step = np.where(mask, moved - scores, 0.0)
            assert np.all(at_moved >= expected + np.sum(grad * step, axis=1) - 1e-5)
    assert sum(counts.values()) >= 500 and min(counts.values()) > 0


def test_every_structure_but_a_losss_own_inference_has_a_tensor_kernel():
    from rankopt.losses.structure import GradedPairStructure, GradedPositionStructure

    for structure in (None, TopKCountStructure(3, None), GradedPositionStructure(None, None, 3), GradedPairStructure()):
        assert isinstance(kernel_for(structure, "torch"), tensor_kernels.TensorKernel)
    with pytest.raises(ValueError, match="registered kernel on 'torch'"):
        kernel_for(GradedQueryStructure(None, None), "torch")


class OwnInference(rankopt.losses.AUCLoss):
    name = "own_inference_tensor_test"
    graded = True

    def structure(self):
        def inference(scores, grades):
            coef = np.where(grades == grades.max(), -1.0, 1.0) / scores.size
            return coef, 0.0

        return GradedQueryStructure(inference=inference, ground_truth=lambda grades: np.zeros(grades.size))


class ConcaveDiscount(rankopt.losses.PositionDiscountLoss):
    """D = 1 on the top two places, then 1/i: concave at 2, so C3 fails and only ``dp`` is exact."""

    name = "concave_discount_tensor_test"

    def discount(self, positions):
        positions = np.asarray(positions, dtype=np.float64)
        return np.where(positions <= 2, 1.0, 1.0 / positions)


@pytest.mark.parametrize("loss", [OwnInference(), ConcaveDiscount()], ids=["own inference", "C3 fails"])
def test_a_loss_the_tensor_backend_cannot_take_runs_on_the_host_said_once(loss, caplog, monkeypatch):
    monkeypatch.setattr(kernel_base, "_LOGGED_FALLBACKS", set())
    scores, grades = torch.tensor([[0.3, -0.2, 0.5, 0.1]]), torch.tensor([[2, 0, 1, 0]])
    with caplog.at_level(logging.WARNING, logger="rankopt.torch"):
        forced = [RankHingeLoss(loss, device="torch")(scores, grades) for _ in range(2)]
    host = RankHingeLoss(loss, device="cpu")(scores, grades)
    assert all(value.item() == host.item() for value in forced)
    said = [r.getMessage() for r in caplog.records if "tensor backend cannot take it" in r.getMessage()]
    assert len(said) == 1


def test_auto_takes_the_compiled_kernels_on_the_cpu(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("the tensor backend ran on CPU tensors under device='auto'")

    monkeypatch.setattr(rankopt.torch._device, "tensor_hinges", refuse)
    RankHingeLoss("ap")(torch.tensor([[0.3, -0.2]]), torch.tensor([[1, 0]]))


def test_the_device_is_checked():
    with pytest.raises(ValueError, match="expected device to be one of \\['auto', 'cpu', 'torch'\\], got 'gpu'"):
        RankHingeLoss("ap", device="gpu")


def test_the_deprecated_backend_names_its_device():
    with pytest.warns(FutureWarning, match="backend='compiled' is device='cpu'"):
        assert RankHingeLoss("ap", backend="compiled").device == "cpu"
    with pytest.raises(ValueError, match="expected backend to be one of"):
        with pytest.warns(FutureWarning):
            RankHingeLoss("ap", backend="gpu")


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_reductions_and_their_gradients_agree_across_backends(reduction):
    rng = np.random.default_rng(0)
    scores, grades = rng.normal(size=(5, 9)), rng.integers(0, 4, (5, 9))
    grades[0] = 2  # a row with nothing to order: not counted by "mean"
    out = {}
    for device in ("cpu", "torch"):
        s = torch.tensor(scores, requires_grad=True)
        value = RankHingeLoss("ndcg_graded", reduction=reduction, device=device)(s, torch.tensor(grades))
        (value * torch.arange(1, value.numel() + 1, dtype=value.dtype).reshape(value.shape)).sum().backward()
        out[device] = (value.detach().numpy(), s.grad.numpy())
    np.testing.assert_allclose(out["torch"][0], out["cpu"][0], rtol=1e-12)
    np.testing.assert_allclose(out["torch"][1], out["cpu"][1], rtol=1e-12, atol=1e-15)


def test_a_flat_layout_with_queries_runs_on_the_host(caplog, monkeypatch):
    monkeypatch.setattr(kernel_base, "_LOGGED_FALLBACKS", set())
    scores, grades = torch.tensor([0.3, -0.2, 0.5, 0.1]), torch.tensor([1, 0, 1, 0])
    with caplog.at_level(logging.WARNING, logger="rankopt.torch"):
        value = RankHingeLoss("ap", device="torch")(scores, grades, qid=[0, 0, 1, 1])
    assert value.item() == RankHingeLoss("ap")(scores, grades, qid=[0, 0, 1, 1]).item()
    assert "padded (B, L) layout" in caplog.text


def test_rows_beyond_the_binary_kernels_length_run_on_the_host(monkeypatch, caplog):
    """Its table is O(|N||P|): it takes rows up to BINARY_LONGEST documents, longer ones go to the host."""
    monkeypatch.setattr(tensor_kernels, "BINARY_LONGEST", 6)
    monkeypatch.setattr(kernel_base, "_LOGGED_FALLBACKS", set())
    kernel, structure = kernel_for_loss(rankopt.get_loss("ap"), device="torch")
    assert kernel.unsupported_reason(rankopt.get_loss("ap"), structure, 6) is None
    scores, grades = (
        torch.tensor([[0.1, 0.4, -0.2, 0.3, 0.0, 0.2, 0.5, -0.1]]),
        torch.tensor([[1, 1, 0, 0, 0, 0, 0, 0]]),
    )
    with caplog.at_level(logging.WARNING, logger="rankopt.torch"):
        value = RankHingeLoss("ap", device="torch")(scores, grades)
    assert "rows of 8 documents" in caplog.text
    assert value.item() == RankHingeLoss("ap", device="cpu")(scores, grades).item()


def test_large_batches_run_in_row_chunks_with_the_same_result(monkeypatch):
    rng = np.random.default_rng(1)
    scores = rng.normal(size=(40, 20))
    grades = (rng.random((40, 20)) < 0.3).astype(int)
    whole = _run(rankopt.get_loss("ap"), "torch", scores, grades, np.ones((40, 20), bool), torch.float64)
    monkeypatch.setattr(tensor_kernels, "BINARY_CHUNK_ENTRIES", 500)
    chunked = _run(rankopt.get_loss("ap"), "torch", scores, grades, np.ones((40, 20), bool), torch.float64)
    np.testing.assert_array_equal(whole[0], chunked[0])
    np.testing.assert_array_equal(whole[1], chunked[1])


@pytest.mark.parametrize("loss", ["ndcg", "ndcg_graded"])
def test_small_constant_tables_go_to_the_device_once(loss, rng):
    # Copying host memory to a GPU waits for the queued work: a discount or the gains of the levels present
    # are copied at the first call and read from the kernel's cache after.
    scores = torch.tensor(rng.normal(size=(6, 9)))
    grades = torch.tensor(rng.integers(0, 3, (6, 9)))
    layer = RankHingeLoss(loss, device="torch")
    kernel, _ = kernel_for_loss(rankopt.plugins.default_registry().resolve_loss(loss), device="torch")
    layer(scores, grades)
    held = dict(kernel.constants._entries)
    layer(scores + 1.0, grades)
    assert held and all(kernel.constants._entries[key] is tensor for key, tensor in held.items())
    assert len(kernel.constants) == len(held)


@pytest.mark.parametrize("name", ["ap", "ndcg_graded", "pairwise", "precision_at_k"])
def test_the_tensor_kernels_contract_gives_the_host_kernels_ground_truth_and_delta(name):
    """The contract of every device (issue 48): the tensor kernel's ground truth over a padded, masked batch and
    its Δ of a ranking are the host kernel's."""
    loss = rankopt.get_loss(name)
    kernel, structure = kernel_for_loss(loss, "torch")
    host, _ = kernel_for_loss(loss, "cpu")
    rng = np.random.default_rng(5)
    relevance = rng.integers(0, 2 if not loss.graded else 4, (6, 7))
    mask = rng.random((6, 7)) < 0.8
    offsets = np.concatenate(([0], np.cumsum(mask.sum(axis=1))))
    truth = kernel.ground_truth(loss, structure, torch.as_tensor(relevance), torch.as_tensor(mask))
    np.testing.assert_array_equal(truth.numpy()[mask], host.ground_truth(loss, structure, relevance[mask], offsets))
    assert not truth.numpy()[~mask].any()
    ordered = np.array([0, 1, 1, 0, 1])
    assert kernel.ranking_loss(loss, structure, ordered) == host.ranking_loss(loss, structure, ordered)
