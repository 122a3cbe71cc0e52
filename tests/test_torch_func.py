"""The hinge under ``torch.func`` and ``torch.autograd.forward_ad`` (issue 61, points 2 and 8).

``jacfwd`` and ``jvp`` returned zero tangents where the gradient's largest entry was 0.53, and ``grad``,
``jacrev`` and ``vjp`` failed ("autograd.Function … must override setup_context"), on both devices.  Every
transform now gives the backward's subgradient: reverse mode as it is, forward mode applied to a tangent.
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch", reason="the torch extra (rankopt[torch]) is not installed")
from torch.func import grad, jacfwd, jacrev, jvp, vjp, vmap  # noqa: E402

from rankopt.torch import MetricHingeLoss  # noqa: E402
from rankopt.torch.functional import rank_hinge  # noqa: E402

DEVICES = ["cpu", "torch"]


def _batch():
    generator = torch.Generator().manual_seed(0)
    scores = torch.randn(3, 6, dtype=torch.float64, generator=generator)
    grades = torch.randint(0, 3, (3, 6), generator=generator)
    mask = torch.rand(3, 6, generator=generator) < 0.8
    return scores, grades, mask


def _backward_jacobian(f, scores):
    """The Jacobian of ``f`` at ``scores`` row by row, by plain backward passes (the reference)."""
    value = f(scores)
    rows = []
    for index in range(value.numel()):
        x = scores.clone().requires_grad_()
        f(x).reshape(-1)[index].backward()
        rows.append(x.grad)
    return torch.stack(rows).reshape(*value.shape, *scores.shape)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("loss", ["ap", "ndcg_graded"])
def test_every_transform_gives_the_backwards_subgradient(device, reduction, loss):
    scores, grades, mask = _batch()

    def f(s):
        return rank_hinge(s, grades, loss=loss, mask=mask, reduction=reduction, device=device)

    expected = _backward_jacobian(f, scores)
    assert expected.abs().max() > 0
    torch.testing.assert_close(jacrev(f)(scores), expected)
    torch.testing.assert_close(jacfwd(f)(scores), expected)
    tangent = torch.randn_like(scores)
    value, forward = jvp(f, (scores,), (tangent,))
    torch.testing.assert_close(value, f(scores))
    torch.testing.assert_close(forward, (expected * tangent).flatten(-2).sum(-1))
    upstream = torch.randn_like(value)
    (pulled,) = vjp(f, scores)[1](upstream)
    torch.testing.assert_close(
        pulled, (expected * upstream.reshape(*upstream.shape, 1, 1)).reshape(-1, *scores.shape).sum(0)
    )
    with torch.autograd.forward_ad.dual_level():
        dual = f(torch.autograd.forward_ad.make_dual(scores, tangent))
        torch.testing.assert_close(torch.autograd.forward_ad.unpack_dual(dual).tangent, forward)
    if reduction != "none":
        torch.testing.assert_close(grad(f)(scores), expected)


@pytest.mark.parametrize("device", DEVICES)
def test_the_flat_layout_with_query_ids_under_forward_mode(device):
    scores, grades = torch.randn(8, dtype=torch.float64), torch.tensor([0, 1, 2, 0, 1, 0, 2, 1])
    qid = torch.tensor([5, 5, 5, 2, 2, 7, 7, 7])

    def f(s):
        return rank_hinge(s, grades, loss="ndcg_graded", qid=qid, reduction="none", device=device)

    torch.testing.assert_close(jacfwd(f)(scores), _backward_jacobian(f, scores))


@pytest.mark.parametrize("device", DEVICES)
def test_vmap_and_a_refused_second_derivative_under_transforms(device):
    scores, grades, mask = _batch()

    def f(s):
        return rank_hinge(s, grades, loss="ap", mask=mask, device=device)

    stacked = torch.stack([scores, 2 * scores])
    torch.testing.assert_close(vmap(f)(stacked), torch.stack([f(scores), f(2 * scores)]))
    with pytest.raises(RuntimeError, match="no second derivative"):
        jacrev(jacrev(f))(scores)


def test_the_metric_loss_takes_reverse_and_forward_mode():
    embeddings = torch.randn(8, 3, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    labels = torch.tensor([0, 1, 2, 0, 1, 2, 0, 1])
    loss = MetricHingeLoss("ap", scale=3.0)

    def f(e):
        return loss(e, labels)

    expected = _backward_jacobian(f, embeddings)
    torch.testing.assert_close(grad(f)(embeddings), expected)
    torch.testing.assert_close(jacfwd(f)(embeddings), expected)
