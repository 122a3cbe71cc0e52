"""Average-precision loss Δ_AP = 1 − (1/|P|) Σ_{x∈P} ind⁺(x) / ind(x).

δ_j(i) (Yue et al. 2007; Mohapatra et al. (2018) Prop. 8) with the 1/|P| factor
that the paper's difference formula drops:

    δ_j(i) = (1/|P|) Σ_{k=i}^{|P|} k / ((k + j − 1)(k + j)),
    δ_j(i + 1) − δ_j(i) = −(1/|P|) · i / ((i + j − 1)(i + j)).

The summand is k/(k+j−1) − k/(k+j): the drop in positive k's precision
caused by the j-th negative sitting above it.  The difference grows with j
(C3) because i/((i+j−1)(i+j)) shrinks as j grows.
"""

from __future__ import annotations

import numpy as np

from rankopt.hookspecs import hookimpl
from rankopt.losses.base import CompiledForm, KernelCode, RankLoss, pattern_counts

__all__ = ["APLoss"]


class APLoss(RankLoss):
    """Average-precision loss, 1 − AP."""

    name = "ap"

    def value(self, pattern):
        return self.value_at_positions(*pattern_counts(pattern))

    def value_at_positions(self, positions, n_neg):
        k = np.arange(1, positions.size + 1)
        return float(1.0 - (k / positions).sum() / positions.size)  # np.mean's bits, without its overhead

    def delta(self, j, i, n_pos, n_neg):
        j, i = np.broadcast_arrays(np.asarray(j, dtype=np.int64), np.asarray(i, dtype=np.int64))
        # Partial fractions: k/((k+j-1)(k+j)) = (1-j)/(k+j-1) + j/(k+j),
        # summed with a harmonic-number table H[m] = Σ_{t≤m} 1/t.
        harmonic = np.concatenate(([0.0], np.cumsum(1.0 / np.arange(1, n_pos + n_neg + 2))))

        def tail(offset):  # Σ_{k=i}^{P} 1/(k + j + offset)
            return harmonic[n_pos + j + offset] - harmonic[i + j + offset - 1]

        return ((1 - j) * tail(-1) + j * tail(0)) / n_pos

    def delta_diff(self, j, i, n_pos, n_neg):
        j = np.asarray(j, dtype=np.float64)
        i = np.asarray(i, dtype=np.float64)
        return -i / (n_pos * (i + j - 1.0) * (i + j))

    def compiled_form(self, n_pos, n_neg):
        # The AP kernels evaluate this class's δ and nothing else: a subclass that
        # changes the maths must not inherit them, so it runs on the general path
        # with its own delta_diff — unless it returns this form itself, a claim
        # check_qs_suitable verifies against its delta_diff (C2).
        return CompiledForm(KernelCode.AP) if type(self) is APLoss else None


@hookimpl
def rankopt_losses():
    return [APLoss]
