"""Estimator parameters: keyword-only constructors and one declarative table of checks per estimator."""

from __future__ import annotations

import inspect

import numpy as np
import pytest

from rankopt import HOAPSVM, HOBSVM, LatentAPSVM, LatentSSVM, LatentSVM, RankSVM, RankSVMCV

ESTIMATORS = [RankSVM, RankSVMCV, HOBSVM, HOAPSVM, LatentAPSVM, LatentSSVM, LatentSVM]


@pytest.mark.parametrize("cls", ESTIMATORS)
def test_constructors_take_keywords_only(cls):
    parameters = list(inspect.signature(cls.__init__).parameters.values())[1:]
    if cls is RankSVMCV:  # Cs first and positional, as scikit-learn's LogisticRegressionCV(Cs=10, *, ...)
        assert parameters[0].name == "Cs"
        parameters = parameters[1:]
    assert parameters and all(p.kind is inspect.Parameter.KEYWORD_ONLY for p in parameters)
    if cls is not RankSVMCV:
        with pytest.raises(TypeError):
            cls(1.0)


@pytest.mark.parametrize("cls", [c for c in ESTIMATORS if hasattr(c, "_parameter_checks")])
def test_the_table_names_constructor_parameters_only(cls):
    names = set(inspect.signature(cls.__init__).parameters) - {"self"}
    assert set(cls._parameter_checks) <= names


@pytest.mark.parametrize(
    ("params", "message"),
    [
        (dict(C=0), "expected C to be"),
        (dict(tol=-1.0), "expected tol to be"),
        (dict(max_iter=0), "expected max_iter to be"),
        (dict(early_stopping_patience=0), "expected early_stopping_patience to be"),
        (dict(inference=3), "expected inference to be a method name, got 3 instead"),
        (dict(warm_start="yes"), "expected warm_start to be True or False, got 'yes' instead"),
    ],
)
def test_rank_svm_checks_its_table_in_fit(params, message):
    X, y = np.random.default_rng(0).standard_normal((10, 2)), np.arange(10) % 2
    model = RankSVM(**params)  # __init__ only stores
    with pytest.raises(ValueError, match=message):
        model.fit(X, y)


ESTIMATORS = ["RankSVM", "RankSVMCV", "HOBSVM", "HOAPSVM", "LatentAPSVM", "LatentSSVM", "LatentSVM"]


@pytest.mark.parametrize("name", ESTIMATORS)
def test_every_parameter_is_in_the_declarative_table(name):
    """Issue 39: each public estimator checks every parameter from one table, in fit, before any work."""
    import rankopt

    cls = getattr(rankopt, name)
    assert set(cls._parameter_checks) == set(cls().get_params())


#: A value each parameter refuses.
BAD = {
    "loss": 3,
    "loss_params": [("k", 3)],
    "C": -1.0,
    "tol": 0.0,
    "max_iter": 0,
    "inference": 5,
    "verbose": "loud",
    "approx": 150,
    "relevant_at": -1,
    "early_stopping_patience": 0,
    "eval_metric": 3.5,
    "warm_start": "yes",
    "solver": "newton",
    "Cs": [],
    "cv": 1,
    "scoring": 2,
    "n_jobs": 0,
    "eta": -1.0,
    "init": "random",
    "cccp_tol": -1.0,
    "cccp_max_iter": 0,
    "n_init": 0,
    "random_state": "seed",
    "J": -2.0,
    "robust": 1.0,
    "fit_intercept": "no",
    "model": 3,
    "feature_map": "",
}


@pytest.mark.parametrize("name", ESTIMATORS)
def test_a_bad_value_of_any_parameter_is_refused_by_its_checker(name):
    import rankopt
    from rankopt.estimators.parameters import check_parameters

    cls = getattr(rankopt, name)
    for parameter in cls().get_params():
        with pytest.raises(ValueError, match=f"expected {parameter}"):
            check_parameters(cls(**{parameter: BAD[parameter]}))
