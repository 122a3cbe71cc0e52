"""Warnings and errors rankopt raises.

:class:`ConvergenceWarning` is scikit-learn's own class, one class for users
who already filter scikit-learn's warning.  It is imported on first access
(PEP 562's module ``__getattr__``): importing scikit-learn takes about a
second, which the modules that only need :func:`brief` or
:class:`PluginLoadWarning` (the plugin registry, ``rankopt plugins``) do not
pay.
"""

from typing import TYPE_CHECKING

if TYPE_CHECKING:  # pragma: no cover
    from sklearn.exceptions import ConvergenceWarning

__all__ = [
    "ConstantRankerWarning",
    "ConvergenceWarning",
    "PluginContractError",
    "PluginLoadWarning",
    "SlowInferenceWarning",
    "brief",
]


def __getattr__(name: str):
    if name == "ConvergenceWarning":
        from sklearn.exceptions import ConvergenceWarning

        globals()[name] = ConvergenceWarning
        return ConvergenceWarning
    raise AttributeError(f"module 'rankopt.exceptions' has no attribute {name!r}")


class PluginContractError(TypeError):
    """A plugin contributes something that breaks its extension point's contract."""


class PluginLoadWarning(UserWarning):
    """An installed entry-point plugin failed to load or register and was skipped."""


class SlowInferenceWarning(UserWarning):
    """The inference method a fit runs is estimated at 100 times the compiled path's cost or more."""


class ConstantRankerWarning(UserWarning):
    """A fit certified an optimum that ranks every training document alike (w = 0, or every score tied)."""


def brief(text: str, limit: int = 300) -> str:
    """``text`` cut to ``limit`` characters: an error message must not carry whole arrays."""
    return text if len(text) <= limit else text[: limit - 1] + "…"
