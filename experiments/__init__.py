"""The papers' experiments and the deep and boosting comparisons: not part of the installed library.

Each is one command from the repository root, with the options it always had::

    python -m experiments.cora [--quick] [--n-jobs 2] ...      # HOB-SVM / HOAP-SVM on Cora (ECCV 2014)
    python -m experiments.latent [--quick] ...                 # latent AP-SVM (CVPR 2015)
    python -m experiments.letor [--quick] ...                  # every loss against LGBMRanker on MSLR
    python -m experiments.deep mslr|digits [--quick] ...       # neural rankers and digit embeddings
    python -m experiments.learners trees|hessian [--quick] ... # boosted trees on the hinges (docs/learners.md)
    python -m experiments.metric_learning [--quick] ...        # PML's loop on unseen classes (docs/metric-learning.md)

They need the ``experiments`` extra (``pip install ".[experiments]"``) and import the installed rankopt;
their results are in ``docs/``.  ``rankopt demo`` stays in the package as its main job.
"""

from __future__ import annotations

import argparse
import os
import sys

__all__ = ["parser_for", "run_experiment"]

# ``python -m experiments.<name>`` puts the repository root first on sys.path, where rankopt's sources
# (without their compiled kernels, under a non-editable install) would shadow the installed package: the
# root goes last, after site-packages.  This package is already imported, so its modules still resolve.
_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if sys.path and os.path.abspath(sys.path[0] or os.curdir) == _ROOT:
    sys.path.append(sys.path.pop(0))


class _OneCommand:
    """What an experiment's ``add_cli_subcommand(subparsers)`` is handed when it runs on its own: its parser
    becomes the top-level one, named ``python -m experiments.<name>``."""

    def __init__(self, prog: str):
        self.prog = prog
        self.parser: argparse.ArgumentParser | None = None

    def add_parser(self, name, **kwargs):
        kwargs.pop("help", None)
        self.parser = argparse.ArgumentParser(prog=self.prog, **kwargs)
        return self.parser


def parser_for(add_cli_subcommand, name: str) -> argparse.ArgumentParser:
    """The experiment's own parser, named ``python -m experiments.<name>``, with the ``-v`` option."""
    from rankopt.cli import verbose_parent

    holder = _OneCommand(f"python -m experiments.{name}")
    add_cli_subcommand(holder, parents=[verbose_parent()])
    assert holder.parser is not None
    return holder.parser


def run_experiment(add_cli_subcommand, name: str, argv=None) -> int:
    """Parse ``argv`` (default ``sys.argv[1:]``) with the experiment's own options and run it, with the
    ``rankopt`` command's logging (``-v``) and one-line error messages; return the exit status."""
    from rankopt.cli import run_handler

    args = parser_for(add_cli_subcommand, name).parse_args(sys.argv[1:] if argv is None else argv)
    return run_handler(args)
