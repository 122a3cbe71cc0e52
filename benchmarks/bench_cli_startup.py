"""Start-up of the ``rankopt`` command against ``python -c pass`` (issue 15).

``rankopt --version``, ``rankopt --help`` and ``rankopt plugins`` are to
answer in under a second: they import neither scikit-learn, SciPy's heavy
modules, matplotlib, the experiments nor the estimators (``rankopt`` and
``rankopt.cli`` import those where they are used).  Before, the command
imported all of them and took 1.5–3.6 s on a loaded 2-core machine
(4–6 s in the issue), ``python -c pass`` 0.02–0.04 s.

Each round runs the baseline (``python -c pass``, the bare interpreter's
start-up, which no command can beat) and then the command, alternating, so
a drift in the machine's load hits both sides alike.  ``extra_info``
records, for both, the median wall time and the median CPU time of the
child process (``resource.getrusage(RUSAGE_CHILDREN)``, user + system,
which the load of other jobs inflates less than wall time), and the ratios
command / baseline; ``target_seconds`` is the goal for the command's wall
time.  Nothing is asserted about time (a shared machine); the command must
succeed.

Rounds: ``full`` — 15 per command; ``small`` (CI, ``--benchmark-disable``) — 1.
"""

from __future__ import annotations

import os
import resource
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

COMMANDS = (("--version",), ("--help",), ("plugins",))
ROUNDS = {"full": 15, "small": 1}
TARGET_SECONDS = 1.0


def rankopt_command() -> list[str]:
    """The installed console script next to this interpreter, else ``python -m rankopt``."""
    script = Path(sys.executable).with_name("rankopt")
    if script.is_file() and os.access(script, os.X_OK):
        return [str(script)]
    return [sys.executable, "-m", "rankopt"]


def _run(argv: list[str]) -> tuple[float, float]:
    """Wall seconds and child CPU seconds (user + system) of one run of ``argv``."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    completed = subprocess.run(argv, capture_output=True, text=True)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if completed.returncode != 0:
        raise AssertionError(f"{argv} exited with {completed.returncode}: {completed.stderr[-2000:]}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu


def _alternate(command: list[str], baseline: list[str], rounds: int):
    walls, cpus, base_walls, base_cpus = [], [], [], []
    for _ in range(rounds):
        wall, cpu = _run(baseline)
        base_walls.append(wall), base_cpus.append(cpu)
        wall, cpu = _run(command)
        walls.append(wall), cpus.append(cpu)
    return walls, cpus, base_walls, base_cpus


@pytest.mark.parametrize("args", COMMANDS, ids=[" ".join(a) for a in COMMANDS])
def test_cli_startup(benchmark, request, args):
    command = [*rankopt_command(), *args]
    baseline = [sys.executable, "-c", "pass"]
    _run(command)  # warm the file cache (and compile .pyc files) outside the timed rounds
    benchmark.group = "cli-startup"
    walls, cpus, base_walls, base_cpus = benchmark.pedantic(
        _alternate, args=(command, baseline, ROUNDS[request.config.rankopt_bench_scale]), rounds=1, iterations=1
    )
    wall, cpu = float(np.median(walls)), float(np.median(cpus))
    base_wall, base_cpu = float(np.median(base_walls)), float(np.median(base_cpus))
    benchmark.extra_info.update(
        command=" ".join(["rankopt", *args]),
        wall_median=wall,
        cpu_median=cpu,
        baseline_wall_median=base_wall,
        baseline_cpu_median=base_cpu,
        wall_ratio=wall / base_wall,
        cpu_ratio=cpu / max(base_cpu, 1e-3),
        target_seconds=TARGET_SECONDS,
    )
