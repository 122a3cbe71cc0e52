"""Experiments run by the ``rankopt`` command: the digits demo.

Plotting needs the ``demo`` extra (matplotlib, tqdm); it is imported only
when a plot or progress bar is asked for.
"""
from rankopt.experiments.demo import DemoResult, run_demo

__all__ = ["DemoResult", "run_demo"]
