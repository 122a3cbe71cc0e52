"""AP-SVM-APPX: the AP loss over the difficult samples, hard margins on the easy ones.

Mohapatra et al. (2014) §3.3 (with the correction listed in docs/maths.md).  Two stages:

1. Train a binary SVM w₀ (the class-weighted ``zero_one`` SVM, with the same
   C, tol and max_iter as the AP-SVM).  A sample is *easy* when
   y_i w₀·x_i ≥ 1, y ∈ {−1, +1}: classified right, with margin.
2. Keep the top k % of the easy samples, by that margin (highest first), as
   hard constraints y_i w·x_i ≥ 1 — rows −y_i x_i of A w ≤ b with b = −1 —
   and move the other easy samples into the *difficult* set.  Solve
   AP-SVM over the difficult samples only, subject to the hard constraints:

       min ½‖w‖² + C ξ   s.t.  w·(Ψ(X_d, R*_d) − Ψ(X_d, R_d)) ≥ Δ(R*_d, R_d) − ξ  ∀ R_d,
                             y_i w·x_i ≥ 1  for the kept easy samples.

w₀ satisfies every hard constraint, so the problem is always feasible.  Loss-
augmented inference only sees the difficult samples, which is where the
speed-up comes from.  Each hard constraint in the working-set dual
(:class:`~rankopt.engine.WorkingSetQP`) is one more dual variable, and few are
active at the optimum, so the engine adds them lazily, the violated ones only
(constraint generation, exact at convergence: :func:`rankopt.engine.appx.solve_appx`).

``approx=k`` keeps ⌊k · |easy| / 100⌋ samples; samples with equal margins are
taken in index order.  The difficult set must keep at least one positive
and one negative sample (AP needs both); when it does not, fitting raises a
ValueError that says so and suggests a smaller k — there is no fallback.
"""

from __future__ import annotations

import logging
import math
import numbers
from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

from rankopt.engine.certificate import SolveResult
from rankopt.engine.problem import LinearConstraints, StructuredProblem
from rankopt.inference.base import descending_order
from rankopt.inference.structure_table import reads_grades
from rankopt.losses.base import KernelCode, RankLoss

__all__ = ["ApproxProblem", "ApproxSplit", "check_approx", "hard_margin_constraints", "select_hard"]

logger = logging.getLogger(__name__)

#: On sparse X the hard-constraint rows are densified (the QP needs a dense A)
#: only up to this many entries (80 MB of float64); beyond it fitting raises.
MAX_DENSE_CONSTRAINT_ENTRIES = 10_000_000


def check_approx(approx, loss) -> float | None:
    """The validated percentage k in (0, 100], or None when APPX is off."""
    if approx is None:
        return None
    if (
        isinstance(approx, bool)
        or not isinstance(approx, numbers.Real)
        or not math.isfinite(approx)
        or not 0 < float(approx) <= 100
    ):
        raise ValueError(
            f"expected approx to be None or a percentage in (0, 100] of the easy samples to keep "
            f"as hard constraints, got {approx!r} instead"
        )
    if not _declares_ap(loss):
        raise ValueError(
            f"expected loss='ap' with approx (AP-SVM-APPX approximates the AP loss), got the loss "
            f"{loss.name!r} instead; use approx=None for other losses"
        )
    return float(approx)


def _declares_ap(loss) -> bool:
    """Whether ``loss`` declares AP's compiled form (what APPX approximates), whatever its class: a subclass of
    the AP loss may change Δ, and a plugin may compute AP under another name."""
    if not isinstance(loss, RankLoss) or reads_grades(loss):
        return False
    form = loss.compiled_form(2, 2)
    return form is not None and KernelCode(form.code) is KernelCode.AP


@dataclass(frozen=True)
class ApproxSplit:
    """How stage 1 divided the training samples.

    Attributes
    ----------
    w0 : ndarray
        The binary SVM's weights.
    binary_result : SolveResult
        Stage 1's cutting-plane run.
    easy : ndarray of bool
        Samples with y_i w₀·x_i ≥ 1.
    hard : ndarray of bool
        The easy samples kept as hard constraints (a subset of ``easy``).
    """

    w0: np.ndarray
    binary_result: SolveResult
    easy: np.ndarray
    hard: np.ndarray

    @property
    def difficult(self) -> np.ndarray:
        """Samples the AP loss is optimised over: all but the hard-constraint ones."""
        return ~self.hard

    @property
    def n_easy(self) -> int:
        return int(np.count_nonzero(self.easy))

    @property
    def n_hard_constraints(self) -> int:
        return int(np.count_nonzero(self.hard))


