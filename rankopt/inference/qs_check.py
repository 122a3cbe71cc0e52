"""Checking a rank loss against the QS-suitability conditions C1–C4 (Mohapatra et al. (2018) §4.1).

The inference methods rely on these conditions:

* C1 and C2 make loss-augmented inference a choice of one interleaving rank
  per negative (Observations 1–3) — every exact method needs them;
* C3 makes the per-negative maximisers monotone (Observation 4), which the
  greedy and the quicksort-flavoured methods need to be exact;
* C4 keeps the quicksort-flavoured method within O(|N| log |P|).

:func:`check_qs_suitable` tests the conditions numerically on small problem
sizes, stops at the first one that fails and reports a counterexample.  The
inference methods call :func:`unsupported_reason`, which runs the check once
per loss (cached on the loss's parameters) and returns the failure message
when a condition the method needs fails, and :func:`size_unsupported_reason`,
which reads what the grid cannot show from the loss's compiled form for the
size of a call (a discount table that bends down beyond position 26).
"""

from __future__ import annotations

import itertools
import numbers
import time
import warnings
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from rankopt.exceptions import brief
from rankopt.inference._qs import compiled_delta_diff
from rankopt.losses.base import KernelCode, KeyedCache, RankLoss, checked_delta_diff

__all__ = [
    "CONDITIONS",
    "QSReport",
    "QSSuitabilityError",
    "QSViolation",
    "check_qs_suitable",
    "size_unsupported_reason",
    "unsupported_reason",
]

#: The conditions, in the order they are checked.
CONDITIONS = ("C1", "C2", "C3", "C4")

DEFAULT_N_POS_GRID = (1, 2, 3, 5, 8, 13)
DEFAULT_N_NEG_GRID = (1, 2, 3, 5, 8, 13)

#: Random ±-patterns drawn per problem size for C1 and C2.
_N_PATTERNS = 8
#: Agreement tolerance between two computations of the same quantity.
_RTOL, _ATOL = 1e-9, 1e-12
#: C4: problem sizes compared, evaluations per timing, allowed slow-down.
_C4_SMALL = 10
_C4_LARGE = (1_000, 10_000, 100_000)
_C4_CALLS, _C4_BATCH, _C4_REPEATS, _C4_FACTOR = 32, 32, 3, 10.0


class QSSuitabilityError(ValueError):
    """A loss fails one of the QS-suitability conditions."""


@dataclass(frozen=True)
class QSViolation:
    """The first condition a loss fails, with a counterexample.

    Attributes
    ----------
    condition : str
        "C1", "C2", "C3" or "C4".
    message : str
        What fails, with the numbers of the counterexample.
    counterexample : mapping
        The problem size and the witnesses, e.g. for C3 ``n_pos``, ``n_neg``,
        ``j``, ``i``, ``lhs`` = δ_{j+1}(i+1) − δ_{j+1}(i) and
        ``rhs`` = δ_j(i+1) − δ_j(i).
    """

    condition: str
    message: str
    counterexample: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class QSReport:
    """Outcome of :func:`check_qs_suitable`.

    Attributes
    ----------
    loss : RankLoss
    passed : tuple of str
        The conditions that held, in order.
    violation : QSViolation or None
        The first failing condition; the later ones were not checked.
    notes : tuple of str
        How conditions were established (e.g. C4 through a compiled form).
    """

    loss: RankLoss
    passed: tuple[str, ...]
    violation: QSViolation | None
    notes: tuple[str, ...] = ()

    @property
    def suitable(self) -> bool:
        """True when all of C1–C4 hold."""
        return self.violation is None

    def __bool__(self) -> bool:
        return self.suitable

    @property
    def failed_condition(self) -> str | None:
        return None if self.violation is None else self.violation.condition

    @property
    def message(self) -> str:
        if self.violation is None:
            return f"loss {self.loss.name!r} satisfies C1–C4 on the checked sizes"
        return self.violation.message

    def raise_if_unsuitable(self) -> None:
        """Raise :class:`QSSuitabilityError` with the failure message, if any."""
        if self.violation is not None:
            raise QSSuitabilityError(self.violation.message)


