"""RankSVM: fitting every built-in loss, input equivalences, the estimator API, bad input."""

from __future__ import annotations

import logging

import numpy as np
import pytest
import scipy.sparse as sp
from sklearn.base import clone
from sklearn.exceptions import NotFittedError
from sklearn.metrics import average_precision_score

import rankopt
from rankopt import RankSVM
from rankopt.engine import IterationRecord
from rankopt.losses import Loss
from rankopt.plugins import PluginKind, default_registry

LOSSES = ["ap", "ndcg", "auc", "zero_one"]


@pytest.fixture(scope="module")
def fitted(digits):
    X, y, _, _ = digits
    return {loss: RankSVM(loss=loss, C=1.0).fit(X, y) for loss in LOSSES}


# ---------------------------------------------------------------------- fitting


@pytest.mark.parametrize("loss", LOSSES)
def test_fit_sets_the_learned_attributes(fitted, digits, loss):
    X, y, X_test, y_test = digits
    model = fitted[loss]
    assert model.coef_.shape == (64,) and model.coef_.dtype == np.float64
    assert np.all(np.isfinite(model.coef_)) and np.any(model.coef_ != 0)
    assert isinstance(model.n_iter_, int) and 1 <= model.n_iter_ <= model.max_iter
    assert model.converged_ is True
    assert len(model.history_) == model.n_iter_
    assert all(isinstance(record, IterationRecord) for record in model.history_)
    assert model.duality_gap_ == model.history_[-1].duality_gap <= model.C * model.tol
    assert isinstance(model.loss_, Loss) and model.loss_.name == loss
    assert model.n_features_in_ == 64
    if loss == "zero_one":
        assert model.inference_ is None
    else:
        # "auto" picks a registered method that is exact for the loss
        methods = {info.name: info.cls for info in default_registry().list(PluginKind.INFERENCE_METHOD)}
        assert model.inference_ in methods
        assert methods[model.inference_]().unsupported_reason(model.loss_) is None
    # the learned ranking is far better than chance on held-out data
    assert model.score(X_test, y_test) > 0.8 > 5 * y_test.mean()


def test_fit_returns_self(digits):
    X, y, _, _ = digits
    model = RankSVM()
    assert model.fit(X, y) is model


def test_loss_instance_equals_loss_name(digits, fitted):
    X, y, _, _ = digits
    model = RankSVM(loss=rankopt.get_loss("ndcg")).fit(X, y)
    np.testing.assert_array_equal(model.coef_, fitted["ndcg"].coef_)


@pytest.mark.parametrize("loss", LOSSES)
def test_float32_and_sparse_give_the_same_coef(digits, fitted, loss):
    X, y, X_test, _ = digits
    reference = fitted[loss].coef_
    variants = {
        "float32": X.astype(np.float32),
        "csr": sp.csr_matrix(X),
        "csr-float32": sp.csr_matrix(X.astype(np.float32)),
        "csc": sp.csc_matrix(X),
    }
    for name, Xv in variants.items():
        model = RankSVM(loss=loss, C=1.0).fit(Xv, y)
        np.testing.assert_allclose(model.coef_, reference, rtol=1e-4, atol=1e-5, err_msg=name)
    dense_scores = fitted[loss].decision_function(X_test)
    np.testing.assert_allclose(fitted[loss].decision_function(sp.csr_matrix(X_test)), dense_scores, rtol=1e-12)
    np.testing.assert_allclose(
        fitted[loss].decision_function(X_test.astype(np.float32)), dense_scores, rtol=1e-5, atol=1e-5
    )


def test_integer_and_bool_x_are_converted_to_float64(digits):
    X, y, _, _ = digits
    X_int = (X * 16).astype(np.int64)  # the digits' raw pixel counts
    reference = RankSVM(C=0.1).fit(X_int.astype(np.float64), y).coef_
    np.testing.assert_array_equal(RankSVM(C=0.1).fit(X_int, y).coef_, reference)
    np.testing.assert_array_equal(RankSVM(C=0.1).fit(X_int.astype(np.int32), y).coef_, reference)
    X_bool = X > 0.5
    np.testing.assert_array_equal(
        RankSVM(C=0.1).fit(X_bool, y).coef_, RankSVM(C=0.1).fit(X_bool.astype(np.float64), y).coef_
    )


@pytest.mark.parametrize("loss", ["ap", "zero_one"])
def test_label_encodings_are_equivalent(digits, fitted, loss):
    X, y, _, _ = digits
    for encoding in (2 * y - 1, y.astype(bool), y.astype(np.float64), list(y)):
        model = RankSVM(loss=loss, C=1.0).fit(X, encoding)
        np.testing.assert_array_equal(model.coef_, fitted[loss].coef_)


