"""Loss contracts.

Two kinds of loss plug into rankopt:

* :class:`RankLoss` — a loss Δ(R*, R) of a proper ranking R against the
  ground-truth partial order R* (all positives above all negatives).  Rank
  losses state their maths through the conditions of Mohapatra et al. (2018) §4.1:

  - **C1** :meth:`RankLoss.value` computes Δ from the ±-pattern of R alone;
  - **C2** :meth:`RankLoss.delta` gives δ_j(i) with Δ = Σ_x∈N δ_{ind⁻(x)}(rank(x));
  - **C4** :meth:`RankLoss.delta_diff` gives δ_j(i+1) − δ_j(i) in O(1).

  The inference kernels only ever call ``delta_diff`` (or its compiled form,
  :meth:`RankLoss.compiled_form`); ``value`` yields the reported loss.

* :class:`LabelingLoss` — a loss Δ(Y*, Y) of a labeling Y ∈ {0,1}ⁿ that
  decomposes into one weighted term per mislabelled sample (the weighted 0-1
  loss of Dokania et al. (2014) eq. 7).

Indices follow the papers: negatives are numbered j = 1…|N| in the order of
the ranking (j = ind⁻), interleaving ranks i = 1…|P|+1 (i − 1 positives
above the negative).  All methods accept NumPy integer arrays for ``j`` and
``i`` and broadcast them.
"""

from __future__ import annotations

import abc
import collections
import enum
import functools
import inspect
import threading
import types
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np

from rankopt.exceptions import brief

__all__ = [
    "CompiledForm",
    "KernelCode",
    "KeyedCache",
    "LabelingLoss",
    "Loss",
    "OutputKind",
    "RankLoss",
    "checked_delta_diff",
    "first_concave_position",
    "loss_from_metric_name",
    "pattern_counts",
]


class OutputKind(str, enum.Enum):
    """The structured output a loss is defined on; it selects the model."""

    RANKING = "ranking"
    LABELING = "labeling"


class KernelCode(enum.IntEnum):
    """Loss families the compiled kernels evaluate without calling Python.

    Mirrored by the ``LOSS_*`` constants of ``rankopt/inference/_loss.pxd``;
    ``tests/inference/test_kernels.py`` checks the two agree.
    """

    AP = 1
    AUC = 2
    POSITION_DISCOUNT = 3


@dataclass(frozen=True)
class CompiledForm:
    """How a compiled kernel evaluates δ_j(i+1) − δ_j(i) for one problem size.

    ``table`` is used by :attr:`KernelCode.POSITION_DISCOUNT` only: a table T
    of |P| + |N| values with δ_j(i+1) − δ_j(i) = T(i+j) − T(i+j−1) (1-based),
    for a position-discount loss the discount D(1…|P|+|N|) already divided by
    the normaliser Σ_{i≤|P|} D(i).

    The table is copied on construction into a read-only float64 array and
    inspected there, once: whether every entry is finite
    (``table_is_finite``) and the first position at which it is not convex
    (``first_concave_position``; condition C3 at this size holds exactly when
    there is none).  A training run hands the same form to every inference
    call, and reading all |P| + |N| entries again at each call evicts the
    scores from the cache.
    """

    code: KernelCode
    table: np.ndarray | None = None
    #: Whether ``table`` is present and every entry of it finite.
    table_is_finite: bool = field(init=False, repr=False, compare=False)
    #: The first 1-based position k with T(k−1) − 2T(k) + T(k+1) < 0 beyond
    #: rounding, or None: the greedy and qs methods are exact only without one.
    first_concave_position: int | None = field(init=False, repr=False, compare=False)

    def __post_init__(self):
        table = self.table
        concave_at = None
        if table is not None:
            table = np.array(table, dtype=np.float64, order="C")  # our copy: nobody else can write it
            table.flags.writeable = False
            object.__setattr__(self, "table", table)
        finite = table is not None and bool(np.isfinite(table).all())
        if table is not None and finite and table.ndim == 1 and table.size >= 3:
            concave_at = first_concave_position(table)
        object.__setattr__(self, "table_is_finite", finite)
        object.__setattr__(self, "first_concave_position", concave_at)


