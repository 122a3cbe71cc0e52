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
active at the optimum, so :func:`fit_approx` adds them lazily, the violated
ones only (constraint generation, exact at convergence).

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
from rankopt.engine.cutting_plane import solve_cutting_plane
from rankopt.engine.problem import LinearConstraints, StructuredProblem
from rankopt.inference.base import descending_order
from rankopt.losses.ap import APLoss

logger = logging.getLogger(__name__)

#: On sparse X the hard-constraint rows are densified (the QP needs a dense A)
#: only up to this many entries (80 MB of float64); beyond it fitting raises.
MAX_DENSE_CONSTRAINT_ENTRIES = 10_000_000

#: A kept easy sample whose margin y·w·x falls below 1 − HARD_MARGIN_TOL is added to the QP.
HARD_MARGIN_TOL = 1e-7


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
    if not isinstance(loss, APLoss):
        raise ValueError(
            f"expected loss='ap' with approx (AP-SVM-APPX approximates the AP loss), got the loss "
            f"{loss.name!r} instead; use approx=None for other losses"
        )
    return float(approx)


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


def fit_approx(
    X,
    y,
    loss,
    feature_map,
    percent: float,
    *,
    C: float,
    tol: float,
    max_iter: int,
    inference: str,
    registry,
    callback=None,
) -> tuple[StructuredProblem, SolveResult, ApproxSplit]:
    """Run both stages; return stage 2's problem, its solution and stage 1's split.

    ``X``, ``y`` (bool) and ``percent`` arrive validated (:func:`check_approx`).  The hard
    constraints are written on the rows of ``X``, i.e. for the linear feature map ψ(x) = x
    that :class:`~rankopt.RankSVM` uses.

    The hard constraints are generated lazily: the working-set dual has one variable per
    constraint it holds and costs O((K + m)³) per solve, while few of the m constraints are
    active at the optimum.  Stage 2 is solved with the constraints found so far; the kept
    easy samples whose margin then falls below 1 − :data:`HARD_MARGIN_TOL` are added, the
    most violated first and at most :func:`_batch_size` per round, and it is solved again
    until none is violated.  The relaxation's optimum then satisfies every constraint, so it
    is the optimum of the full problem.  ``max_iter`` bounds each cutting-plane run; the
    returned result concatenates the runs' histories (so its inference time is the total).
    """
    problem, split = build_approx_problem(
        X, y, loss, feature_map, percent, C=C, tol=tol, max_iter=max_iter, inference=inference, registry=registry
    )
    constraints = hard_margin_constraints(X, y, split.hard)
    n_hard = split.n_hard_constraints
    in_qp = np.zeros(n_hard, dtype=bool)
    batch = _batch_size(X.shape[1])
    runs: list[SolveResult] = []
    while True:
        problem.linear_constraints = (
            LinearConstraints(constraints.A[in_qp], constraints.b[in_qp])
            if constraints is not None and in_qp.any()
            else None
        )
        runs.append(solve_cutting_plane(problem, C, tol=tol, max_iter=max_iter, callback=callback))
        w = runs[-1].w
        # y_i w·x_i = −(A w)_i, in float64 whatever the dtype of X.
        margins = -(constraints.A @ w) if constraints is not None else np.zeros(0)
        violated = np.flatnonzero((margins < 1.0 - HARD_MARGIN_TOL) & ~in_qp)
        logger.info(
            "APPX round %d: %d of %d hard constraints in the QP, %d more violated",
            len(runs),
            np.count_nonzero(in_qp),
            n_hard,
            violated.size,
        )
        if violated.size == 0:
            break
        in_qp[violated[np.argsort(margins[violated], kind="stable")[:batch]]] = True
    history = [record for run in runs for record in run.history]
    # The last run's w meets every hard constraint, so the dual bound of its relaxation
    # (only some of them in the QP) certifies it for the full problem.
    last = runs[-1]
    result = SolveResult(
        w, len(history), last.converged, history, last.stop_reason, last.primal_objective, last.duality_gap
    )
    return problem, result, split


def _batch_size(n_features: int) -> int:
    """Hard constraints added per round: about as many as can be active at once.

    Generically at most n_features constraints with positive multipliers meet at the
    optimum; adding that many per round keeps both the rounds and the QP small.
    """
    return max(10, min(256, n_features))


def build_approx_problem(
    X, y, loss, feature_map, percent: float, *, C: float, tol: float, max_iter: int, inference: str, registry
) -> tuple[StructuredProblem, ApproxSplit]:
    """Run stage 1; return stage 2's problem (no linear constraints yet) and the split."""
    binary = registry.get_model("binary").build_problem(
        X, y, registry.get_loss("zero_one"), feature_map, registry=registry
    )
    binary_result = solve_cutting_plane(binary, C, tol=tol, max_iter=max_iter)
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
        X[difficult], y[difficult], loss, feature_map, inference=inference, registry=registry
    )
    return problem, split
