"""Fixtures shared by the estimator tests."""

import pytest
from sklearn.datasets import load_digits


@pytest.fixture(scope="module")
def digits():
    """Digit 3 against the rest, X scaled to [0, 1]: 300 training rows, then 200 held-out rows
    (validation or test), of data that ships with scikit-learn."""
    X, target = load_digits(return_X_y=True)
    X = X / 16.0
    y = (target == 3).astype(int)
    return X[:300], y[:300], X[300:500], y[300:500]
