"""The binary model: labelings Y ∈ {0,1}ⁿ with a decomposable labeling loss.

Ψ(X, Y) = Σ_i a_i y_i ψ(x_i), where a_i is the loss's cost of mislabelling
sample i.  Weighing Ψ like the loss makes the 1-slack problem exactly the
class-weighted hinge-loss SVM without intercept (Joachims 2006, §4):
ξ = Σ_i a_i max(0, 1 − ỹ_i w·ψ(x_i)), ỹ ∈ {−1, 1}.  This is the binary SVM
baseline (Dokania et al. (2014) §5: HOB-SVM with w₂ = 0) trained by the same
engine as the rank SVMs.
"""

from __future__ import annotations

import numpy as np

from rankopt.engine.problem import RowInference
from rankopt.hookspecs import hookimpl
from rankopt.losses.base import OutputKind
from rankopt.models.base import FeatureMapProblem, Model

__all__ = ["BinaryModel", "BinaryProblem"]


class BinaryProblem(FeatureMapProblem):
    """Loss-augmented inference decomposes: each sample flips when that gains."""

    def __init__(self, X, y, loss, feature_map):
        self.X, self.y = X, y
        self.feature_map = feature_map
        self.weights = np.asarray(loss.sample_weights(y), dtype=np.float64)
        self.n_features = feature_map.n_features(X)
        self._set_ground_truth(self.weights * y)

    def infer(self, scores):
        scores = np.asarray(scores, dtype=np.float64)
        # Labelling i as 1 scores a_i s_i; a wrong label adds a_i.  Flip when
        # that strictly gains: positives with s < 1, negatives with s > -1.
        y_hat = np.where(self.y, scores >= 1.0, scores > -1.0)
        loss = float(np.dot(self.weights, y_hat != self.y))
        coef = self.weights * y_hat
        return RowInference(coef, loss, float(coef @ scores) + loss)


class BinaryModel(Model):
    """Binary SVM over labelings, with a labeling loss such as ``zero_one``."""

    name = "binary"
    output_kind = OutputKind.LABELING

    def build_problem(self, X, y, loss, feature_map, *, inference="auto", registry):
        if inference != "auto":
            raise ValueError(
                f"expected inference='auto' for the labeling loss {loss.name!r} (its inference "
                f"decomposes over samples), got {inference!r} instead"
            )
        return BinaryProblem(X, y, loss, feature_map)


@hookimpl
def rankopt_models():
    return [BinaryModel]
