"""``rankopt deep``: the peer losses against loop implementations of their papers, and quick runs."""

from __future__ import annotations

import functools
import itertools
import json
import math

import numpy as np
import pytest
import scipy.sparse as sp

torch = pytest.importorskip("torch")

from experiment_cli import experiment_main  # noqa: E402

from experiments import deep, neural_losses  # noqa: E402
from rankopt.data.loaders import SvmLightData  # noqa: E402


def _batch(rng, n_rows=4, width=6):
    scores = rng.normal(0, 1, (n_rows, width))
    grades = rng.integers(0, 4, (n_rows, width))
    mask = rng.random((n_rows, width)) < 0.8
    mask[:, 0] = True
    grades[0] = 2  # one row with a single grade: nothing to order
    return torch.tensor(scores, dtype=torch.float64), torch.tensor(grades), torch.tensor(mask)


def _rows(scores, grades, mask):
    """(scores, grades) of each row's real documents, and whether the row has two grades."""
    for s, g, m in zip(scores.numpy(), grades.numpy(), mask.numpy(), strict=True):
        yield s[m], g[m], len(set(g[m].tolist())) > 1


def _dcg(gains_in_order):
    return sum(g / math.log2(k + 2) for k, g in enumerate(gains_in_order))


def _listnet_reference(s, g):
    target = np.exp(g) / np.exp(g).sum()
    log_p = s - np.log(np.exp(s).sum())
    return -(target * log_p).sum()


def _approx_ndcg_reference(s, g, alpha=1.0):
    gains = 2.0**g - 1
    total = 0.0
    for i in range(s.size):
        rank = 1 + sum(1 / (1 + math.exp(-alpha * (s[j] - s[i]))) for j in range(s.size) if j != i)
        total += gains[i] / math.log2(1 + rank)
    return -total / _dcg(sorted(gains, reverse=True))


def _lambda_reference(s, g, mu=5.0, k=None):
    gains = 2.0**g - 1
    normalised = gains / _dcg(sorted(gains, reverse=True)[:k])
    position = np.empty(s.size)
    position[np.argsort(-s, kind="stable")] = np.arange(1, s.size + 1)
    total = 0.0
    for i, j in itertools.permutations(range(s.size), 2):
        if g[i] <= g[j] or (k is not None and max(position[i], position[j]) > k):
            continue
        rho = abs(1 / math.log2(1 + position[i]) - 1 / math.log2(1 + position[j]))
        gap = abs(position[i] - position[j])
        delta = abs(1 / math.log2(1 + gap) - 1 / math.log2(2 + gap))
        weight = (rho + mu * delta) * abs(normalised[i] - normalised[j])
        total -= weight * math.log2(1 / (1 + math.exp(-(s[i] - s[j]))))
    return total


@pytest.mark.parametrize(
    ("loss", "reference"),
    [
        (neural_losses.listnet_loss, _listnet_reference),
        (neural_losses.approx_ndcg_loss, _approx_ndcg_reference),
        (neural_losses.lambda_loss, _lambda_reference),
        (functools.partial(neural_losses.lambda_loss, k=3), functools.partial(_lambda_reference, k=3)),
    ],
)
def test_peer_losses_equal_their_papers_formulas(loss, reference):
    """Masked padded batches against one loop per row; the mean is over rows with two grades."""
    rng = np.random.default_rng(3)
    for _ in range(20):
        scores, grades, mask = _batch(rng)
        expected = [reference(s, g.astype(float)) for s, g, used in _rows(scores, grades, mask) if used]
        got = loss(scores, grades, mask)
        assert float(got) == pytest.approx(np.mean(expected), rel=1e-10, abs=1e-12)


@pytest.mark.parametrize(
    "loss", [neural_losses.listnet_loss, neural_losses.approx_ndcg_loss, neural_losses.lambda_loss]
)
def test_peer_losses_give_finite_gradients_that_lower_the_loss(loss):
    """(Also LambdaLoss@k, below.)"""
    rng = np.random.default_rng(4)
    scores, grades, mask = _batch(rng, n_rows=6, width=8)
    scores.requires_grad_(True)
    value = loss(scores, grades, mask)
    value.backward()
    assert torch.isfinite(scores.grad).all()
    assert torch.all(scores.grad[~mask] == 0)  # padding gets no gradient
    with torch.no_grad():
        assert loss(scores - 1e-3 * scores.grad, grades, mask) < value


@pytest.mark.parametrize("k", [None, 3, 10])
def test_pair_restricted_lambdaloss_equals_the_allrank_transcription(k):
    """Value and gradient, allRank's sum over the batch against the mean over rows with two grades."""
    rng = np.random.default_rng(5)
    for _ in range(10):
        scores, grades, mask = _batch(rng, n_rows=5, width=9)
        used = sum(1 for *_, two in _rows(scores, grades, mask) if two)
        ours = scores.clone().requires_grad_(True)
        theirs = scores.clone().requires_grad_(True)
        value = neural_losses.lambda_loss(ours, grades, mask, k=k) * used
        reference = neural_losses.allrank_lambda_loss(theirs, grades, mask, k=k)
        value.backward()
        reference.backward()
        assert float(value.detach()) == pytest.approx(float(reference.detach()), rel=1e-9)
        np.testing.assert_allclose(ours.grad.numpy(), theirs.grad.numpy(), rtol=1e-9, atol=1e-12)


