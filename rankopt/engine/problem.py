"""The protocol between the engine and the models it drives.

A structural SVM problem (Joachims, Finley & Yu 2009, 1-slack form)::

    min_w,ξ  ½‖w‖² + C ξ
    s.t.     w·(Ψ(X, Y*) − Ψ(X, Ŷ)) ≥ Δ(Y*, Ŷ) − ξ   for all Ŷ,
             A w ≤ b                                  (optional)

is given to the engine by three things: the ground-truth joint feature
Ψ(X, Y*), an oracle returning the most violated output's Ψ(X, Ŷ) and Δ for
a given w, and optional linear constraints on w.
"""

from __future__ import annotations

import abc
from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp


@dataclass(frozen=True)
class Constraint:
    """The most violated output: its joint feature Ψ(X, Ŷ) and loss Δ(Y*, Ŷ)."""

    feature: np.ndarray
    loss: float


@dataclass(frozen=True)
class LinearConstraints:
    """A w ≤ b; A dense or sparse (kept sparse: bound constraints are one entry a row).

    The cutting plane starts from the smallest feasible w.
    """

    A: np.ndarray | sp.csr_matrix
    b: np.ndarray

    def __post_init__(self):
        if sp.issparse(self.A):
            A = sp.csr_matrix(self.A, dtype=np.float64)
            values = A.data
        else:
            A = np.atleast_2d(np.asarray(self.A, dtype=np.float64))
            values = A
        b = np.asarray(self.b, dtype=np.float64).ravel()
        if A.shape[0] != b.size:
            raise ValueError(f"expected one bound per row of A ({A.shape[0]}), got {b.size} instead")
        if not np.all(np.isfinite(values)) or not np.all(np.isfinite(b)):
            raise ValueError("expected finite linear constraints, got NaN or infinity instead")
        object.__setattr__(self, "A", A)
        object.__setattr__(self, "b", b)

    @property
    def n_constraints(self) -> int:
        return self.b.size

    @classmethod
    def nonpositive(cls, n_features: int, indices) -> LinearConstraints:
        """w[indices] ≤ 0 — HOB-SVM's w₂ ≤ 0."""
        indices = np.asarray(indices, dtype=np.intp)
        A = sp.csr_matrix((np.ones(indices.size), (np.arange(indices.size), indices)), shape=(indices.size, n_features))
        return cls(A, np.zeros(indices.size))


class StructuredProblem(abc.ABC):
    """What a model hands to the cutting-plane engine."""

    #: Dimension of w.
    n_features: int
    #: Linear constraints on w, or None.
    linear_constraints: LinearConstraints | None = None

    @abc.abstractmethod
    def ground_truth_feature(self) -> np.ndarray:
        """Ψ(X, Y*), shape (n_features,)."""

    @abc.abstractmethod
    def most_violated(self, w: np.ndarray) -> Constraint:
        """argmax_Ŷ w·Ψ(X, Ŷ) + Δ(Y*, Ŷ), as its Ψ and Δ."""
