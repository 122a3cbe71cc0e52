"""The plugin system: listing, lookups, run-time registration, validation, entry points.

Entry-point discovery is tested for real: the throwaway package in
``tests/data/throwaway_plugin`` is pip-installed (no network, no build
isolation) into a temporary directory, and fresh interpreters with that
directory on PYTHONPATH must find it through ``importlib.metadata`` exactly
as they would find an installed package.  Installing into a temporary
target rather than the running environment keeps the environment untouched
(other test runs sharing it never see the throwaway loss, and an
interrupted run leaves nothing behind).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

import numpy as np
import pytest
from oracles.brute_force import all_objectives, auc_loss, ndcg_loss

import rankopt
from rankopt import hookimpl
from rankopt.api import most_violated_ranking
from rankopt.engine import solve_cutting_plane
from rankopt.exceptions import PluginLoadWarning
from rankopt.losses import APLoss, NDCGLoss, PositionDiscountLoss, RankLoss
from rankopt.plugins import (
    AUTOLOAD_ENV,
    BUILTIN_PLUGINS,
    DuplicatePluginError,
    PluginContractError,
    PluginKind,
    PluginRegistry,
    default_registry,
)

THROWAWAY_SOURCE = Path(__file__).parent / "data" / "throwaway_plugin"
THROWAWAY_LOSS = "throwaway_auc"


# ---------------------------------------------------------------- test plugins


class ReciprocalRankDiscountLoss(PositionDiscountLoss):
    """A position-discount loss with D(i) = 1/i (convex, decreasing)."""

    name = "test_reciprocal_discount"

    def discount(self, positions):
        return 1.0 / np.asarray(positions, dtype=np.float64)


class HalfAUCLoss(RankLoss):
    """Half the ROC-area loss, with no compiled form (Python inference path)."""

    name = "test_half_auc"

    def value(self, pattern):
        return 0.5 * auc_loss(list(pattern))

    def delta(self, j, i, n_pos, n_neg):
        j, i = np.broadcast_arrays(np.asarray(j, dtype=np.float64), np.asarray(i, dtype=np.float64))
        return 0.5 * (n_pos + 1.0 - i) / (n_pos * n_neg)


ORACLE_LOSSES = {
    ReciprocalRankDiscountLoss.name: lambda pattern: ndcg_loss(pattern, discount=lambda i: 1.0 / i),
    HalfAUCLoss.name: lambda pattern: 0.5 * auc_loss(pattern),
}


class LossPlugin:
    """A plugin object contributing the given classes through ``rankopt_losses``."""

    def __init__(self, *classes):
        self.classes = list(classes)

    @hookimpl
    def rankopt_losses(self):
        return self.classes


class FeatureMapPlugin:
    def __init__(self, *classes):
        self.classes = list(classes)

    @hookimpl
    def rankopt_feature_maps(self):
        return self.classes


class RaisingPlugin:
    @hookimpl
    def rankopt_losses(self):
        raise RuntimeError("boom")


class NonListPlugin:
    @hookimpl
    def rankopt_losses(self):
        return HalfAUCLoss  # the class itself, not a list of classes


@contextlib.contextmanager
def registered(pm, plugin, name):
    """Register ``plugin`` on ``pm`` for the duration of the block, and always remove it."""
    pm.register(plugin, name=name)
    try:
        yield plugin
    finally:
        pm.unregister(plugin)


def tiny_data(rng, n_pos=6, n_neg=14, d=4):
    X = rng.normal(size=(n_pos + n_neg, d))
    X[:n_pos] += 1.0
    y = np.zeros(n_pos + n_neg, dtype=int)
    y[:n_pos] = 1
    return X, y


# --------------------------------------------------------------- listing, lookup

EXPECTED_BUILTINS = {
    ("ap", "loss", "rankopt.losses.ap"),
    ("ndcg", "loss", "rankopt.losses.discount"),
    ("auc", "loss", "rankopt.losses.auc"),
    ("zero_one", "loss", "rankopt.losses.zero_one"),
    ("linear", "feature_map", "rankopt.features.linear"),
    ("ranking", "model", "rankopt.models.ranking"),
    ("binary", "model", "rankopt.models.binary"),
    ("greedy", "inference_method", "rankopt.inference.greedy"),
}


def test_list_plugins_lists_the_builtins_with_providers():
    listed = {tuple(info) for info in rankopt.list_plugins()}
    assert EXPECTED_BUILTINS <= listed, EXPECTED_BUILTINS - listed
    for info in rankopt.list_plugins():
        assert issubclass(info.cls, info.kind.base_class)
        assert info.cls.name == info.name


def test_list_plugins_by_kind():
    losses = rankopt.list_plugins("loss")
    assert {"ap", "ndcg", "auc", "zero_one"} <= {info.name for info in losses}
    assert all(info.kind is PluginKind.LOSS for info in losses)
    assert [tuple(i) for i in rankopt.list_plugins(PluginKind.LOSS)] == [tuple(i) for i in losses]
    names = [info.name for info in losses]
    assert names == sorted(names)
    with pytest.raises(ValueError):
        rankopt.list_plugins("no-such-kind")


def test_get_loss():
    loss = rankopt.get_loss("ndcg")
    assert isinstance(loss, NDCGLoss)
    assert rankopt.get_loss("zero_one", J=2.0).J == 2.0
    with pytest.raises(ValueError, match=r"unknown loss 'no-such-loss': expected one of \[.*'ap'"):
        rankopt.get_loss("no-such-loss")


# ---------------------------------------------------- no manager at import time


def run_python(code, *, env_extra=None, drop=(), pythonpath=None):
    env = dict(os.environ)
    for key in drop:
        env.pop(key, None)
    env.update(env_extra or {})
    if pythonpath is not None:
        env["PYTHONPATH"] = os.pathsep.join([str(pythonpath)] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    completed = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tempfile.gettempdir(),  # the checkout itself would shadow the installed package
    )
    assert completed.returncode == 0, f"subprocess failed:\n{completed.stdout}\n{completed.stderr}"
    return json.loads(completed.stdout.strip().splitlines()[-1])


def test_importing_rankopt_builds_no_plugin_manager():
    result = run_python(
        """
        import json, sys
        import pluggy

        created = []
        original_init = pluggy.PluginManager.__init__

        def spy(self, *args, **kwargs):
            created.append(type(self).__name__)
            original_init(self, *args, **kwargs)

        pluggy.PluginManager.__init__ = spy
        import rankopt
        import rankopt.plugins
        after_import = (rankopt.plugins.default_registry.cache_info().currsize, list(created))
        rankopt.list_plugins()
        after_use = (rankopt.plugins.default_registry.cache_info().currsize, list(created))
        print(json.dumps({"after_import": after_import, "after_use": after_use}))
        """
    )
    assert result["after_import"] == [0, []]
    assert result["after_use"] == [1, ["RankoptPluginManager"]]


# ---------------------------------------------------------- run-time registration


@pytest.mark.parametrize("loss_cls", [ReciprocalRankDiscountLoss, HalfAUCLoss])
def test_loss_registered_on_a_new_manager_is_listed_and_usable(rng, loss_cls):
    pm = rankopt.create_plugin_manager()
    pm.register(LossPlugin(loss_cls), name="test-plugin")
    registry = PluginRegistry(pm)

    infos = {info.name: info for info in registry.list(PluginKind.LOSS)}
    assert infos[loss_cls.name].provider == "test-plugin"
    assert infos[loss_cls.name].cls is loss_cls
    assert isinstance(registry.get_loss(loss_cls.name), loss_cls)

    # loss-augmented inference with it is exact (brute force over all 7! rankings)
    pos, neg = rng.normal(size=3), rng.normal(size=4)
    result = most_violated_ranking(loss_cls.name, pos, neg, registry=registry)
    best = np.max(all_objectives(ORACLE_LOSSES[loss_cls.name], pos, neg)[1])
    assert result.value == pytest.approx(best, abs=1e-12)

    # and a ranking model trains with it
    X, y = tiny_data(rng)
    problem = registry.get_model("ranking").build_problem(
        X, y.astype(bool), registry.get_loss(loss_cls.name), registry.get_feature_map("linear"), registry=registry
    )
    assert solve_cutting_plane(problem, 1.0).converged

    # the default registry is a different manager and does not see it
    assert loss_cls.name not in {info.name for info in rankopt.list_plugins("loss")}
    with pytest.raises(ValueError, match="unknown loss"):
        rankopt.get_loss(loss_cls.name)


@pytest.mark.parametrize("loss_cls", [ReciprocalRankDiscountLoss, HalfAUCLoss])
def test_loss_registered_on_the_default_manager_trains_a_ranksvm(rng, loss_cls):
    pm = rankopt.get_plugin_manager()
    X, y = tiny_data(rng)
    with registered(pm, LossPlugin(loss_cls), "test-default-plugin"):
        assert loss_cls.name in {info.name for info in rankopt.list_plugins("loss")}
        model = rankopt.RankSVM(loss=loss_cls.name).fit(X, y)
        assert model.converged_ and model.loss_.name == loss_cls.name
        assert isinstance(rankopt.get_loss(loss_cls.name), loss_cls)
    assert loss_cls.name not in {info.name for info in rankopt.list_plugins("loss")}
    with pytest.raises(ValueError, match="unknown loss"):
        rankopt.RankSVM(loss=loss_cls.name).fit(X, y)


def test_python_path_loss_trains_like_its_compiled_twin(rng):
    """HalfAUC (Python inference path) at C is AUC (compiled kernel) at 2C, with w halved.

    ½‖w‖² + C max(½Δ − w·g) at w = v/2 equals ¼ (½‖v‖² + 2C max(Δ − v·g)).
    """
    X, y = tiny_data(rng)
    C, tol = 2.0, 1e-7
    pm = rankopt.get_plugin_manager()
    with registered(pm, LossPlugin(HalfAUCLoss), "test-default-plugin"):
        half = rankopt.RankSVM(loss=HalfAUCLoss.name, C=C, tol=tol).fit(X, y)
    full = rankopt.RankSVM(loss="auc", C=2 * C, tol=tol).fit(X, y)
    # both are ε-optimal, ε = C·tol: ‖w − w*‖ ≤ sqrt(2ε) for each
    np.testing.assert_allclose(half.coef_, full.coef_ / 2, atol=2 * np.sqrt(2 * 2 * C * tol), rtol=0)


# ----------------------------------------------------------------- duplicates


def test_duplicate_of_a_builtin_name_is_rejected_naming_both_providers():
    pm = rankopt.create_plugin_manager(autoload=False)

    class ImpostorAP(APLoss):
        name = "ap"

    plugin = LossPlugin(ImpostorAP)
    with pytest.raises(DuplicatePluginError) as excinfo:
        pm.register(plugin, name="impostor-plugin")
    message = str(excinfo.value)
    assert "'rankopt.losses.ap'" in message and "'impostor-plugin'" in message and "'ap'" in message
    assert not pm.is_registered(plugin) and pm.get_plugin("impostor-plugin") is None
    assert PluginRegistry(pm).list(PluginKind.LOSS)  # still usable
    assert type(PluginRegistry(pm).get_loss("ap")) is APLoss


def test_duplicate_between_two_third_party_plugins_names_both():
    pm = rankopt.create_plugin_manager(autoload=False)

    class Twin(HalfAUCLoss):
        pass

    pm.register(LossPlugin(HalfAUCLoss), name="first-plugin")
    second = LossPlugin(Twin)
    with pytest.raises(DuplicatePluginError, match=r"'first-plugin'.*'second-plugin'|'second-plugin'.*'first-plugin'"):
        pm.register(second, name="second-plugin")
    assert not pm.is_registered(second)
    assert PluginRegistry(pm).list(PluginKind.LOSS)
    assert type(PluginRegistry(pm).get_loss(HalfAUCLoss.name)) is HalfAUCLoss


def test_duplicate_plugin_error_is_a_value_error():
    assert issubclass(DuplicatePluginError, ValueError)


def test_registering_a_name_again_gives_a_short_message_and_keeps_the_first():
    pm = rankopt.create_plugin_manager(autoload=False)
    first = LossPlugin(HalfAUCLoss)
    pm.register(first, name="my-plugin")
    with pytest.raises(ValueError) as excinfo:
        pm.register(LossPlugin(HalfAUCLoss), name="my-plugin")  # re-running a notebook cell
    message = str(excinfo.value)
    assert len(message) < 300 and "\n" not in message  # pluggy's lists every plugin: 2,000+ characters
    assert "'my-plugin', already registered" in message and "unregister(name='my-plugin')" in message
    assert pm.get_plugin("my-plugin") is first
    pm.unregister(name="my-plugin")
    pm.register(LossPlugin(HalfAUCLoss), name="my-plugin")  # as the message says


class _UnmarkedPlugin:
    """Defines the hook's function but forgot @hookimpl."""

    def rankopt_losses(self):
        return [HalfAUCLoss]


