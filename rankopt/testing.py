"""Checks plugin authors run on their plugins, like scikit-learn's ``check_estimator``.

``check_plugin(plugin)`` registers a plugin on a fresh manager (which
enforces the cheap contract and unique names) and then runs
:func:`check_loss` on every loss it provides.  ``check_loss(loss)`` verifies
a rank loss the way rankopt's own losses are verified:

* the loss contract, C1 (Δ depends on the ±-pattern only) and C2
  (Σ_j δ_j(rank_j) = Δ, with delta_diff and any compiled form agreeing),
  through :func:`rankopt.check_qs_suitable`; C3/C4 failures are allowed and
  only restrict the exact methods (e.g. precision@k runs with "dp");
* the loss's identity: ``get_params`` names the ``__init__`` parameters,
  and a loss rebuilt from them (what ``sklearn.base.clone`` does) is equal
  to it and hashes alike — rankopt caches compiled tables and the C1–C4
  verdict under that identity; a loss whose parameters cannot be keyed is
  reported with a warning (it works, but nothing is cached for it);
* every registered inference method that declares itself exact for the
  loss returns the optimum found by enumerating all rankings of small
  instances, tied scores included — including the AP-specific kernels for
  a loss that declares AP's compiled form;
* for a graded loss, its declared structure
  (:meth:`~rankopt.losses.RankLoss.structure`): every method of it, over
  queries, returns the optimum :func:`brute_force_graded` finds among all
  orders of small queries with tied scores and grades, cutoffs at and
  beyond the query's length, and coefficients that give each tie group of
  equal score and grade one value; for a pair structure, every labelling
  of the pairs (:func:`brute_force_pairs`); for a loss that brings its own inference (a
  ``GradedQueryStructure``), its answers at many score vectors played against one another: none may beat
  another's at its scores, nor the ground truth's.

Both raise :class:`AssertionError` describing the first failure.
"""

from __future__ import annotations

import warnings

import numpy as np

from rankopt.inference.brute_force import brute_force_graded, brute_force_most_violated, brute_force_pairs
from rankopt.losses.base import LabelingLoss, Loss, RankLoss

__all__ = ["brute_force_graded", "brute_force_most_violated", "brute_force_pairs", "check_loss", "check_plugin"]


def check_loss(loss: Loss, *, n_instances: int = 40, random_state: int = 0, registry=None) -> None:
    """Verify a loss's contract and rankopt's inference on it; raise AssertionError on failure."""
    from rankopt.plugins import default_registry

    registry = default_registry() if registry is None else registry
    _check_identity(loss)
    if isinstance(loss, LabelingLoss):
        _check_labeling_loss(loss)
        return
    if not isinstance(loss, RankLoss):
        raise AssertionError(f"expected a RankLoss or LabelingLoss instance, got {loss!r}")
    from rankopt.losses.structure import declared_structure_problem

    problem = declared_structure_problem(loss)
    if problem is not None:
        raise AssertionError(f"loss {loss.name!r} declares a structure its own numbers contradict: {problem}")
    from rankopt.inference.structure_table import kernel_for, kernel_for_loss

    try:
        kernel, structure = kernel_for_loss(loss)
    except ValueError as exc:
        raise AssertionError(f"loss {loss.name!r}: {exc}") from None
    if kernel.graded:
        kernel.check(loss, structure, n_instances=10 * n_instances, random_state=random_state, registry=registry)
    from rankopt.inference.qs_check import check_qs_suitable

    report = check_qs_suitable(loss, random_state=random_state)
    if report.failed_condition in ("C1", "C2"):
        # C1 and C2 are every rank loss's contract; C3/C4 only decide which
        # methods are exact, and unsupported_reason below already applies them.
        raise AssertionError(f"loss {loss.name!r} breaks its contract: {report.message}")
    _check_value_at_positions(loss, np.random.default_rng(random_state))
    # Every loss's binary view (a graded loss's too), through the kernel of its binary structure.
    binary_structure = None if kernel.graded else structure
    kernel_for(binary_structure).check(
        loss, binary_structure, n_instances=n_instances, random_state=random_state, registry=registry
    )