#: Rounding allowed in the shape checks of a discount table, relative to its values.
_TABLE_RTOL = 64 * np.finfo(np.float64).eps


def first_concave_position(table: np.ndarray) -> int | None:
    """The first 1-based position k where ``table`` bends down (T(k−1) − 2T(k) + T(k+1) < 0), or None.

    Differences below rounding (64 ulp of the values involved) do not count.  In the subnormal range a
    value's ulp no longer shrinks with it (a geometric discount's tail underflows to multiples of
    4.9e-324), so the values are taken at least as large as the smallest normal double there.
    """
    second = np.diff(table, 2)
    tolerance = np.maximum(np.abs(table[:-2]), np.finfo(np.float64).tiny)
    tolerance *= -_TABLE_RTOL  # in place: this runs on tables of 10⁶ entries
    bad = second < tolerance
    if not bad.any():
        return None
    return int(np.argmax(bad)) + 2


class KeyedCache:
    """A small thread-safe LRU map for values derived from a loss's parameters.

    Keys come from :meth:`Loss.cache_key`, so two equal losses share an
    entry and a loss whose parameters change is looked up afresh.  ``weight``
    measures an entry (e.g. the bytes of its table); the least recently used
    entries are evicted while the total exceeds ``max_weight`` or there are
    more than ``max_entries`` (the newest entry always stays).
    """

    def __init__(
        self, max_entries: int, max_weight: float = float("inf"), weight: Callable[[Any], float] = lambda value: 0.0
    ):
        self.max_entries, self.max_weight, self._weight = max_entries, max_weight, weight
        self._entries: collections.OrderedDict = collections.OrderedDict()
        self._total = 0.0
        self._lock = threading.Lock()

    def get_or_build(self, key: Hashable | None, build: Callable[[], Any]):
        """The cached value of ``key``, built by ``build()`` on a miss; ``key=None`` is never cached."""
        if key is None:
            return build()
        with self._lock:
            if key in self._entries:
                self._entries.move_to_end(key)
                return self._entries[key]
        value = build()  # outside the lock: building may take long and may raise
        with self._lock:
            if key not in self._entries:
                self._entries[key] = value
                self._total += self._weight(value)
                while len(self._entries) > 1 and (
                    len(self._entries) > self.max_entries or self._total > self.max_weight
                ):
                    _, evicted = self._entries.popitem(last=False)
                    self._total -= self._weight(evicted)
            return self._entries[key]

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()
            self._total = 0.0

    def __len__(self) -> int:
        return len(self._entries)