def test_score_is_average_precision(digits, fitted):
    _, _, X_test, y_test = digits
    model = fitted["auc"]
    expected = average_precision_score(y_test, model.decision_function(X_test))
    assert model.score(X_test, y_test) == pytest.approx(expected, abs=1e-12)
    assert model.score(X_test, 2 * y_test - 1) == pytest.approx(expected, abs=1e-12)


def test_decision_function_is_x_dot_coef(digits, fitted):
    _, _, X_test, _ = digits
    model = fitted["ap"]
    np.testing.assert_allclose(model.decision_function(X_test), X_test @ model.coef_, rtol=1e-12)


def test_verbose_logs_every_iteration(digits, caplog):
    X, y, _, _ = digits
    with caplog.at_level(logging.INFO, logger="rankopt"):
        model = RankSVM(verbose=True).fit(X, y)
    iteration_lines = [r for r in caplog.records if r.getMessage().startswith("RankSVM iteration ")]
    assert len(iteration_lines) == model.n_iter_


def test_refit_does_not_keep_state(digits):
    X, y, _, _ = digits
    model = RankSVM(loss="auc", C=0.1).fit(X, y)
    first = model.coef_.copy()
    model.set_params(C=10.0).fit(X, y)
    assert not np.allclose(model.coef_, first)
    np.testing.assert_array_equal(model.set_params(C=0.1).fit(X, y).coef_, first)


# ------------------------------------------------------------------- estimator API


def test_get_params_set_params_clone(digits):
    X, y, _, _ = digits
    model = RankSVM(loss="ndcg", C=0.5, tol=1e-4, max_iter=50, inference="greedy", verbose=False)
    params = model.get_params()
    for key, value in dict(loss="ndcg", C=0.5, tol=1e-4, max_iter=50, inference="greedy", verbose=False).items():
        assert params[key] == value
    assert model.set_params(C=2.0, loss="auc") is model
    assert model.C == 2.0 and model.loss == "auc"
    with pytest.raises(ValueError):
        model.set_params(not_a_parameter=1)

    model.fit(X, y)
    copy = clone(model)
    assert copy.get_params() == model.get_params()
    assert not hasattr(copy, "coef_")
    copy.set_params(C=0.01).fit(X, y)
    assert model.C == 2.0
    assert not np.allclose(copy.coef_, model.coef_)


def test_init_only_stores_parameters():
    # even invalid values: validation happens in fit (scikit-learn convention)
    model = RankSVM(loss="nope", C=-1, tol=0, max_iter=0, inference=3)
    assert model.get_params()["C"] == -1
    assert not hasattr(model, "coef_")


def test_decision_function_before_fit_raises():
    with pytest.raises(NotFittedError):
        RankSVM().decision_function(np.ones((2, 3)))


def test_decision_function_feature_count_mismatch_raises(fitted, digits):
    _, _, X_test, _ = digits
    with pytest.raises(ValueError) as excinfo:
        fitted["ap"].decision_function(X_test[:, :63])
    # one sentence, in scikit-learn's words (its estimator checks match them), said once
    assert str(excinfo.value) == "X has 63 features, but RankSVM is expecting 64 features as input, as in fit"
    with pytest.raises(ValueError, match=r"^X has 65 features, but RankSVM is expecting 64 features"):
        fitted["ap"].decision_function(sp.csr_matrix(np.ones((2, 65))))


# --------------------------------------------------------------------- bad input


def _small():
    rng = np.random.default_rng(0)
    return rng.normal(size=(10, 3)), np.array([1, 0] * 5)


def _with(value, index=(0, 0)):
    X, y = _small()
    X = X.copy()
    X[index] = value
    return X, y


BAD_DATA = {
    "X-nan": (lambda: _with(np.nan), r"\bX\b.*finite"),
    "X-inf": (lambda: _with(np.inf), r"\bX\b.*finite"),
    "X-neg-inf": (lambda: _with(-np.inf, (3, 2)), r"\bX\b.*finite"),
    "X-sparse-nan": (lambda: (sp.csr_matrix(_with(np.nan)[0]), _small()[1]), r"\bX\b.*finite"),
    "X-empty": (lambda: (np.empty((0, 3)), np.empty(0)), r"non-empty X"),
    "X-no-features": (lambda: (np.empty((10, 0)), _small()[1]), r"non-empty X"),
    "X-1d": (lambda: (np.ones(10), _small()[1]), r"expected X to be 2-D"),
    "X-strings": (lambda: (np.array([["a", "b"]] * 2), np.array([0, 1])), r"expected X to hold real numbers"),
    "y-single-class": (lambda: (_small()[0], np.ones(10)), r"expected y to contain both"),
    "y-single-class-negative": (lambda: (_small()[0], -np.ones(10)), r"expected y to contain both"),
    "y-labels-0-2": (lambda: (_small()[0], np.array([0, 2] * 5)), r"expected y to hold labels.*\[0, 2\]"),
    "y-labels-multiclass": (lambda: (_small()[0], np.arange(10) % 3), r"expected y to hold labels"),
    "y-nan": (lambda: (_small()[0], np.array([0.0, 1.0] * 4 + [np.nan, 1.0])), r"expected y"),
    "y-2d": (lambda: (_small()[0], _small()[1][:, None]), r"expected y to be 1-D"),
    "y-none": (lambda: (_small()[0], None), r"expected y.*got None"),
    "X-y-length-mismatch": (lambda: (_small()[0], _small()[1][:9]), r"expected y to have 10 entries"),
}


