"""Loss-augmented inference for rank losses."""
from rankopt.inference.base import InferenceMethod, RankingInference, most_violated_ranking

__all__ = ["InferenceMethod", "RankingInference", "most_violated_ranking"]
