"""CI's smoke run of the benchmarks (``--benchmark-disable``) prints no benchmark table (issue 61, point 28)."""

from __future__ import annotations

import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_a_run_that_times_nothing_prints_no_table():
    """The large-C and tight-tolerance modules printed their tables inside ``pytest -q --benchmark-disable``'s
    dots, where nothing was timed; one small case of the tight-tolerance module now ends without one."""
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "--benchmark-disable",
            str(ROOT / "benchmarks" / "bench_tight_tol.py"),
            "-k",
            "breast_cancer and C1 and not scale",
        ],
        capture_output=True,
        text=True,
        cwd=tempfile.gettempdir(),  # not the checkout: its source folder would shadow the installed package
        timeout=300,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "passed" in done.stdout and "###" not in done.stdout and "|---" not in done.stdout, done.stdout