@pytest.mark.parametrize("case", sorted(BAD_DATA))
def test_bad_data_raises_value_error_naming_it(case):
    make, pattern = BAD_DATA[case]
    X, y = make()
    with pytest.raises(ValueError, match=pattern):
        RankSVM().fit(X, y)


BAD_PARAMS = {
    "C-zero": ({"C": 0}, r"expected C to be a positive"),
    "C-negative": ({"C": -1.0}, r"expected C to be a positive"),
    "C-nan": ({"C": float("nan")}, r"expected C to be a positive"),
    "C-string": ({"C": "1"}, r"expected C to be a positive"),
    "tol-zero": ({"tol": 0.0}, r"expected tol to be a positive"),
    "tol-negative": ({"tol": -1e-3}, r"expected tol to be a positive"),
    "max_iter-zero": ({"max_iter": 0}, r"expected max_iter to be a positive integer"),
    "max_iter-float": ({"max_iter": 10.5}, r"expected max_iter to be a positive integer"),
    "max_iter-bool": ({"max_iter": True}, r"expected max_iter to be a positive integer"),
    "loss-unknown": ({"loss": "no-such-loss"}, r"unknown loss 'no-such-loss'"),
    "loss-not-a-loss": ({"loss": 3}, r"expected loss to be a loss name or a Loss instance"),
    "inference-unknown": ({"inference": "no-such-method"}, r"unknown inference method 'no-such-method'"),
    "inference-not-a-string": ({"inference": None}, r"expected inference to be a method name"),
    "inference-greedy-with-zero-one": (
        {"loss": "zero_one", "inference": "greedy"},
        r"expected inference='auto' for the labeling loss 'zero_one'",
    ),
}


@pytest.mark.parametrize("case", sorted(BAD_PARAMS))
def test_bad_parameters_raise_value_error_naming_them(case):
    params, pattern = BAD_PARAMS[case]
    X, y = _small()
    model = RankSVM(**params)
    with pytest.raises(ValueError, match=pattern):
        model.fit(X, y)
    assert not hasattr(model, "coef_")


@pytest.mark.filterwarnings("ignore:cutting plane stopped uncertified:sklearn.exceptions.ConvergenceWarning")
def test_unevenly_scaled_features_get_one_hint_line(caplog, digits):
    """Raw LETOR features made the cutting plane slow in silence (the user guide's snippet on raw X: 580 s)."""

    X, y, _, _ = digits
    wide = X.copy()
    wide[:, 10] *= 1e6
    with caplog.at_level(logging.WARNING, logger="rankopt"):
        RankSVM(max_iter=5).fit(wide, y)
    hints = [r.getMessage() for r in caplog.records if "magnitudes span" in r.getMessage()]
    assert len(hints) == 1 and "MaxAbsScaler" in hints[0] and "--scale max-abs" in hints[0]
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="rankopt"):
        RankSVM(max_iter=5).fit(X, y)
    assert not [r for r in caplog.records if "magnitudes span" in r.getMessage()]


@pytest.mark.parametrize("loss", ["zero_one", "ap"])
def test_a_timestamp_column_is_refused_alike_at_every_C(loss):
    """The working-set QP of such features solved at C = 1 and 1000 but not at 10 or 100: no C-dependent surprise."""
    rng = np.random.default_rng(0)
    X = np.column_stack([rng.standard_normal((200, 5)), 1.7e9 + rng.integers(0, 10**6, 200)])
    y = rng.random(200) < 0.3
    messages = set()
    for C in (0.01, 1.0, 10.0, 100.0, 1000.0):
        with pytest.raises(ValueError, match="expected feature columns of comparable magnitude") as raised:
            RankSVM(loss=loss, C=C).fit(X, y)
        messages.add(str(raised.value))
    assert len(messages) == 1 and "MaxAbsScaler" in messages.pop()
    # One column 10⁸-fold the others is still solved (at every C of the grid above, measured); scaled, the
    # timestamp fits.
    from sklearn.preprocessing import MaxAbsScaler

    assert RankSVM(loss=loss, C=10.0).fit(MaxAbsScaler().fit_transform(X), y).converged_


