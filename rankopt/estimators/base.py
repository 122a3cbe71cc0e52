"""What the linear rankers share: scikit-learn's tags, the checks before scoring, and their score.

RankSVM, the latent rankers and the high-order rankers each score documents with learned weights, each from
its own input (queries, bags, pairs of similar samples): each keeps its own ``decision_function`` and
``score`` signatures, which scikit-learn's metadata routing reads, and hands the shared steps to this base, as
scikit-learn's linear models share ``LinearModel``.
"""

from __future__ import annotations

from typing import ClassVar

from sklearn.base import BaseEstimator
from sklearn.utils import ClassifierTags
from sklearn.utils.validation import check_is_fitted

from rankopt._validation import check_feature_names
from rankopt.metrics import average_precision, mean_average_precision

__all__ = ["LinearRanker"]


class LinearRanker(BaseEstimator):
    """The base of the linear rankers (:class:`~rankopt.RankSVM`, the latent and the high-order rankers)."""

    #: Whether the targets are binary relevance, one score ranking them: scikit-learn's checks then feed
    #: two-class targets.
    binary_targets: ClassVar[bool] = True

    def _check_for_scoring(self, X) -> None:
        """Before any score: fitted, and X's feature names (a DataFrame's) those of the fit."""
        check_is_fitted(self, "coef_")
        check_feature_names(self, X, reset=False)

    @staticmethod
    def _ranking_score(y, scores, qid=None, relevant_at=1) -> float:
        """The average precision of the ranking by ``scores``; with ``qid``, its mean over queries
        (:func:`rankopt.metrics.mean_average_precision`)."""
        if qid is None:
            return average_precision(y, scores)
        return mean_average_precision(y, scores, qid, relevant_at=relevant_at)

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.sparse = True
        tags.target_tags.required = True
        if self.binary_targets:
            tags.classifier_tags = ClassifierTags(multi_class=False)
        return tags
