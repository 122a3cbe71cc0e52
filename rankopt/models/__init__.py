"""Model plugins: each builds the structured problem the engine solves for one kind of output.

The public estimators that use them (``RankSVM``, ``HOBSVM``, ``LatentAPSVM``,
…) are in :mod:`rankopt.estimators`.
"""

from rankopt.models.base import Model

__all__ = ["Model"]
