"""Warnings and errors rankopt raises."""
try:  # one class for users who already filter scikit-learn's warning
    from sklearn.exceptions import ConvergenceWarning
except ImportError:  # pragma: no cover - scikit-learn is a dependency
    class ConvergenceWarning(UserWarning):
        """An iterative solver stopped before reaching its tolerance."""

__all__ = ["ConvergenceWarning", "PluginLoadWarning", "brief"]


class PluginLoadWarning(UserWarning):
    """An installed entry-point plugin failed to load or register and was skipped."""


def brief(text: str, limit: int = 300) -> str:
    """``text`` cut to ``limit`` characters: an error message must not carry whole arrays."""
    return text if len(text) <= limit else text[: limit - 1] + "…"
