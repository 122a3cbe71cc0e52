"""Plugin discovery: the plugin-manager factory and the registry built on it.

Nothing here runs at import time.  :func:`create_plugin_manager` builds a
manager, registers rankopt's built-in plugin modules with the same
``register`` call a third party's plugin goes through, then loads the
entry-point group ``rankopt`` (unless ``RANKOPT_DISABLE_PLUGIN_AUTOLOAD=1``).
:func:`default_registry` builds one such manager on first use and keeps it.

Registration validates the plugin at once: every class it contributes must
subclass the right base, carry a unique non-empty name and honour the cheap
parts of its contract; a plugin that fails is unregistered again and the
error names it.
"""

from __future__ import annotations

import enum
import functools
import importlib
import importlib.metadata
import inspect
import os
import warnings
from dataclasses import dataclass
from typing import cast

import numpy as np
import pluggy

from rankopt import hookspecs
from rankopt.exceptions import PluginContractError, PluginLoadWarning, brief
from rankopt.features.base import FeatureMap
from rankopt.inference.base import InferenceMethod
from rankopt.losses.base import LabelingLoss, Loss, RankLoss, loss_from_metric_name
from rankopt.models.base import Model

__all__ = [
    "BUILTIN_PLUGINS",
    "DuplicatePluginError",
    "PluginInfo",
    "PluginKind",
    "PluginRegistry",
    "RankoptPluginManager",
    "create_plugin_manager",
    "default_registry",
    "get_loss",
    "get_plugin_manager",
    "list_plugins",
]

ENTRY_POINT_GROUP = "rankopt"
AUTOLOAD_ENV = "RANKOPT_DISABLE_PLUGIN_AUTOLOAD"

#: rankopt's own plugins, registered by module exactly like third-party ones.
BUILTIN_PLUGINS = (
    "rankopt.losses.ap",
    "rankopt.losses.discount",
    "rankopt.losses.auc",
    "rankopt.losses.pairwise",
    "rankopt.losses.graded_ndcg",
    "rankopt.losses.precision",
    "rankopt.losses.zero_one",
    "rankopt.inference.greedy",
    "rankopt.inference.ap_methods",
    "rankopt.inference.qs",
    "rankopt.inference.topk",
    "rankopt.inference.general",
    "rankopt.features.linear",
    "rankopt.models.ranking",
    "rankopt.models.binary",
    "rankopt.features.high_order",
    "rankopt.models.high_order_plugin",
    "rankopt.models.latent_plugin",
)


class PluginKind(str, enum.Enum):
    """The extension points, each with its hook and the base class it accepts."""

    LOSS = "loss"
    FEATURE_MAP = "feature_map"
    MODEL = "model"
    INFERENCE_METHOD = "inference_method"

    @property
    def hook_name(self) -> str:
        return {
            PluginKind.LOSS: "rankopt_losses",
            PluginKind.FEATURE_MAP: "rankopt_feature_maps",
            PluginKind.MODEL: "rankopt_models",
            PluginKind.INFERENCE_METHOD: "rankopt_inference_methods",
        }[self]

    @property
    def base_class(self) -> type:
        return {
            PluginKind.LOSS: Loss,
            PluginKind.FEATURE_MAP: FeatureMap,
            PluginKind.MODEL: Model,
            PluginKind.INFERENCE_METHOD: InferenceMethod,
        }[self]


@dataclass(frozen=True)
class PluginInfo:
    """One registered piece: its name, kind, providing plugin and class."""

    name: str
    kind: PluginKind
    provider: str
    cls: type

    def __iter__(self):  # (name, kind, provider), convenient for tables
        return iter((self.name, self.kind.value, self.provider))


class DuplicatePluginError(ValueError):
    """Two plugins provide the same name for the same kind."""


