"""CONTRIBUTING.md's "Adding a loss structure", followed line by line, for a binary and a graded structure
(issue 47, point 17): a structure class, a ``StructureKernel`` subclass with exactly the methods the recipe
lists, one ``register_kernel``; then every entry point runs on them.

Before, the recipe left out ``ranking_loss`` (the kernel could not be instantiated), a binary kernel's
``resolve_method`` returning a name crashed ``RankSVM.fit``, the one-query entry points ran ``dp`` past the
kernel, ``inference="firsthit"`` was refused as unknown and the fit's log named ``dp``.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import ClassVar

import numpy as np
import pytest

import rankopt
from rankopt.api import most_violated_ranking, most_violated_rankings
from rankopt.inference import structure_table
from rankopt.inference.binary_kernels import BinaryRankKernel, per_query
from rankopt.inference.graded_kernels import GradedPairKernel
from rankopt.inference.kernel_base import PreparedKernel, StructureKernel
from rankopt.losses import PairwiseLoss, PrecisionAtKLoss
from rankopt.losses.structure import GradedPairStructure
from rankopt.testing import brute_force_most_violated, brute_force_pairs, check_plugin


@pytest.fixture
def table(monkeypatch):
    """The structure table, restored after the test."""
    monkeypatch.setattr(structure_table, "_KERNELS", dict(structure_table._KERNELS))
    return structure_table


# ------------------------------------------------------------------ step 1: the structures


@dataclass(frozen=True)
class FirstHitStructure:
    """Δ = 1 when the top document is irrelevant: a binary structure of its own."""

    methods: ClassVar[tuple[str, ...]] = ("firsthit",)

    def contract_problem(self, loss=None):
        return None


@dataclass(frozen=True)
class EvenPairStructure:
    """SVM^rank's unweighted pairs over grades: a graded structure of its own."""

    methods: ClassVar[tuple[str, ...]] = ("even-pairs",)

    def contract_problem(self, loss=None):
        return None


class FirstHitLoss(PrecisionAtKLoss):
    """1 − P@1; a binary loss still defines value and delta (inherited here), checked on 0/1 patterns."""

    name = "first_hit_recipe"

    def __init__(self):
        self.k = 1

    def structure(self):
        return FirstHitStructure()


class EvenPairLoss(PairwiseLoss):
    name = "even_pairs_recipe"

    def structure(self):
        return EvenPairStructure()


# ------------------------------------------------------------------ step 2: the kernels


class _Batch(PreparedKernel):
    relative_inside = False  # per_query gives Ψ(R̂): the host subtracts the ground truth

    def __init__(self, kernel, loss, structure, relevance, offsets, method, registry):
        self.kernel, self.loss, self.structure, self.relevance = kernel, loss, structure, relevance
        self.offsets, self.method, self.registry = offsets, method, registry

    def __call__(self, scores, n_threads, relative_to_truth):
        self.kernel.calls += 1
        return per_query(
            self.kernel, self.loss, self.structure, scores, self.relevance, self.offsets, self.method, self.registry
        )


