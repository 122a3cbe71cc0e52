"""The structured hinge (rankopt.structured_hinge) and its PyTorch layer (rankopt.torch.RankHingeLoss), issue 30."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

import rankopt
from rankopt.api import ground_truth_coefficients
from rankopt.plugins import default_registry
from rankopt.testing import brute_force_graded, brute_force_most_violated, brute_force_pairs

torch = pytest.importorskip("torch", reason="the torch extra (rankopt[torch]) is not installed")
from rankopt.torch import RankHingeLoss  # noqa: E402

BINARY = [("ap", {}), ("ndcg", {}), ("auc", {}), ("precision_at_k", {"k": 2})]
GRADED = [("ndcg_graded", {"k": 3}), ("pairwise", {})]


def _tiny_queries(rng, n_queries, graded):
    sizes = rng.integers(2, 6, n_queries)
    offsets = np.concatenate(([0], np.cumsum(sizes)))
    scores = rng.integers(-2, 3, offsets[-1]) / 2.0  # ties within and across classes
    y = rng.integers(0, 3, offsets[-1]) if graded else rng.integers(0, 2, offsets[-1])
    return scores, y, np.repeat(np.arange(n_queries), sizes), offsets


def _brute_force_hinge(loss, scores, y, graded) -> float:
    """max_R [Δ + c(R)·s] − c(R*)·s for one query, by enumeration."""
    registry = default_registry()
    truth = ground_truth_coefficients(loss, y, [0, y.size], registry=registry)
    if graded:
        structure = loss.structure()
        best = (
            brute_force_pairs(structure, scores, y)
            if loss.name == "pairwise"
            else brute_force_graded(structure, scores, y)
        )
    else:
        best = brute_force_most_violated(loss, scores[y == 1], scores[y == 0])
    return best - float(truth @ scores)


@pytest.mark.parametrize("name, params", BINARY + GRADED)
def test_value_and_subgradient_against_enumeration(name, params):
    """≥ 500 tiny queries per loss: the value is the brute-force maximum, the gradient a valid subgradient."""
    loss = rankopt.get_loss(name, **params)
    graded = loss.graded
    rng = np.random.default_rng(len(name))
    checked = 0
    for _ in range(5):
        scores, y, qid, offsets = _tiny_queries(rng, 150, graded)
        values, grad = rankopt.structured_hinge(scores, y, qid=qid, loss=loss, reduction="none")
        for q in range(offsets.size - 1):
            lo, hi = offsets[q], offsets[q + 1]
            s, yq, g = scores[lo:hi], y[lo:hi], grad[lo:hi]
            if yq.max() == yq.min() or (name == "pairwise" and np.sum(yq[:, None] > yq[None, :]) > 10):
                continue
            assert values[q] == pytest.approx(_brute_force_hinge(loss, s, yq, graded), abs=1e-12)
            # A subgradient of the convex hinge: h(s') ≥ h(s) + g·(s' − s) for every s'.
            for _ in range(3):
                other = s + rng.normal(size=s.size)
                h_other, _ = rankopt.structured_hinge(other, yq, qid=np.zeros(s.size), loss=loss, reduction="sum")
                assert h_other >= values[q] + g @ (other - s) - 1e-12
            checked += 1
    assert checked >= 500


@pytest.mark.parametrize("name, params", BINARY + GRADED)
def test_finite_differences_away_from_ties(name, params, rng):
    loss = rankopt.get_loss(name, **params)
    y = rng.integers(0, 3 if loss.graded else 2, 40)
    qid = np.repeat(np.arange(4), 10)
    scores = rng.normal(size=40) * 3
    value, grad = rankopt.structured_hinge(scores, y, qid=qid, loss=loss)
    eps = 1e-7
    for i in range(40):
        step = np.zeros(40)
        step[i] = eps
        up, _ = rankopt.structured_hinge(scores + step, y, qid=qid, loss=loss)
        down, _ = rankopt.structured_hinge(scores - step, y, qid=qid, loss=loss)
        assert (up - down) / (2 * eps) == pytest.approx(grad[i], abs=1e-6)


def test_flat_and_padded_layouts_agree_and_reductions_are_consistent(rng):
    scores = torch.tensor(rng.normal(size=(5, 6)), requires_grad=True)
    y = torch.tensor(rng.integers(0, 3, (5, 6)))
    y[2] = 0  # a row with nothing to order: 0, not counted by "mean"
    mask = torch.ones(5, 6, dtype=torch.bool)
    mask[1, 4:] = False
    padded = RankHingeLoss("ndcg_graded", k=3, reduction="none")(scores, y, mask=mask)
    padded.sum().backward()
    grad_padded = scores.grad.clone()
    flat_scores = scores.detach()[mask].clone().requires_grad_(True)
    rows = torch.arange(5).repeat_interleave(mask.sum(dim=1))
    flat = RankHingeLoss("ndcg_graded", k=3, reduction="none")(flat_scores, y[mask], qid=rows.numpy())
    flat.sum().backward()
    torch.testing.assert_close(padded, flat)
    torch.testing.assert_close(grad_padded[mask], flat_scores.grad)
    assert torch.all(grad_padded[~mask] == 0) and padded[2] == 0
    total = RankHingeLoss("ndcg_graded", k=3, reduction="sum")(scores, y, mask=mask)
    mean = RankHingeLoss("ndcg_graded", k=3, reduction="mean")(scores, y, mask=mask)
    torch.testing.assert_close(total, padded.sum())
    torch.testing.assert_close(mean, padded.sum() / 4)  # row 2 has nothing to order


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32, torch.float64])
def test_every_float_dtype_gives_a_gradient_of_its_own_dtype(dtype, rng):
    scores = torch.tensor(rng.normal(size=20), dtype=dtype, requires_grad=True)
    y = torch.tensor(rng.integers(0, 2, 20))
    value = RankHingeLoss("ap")(scores, y)
    value.backward()
    # The value of half-precision scores comes in float32 (a hinge may exceed float16's range).
    value_dtype = torch.float32 if dtype in (torch.float16, torch.bfloat16) else dtype
    assert value.dtype == value_dtype and scores.grad.dtype == dtype and torch.isfinite(scores.grad).all()


def test_a_query_with_nothing_to_order_contributes_zero():
    scores = torch.tensor([0.3, -0.2, 0.5, 0.1], requires_grad=True)
    value = RankHingeLoss("ap")(scores, torch.tensor([1, 1, 1, 1]))
    value.backward()
    assert value.item() == 0.0 and torch.all(scores.grad == 0)


@pytest.mark.parametrize(
    "make, error, message",
    [
        (lambda: (torch.tensor([0.1, float("nan")]), torch.tensor([0, 1]), {}), ValueError, "finite"),
        (lambda: (torch.tensor([0.1, float("inf")]), torch.tensor([0, 1]), {}), ValueError, "finite"),
        (lambda: (torch.tensor([0.1, 0.2]), torch.tensor([0, 1, 1]), {}), ValueError, "one label per score"),
        (lambda: (torch.tensor([0.1, 0.2]), torch.tensor([0.5, 1.0]), {}), ValueError, "integer relevance grades"),
        (lambda: (torch.tensor([0.1, 0.2]), torch.tensor([-2, 1]), {}), ValueError, "grades >= 0"),
        (lambda: (torch.tensor([0.1, 0.2]), torch.tensor([float("inf"), 1.0]), {}), ValueError, "integer relevance"),
        (lambda: (torch.tensor([0.1, 0.2]), torch.tensor([-2.0, 1.0]), {}), ValueError, "grades >= 0"),
        (lambda: (torch.tensor([0.1, 0.2]), torch.tensor([0, 1]), {"qid": [0]}), ValueError, "qid"),
        (
            lambda: (
                torch.zeros(2, 3),
                torch.zeros(2, 3, dtype=torch.long),
                {"mask": torch.zeros(2, 3, dtype=torch.bool)},
            ),
            ValueError,
            "False everywhere",
        ),
        (
            lambda: (
                torch.zeros(2, 3),
                torch.zeros(2, 3, dtype=torch.long),
                {"mask": torch.ones(3, 2, dtype=torch.bool)},
            ),
            ValueError,
            "boolean mask of shape",
        ),
        (lambda: (torch.tensor([1, 2]), torch.tensor([0, 1]), {}), TypeError, "floating-point scores"),
        (lambda: (torch.tensor([0.1, 0.2]), torch.tensor([0, 1], device="meta"), {}), ValueError, "device"),
    ],
)
@pytest.mark.parametrize("device", ["cpu", "torch"])
def test_bad_input_is_a_clear_error(make, error, message, device):
    scores, y, kwargs = make()
    with pytest.raises(error, match=message):
        RankHingeLoss("ap", device=device)(scores, y, **kwargs)


def test_a_double_backward_is_refused_with_the_reason(rng):
    scores = torch.tensor(rng.normal(size=10), requires_grad=True)
    value = RankHingeLoss("ap")(scores, torch.tensor(rng.integers(0, 2, 10)))
    (grad,) = torch.autograd.grad(value, scores, create_graph=True)
    with pytest.raises(RuntimeError, match="second derivative is 0 almost everywhere"):
        grad.sum().backward()


def test_a_linear_model_trained_with_the_layer_reaches_ranksvms_objective(rng):
    """½‖w‖² + C · mean_q h_q(Xw) is RankSVM's 1-slack objective: the same optimum, reached by full-batch training."""
    X = rng.normal(size=(60, 3))
    grades = np.digitize(X @ np.array([1.0, -0.5, 0.25]) + 0.5 * rng.normal(size=60), [0.0, 1.0])
    qid = np.repeat(np.arange(6), 10)
    C = 10.0
    svm = rankopt.RankSVM(loss="ap", C=C, tol=1e-8, max_iter=2000).fit(X, grades, qid=qid)
    assert svm.converged_
    optimum = svm.history_[-1].primal_objective
    at_svm, _ = rankopt.structured_hinge(X @ svm.coef_, grades, qid=qid, loss="ap")
    assert 0.5 * svm.coef_ @ svm.coef_ + C * at_svm == pytest.approx(optimum, rel=1e-9)
    w = torch.zeros(3, dtype=torch.float64, requires_grad=True)
    features, labels, layer = torch.tensor(X), torch.tensor(grades), RankHingeLoss("ap")
    # Full-batch L-BFGS with a strong-Wolfe line search, which copes with the kinks of a piecewise-linear term.
    optimizer = torch.optim.LBFGS(
        [w], max_iter=200, line_search_fn="strong_wolfe", tolerance_grad=1e-12, tolerance_change=1e-14, history_size=20
    )

    def closure():
        optimizer.zero_grad()
        objective = 0.5 * w @ w + C * layer(features @ w, labels, qid=qid)
        objective.backward()
        return objective

    for _ in range(5):
        optimizer.step(closure)
    w_final = w.detach().numpy()
    final = 0.5 * float(w_final @ w_final) + C * rankopt.structured_hinge(X @ w_final, grades, qid=qid)[0]
    assert final == pytest.approx(optimum, rel=1e-4)