@pytest.mark.parametrize(
    "plugin, message",
    [
        (
            HalfAUCLoss,
            "got the class .*HalfAUCLoss with none; a loss class is not a plugin: return it from a "
            "function marked @rankopt.hookimpl named rankopt_losses",
        ),
        (_UnmarkedPlugin(), r"defines \['rankopt_losses'\] without marking them: decorate them with @rankopt.hookimpl"),
        (object(), "mark the functions that return its classes with @rankopt.hookimpl"),
    ],
)
def test_a_plugin_without_hook_implementations_is_refused_naming_hookimpl(plugin, message):
    """Such a plugin was accepted silently; RankSVM(loss="top") then said only "unknown loss"."""
    pm = rankopt.create_plugin_manager(autoload=False)
    with pytest.raises(PluginContractError, match=message):
        pm.register(plugin, name="forgot")
    assert pm.get_plugin("forgot") is None


def test_registering_the_same_object_twice_gives_a_short_message():
    pm = rankopt.create_plugin_manager(autoload=False)
    plugin = LossPlugin(HalfAUCLoss)
    pm.register(plugin, name="one")
    with pytest.raises(
        ValueError,
        match=r"^expected a plugin not registered yet, got .*LossPlugin object again "
        r"\(registered as 'one'\)",
    ) as excinfo:
        pm.register(plugin, name="two")
    assert len(str(excinfo.value)) < 300
    with pytest.raises(ValueError, match="module rankopt.losses.ap again"):
        pm.register(sys.modules["rankopt.losses.ap"], name="again")