class FirstHitKernel(StructureKernel):
    structure = FirstHitStructure
    device = "cpu"
    graded = False
    label = "first hit"
    calls = 0

    def resolve_method(self, loss, structure, method, longest, registry):
        if method not in ("auto", "firsthit"):
            raise ValueError(f"expected method 'auto' or 'firsthit', got {method!r} instead")
        return "firsthit"

    def prepare(self, loss, structure, relevance, offsets, method, *, relevant_from, registry):
        method = self.resolve_method(loss, structure, method, 0, registry)
        relevant = (relevance >= relevant_from).astype(np.int64)
        return _Batch(self, loss, structure, relevant, offsets, method, registry)

    def query(self, loss, structure, scores, relevance, method, registry):
        # 1 − P@1 is precision at k = 1: the top-k count method is exact for it.
        is_pos = relevance != 0
        if is_pos.all() or not is_pos.any():
            return None
        result = most_violated_ranking(PrecisionAtKLoss(1), scores[is_pos], scores[~is_pos], "topk")
        coef = np.empty(scores.size)
        coef[is_pos], coef[~is_pos] = result.pos_coef, result.neg_coef
        return coef, result.loss, result.value

    def ground_truth(self, loss, structure, relevance, offsets):
        return BinaryRankKernel().ground_truth(loss, None, relevance, offsets)

    def ranking_loss(self, loss, structure, ordered_relevance):
        return 1.0 - float(np.asarray(ordered_relevance)[0] != 0)

    def check(self, loss, structure, *, n_instances, random_state, registry):
        rng = np.random.default_rng(random_state)
        for _ in range(n_instances // 10):
            pos, neg = rng.integers(-2, 3, rng.integers(1, 4)) / 2.0, rng.integers(-2, 3, rng.integers(1, 4)) / 2.0
            scores, relevance = np.r_[pos, neg], np.r_[np.ones(pos.size, int), np.zeros(neg.size, int)]
            found = self.query(loss, structure, scores, relevance, "firsthit", registry)[2]
            if not np.isclose(found, brute_force_most_violated(loss, pos, neg)):
                raise AssertionError(f"first hit on {loss.name!r}: not the brute-force maximum")


class EvenPairKernel(StructureKernel):
    structure = EvenPairStructure
    device = "cpu"
    graded = True
    label = "even pairs"
    calls = 0
    _pairs = GradedPairStructure()

    def resolve_method(self, loss, structure, method, longest, registry):
        if method not in ("auto", "even-pairs"):
            raise ValueError(f"expected method 'auto' or 'even-pairs', got {method!r} instead")
        return "even-pairs"

    def prepare(self, loss, structure, relevance, offsets, method, *, relevant_from, registry):
        method = self.resolve_method(loss, structure, method, 0, registry)
        return _Batch(self, loss, structure, relevance, offsets, method, registry)

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
                raise AssertionError(f"even pairs on {loss.name!r}: not the brute-force maximum")


class _Plugin:
    @rankopt.hookimpl
    def rankopt_losses(self):
        return [FirstHitLoss, EvenPairLoss]


# ------------------------------------------------------------------ step 3: one registration each


@pytest.fixture
def registered(table):
    first_hit, even_pairs = FirstHitKernel(), EvenPairKernel()
    table.register_kernel(first_hit)
    table.register_kernel(even_pairs)
    return first_hit, even_pairs


def _data(seed=0, n_queries=6, size=8):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n_queries * size, 3))
    grades = np.clip(np.round(X[:, 0] + rng.normal(size=X.shape[0]) * 0.5 + 1), 0, 3).astype(int)
    return X, grades, np.repeat(np.arange(n_queries), size)


def test_the_recipes_kernels_register_and_pass_the_plugin_check(registered):
    check_plugin(_Plugin())


def test_the_binary_structure_serves_every_entry_point(registered, caplog):
    kernel, _ = registered
    rng = np.random.default_rng(1)
    pos, neg = rng.normal(size=3), rng.normal(size=4)
    before = kernel.calls
    found = rankopt.most_violated_ranking(FirstHitLoss(), pos, neg, inference="firsthit")
    assert kernel.calls == before + 1
    assert found.value == pytest.approx(brute_force_most_violated(FirstHitLoss(), pos, neg), abs=1e-12)

    X, grades, qid = _data()
    relevant = grades >= 2
    with caplog.at_level(logging.INFO, logger="rankopt"):
        one_query = rankopt.RankSVM(loss=FirstHitLoss(), inference="firsthit", C=1000.0).fit(X, relevant)
    assert one_query.inference_ == "firsthit" and one_query.converged_
    assert any("'firsthit', the kernel of its declared FirstHitStructure" in r.getMessage() for r in caplog.records)
    assert not any("'dp'" in r.getMessage() for r in caplog.records)
    reference = rankopt.RankSVM(loss="precision_at_k", C=1000.0).set_params(
        loss=rankopt.get_loss("precision_at_k", k=1)
    )
    np.testing.assert_allclose(one_query.coef_, reference.fit(X, relevant).coef_, atol=1e-6)

    over_queries = rankopt.RankSVM(loss=FirstHitLoss(), C=10.0, relevant_at=2).fit(X, grades, qid=qid)
    assert over_queries.inference_ == "firsthit" and over_queries.converged_
    values, grad = rankopt.structured_hinge(rng.normal(size=grades.size), grades, qid=qid, loss=FirstHitLoss())
    assert values >= 0 and grad.shape == grades.shape
    assert 0.0 <= rankopt.metrics.loss_metric(grades, X[:, 0], qid, loss=FirstHitLoss(), relevant_at=2) <= 1.0


