"""The estimators' parameters, checked in ``fit`` from a declarative table (as scikit-learn's
``_parameter_constraints``, under another name so that scikit-learn's own checks do not read it), and
the one way an estimator reaches the plugin registry.

Each estimator class declares ``_parameter_checks``: parameter name → a checker taking the value
and the name, returning the value to use or raising "expected …, got … instead".  ``fit`` calls
:func:`check_parameters` once, before any work; ``__init__`` only stores.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import numpy as np

from rankopt._validation import check_positive_float, check_positive_int, check_relevant_at
from rankopt.engine.solvers import get_solver
from rankopt.features.high_order import check_eta
from rankopt.losses.base import Loss

__all__ = [
    "CCCP_PARAMETERS",
    "boolean",
    "check_parameters",
    "eta",
    "fraction",
    "initial_point",
    "loss_parameters",
    "loss_spec",
    "metric_spec",
    "method_name",
    "n_jobs",
    "optional",
    "percentage",
    "plugin_name",
    "plugin_registry",
    "positive_float",
    "positive_floats",
    "positive_int",
    "random_state",
    "relevance_threshold",
    "scoring_spec",
    "solver_name",
    "splitter",
    "verbosity",
]

Checker = Callable[[object, str], object]

positive_float: Checker = check_positive_float
positive_int: Checker = check_positive_int


def optional(checker: Checker) -> Checker:
    """``checker``, or None passed through."""

    def check(value, name):
        return None if value is None else checker(value, name)

    return check


def boolean(value, name: str) -> bool:
    if not isinstance(value, (bool, np.bool_)):
        raise ValueError(f"expected {name} to be True or False, got {value!r} instead")
    return bool(value)


def plugin_name(value, name: str) -> str:
    """A plugin's name (looked up in the registry in ``fit``)."""
    if not isinstance(value, str) or not value:
        raise ValueError(f"expected {name} to be a plugin name, got {value!r} instead")
    return value


def method_name(value, name: str) -> str:
    if not isinstance(value, str):
        raise ValueError(f"expected {name} to be a method name, got {value!r} instead")
    return value


def loss_spec(value, name: str):
    """A loss name or a Loss instance (resolved in ``fit``, where the registry is)."""
    if not isinstance(value, (str, Loss)):
        raise ValueError(f"expected {name} to be a loss name or a Loss instance, got {value!r} instead")
    return value


def loss_parameters(value, name: str):
    """A loss's keyword arguments as a dict (None: the loss's defaults), as scikit-learn's ``metric_params``."""
    if value is None:
        return {}
    if not isinstance(value, dict) or not all(isinstance(key, str) for key in value):
        raise ValueError(f"expected {name} to be a dict of the loss's parameters or None, got {value!r} instead")
    return value


def relevance_threshold(value, name: str) -> float:
    return check_relevant_at(value, name)


def verbosity(value, name: str):
    """True/False, or a level ≥ 0 (any level above 0 shows the same progress)."""
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    if isinstance(value, (int, np.integer)) and value >= 0:
        return int(value)
    raise ValueError(f"expected {name} to be True, False or an integer >= 0, got {value!r} instead")


def percentage(value, name: str) -> float:
    """A percentage in (0, 100]."""
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise ValueError(f"expected {name} to be a percentage in (0, 100], got {value!r} instead")
    if not (np.isfinite(value) and 0 < float(value) <= 100):
        raise ValueError(f"expected {name} to be a percentage in (0, 100], got {value!r} instead")
    return float(value)


def metric_spec(value, name: str):
    """None, a metric name, a callable ``metric(y_true, scores, qid)``, or a list of them (checked by name in
    :mod:`rankopt.estimators.evaluation` when used)."""
    items = value if isinstance(value, (list, tuple)) else [value]
    if value is None or (items and all(isinstance(v, str) or callable(v) for v in items)):
        return value
    raise ValueError(f"expected {name} to be a metric name, a callable, a list of them or None, got {value!r} instead")


