"""The high-order models as plugins: HOB-SVM's and HOAP-SVM's problem builders.

They live apart from the problems of :mod:`rankopt.models.high_order` so that
registering them (every plugin manager does, ``rankopt plugins`` lists them)
imports neither graph cuts nor the engine's solvers: the problems are imported
when a problem is built.
"""

from __future__ import annotations

from rankopt.hookspecs import hookimpl
from rankopt.losses.base import LabelingLoss, OutputKind, RankLoss
from rankopt.models.base import Model

__all__ = ["HOAPModel", "HOBModel"]


class HOBModel(Model):
    """HOB-SVM: labelings of a high-order input with a labeling loss (``zero_one``)."""

    name = "high_order_binary"
    output_kind = OutputKind.LABELING

    def build_problem(self, X, y, loss, feature_map, *, inference="auto", registry):
        from rankopt.models.high_order import HOBProblem, check_input

        check_input(X, feature_map)
        if not isinstance(loss, LabelingLoss):
            raise ValueError(f"expected a labeling loss such as 'zero_one', got {loss.name!r} instead")
        if inference != "auto":
            raise ValueError(f"expected inference='auto' for HOB-SVM (one graph cut), got {inference!r} instead")
        return HOBProblem(X, y, loss, feature_map)


class HOAPModel(Model):
    """HOAP-SVM: rankings by max-marginal differences with a rank loss; a CCCP problem."""

    name = "high_order_ap"
    output_kind = OutputKind.RANKING
    problem_kind = "cccp"

    def build_problem(self, X, y, loss, feature_map, *, inference="auto", registry):
        """A :class:`~rankopt.models.high_order.HOAPProblem`: a :class:`~rankopt.engine.CCCPProblem`, solved by CCCP."""
        from rankopt.models.high_order import HOAPProblem, check_input

        check_input(X, feature_map)
        if not isinstance(loss, RankLoss):
            raise ValueError(f"expected a rank loss such as 'ap', got {loss.name!r} instead")
        return HOAPProblem(X, y, loss, feature_map, inference, registry)


@hookimpl
def rankopt_models():
    return [HOBModel, HOAPModel]