class Loss(abc.ABC):
    """Common base of every loss: a registered ``name``, an output kind, parameters.

    Parameters follow scikit-learn's convention: they are the arguments of
    ``__init__``, each stored unchanged under its own name.  From them — and
    only from them — come :meth:`get_params` / :meth:`set_params` (so
    ``sklearn.base.clone`` and grid searches work on losses and on the
    estimators holding them), equality, hashing and :meth:`cache_key`, which
    keys everything rankopt derives from a loss (compiled tables, the C1–C4
    verdict).  A loss whose maths depends on anything else would be cached
    wrongly: keep such state out of losses, or pass it to ``__init__``.
    """

    #: The name the loss is registered and looked up under.
    name: ClassVar[str] = ""
    #: The structured output the loss is defined on.
    output_kind: ClassVar[OutputKind]

    @classmethod
    def _param_names(cls) -> tuple[str, ...]:
        return _init_param_names(cls)

    def get_params(self, deep: bool = True) -> dict:
        """The constructor parameters of this loss, by name (scikit-learn's ``get_params``).

        With ``deep``, a parameter that is itself a loss also contributes its
        own parameters as ``<name>__<parameter>``.
        """
        params: dict[str, Any] = {}
        for key in self._param_names():
            try:
                value = getattr(self, key)
            except AttributeError:
                raise AttributeError(
                    f"expected {type(self).__qualname__} to store its constructor parameter {key!r} "
                    f"as the attribute {key!r} (scikit-learn's convention, from which rankopt derives "
                    f"get_params, equality and cache keys), got no such attribute instead"
                ) from None
            if deep and isinstance(value, Loss):
                params.update((f"{key}__{k}", v) for k, v in value.get_params(deep=True).items())
            params[key] = value
        return params

    def set_params(self, **params) -> Loss:
        """Set constructor parameters (``<name>__<parameter>`` for a nested loss); returns self.

        Everything derived from the loss is keyed on its parameters' values,
        so nothing cached for the old values is used afterwards.
        """
        valid = self._param_names()
        nested: dict[str, dict] = {}
        for key, value in params.items():
            head, sep, rest = key.partition("__")
            if head not in valid:
                raise ValueError(
                    f"expected a parameter of {type(self).__qualname__} (one of {list(valid)}), got {head!r} instead"
                )
            if sep:
                nested.setdefault(head, {})[rest] = value
            else:
                setattr(self, head, value)
        for head, sub in nested.items():
            inner = getattr(self, head)
            if not isinstance(inner, Loss):
                raise ValueError(
                    f"expected parameter {head!r} of {type(self).__qualname__} to be a loss for "
                    f"nested parameters {sorted(sub)}, got {type(inner).__name__} instead"
                )
            inner.set_params(**sub)
        return self

    def cache_key(self) -> Hashable | None:
        """A hashable snapshot of (type, parameters' values), or None when one cannot be made.

        None — a parameter that is not a plain value (numbers, strings,
        arrays, tuples/lists/dicts of them, losses, functions), or an
        ``__init__`` taking ``*args``/``**kwargs`` — means "do not cache":
        rankopt then rebuilds what it derives from the loss at every use,
        which is slower but never stale.
        """
        if not _init_is_keyable(type(self)):
            return None
        try:
            params = self.get_params(deep=False)
        except (AttributeError, TypeError):
            return None
        frozen = []
        for key in sorted(params):
            value = _freeze(params[key])
            if value is _UNKEYABLE:
                return None
            frozen.append((key, value))
        return (type(self), tuple(frozen))

    def __repr__(self) -> str:
        try:
            params = ", ".join(f"{k}={v!r}" for k, v in self.get_params(deep=False).items())
        except (AttributeError, TypeError):
            params = "?"
        return f"{type(self).__name__}({params})"

    def __eq__(self, other: object) -> bool:
        if self is other:
            return True
        if type(self) is not type(other):
            return False
        key = self.cache_key()
        return key is not None and key == other.cache_key()

    def __hash__(self) -> int:
        key = self.cache_key()
        return object.__hash__(self) if key is None else hash(key)


@functools.cache
def _init_signature(cls) -> inspect.Signature | None:
    init = cls.__init__
    if init is object.__init__:
        return None
    return inspect.signature(init)


@functools.cache
def _init_param_names(cls) -> tuple[str, ...]:
    signature = _init_signature(cls)
    if signature is None:
        return ()
    names = []
    for parameter in list(signature.parameters.values())[1:]:  # skip self
        if parameter.kind is inspect.Parameter.VAR_POSITIONAL:
            raise TypeError(
                f"expected {cls.__qualname__}.__init__ to take named parameters only (scikit-learn's "
                f"convention), got *{parameter.name} instead"
            )
        if parameter.kind is not inspect.Parameter.VAR_KEYWORD:
            names.append(parameter.name)
    return tuple(sorted(names))


@functools.cache
def _init_is_keyable(cls) -> bool:
    """Whether every parameter of ``cls.__init__`` is named (``*args``/``**kwargs`` could hold anything)."""
    signature = _init_signature(cls)
    variadic = (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD)
    return signature is None or all(p.kind not in variadic for p in signature.parameters.values())


_UNKEYABLE = object()
_SCALARS = (type(None), bool, int, float, complex, str, bytes, np.generic, enum.Enum)
_BY_IDENTITY = (types.FunctionType, types.BuiltinFunctionType, np.ufunc, type)


