"""Loss-augmented inference for rank losses.

The calls that take plugin names (``most_violated_ranking``,
``most_violated_rankings``) are public in :mod:`rankopt.api` and at the top
level (``rankopt.most_violated_ranking``); this package is the layer below
the plugin registry and receives one.
"""

from rankopt.inference.base import InferenceMethod, PluginLookup, RankingInference

__all__ = ["InferenceMethod", "PluginLookup", "RankingInference"]
