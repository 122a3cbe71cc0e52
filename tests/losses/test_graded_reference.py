"""A graded loss whose Δ is not separable by position (expected reciprocal rank) runs on the reference path."""

from __future__ import annotations

import itertools
import logging

import numpy as np
import pytest

import rankopt
from rankopt.api import ground_truth_coefficients, most_violated_rankings
from rankopt.inference import kernel_base
from rankopt.losses import AUCLoss
from rankopt.losses.structure import GradedQueryStructure


def _err(grades_in_order) -> float:
    """Expected reciprocal rank (Chapelle et al., CIKM 2009) with R(g) = (2^g − 1) / 2^4."""
    stop = (2.0 ** np.asarray(grades_in_order, dtype=float) - 1.0) / 16.0
    reach = np.concatenate(([1.0], np.cumprod(1.0 - stop)[:-1]))
    return float(np.sum(reach * stop / np.arange(1, stop.size + 1)))


class ERRLoss(AUCLoss):
    """1 − ERR / ideal ERR over the position-based Ψ with A(j) ∝ 1/j, inference by enumeration (n ≤ 7)."""

    name = "err_test"
    graded = True

    def structure(self):
        # Enumeration costs n!: probed up to 6 documents, as the structure lets it declare.
        return GradedQueryStructure(inference=self._inference, ground_truth=self._ground_truth, probe_documents=6)

    @staticmethod
    def _weights(n):
        weights = 1.0 / np.arange(1, n + 1)
        return weights / weights.sum()

    def _inference(self, scores, grades):
        weights, ideal = self._weights(scores.size), _err(np.sort(grades)[::-1])
        best, best_order = -np.inf, None
        for order in itertools.permutations(range(scores.size)):
            value = float(weights @ scores[list(order)]) + 1.0 - _err(grades[list(order)]) / ideal
            if value > best:
                best, best_order = value, order
        coef = np.empty(scores.size)
        coef[list(best_order)] = weights
        return coef, 1.0 - _err(grades[list(best_order)]) / ideal

    def _ground_truth(self, grades):
        weights, order = self._weights(grades.size), np.argsort(-grades, kind="stable")
        coef = np.empty(grades.size)
        coef[order] = weights
        for grade in np.unique(grades):  # a tie group shares its positions' mean
            coef[grades == grade] = coef[grades == grade].mean()
        return coef


def test_it_runs_per_query_and_says_so_once(caplog, monkeypatch):
    monkeypatch.setattr(kernel_base, "_LOGGED_FALLBACKS", set())
    rng = np.random.default_rng(0)
    sizes = rng.integers(1, 6, 50)
    offsets = np.concatenate(([0], np.cumsum(sizes)))
    grades, scores = rng.integers(0, 4, offsets[-1]), rng.normal(size=offsets[-1])
    with caplog.at_level(logging.WARNING, logger="rankopt.inference.batched"):
        result = most_violated_rankings(ERRLoss(), scores, grades, offsets)
        most_violated_rankings(ERRLoss(), scores, grades, offsets)
    messages = [r.getMessage() for r in caplog.records]
    assert len(messages) == 1 and "GradedQueryStructure" in messages[0] and "one Python call per query" in messages[0]
    for q in range(sizes.size):
        s, g = scores[offsets[q] : offsets[q + 1]], grades[offsets[q] : offsets[q + 1]]
        if g.max() == g.min():
            assert not result.usable[q]
            continue
        coef = result.coef[offsets[q] : offsets[q + 1]]
        assert result.values[q] == pytest.approx(coef @ s + result.losses[q])
    truth = ground_truth_coefficients(ERRLoss(), grades, offsets)
    assert truth.shape == grades.shape and np.all(np.isfinite(truth))


def test_ranksvm_trains_on_it_certified(rng):
    X = rng.normal(size=(100, 3))
    grades = np.digitize(X[:, 0] + 0.2 * rng.normal(size=100), [-0.5, 0.5, 1.2])
    qid = np.repeat(np.arange(20), 5)
    model = rankopt.RankSVM(loss=ERRLoss(), C=10.0).fit(X, grades, qid=qid)
    assert model.converged_ and model.inference_ == "reference" and model.coef_[0] > 0


def test_a_contract_breaking_inference_is_refused():
    class Broken(ERRLoss):
        name = "err_broken_test"

        def _inference(self, scores, grades):
            return np.zeros(scores.size + 1), 0.0

    with pytest.raises(RuntimeError, match="broke its contract: its own inference returned coefficients of shape"):
        most_violated_rankings(Broken(), np.zeros(3), [0, 1, 2], [0, 3])


class _ScoreOrderERR(ERRLoss):
    """Inexact: returns the order by score, whatever the loss."""

    name = "err_score_order"

    def _inference(self, scores, grades):
        weights, ideal = self._weights(scores.size), _err(np.sort(grades)[::-1])
        order = np.argsort(-scores, kind="stable")
        coef = np.empty(scores.size)
        coef[order] = weights
        return coef, 1.0 - _err(grades[order]) / ideal


class _ErrPlugin:
    @rankopt.hookimpl
    def rankopt_losses(self):
        return [ERRLoss]


def test_check_loss_and_check_plugin_check_a_loss_with_its_own_inference():
    """Issue 38, point 12 (and the structures issue's point 2): they crashed with AttributeError
    'weight_matrix' on any GradedQueryStructure loss."""
    from rankopt.testing import check_loss, check_plugin

    check_loss(ERRLoss())
    check_plugin(_ErrPlugin())


def test_check_loss_catches_an_inexact_own_inference_on_tiny_queries():
    from rankopt.testing import check_loss

    with pytest.raises(AssertionError, match="'err_score_order' \\(its own inference\\) is not exact"):
        check_loss(_ScoreOrderERR())


class LateWrongERR(ERRLoss):
    """Exact up to 5 documents; from 6 on it returns the ground truth's ranking, not the most violated one."""

    name = "late_wrong_err_test"

    def structure(self):
        return GradedQueryStructure(inference=self._late_inference, ground_truth=self._ground_truth)

    def _late_inference(self, scores, grades):
        if scores.size <= 5:
            return self._inference(scores, grades)
        order = np.argsort(-grades, kind="stable")
        coef = np.empty(scores.size)
        coef[order] = self._weights(scores.size)
        return coef, 0.0


def test_an_own_inference_wrong_from_six_documents_on_fails_the_check():
    """Issue 47, point 19: the probe stopped at 5 documents, so this passed check_plugin."""
    from rankopt.testing import check_plugin

    class Plugin:
        @rankopt.hookimpl
        def rankopt_losses(self):
            return [LateWrongERR]

    with pytest.raises(AssertionError, match="not exact|below the ground truth"):
        check_plugin(Plugin())