def test_the_graded_structure_serves_every_entry_point(registered):
    _, kernel = registered
    X, grades, qid = _data(2)
    before = kernel.calls
    fit = rankopt.RankSVM(loss=EvenPairLoss(), inference="even-pairs", C=1.0).fit(X, grades, qid=qid)
    built_in = rankopt.RankSVM(loss="pairwise", C=1.0).fit(X, grades, qid=qid)
    assert kernel.calls > before and fit.inference_ == "even-pairs" and fit.converged_
    np.testing.assert_allclose(fit.coef_, built_in.coef_, atol=1e-6)
    scores = np.random.default_rng(3).normal(size=grades.size)
    ours = rankopt.structured_hinge(scores, grades, qid=qid, loss=EvenPairLoss())[0]
    assert ours == pytest.approx(rankopt.structured_hinge(scores, grades, qid=qid, loss="pairwise")[0], rel=1e-12)
    assert rankopt.metrics.loss_metric(grades, scores, qid, loss=EvenPairLoss()) == pytest.approx(
        rankopt.metrics.loss_metric(grades, scores, qid, loss="pairwise"), rel=1e-12
    )


# ------------------------------------------------------------------ its torch kernel (same three steps)


def test_the_structure_takes_a_torch_kernel_too(registered, table):
    """The recipe's step 2 for the tensor device: a ``TensorKernel`` subclass, its ``hinge`` over the padded
    batch, and one ``register_kernel``; ``RankHingeLoss(device="torch")`` then runs it.  (Its hinge runs the
    structure's host kernel on a copy of the batch: a real port writes it in tensor operations, as
    ``rankopt/inference/tensor_kernels.py`` does.)"""
    torch = pytest.importorskip("torch")
    from rankopt.inference.tensor_kernels import TensorHinge, TensorKernel
    from rankopt.torch import RankHingeLoss

    class EvenPairTensorKernel(TensorKernel):
        structure = EvenPairStructure
        graded = True
        label = "even pairs (tensor)"
        calls = 0

        def hinge(self, loss, structure, scores, relevance, mask, facts):
            EvenPairTensorKernel.calls += 1
            rows = mask.sum(dim=1).cpu().numpy()
            offsets = np.concatenate(([0], np.cumsum(rows))).astype(np.int64)
            found = most_violated_rankings(
                loss, scores[mask].cpu().numpy(), relevance[mask].cpu().numpy(), offsets, relative_to_truth=True
            )
            coef = torch.zeros_like(scores)
            coef[mask] = torch.as_tensor(found.coef, dtype=scores.dtype, device=scores.device)
            values = torch.as_tensor(np.maximum(found.values, 0.0), dtype=scores.dtype, device=scores.device)
            return TensorHinge(values, coef, torch.as_tensor(found.usable, device=scores.device))

    table.register_kernel(EvenPairTensorKernel())
    rng = np.random.default_rng(4)
    y = torch.as_tensor(rng.integers(0, 3, (5, 6)))
    mask = torch.as_tensor(rng.random((5, 6)) < 0.9)
    base = rng.normal(size=(5, 6))
    out = {}
    for device in ("torch", "cpu"):
        scores = torch.tensor(base, requires_grad=True)
        value = RankHingeLoss(EvenPairLoss(), device=device)(scores, y, mask=mask)
        value.backward()
        out[device] = value.item(), scores.grad
    assert EvenPairTensorKernel.calls == 1
    assert out["torch"][0] == pytest.approx(out["cpu"][0], rel=1e-12)
    torch.testing.assert_close(out["torch"][1], out["cpu"][1])