def _freeze(value):
    """A hashable value-snapshot of a parameter, or ``_UNKEYABLE``."""
    if isinstance(value, _SCALARS):
        return (type(value), value)
    if isinstance(value, np.ndarray):
        if value.dtype.hasobject:
            return _UNKEYABLE
        return (np.ndarray, value.dtype.str, value.shape, value.tobytes())
    if isinstance(value, Loss):
        key = value.cache_key()
        return _UNKEYABLE if key is None else key
    if isinstance(value, (tuple, list)):
        items = tuple(_freeze(v) for v in value)
        return _UNKEYABLE if any(v is _UNKEYABLE for v in items) else (type(value), items)
    if isinstance(value, dict):
        try:
            keys = sorted(value)
        except TypeError:
            return _UNKEYABLE
        items = tuple((_freeze(k), _freeze(value[k])) for k in keys)
        if any(a is _UNKEYABLE or b is _UNKEYABLE for a, b in items):
            return _UNKEYABLE
        return (dict, items)
    if isinstance(value, _BY_IDENTITY):
        # Functions and classes are values by identity: their code cannot change under a key.
        return (type(value), value)
    return _UNKEYABLE


class RankLoss(Loss):
    """A loss over proper rankings, decomposable over negatives (C1, C2).

    Subclasses implement :meth:`value` and :meth:`delta`, and should override
    :meth:`delta_diff` with an O(1) formula (C4); the default differences two
    calls of :meth:`delta`.  Losses whose derivative a compiled kernel knows
    return it from :meth:`compiled_form`; the others run on a slower path
    that calls :meth:`delta_diff` from Python.  The built-in losses return
    their kernels' forms for their own class only: a subclass that changes
    the maths runs on the general path (``docs/plugins.md``).

    Contract (checked by :func:`rankopt.testing.check_loss`): Δ of the
    ground-truth pattern (all positives first) is 0, Δ ≥ 0, and
    Σ_j δ_j(rank_j) equals :meth:`value` on every ranking.
    """

    output_kind = OutputKind.RANKING
    #: True for a loss defined on integer grades (``rankopt.losses.PairwiseLoss``):
    #: multi-query inference hands it the grades instead of 0/1 relevance.
    graded: ClassVar[bool] = False

    @abc.abstractmethod
    def value(self, pattern: np.ndarray) -> float:
        """Δ(R*, R) from the ±-pattern of R (C1).

        Parameters
        ----------
        pattern : ndarray of bool, shape (|P| + |N|,)
            ``pattern[k]`` is True when the sample at position k + 1 of the
            ranking is positive.
        """

    def value_at_positions(self, positions: np.ndarray, n_neg: int) -> float:
        """:meth:`value` of the ranking whose positives stand at ``positions``.

        Parameters
        ----------
        positions : ndarray of int, shape (|P|,)
            The positives' 1-based positions, increasing, among the
            |P| + ``n_neg`` places of the ranking; negatives fill the rest.
        n_neg : int
            |N|.

        Inference knows the positions, so it calls this.  The default builds
        the ±-pattern, O(|P| + |N|), and calls :meth:`value`.  A loss that
        computes Δ from the positions anyway — every built-in one — overrides
        it and defines :meth:`value` through it, and inference then never
        builds the pattern.  The two
        must agree; :func:`rankopt.testing.check_loss` checks that they do.
        """
        positions = np.asarray(positions)
        pattern = np.zeros(positions.size + n_neg, dtype=bool)
        pattern[positions - 1] = True
        return self.value(pattern)

    @abc.abstractmethod
    def delta(self, j, i, n_pos: int, n_neg: int) -> np.ndarray:
        """δ_j(i): the loss contributed by the j-th negative at interleaving rank i (C2)."""

    def delta_diff(self, j, i, n_pos: int, n_neg: int) -> np.ndarray:
        """δ_j(i + 1) − δ_j(i) for 1 ≤ i ≤ |P| (C4)."""
        i = np.asarray(i)
        return self.delta(j, i + 1, n_pos, n_neg) - self.delta(j, i, n_pos, n_neg)

    def compiled_form(self, n_pos: int, n_neg: int) -> CompiledForm | None:
        """The kernel-side description of :meth:`delta_diff`, or None."""
        return None

    def structure(self):
        """The structure exact inference over grades uses, for a graded loss (``graded = True``).

        One of :mod:`rankopt.losses.structure`'s: a
        :class:`~rankopt.losses.structure.GradedPositionStructure` (gain, discount, cutoff) or a
        :class:`~rankopt.losses.structure.GradedPairStructure`.  Inference over queries dispatches on
        it, never on the loss's class.  None (the default): no inference over grades is known.
        """
        return None