class _Failed(Exception):
    """Internal: carries the first violation out of the nested checks."""

    def __init__(self, violation: QSViolation):
        super().__init__(violation.message)
        self.violation = violation


def check_qs_suitable(
    loss, n_pos_grid=DEFAULT_N_POS_GRID, n_neg_grid=DEFAULT_N_NEG_GRID, random_state=None
) -> QSReport:
    """Check conditions C1–C4 of Mohapatra et al. (2018) §4.1 numerically.

    For every (|P|, |N|) in ``n_pos_grid`` × ``n_neg_grid``:

    * **C1** — :meth:`~rankopt.losses.RankLoss.value` is a function of the
      ±-pattern alone: equal patterns reached through different sample
      permutations, label encodings and memory layouts give the same value,
      the input is not modified, the value is finite, and it is 0 for the
      ground truth (all positives first);
    * **C2** — Σ_j δ_j(rank_j) equals ``value(pattern)`` on the ground truth,
      the reversed order and random rankings; ``delta_diff`` equals
      δ_j(i+1) − δ_j(i); and a :meth:`~rankopt.losses.RankLoss.compiled_form`,
      if the loss has one, is valid and agrees with ``delta_diff`` (the
      compiled kernels use it instead);
    * **C3** — δ_{j+1}(i+1) − δ_{j+1}(i) ≥ δ_j(i+1) − δ_j(i) (up to rounding)
      for every 1 ≤ j < |N|, 1 ≤ i ≤ |P|;
    * **C4** — the derivative costs O(1): either the loss has a compiled
      form at large sizes (its kernels read a precomputed table), or a fixed
      batch of ``delta_diff`` calls (same j and i) is timed at
      |P| = |N| = 10 and at 10³, 10⁴, 10⁵; it fails when a large size stays
      more than 10× slower over three interleaved repeats (the minimum of
      each side is compared, so load on the machine does not make an O(1)
      derivative fail; an O(|P| + |N|) one is ~100× slower at 10⁵).

    Parameters
    ----------
    loss : RankLoss
        The loss (:func:`rankopt.check_qs_suitable` also takes a registered name).
    n_pos_grid, n_neg_grid : sequence of int
        Problem sizes |P| and |N| to test; all pairs are used.
    random_state : int, numpy.random.Generator or None
        Seed of the random rankings.

    Returns
    -------
    QSReport
        ``report.suitable`` is False when a condition fails;
        ``report.violation`` names the first failing condition and holds a
        counterexample; ``report.raise_if_unsuitable()`` raises it as a
        :class:`QSSuitabilityError` (a ValueError).
    """
    if not isinstance(loss, RankLoss):
        raise ValueError(f"expected a RankLoss instance, got {loss!r} instead")
    sizes = list(itertools.product(_size_grid(n_pos_grid, "n_pos_grid"), _size_grid(n_neg_grid, "n_neg_grid")))
    rng = np.random.default_rng(random_state)
    passed: list[str] = []
    notes: list[str] = []
    checks = (
        ("C1", lambda: _check_c1(loss, sizes, rng)),
        ("C2", lambda: _check_c2(loss, sizes, rng)),
        ("C3", lambda: _check_c3(loss, sizes)),
        ("C4", lambda: _check_c4(loss)),
    )
    for condition, check in checks:
        try:
            note = check()
        except _Failed as failure:
            return QSReport(loss, tuple(passed), failure.violation, tuple(notes))
        except Exception as exc:  # the loss itself raised: that is its failure
            message = f"{condition} cannot be checked for loss {loss.name!r}: {type(exc).__name__}: {brief(str(exc))}"
            return QSReport(
                loss, tuple(passed), QSViolation(condition, message, {"error": brief(repr(exc))}), tuple(notes)
            )
        passed.append(condition)
        if note:
            notes.append(note)
    return QSReport(loss, tuple(passed), None, tuple(notes))


