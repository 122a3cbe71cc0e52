"""Loss-augmented inference for rank losses: the public call and its contract.

Problem (5) of Mohapatra et al. (2018): given positive scores s⁺ and negative
scores s⁻, find the ranking R̂ maximising w·Ψ(X, R̂) + Δ(R*, R̂).  Every method
plugin computes one thing — the optimal interleaving rank of each negative —
and :func:`most_violated_ranking` turns those ranks into the output in
O(|P| + |N|) (Observation 2), in one place for all methods.
"""

from __future__ import annotations

import abc
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, Protocol

import numpy as np

import rankopt.inference._observation as _observation
import rankopt.inference._order as _order
from rankopt._validation import check_negative_scores, check_scores
from rankopt.inference.qs_check import size_unsupported_reason, unsupported_reason
from rankopt.losses.base import CompiledForm, KernelCode, RankLoss

__all__ = [
    "InferenceMethod",
    "PluginLookup",
    "RankingInference",
    "RanksOutOfRangeError",
    "descending_order",
    "kernel_arguments",
    "most_violated_ranking",
    "ranking_from_ranks",
    "solve_ranking",
    "steps_to_highest_maximiser",
]

if TYPE_CHECKING:  # pragma: no cover
    from rankopt.losses.base import Loss


class PluginLookup(Protocol):
    """What the inference layer asks of the plugin registry: names turned into objects.

    :class:`rankopt.plugins.PluginRegistry` is one; the layers below the
    registry receive it as an argument and never import it, so that names are
    resolved on top (:mod:`rankopt.api`) and objects flow down.
    """

    def resolve_loss(self, loss: str | Loss, **loss_params: Any) -> Loss: ...

    def list(self, kind: str) -> list[Any]:
        """The plugins registered as ``kind`` (each with its ``name`` and ``cls``): the names a door offers."""
        ...

    def resolve_method(
        self, method: str, loss: RankLoss, n_pos: int | None = None, n_neg: int | None = None
    ) -> InferenceMethod: ...

    def inference_methods(self) -> tuple[InferenceMethod, ...]: ...


class InferenceMethod(abc.ABC):
    """A loss-augmented inference algorithm for rank losses.

    Subclasses set ``name`` and ``auto_priority`` (lower is preferred by
    ``method="auto"`` among the methods that are exact for a loss), declare
    in ``requires`` the conditions their exactness rests on, and implement
    :meth:`interleaving_ranks`.  Methods are chosen by what a loss can be
    shown to satisfy, never by its class.
    """

    name: ClassVar[str] = ""
    auto_priority: ClassVar[int] = 100
    #: The last of the conditions C1–C4 (Mohapatra et al. (2018) §4.1) this method
    #: relies on — C2 for exactness on any decomposable loss, C3 for the
    #: greedy order, C4 for O(1) derivatives — or None if it judges losses in
    #: :meth:`unsupported_reason` alone.  rankopt checks them on the loss once
    #: (:func:`rankopt.check_qs_suitable`, cached on the loss's parameters) and
    #: on each call's size where the loss's compiled form shows more (a
    #: discount table's convexity is C3 on exactly the positions used).
    requires: ClassVar[str | None] = None

    def unsupported_reason(self, loss: RankLoss) -> str | None:
        """Why this method is not exact for ``loss``, or None when it is.

        The default checks the conditions up to :attr:`requires`.
        """
        if self.requires is None:
            return None
        return unsupported_reason(loss, up_to=self.requires)

    def unsupported_reason_at(self, loss: RankLoss, n_pos: int, n_neg: int) -> str | None:
        """Why this method is not exact for ``loss`` on a problem of this size, or None.

        :meth:`unsupported_reason`, then the conditions up to :attr:`requires`
        on the positions 1…|P|+|N| of this call.
        """
        reason = self.unsupported_reason(loss)
        if reason is None and self.requires is not None:
            reason = size_unsupported_reason(loss, self.requires, n_pos, n_neg)
        return reason

    def estimated_cost(self, n_pos: int, n_neg: int) -> float:
        """Operations of one call, up to a constant: (|P| + |N|) log(|P| + |N|) unless a method says otherwise.

        Compared with that of the compiled sorting methods, it decides whether a fit warns that its
        method is slow (:class:`rankopt.exceptions.SlowInferenceWarning`).
        """
        n = n_pos + n_neg
        return n * np.log2(n + 1.0)

    @abc.abstractmethod
    def interleaving_ranks(self, loss: RankLoss, pos_scores: np.ndarray, neg_scores: np.ndarray) -> np.ndarray:
        """Optimal interleaving rank (1…|P|+1) of every negative, in input order.

        Scores arrive validated: 1-D, non-empty, finite, both float32 or both
        float64, C-contiguous.  Among equal scores, the one with the lower
        index counts as higher (Mohapatra et al. (2018) §4.2 footnote).
        """

    def solve(self, loss: RankLoss, pos_scores: np.ndarray, neg_scores: np.ndarray) -> RankingInference:
        """The most violated ranking, negatives checked: what :func:`solve_ranking` returns.

        Scores arrive as :func:`~rankopt._validation.check_scores` with
        ``scan_negatives=False`` leaves them: the negatives' values are not
        yet read.  The default checks them
        (:func:`~rankopt._validation.check_negative_scores`), then runs
        :meth:`interleaving_ranks` and Observation 2
        (:func:`ranking_from_ranks`), naming this method if its ranks break
        the contract.  A method whose kernel computes the whole answer may
        override it; it must refuse the scores ``check_negative_scores``
        refuses, with the same errors, before it returns anything.
        """
        check_negative_scores(pos_scores, neg_scores)
        neg_ranks = np.asarray(self.interleaving_ranks(loss, pos_scores, neg_scores))
        if neg_ranks.shape != neg_scores.shape or not np.issubdtype(neg_ranks.dtype, np.integer):
            raise RuntimeError(
                f"inference method {self.name!r} broke its contract: expected {neg_scores.size} integer "
                f"ranks, got an array of shape {neg_ranks.shape} and dtype {neg_ranks.dtype} instead"
            )
        try:
            # Checks the ranks' range in its one pass over them.
            return ranking_from_ranks(loss, pos_scores, neg_scores, neg_ranks)
        except RanksOutOfRangeError as exc:
            raise RuntimeError(f"inference method {self.name!r} broke its contract: {exc}") from None