class RankoptPluginManager(pluggy.PluginManager):
    """A pluggy manager that validates every plugin when it is registered."""

    def __init__(self):
        super().__init__(hookspecs.PROJECT_NAME)
        self.add_hookspecs(hookspecs)
        self._catalogue: dict[PluginKind, dict[str, PluginInfo]] | None = None
        #: Entry-point plugins that failed to load or register, by name, with the reason.
        self.skipped_plugins: dict[str, str] = {}

    def register(self, plugin, name=None):
        """Register ``plugin`` (a module or object with hook implementations) and validate it.

        A name or an object registered already is refused with a short
        ``ValueError`` (pluggy's own message lists every registered plugin,
        thousands of characters) that says how to replace it.
        """
        plugin_name = name or self.get_canonical_name(plugin)
        if self.is_registered(plugin):
            raise ValueError(
                f"expected a plugin not registered yet, got {_describe_plugin(plugin)} again (registered as "
                f"{self.get_name(plugin)!r}); it is already in use, there is nothing to do"
            )
        registered = self.get_plugin(plugin_name)
        if registered is not None:  # a blocked name has no plugin: pluggy returns None for it
            raise ValueError(
                f"expected a new plugin name, got {plugin_name!r}, already registered for "
                f"{_describe_plugin(registered)}; to replace it, first call "
                f"get_plugin_manager().unregister(name={plugin_name!r})"
            )
        plugin_name = super().register(plugin, name)
        if plugin_name is None:  # blocked
            return None
        if not self.get_hookcallers(plugin):
            super().unregister(plugin)
            raise PluginContractError(_no_hooks_message(plugin))
        self._catalogue = None
        try:
            self.catalogue()
        except Exception:
            self.unregister(plugin)
            raise
        return plugin_name

    def unregister(self, plugin=None, name=None):
        self._catalogue = None
        return super().unregister(plugin, name)

    def catalogue(self) -> dict[PluginKind, dict[str, PluginInfo]]:
        """Everything the registered plugins provide, validated, by kind and name."""
        if self._catalogue is None:
            self._catalogue = {kind: self._collect(kind) for kind in PluginKind}
        return self._catalogue

    def _collect(self, kind: PluginKind) -> dict[str, PluginInfo]:
        found: dict[str, PluginInfo] = {}
        for impl in getattr(self.hook, kind.hook_name).get_hookimpls():
            provider = impl.plugin_name
            try:
                contributed = impl.function()
            except Exception as exc:
                raise PluginContractError(f"plugin {provider!r}: its {kind.hook_name}() hook raised {exc!r}") from exc
            if not isinstance(contributed, (list, tuple)):
                raise PluginContractError(
                    f"plugin {provider!r}: expected {kind.hook_name}() to return a list of "
                    f"classes, got {type(contributed).__name__} instead"
                )
            for cls in contributed:
                info = _validate_class(kind, cls, provider)
                if info.name in found:
                    other = found[info.name]
                    raise DuplicatePluginError(
                        f"{kind.value} name {info.name!r} is provided by both plugin "
                        f"{other.provider!r} ({other.cls.__module__}.{other.cls.__qualname__}) and "
                        f"plugin {provider!r} ({cls.__module__}.{cls.__qualname__})"
                    )
                found[info.name] = info
        return found


def _describe_plugin(plugin) -> str:
    """A short name for a plugin object or module, for messages."""
    if isinstance(plugin, type(os)):
        return f"module {plugin.__name__}"
    if isinstance(plugin, type):
        return f"the class {plugin.__module__}.{plugin.__qualname__}"
    cls = type(plugin)
    return f"a {cls.__module__}.{cls.__qualname__} object"