def unsupported_reason(loss, up_to: str) -> str | None:
    """Why ``loss`` fails one of C1 … ``up_to``, or None when those hold.

    For inference methods' ``unsupported_reason``: the full check runs once
    per loss (default grids, fixed seed) and is cached on the loss's
    parameters (:meth:`~rankopt.losses.Loss.cache_key`), so calling this
    every cutting-plane iteration is cheap, an equal loss reuses the verdict
    and a loss whose parameters change is checked again.  A loss that cannot
    be keyed is checked at every call.
    """
    _check_condition(up_to)
    if not isinstance(loss, RankLoss):
        return f"expected a rank loss, got {loss!r} instead"
    key = loss.cache_key()
    if key is None:
        warnings.warn(
            f"loss {loss.name!r} ({type(loss).__qualname__}) cannot be keyed by its parameters (one is "
            f"not a plain value, or __init__ takes *args/**kwargs), so its C1–C4 check runs at every "
            f"call; see docs/plugins.md on parameters",
            UserWarning,
            stacklevel=3,
        )
    report = _REPORTS.get_or_build(key, lambda: check_qs_suitable(loss, random_state=0))
    failed = report.failed_condition
    if failed is not None and CONDITIONS.index(failed) <= CONDITIONS.index(up_to):
        return report.message
    return None


def size_unsupported_reason(loss: RankLoss, up_to: str, n_pos: int, n_neg: int) -> str | None:
    """Why ``loss`` fails one of C1 … ``up_to`` on a problem with ``n_pos`` and ``n_neg`` samples, or None.

    What :func:`check_qs_suitable` cannot see beyond its grids, read from the
    loss's compiled form for this size (built once and cached): a table that
    is not convex breaks C3 on exactly these positions.
    """
    _check_condition(up_to)
    if CONDITIONS.index(up_to) < CONDITIONS.index("C3"):
        return None
    form = loss.compiled_form(n_pos, n_neg)
    if form is None or form.first_concave_position is None or form.table is None:
        return None
    k, t = form.first_concave_position, form.table
    bend = float(t[k - 2] - 2.0 * t[k - 1] + t[k])
    return (
        f"C3 fails for loss {loss.name!r} at n_pos={n_pos}, n_neg={n_neg}: its discount table is not "
        f"convex at position {k} (T({k - 1}) − 2T({k}) + T({k + 1}) = {bend:.3g} < 0); the greedy and "
        f"quicksort-flavoured methods are not exact for it (use method='dp' or 'auto')"
    )


def _check_condition(up_to: str) -> None:
    if up_to not in CONDITIONS:
        raise ValueError(f"expected up_to in {CONDITIONS}, got {up_to!r} instead")


#: check_qs_suitable's verdicts, keyed by the losses' parameters.
_REPORTS = KeyedCache(max_entries=256)


# --------------------------------------------------------------------------
# helpers


def _size_grid(values, name: str) -> tuple[int, ...]:
    try:
        sizes = tuple(values)
    except TypeError:
        raise ValueError(f"expected {name} to be a sequence of positive integers, got {values!r} instead") from None
    if not sizes or not all(isinstance(v, numbers.Integral) and not isinstance(v, bool) and int(v) >= 1 for v in sizes):
        raise ValueError(f"expected {name} to be a non-empty sequence of positive integers, got {values!r} instead")
    return tuple(int(v) for v in sizes)


def _pattern_str(pattern) -> str:
    return "".join("+" if p else "-" for p in pattern)


def _close(a, b) -> np.ndarray:
    return np.abs(np.asarray(a) - np.asarray(b)) <= _ATOL + _RTOL * np.maximum(np.abs(a), np.abs(b))


def _random_patterns(rng, n_pos: int, n_neg: int) -> list[np.ndarray]:
    """Ground truth, reversed order, then random ±-patterns."""
    n = n_pos + n_neg
    truth = np.arange(n) < n_pos
    patterns = [truth, truth[::-1].copy()]
    for _ in range(_N_PATTERNS):
        pattern = np.zeros(n, dtype=bool)
        pattern[rng.choice(n, size=n_pos, replace=False)] = True
        patterns.append(pattern)
    return patterns


