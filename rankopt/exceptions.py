"""Warnings and errors rankopt raises."""
try:  # one class for users who already filter scikit-learn's warning
    from sklearn.exceptions import ConvergenceWarning
except ImportError:  # pragma: no cover - scikit-learn is a dependency
    class ConvergenceWarning(UserWarning):
        """An iterative solver stopped before reaching its tolerance."""

__all__ = ["ConvergenceWarning"]