# -------------------------------------------------------- contract violations


class _EmptyName(HalfAUCLoss):
    name = ""


class _NeedsArgs(HalfAUCLoss):
    name = "test_needs_args"

    def __init__(self, k):
        self.k = k


class _NonzeroPerfect(HalfAUCLoss):
    name = "test_nonzero_perfect"

    def value(self, pattern):
        return 0.5 + super().value(pattern)


class _NaNDiff(HalfAUCLoss):
    name = "test_nan_diff"

    def delta_diff(self, j, i, n_pos, n_neg):
        return np.full(np.shape(i), np.nan)


class _RaisingValue(HalfAUCLoss):
    name = "test_raising_value"

    def value(self, pattern):
        raise ZeroDivisionError("no")


class _ScalarDiff(HalfAUCLoss):
    """Issue 14, case 5: a constant derivative returned as a scalar."""

    name = "test_scalar_diff"

    def delta_diff(self, j, i, n_pos, n_neg):
        return np.float64(-0.5 / (n_pos * n_neg))


class _WrongParams(HalfAUCLoss):
    name = "test_wrong_params"

    def __init__(self, p=0.5):
        self.p = p

    def get_params(self, deep=True):
        return {}


class _GetParamsWithoutDeep(HalfAUCLoss):
    name = "test_get_params_without_deep"

    def get_params(self):  # scikit-learn's signature is get_params(deep=True)
        return {}


