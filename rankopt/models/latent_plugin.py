"""The latent models as model plugins: bags of candidates and their labels → a CCCP problem.

Behl, Mohapatra, Jawahar and Kumar, "Optimizing average precision using weakly supervised data" (2015):
the latent AP-SVM (problem 9), the latent structural SVM with a rank loss (problem 6, Appendix C) and the
latent binary SVM with robustness (§5.1).  Each builds a :class:`~rankopt.engine.cccp.CCCPProblem` that
CCCP solves; the latent estimators take them from the registry, as :class:`rankopt.RankSVM` takes its
model.
"""

from __future__ import annotations

import numpy as np

from rankopt.data.bags import Bags
from rankopt.hookspecs import hookimpl
from rankopt.losses.base import OutputKind
from rankopt.models.base import Model

__all__ = ["LatentAPModel", "LatentBinaryModel", "LatentSSVMModel", "split_bags"]


def split_bags(bags: Bags, labels: np.ndarray) -> tuple[Bags, Bags]:
    """(the positive bags, the negative bags) of ``bags`` by their boolean ``labels``."""
    return bags.take(np.flatnonzero(labels)), bags.take(np.flatnonzero(~labels))


class LatentAPModel(Model):
    """The latent AP-SVM over one query of bags or many (``queries=`` as the ranking model takes them)."""

    name = "latent_ap"
    output_kind = OutputKind.RANKING
    problem_kind = "cccp"

    def build_problem(self, X, y, loss, feature_map, *, inference="auto", registry, **options):
        from rankopt.models.latent import LatentRankingCCCP

        pos, neg = split_bags(X, y)
        return LatentRankingCCCP(pos, neg, loss, feature_map, model="apsvm", inference=inference, registry=registry)


class LatentSSVMModel(Model):
    """The latent structural SVM with a rank loss (one ranking)."""

    name = "latent_ssvm"
    output_kind = OutputKind.RANKING
    problem_kind = "cccp"

    def build_problem(self, X, y, loss, feature_map, *, inference="auto", registry, **options):
        from rankopt.models.latent import LatentRankingCCCP

        pos, neg = split_bags(X, y)
        return LatentRankingCCCP(pos, neg, loss, feature_map, model="ssvm")


class LatentBinaryModel(Model):
    """The latent binary SVM: ``loss`` a class-weighted 0-1 loss (its J), option ``robust`` the fraction of
    the most confusing negative candidates ignored."""

    name = "latent_binary"
    output_kind = OutputKind.LABELING
    problem_kind = "cccp"

    def build_problem(self, X, y, loss, feature_map, *, inference="auto", registry, robust=0.0, **options):
        from rankopt.models.latent import LatentSVMCCCP

        pos, neg = split_bags(X, y)
        return LatentSVMCCCP(pos, neg, feature_map, J=loss.J, robust=robust)


@hookimpl
def rankopt_models():
    return [LatentAPModel, LatentSSVMModel, LatentBinaryModel]
