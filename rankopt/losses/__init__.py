"""Loss functions: the contracts and rankopt's built-in losses."""

from rankopt.losses.ap import APLoss
from rankopt.losses.auc import AUCLoss
from rankopt.losses.base import CompiledForm, KernelCode, LabelingLoss, Loss, OutputKind, RankLoss
from rankopt.losses.discount import NDCGLoss, PositionDiscountLoss
from rankopt.losses.graded_ndcg import GradedNDCGLoss
from rankopt.losses.graded_position import GradedPositionLoss
from rankopt.losses.pairwise import GradedPairwiseLoss, PairwiseLoss
from rankopt.losses.precision import PrecisionAtKLoss
from rankopt.losses.structure import (
    GradedPairStructure,
    GradedPositionStructure,
    GradedQueryStructure,
    TopKCountStructure,
)
from rankopt.losses.zero_one import ZeroOneLoss

__all__ = [
    "APLoss",
    "AUCLoss",
    "CompiledForm",
    "GradedNDCGLoss",
    "GradedPairStructure",
    "GradedPairwiseLoss",
    "GradedPositionLoss",
    "GradedPositionStructure",
    "GradedQueryStructure",
    "KernelCode",
    "LabelingLoss",
    "Loss",
    "NDCGLoss",
    "OutputKind",
    "PairwiseLoss",
    "PositionDiscountLoss",
    "PrecisionAtKLoss",
    "RankLoss",
    "TopKCountStructure",
    "ZeroOneLoss",
]
