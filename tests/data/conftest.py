"""Fixtures of the data tests."""

from __future__ import annotations

import subprocess
import sys
import tempfile

import pytest


@pytest.fixture
def rankopt_command():
    """Run ``python -m rankopt ARGS`` outside the checkout (the installed package): the finished process."""

    def run(*args):
        return subprocess.run(
            [sys.executable, "-m", "rankopt", *map(str, args)],
            capture_output=True,
            text=True,
            cwd=tempfile.gettempdir(),
            check=False,
        )

    return run