BROKEN_PLUGINS = {
    "get-params-without-deep": (
        lambda: LossPlugin(_GetParamsWithoutDeep),
        r"get_params\(deep=False\).*TypeError.*unexpected keyword argument 'deep'",
    ),
    "scalar-delta-diff": (lambda: LossPlugin(_ScalarDiff), r"broadcast shape \(2,\) of j and i, got shape \(\)"),
    "get-params-not-the-init-parameters": (
        lambda: LossPlugin(_WrongParams),
        r"get_params\(deep=False\).*names \[\] but __init__ takes \['p'\]",
    ),
    "not-a-subclass": (lambda: LossPlugin(int), r"subclasses of rankopt\.losses\.base\.Loss"),
    "an-instance-not-a-class": (lambda: LossPlugin(HalfAUCLoss()), r"subclasses of rankopt\.losses\.base\.Loss"),
    "wrong-kind": (lambda: FeatureMapPlugin(HalfAUCLoss), r"subclasses of rankopt\.features\.base\.FeatureMap"),
    "empty-name": (lambda: LossPlugin(_EmptyName), r"needs a non-empty string `name`"),
    "constructor-needs-args": (lambda: LossPlugin(_NeedsArgs), r"cannot be constructed without arguments"),
    "nonzero-perfect-loss": (lambda: LossPlugin(_NonzeroPerfect), r"expected Δ = 0 for the ground-truth"),
    "nan-delta-diff": (lambda: LossPlugin(_NaNDiff), r"broke its contract"),
    "raising-loss": (lambda: LossPlugin(_RaisingValue), r"raised on a 5-sample smoke test"),
    "hook-raises": (RaisingPlugin, r"rankopt_losses\(\) hook raised RuntimeError\('boom'\)"),
    "hook-returns-non-list": (NonListPlugin, r"to return a list of classes, got ABCMeta instead"),
}


