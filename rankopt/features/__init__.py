"""Joint feature maps."""

from rankopt.features.base import FeatureMap
from rankopt.features.linear import LinearFeatureMap

__all__ = ["FeatureMap", "LinearFeatureMap"]