def test_warm_start_starts_from_the_previous_coef_and_certifies_the_same_optimum(digits):
    X, y, _, _ = digits
    cold = RankSVM(C=100.0).fit(X, y)
    warm = RankSVM(C=10.0, warm_start=True).fit(X, y)
    warm.set_params(C=100.0).fit(X, y)
    assert warm.converged_ and cold.converged_
    # both within C·tol of the optimum, so of each other
    assert abs(warm.history_[-1].primal_objective - cold.history_[-1].primal_objective) <= 2 * 100.0 * 1e-3
    assert warm.history_[0].primal_objective < cold.history_[0].primal_objective  # it did not start at w = 0
    # without warm_start a refit starts from 0 again
    again = RankSVM(C=10.0).fit(X, y)
    again.set_params(C=100.0).fit(X, y)
    assert again.history_[0].primal_objective == cold.history_[0].primal_objective


@pytest.mark.parametrize(
    "change, message",
    [
        (lambda m, X, y: m.fit(X[:, :10], y), "previous fit's 64 features to warm-start from it, got 10"),
        (lambda m, X, y: m.set_params(loss="auc").fit(X, y), "previous fit's loss APLoss\\(\\) to warm-start"),
        (lambda m, X, y: m.set_params(approx=50).fit(X, y), "approx=None with warm_start=True"),
        (lambda m, X, y: m.set_params(warm_start="yes").fit(X, y), "warm_start to be True or False"),
    ],
)
def test_warm_start_refuses_another_problem(digits, change, message):
    X, y, _, _ = digits
    model = RankSVM(max_iter=20, warm_start=True).fit(X, y)
    with pytest.raises(ValueError, match=message):
        change(model, X, y)


def _unsorted_csr(rng, n=60, d=6):
    """A CSR matrix with each row's indices reversed and one duplicate entry (SciPy sums it in place on need)."""
    dense = np.where(rng.random((n, d)) < 0.5, rng.normal(size=(n, d)), 0.0)
    dense[:, 0] = rng.normal(size=n)
    X = sp.csr_matrix(dense)
    rows = [(X.indices[a:b][::-1], X.data[a:b][::-1]) for a, b in zip(X.indptr[:-1], X.indptr[1:], strict=True)]
    indices = np.concatenate([r[0] for r in rows] + [[0]])
    data = np.concatenate([r[1] for r in rows] + [[0.25]])
    indptr = X.indptr.copy()
    indptr[-1] += 1  # the duplicate (row n-1, column 0)
    return sp.csr_matrix((data, indices, indptr), shape=X.shape)


@pytest.mark.parametrize("layout", ["csr-unsorted", "csc", "fortran", "float32-fortran"])
def test_fit_never_changes_the_callers_matrix(layout, rng):
    """Unsorted CSR indices were sorted (and duplicates summed) in the caller's X before."""
    X = _unsorted_csr(rng)
    if layout == "csc":
        X = sp.csc_matrix(X.toarray())
    elif layout.endswith("fortran"):
        X = np.asfortranarray(X.toarray(), dtype=np.float32 if layout.startswith("float32") else np.float64)
    first = X[:, [0]].toarray().ravel() if sp.issparse(X) else X[:, 0]
    y = (first + 0.5 * rng.normal(size=X.shape[0]) > 0.3).astype(int)
    qid = np.repeat([0, 1, 2], 20)
    parts = [X.data, X.indices, X.indptr] if sp.issparse(X) else [X]
    before = [part.copy() for part in parts]
    model = RankSVM(C=10.0).fit(X, y)
    RankSVM(C=10.0, loss="ndcg_graded").fit(X, y, qid=qid)
    model.score(X, y)
    for part, copy in zip(parts, before, strict=True):
        np.testing.assert_array_equal(part, copy)
    if layout == "csr-unsorted":
        assert not X.has_canonical_format
        canonical = X.copy()
        canonical.sum_duplicates()
        np.testing.assert_array_equal(RankSVM(C=10.0).fit(canonical, y).coef_, model.coef_)


def test_history_primal_never_rises_but_at_the_returned_point(rng):
    """As documented: records show the best point; a converged fit's last record is coef_, within C·tol of it."""
    for seed in range(12):
        local = np.random.default_rng(seed)
        X = local.normal(size=(80, 5))
        y = (X @ local.normal(size=5) + local.normal(size=80) > 0.5).astype(int)
        for loss in ("ap", "auc"):
            C, tol = 100.0, 1e-3
            model = RankSVM(loss=loss, C=C, tol=tol).fit(X, y)
            primal = np.array([record.primal_objective for record in model.history_])
            assert np.all(np.diff(primal[:-1]) <= 1e-12 * primal[0])
            assert model.converged_ and primal[-1] <= primal[:-1].min() + C * tol
            last = model.history_[-1]
            assert last.primal_objective - last.dual_objective == pytest.approx(model.duality_gap_)
