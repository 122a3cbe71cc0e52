"""Loss contracts.

Two kinds of loss plug into rankopt:

* :class:`RankLoss` — a loss Δ(R*, R) of a proper ranking R against the
  ground-truth partial order R* (all positives above all negatives).  Rank
  losses state their maths through the conditions of ``qs-rank-losses`` §4.1:

  - **C1** :meth:`RankLoss.value` computes Δ from the ±-pattern of R alone;
  - **C2** :meth:`RankLoss.delta` gives δ_j(i) with Δ = Σ_x∈N δ_{ind⁻(x)}(rank(x));
  - **C4** :meth:`RankLoss.delta_diff` gives δ_j(i+1) − δ_j(i) in O(1).

  The inference kernels only ever call ``delta_diff`` (or its compiled form,
  :meth:`RankLoss.compiled_form`); ``value`` yields the reported loss.

* :class:`LabelingLoss` — a loss Δ(Y*, Y) of a labeling Y ∈ {0,1}ⁿ that
  decomposes into one weighted term per mislabelled sample (the weighted 0-1
  loss of ``high-order-ranking`` eq. 7).

Indices follow the papers: negatives are numbered j = 1…|N| in the order of
the ranking (j = ind⁻), interleaving ranks i = 1…|P|+1 (i − 1 positives
above the negative).  All methods accept NumPy integer arrays for ``j`` and
``i`` and broadcast them.
"""
from __future__ import annotations

import abc
import enum
from dataclasses import dataclass, field
from typing import ClassVar

import numpy as np


class OutputKind(str, enum.Enum):
    """The structured output a loss is defined on; it selects the model."""

    RANKING = "ranking"
    LABELING = "labeling"


class KernelCode(enum.IntEnum):
    """Loss families the compiled kernels evaluate without calling Python.

    Mirrored by the ``LOSS_*`` constants of ``rankopt/inference/_loss.pxd``;
    ``tests/inference/test_kernels.py`` checks the two agree.
    """

    AP = 1
    AUC = 2
    POSITION_DISCOUNT = 3


@dataclass(frozen=True)
class CompiledForm:
    """How a compiled kernel evaluates δ_j(i+1) − δ_j(i) for one problem size.

    ``table`` is used by :attr:`KernelCode.POSITION_DISCOUNT` only: the
    discount D(1…|P|+|N|), already divided by the normaliser Σ_{i≤|P|} D(i).

    The table is copied on construction into a read-only float64 array and
    checked for NaN and infinity there, once (``table_is_finite``): a loss
    hands the same form to every inference call of a training run, and
    reading all |P| + |N| entries again at each call evicts the scores from
    the cache (about 6 % of a qs call at 10⁶ negatives).
    """

    code: KernelCode
    table: np.ndarray | None = None
    #: Whether ``table`` is present and every entry of it finite.
    table_is_finite: bool = field(init=False, repr=False, compare=False)

    def __post_init__(self):
        table = self.table
        if table is not None:
            table = np.array(table, dtype=np.float64, order="C")  # our copy: nobody else can write it
            table.flags.writeable = False
            object.__setattr__(self, "table", table)
        object.__setattr__(self, "table_is_finite", table is not None and bool(np.isfinite(table).all()))


class Loss(abc.ABC):
    """Common base of every loss: a registered ``name`` and an output kind."""

    #: The name the loss is registered and looked up under.
    name: ClassVar[str] = ""
    #: The structured output the loss is defined on.
    output_kind: ClassVar[OutputKind]

    def __repr__(self) -> str:
        params = ", ".join(f"{k}={v!r}" for k, v in self.get_params().items())
        return f"{type(self).__name__}({params})"

    def __eq__(self, other: object) -> bool:
        return type(self) is type(other) and self.get_params() == other.get_params()

    def __hash__(self) -> int:
        return hash((type(self), tuple(sorted(self.get_params().items()))))

    def get_params(self) -> dict:
        """The constructor parameters of this loss (none by default)."""
        return {}