@pytest.mark.parametrize("case", sorted(BROKEN_PLUGINS))
def test_broken_plugin_is_rejected_at_registration_and_not_left_registered(case):
    make, pattern = BROKEN_PLUGINS[case]
    pm = rankopt.create_plugin_manager(autoload=False)
    before = {tuple(info) for info in PluginRegistry(pm).list()}
    plugin = make()
    with pytest.raises(PluginContractError, match=pattern) as excinfo:
        pm.register(plugin, name=f"broken-{case}")
    assert f"plugin 'broken-{case}'" in str(excinfo.value)
    assert not pm.is_registered(plugin) and pm.get_plugin(f"broken-{case}") is None
    assert {tuple(info) for info in PluginRegistry(pm).list()} == before


def test_plugin_contract_error_is_a_type_error():
    assert issubclass(PluginContractError, TypeError)


def test_broken_plugin_on_the_default_manager_leaves_it_working(rng):
    pm = rankopt.get_plugin_manager()
    plugin = LossPlugin(_NonzeroPerfect)
    with pytest.raises(PluginContractError, match="broken-default"):
        pm.register(plugin, name="broken-default")
    assert not pm.is_registered(plugin)
    X, y = tiny_data(rng)
    assert rankopt.RankSVM().fit(X, y).converged_


# ------------------------------------------------------------------ entry points


@pytest.fixture(scope="session")
def throwaway_site(tmp_path_factory):
    """The throwaway package pip-installed into a temporary site directory.

    The source is copied first so that the in-tree build leaves no build/ or
    egg-info behind in the repository.  Removed again at teardown.
    """
    root = tmp_path_factory.mktemp("throwaway")
    source = root / "src"
    shutil.copytree(THROWAWAY_SOURCE, source)
    site = root / "site"
    completed = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--no-deps",
            "--no-build-isolation",
            "--no-index",
            "--disable-pip-version-check",
            "-q",
            "--target",
            str(site),
            str(source),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert completed.returncode == 0, f"pip install failed:\n{completed.stdout}\n{completed.stderr}"
    yield site
    shutil.rmtree(root, ignore_errors=True)


ENTRY_POINT_PROBE = """
    import importlib.metadata, json, sys
    import rankopt
    imported_at_import = "rankopt_throwaway_plugin" in sys.modules
    entry_points = sorted(ep.value for ep in importlib.metadata.entry_points(group="rankopt"))
    losses = {info.name: info.provider for info in rankopt.list_plugins("loss")}
    out = {
        "imported_at_import": imported_at_import,
        "entry_points": entry_points,
        "losses": losses,
        "version": importlib.metadata.version("rankopt-throwaway-plugin"),
    }
"""


def test_entry_point_plugin_is_listed_and_trains(throwaway_site):
    result = run_python(
        ENTRY_POINT_PROBE
        + """
    from sklearn.datasets import load_digits
    X, target = load_digits(return_X_y=True)
    X, y = X[:200] / 16.0, (target[:200] == 3).astype(int)
    model = rankopt.RankSVM(loss="throwaway_auc", tol=1e-6).fit(X, y)
    builtin = rankopt.RankSVM(loss="auc", tol=1e-6).fit(X, y)
    out["converged"] = model.converged_
    out["loss_module"] = type(model.loss_).__module__
    out["max_coef_diff"] = float(abs(model.coef_ - builtin.coef_).max())
    out["coef_scale"] = float(abs(builtin.coef_).max())
    print(json.dumps(out))
    """,
        drop=(AUTOLOAD_ENV,),
        pythonpath=throwaway_site,
    )
    assert "rankopt_throwaway_plugin" in result["entry_points"]
    assert result["version"] == "0.0.1"
    assert result["imported_at_import"] is False  # entry points load on first use only
    assert THROWAWAY_LOSS in result["losses"]
    assert result["losses"][THROWAWAY_LOSS] == "throwaway"  # pluggy names it after the entry point
    assert result["converged"] is True
    assert result["loss_module"] == "rankopt_throwaway_plugin"
    # the same loss through the Python inference path trains the same w as the compiled one
    assert result["max_coef_diff"] <= 1e-6 * max(1.0, result["coef_scale"])