class LabelingLoss(Loss):
    """A loss over labelings Y ∈ {0,1}ⁿ: Σ_i weight_i · [y_i ≠ y*_i]."""

    output_kind = OutputKind.LABELING

    @abc.abstractmethod
    def sample_weights(self, y_true: np.ndarray) -> np.ndarray:
        """The cost of mislabelling each sample, shape (n,), given y_true ∈ {0,1}ⁿ."""

    def value(self, y_true: np.ndarray, y_pred: np.ndarray) -> float:
        """Δ(Y*, Y) for labelings in {0, 1}."""
        y_true = np.asarray(y_true, dtype=bool)
        y_pred = np.asarray(y_pred, dtype=bool)
        if y_true.shape != y_pred.shape:
            raise ValueError(f"expected y_pred of the same shape as y_true {y_true.shape}, got {y_pred.shape} instead")
        return float(np.dot(self.sample_weights(y_true), y_true != y_pred))


def pattern_counts(pattern: np.ndarray) -> tuple[np.ndarray, int]:
    """Positions (1-based) of the positives in a ±-pattern, and |N|."""
    pattern = np.asarray(pattern, dtype=bool)
    if pattern.ndim != 1:
        raise ValueError(f"expected a 1-D ±-pattern, got shape {pattern.shape} instead")
    positions = np.flatnonzero(pattern) + 1
    return positions, pattern.size - positions.size


def checked_delta_diff(loss: RankLoss, j, i, n_pos: int, n_neg: int) -> np.ndarray:
    """``loss.delta_diff`` with its contract enforced: a finite array shaped like ``i``.

    Used on the Python path, where a plugin's derivative runs inside the
    inference loop; a plugin that raises or returns NaN is named in the error.
    """
    try:
        out = np.asarray(loss.delta_diff(j, i, n_pos, n_neg), dtype=np.float64)
    except Exception as exc:
        raise RuntimeError(
            f"loss {loss.name!r} ({type(loss).__module__}.{type(loss).__qualname__}) raised in "
            f"delta_diff(j of shape {np.shape(j)}, i of shape {np.shape(i)}, n_pos={n_pos}, "
            f"n_neg={n_neg}): {type(exc).__name__}: {brief(str(exc))}"
        ) from exc
    expected = np.broadcast_shapes(np.shape(j), np.shape(i))
    if out.shape != expected:
        raise RuntimeError(
            f"loss {loss.name!r} broke its contract: expected delta_diff to return the broadcast "
            f"shape {expected} of j and i, got shape {out.shape} instead"
        )
    finite = np.isfinite(out)
    if not finite.all():
        k = np.unravel_index(np.argmin(finite), out.shape)
        jj, ii = np.broadcast_to(j, expected)[k], np.broadcast_to(i, expected)[k]
        raise RuntimeError(
            f"loss {loss.name!r} broke its contract: expected finite delta_diff values, got the "
            f"non-finite {float(out[k])!r} at j={jj}, i={ii} for n_pos={n_pos}, n_neg={n_neg} instead"
        )
    return out


#: The metric spellings of rank losses (LightGBM's and ``RankSVM(eval_metric=...)``'s): the loss and its parameter.
_METRIC_SPELLINGS = {"ndcg": "ndcg_graded", "p": "precision_at_k"}


def loss_from_metric_name(name: str) -> tuple[str, dict]:
    """The rank loss a metric's name spells, and the parameters the name holds: ``"ndcg@5"`` is
    ``("ndcg_graded", {"k": 5})``, ``"p@5"`` ``("precision_at_k", {"k": 5})``, ``"map"`` ``("ap", {})``; any
    other name is itself, with none.  One vocabulary for every door: a loss door takes a metric's name, a
    metric door a loss's."""
    if name == "map":
        return "ap", {}
    head, at, cutoff = name.partition("@")
    if at and head in _METRIC_SPELLINGS and cutoff.isdigit() and cutoff.isascii() and int(cutoff) >= 1:
        return _METRIC_SPELLINGS[head], {"k": int(cutoff)}
    return name, {}