@dataclass(frozen=True)
class RankingInference:
    """The most violated ranking, in the form the engine needs.

    Attributes
    ----------
    loss : float
        Δ(R*, R̂) of the most violated ranking.
    pos_coef, neg_coef : ndarray of float64
        Coefficients of the joint feature vector, in input order:
        Ψ(X, R̂) = Σ pos_coef[k] ψ(x⁺_k) + Σ neg_coef[j] ψ(x⁻_j).
    neg_ranks : ndarray of int
        Interleaving rank (1…|P|+1) of each negative, in input order.
    pos_ranks : ndarray of int
        Interleaving rank (1…|N|+1) of each positive, in input order.
    value : float
        pos_coef·s⁺ + neg_coef·s⁻ + loss, the maximised objective.
    """

    loss: float
    pos_coef: np.ndarray
    neg_coef: np.ndarray
    neg_ranks: np.ndarray
    pos_ranks: np.ndarray
    value: float


#: The score types the compiled kernels take as they are (anything else is converted to float64).
_KERNEL_FLOATS = (np.dtype(np.float64), np.dtype(np.float32))


def steps_to_highest_maximiser(steps: np.ndarray) -> int:
    """How many of the steps f(i + 1) − f(i) to take to reach f's highest maximiser.

    Summed from the best point so far, as the compiled kernel does: a running sum of f would absorb
    small steps after a huge one (a score span of 10¹⁷) and tie ranks that differ.  Under C3 the steps
    do not increase, so the answer is the number of leading steps ≥ 0; otherwise the steps are walked.
    """
    if np.all(steps[1:] <= steps[:-1]):
        return int(np.argmax(steps < 0.0)) if steps.size and steps[-1] < 0.0 else steps.size
    taken, above_best = 0, 0.0
    for index, step in enumerate(steps.tolist()):
        above_best += step
        if above_best >= 0.0:
            taken, above_best = index + 1, 0.0
    return taken


def descending_order(scores: np.ndarray) -> np.ndarray:
    """Indices sorting ``scores`` high to low, equal scores by increasing index.

    A compiled distribution sort (``_order.pyx``): the same permutation as
    ``np.argsort(-scores, kind="stable")``, about 7 times faster on 10⁵
    spread-out scores.
    """
    if not (isinstance(scores, np.ndarray) and scores.dtype in _KERNEL_FLOATS and scores.flags.c_contiguous):
        scores = np.asarray(scores)
        scores = np.ascontiguousarray(scores, dtype=np.float32 if scores.dtype == np.float32 else np.float64)
    if scores.ndim != 1:
        raise ValueError(f"expected a 1-D array of scores, got shape {scores.shape} instead")
    if not np.isfinite(scores).all():
        raise ValueError("expected finite scores, got NaN or infinity instead")
    order = np.empty(scores.size, dtype=np.intp)
    _order.descending_order_into(scores, order)
    return order


#: Placeholder table for kernel codes that read none (the kernels take a pointer).
_NO_TABLE = np.zeros(1)