def _neg_ranks(pattern: np.ndarray) -> np.ndarray:
    """Interleaving rank of the j-th negative (j = 1…|N|) of a ±-pattern."""
    positives_above = np.cumsum(pattern)
    return positives_above[~pattern] + 1


def _value(loss: RankLoss, pattern) -> float:
    return float(loss.value(pattern))


# --------------------------------------------------------------------------
# C1


def _check_c1(loss: RankLoss, sizes, rng) -> None:
    for n_pos, n_neg in sizes:
        for pattern in _random_patterns(rng, n_pos, n_neg):
            n = pattern.size
            argument = pattern.copy()
            reference = _value(loss, argument)
            if not np.array_equal(argument, pattern):
                raise _Failed(
                    QSViolation(
                        "C1",
                        f"C1 fails for loss {loss.name!r}: value() modified its pattern argument "
                        f"{_pattern_str(pattern)} into {_pattern_str(argument)}",
                        {"n_pos": n_pos, "n_neg": n_neg, "pattern": _pattern_str(pattern)},
                    )
                )
            if not np.isfinite(reference):
                raise _Failed(
                    QSViolation(
                        "C1",
                        f"C1 fails for loss {loss.name!r}: value({_pattern_str(pattern)}) = {reference!r} "
                        "is not finite",
                        {"n_pos": n_pos, "n_neg": n_neg, "pattern": _pattern_str(pattern), "value": reference},
                    )
                )
            # The same pattern reached differently: samples permuted within each
            # class (labels held as ±1 integers), and two memory layouts.
            labels = np.where(np.arange(n) < n_pos, 1, -1)
            samples = rng.permutation(n)
            slots = np.empty(n, dtype=np.int64)
            slots[pattern] = rng.permutation(samples[labels[samples] > 0])
            slots[~pattern] = rng.permutation(samples[labels[samples] < 0])
            from_permutation = labels[slots] > 0
            strided = np.zeros(2 * n, dtype=bool)
            strided[::2] = pattern
            read_only = pattern.copy()
            read_only.flags.writeable = False
            for how, variant in (
                ("a permutation of the samples", from_permutation),
                ("a strided view", strided[::2]),
                ("a read-only array", read_only),
                ("a second call", pattern.copy()),
            ):
                other = _value(loss, variant)
                if not _close(other, reference):
                    raise _Failed(
                        QSViolation(
                            "C1",
                            f"C1 fails for loss {loss.name!r}: value() is not a function of the ±-pattern "
                            f"alone — pattern {_pattern_str(pattern)} gives {reference!r}, and the same "
                            f"pattern built from {how} gives {other!r}",
                            {
                                "n_pos": n_pos,
                                "n_neg": n_neg,
                                "pattern": _pattern_str(pattern),
                                "value": reference,
                                "other": other,
                                "built_from": how,
                            },
                        )
                    )
        truth = np.arange(n_pos + n_neg) < n_pos
        at_truth = _value(loss, truth)
        if not abs(at_truth) <= _ATOL:
            raise _Failed(
                QSViolation(
                    "C1",
                    f"C1 fails for loss {loss.name!r}: the ground truth {_pattern_str(truth)} has "
                    f"loss {at_truth!r}, expected 0",
                    {"n_pos": n_pos, "n_neg": n_neg, "pattern": _pattern_str(truth), "value": at_truth},
                )
            )


# --------------------------------------------------------------------------
# C2


