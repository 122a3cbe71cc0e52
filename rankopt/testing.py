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

import itertools
import warnings

import numpy as np

from rankopt.losses.base import LabelingLoss, Loss, RankLoss

__all__ = ["brute_force_graded", "brute_force_most_violated", "brute_force_pairs", "check_loss", "check_plugin"]


def brute_force_most_violated(loss: RankLoss, pos_scores, neg_scores) -> float:
    """max_R w·Ψ(X, R) + Δ(R*, R) by enumerating every ordering (tiny inputs only)."""
    pos = np.asarray(pos_scores, dtype=np.float64)
    neg = np.asarray(neg_scores, dtype=np.float64)
    n_pos, n_neg = pos.size, neg.size
    if n_pos + n_neg > 9:
        raise ValueError(f"expected at most 9 samples for enumeration, got {n_pos + n_neg} instead")
    best = -np.inf
    for positions in itertools.combinations(range(n_pos + n_neg), n_pos):
        pattern = np.zeros(n_pos + n_neg, dtype=bool)
        pattern[list(positions)] = True
        pattern_loss = float(loss.value(pattern))
        # Which positive / negative fills which slot of the pattern.
        for pos_perm in itertools.permutations(range(n_pos)):
            for neg_perm in itertools.permutations(range(n_neg)):
                rank = np.empty(n_pos + n_neg, dtype=np.int64)
                rank[np.flatnonzero(pattern)] = pos_perm
                rank[np.flatnonzero(~pattern)] = np.asarray(neg_perm) + n_pos
                order = np.empty(n_pos + n_neg, dtype=np.int64)
                order[rank] = np.arange(n_pos + n_neg)  # order[sample] = position
                above = order[:n_pos, None] < order[None, n_pos:]
                R = np.where(above, 1.0, -1.0)
                score = float(np.sum(R * (pos[:, None] - neg[None, :]))) / (n_pos * n_neg)
                best = max(best, score + pattern_loss)
    return best


def brute_force_graded(structure, scores, grades) -> float:
    """max_π Σ_{π(i) ≤ k'} A(π(i)) s_i + Δ(π) over every order of one query, from a position structure's definition.

    ``structure`` is a :class:`~rankopt.losses.structure.GradedPositionStructure`;
    Δ(π) = 1 − Σ_{j ≤ k'} D(j) G(g_{π⁻¹(j)}) / IDCG and A = D / Σ_{j ≤ k'} D(j).
    At most 8 documents.
    """
    scores = np.asarray(scores, dtype=np.float64)
    if scores.size > 8:
        raise ValueError(f"expected at most 8 documents for enumeration, got {scores.size} instead")
    gains = structure.gains(np.asarray(grades))
    discount = structure.position_weights(scores.size)
    weights = discount / discount.sum()
    ideal = float(np.sort(gains)[::-1][: discount.size] @ discount)
    best = -np.inf
    for order in itertools.permutations(range(scores.size)):  # order[j]: the document at position j + 1
        top = list(order[: discount.size])
        best = max(best, float(weights @ scores[top]) + 1.0 - float(discount @ gains[top]) / ideal)
    return best


def check_loss(loss: Loss, *, n_instances: int = 40, random_state: int = 0, registry=None) -> None:
    """Verify a loss's contract and rankopt's inference on it; raise AssertionError on failure."""
    from rankopt.plugins import PluginKind, default_registry

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
    if loss.graded:
        _check_graded_loss(loss, n_instances=10 * n_instances, random_state=random_state, registry=registry)
    from rankopt.losses.qs_check import check_qs_suitable

    report = check_qs_suitable(loss, random_state=random_state)
    if report.failed_condition in ("C1", "C2"):
        # C1 and C2 are every rank loss's contract; C3/C4 only decide which
        # methods are exact, and unsupported_reason below already applies them.
        raise AssertionError(f"loss {loss.name!r} breaks its contract: {report.message}")
    _check_value_at_positions(loss, np.random.default_rng(random_state))
    methods = [info.cls() for info in registry.list(PluginKind.INFERENCE_METHOD)]
    exact = [m for m in methods if m.unsupported_reason(loss) is None]
    if not exact:
        raise AssertionError(f"no registered inference method is exact for loss {loss.name!r}")
    from rankopt.inference.base import most_violated_ranking

    rng = np.random.default_rng(random_state)
    for _ in range(n_instances):
        n_pos, n_neg = int(rng.integers(1, 4)), int(rng.integers(1, 4))
        # A coarse grid makes ties between and within classes common.
        pos = rng.integers(-2, 3, n_pos) / 2.0
        neg = rng.integers(-2, 3, n_neg) / 2.0
        expected = brute_force_most_violated(loss, pos, neg)
        for method in exact:
            got = most_violated_ranking(loss, pos, neg, method.name, registry=registry)
            if not np.isclose(got.value, expected, rtol=1e-9, atol=1e-12):
                raise AssertionError(
                    f"method {method.name!r} on loss {loss.name!r}: objective {got.value!r} but "
                    f"enumeration finds {expected!r} for pos={pos.tolist()}, neg={neg.tolist()}"
                )


