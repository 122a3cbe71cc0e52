"""The source passes ruff (lint and format) and mypy, with the settings in pyproject.toml.

The tools run on the checkout the tests run from, exactly as a contributor
runs them (``ruff check . && ruff format --check . && mypy``); the ``[test]``
extra installs the versions these settings were written for.  A tool that is
not installed skips its test and says so; any finding fails it and shows it.
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _run_tool(module: str, *args: str) -> None:
    if importlib.util.find_spec(module) is None:
        pytest.skip(f"{module} is not installed (pip install '.[test]' installs it)")
    if not (ROOT / "pyproject.toml").is_file() or not (ROOT / "rankopt").is_dir():
        pytest.skip(f"no source checkout at {ROOT} to check")
    done = subprocess.run([sys.executable, "-m", module, *args], cwd=ROOT, capture_output=True, text=True)
    assert done.returncode == 0, f"{module} {' '.join(args)} found problems:\n{done.stdout}{done.stderr}"


def test_ruff_lint():
    _run_tool("ruff", "check", "--no-cache", ".")


def test_ruff_format():
    _run_tool("ruff", "format", "--check", "--no-cache", ".")


def test_mypy():
    _run_tool("mypy")
