"""The plain ranking model: Ψ(X, R) of ``qs-rank-losses`` eq. (1) with any rank loss."""
from __future__ import annotations

import numpy as np

from rankopt.engine.problem import Constraint, StructuredProblem
from rankopt.hookspecs import hookimpl
from rankopt.inference.base import most_violated_ranking
from rankopt.losses.base import OutputKind
from rankopt.models.base import Model


class RankingProblem(StructuredProblem):
    """Ψ(X, R) = (1/|P||N|) Σ_{x∈P} Σ_{y∈N} R_xy (ψ(x) − ψ(y)).

    The ground truth puts every positive first, so Ψ(X, R*) is the difference
    of the class means of ψ; the most violated ranking comes from
    :func:`rankopt.most_violated_ranking`.
    """

    def __init__(self, X_pos, X_neg, loss, feature_map, inference, registry):
        self.X_pos, self.X_neg = X_pos, X_neg
        self.loss, self.feature_map = loss, feature_map
        self.registry = registry
        self.inference = registry.resolve_method(inference, loss).name
        self.n_features = feature_map.n_features(X_pos)
        n_pos, n_neg = X_pos.shape[0], X_neg.shape[0]
        self._psi_star = feature_map.combine(X_pos, np.full(n_pos, 1.0 / n_pos)) - feature_map.combine(
            X_neg, np.full(n_neg, 1.0 / n_neg)
        )

    def ground_truth_feature(self):
        return self._psi_star

    def most_violated(self, w):
        result = most_violated_ranking(
            self.loss,
            self.feature_map.scores(self.X_pos, w),
            self.feature_map.scores(self.X_neg, w),
            self.inference,
            registry=self.registry,
        )
        feature = self.feature_map.combine(self.X_pos, result.pos_coef) + self.feature_map.combine(
            self.X_neg, result.neg_coef
        )
        return Constraint(feature, result.loss)


class RankingModel(Model):
    """Rank SVM over a single query (AP-SVM, NDCG-SVM, ROC-area SVM, …)."""

    name = "ranking"
    output_kind = OutputKind.RANKING

    def build_problem(self, X, y, loss, feature_map, *, inference="auto", registry):
        return RankingProblem(X[y], X[~y], loss, feature_map, inference, registry)


@hookimpl
def rankopt_models():
    return [RankingModel]