class RankLoss(Loss):
    """A loss over proper rankings, decomposable over negatives (C1, C2).

    Subclasses implement :meth:`value` and :meth:`delta`, and should override
    :meth:`delta_diff` with an O(1) formula (C4); the default differences two
    calls of :meth:`delta`.  Losses whose derivative a compiled kernel knows
    return it from :meth:`compiled_form`; the others run on a slower path
    that calls :meth:`delta_diff` from Python.

    Contract (checked by :func:`rankopt.testing.check_loss`): Δ of the
    ground-truth pattern (all positives first) is 0, Δ ≥ 0, and
    Σ_j δ_j(rank_j) equals :meth:`value` on every ranking.
    """

    output_kind = OutputKind.RANKING
    #: True for a loss defined on integer grades (``rankopt.losses.PairwiseLoss``):
    #: multi-query inference hands it the grades instead of 0/1 relevance.
    graded: ClassVar[bool] = False

    @abc.abstractmethod
    def value(self, pattern: np.ndarray) -> float:
        """Δ(R*, R) from the ±-pattern of R (C1).

        Parameters
        ----------
        pattern : ndarray of bool, shape (|P| + |N|,)
            ``pattern[k]`` is True when the sample at position k + 1 of the
            ranking is positive.
        """

    def value_at_positions(self, positions: np.ndarray, n_neg: int) -> float:
        """:meth:`value` of the ranking whose positives stand at ``positions``.

        Parameters
        ----------
        positions : ndarray of int, shape (|P|,)
            The positives' 1-based positions, increasing, among the
            |P| + ``n_neg`` places of the ranking; negatives fill the rest.
        n_neg : int
            |N|.

        Inference knows the positions, so it calls this.  The default builds
        the ±-pattern, O(|P| + |N|), and calls :meth:`value`.  A loss that
        computes Δ from the positions anyway — every built-in one — overrides
        it and defines :meth:`value` through it, and inference then never
        builds the pattern (about 0.3 ms of a qs call at |N| = 10⁶).  The two
        must agree; :func:`rankopt.testing.check_loss` checks that they do.
        """
        positions = np.asarray(positions)
        pattern = np.zeros(positions.size + n_neg, dtype=bool)
        pattern[positions - 1] = True
        return self.value(pattern)

    @abc.abstractmethod
    def delta(self, j, i, n_pos: int, n_neg: int) -> np.ndarray:
        """δ_j(i): the loss contributed by the j-th negative at interleaving rank i (C2)."""

    def delta_diff(self, j, i, n_pos: int, n_neg: int) -> np.ndarray:
        """δ_j(i + 1) − δ_j(i) for 1 ≤ i ≤ |P| (C4)."""
        i = np.asarray(i)
        return self.delta(j, i + 1, n_pos, n_neg) - self.delta(j, i, n_pos, n_neg)

    def compiled_form(self, n_pos: int, n_neg: int) -> CompiledForm | None:
        """The kernel-side description of :meth:`delta_diff`, or None."""
        return None


class LabelingLoss(Loss):
    """A loss over labelings Y ∈ {0,1}ⁿ: Σ_i weight_i · [y_i ≠ y*_i]."""

    output_kind = OutputKind.LABELING

    @abc.abstractmethod
    def sample_weights(self, y_true: np.ndarray) -> np.ndarray:
        """The cost of mislabelling each sample, shape (n,), given y_true ∈ {0,1}ⁿ."""

    def value(self, y_true: np.ndarray, y_pred: np.ndarray) -> float:
        """Δ(Y*, Y) for labelings in {0, 1}."""
        y_true = np.asarray(y_true, dtype=bool)
        y_pred = np.asarray(y_pred, dtype=bool)
        if y_true.shape != y_pred.shape:
            raise ValueError(
                f"expected y_pred of the same shape as y_true {y_true.shape}, got {y_pred.shape} instead"
            )
        return float(np.dot(self.sample_weights(y_true), y_true != y_pred))


def pattern_counts(pattern: np.ndarray) -> tuple[np.ndarray, int]:
    """Positions (1-based) of the positives in a ±-pattern, and |N|."""
    pattern = np.asarray(pattern, dtype=bool)
    if pattern.ndim != 1:
        raise ValueError(f"expected a 1-D ±-pattern, got shape {pattern.shape} instead")
    positions = np.flatnonzero(pattern) + 1
    return positions, pattern.size - positions.size