def _validate_class(kind: PluginKind, cls, provider: str) -> PluginInfo:
    base = kind.base_class
    where = f"plugin {provider!r}"
    if not (isinstance(cls, type) and issubclass(cls, base)):
        raise PluginContractError(
            f"{where}: expected {kind.hook_name}() to list subclasses of "
            f"{base.__module__}.{base.__qualname__}, got {cls!r} instead"
        )
    name = getattr(cls, "name", "")
    if not isinstance(name, str) or not name:
        raise PluginContractError(f"{where}: {cls.__qualname__} needs a non-empty string `name`")
    try:
        instance = cls()
    except Exception as exc:
        raise PluginContractError(
            f"{where}: {kind.value} {name!r} ({cls.__qualname__}) cannot be constructed without arguments: {exc!r}"
        ) from exc
    if kind is PluginKind.LOSS:
        _smoke_test_loss(cast(Loss, instance), where)
    return PluginInfo(name, kind, provider, cls)


def _smoke_test_loss(loss: Loss, where: str) -> None:
    """The cheap part of a loss's contract, checked at registration."""
    label = f"{where}: loss {loss.name!r}"
    try:
        params = loss.get_params(deep=False)
        if not isinstance(params, dict):
            raise TypeError(f"it returned {type(params).__name__}")
        if sorted(params) != sorted(type(loss)._param_names()):
            raise TypeError(f"it names {sorted(params)} but __init__ takes {sorted(type(loss)._param_names())}")
    except Exception as exc:
        raise PluginContractError(
            f"{label}: expected get_params(deep=False) to return the constructor parameters as a dict "
            f"(scikit-learn's convention; rankopt derives it from __init__, so do not override it), "
            f"got {type(exc).__name__}: {brief(str(exc))} instead"
        ) from exc
    if isinstance(loss, RankLoss):
        _check_declared_structure(loss, label)
    try:
        if isinstance(loss, RankLoss):
            perfect = float(loss.value(np.array([True, True, False, False, False])))
            worst = float(loss.value(np.array([False, False, False, True, True])))
            j, i = np.array([1, 3]), np.array([1, 2])
            diff = np.asarray(loss.delta_diff(j, i, 2, 3), dtype=float)
        elif isinstance(loss, LabelingLoss):
            weights = np.asarray(loss.sample_weights(np.array([True, False, False])), dtype=float)
        else:
            raise PluginContractError(
                f"{label}: expected a RankLoss or LabelingLoss subclass, got {type(loss).__mro__[1].__name__}"
            )
    except PluginContractError:
        raise
    except Exception as exc:
        raise PluginContractError(
            f"{label} raised on a 5-sample smoke test: {type(exc).__name__}: {brief(str(exc))}"
        ) from exc
    if isinstance(loss, RankLoss):
        if diff.shape != j.shape:
            problem = (
                f"expected delta_diff(j, i, n_pos, n_neg) to return the broadcast shape {j.shape} of "
                f"j and i, got shape {diff.shape} instead (a constant derivative too: "
                f"np.full(np.broadcast_shapes(np.shape(j), np.shape(i)), value))"
            )
        elif not np.all(np.isfinite(diff)):
            problem = f"expected finite delta_diff values, got {diff.tolist()} instead"
        elif not (np.isfinite(perfect) and abs(perfect) < 1e-12):
            problem = f"expected Δ = 0 for the ground-truth pattern ++---, got {perfect!r} instead"
        elif not (np.isfinite(worst) and worst >= 0):
            problem = f"expected a finite Δ ≥ 0 for the pattern ---++, got {worst!r} instead"
        else:
            return
    else:
        if weights.shape != (3,):
            problem = f"expected sample_weights to return shape (3,) for 3 samples, got shape {weights.shape} instead"
        elif not (np.all(np.isfinite(weights)) and np.all(weights >= 0)):
            problem = f"expected finite non-negative sample_weights, got {weights.tolist()} instead"
        else:
            return
    raise PluginContractError(f"{label} broke its contract on a 5-sample smoke test: {problem}")