def _check_c2(loss: RankLoss, sizes, rng) -> str | None:
    compiled = []
    for n_pos, n_neg in sizes:
        for pattern in _random_patterns(rng, n_pos, n_neg):
            ranks = _neg_ranks(pattern)
            j = np.arange(1, n_neg + 1)
            deltas = np.asarray(loss.delta(j, ranks, n_pos, n_neg), dtype=np.float64)
            if deltas.shape != j.shape or not np.all(np.isfinite(deltas)):
                raise _Failed(
                    QSViolation(
                        "C2",
                        f"C2 fails for loss {loss.name!r}: delta(j, rank_j) for pattern "
                        f"{_pattern_str(pattern)} returned {brief(repr(deltas), 120)}, expected {n_neg} "
                        f"finite values (shape {j.shape})",
                        {"n_pos": n_pos, "n_neg": n_neg, "pattern": _pattern_str(pattern)},
                    )
                )
            total, value = float(np.sum(deltas)), _value(loss, pattern)
            if not _close(total, value):
                raise _Failed(
                    QSViolation(
                        "C2",
                        f"C2 fails for loss {loss.name!r} at n_pos={n_pos}, n_neg={n_neg}: for the ranking "
                        f"{_pattern_str(pattern)} (negatives' ranks {ranks.tolist()}), "
                        f"Σ_j δ_j(rank_j) = {total!r} but value() = {value!r}",
                        {
                            "n_pos": n_pos,
                            "n_neg": n_neg,
                            "pattern": _pattern_str(pattern),
                            "ranks": ranks.tolist(),
                            "sum_delta": total,
                            "value": value,
                        },
                    )
                )
        # delta_diff is the derivative the inference methods use: it must be δ's.
        j, i = np.meshgrid(np.arange(1, n_neg + 1), np.arange(1, n_pos + 1), indexing="ij")
        diff = checked_delta_diff(loss, j, i, n_pos, n_neg)
        expected = np.asarray(loss.delta(j, i + 1, n_pos, n_neg), dtype=np.float64) - np.asarray(
            loss.delta(j, i, n_pos, n_neg), dtype=np.float64
        )
        _first_mismatch(
            loss, diff, expected, j, i, n_pos, n_neg, "delta_diff(j, i) = {got!r} but δ_j(i+1) − δ_j(i) = {want!r}"
        )
        form = loss.compiled_form(n_pos, n_neg)
        if form is not None:
            compiled_diff = _compiled_diff(loss, form, j, i, n_pos, n_neg)
            _first_mismatch(
                loss,
                compiled_diff,
                diff,
                j,
                i,
                n_pos,
                n_neg,
                "the compiled form gives δ_j(i+1) − δ_j(i) = {got!r} but delta_diff gives {want!r}",
            )
            compiled.append(KernelCode(form.code).name)
    if compiled:
        return f"C2: compiled form ({', '.join(sorted(set(compiled)))}) agrees with delta_diff"
    return None


def _first_mismatch(loss, got, want, j, i, n_pos, n_neg, template) -> None:
    bad = ~_close(got, want)
    if np.any(bad):
        k = tuple(np.argwhere(bad)[0])
        jj, ii, g, w = int(j[k]), int(i[k]), float(got[k]), float(want[k])
        raise _Failed(
            QSViolation(
                "C2",
                f"C2 fails for loss {loss.name!r} at n_pos={n_pos}, n_neg={n_neg}, j={jj}, i={ii}: "
                + template.format(got=g, want=w),
                {"n_pos": n_pos, "n_neg": n_neg, "j": jj, "i": ii, "got": g, "expected": w},
            )
        )


def _compiled_diff(loss, form, j, i, n_pos, n_neg) -> np.ndarray:

    try:
        code = KernelCode(form.code)
    except ValueError:
        raise _Failed(
            QSViolation(
                "C2",
                f"C2 fails for loss {loss.name!r}: compiled_form({n_pos}, {n_neg}).code = {form.code!r} "
                f"is not one of {[c.name for c in KernelCode]}",
                {"n_pos": n_pos, "n_neg": n_neg, "code": form.code},
            )
        ) from None
    table = None
    if code is KernelCode.POSITION_DISCOUNT:
        table = None if form.table is None else np.asarray(form.table, dtype=np.float64)
        if table is None or table.shape != (n_pos + n_neg,) or not np.all(np.isfinite(table)):
            shape = None if table is None else table.shape
            raise _Failed(
                QSViolation(
                    "C2",
                    f"C2 fails for loss {loss.name!r}: compiled_form({n_pos}, {n_neg}) needs a finite "
                    f"table of shape ({n_pos + n_neg},), got {shape}",
                    {"n_pos": n_pos, "n_neg": n_neg, "table_shape": shape},
                )
            )
    return compiled_delta_diff(int(code), j, i, n_pos, n_neg, table)


