"""Extension points of rankopt, as pluggy hook specifications.

Every piece rankopt discovers — rank losses, joint feature maps, models and
loss-augmented inference methods — comes through one of the hooks below.
rankopt's own built-ins are plugins too: they implement these hooks in
ordinary modules that the plugin-manager factory registers exactly as it
registers a third-party package found through the ``rankopt`` entry-point
group.

A plugin is any module or object with functions marked ``@hookimpl``::

    from rankopt import hookimpl
    from rankopt.losses import PositionDiscountLoss

    class RBPLoss(PositionDiscountLoss):
        name = "rbp"
        ...

    @hookimpl
    def rankopt_losses():
        return [RBPLoss]

Each hook returns a list of *classes*; rankopt instantiates them on demand
(``rankopt.get_loss("rbp")``).  Names must be unique across all plugins: a
second provider of the same name is rejected with an error naming both.
"""

from __future__ import annotations

import pluggy

__all__ = ["rankopt_feature_maps", "rankopt_inference_methods", "rankopt_losses", "rankopt_models"]

# The hooks return classes of the layers that import this module (their plugins mark hook implementations with
# ``hookimpl``), so the return types are written as ``list[type]`` and named in the docstrings: importing those
# layers here, even for type checking only, would point an import upward.
PROJECT_NAME = "rankopt"

hookspec = pluggy.HookspecMarker(PROJECT_NAME)
hookimpl = pluggy.HookimplMarker(PROJECT_NAME)


@hookspec
def rankopt_losses() -> list[type]:
    """Return the loss classes this plugin provides.

    Each class subclasses :class:`rankopt.losses.RankLoss` (a loss over
    rankings, decomposable over negatives as in condition C2 of
    Mohapatra et al. (2018)) or :class:`rankopt.losses.LabelingLoss` (a loss over
    labelings that decomposes over samples, such as the weighted 0-1 loss),
    carries a unique ``name`` and can be constructed without arguments.
    """


@hookspec
def rankopt_feature_maps() -> list[type]:
    """Return the joint-feature-map classes this plugin provides.

    A feature map turns the input samples and a structured output into the
    joint feature vector Ψ(X, Y) through the two products the engine uses:
    per-sample scores ``s = ψ(X)·w`` and the combination ``Σ c_i ψ(x_i)``.
    """


@hookspec
def rankopt_models() -> list[type]:
    """Return the model classes this plugin provides.

    A model turns training data, a loss and a feature map into a
    :class:`rankopt.engine.StructuredProblem` the cutting-plane engine solves
    (or a :class:`rankopt.engine.CCCPProblem` for non-convex models).
    """


@hookspec
def rankopt_inference_methods() -> list[type]:
    """Return the loss-augmented inference method classes this plugin provides.

    A method computes, for given positive and negative scores, the optimal
    interleaving rank of every negative (problem (5) of Mohapatra et al. (2018));
    :func:`rankopt.most_violated_ranking` turns those ranks into the loss and
    the joint-feature coefficients.
    """
