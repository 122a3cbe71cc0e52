"""Shared test fixtures.

``tests/`` goes on sys.path so that test modules import the brute-force
oracles as ``from oracles.brute_force import ...`` (pyproject.toml is not
touched for this), and the repository root after everything else, for the
experiments outside the package.
"""

import copy
import os
import sys
import zlib

import numpy as np
import pytest

_TESTS_DIR = os.path.dirname(os.path.abspath(__file__))
if _TESTS_DIR not in sys.path:
    sys.path.insert(0, _TESTS_DIR)
# The repository root, for the experiments outside the package (``import experiments.cora``); appended, so
# that ``import rankopt`` still finds the installed package with its compiled kernels.
_ROOT = os.path.dirname(_TESTS_DIR)
if _ROOT not in sys.path:
    sys.path.append(_ROOT)


@pytest.fixture
def rng(request):
    """A NumPy generator seeded from the test's node id: reproducible, distinct per test."""
    seed = zlib.crc32(request.node.nodeid.encode())
    return np.random.default_rng(seed)


@pytest.fixture(autouse=True, scope="module")
def _isolate_dask_config():
    """Restore Dask's global configuration after each module.

    A ``distributed.Client`` sets ``scheduler="dask.distributed"`` globally and
    resets it when it closes; a client torn down under load in one module must
    not leave later modules computing on a scheduler that no longer exists.
    Only modules that imported Dask are touched.
    """
    config = sys.modules.get("dask.config")
    snapshot = None if config is None else copy.deepcopy(config.config)
    yield
    config = sys.modules.get("dask.config")
    if config is not None:
        config.config.clear()
        config.config.update(copy.deepcopy(snapshot) if snapshot is not None else {})
        if snapshot is None:
            config.refresh()
        # Defaults registered by modules first imported during this one (e.g.
        # distributed's) are not in the snapshot, and their modules will not
        # register them again: merge them back without overriding anything.
        for defaults in config.defaults:
            config.update(config.config, copy.deepcopy(defaults), priority="old")
