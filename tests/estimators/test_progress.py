"""``verbose=True`` prints progress in a plain script; quiet by default; one implementation for every estimator."""

from __future__ import annotations

import logging
import subprocess
import sys
import textwrap
import warnings
from contextlib import contextmanager

import numpy as np
import pytest

from rankopt import HOAPSVM, HOBSVM, LatentAPSVM, RankSVM
from rankopt.engine.certificate import IterationRecord
from rankopt.estimators import progress
from rankopt.estimators.progress import IterationProgress, verbose_logging
from rankopt.exceptions import ConvergenceWarning

SCRIPT = textwrap.dedent(
    """
    import logging, sys, warnings
    import numpy as np
    from rankopt import HOAPSVM, LatentAPSVM, RankSVM

    rng = np.random.default_rng(0)
    X = rng.normal(size=(40, 3))
    y = (X[:, 0] + 0.3 * rng.normal(size=40) > 0).astype(int)
    warnings.simplefilter("ignore")

    def mark(text):
        print(f"=== {text}", file=sys.stderr, flush=True)

    mark("quiet")
    RankSVM().fit(X, y)
    mark("rank_svm")
    model = RankSVM(verbose=True).fit(X, y)
    print("n_iter", model.n_iter_)
    mark("early")
    RankSVM(C=100.0, tol=1e-8, early_stopping_patience=1, verbose=True).fit(X, y, eval_set=(X, 1 - y))
    mark("hoap")
    HOAPSVM(C=10.0, cccp_max_iter=2, max_iter=30, verbose=True).fit(X[:20], y[:20], groups=np.arange(20) // 4)
    mark("latent")
    bags = [rng.normal(size=(2, 3)) for _ in range(8)]
    LatentAPSVM(n_init=1, random_state=0, cccp_max_iter=2, verbose=True).fit(bags, np.arange(8) % 2)
    mark("after")
    package = logging.getLogger("rankopt")
    print("handlers", len(package.handlers), "level", package.level)
    """
)


@pytest.fixture(scope="module")
def plain_script_run(tmp_path_factory):
    # Run away from the checkout: `python -c` puts the working directory first on sys.path, and
    # the source tree's rankopt has no compiled kernels when the package is installed, not editable.
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path_factory.mktemp("plain_script"),
    )
    assert done.returncode == 0, done.stderr
    sections = {}
    for block in done.stderr.split("=== ")[1:]:
        name, _, body = block.partition("\n")
        sections[name] = body.splitlines()
    return done.stdout, sections


def test_quiet_by_default(plain_script_run):
    _, sections = plain_script_run
    assert sections["quiet"] == []


def test_verbose_prints_every_iteration_in_a_plain_script(plain_script_run):
    stdout, sections = plain_script_run
    n_iter = int(stdout.split("n_iter ")[1].split()[0])
    lines = sections["rank_svm"]
    iterations = [line for line in lines if line.startswith("RankSVM iteration ")]
    assert len(iterations) == n_iter
    assert iterations[0].startswith("RankSVM iteration 1: primal ")
    assert ", gap " in iterations[0] and ", violation " in iterations[0]
    assert any(line.startswith("cutting plane converged after") for line in lines)


def test_verbose_shows_the_validation_score_and_the_early_stop(plain_script_run):
    _, sections = plain_script_run
    lines = sections["early"]
    assert lines[0].startswith("RankSVM: inference for loss 'ap': 'qs'")  # the method first (issue 38.14)
    assert lines[1].startswith("RankSVM iteration 1: primal") and ", map on valid_0 " in lines[1]
    stop = [line for line in lines if line.startswith("RankSVM stopped early after ")]
    assert len(stop) == 1 and "map on valid_0 did not improve for 1 iterations; keeping iteration " in stop[0]
    assert "whose duality gap is " in stop[0]


def test_verbose_cccp_shows_its_steps(plain_script_run):
    _, sections = plain_script_run
    hoap = sections["hoap"]
    assert any(line.startswith("HOBSVM iteration 1: primal") for line in hoap)  # the HOB-SVM start
    # solve_cccp hands the callback to every inner solve: their iterations, labelled with the step
    assert any(line.startswith("HOAPSVM CCCP step 1 iteration 1: primal") for line in hoap)
    assert any(line.startswith("HOAPSVM CCCP step 2 iteration 1: primal") for line in hoap)
    assert any(line.startswith("CCCP step 1: J ") for line in hoap)  # the engine's step summary
    latent = sections["latent"]
    assert any(line.startswith("LatentAPSVM init 0 CCCP step 1 iteration 1: primal") for line in latent)
    assert any(line.startswith("CCCP step 1: J ") for line in latent)
    assert any(line.startswith("LatentAPSVM init 0: objective") for line in latent)


def test_logging_is_left_as_it_was(plain_script_run):
    stdout, sections = plain_script_run
    assert "handlers 0 level 0" in stdout
    assert sections["after"] == []


# ------------------------------------------------------------------ the context manager, in process


