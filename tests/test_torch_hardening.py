"""Both backends of RankHingeLoss accept and refuse the same inputs; MetricHingeLoss at its edges (issue 47,
points 6-10, 15, 16)."""

from __future__ import annotations

import logging

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="the torch extra (rankopt[torch]) is not installed")
from rankopt.inference import kernel_base  # noqa: E402
from rankopt.torch import MetricHingeLoss, RankHingeLoss  # noqa: E402


def _levels_batch():
    """30 queries of 3 grades each, 76+ grade levels in the batch: more than the tensor pair kernel holds."""
    rng = np.random.default_rng(0)
    return torch.randn(30, 5, generator=torch.Generator().manual_seed(0)), torch.as_tensor(
        rng.integers(0, 3, (30, 5)) + 3 * np.arange(30)[:, None]
    )


def _hostile_inputs():
    s = torch.tensor([[0.5, 2.0, -1.0, 0.0]], dtype=torch.float64)
    y = torch.tensor([[0, 1, 0, 2]])
    levels_scores, levels_y = _levels_batch()
    return {
        "empty rows": ("ap", torch.zeros(0, 3), torch.zeros(0, 3, dtype=torch.long), None),
        "empty columns": ("ap", torch.zeros(2, 0), torch.zeros(2, 0, dtype=torch.long), None),
        "empty flat": ("ap", torch.zeros(0), torch.zeros(0, dtype=torch.long), None),
        "float grades of 2**53 and more": ("ap", s, torch.tensor([[0.0, 2.0**53, 0.0, 2.0**60]]), None),
        "float grades from 2**64": ("ap", s, torch.tensor([[0.0, 2.0**64, 0.0, 1.0]]), None),
        "fractional grades": ("ap", s, torch.tensor([[0.0, 0.5, 0.0, 1.0]]), None),
        "negative grades": ("ap", s, torch.tensor([[0, -3, 0, 1]]), None),
        "{-1, 1} labels": ("ap", s, torch.tensor([[-1, 1, -1, 1]]), None),
        # The masked path learns the kept labels' sign from their gather: these take its other branch.
        "negative grades, masked": ("ap", s, torch.tensor([[0, -3, 0, 1]]), torch.tensor([[1, 1, 1, 0]]).bool()),
        "{-1, 1} labels, masked": ("ap", s, torch.tensor([[-1, 1, -1, 1]]), torch.tensor([[1, 1, 1, 0]]).bool()),
        "NaN score": ("ap", torch.tensor([[0.0, float("nan"), 1.0, 2.0]]), y, None),
        "NumPy boolean mask": ("ap", s, y, np.array([[True, True, True, False]])),
        "NumPy integer mask": ("ap", s, y, np.array([[1, 1, 1, 0]])),
        "mask keeping nothing": ("ap", s, y, torch.zeros(1, 4, dtype=torch.bool)),
        "labels of another shape": ("ap", s, torch.tensor([[0, 1, 0]]), None),
        "more than 64 grade levels": ("pairwise", levels_scores, levels_y, None),
        "graded, padded with garbage": (
            "ndcg_graded",
            s,
            torch.tensor([[0, 3, 1, -7]]),
            torch.tensor([[1, 1, 1, 0]]).bool(),
        ),
    }


def _outcome(device, loss, scores, y, mask):
    scores = scores.clone().requires_grad_()
    try:
        value = RankHingeLoss(loss, device=device)(scores, y, mask=mask)
        value.backward()
    except (ValueError, TypeError) as exc:
        return type(exc).__name__, None, None
    return "value", float(value.detach()), scores.grad.clone()


@pytest.mark.parametrize("case", list(_hostile_inputs()))
def test_both_backends_accept_and_refuse_the_same_inputs(case, caplog):
    loss, scores, y, mask = _hostile_inputs()[case]
    with caplog.at_level(logging.WARNING, logger="rankopt.torch"):
        compiled = _outcome("cpu", loss, scores, y, mask)
        tensor = _outcome("torch", loss, scores, y, mask)
    assert compiled[0] == tensor[0], (compiled, tensor)
    if compiled[0] == "value":
        assert tensor[1] == pytest.approx(compiled[1], rel=1e-6, abs=1e-9)
        torch.testing.assert_close(tensor[2], compiled[2], rtol=1e-6, atol=1e-9)