def select_hard(margins: np.ndarray, percent: float) -> tuple[np.ndarray, np.ndarray]:
    """The easy mask (margin ≥ 1) and the top ``percent`` % of it by margin."""
    easy = margins >= 1.0
    n_easy = int(np.count_nonzero(easy))
    # The small slack keeps exact products such as 50 % of 10 from rounding down.
    n_keep = min(n_easy, math.floor(percent * n_easy / 100.0 + 1e-9))
    easy_idx = np.flatnonzero(easy)
    keep = easy_idx[descending_order(margins[easy_idx])[:n_keep]]
    hard = np.zeros(margins.size, dtype=bool)
    hard[keep] = True
    return easy, hard


def hard_margin_constraints(X, y: np.ndarray, hard: np.ndarray) -> LinearConstraints | None:
    """y_i w·x_i ≥ 1 for the ``hard`` samples, as A w ≤ b with rows −y_i x_i and b = −1."""
    n_hard = int(np.count_nonzero(hard))
    if n_hard == 0:
        return None
    rows = X[hard]
    if sp.issparse(rows):
        if n_hard * X.shape[1] > MAX_DENSE_CONSTRAINT_ENTRIES:
            raise ValueError(
                f"expected at most {MAX_DENSE_CONSTRAINT_ENTRIES} entries in the dense matrix of hard "
                f"constraints (the working-set QP needs A dense), got {n_hard} constraints × "
                f"{X.shape[1]} features instead; lower approx"
            )
        rows = rows.toarray()
    signs = np.where(y[hard], 1.0, -1.0)
    A = -signs[:, None] * np.asarray(rows, dtype=np.float64)
    return LinearConstraints(A, np.full(n_hard, -1.0))


class ApproxProblem:
    """APPX's two problems (:class:`rankopt.engine.appx.TwoStageProblem`), for
    :func:`rankopt.engine.appx.solve_appx`: the class-weighted binary SVM of stage 1, and, from its
    solution, stage 2's AP problem over the difficult samples with the kept easy samples' hard margins.

    ``X``, ``y`` (bool) and ``percent`` arrive validated (:func:`check_approx`).  The hard constraints
    are written on the rows of ``X``, i.e. for the linear feature map ψ(x) = x that
    :class:`~rankopt.RankSVM` uses.
    """

    def __init__(self, X, y, loss, feature_map, percent: float, *, inference: str, registry):
        self.X, self.y, self.loss, self.feature_map, self.percent = X, y, loss, feature_map, percent
        self.inference, self.registry = inference, registry
        self.stage_one = registry.get_model("binary").build_problem(
            X, y, registry.get_loss("zero_one"), feature_map, registry=registry
        )

    def stage_two(self, binary_result: SolveResult):
        """(stage 2's problem, its hard constraints, the split) from stage 1's solution."""
        problem, split = self._difficult_problem(binary_result)
        return problem, hard_margin_constraints(self.X, self.y, split.hard), split

    def _difficult_problem(self, binary_result: SolveResult) -> tuple[StructuredProblem, ApproxSplit]:
        X, y, percent, feature_map, registry = self.X, self.y, self.percent, self.feature_map, self.registry
        w0 = binary_result.w
        margins = np.where(y, 1.0, -1.0) * feature_map.scores(X, w0).astype(np.float64)
        easy, hard = select_hard(margins, percent)
        split = ApproxSplit(w0, binary_result, easy, hard)
        difficult = split.difficult
        n_pos, n_neg = int(np.count_nonzero(y[difficult])), int(np.count_nonzero(~y[difficult]))
        if n_pos == 0 or n_neg == 0:
            missing = "positive" if n_pos == 0 else "negative"
            raise ValueError(
                f"expected the difficult set of AP-SVM-APPX to hold at least one positive and one "
                f"negative sample, got {n_pos} positive and {n_neg} negative instead: the binary SVM "
                f"gives every {missing} sample a margin of at least 1 and approx={percent:g} keeps "
                f"{split.n_hard_constraints} of the {split.n_easy} easy samples as hard constraints; "
                f"lower approx so that some easy {missing}s stay in the difficult set"
            )
        logger.info(
            "APPX: binary SVM in %d iterations; %d of %d samples easy, %d kept as hard constraints, "
            "AP over %d difficult samples (%d positive)",
            binary_result.n_iter,
            split.n_easy,
            y.size,
            split.n_hard_constraints,
            n_pos + n_neg,
            n_pos,
        )
        problem = registry.get_model("ranking").build_problem(
            X[difficult], y[difficult], self.loss, feature_map, inference=self.inference, registry=registry
        )
        return problem, split
