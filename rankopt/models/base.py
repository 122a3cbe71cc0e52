"""The model contract: training data + loss + feature map → structured problem."""

from __future__ import annotations

import abc
from typing import TYPE_CHECKING, ClassVar

from rankopt.losses.base import OutputKind

if TYPE_CHECKING:  # pragma: no cover
    from rankopt.engine.problem import StructuredProblem
    from rankopt.features.base import FeatureMap
    from rankopt.inference.base import PluginLookup
    from rankopt.losses.base import Loss


class Model(abc.ABC):
    """Builds the structured problem the engine solves for one kind of output."""

    name: ClassVar[str] = ""
    #: The loss kind this model accepts.
    output_kind: ClassVar[OutputKind]
    #: Whether :meth:`build_problem` takes ``queries=`` (a :class:`rankopt._validation.QueryIndex`):
    #: one problem over many queries, ``y`` then per-row relevance (grades for a graded loss).
    supports_queries: ClassVar[bool] = False

    @abc.abstractmethod
    def build_problem(
        self, X, y, loss: Loss, feature_map: FeatureMap, *, inference: str = "auto", registry: PluginLookup
    ) -> StructuredProblem:
        """A :class:`~rankopt.engine.StructuredProblem` over validated ``X`` and bool ``y``.

        ``registry`` is the plugin registry the estimator resolved its names
        with (:class:`rankopt.plugins.PluginRegistry`), for the inference
        method's name; the model never imports the registry itself.
        """