def _check_declared_structure(loss: RankLoss, label: str) -> None:
    """A rank loss's declared structure (:meth:`RankLoss.structure`), probed on small cases: refused with a
    counterexample when its own numbers contradict it."""
    from rankopt.inference.structure_table import kernel_for, registered_structures

    try:
        structure = loss.structure()
    except Exception as exc:
        raise PluginContractError(
            f"{label}: its declared structure could not be evaluated: {type(exc).__name__}: {brief(str(exc))}"
        ) from exc
    try:
        kernel_for(structure)
    except ValueError:
        raise PluginContractError(
            f"{label}: structure() returns a {type(structure).__qualname__}, which no kernel serves; expected "
            f"None or one of the registered structures ({', '.join(registered_structures())})"
        ) from None
    try:
        problem = None if structure is None else structure.contract_problem(loss)
    except Exception as exc:
        raise PluginContractError(
            f"{label}: its declared structure could not be evaluated: {type(exc).__name__}: {brief(str(exc))}"
        ) from exc
    if problem is not None:
        raise PluginContractError(
            f"{label} declares a {type(structure).__name__} that its own numbers contradict: {problem} "
            "(rankopt/losses/structure.py says what each structure promises)"
        )


def _no_hooks_message(plugin) -> str:
    """Why a plugin with no hook implementation is refused, naming the functions that lack ``@hookimpl``."""
    hooks = [kind.hook_name for kind in PluginKind]
    unmarked = [name for name in hooks if callable(getattr(plugin, name, None))]
    contributed = next(
        (kind for kind in PluginKind if isinstance(plugin, type) and issubclass(plugin, kind.base_class)), None
    )
    if unmarked:
        detail = f"it defines {unmarked} without marking them: decorate them with @rankopt.hookimpl"
    elif contributed is not None:
        detail = (
            f"a {contributed.value} class is not a plugin: return it from a function marked @rankopt.hookimpl "
            f"named {contributed.hook_name}, and register the module or object holding that function"
        )
    else:
        detail = f"mark the functions that return its classes with @rankopt.hookimpl (hooks: {hooks})"
    return f"expected a plugin implementing a rankopt hook, got {_describe_plugin(plugin)} with none; {detail}"


def create_plugin_manager(autoload: bool | None = None) -> RankoptPluginManager:
    """A new plugin manager holding the built-ins and, unless disabled, the entry points.

    Parameters
    ----------
    autoload : bool, optional
        Load the ``rankopt`` entry-point group.  Defaults to True unless the
        environment sets ``RANKOPT_DISABLE_PLUGIN_AUTOLOAD=1``.
    """
    pm = RankoptPluginManager()
    for module_name in BUILTIN_PLUGINS:
        pm.register(importlib.import_module(module_name), name=module_name)
    if autoload is None:
        autoload = os.environ.get(AUTOLOAD_ENV, "") in ("", "0")
    if autoload:
        _load_entry_points(pm)
    return pm


def _load_entry_points(pm: RankoptPluginManager) -> None:
    """Register every plugin of the ``rankopt`` entry-point group.

    A plugin that fails to import or to register is skipped with a
    :class:`~rankopt.exceptions.PluginLoadWarning` naming it: one broken
    installed package must not take the built-ins and the other plugins down
    with it.
    """
    for entry_point in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP):
        if pm.get_plugin(entry_point.name) is not None or pm.is_blocked(entry_point.name):
            continue
        distribution = entry_point.dist.name if entry_point.dist is not None else "unknown distribution"
        where = f"plugin {entry_point.name!r} (entry point {entry_point.value!r} of {distribution})"
        try:
            plugin = entry_point.load()
        except Exception as exc:
            _skip_plugin(pm, entry_point.name, f"{where} failed to import: {type(exc).__name__}: {brief(str(exc))}")
            continue
        try:
            pm.register(plugin, name=entry_point.name)
        except Exception as exc:
            _skip_plugin(pm, entry_point.name, f"{where} was refused: {brief(str(exc), 600)}")


