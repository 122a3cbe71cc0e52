"""Random tiny fits over every loss, each checked against an independent QP (the stall property test).

The reference solves the n-slack form of the same problem — min ½‖w‖² + C Σ_q ξ_q with one slack per
query, ξ_q ≥ Δ_q(Ŷ) − w·g_q(Ŷ) for every output seen — by Kelley's plain cutting plane with the QP
handed to Clarabel whole each time: no line search, no plane cache, no pruning, no working-set tricks.
It stops when the exact primal (one oracle call) is within 1e-9 relative of the QP's value, a lower
bound on the optimum.  The n-slack and 1-slack problems share their optimum (Joachims, Finley & Yu 2009).
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass

import clarabel
import numpy as np
import scipy.sparse as sp

import rankopt
from rankopt.engine.certificate import ROUNDING_LEVEL, objective_rounding

#: (loss name, parameters) drawn from: every registered loss, built-in and the example plugins'.
LOSSES = [
    ("ap", {}),
    ("ndcg", {}),
    ("auc", {}),
    ("precision_at_k", {"k": 1}),
    ("precision_at_k", {"k": 2}),
    ("ndcg_graded", {"k": 1, "gains": "linear"}),
    ("ndcg_graded", {"k": 2}),
    ("ndcg_graded", {}),
    ("pairwise", {}),
    ("rbp", {}),
    ("rbp_graded", {}),
    ("dcg_zipf", {}),
    ("zero_one", {}),
]


def _clarabel_n_slack(parts: list[list[tuple[np.ndarray, float]]], C: float, d: int) -> tuple[np.ndarray, float]:
    """min ½‖w‖² + C Σ_b ξ_b  s.t.  ξ_b ≥ Δ − w·g for each (g, Δ) in parts[b], ξ ≥ 0: (w, optimal value)."""
    n_blocks = len(parts)
    n = d + n_blocks
    P = sp.diags(np.r_[np.ones(d), np.zeros(n_blocks)]).tocsc()
    q = np.r_[np.zeros(d), np.full(n_blocks, C)]
    rows, rhs = [], []
    for b, block in enumerate(parts):
        slack = np.zeros(n)
        slack[d + b] = -1.0
        rows.append(slack)
        rhs.append(0.0)
        for g, loss in block:
            rows.append(np.r_[-g, np.zeros(n_blocks)] + slack)
            rhs.append(-loss)
    A = sp.csc_matrix(np.array(rows))
    settings = clarabel.DefaultSettings()
    settings.verbose = False
    settings.tol_gap_abs = settings.tol_gap_rel = settings.tol_feas = 1e-11
    solver = clarabel.DefaultSolver(P, q, A, np.array(rhs), [clarabel.NonnegativeConeT(len(rhs))], settings)
    solution = solver.solve()
    x = np.array(solution.x)
    return x[:d], float(solution.obj_val)


def _parts(problem, w: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The most violated output's plane and loss at w, by query: (n_blocks, d), (n_blocks,)."""
    constraint = problem.most_violated(w)
    psi_star = np.asarray(problem.ground_truth_feature(), dtype=np.float64)
    if constraint.blocks is None or constraint.blocks.planes() is None:
        return (psi_star - np.asarray(constraint.feature, dtype=np.float64))[None], np.array([float(constraint.loss)])
    return np.asarray(constraint.blocks.planes(), dtype=np.float64), constraint.blocks.losses


def exact_primal(problem, w: np.ndarray, C: float) -> float:
    """½‖w‖² + C ξ(w), ξ from one exact inference call (per query: the maximum includes Y*, so ≥ 0)."""
    planes, losses = _parts(problem, w)
    return 0.5 * float(w @ w) + C * float(np.sum(np.maximum(0.0, losses - planes @ w)))


def reference_optimum(problem, C: float, d: int, max_rounds: int = 300) -> tuple[float, float]:
    """(lower, upper) bounds on the optimum from the independent n-slack solve, 1e-9 apart (relative)."""
    w = np.zeros(d)
    planes, losses = _parts(problem, w)
    parts: list[list[tuple[np.ndarray, float]]] = [[] for _ in range(losses.size)]
    upper, lower = np.inf, 0.0
    for _ in range(max_rounds):
        planes, losses = _parts(problem, w)
        upper = min(upper, 0.5 * float(w @ w) + C * float(np.sum(np.maximum(0.0, losses - planes @ w))))
        for b in range(losses.size):
            if not any(np.array_equal(g, planes[b]) and loss == losses[b] for g, loss in parts[b]):
                parts[b].append((planes[b].copy(), float(losses[b])))
        w, value = _clarabel_n_slack(parts, C, d)
        lower = max(lower, value - 1e-9 * max(1.0, abs(value)))  # Clarabel's own tolerance
        if upper - lower <= 1e-8 * max(1.0, upper):
            break
    return lower, upper


