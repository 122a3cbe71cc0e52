"""Missing optional dependencies end in one line naming the extra that installs them (issue 15).

A dependency is made missing by ``sys.modules[name] = None`` (Python then
raises ModuleNotFoundError on import) or, for the data packages located
without importing them, by a ``find_spec`` that does not find them.
"""

from __future__ import annotations

import importlib.util
import sys

import pytest
from experiment_cli import experiment_main

from rankopt._optional import EXTRAS, MissingDependencyError, install_hint, package_dirs, require
from rankopt.cli import main


def hide(monkeypatch, *names):
    """Make ``names`` (and their submodules) impossible to import or find for the test."""
    for name in list(sys.modules):
        if name.split(".")[0] in names:
            monkeypatch.delitem(sys.modules, name)
    for name in names:
        monkeypatch.setitem(sys.modules, name, None)
    real_find_spec = importlib.util.find_spec

    def find_spec(name, package=None):
        if name.split(".")[0] in names:
            return None
        return real_find_spec(name, package)

    monkeypatch.setattr(importlib.util, "find_spec", find_spec)


def assert_one_line_hint(status, err, module, extra):
    assert status == 2
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("rankopt: error: ") and "Traceback" not in err
    assert f"needs {module}, which is not installed" in lines[0]
    assert f'pip install "rankopt[{extra}]"' in lines[0] and f'pip install ".[{extra}]"' in lines[0]


def test_hint_matches_the_readme_and_the_extras_of_pyproject():
    from pathlib import Path

    import tomllib

    root = Path(__file__).resolve().parents[1]
    extras = tomllib.loads((root / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    for module, extra in EXTRAS.items():
        assert extra in extras
        # Distribution names, as imported: pytorch-metric-learning is imported as pytorch_metric_learning.
        declared = {req.split(">")[0].split("[")[0].split("=")[0].strip().replace("-", "_") for req in extras[extra]}
        assert module in declared or (module in ("distributed",) and "dask" in declared), (module, extra)
    assert 'pip install ".[experiments]"' in (root / "README.md").read_text()
    assert install_hint("experiments") == (
        'pip install "rankopt[experiments]" (from a checkout of rankopt: pip install ".[experiments]")'
    )


def test_require_returns_the_module_or_raises_a_module_not_found_error_with_the_hint(monkeypatch):
    assert require("tqdm", purpose="p") is sys.modules["tqdm"]
    hide(monkeypatch, "lightgbm", "graphdatascience")
    with pytest.raises(MissingDependencyError) as excinfo:
        require("lightgbm", purpose="the baseline")
    assert isinstance(excinfo.value, ModuleNotFoundError)
    assert str(excinfo.value) == f"the baseline needs lightgbm, which is not installed: {install_hint('experiments')}"
    with pytest.raises(MissingDependencyError, match="needs graphdatascience"):
        package_dirs("graphdatascience", purpose="Cora")
    with pytest.raises(ValueError, match="expected an optional module"):
        require("numpy", purpose="p")


def test_a_module_missing_inside_an_installed_dependency_is_not_disguised(monkeypatch, tmp_path):
    package = tmp_path / "broken_dependency"
    package.mkdir()
    (package / "__init__.py").write_text("import no_such_module_inside\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(ModuleNotFoundError) as excinfo:
        require("broken_dependency", purpose="p", extra="demo")
    assert not isinstance(excinfo.value, MissingDependencyError)
    assert excinfo.value.name == "no_such_module_inside"


@pytest.mark.parametrize("module", ["matplotlib", "tqdm"])
def test_demo_without_its_extra(monkeypatch, capsys, tmp_path, module):
    hide(monkeypatch, module)
    status = main(["demo", "--quick", "--output-dir", str(tmp_path)])
    assert_one_line_hint(status, capsys.readouterr().err, module, "demo")


@pytest.mark.parametrize("module", ["pyarrow", "graphdatascience"])
def test_cora_without_its_data_packages(monkeypatch, capsys, module):
    hide(monkeypatch, module)
    status = experiment_main(["cora", "--quick"])
    assert_one_line_hint(status, capsys.readouterr().err, module, "experiments")


def test_latent_without_mil(monkeypatch, capsys):
    hide(monkeypatch, "mil")
    status = experiment_main(["latent", "--quick"])
    assert_one_line_hint(status, capsys.readouterr().err, "mil", "experiments")


def test_letor_without_lightgbm(monkeypatch, capsys):
    hide(monkeypatch, "lightgbm")
    status = experiment_main(["letor", "--quick"])
    assert_one_line_hint(status, capsys.readouterr().err, "lightgbm", "experiments")


@pytest.mark.parametrize("module", ["dask.array", "distributed"])
def test_dask_without_the_scale_extra(monkeypatch, module):
    from rankopt.data.dask_backend import import_dask

    hide(monkeypatch, module.split(".")[0])
    with pytest.raises(
        MissingDependencyError,
        match=r'needs (dask|distributed), which is not installed: pip install "rankopt\[scale\]"',
    ):
        import_dask(module)
