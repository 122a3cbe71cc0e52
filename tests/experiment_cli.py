"""The experiments outside the package, run as ``python -m experiments.<name>`` runs them, in process."""

from __future__ import annotations

import importlib


def experiment_main(argv: list[str]) -> int:
    """``python -m experiments.<argv[0]> <argv[1:]>``: the exit status."""
    from experiments import run_experiment

    module = importlib.import_module(f"experiments.{argv[0]}")
    return run_experiment(module.add_cli_subcommand, argv[0], argv[1:])


def experiment_parser(name: str):
    from experiments import parser_for

    return parser_for(importlib.import_module(f"experiments.{name}").add_cli_subcommand, name)