def kernel_arguments(loss: RankLoss, form: CompiledForm, n_pos: int, n_neg: int) -> tuple[KernelCode, np.ndarray]:
    """The kernel code and table of ``form``, validated (the kernels do not check bounds)."""
    try:
        code = KernelCode(form.code)
    except ValueError:
        raise RuntimeError(
            f"loss {loss.name!r} broke its contract: compiled_form returned code {form.code!r}, "
            f"expected one of {[c.name for c in KernelCode]}"
        ) from None
    if code is not KernelCode.POSITION_DISCOUNT:
        return code, _NO_TABLE
    table = form.table  # float64, C-contiguous and read-only: CompiledForm made it so
    if table is None or table.shape != (n_pos + n_neg,) or not form.table_is_finite:
        raise RuntimeError(
            f"loss {loss.name!r} broke its contract: its position-discount compiled form needs a "
            f"finite table of shape ({n_pos + n_neg},), got "
            f"{None if table is None else table.shape} instead"
        )
    return code, table


class RanksOutOfRangeError(ValueError):
    """Interleaving ranks outside 1…|P|+1 were handed to :func:`ranking_from_ranks`."""


def ranking_from_ranks(
    loss: RankLoss, pos_scores: np.ndarray, neg_scores: np.ndarray, neg_ranks: np.ndarray
) -> RankingInference:
    """Observation 2: the loss and Ψ's coefficients from the negatives' interleaving ranks.

    The ranking is the one whose positives stand in descending score order
    (Observation 1) and whose negatives sit at ``neg_ranks``.
    """
    n_pos, n_neg = pos_scores.size, neg_scores.size
    neg_ranks = np.asarray(neg_ranks)
    # 32- or 64-bit ranks as they come (the compiled methods return C ints); others widened.
    neg_ranks = np.ascontiguousarray(neg_ranks, dtype=np.int32 if neg_ranks.dtype == np.int32 else np.int64)
    if neg_ranks.shape != (n_neg,):
        raise ValueError(f"expected {n_neg} ranks, got an array of shape {neg_ranks.shape} instead")
    # Lemma 6 with the corrected coefficients (docs/maths.md); a row's coefficient depends on its rank only.
    pos_order = descending_order(pos_scores)
    neg_coef, pos_coef = np.empty(n_neg), np.empty(n_pos)
    pos_ranks, positions = np.empty(n_pos, dtype=np.int64), np.empty(n_pos, dtype=np.int64)
    dot, bad = _observation.observation_terms(
        neg_ranks, neg_scores, pos_scores, pos_order, neg_coef, pos_coef, pos_ranks, positions
    )
    if bad >= 0:
        raise RanksOutOfRangeError(f"expected ranks in 1..{n_pos + 1}, got {neg_ranks[bad]} at position {bad} instead")
    loss_value = float(loss.value_at_positions(positions, n_neg))
    value = dot + loss_value
    return RankingInference(loss_value, pos_coef, neg_coef, neg_ranks, pos_ranks, value)


def most_violated_ranking(
    loss, pos_scores, neg_scores, method: str = "auto", *, registry: PluginLookup, resolve=None
) -> RankingInference:
    """Solve loss-augmented inference: argmax_R w·Ψ(X, R) + Δ(R*, R).

    :func:`rankopt.most_violated_ranking` (which documents the parameters) in
    the layer below the plugin registry: ``registry`` (a
    :class:`PluginLookup`) is required, and names are looked up in it.
    ``resolve(loss, method, n_pos, n_neg)``, optional, gives the method to run (an object with ``name`` and
    ``solve``); by default the registry's (:meth:`PluginLookup.resolve_method`).  The public call passes the
    one of the loss's structure kernel (:meth:`StructureKernel.single_query_method`).
    """
    loss = registry.resolve_loss(loss)
    if not isinstance(loss, RankLoss):
        raise ValueError(
            f"expected loss to be a rank loss, got the {loss.output_kind.value} loss {loss.name!r} instead"
        )
    pos, neg = check_scores(pos_scores, neg_scores, scan_negatives=False)
    # Builds (once per size, shared by equal losses) and checks the loss's compiled form on the
    # positions this call uses, whichever method runs, and before any method judges the loss: a
    # discount that breaks its contract beyond the sizes the C1–C4 check tried is refused here.
    loss.compiled_form(pos.size, neg.size)
    resolve = registry.resolve_method if resolve is None else resolve
    return solve_ranking(loss, pos, neg, resolve(method, loss, pos.size, neg.size))


def solve_ranking(loss: RankLoss, pos: np.ndarray, neg: np.ndarray, method: InferenceMethod) -> RankingInference:
    """:func:`most_violated_ranking` with its lookups done: ``method`` already resolved for this loss and size.

    For callers that infer many times at one size (a cutting plane's
    problem checks once what :func:`most_violated_ranking` checks per call):
    ``pos`` and ``neg`` must have passed
    :func:`~rankopt._validation.check_scores` (``scan_negatives=False`` is
    enough: :meth:`InferenceMethod.solve` checks the negatives),
    ``loss.compiled_form`` must have been built for ``(pos.size,
    neg.size)``, and ``method`` must be exact for ``loss`` at that size
    (:meth:`PluginLookup.resolve_method` with both sizes).  The method's
    output is still checked, so a plugin that breaks its contract is named.
    """
    return method.solve(loss, pos, neg)