def test_autoload_can_be_disabled_by_the_environment(throwaway_site):
    result = run_python(
        ENTRY_POINT_PROBE
        + """
    try:
        rankopt.RankSVM(loss="throwaway_auc").fit([[0.0], [1.0]], [0, 1])
        out["fit_error"] = None
    except ValueError as exc:
        out["fit_error"] = str(exc)
    from rankopt.plugins import PluginRegistry
    forced = PluginRegistry(rankopt.create_plugin_manager(autoload=True))
    out["forced"] = [info.name for info in forced.list("loss")]
    print(json.dumps(out))
    """,
        env_extra={AUTOLOAD_ENV: "1"},
        pythonpath=throwaway_site,
    )
    # installed and visible to importlib.metadata, yet not loaded
    assert "rankopt_throwaway_plugin" in result["entry_points"]
    assert THROWAWAY_LOSS not in result["losses"]
    assert {"ap", "ndcg", "auc", "zero_one"} <= set(result["losses"])
    assert "unknown loss 'throwaway_auc'" in result["fit_error"]
    # an explicit autoload=True overrides the environment
    assert THROWAWAY_LOSS in result["forced"]


def test_create_plugin_manager_without_autoload_skips_entry_points():
    pm = rankopt.create_plugin_manager(autoload=False)
    providers = {info.provider for info in PluginRegistry(pm).list()}
    assert providers <= set(BUILTIN_PLUGINS)


def test_case5_scalar_delta_diff_error_names_the_shape_only():
    pm = rankopt.create_plugin_manager(autoload=False)
    with pytest.raises(PluginContractError) as excinfo:
        pm.register(LossPlugin(_ScalarDiff), name="scalar")
    message = str(excinfo.value)
    assert "shape" in message and "Δ(perfect)" not in message and "expected Δ = 0" not in message


# ------------------------------------------------- broken entry-point plugins (issue 14, case 8)


class _BrokenContractModule:
    @hookimpl
    def rankopt_losses(self):
        return [_NonzeroPerfect]


class _GoodModule:
    @hookimpl
    def rankopt_losses(self):
        return [HalfAUCLoss]


@pytest.fixture
def broken_entry_points(monkeypatch):
    """Three installed entry points: one failing to import, one breaking the contract, one fine."""
    import importlib.metadata
    import types

    modules = {"rankopt_test_broken_contract": _BrokenContractModule(), "rankopt_test_good": _GoodModule()}
    for module_name, plugin in modules.items():
        module = types.ModuleType(module_name)
        module.rankopt_losses = plugin.rankopt_losses
        monkeypatch.setitem(sys.modules, module_name, module)
    points = [
        importlib.metadata.EntryPoint("broken-import", "rankopt_test_no_such_module", "rankopt"),
        importlib.metadata.EntryPoint("broken-contract", "rankopt_test_broken_contract", "rankopt"),
        importlib.metadata.EntryPoint("good", "rankopt_test_good", "rankopt"),
    ]
    real = importlib.metadata.entry_points
    monkeypatch.setattr(
        importlib.metadata, "entry_points", lambda **kw: points if kw.get("group") == "rankopt" else real(**kw)
    )
    default_registry.cache_clear()
    yield
    default_registry.cache_clear()


def test_broken_entry_point_plugins_are_skipped_with_a_warning(broken_entry_points):
    with pytest.warns(PluginLoadWarning) as record:
        pm = rankopt.create_plugin_manager(autoload=True)
    messages = [str(w.message) for w in record]
    assert len(messages) == 2
    assert any("'broken-import'" in m and "failed to import" in m for m in messages)
    assert any("'broken-contract'" in m and "expected Δ = 0" in m for m in messages)
    assert all(AUTOLOAD_ENV in m and len(m) < 1200 for m in messages)
    assert set(pm.skipped_plugins) == {"broken-import", "broken-contract"}
    names = {info.name for info in PluginRegistry(pm).list(PluginKind.LOSS)}
    assert {"ap", "ndcg", "auc", "zero_one", HalfAUCLoss.name} <= names
    assert _NonzeroPerfect.name not in names


def test_builtins_and_the_plugins_command_survive_a_broken_entry_point(broken_entry_points, capsys):
    from rankopt.cli import main

    with pytest.warns(PluginLoadWarning):
        assert most_violated_ranking("ap", [1.0, 0.0], [0.5]).value >= 0
    assert main(["plugins"]) == 0
    out = capsys.readouterr().out
    assert "ap" in out and HalfAUCLoss.name in out and _NonzeroPerfect.name not in out
