"""Every door to the structured hinge, fed the same hostile inputs, gives one outcome (issue 61, point 17).

The doors: the NumPy ``structured_hinge``; ``RankHingeLoss`` and ``rank_hinge`` on both devices; the boosting
objective (LightGBM's and XGBoost's adapters call :meth:`HingeObjective.gradients`) and metric
(:class:`LossMetric`, :func:`rankopt.metrics.loss_metric`).  An outcome is a value with its gradient, or a
``ValueError``/``TypeError`` and its text.  The hinges answer alike to 1e-12 (the tensor kernels sum in another
order); the objective's gradient is the hinge's; the metric, another quantity, is held to refuse what the hinges
refuse, in the same words (its labels are named ``y_true``).

Two differences are the doors' purposes, and are held here too: a booster sees its whole training set, so one
with nothing to order is refused (as ``RankSVM.fit`` refuses it), where a mini-batch's hinge is 0; and the
boosting doors never see an empty set of rows.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="the torch extra (rankopt[torch]) is not installed")

import rankopt  # noqa: E402
from rankopt.boosting import HingeObjective, LossMetric  # noqa: E402
from rankopt.torch import RankHingeLoss, rank_hinge  # noqa: E402


def _torch_door(device: str, module: bool):
    def door(scores, labels, loss, params):
        s = torch.as_tensor(scores).requires_grad_()
        y = torch.as_tensor(labels) if labels.dtype.kind in "biuf" else labels
        if module:
            value = RankHingeLoss(loss, device=device, **params)(s, y)
        else:
            value = rank_hinge(s, y, loss=loss, device=device, **params)
        value.backward()
        return float(value.detach()), s.grad.numpy()

    return door


def _structured_hinge(scores, labels, loss, params):
    return rankopt.structured_hinge(scores, labels, loss=loss, **params)


def _objective(scores, labels, loss, params):
    grad, _ = HingeObjective(loss, scale=1.0, **params).gradients(scores, labels, [np.size(scores)])
    return None, grad


def _metric(scores, labels, loss, params):
    params = {key: value for key, value in params.items() if key != "n_threads"}  # see METRICS_DIFFER
    return LossMetric(loss, **params).value(scores, labels, [np.size(scores)]), None


def _loss_metric(scores, labels, loss, params):
    params = {key: value for key, value in params.items() if key != "n_threads"}
    one_query = np.zeros(np.size(scores))
    return rankopt.metrics.loss_metric(labels, scores, one_query, loss=loss, **params), None


HINGES = {
    "structured_hinge": _structured_hinge,
    "RankHingeLoss, cpu": _torch_door("cpu", True),
    "RankHingeLoss, torch": _torch_door("torch", True),
    "rank_hinge, cpu": _torch_door("cpu", False),
    "rank_hinge, torch": _torch_door("torch", False),
}
BOOSTING = {"objective": _objective}
METRICS = {"LossMetric": _metric, "loss_metric": _loss_metric}

_S = np.array([0.5, 2.0, -1.0, 0.0])
_BINARY = np.array([0, 1, 0, 1])

#: name: (scores, labels, loss, loss and call parameters); this round's hostile inputs, and the last round's.
HOSTILE = {
    "NaN score": (np.array([0.5, np.nan, 0.0, 1.0]), _BINARY, "ap", {}),
    "infinite score": (np.array([0.5, np.inf, 0.0, 1.0]), _BINARY, "ap", {}),
    "fractional label": (_S, np.array([0, 1.5, 0, 1]), "ap", {}),
    "NaN label": (_S, np.array([0, np.nan, 0, 1]), "ap", {}),
    "NaN grade": (_S, np.array([0, np.nan, 0, 1]), "ndcg_graded", {"k": 3}),
    "infinite grade": (_S, np.array([0, np.inf, 0, 1]), "ndcg_graded", {"k": 3}),
    "float grade of 2**63": (_S, np.array([0, 2.0**63, 0, 1]), "pairwise", {}),
    "uint64 grade past int64": (_S, np.array([0, 2**64 - 1, 0, 1], dtype=np.uint64), "ap", {}),
    "negative label": (_S, np.array([0, -3, 0, 1]), "ap", {}),
    "{-1, 1} labels": (_S, np.array([-1, 1, -1, 1]), "ap", {}),
    "bool labels": (_S, _BINARY.astype(bool), "ap", {}),
    "uint16 grades": (_S, np.array([0, 2, 0, 1], dtype=np.uint16), "ndcg_graded", {}),
    "object labels": (_S, _BINARY.astype(object), "ap", {}),
    "string labels": (_S, np.array(["0", "1", "0", "1"]), "ap", {}),
    "grade 1023": (_S, np.array([0, 1023, 0, 1]), "ndcg_graded", {}),
    "grades 1000 and 1023": (np.arange(5.0), np.array([1000, 1023, 1023, 1023, 5]), "ndcg_graded", {}),
    "huge scores": (np.array([1e304, -1e304]), np.array([1, 0]), "ap", {}),
    "scores whose sums overflow": (np.array([1e308, -1e308, 1e308]), np.array([1, 0, 1]), "ap", {}),
    "labels of another length": (_S, np.array([0, 1, 0]), "ap", {}),
    "2-D labels": (_S, _BINARY[None], "ap", {}),
    "relevant_at=0, graded": (_S, np.array([0, 2, 0, 1]), "ndcg_graded", {"relevant_at": 0}),
    "relevant_at='2', graded": (_S, np.array([0, 2, 0, 1]), "ndcg_graded", {"relevant_at": "2"}),
    "relevant_at=None, binary": (_S, _BINARY, "ap", {"relevant_at": None}),
    "relevant_at=2": (_S, np.array([0, 2, 1, 3]), "ap", {"relevant_at": 2}),
    "n_threads=0": (_S, _BINARY, "ap", {"n_threads": 0}),
    "n_threads=True": (_S, _BINARY, "ap", {"n_threads": True}),
    "ties, ndcg_graded k=1": (np.zeros(3), np.array([1, 0, 0]), "ndcg_graded", {"k": 1}),
    "ties, ndcg_graded k=1, reversed": (np.zeros(3), np.array([0, 0, 1]), "ndcg_graded", {"k": 1}),
    "ties, pairwise": (np.zeros(4), np.array([2, 0, 1, 0]), "pairwise", {}),
    "P > N": (_S, np.array([1, 1, 0, 1]), "ap", {}),
    "P = N = 1": (np.array([0.2, 0.1]), np.array([0, 1]), "auc", {}),
    "a loss parameter": (_S, np.array([0, 2, 0, 1]), "precision_at_k", {"k": 1}),
    "a keyword nothing takes": (_S, _BINARY, "ap", {"C": 1}),
    "an unknown loss": (_S, _BINARY, "nope", {}),
}

#: Where the metrics answer a hinge's refusal, and why.
METRICS_DIFFER = {
    "scores whose sums overflow": "the metric sorts the scores and sums none of them",
    "n_threads=0": "the metrics run no inference: they take no n_threads",
    "n_threads=True": "the metrics run no inference: they take no n_threads",
}

#: Inputs with nothing to order: a hinge of 0 at the hinge doors, refused by the boosting doors.
NOTHING_TO_ORDER = {
    "one document": (np.array([0.3]), np.array([1]), "ap", {}),
    "one class": (_S, np.ones(4, dtype=int), "ap", {}),
    "one grade": (_S, np.full(4, 2), "ndcg_graded", {}),
}


def _outcome(door, case):
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            value, grad = door(*case)
    except (ValueError, TypeError) as exc:
        return type(exc).__name__, str(exc).replace("y_true", "y"), None
    return "value", value, grad


@pytest.mark.parametrize("case", list(HOSTILE))
def test_every_door_gives_the_same_outcome(case):
    outcomes = {name: _outcome(door, HOSTILE[case]) for name, door in {**HINGES, **BOOSTING}.items()}
    reference = outcomes["structured_hinge"]
    for name, outcome in outcomes.items():
        assert outcome[0] == reference[0], (name, outcome, reference)
        if reference[0] != "value":
            assert outcome[1] == reference[1], name
            continue
        if outcome[1] is not None:
            assert outcome[1] == pytest.approx(reference[1], rel=1e-12, abs=1e-12), name
        np.testing.assert_allclose(outcome[2], reference[2], rtol=1e-12, atol=1e-12, err_msg=name)
    if case in METRICS_DIFFER:
        return
    for name, door in METRICS.items():
        outcome = _outcome(door, HOSTILE[case])
        if reference[0] == "value":
            assert outcome[0] == "value", (name, outcome)
        else:
            assert outcome[:2] == reference[:2], name


@pytest.mark.parametrize("case", list(NOTHING_TO_ORDER))
def test_nothing_to_order_is_zero_for_a_batch_and_refused_for_a_booster(case):
    for name, door in HINGES.items():
        kind, value, grad = _outcome(door, NOTHING_TO_ORDER[case])
        assert kind == "value" and value == 0.0 and not np.any(grad), name
    for name, door in {**BOOSTING, **METRICS}.items():
        kind, message, _ = _outcome(door, NOTHING_TO_ORDER[case])
        assert kind == "ValueError" and "got none of the 1 queries" in message, name


def test_an_empty_batch_is_refused_alike_by_every_hinge():
    case = (np.zeros(0), np.zeros(0, dtype=int), "ap", {})
    outcomes = {_outcome(door, case)[:2] for door in HINGES.values()}
    assert outcomes == {("ValueError", "expected a non-empty y, got an empty array instead")}


def test_one_vocabulary_for_losses_and_metrics():
    """Issue 61, point 24: RankSVM(eval_metric=...) and RankSVMCV(scoring=...) took "ndcg@10", the loss doors
    "ndcg_graded" with k=, and RankSVM(loss="ndcg_graded", k=5) was a TypeError.  Every loss door now takes a
    metric's spelling ("ndcg@5", "p@3", "map"), RankSVM the loss's keywords as loss_params (scikit-learn's
    metric_params), and every metric door a rank loss's name (the metric it stands for)."""
    from sklearn.exceptions import ConvergenceWarning

    from rankopt import RankSVM, RankSVMCV, get_loss
    from rankopt.lightgbm import hinge_objective

    rng = np.random.default_rng(0)
    qid = np.repeat(np.arange(12), 8)
    X, grades = rng.normal(size=(qid.size, 4)), rng.integers(0, 3, qid.size)
    for spelled, name, params in (("ndcg@5", "ndcg_graded", {"k": 5}), ("p@3", "precision_at_k", {"k": 3})):
        assert repr(RankHingeLoss(spelled).rank_loss) == repr(get_loss(name, **params))
        assert repr(hinge_objective(spelled).loss) == repr(get_loss(name, **params))
        hinge = rankopt.structured_hinge(X[:, 0], grades, qid=qid, loss=spelled)
        np.testing.assert_array_equal(
            hinge[1], rankopt.structured_hinge(X[:, 0], grades, qid=qid, loss=name, **params)[1]
        )
        metric = rankopt.metrics.loss_metric(grades, X[:, 0], qid, loss=spelled)
        assert metric == rankopt.metrics.loss_metric(grades, X[:, 0], qid, loss=name, **params)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ConvergenceWarning)
            by_name = RankSVM(loss=spelled, max_iter=20).fit(X, grades, qid=qid)
            by_params = RankSVM(loss=name, loss_params=params, max_iter=20).fit(X, grades, qid=qid)
        np.testing.assert_array_equal(by_name.coef_, by_params.coef_)
    assert repr(RankHingeLoss("map").rank_loss) == repr(get_loss("ap"))
    with pytest.raises(TypeError, match="expected k once, got it in the name 'ndcg@5' and as a keyword"):
        RankHingeLoss("ndcg@5", k=3)
    model = RankSVM(eval_metric=["ndcg@10", "ndcg_graded", "pairwise"], max_iter=5)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        model.fit(X, grades, qid=qid, eval_set=[(X, grades, qid)])
        search = RankSVMCV(Cs=[1.0], cv=2, scoring="pairwise", max_iter=5).fit(X, grades, qid=qid)
    assert set(model.evals_result_["valid_0"]) == {"ndcg@10", "ndcg_graded", "pairwise"}
    assert 0.0 <= search.best_score_ <= 1.0