@contextmanager
def _as_in_a_plain_script():
    """The ``rankopt`` logger with no handler on it or above it, as in a plain script.

    pytest attaches its capture handlers for every test phase, so this runs
    inside the test body, not in a fixture.
    """
    package = logging.getLogger("rankopt")
    saved = package.propagate, package.level, list(package.handlers)
    package.propagate = False
    package.setLevel(logging.NOTSET)
    for handler in saved[2]:
        package.removeHandler(handler)
    try:
        yield package
    finally:
        package.propagate, package.level = saved[0], saved[1]
        for handler in saved[2]:
            package.addHandler(handler)


def test_verbose_logging_attaches_a_stderr_handler_only_for_the_block(capsys):
    with _as_in_a_plain_script() as package:
        with verbose_logging(True):
            assert package.getEffectiveLevel() == logging.INFO
            assert len(package.handlers) == 1
            logging.getLogger("rankopt.estimators.progress").info("visible")
            with verbose_logging(True):  # a nested verbose fit adds nothing
                assert len(package.handlers) == 1
        assert package.handlers == [] and package.level == logging.NOTSET
    assert capsys.readouterr().err == "visible\n"


def test_verbose_logging_undoes_everything_on_an_error():
    with _as_in_a_plain_script() as package:
        with pytest.raises(RuntimeError):
            with verbose_logging(True):
                raise RuntimeError
        assert package.handlers == [] and package.level == logging.NOTSET


def test_not_verbose_changes_nothing():
    with _as_in_a_plain_script() as package:
        with verbose_logging(False):
            assert package.handlers == [] and package.level == logging.NOTSET


def test_verbose_logging_uses_configured_handlers(caplog):
    package = logging.getLogger("rankopt")
    handlers = list(package.handlers)
    with verbose_logging(True):
        assert package.handlers == handlers  # pytest's handlers on the root logger take the records
        logging.getLogger("rankopt.estimators.progress").info("to the configured handler")
    assert "to the configured handler" in caplog.text


# ------------------------------------------------------------------ the one iteration callback


def _record(iteration):
    return IterationRecord(iteration, 1.5, 1.0, 0.5, 0.25, iteration, 0.0)


def test_cccp_lines_count_the_steps_from_the_inner_restarts(caplog):
    callback = IterationProgress("HOAPSVM", verbose=True, cccp=True)
    with caplog.at_level(logging.INFO, logger="rankopt"):
        for iteration in (1, 2, 1):
            assert not callback(_record(iteration), np.zeros(2))
    assert [r.getMessage().split(":")[0] for r in caplog.records] == [
        "HOAPSVM CCCP step 1 iteration 1",
        "HOAPSVM CCCP step 1 iteration 2",
        "HOAPSVM CCCP step 2 iteration 1",
    ]
    assert caplog.records[0].getMessage() == "HOAPSVM CCCP step 1 iteration 1: primal 1.5, gap 0.5, violation 0.25"


def test_one_implementation():
    import rankopt.estimators.high_order as high_order
    import rankopt.estimators.rank_svm as rank_svm

    assert not hasattr(rank_svm, "_log_iteration") and not hasattr(high_order, "_log_iteration")
    assert progress.IterationProgress is IterationProgress


# ------------------------------------------------------------------ every estimator, through caplog


def test_hob_svm_verbose_logs_every_iteration(rng, caplog):
    X = rng.normal(size=(30, 3))
    y = X[:, 0] > 0
    with caplog.at_level(logging.INFO, logger="rankopt"):
        model = HOBSVM(C=10.0, verbose=True).fit(X, y, groups=np.arange(30) // 3)
    lines = [r for r in caplog.records if r.getMessage().startswith("HOBSVM iteration ")]
    assert len(lines) == model.n_iter_


def test_estimators_are_quiet_by_default(rng, caplog):
    X = rng.normal(size=(20, 3))
    y = (X[:, 0] > 0).astype(int)
    y[:2] = [1, 0]
    with caplog.at_level(logging.DEBUG, logger="rankopt"), warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        RankSVM().fit(X, y)
        HOAPSVM(C=10.0, cccp_max_iter=1, max_iter=20).fit(X, y)
        LatentAPSVM(n_init=1, random_state=0, cccp_max_iter=1).fit([row[None] for row in X], y)
    assert not [
        r
        for r in caplog.records
        if " iteration " in r.getMessage() and r.levelno >= logging.INFO and r.name == "rankopt.estimators.progress"
    ]


@pytest.mark.parametrize("cls", [LatentAPSVM])
def test_latent_verbose_is_a_parameter(cls):
    assert cls(verbose=True).get_params()["verbose"] is True
    assert cls().verbose is False


def test_verbose_names_the_inference_method_before_the_iterations(caplog):
    """Issue 38, point 14: the method's line came after the verbose block, so verbose never showed it."""
    import logging

    import numpy as np

    import rankopt

    rng = np.random.default_rng(0)
    X = rng.normal(size=(30, 3))
    with caplog.at_level(logging.INFO, logger="rankopt"):
        model = rankopt.RankSVM(loss="precision_at_k", verbose=True).fit(X, X[:, 0] > 0)
    messages = [record.getMessage() for record in caplog.records if record.name.startswith("rankopt")]
    first = next(i for i, m in enumerate(messages) if "inference for loss 'precision_at_k': 'topk'" in m)
    assert all("iteration" not in m for m in messages[:first])
    assert model.inference_ == "topk"
