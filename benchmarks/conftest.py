"""Options shared by the benchmarks: the problem-size scale.

``--bench-scale`` (or the environment variable ``RANKOPT_BENCH_SCALE``)
chooses the sizes the benchmark modules parametrise over:

* ``small`` (the default) — a handful of tiny sizes, so that the test suite
  and CI exercise every benchmark in a few seconds (with
  ``--benchmark-disable`` each runs once) and the benchmarks cannot rot;
* ``full`` — the sweeps of Mohapatra et al. (2018) Figs. 1–2 up to |N| = 10⁶ and
  the digits training runs; minutes of run time.  Ask for it explicitly.
"""

import os

import pytest

SCALES = ("small", "full")
SCALE_ENV = "RANKOPT_BENCH_SCALE"


def pytest_addoption(parser):
    parser.addoption(
        "--bench-scale",
        action="store",
        default=None,
        choices=SCALES,
        help=f"problem sizes for benchmarks/: small or full (default: ${SCALE_ENV}, else small)",
    )


def bench_scale(config) -> str:
    """The scale chosen on the command line, else by the environment, else "small"."""
    scale = config.getoption("--bench-scale", default=None) or os.environ.get(SCALE_ENV) or "small"
    if scale not in SCALES:
        raise pytest.UsageError(f"expected {SCALE_ENV} to be one of {SCALES}, got {scale!r} instead")
    return scale


def pytest_configure(config):
    config.rankopt_bench_scale = bench_scale(config)


def pytest_report_header(config):
    return f"rankopt benchmarks: scale={config.rankopt_bench_scale} (--bench-scale / ${SCALE_ENV})"