def test_lambdaloss_at_k_gives_finite_gradients_that_lower_the_loss():
    rng = np.random.default_rng(6)
    scores, grades, mask = _batch(rng, n_rows=6, width=8)
    scores.requires_grad_(True)
    value = neural_losses.lambda_loss(scores, grades, mask, k=3)
    value.backward()
    assert torch.isfinite(scores.grad).all() and torch.all(scores.grad[~mask] == 0)
    with torch.no_grad():
        assert neural_losses.lambda_loss(scores - 1e-3 * scores.grad, grades, mask, k=3) < value


def test_peer_losses_are_zero_without_anything_to_order():
    scores = torch.zeros((2, 3), dtype=torch.float64, requires_grad=True)
    grades = torch.tensor([[1, 1, 1], [0, 0, 0]])
    mask = torch.ones((2, 3), dtype=torch.bool)
    for loss in (neural_losses.listnet_loss, neural_losses.approx_ndcg_loss, neural_losses.lambda_loss):
        assert float(loss(scores, grades, mask).detach()) == 0.0


def _letor_split(rng, n_queries, first_qid):
    sizes = rng.integers(8, 20, n_queries)
    qid = np.repeat(np.arange(first_qid, first_qid + n_queries), sizes)
    X = rng.standard_normal((qid.size, 136))
    grades = np.clip(np.round(X[:, 0] + X[:, 1] + rng.standard_normal(qid.size)), 0, 4)
    return SvmLightData(X=sp.csr_matrix(X), y=grades, qid=qid, path="synthetic")


def test_quick_mslr_run_fills_every_row(tmp_path):
    pytest.importorskip("lightgbm")
    rng = np.random.default_rng(5)
    data = (_letor_split(rng, 14, 1), _letor_split(rng, 9, 100))
    out, js = tmp_path / "t.md", tmp_path / "r.json"
    result = deep.run_mslr_experiment(data=data, quick=True, output=out, json_output=js)
    assert [row.method for row in result.rows] == [*deep.MSLR_LOSSES, *deep.MSLR_BASELINES]
    for row in result.rows:
        assert len(row.test["NDCG@10"]) == 2 and len(row.per_query["NDCG@10"]) == 8
        assert 0 < np.mean(row.test["NDCG@10"]) <= 1
    table = out.read_text()
    assert "smoke test" in table and table.count("\n| ") == len(result.rows) + 1
    assert json.loads(js.read_text())["reference"] == "hinge_ndcg_graded"


def test_quick_digits_run_fills_every_row():
    pytest.importorskip("pytorch_metric_learning")
    result = deep.run_digits_experiment(quick=True, seeds=(0,))
    assert [row.method for row in result.rows] == list(deep.DIGITS_LOSSES)
    for row in result.rows:
        assert 0.3 < row.test["mAP"][0] <= 1 and len(row.per_query["Recall@1"]) == 100


def test_retrieval_metrics_on_a_perfect_and_a_reversed_embedding():
    labels = np.array([0, 0, 1, 1])
    perfect = np.array([[1.0, 0.0], [1.0, 0.0], [0.0, 1.0], [0.0, 1.0]])
    metrics = deep.retrieval_metrics(perfect, labels)
    assert np.all(metrics["mAP"] == 1.0) and np.all(metrics["Recall@1"] == 1.0)
    crossed = np.array([[1.0, 0.0], [0.0, 1.0], [0.0, 1.0], [1.0, 0.0]])
    assert np.all(deep.retrieval_metrics(crossed, labels)["Recall@1"] == 0.0)


def test_cli_refuses_no_seeds(capsys):

    with pytest.raises(SystemExit, match="expected --seeds >= 1"):
        experiment_main(["deep", "digits", "--seeds", "0"])


def test_quick_metric_learning_run_scores_every_loss_on_unseen_classes():
    """Issue 49: rankopt.pml.MetricHingeLoss in PML's loop against FastAP, Smooth-AP and a mined triplet loss."""
    pytest.importorskip("pytorch_metric_learning")
    from experiments import metric_learning

    result = metric_learning.run_metric_learning_experiment(quick=True)
    assert list(result["losses"]) == list(metric_learning.LOSSES)
    for runs in result["losses"].values():
        assert 0 < runs["MAP@R"][0] <= 1 and 0 < runs["P@1"][0] <= 1
    table = metric_learning.format_table(result)
    assert table.count("\n| ") == len(metric_learning.LOSSES)