def test_more_grade_levels_than_the_tensor_kernel_holds_run_on_the_host_said_once(caplog, monkeypatch):
    monkeypatch.setattr(kernel_base, "_LOGGED_FALLBACKS", set())
    scores, y = _levels_batch()
    with caplog.at_level(logging.WARNING, logger="rankopt.torch"):
        for _ in range(3):
            RankHingeLoss("pairwise", device="torch")(scores, y)
    messages = [r.getMessage() for r in caplog.records]
    assert len(messages) == 1 and "grades of 64 or more" in messages[0]


@pytest.mark.parametrize(
    "name, before, after", [("precision_at_k", {"k": 2}, {"k": 1}), ("ndcg_graded", {"k": 3}, {"k": 1})]
)
def test_set_params_between_calls_is_seen_by_the_compiled_backend(name, before, after):
    rng = np.random.default_rng(0)
    S, Y = torch.as_tensor(rng.normal(size=(4, 6))), torch.as_tensor(rng.integers(0, 3, (4, 6)))
    layer = RankHingeLoss(name, device="cpu", **before)
    layer(S, Y)
    layer.rank_loss.set_params(**after)
    assert float(layer(S, Y)) == pytest.approx(float(RankHingeLoss(name, device="cpu", **after)(S, Y)), rel=1e-12)


def test_a_metric_batch_of_one_is_zero_with_a_zero_gradient():
    embeddings = torch.randn(1, 4, requires_grad=True)
    value = MetricHingeLoss()(embeddings, torch.tensor([3]))
    value.backward()
    assert float(value.detach()) == 0.0 and not embeddings.grad.any()


def test_metric_labels_of_none_or_strings_are_named():
    embeddings = torch.randn(4, 3)
    for labels in (None, ["a", "b", "a", "b"]):
        with pytest.raises(TypeError, match="expected labels to be a 1-D tensor or array of numeric class labels"):
            MetricHingeLoss()(embeddings, labels)


def test_cosine_similarity_of_huge_embeddings_does_not_overflow():
    rng = np.random.default_rng(0)
    embeddings = torch.as_tensor(rng.normal(size=(6, 4)), dtype=torch.float32)
    labels = torch.tensor([0, 0, 1, 1, 2, 2])
    loss = MetricHingeLoss(scale=3.0)
    assert float(loss(embeddings * 1e20, labels)) == pytest.approx(float(loss(embeddings, labels)), rel=1e-5)


def test_both_forwards_document_themselves():
    """Issue 47, point 20: the API reference showed torch's inherited "Define the computation performed"."""
    for layer in (RankHingeLoss, MetricHingeLoss):
        assert "Define the computation" not in layer.forward.__doc__
        assert "Returns" in layer.forward.__doc__


@pytest.mark.parametrize("device", ["cpu", "torch"])
@pytest.mark.parametrize("loss", ["ap", "precision_at_k", "ndcg_graded", "pairwise"])
def test_a_bool_mask_made_of_other_bytes_reads_as_its_nonzero_places(device, loss):
    """A mask viewed as bool from other bytes (``uint8_tensor.view(torch.bool)``) keeps exactly its nonzero
    places on both devices: the host path's counts, gather and scatter agree (an inconsistent count would read
    past the gathered documents)."""
    clean = torch.tensor([[True, True, False, True], [False, True, True, True]])
    raw = (clean.to(torch.uint8) * torch.tensor([[3, 7, 0, 255], [0, 2, 9, 1]], dtype=torch.uint8)).view(torch.bool)
    scores = torch.tensor([[0.3, -0.2, 5.0, 0.1], [9.0, 0.4, 0.2, -0.3]], dtype=torch.float64)
    labels = torch.tensor([[1, 0, 1, 0], [1, 0, 1, 1]])
    results = []
    for mask in (clean, raw):
        s = scores.clone().requires_grad_(True)
        value = RankHingeLoss(loss, device=device)(s, labels, mask=mask)
        value.backward()
        results.append((value.item(), s.grad.clone()))
    assert results[0][0] == results[1][0]
    torch.testing.assert_close(results[0][1], results[1][1], rtol=0, atol=0)