@dataclass
class FitOutcome:
    loss: str
    stop_reason: str
    converged: bool
    excess: float  # the fit's exact primal minus the reference optimum's lower bound
    optimum: float  # the reference's lower bound
    target: float  # C·tol
    reported_gap: float
    rounding: float
    warned: list[str]

    @property
    def far(self) -> bool:
        """Further from the optimum than C·tol (and than the reference's own accuracy)."""
        return self.excess > self.target + self.accuracy

    @property
    def accuracy(self) -> float:
        """The reference's accuracy: its bounds are 1e-8 apart, relative to the objective."""
        return 1e-7 * max(1.0, abs(self.optimum))

    def truthful(self) -> bool:
        """Converged only within C·tol; the reported gap bounds the excess; "stalled" only at rounding."""
        if self.excess > self.reported_gap + self.accuracy:
            return False
        if self.converged:
            return not self.far
        if self.stop_reason == "stalled":
            return self.reported_gap <= ROUNDING_LEVEL * self.rounding
        return bool(self.warned)  # an uncertified stop always says so


def random_fit(rng: np.random.Generator):
    """One random tiny problem: (loss name, params, X, grades, qid or None, C)."""
    name, params = LOSSES[rng.integers(len(LOSSES))]
    d = int(rng.integers(1, 5))
    if name == "zero_one":  # a labelling loss: one query of binary labels
        n = int(rng.integers(2, 9))
        y = rng.integers(0, 2, n)
        y[:2] = [0, 1]
        return name, params, rng.normal(size=(n, d)), y, None, float(10.0 ** rng.uniform(-2, 3))
    n_queries = int(rng.integers(1, 6))
    sizes = rng.integers(1, 11, n_queries)
    sizes[0] = max(sizes[0], 2)
    ids = rng.choice(np.array([0, 3, -2, 10**9, 7, 12345]), n_queries, replace=False)
    qid = np.repeat(ids, sizes)
    grades = np.concatenate([rng.integers(0, int(rng.integers(2, 4)), s) for s in sizes])
    grades[:2] = [1 + rng.integers(0, 2), 0]  # one query at least has something to order (others may not)
    order = rng.permutation(qid.size)  # interleaved query ids
    X = rng.normal(size=(qid.size, d))
    if rng.random() < 0.2:  # tied rows
        X[1] = X[0]
    return name, params, X[order], grades[order], qid[order], float(10.0 ** rng.uniform(-2, 3.5))


def run_fit(rng: np.random.Generator, tol: float = 1e-3) -> FitOutcome:
    name, params, X, y, qid, C = random_fit(rng)
    estimator = rankopt.RankSVM(loss=rankopt.get_loss(name, **params), C=C, tol=tol)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        fit = estimator._check_fit(X, y, qid, None)
        problem, result, _ = estimator._solve(fit, None)
    lower, _ = reference_optimum(problem, C, X.shape[1])
    primal = exact_primal(problem, result.w, C)
    return FitOutcome(
        name,
        result.stop_reason,
        result.converged,
        primal - lower,
        lower,
        C * tol,
        result.duality_gap,
        objective_rounding(primal, primal - result.duality_gap),
        [str(w.message) for w in caught if issubclass(w.category, rankopt.ConvergenceWarning)],
    )


if __name__ == "__main__":  # python tests/engine/stall_corpus.py N SEED: the counts before and after a change
    import collections
    import sys

    count, seed = (int(a) for a in sys.argv[1:3])
    rng = np.random.default_rng(seed)
    outcomes = [run_fit(rng) for _ in range(count)]
    print("stop reasons:", collections.Counter(o.stop_reason for o in outcomes))
    print("far from the optimum:", sum(o.far for o in outcomes), "untruthful:", sum(not o.truthful() for o in outcomes))
    for o in outcomes:
        if o.far or not o.truthful() or not o.converged:
            print(o)
