"""Shared test fixtures.

``tests/`` goes on sys.path so that test modules import the brute-force
oracles as ``from oracles.brute_force import ...`` (pyproject.toml is not
touched for this).
"""
import os
import sys
import zlib

import numpy as np
import pytest

_TESTS_DIR = os.path.dirname(os.path.abspath(__file__))
if _TESTS_DIR not in sys.path:
    sys.path.insert(0, _TESTS_DIR)


@pytest.fixture
def rng(request):
    """A NumPy generator seeded from the test's node id: reproducible, distinct per test."""
    seed = zlib.crc32(request.node.nodeid.encode())
    return np.random.default_rng(seed)