@pytest.mark.parametrize("device", ["cpu", "torch"])
def test_a_loss_changed_after_a_call_leaves_its_old_parameters_answers_alone(device):
    """A top-k loss's Δ(m) pool is kept per loss parameters: set_params on the loss that built it must not
    change what those parameters answer for another loss that has them (it asked the changed loss, lazily)."""
    rng = np.random.default_rng(1)
    first, later = (torch.as_tensor(rng.normal(size=(6, n))) for n in (5, 9))
    first_y, later_y = (torch.as_tensor(rng.integers(0, 2, s.shape)) for s in (first, later))
    changed = RankHingeLoss("precision_at_k", device=device, k=2)
    changed(first, first_y)
    changed.rank_loss.set_params(k=1)
    expected = float(RankHingeLoss("precision_at_k", device="cpu", k=2)(later, later_y.clone()))
    fresh = RankHingeLoss("precision_at_k", device=device, k=2)
    assert float(fresh(later, later_y)) == pytest.approx(expected, rel=1e-12)


def test_both_devices_bound_gains_alike():
    """Issue 61, point 12: grade 1023 of ndcg_graded was refused on "cpu" (the gain-sum bound) and answered 0.4765 on
    "torch"; the tensor device now takes the host's tables and bound, for the longest row it keeps (a row of two
    kept documents, padded to three, is bounded by its two, as the host bounds the query)."""
    scores = torch.tensor([[0.5, 2.0, -1.0, 0.0]], dtype=torch.float64)
    messages = []
    for device in ("cpu", "torch"):
        with pytest.raises(ValueError, match="gains G whose sum over a query stays finite") as caught:
            RankHingeLoss("ndcg_graded", k=3, device=device)(scores, torch.tensor([[0, 1023, 0, 1]]))
        messages.append(str(caught.value))
    assert messages[0] == messages[1]
    # 2**999 × (D(1) + D(2)) is within 2**1000; with D(3) it is not: the padding must not count.
    padded, mask = torch.tensor([[999, 0, 7]]), torch.tensor([[True, True, False]])
    s = torch.tensor([[0.1, 0.4, 9.0]], dtype=torch.float64)
    values = [float(RankHingeLoss("ndcg_graded", device=d)(s, padded, mask=mask)) for d in ("cpu", "torch")]
    assert values[1] == pytest.approx(values[0], rel=1e-12) and values[0] > 0


@pytest.mark.parametrize(
    "loss, params",
    [
        ("ndcg_graded", {"k": 1}),
        ("ndcg_graded", {"k": 3}),
        ("ndcg_graded", {}),
        ("pairwise", {}),
        ("ap", {}),
        ("precision_at_k", {"k": 2}),
        ("ndcg", {}),
        ("auc", {}),
    ],
)
def test_a_subgradient_on_ties_does_not_depend_on_the_documents_order(loss, params):
    """Issue 61, point 10: on tied scores device="torch" returned another subgradient than "cpu", one that
    depended on the documents' order (ndcg_graded, k = 1, s = 0, y = [1, 0, 0]: [-1, 1, 0] against
    [-1, .5, .5]); both devices now give the host's symmetric one, and permuting a query's documents permutes
    its gradient.  Binary losses were order-dependent on both devices (precision_at_k in 23 of 200 random tied
    queries, ndcg in 5): a tie group of one relevance split by the ranking; each now shares its mean.  The scores
    avoid exact margin ties (s⁺ − s⁻ at a loss's step), where both devices' sums round the tie each its own way
    to another valid, still symmetric, subgradient."""
    rng = np.random.default_rng(3)
    if params == {"k": 1}:
        for device in ("cpu", "torch"):
            s = torch.zeros(1, 3, dtype=torch.float64, requires_grad=True)
            RankHingeLoss(loss, device=device, **params)(s, torch.tensor([[1, 0, 0]])).backward()
            expected = [[-1.0, 0.5, 0.5]]
            torch.testing.assert_close(s.grad, torch.tensor(expected, dtype=torch.float64))
    for _ in range(150):
        n = int(rng.integers(2, 8))
        scores = torch.as_tensor(np.array([0.0, 0.37, 0.91])[rng.integers(0, 3, (1, n))])
        grades = torch.as_tensor(rng.integers(0, 3, (1, n)))
        perm = torch.as_tensor(rng.permutation(n))
        grads = {}
        for device in ("cpu", "torch"):
            layer = RankHingeLoss(loss, device=device, **params)
            found = []
            for order in (torch.arange(n), perm):
                x = scores[:, order].clone().requires_grad_()
                layer(x, grades[:, order]).backward()
                back = torch.empty_like(x.grad)
                back[:, order] = x.grad
                found.append(back)
            torch.testing.assert_close(found[1], found[0], rtol=1e-12, atol=1e-12)
            grads[device] = found[0]
        torch.testing.assert_close(grads["torch"], grads["cpu"], rtol=1e-12, atol=1e-12)
