"""``benchmarks/gpu_check.py`` (issue 40, point 3) keeps working: its dry run on the CPU."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "gpu_check.py"


def test_the_gpu_script_runs_dry_on_the_cpu(tmp_path):
    out = tmp_path / "gpu.md"
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--device", "cpu", "--quick", "--output", str(out)],
        capture_output=True,
        text=True,
        check=True,
        timeout=300,
    )
    text = out.read_text()
    assert "no GPU: a dry run" in text and "| [8, 16] | pairwise (torch) |" in text
    assert "| ndcg_graded | 5 | 5 |" in text and done.stdout.strip() == text.strip()


def test_without_a_gpu_it_says_so():
    done = subprocess.run([sys.executable, str(SCRIPT)], capture_output=True, text=True, timeout=300)
    if done.returncode == 0:
        pytest.skip("a CUDA device is present")
    assert done.returncode == 2 and "no CUDA device here" in done.stderr