def _check_identity(loss: Loss) -> None:
    """get_params names __init__'s parameters; a loss rebuilt from them equals it."""
    params = loss.get_params(deep=False)
    expected = sorted(type(loss)._param_names())
    if sorted(params) != expected:
        raise AssertionError(
            f"loss {loss.name!r}: get_params(deep=False) names {sorted(params)} but __init__ takes {expected}"
        )
    if loss.cache_key() is None:
        warnings.warn(
            f"loss {loss.name!r} cannot be keyed by its parameters {sorted(params)} (a parameter is not a "
            f"plain value, or __init__ takes *args/**kwargs): rankopt rebuilds its tables and reruns the "
            f"C1–C4 check at every inference call",
            UserWarning,
            stacklevel=3,
        )
        return
    rebuilt = type(loss)(**params)
    if rebuilt != loss or hash(rebuilt) != hash(loss):
        raise AssertionError(
            f"loss {loss.name!r}: {type(loss).__qualname__}(**get_params()) is not equal to the loss; store "
            f"every __init__ parameter unchanged under its own name (scikit-learn's convention)"
        )


def _check_value_at_positions(loss: RankLoss, rng: np.random.Generator) -> None:
    """value_at_positions (what inference calls) must equal value of the same pattern."""
    for n_pos, n_neg in ((1, 1), (1, 6), (6, 1), (3, 4), (5, 9)):
        for _ in range(4):
            pattern = np.zeros(n_pos + n_neg, dtype=bool)
            pattern[rng.choice(n_pos + n_neg, size=n_pos, replace=False)] = True
            positions = np.flatnonzero(pattern) + 1
            from_pattern = float(loss.value(pattern))
            from_positions = float(loss.value_at_positions(positions, n_neg))
            if not np.isclose(from_positions, from_pattern, rtol=1e-12, atol=1e-12):
                raise AssertionError(
                    f"loss {loss.name!r} breaks its contract: value_at_positions({positions.tolist()}, "
                    f"{n_neg}) = {from_positions!r} but value of that ±-pattern = {from_pattern!r}"
                )


def _check_labeling_loss(loss: LabelingLoss) -> None:
    rng = np.random.default_rng(0)
    for n in (2, 5, 20):
        y = np.zeros(n, dtype=bool)
        y[rng.choice(n, size=max(1, n // 3), replace=False)] = True
        weights = np.asarray(loss.sample_weights(y), dtype=float)
        if weights.shape != (n,) or not np.all(np.isfinite(weights)) or np.any(weights < 0):
            raise AssertionError(f"loss {loss.name!r}: sample_weights must be {n} finite non-negative values")
        if loss.value(y, y) != 0:
            raise AssertionError(f"loss {loss.name!r}: Δ(Y*, Y*) must be 0")


def check_plugin(plugin, name: str | None = None) -> None:
    """Register ``plugin`` on a fresh plugin manager and check every loss it provides (:func:`check_loss`).

    Parameters
    ----------
    plugin : module, object or str
        What implements the hooks (``@rankopt.hookimpl`` functions): a module, an object, or the dotted
        name of a module to import, e.g. ``check_plugin("rankopt_graded")``.
    name : str, optional
        The name to register it under (default: pluggy's, the module's or object's own).

    Raises
    ------
    AssertionError
        The first failure of a loss's checks, described.
    rankopt.exceptions.PluginContractError
        The plugin breaks a contract that registration enforces (a malformed loss class, a declared
        structure its own numbers contradict).
    """
    import importlib

    from rankopt.plugins import PluginKind, PluginRegistry, create_plugin_manager

    if isinstance(plugin, str):
        try:
            plugin = importlib.import_module(plugin)
        except ImportError as exc:
            raise ValueError(f"expected the name of an importable plugin module, got {plugin!r} ({exc})") from exc
    pm = create_plugin_manager(autoload=False)
    plugin_name = pm.register(plugin, name=name)
    registry = PluginRegistry(pm)
    for info in registry.list(PluginKind.LOSS):
        if info.provider == plugin_name:
            check_loss(info.cls(), registry=registry)