def _skip_plugin(pm: RankoptPluginManager, name: str, reason: str) -> None:
    pm.skipped_plugins[name] = reason
    warnings.warn(
        f"{reason}; it was skipped (rankopt and its other plugins work without it). Fix or uninstall "
        f"it, or set {AUTOLOAD_ENV}=1 to load no entry-point plugins",
        PluginLoadWarning,
        stacklevel=3,
    )


class PluginRegistry:
    """Name lookups over a plugin manager's catalogue."""

    def __init__(self, plugin_manager: RankoptPluginManager):
        self.plugin_manager = plugin_manager

    def _lookup(self, kind: PluginKind, name: str) -> PluginInfo:
        available = self.plugin_manager.catalogue()[kind]
        if not isinstance(name, str) or name not in available:
            raise ValueError(f"unknown {kind.value} {name!r}: expected one of {sorted(available)}")
        return available[name]

    def list(self, kind: str | PluginKind | None = None) -> list[PluginInfo]:
        catalogue = self.plugin_manager.catalogue()
        kinds = list(PluginKind) if kind is None else [PluginKind(kind)]
        return [info for k in kinds for _, info in sorted(catalogue[k].items())]

    def get_loss(self, name: str, **params) -> Loss:
        cls = self._lookup(PluginKind.LOSS, name).cls
        unknown, accepted = _unknown_parameters(cls, params)
        if unknown:
            takes = f"takes {', '.join(accepted)}" if accepted else "takes no parameters"
            raise TypeError(
                f"expected keywords that the call or loss {name!r} takes, got {', '.join(map(repr, unknown))} "
                f"instead: keywords the call does not know go to the loss, which {takes}"
            )
        return cls(**params)

    def resolve_loss(self, loss, **loss_params) -> Loss:
        """A loss instance from a registered name (built with ``loss_params``) or an instance (with none): the
        one place where every front door (estimators, the hinge, the torch layer, the boosting objectives)
        turns what a user wrote into a loss.  A metric's name spells a loss with its cutoff: ``"ndcg@5"`` is
        ``"ndcg_graded"`` with ``k=5`` (:func:`rankopt.losses.base.loss_from_metric_name`)."""
        if isinstance(loss, Loss):
            if loss_params:
                raise ValueError(
                    f"expected loss parameters only with a loss name, got {sorted(loss_params)} with {loss!r}"
                )
            return loss
        if isinstance(loss, str):
            name, spelled = loss_from_metric_name(loss)
            twice = sorted(set(spelled) & set(loss_params))
            if twice:
                raise TypeError(
                    f"expected {', '.join(twice)} once, got it in the name {loss!r} and as a keyword instead"
                )
            return self.get_loss(name, **spelled, **loss_params)
        raise ValueError(f"expected loss to be a loss name or a Loss instance, got {loss!r} instead")

    def get_model(self, name: str) -> Model:
        return self._lookup(PluginKind.MODEL, name).cls()

    def get_feature_map(self, name: str) -> FeatureMap:
        return self._lookup(PluginKind.FEATURE_MAP, name).cls()

    def resolve_method(
        self, method: str, loss: RankLoss, n_pos: int | None = None, n_neg: int | None = None
    ) -> InferenceMethod:
        """The inference method named ``method`` (or the best for ``loss`` when "auto").

        With ``n_pos`` and ``n_neg``, the method must also be exact on a
        problem of that size (:meth:`InferenceMethod.unsupported_reason_at`).
        """

        def reason_against(candidate_method: InferenceMethod) -> str | None:
            if n_pos is None or n_neg is None:
                return candidate_method.unsupported_reason(loss)
            return candidate_method.unsupported_reason_at(loss, n_pos, n_neg)

        candidates = self._methods_fastest_first()
        if method == "auto":
            reasons = {}
            for candidate in candidates:  # fastest first; the first exact one wins
                reasons[candidate.name] = reason_against(candidate)
                if reasons[candidate.name] is None:
                    return candidate
            raise ValueError(
                f"no registered inference method is exact for loss {loss.name!r} ({_grouped_reasons(reasons)})"
            )
        try:
            resolved = self._lookup(PluginKind.INFERENCE_METHOD, method).cls()
        except ValueError:
            raise ValueError(
                f"unknown inference method {method!r}: expected 'auto' or one of "
                f"{sorted(self.plugin_manager.catalogue()[PluginKind.INFERENCE_METHOD])}"
            ) from None
        reason = reason_against(resolved)
        if reason is not None:
            exact = [other.name for other in candidates if other.name != method and reason_against(other) is None]
            remedy = (
                f"use method='auto' (it picks {exact[0]!r}) or one of {exact}"
                if exact
                else "no registered method is exact for this loss: check it with rankopt.testing.check_plugin"
            )
            raise ValueError(f"inference method {method!r} cannot be used with loss {loss.name!r}: {reason}; {remedy}")
        return resolved

    def inference_methods(self) -> tuple[InferenceMethod, ...]:
        """Every registered inference method, in the order "auto" tries them."""
        return self._methods_fastest_first()

    def _methods_fastest_first(self) -> tuple[InferenceMethod, ...]:
        """Every registered inference method, in the order "auto" tries them."""
        methods = (info.cls() for info in self.list(PluginKind.INFERENCE_METHOD))
        return tuple(sorted(methods, key=lambda m: (m.auto_priority, m.name)))

    def explain_method(self, method: str, loss: RankLoss, n_pos: int | None = None, n_neg: int | None = None) -> str:
        """Why ``method`` (resolved) runs for ``loss``: asked for, or "auto" and why each faster method did not."""
        resolved = self.resolve_method(method, loss, n_pos, n_neg)
        if method != "auto":
            return f"{resolved.name!r}, as asked"
        skipped = {}
        for candidate in self._methods_fastest_first():
            if candidate.name == resolved.name:
                break
            reason = (
                candidate.unsupported_reason(loss)
                if n_pos is None or n_neg is None
                else candidate.unsupported_reason_at(loss, n_pos, n_neg)
            )
            skipped[candidate.name] = reason
        return f"{resolved.name!r}" + (f", since {_grouped_reasons(skipped)}" if skipped else ", the fastest")


