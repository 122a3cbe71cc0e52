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
    :func:`rankopt.most_violated_ranking`.  X is never split or copied: each
    oracle call is one score product over all rows and one combination with
    a coefficient per row, so memory stays at the data plus O(n).
    """

    def __init__(self, X, y, loss, feature_map, inference, registry):
        self.X, self.is_positive = X, y
        self.loss, self.feature_map = loss, feature_map
        self.registry = registry
        n_pos = int(np.count_nonzero(y))
        n_neg = y.size - n_pos
        # Resolved for this problem's size: a loss's conditions may hold on some sizes only.
        self.inference = registry.resolve_method(inference, loss, n_pos, n_neg).name
        self.n_features = feature_map.n_features(X)
        self._psi_star = feature_map.combine(X, np.where(y, 1.0 / n_pos, -1.0 / n_neg))

    def ground_truth_feature(self):
        return self._psi_star

    def most_violated(self, w):
        scores = self.feature_map.scores(self.X, w)
        result = most_violated_ranking(
            self.loss, scores[self.is_positive], scores[~self.is_positive], self.inference,
            registry=self.registry,
        )
        coef = np.empty(self.is_positive.size)
        coef[self.is_positive] = result.pos_coef
        coef[~self.is_positive] = result.neg_coef
        return Constraint(self.feature_map.combine(self.X, coef), result.loss)


class RankingModel(Model):
    """Rank SVM over a single query (AP-SVM, NDCG-SVM, ROC-area SVM, …)."""

    name = "ranking"
    output_kind = OutputKind.RANKING

    def build_problem(self, X, y, loss, feature_map, *, inference="auto", registry):
        return RankingProblem(X, y, loss, feature_map, inference, registry)


@hookimpl
def rankopt_models():
    return [RankingModel]
