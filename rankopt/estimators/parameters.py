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

from rankopt._validation import check_positive_float, check_positive_int

__all__ = [
    "CCCP_PARAMETERS",
    "boolean",
    "check_parameters",
    "method_name",
    "optional",
    "plugin_registry",
    "positive_float",
    "positive_int",
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


def method_name(value, name: str) -> str:
    if not isinstance(value, str):
        raise ValueError(f"expected {name} to be a method name, got {value!r} instead")
    return value


#: The parameters of every estimator trained by CCCP (an outer loop around certified cutting planes).
CCCP_PARAMETERS: dict[str, Checker] = {
    "C": positive_float,
    "tol": positive_float,
    "max_iter": positive_int,
    "cccp_tol": positive_float,
    "cccp_max_iter": positive_int,
}


def check_parameters(estimator) -> dict:
    """Every parameter of ``estimator``'s ``_parameter_checks``, checked: name → the value to use."""
    constraints: Mapping[str, Checker] = type(estimator)._parameter_checks
    return {name: check(getattr(estimator, name), name) for name, check in constraints.items()}


def plugin_registry():
    """The registry estimators resolve loss, model, feature-map and method names in."""
    from rankopt.plugins import default_registry

    return default_registry()
