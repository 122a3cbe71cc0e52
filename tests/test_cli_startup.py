"""``rankopt --version``, ``--help`` and ``plugins`` import no heavy module (issue 15).

Their start-up time is measured in benchmarks/bench_cli_startup.py; here the
reason for it is checked without timing anything: the modules a command
imports, listed by a fresh interpreter after running it.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile

import pytest

#: Top-level packages none of the light commands may import.
HEAVY_PACKAGES = ("sklearn", "matplotlib", "pandas", "joblib", "lightgbm", "dask", "tqdm", "clarabel", "daqp")
#: rankopt's own heavy modules: the estimators, the solvers, the experiments' runners.
HEAVY_MODULES = (
    "rankopt.estimators.rank_svm",
    "rankopt.estimators.high_order",
    "rankopt.estimators.latent",
    "rankopt.models.high_order",
    "rankopt.models.latent",
    "rankopt.engine.cutting_plane",
    "rankopt.engine.cccp",
    "rankopt.engine.qp",
    "scipy.stats",
)

PROBE = """
import json, sys
from rankopt.cli import main
try:
    main({argv!r})
except SystemExit:
    pass
print("MODULES=" + json.dumps(sorted(sys.modules)))
"""


def _modules_after(argv: list[str]) -> set[str]:
    done = subprocess.run(
        [sys.executable, "-c", PROBE.format(argv=argv)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tempfile.gettempdir(),
    )
    assert done.returncode == 0, done.stderr
    line = [line for line in done.stdout.splitlines() if line.startswith("MODULES=")][-1]
    return set(json.loads(line[len("MODULES=") :]))


@pytest.mark.parametrize(
    "argv",
    [["--version"], ["--help"], ["plugins"], ["demo", "--help"], ["train", "a.svm", "m.npz", "-c", "10"]],
    ids=" ".join,
)
def test_light_commands_import_no_heavy_module(argv):
    modules = _modules_after(argv)
    heavy = sorted(m for m in modules if m.split(".")[0] in HEAVY_PACKAGES or m in HEAVY_MODULES)
    assert heavy == [], f"rankopt {' '.join(argv)} imported {heavy}"


def test_import_rankopt_is_light_and_its_names_load_on_first_access():
    probe = (
        "import sys, rankopt; before = 'sklearn' in sys.modules; "
        "from rankopt import RankSVM, HOAPSVM, LatentAPSVM, solve_cutting_plane, ConvergenceWarning; "
        "import sklearn.exceptions; "
        "assert ConvergenceWarning is sklearn.exceptions.ConvergenceWarning; "
        "assert set(rankopt.__all__) <= set(dir(rankopt)); "
        "print(before, RankSVM.__module__)"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=120, cwd=tempfile.gettempdir()
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["False", "rankopt.estimators.rank_svm"]


def test_unknown_attribute_of_a_lazy_package_is_an_attribute_error():
    import rankopt
    import rankopt.data
    import rankopt.engine
    import rankopt.exceptions

    for module in (rankopt, rankopt.data, rankopt.engine, rankopt.exceptions):
        with pytest.raises(AttributeError, match="no_such_name"):
            module.no_such_name  # noqa: B018


def test_estimators_and_model_plugins_live_apart():
    import rankopt
    from rankopt import estimators, models

    assert rankopt.RankSVM is estimators.RankSVM and rankopt.HOAPSVM is estimators.HOAPSVM
    assert not hasattr(models, "RankSVM")
    assert sorted(estimators.__all__) == [
        "HOAPSVM",
        "HOBSVM",
        "LatentAPSVM",
        "LatentSSVM",
        "LatentSVM",
        "RankSVM",
        "RankSVMCV",
    ]


def test_submodules_are_reachable_after_import_rankopt_alone():
    """``import rankopt; rankopt.metrics.ndcg_at_k(...)`` raised AttributeError in a fresh process (issue 22)."""
    probe = (
        "import sys, rankopt\n"
        "assert 'sklearn' not in sys.modules and 'rankopt.metrics' not in sys.modules\n"
        "print(rankopt.metrics.ndcg_at_k([1, 0], [0.5, 0.1]), rankopt.data.fetch_mslr_sample.__name__)\n"
        "print(all(hasattr(rankopt, name) for name in rankopt.SUBMODULES), 'metrics' in dir(rankopt))\n"
    )
    with tempfile.TemporaryDirectory() as outside:  # not the checkout: the installed package
        done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, cwd=outside)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["1.0", "fetch_mslr_sample", "True", "True"]


FIT_PROBE = """
import json, sys
import numpy as np
import rankopt
X = np.random.default_rng(0).standard_normal((40, 3))
rankopt.RankSVM(C=1.0).fit(X, (X[:, 0] > 0).astype(int), qid=np.repeat(np.arange(4), 10))
print("MODULES=" + json.dumps(sorted(sys.modules)))
"""


def test_a_ranking_fit_pays_for_no_graph_library():
    """Issue 31: loading the built-in plugins in a fit imported networkx (the high-order feature map's
    graph checks); it is imported only where a graph is built."""
    done = subprocess.run(
        [sys.executable, "-c", FIT_PROBE], capture_output=True, text=True, timeout=120, cwd=tempfile.gettempdir()
    )
    assert done.returncode == 0, done.stderr
    line = [line for line in done.stdout.splitlines() if line.startswith("MODULES=")][-1]
    assert "networkx" not in set(json.loads(line[len("MODULES=") :]))


def test_python_in_an_unbuilt_checkout_says_why_it_cannot_import(tmp_path):
    """Issue 61, point 22: the README's quickstart run from the checkout folder failed with "No module named
    'rankopt.inference._observation'" deep in a fit; the source folder shadows the installed package."""
    import shutil
    from pathlib import Path

    import rankopt

    source = Path(rankopt.__file__).parent
    checkout = tmp_path / "checkout"
    shutil.copytree(source, checkout / "rankopt", ignore=shutil.ignore_patterns("*.so", "*.pyd", "__pycache__"))
    (checkout / "setup.py").write_text("# the checkout's build script\n")
    light = subprocess.run(
        [sys.executable, "-c", "import rankopt; print(rankopt.__version__)"],
        capture_output=True,
        text=True,
        cwd=checkout,
    )
    assert light.returncode == 0, light.stderr  # import rankopt and --version stay light: nothing compiled needed
    done = subprocess.run(
        [sys.executable, "-c", "import rankopt; rankopt.RankSVM"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=checkout,
    )
    assert done.returncode == 1
    assert "rankopt is being imported from its source folder" in done.stderr and "cd .." in done.stderr
    built = subprocess.run([sys.executable, "-c", "import rankopt"], capture_output=True, text=True, cwd=tmp_path)
    assert built.returncode == 0, built.stderr  # elsewhere, the installed package
