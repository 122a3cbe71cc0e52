"""The model contract: training data + loss + feature map → structured problem."""

from __future__ import annotations

import abc
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

from rankopt.engine.problem import LinearProblem
from rankopt.losses.base import OutputKind

__all__ = ["FeatureMapProblem", "Model"]

if TYPE_CHECKING:  # pragma: no cover
    from rankopt.engine.cccp import CCCPProblem
    from rankopt.engine.problem import StructuredProblem
    from rankopt.features.base import FeatureMap
    from rankopt.inference.base import PluginLookup
    from rankopt.losses.base import Loss


class Model(abc.ABC):
    """Builds the problem the engine solves for one kind of output.

    A convex model builds a :class:`~rankopt.engine.StructuredProblem`, which a solver of the table solves;
    a non-convex one (HOAP-SVM, the latent models) a :class:`~rankopt.engine.cccp.CCCPProblem`, which CCCP
    solves by a sequence of them.  :attr:`problem_kind` says which; an estimator takes a model plugin by
    name (``RankSVM(model=...)``), so a third-party model registered with ``rankopt_models`` is reachable.
    """

    name: ClassVar[str] = ""
    #: The loss kind this model accepts.
    output_kind: ClassVar[OutputKind]
    #: Whether :meth:`build_problem` takes ``queries=`` (a :class:`rankopt._validation.QueryIndex`):
    #: one problem over many queries, ``y`` then per-row relevance (grades for a graded loss).
    supports_queries: ClassVar[bool] = False
    #: Whether :meth:`build_problem` takes ``row_chunks=`` (a :class:`rankopt.data.dask_backend.RowChunks` over
    #: X with the raw labels and query ids, and ``relevant_at=``): many queries, each whole within a row chunk,
    #: the inference run where the chunks are.
    supports_row_chunks: ClassVar[bool] = False
    #: What :meth:`build_problem` returns: "structured" (a StructuredProblem) or "cccp" (a CCCPProblem, for a
    #: non-convex model).  A name, not the class: registering the built-in models imports no solver.
    problem_kind: ClassVar[str] = "structured"

    @abc.abstractmethod
    def build_problem(
        self, X, y, loss: Loss, feature_map: FeatureMap, *, inference: str = "auto", registry: PluginLookup
    ) -> StructuredProblem | CCCPProblem:
        """A :class:`~rankopt.engine.StructuredProblem` (a :class:`CCCPProblem` where :attr:`problem_kind` says
        so) over validated ``X`` and bool ``y``.

        ``registry`` is the plugin registry the estimator resolved its names
        with (:class:`rankopt.plugins.PluginRegistry`), for the inference
        method's name; the model never imports the registry itself.
        """


class FeatureMapProblem(LinearProblem):
    """A :class:`~rankopt.engine.problem.LinearProblem` over the rows of X seen through a feature map.

    What every linear model shares: the scores X·w and the combinations Xᵀc
    come from the feature map, and Ψ(X, Y*) = Xᵀc* is computed once.  A
    subclass sets ``X``, ``feature_map`` and ``ground_truth_coef``, then calls
    :meth:`_set_ground_truth`, and states its inference.
    """

    X: Any
    feature_map: FeatureMap
    _psi_star: np.ndarray

    def _set_ground_truth(self, coef: np.ndarray) -> None:
        """Ψ(X, Y*) from the ground truth's per-row coefficients c*."""
        self.ground_truth_coef = coef
        self._psi_star = self.feature_map.combine(self.X, coef)

    def ground_truth_feature(self):
        return self._psi_star

    def scores(self, w):
        return self.feature_map.scores(self.X, w)

    def combine(self, coef):
        return self.feature_map.combine(self.X, coef)
