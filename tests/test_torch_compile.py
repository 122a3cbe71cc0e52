"""The hinge as one traceable operator (issue 48, point 3): ``torch.compile`` takes a training step with
``RankHingeLoss`` or ``MetricHingeLoss`` and gives eager's values and gradients; ``torch.func.vmap`` runs it
slice by slice."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch", reason="the torch extra (rankopt[torch]) is not installed")

from rankopt.torch import MetricHingeLoss, RankHingeLoss, rank_hinge  # noqa: E402

# Inductor, compiling the steps, calls a torch.jit API that torch itself deprecates.
pytestmark = pytest.mark.filterwarnings("ignore:`torch.jit.script_method` is deprecated:DeprecationWarning")


def _batch(seed: int = 0):
    generator = torch.Generator().manual_seed(seed)
    features = torch.randn(3, 8, 12, 5, generator=generator)
    grades = (features[..., 0] > 0.5).long() + (features[..., 1] > 1.0).long()
    mask = torch.ones(8, 12, dtype=torch.bool)
    mask[::2, 9:] = False  # padded rows
    return features, grades, mask


def _ranker():
    torch.manual_seed(1)
    return torch.nn.Sequential(torch.nn.Linear(5, 8), torch.nn.ReLU(), torch.nn.Linear(8, 1))


@pytest.mark.parametrize(
    "layer",
    [RankHingeLoss("ap"), RankHingeLoss("ndcg_graded", k=3), RankHingeLoss("precision_at_k", k=2, device="torch")],
    ids=["ap, compiled kernels", "ndcg_graded", "precision_at_k, tensor kernels"],
)
def test_a_compiled_training_step_matches_eager_for_three_steps(layer):
    features, grades, mask = _batch()
    runs = {}
    for mode in ("eager", "compiled"):
        model = _ranker()
        optimiser = torch.optim.SGD(model.parameters(), lr=0.1)

        def step(x, y, m, model=model, optimiser=optimiser):
            optimiser.zero_grad()
            loss = layer(model(x).squeeze(-1), y, mask=m)
            loss.backward()
            optimiser.step()
            return loss.detach()

        run = torch.compile(step) if mode == "compiled" else step
        losses = [run(features[i], grades[i], mask) for i in range(3)]
        runs[mode] = torch.stack(losses), [p.detach().clone() for p in model.parameters()]
    # The compiled network may round its own arithmetic otherwise: equal to float32's precision.
    torch.testing.assert_close(runs["compiled"][0], runs["eager"][0], rtol=1e-5, atol=1e-6)
    for compiled, eager in zip(runs["compiled"][1], runs["eager"][1], strict=True):
        torch.testing.assert_close(compiled, eager, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_the_compiled_hinge_is_one_node_with_eagers_value_and_gradient_to_the_bit(reduction):
    _, grades, mask = _batch()
    layer = RankHingeLoss("ap", reduction=reduction)

    def hinge(scores):
        return layer(scores, grades[0], mask=mask).sum()

    compiled = torch.compile(hinge, fullgraph=True)  # fullgraph: no graph break around the operator
    scores = torch.randn(8, 12, dtype=torch.float64, requires_grad=True)
    value = compiled(scores)
    value.backward()
    compiled_grad, scores.grad = scores.grad, None
    expected = hinge(scores)
    expected.backward()
    assert value.item() == expected.item()
    assert torch.equal(compiled_grad, scores.grad)


def test_the_functional_and_the_metric_loss_compile_whole():
    _, grades, mask = _batch()
    scores = torch.randn(8, 12, requires_grad=True)
    functional = torch.compile(lambda s: rank_hinge(s, grades[0], loss="ndcg_graded", k=3, mask=mask), fullgraph=True)
    assert functional(scores).item() == rank_hinge(scores, grades[0], loss="ndcg_graded", k=3, mask=mask).item()
    embeddings = torch.randn(10, 4, requires_grad=True)
    labels = torch.tensor([0, 1, 2, 0, 1, 2, 0, 1, 2, 0])
    metric = MetricHingeLoss("ap", scale=3.0)
    value = torch.compile(lambda e: metric(e, labels), fullgraph=True)(embeddings)
    value.backward()
    compiled_grad, embeddings.grad = embeddings.grad, None
    expected = metric(embeddings, labels)
    expected.backward()
    torch.testing.assert_close(value, expected)
    torch.testing.assert_close(compiled_grad, embeddings.grad)


def test_a_changed_reduction_recompiles():
    _, grades, _ = _batch()
    layer = RankHingeLoss("ap")
    compiled = torch.compile(lambda s: layer(s, grades[0]))
    scores = torch.randn(8, 12)
    mean = compiled(scores)
    layer.reduction = "sum"
    assert compiled(scores).item() == pytest.approx(mean.item() * 8)


def test_vmap_runs_the_hinge_slice_by_slice():
    _, grades, mask = _batch()
    layer = RankHingeLoss("ap")
    scores = torch.randn(4, 8, 12, dtype=torch.float64)
    mapped = torch.func.vmap(lambda s: layer(s, grades[0], mask=mask))(scores)
    assert torch.equal(mapped, torch.stack([layer(s, grades[0], mask=mask) for s in scores]))


def test_copies_and_pickles_resolve_their_own_loss():
    """A module's loss handle is its process's: a copy's set_params is seen by the copy alone, and a pickle
    carries no handle to another process."""
    import copy
    import pickle

    _, grades, _ = _batch()
    scores = torch.randn(8, 12, dtype=torch.float64)
    layer = RankHingeLoss("precision_at_k", k=2)
    before = layer(scores, grades[0]).item()
    twin = copy.deepcopy(layer)
    twin.rank_loss.set_params(k=1)
    assert layer(scores, grades[0]).item() == before
    assert twin(scores, grades[0]).item() == RankHingeLoss("precision_at_k", k=1)(scores, grades[0]).item()
    assert "_resolved" not in pickle.loads(pickle.dumps(layer)).__dict__
