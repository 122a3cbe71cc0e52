"""The solver table: every solver of the engine by name, what it needs, and one way to run it.

An estimator never calls a solver function itself.  It asks :func:`get_solver` for the solver its user
named, checks the fit against the solver's declared needs with :meth:`SolverSpec.refusal` — before any
work, so that a solver asked for a problem it cannot take is refused with the reason and the solver to
use instead — and runs it with :meth:`SolverSpec.run`, which every solver answers with a
:class:`~rankopt.engine.certificate.SolveResult` certified the same way.

Adding a solver is one module (its ``solve_*`` function) and one entry of :data:`SOLVERS`
(CONTRIBUTING.md, "Adding a solver").
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from rankopt.engine.certificate import SolveResult, WorkingSet
from rankopt.engine.problem import BlockProblem, StructuredProblem

__all__ = ["DEFAULT_SOLVER", "SOLVERS", "FitNeeds", "SolverSpec", "get_solver"]

#: The solver every estimator uses unless told otherwise.
DEFAULT_SOLVER = "cutting_plane"


@dataclass(frozen=True)
class FitNeeds:
    """What a fit brings, for a solver to accept or refuse before any work."""

    queries: bool  # the rows are grouped into queries (qid or group)
    ranking: bool  # the loss ranks documents (its problem splits by query), not one by one
    in_memory: bool  # NumPy or SciPy sparse data (not a Dask array)
    warm_start: bool  # starting from a previous fit's coef_
    approx: bool  # AP-SVM-APPX's easy/hard split


@dataclass(frozen=True)
class SolverSpec:
    """One solver: its name, its function, and the needs it declares.

    ``solve(problem, C, *, tol, max_iter, callback, **start)`` returns a :class:`SolveResult`; ``start``
    holds ``w0`` and ``planes`` for a solver that takes a starting point (``warm_start``).
    """

    name: str
    summary: str
    solve: Callable[..., SolveResult]
    #: The problem type it takes (a :class:`BlockProblem` splits its slack by query).
    problem_type: type = StructuredProblem
    needs_queries: bool = False
    needs_in_memory: bool = False
    warm_start: bool = True
    approx: bool = True

    def refusal(self, fit: FitNeeds) -> str | None:
        """Why this solver cannot take the fit, with the solver to use instead; None when it can."""
        use = f"; use solver={DEFAULT_SOLVER!r}"
        if self.needs_queries and not fit.queries:
            return (
                f"expected queries (qid or group) and approx=None with solver={self.name!r}, whose blocks are the "
                f"queries, got no queries instead{use}"
            )
        if not self.approx and fit.approx:
            return f"expected approx=None with solver={self.name!r}, got an approx split instead{use}"
        if self.needs_queries and not fit.ranking:
            return (
                f"expected a rank loss with solver={self.name!r} (one block per query), got a loss whose documents "
                f"are classified one by one instead{use}"
            )
        if self.needs_in_memory and not fit.in_memory:
            return (
                f"expected NumPy or CSR data with solver={self.name!r} (a small product per query), got a Dask "
                f"array instead{use}"
            )
        if not self.warm_start and fit.warm_start:
            return f"expected warm_start=False with solver={self.name!r}, got warm_start=True instead"
        return None

    def run(
        self,
        problem: StructuredProblem,
        C: float,
        *,
        tol: float,
        max_iter: int,
        callback=None,
        w0: np.ndarray | None = None,
        planes: WorkingSet | None = None,
        warn: bool = True,
    ) -> SolveResult:
        """Solve ``problem`` at ``C`` to ``C·tol``; a problem of the wrong type is refused before any work."""
        if not isinstance(problem, self.problem_type):
            raise ValueError(
                f"expected a {self.problem_type.__name__} with solver={self.name!r}, got {type(problem).__name__} "
                f"instead (a model plugin's problem); use solver={DEFAULT_SOLVER!r}"
            )
        start = {"w0": w0, "planes": planes} if self.warm_start else {}
        return self.solve(problem, C, tol=tol, max_iter=max_iter, callback=callback, warn=warn, **start)


def _cutting_plane(problem, C, **options) -> SolveResult:
    from rankopt.engine.cutting_plane import solve_cutting_plane

    return solve_cutting_plane(problem, C, **options)


def _bcfw(problem, C, **options) -> SolveResult:
    from rankopt.engine.bcfw import solve_bcfw

    return solve_bcfw(problem, C, **options)


#: Every solver, by the name estimators take in ``solver=``.
SOLVERS: dict[str, SolverSpec] = {
    spec.name: spec
    for spec in (
        SolverSpec(
            "cutting_plane",
            "1-slack cutting plane with OCA's line search (Joachims et al. 2009; Franc and Sonnenburg 2009)",
            _cutting_plane,
        ),
        SolverSpec(
            "bcfw",
            "block-coordinate Frank-Wolfe, one block per query (Lacoste-Julien et al. 2013)",
            _bcfw,
            problem_type=BlockProblem,
            needs_queries=True,
            needs_in_memory=True,
            warm_start=False,
            approx=False,
        ),
    )
}


def get_solver(name) -> SolverSpec:
    """The solver called ``name``, or a ValueError that lists the solvers."""
    spec = SOLVERS.get(name) if isinstance(name, str) else None
    if spec is None:
        names = " or ".join(repr(n) for n in SOLVERS)
        raise ValueError(f"expected solver to be {names}, got {name!r} instead")
    return spec