def _check_graded_loss(loss: RankLoss, *, n_instances: int, random_state: int, registry) -> None:
    """Every method of the declared structure against enumeration, over queries of 1–6 documents."""
    from rankopt.inference.batched import graded_structure, most_violated_rankings
    from rankopt.losses.structure import GradedPositionStructure, GradedQueryStructure

    try:
        structure = graded_structure(loss)
    except ValueError as exc:
        raise AssertionError(f"graded loss {loss.name!r}: {exc}") from None
    if isinstance(structure, GradedQueryStructure):
        _check_own_inference(loss, n_instances=n_instances // 10, random_state=random_state, registry=registry)
        return
    if not isinstance(structure, GradedPositionStructure):
        _check_pair_structure(loss, structure, n_instances=n_instances, random_state=random_state, registry=registry)
        return
    rng = np.random.default_rng(random_state)
    sizes = rng.integers(1, 7, n_instances)
    offsets = np.concatenate(([0], np.cumsum(sizes)))
    # Coarse grids: ties among scores, among grades, and of both at once.
    scores = rng.integers(-2, 3, offsets[-1]) / 2.0
    grades = rng.integers(0, 4, offsets[-1])
    for method in structure.methods:
        result = most_violated_rankings(loss, scores, grades, offsets, method, registry=registry)
        for q in range(sizes.size):
            s, g = scores[offsets[q] : offsets[q + 1]], grades[offsets[q] : offsets[q + 1]]
            coef = result.coef[offsets[q] : offsets[q + 1]]
            gains = structure.gains(g)
            if gains.max() == gains.min():
                if result.usable[q] or np.any(coef != 0):
                    raise AssertionError(f"method {method!r} on loss {loss.name!r}: query {q} has nothing to order")
                continue
            expected = brute_force_graded(structure, s, g)
            if not np.isclose(result.values[q], expected, rtol=1e-9, atol=1e-12) or not np.isclose(
                coef @ s + result.losses[q], result.values[q], rtol=1e-9, atol=1e-12
            ):
                raise AssertionError(
                    f"method {method!r} on graded loss {loss.name!r}: objective {result.values[q]!r} but "
                    f"enumeration finds {expected!r} for scores={s.tolist()}, grades={g.tolist()}"
                )
            for score, grade in set(zip(s.tolist(), g.tolist(), strict=True)):
                tied = coef[(s == score) & (g == grade)]
                if np.any(tied != tied[0]):
                    raise AssertionError(
                        f"method {method!r} on graded loss {loss.name!r}: documents of equal score and grade get "
                        f"coefficients {tied.tolist()}; a tie group shares its positions' mean"
                    )


def brute_force_pairs(structure, scores, grades) -> float:
    """max over every labelling y of the pairs g_i > g_j of Σ w_ij (y_ij (s_i − s_j) + [y_ij = −1]) / Σ w_ij.

    ``structure`` is a :class:`~rankopt.losses.structure.GradedPairStructure`; at most 10 pairs.
    """
    scores = np.asarray(scores, dtype=np.float64)
    grades = np.asarray(grades, dtype=np.int64)
    pairs = [(i, j) for i in range(grades.size) for j in range(grades.size) if grades[i] > grades[j]]
    if len(pairs) > 10:
        raise ValueError(f"expected at most 10 pairs for enumeration, got {len(pairs)} instead")
    levels = np.unique(grades)
    matrix = structure.weight_matrix(levels)
    level = {int(g): t for t, g in enumerate(levels)}
    weights = [matrix[level[int(grades[i])], level[int(grades[j])]] for i, j in pairs]
    best = -np.inf
    for signs in itertools.product((1.0, -1.0), repeat=len(pairs)):
        total = sum(
            w * (y * (scores[i] - scores[j]) + (y < 0)) for (i, j), y, w in zip(pairs, signs, weights, strict=True)
        )
        best = max(best, total / sum(weights))
    return best


def _check_pair_structure(loss: RankLoss, structure, *, n_instances: int, random_state: int, registry) -> None:
    """The pairs' kernel against enumeration of every labelling, on queries of 2–5 documents with ties."""
    from rankopt.inference.batched import most_violated_rankings

    rng = np.random.default_rng(random_state)
    sizes = rng.integers(2, 6, n_instances)
    offsets = np.concatenate(([0], np.cumsum(sizes)))
    scores = rng.integers(-2, 3, offsets[-1]) / 2.0  # ties, and differences of exactly 1/2
    grades = rng.integers(0, 4, offsets[-1])
    result = most_violated_rankings(loss, scores, grades, offsets, registry=registry)
    for q in range(sizes.size):
        s, g = scores[offsets[q] : offsets[q + 1]], grades[offsets[q] : offsets[q + 1]]
        n_pairs = int(np.sum(g[:, None] > g[None, :]))
        if not result.usable[q] or n_pairs > 10:
            continue
        expected = brute_force_pairs(structure, s, g)
        if not np.isclose(result.values[q], expected, rtol=1e-9, atol=1e-12):
            raise AssertionError(
                f"graded loss {loss.name!r}: objective {result.values[q]!r} but enumeration of the labellings "
                f"finds {expected!r} for scores={s.tolist()}, grades={g.tolist()}"
            )


#: Score vectors per query whose answers :func:`_check_own_inference` plays against one another.
_CROSS_SCORES = 12


def _check_own_inference(loss: RankLoss, *, n_instances: int, random_state: int, registry) -> None:
    """A loss that brings its own one-query inference (a ``GradedQueryStructure``), checked by its answers.

    Its output space is its own, so nothing is enumerated; instead the hinge's definition is used.  The
    answer at scores s is the maximum over every output of Δ + c·s, so (1) it is at least the ground
    truth's value c*·s (Δ = 0 there), (2) no answer found at other scores s' beats it when evaluated at s,
    and (3) its value is Δ + c·s with Δ finite and ≥ 0.  An inexact inference shows up as an answer at
    one score vector that another score vector's answer beats.  Queries of 1–5 documents, tied scores
    and grades.
    """
    from rankopt.inference.batched import ground_truth_coefficients, most_violated_rankings

    rng = np.random.default_rng(random_state)
    for _ in range(max(n_instances, 1)):
        n = int(rng.integers(1, 6))
        grades = rng.integers(0, 3, n)
        offsets = np.array([0, n])
        truth = ground_truth_coefficients(loss, grades, offsets, registry=registry)
        candidates = [rng.integers(-2, 3, n) / 2.0 for _ in range(_CROSS_SCORES // 2)]
        candidates += [rng.normal(size=n) for _ in range(_CROSS_SCORES - len(candidates))]
        answers = []
        for scores in candidates:
            result = most_violated_rankings(loss, scores, grades, offsets, registry=registry)
            coef, delta, value = result.coef, float(result.losses[0]), float(result.values[0])
            where = f"loss {loss.name!r} (its own inference) at scores={scores.tolist()}, grades={grades.tolist()}"
            if not result.usable[0]:
                continue
            if not (np.all(np.isfinite(coef)) and np.isfinite(delta) and delta >= 0.0):
                raise AssertionError(f"{where}: expected finite coefficients and Δ >= 0, got {coef.tolist()}, {delta}")
            if not np.isclose(value, float(coef @ scores) + delta, rtol=1e-9, atol=1e-12):
                raise AssertionError(f"{where}: value {value!r} is not Δ + c·s = {float(coef @ scores) + delta!r}")
            if value < float(truth @ scores) - 1e-9 * max(1.0, abs(value)):
                raise AssertionError(f"{where}: value {value!r} is below the ground truth's {float(truth @ scores)!r}")
            answers.append((scores, coef, delta, value))
        for scores, _, _, value in answers:
            better = max((float(c @ scores) + d for _, c, d, _ in answers), default=-np.inf)
            if better > value + 1e-9 * max(1.0, abs(value)):
                raise AssertionError(
                    f"loss {loss.name!r} (its own inference) is not exact: at scores={scores.tolist()}, "
                    f"grades={grades.tolist()} it returns value {value!r}, but an output it returned at other "
                    f"scores reaches {better!r} there"
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