# --------------------------------------------------------------------------
# C3


def _check_c3(loss: RankLoss, sizes) -> None:
    for n_pos, n_neg in sizes:
        if n_neg < 2:
            continue
        j, i = np.meshgrid(np.arange(1, n_neg + 1), np.arange(1, n_pos + 1), indexing="ij")
        diff = checked_delta_diff(loss, j, i, n_pos, n_neg)
        lower, upper = diff[:-1], diff[1:]  # rows j and j + 1
        bad = upper < lower - (_ATOL + _RTOL * np.maximum(np.abs(lower), np.abs(upper)))
        if np.any(bad):
            row, col = np.argwhere(bad)[0]
            jj, ii = int(row) + 1, int(col) + 1
            lhs, rhs = float(upper[row, col]), float(lower[row, col])
            raise _Failed(
                QSViolation(
                    "C3",
                    f"C3 fails for loss {loss.name!r} at n_pos={n_pos}, n_neg={n_neg}, j={jj}, i={ii}: "
                    f"δ_{{j+1}}(i+1) − δ_{{j+1}}(i) = {lhs!r} < {rhs!r} = δ_j(i+1) − δ_j(i); the greedy "
                    f"and quicksort-flavoured methods are not exact for it (use method='dp')",
                    {"n_pos": n_pos, "n_neg": n_neg, "j": jj, "i": ii, "lhs": lhs, "rhs": rhs},
                )
            )


# --------------------------------------------------------------------------
# C4


def _check_c4(loss: RankLoss) -> str:
    if all(loss.compiled_form(n, n) is not None for n in (_C4_SMALL,) + _C4_LARGE):
        return "C4: compiled form (the kernels read precomputed values, O(1) per derivative)"
    rng = np.random.default_rng(0)
    # The same (j, i) at every size: only |P| and |N| change between timings.
    js = rng.integers(1, _C4_SMALL + 1, size=_C4_CALLS)
    i_rows = [rng.integers(1, _C4_SMALL + 1, size=_C4_BATCH) for _ in range(_C4_CALLS)]

    def run(n):
        start = time.perf_counter()
        for j, i in zip(js, i_rows, strict=True):
            loss.delta_diff(int(j), i, n, n)
        return time.perf_counter() - start

    run(_C4_SMALL)  # warm-up: first calls may fill caches
    small_times = [run(_C4_SMALL)]
    for large in _C4_LARGE:  # escalate, so that a slow derivative fails early and cheaply
        large_times = []
        for _ in range(_C4_REPEATS):
            # Interleaved, and the minimum of each kept: load on the machine
            # slows single runs, not all of them.
            large_times.append(run(large))
            small_times.append(run(_C4_SMALL))
            if min(large_times) <= _C4_FACTOR * min(small_times):
                break
        else:
            t_small, t_large = min(small_times), min(large_times)
            ratio = t_large / max(t_small, 1e-9)
            evaluations = _C4_CALLS * _C4_BATCH
            raise _Failed(
                QSViolation(
                    "C4",
                    f"C4 fails for loss {loss.name!r}: {evaluations} evaluations of delta_diff take "
                    f"{ratio:.0f}× longer at n_pos = n_neg = {large} ({t_large:.2e} s) than at "
                    f"{_C4_SMALL} ({t_small:.2e} s); the derivative must cost O(1) (allowed: "
                    f"{_C4_FACTOR:.0f}×) — precompute tables in compiled_form or cache them",
                    {"n_small": _C4_SMALL, "n_large": large, "t_small": t_small, "t_large": t_large, "ratio": ratio},
                )
            )
    return "C4: delta_diff timed O(1) on the Python path"