def solver_name(value, name: str) -> str:
    """A solver of the engine's table (:func:`rankopt.engine.solvers.get_solver` lists them)."""
    get_solver(value)
    return value


def eta(value, name: str) -> float:
    return check_eta(value)


def random_state(value, name: str):
    """None, an int ≥ 0, or a NumPy RandomState / Generator (scikit-learn's convention)."""
    if value is None or isinstance(value, (np.random.RandomState, np.random.Generator)):
        return value
    if isinstance(value, (int, np.integer)) and not isinstance(value, bool) and value >= 0:
        return value
    raise ValueError(f"expected {name} to be None, an integer >= 0 or a NumPy random generator, got {value!r} instead")


def n_jobs(value, name: str):
    """None, or an integer other than 0 (joblib's convention: −1 for every core)."""
    if value is None or (isinstance(value, (int, np.integer)) and not isinstance(value, bool) and value != 0):
        return value
    raise ValueError(f"expected {name} to be None or a non-zero integer, got {value!r} instead")


def fraction(value, name: str) -> float:
    """A fraction in [0, 1)."""
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)) or not 0 <= value < 1:
        raise ValueError(f"expected {name} to be a fraction in [0, 1), got {value!r} instead")
    return float(value)


def scoring_spec(value, name: str):
    """None, a metric name or a callable: one metric (:mod:`rankopt.estimators.evaluation`)."""
    if value is None or isinstance(value, str) or callable(value):
        return value
    raise ValueError(f"expected {name} to be a metric name or a callable, got {value!r} instead")


def splitter(value, name: str):
    """An int ≥ 2 (folds) or a scikit-learn cross-validation splitter (``split`` and ``get_n_splits``)."""
    if isinstance(value, (int, np.integer)) and not isinstance(value, bool):
        if value >= 2:
            return int(value)
    elif callable(getattr(value, "split", None)) and callable(getattr(value, "get_n_splits", None)):
        return value
    raise ValueError(f"expected {name} to be an int >= 2 or a cross-validation splitter, got {value!r} instead")


def positive_floats(value, name: str) -> np.ndarray:
    """A non-empty list of positive finite numbers, increasing and distinct."""
    try:
        values = np.asarray(value, dtype=np.float64)
    except (TypeError, ValueError):
        values = None
    if values is None or values.ndim != 1 or values.size == 0 or not np.all(np.isfinite(values) & (values > 0)):
        raise ValueError(f"expected {name} to be a non-empty list of positive finite numbers, got {value!r} instead")
    return np.unique(values)


def initial_point(value, name: str):
    """'hob', 'zero' or a finite 1-D array (its length is checked against the features in ``fit``)."""
    if isinstance(value, str):
        if value in ("hob", "zero"):
            return value
    else:
        try:
            point = np.asarray(value, dtype=np.float64)
        except (TypeError, ValueError):
            point = None
        if point is not None and point.ndim == 1 and np.all(np.isfinite(point)):
            return point
    raise ValueError(f"expected {name} to be 'hob', 'zero' or an array, got {value!r} instead")


#: The parameters of every estimator trained by CCCP (an outer loop around certified cutting planes).
CCCP_PARAMETERS: dict[str, Checker] = {
    "C": positive_float,
    "tol": positive_float,
    "max_iter": positive_int,
    "cccp_tol": positive_float,
    "cccp_max_iter": positive_int,
    "inference": method_name,
    "verbose": verbosity,
}


def check_parameters(estimator) -> dict:
    """Every parameter of ``estimator``'s ``_parameter_checks``, checked: name → the value to use."""
    constraints: Mapping[str, Checker] = type(estimator)._parameter_checks
    return {name: check(getattr(estimator, name), name) for name, check in constraints.items()}


def plugin_registry():
    """The registry estimators resolve loss, model, feature-map and method names in."""
    from rankopt.plugins import default_registry

    return default_registry()