def test_importing_rankopt_does_not_import_torch(tmp_path):
    code = "import sys, rankopt; rankopt.structured_hinge; print('torch' in sys.modules)"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "False"


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_cuda_scores_get_a_cuda_gradient(rng):
    scores = torch.tensor(rng.normal(size=50), device="cuda", requires_grad=True)
    y = torch.tensor(rng.integers(0, 2, 50), device="cuda")
    value = RankHingeLoss("ap")(scores, y)
    value.backward()
    cpu = torch.tensor(scores.detach().cpu().numpy(), requires_grad=True)
    expected = RankHingeLoss("ap")(cpu, y.cpu())
    expected.backward()
    assert value.device.type == "cuda" and scores.grad.device.type == "cuda"
    torch.testing.assert_close(scores.grad.cpu(), cpu.grad)
    torch.testing.assert_close(value.cpu(), expected)


@pytest.mark.parametrize("device", ["cpu", "torch"])
@pytest.mark.parametrize("dtype", [torch.int64, torch.int8, torch.float32, torch.float64])
def test_labels_in_minus_one_one_read_as_zero_one(device, dtype, rng):
    scores = torch.tensor(rng.normal(size=(3, 7)))
    binary = torch.tensor(rng.integers(0, 2, (3, 7)))
    layer = RankHingeLoss("ap", device=device)
    torch.testing.assert_close(layer(scores, (2 * binary - 1).to(dtype)), layer(scores, binary))


@pytest.mark.parametrize("loss", ["ap", "pairwise"])
def test_integer_labels_beyond_float64s_whole_numbers_are_read_alike_by_both_backends(loss, rng):
    # An int64 grade above 2**53 is exact as an integer: both backends take it (a float label that large is
    # refused, since it may have been rounded).
    scores = torch.tensor(rng.normal(size=(2, 4)))
    y = torch.tensor([[0, 2**60, 1, 0], [1, 0, 0, 2]])
    torch.testing.assert_close(
        RankHingeLoss(loss, device="torch")(scores, y), RankHingeLoss(loss, device="cpu")(scores, y)
    )
