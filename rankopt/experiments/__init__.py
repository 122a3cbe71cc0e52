"""The digits demo the ``rankopt`` command runs (the main job), and the report helpers it shares with the
papers' experiments, which live outside the package (``experiments/`` in the repository).

Plotting needs the ``demo`` extra (matplotlib, tqdm); it is imported only
when a plot or progress bar is asked for.  ``DemoResult`` and ``run_demo``
are imported on first access, so that importing an experiment module (which
the command does to build its parser) does not import the estimators.
"""

import importlib

__all__ = ["DemoResult", "run_demo"]


def __getattr__(name: str):
    if name in __all__:
        return getattr(importlib.import_module("rankopt.experiments.demo"), name)
    raise AttributeError(f"module 'rankopt.experiments' has no attribute {name!r}")
