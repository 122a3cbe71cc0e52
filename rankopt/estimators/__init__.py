"""The public estimators: scikit-learn-style rankers over rankopt's engine.

Each validates its input, resolves its plugins by name and hands the
structured problem a model plugin (:mod:`rankopt.models`) builds to the engine
(:mod:`rankopt.engine`).  The names below are imported on first access, so
that ``import rankopt.estimators`` does not load scikit-learn.
"""

from rankopt._lazy import lazy_attributes

_LAZY = {
    "HOAPSVM": "rankopt.estimators.high_order",
    "HOBSVM": "rankopt.estimators.high_order",
    "LatentAPSVM": "rankopt.estimators.latent",
    "LatentSSVM": "rankopt.estimators.latent",
    "LatentSVM": "rankopt.estimators.latent",
    "RankSVM": "rankopt.estimators.rank_svm",
    "RankSVMCV": "rankopt.estimators.rank_svm_cv",
}

__all__ = sorted(_LAZY)


def register_model_exports() -> None:
    """Register the estimators a model file can hold (:func:`rankopt.data.model_file.register_model_export`):
    the ``rankopt.model_exports`` entry point, called when a file names a class not registered yet."""
    import importlib

    for module in sorted(set(_LAZY.values())):
        importlib.import_module(module)


__getattr__, __dir__ = lazy_attributes("rankopt.estimators", globals(), _LAZY)