def _grouped_reasons(reasons: dict) -> str:
    """``{method: reason}`` as "a, b: reason; c: other reason", each reason once."""
    by_reason: dict[str, list[str]] = {}
    for name, reason in reasons.items():
        by_reason.setdefault(brief(str(reason), 200), []).append(name)
    return "; ".join(f"{', '.join(names)}: {reason}" for reason, names in by_reason.items())


@functools.cache
def default_registry() -> PluginRegistry:
    """The registry of the default plugin manager, built on first use."""
    return PluginRegistry(create_plugin_manager())


def get_plugin_manager() -> RankoptPluginManager:
    """The default plugin manager; ``register`` on it to add a plugin at run time."""
    return default_registry().plugin_manager


def _unknown_parameters(cls, params: dict) -> tuple[list[str], list[str]]:
    """(the keywords of ``params`` that ``cls(...)`` does not take, the ones it takes); none unknown when it
    takes ``**kwargs`` or has no signature to read."""
    try:
        signature = inspect.signature(cls)
    except (TypeError, ValueError):  # pragma: no cover - a builtin without a signature
        return [], []
    taken = signature.parameters.values()
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in taken):
        return [], []
    names = [p.name for p in taken if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)]
    return sorted(k for k in params if k not in names), names


def get_loss(name: str, **params) -> Loss:
    """An instance of the registered loss ``name`` built with ``params``."""
    return default_registry().get_loss(name, **params)


def list_plugins(kind: str | PluginKind | None = None) -> list[PluginInfo]:
    """Every registered piece as (name, kind, provider), optionally of one kind."""
    return default_registry().list(kind)
