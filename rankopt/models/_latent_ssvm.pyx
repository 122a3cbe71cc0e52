# cython: language_level=3
"""Appendix C of Behl et al. (2015): the latent SSVM's greedy loss-augmented inference, compiled.

The greedy of :meth:`rankopt.models.latent.LatentSSVMProblem.greedy_ranks`
scores O(|N||P|) ranking patterns, each by two assignment problems: samples
(positive or negative bags) to the slots of their class, sample s in a slot
of coefficient c earning max(c·top_s, c·bottom_s).  Consecutive patterns of
the greedy differ in one slot coefficient per class (moving negative j up by
one rank lowers the coefficient of the positive slot it passes by 2 and
raises its own by 2), so each class keeps an optimal assignment with its
dual potentials (:class:`IncrementalAssignment`) and repairs it after a
coefficient change with one shortest augmenting path — O(n · path length)
instead of a fresh O(n³) solve.  The loss of a pattern comes from the C2
table δ_j(i) (Σ_j δ_j(rank_j)).

The pattern values agree with :func:`rankopt.models.latent.ssvm_pattern_value`
up to rounding.  So that the greedy takes exactly the oracle's decisions,
a comparison whose two values lie within ``tol`` of each other (an exact or
near tie) is decided by the caller's exact value function instead.
"""
import numpy as np

from libc.math cimport INFINITY


cdef class IncrementalAssignment:
    """Maximum-gain assignment of n samples to n slots, repaired after each coefficient change.

    Sample s in slot a earns max(c_a·top_s, c_a·bottom_s).  Shortest
    augmenting paths with dual potentials (the Hungarian method in its
    row-insertion form), as a minimisation of the negated gains; changing
    one slot's coefficient frees that slot, restores dual feasibility of its
    column, and re-inserts the freed sample with one augmenting path.
    """

    cdef Py_ssize_t n
    cdef double[::1] top, bottom, coef, u, v, minv, label
    cdef Py_ssize_t[::1] p, way
    cdef unsigned char[::1] used

    def __init__(self, top, bottom, coef):
        self.n = len(top)
        self.top = np.ascontiguousarray(top, dtype=np.float64)
        self.bottom = np.ascontiguousarray(bottom, dtype=np.float64)
        self.coef = np.array(coef, dtype=np.float64)
        if self.bottom.shape[0] != self.n or self.coef.shape[0] != self.n:
            raise ValueError(
                f"expected top, bottom and coef of one length, got {self.n}, "
                f"{self.bottom.shape[0]} and {self.coef.shape[0]} instead"
            )
        # A NaN gain would stall the shortest-path search (no comparison succeeds).
        for name, values in (("top", top), ("bottom", bottom), ("coef", coef)):
            if not np.all(np.isfinite(values)):
                raise ValueError(f"expected finite {name} values, got {np.asarray(values)!r} instead")
        # Index 0 of the column arrays is the method's dummy column.
        self.u = np.zeros(self.n + 1)
        self.v = np.zeros(self.n + 1)
        self.minv = np.zeros(self.n + 1)
        self.label = np.zeros(self.n + 1)
        self.p = np.zeros(self.n + 1, dtype=np.intp)
        self.way = np.zeros(self.n + 1, dtype=np.intp)
        self.used = np.zeros(self.n + 1, dtype=np.uint8)
        self._solve()

    cdef inline double _gain(self, Py_ssize_t i, Py_ssize_t j) noexcept nogil:
        """Gain of sample i in slot j (both 1-based)."""
        cdef double c = self.coef[j - 1]
        cdef double a = c * self.top[i - 1]
        cdef double b = c * self.bottom[i - 1]
        return a if a >= b else b

    cdef void _solve(self) noexcept nogil:
        cdef Py_ssize_t i
        for i in range(self.n + 1):
            self.u[i] = 0.0
            self.v[i] = 0.0
            self.p[i] = 0
        for i in range(1, self.n + 1):
            self._insert(i, 0)

    cdef void _insert(self, Py_ssize_t i, Py_ssize_t free) noexcept nogil:
        """Match the free sample i along a shortest augmenting path (reduced costs stay ≥ 0).

        Dijkstra over the columns with lazy potentials: ``minv[j]`` holds the
        tentative distance of column j from sample i, ``label[j]`` the distance
        at which column j was reached; the potentials of the reached columns
        and their samples are updated once, at the end.  ``free`` (1-based, 0
        if none in particular) is a free column to prefer among equally near
        ones: slots of equal coefficient tie often, and ending there at once
        saves walking through the tied ones.
        """
        # Raw pointers: the loops below store doubles, so the compiler would
        # otherwise reload every memoryview's data pointer at each access.
        cdef Py_ssize_t n = self.n, j, j0 = 0, j1, i0
        cdef double dist = 0.0, best, cur, c, a, b, t, bt, base
        cdef double* u = &self.u[0]
        cdef double* v = &self.v[0]
        cdef double* minv = &self.minv[0]
        cdef double* label = &self.label[0]
        cdef double* coef = &self.coef[0]
        cdef double* top = &self.top[0]
        cdef double* bottom = &self.bottom[0]
        cdef Py_ssize_t* p = &self.p[0]
        cdef Py_ssize_t* way = &self.way[0]
        cdef unsigned char* used = &self.used[0]
        p[0] = i
        for j in range(n + 1):
            minv[j] = INFINITY
            used[j] = 0
        while True:
            used[j0] = 1
            label[j0] = dist
            i0 = p[j0]
            t = top[i0 - 1]
            bt = bottom[i0 - 1]
            base = dist - u[i0]
            best = INFINITY
            j1 = 0
            for j in range(1, n + 1):
                if not used[j]:
                    c = coef[j - 1]
                    a = c * t
                    b = c * bt
                    cur = base - (a if a >= b else b) - v[j]
                    if cur < minv[j]:
                        minv[j] = cur
                        way[j] = j0
                    if minv[j] < best:
                        best = minv[j]
                        j1 = j
            if free and not used[free] and minv[free] <= best:
                j1 = free
            dist = minv[j1]
            j0 = j1
            if p[j0] == 0:
                break
        for j in range(n + 1):
            if used[j]:
                u[p[j]] += dist - label[j]
                v[j] -= dist - label[j]
        while j0 != 0:
            j1 = way[j0]
            p[j0] = p[j1]
            j0 = j1

    cdef void _set(self, Py_ssize_t a, double c) noexcept nogil:
        cdef Py_ssize_t j = a + 1, i, i0, n = self.n
        cdef double m = INFINITY, cur, x, y
        cdef double* u = &self.u[0]
        cdef double* top = &self.top[0]
        cdef double* bottom = &self.bottom[0]
        if self.coef[a] == c:
            return
        self.coef[a] = c
        i0 = self.p[j]
        self.p[j] = 0
        # Only column j's gains changed: the largest potential keeping it feasible.
        for i in range(1, n + 1):
            x = c * top[i - 1]
            y = c * bottom[i - 1]
            cur = -(x if x >= y else y) - u[i]
            if cur < m:
                m = cur
        self.v[j] = m
        self._insert(i0, j)

    cdef double _total(self) noexcept nogil:
        cdef Py_ssize_t j
        cdef double s = 0.0
        for j in range(1, self.n + 1):
            s += self._gain(self.p[j], j)
        return s

    def set_coef(self, Py_ssize_t slot, double c):
        """Change the coefficient of ``slot`` (0-based) and repair the assignment."""
        if not 0 <= slot < self.n:
            raise ValueError(f"expected a slot in [0, {self.n}), got {slot} instead")
        if not np.isfinite(c):
            raise ValueError(f"expected a finite coefficient, got {c} instead")
        self._set(slot, c)

    def total(self) -> float:
        """The maximum total gain."""
        return self._total()

    def slots(self) -> np.ndarray:
        """The slot of every sample in the current optimal assignment."""
        out = np.empty(self.n, dtype=np.intp)
        cdef Py_ssize_t j
        for j in range(1, self.n + 1):
            out[self.p[j] - 1] = j - 1
        return out


def greedy_ranks(pos_max, pos_min, neg_max, neg_min, const double[:, ::1] delta, double tol, exact_value):
    """Appendix C's greedy shift of the negative slots, top slot first.

    ``delta[j, i - 1]`` is δ_{j+1}(i) for 1 ≤ i ≤ |P| + 1.  ``exact_value(ranks)``
    returns the reference value of a pattern; it decides every comparison
    whose two fast values are within ``tol``.  Returns the sorted ranks
    (int64, 1…|P|+1) and the number of ``exact_value`` calls.
    """
    cdef Py_ssize_t n_pos = len(pos_max), n_neg = len(neg_max)
    if n_pos < 1 or n_neg < 1 or len(pos_min) != n_pos or len(neg_min) != n_neg:
        raise ValueError(
            f"expected non-empty classes with one best and one worst score per bag, got "
            f"{n_pos}/{len(pos_min)} positive and {n_neg}/{len(neg_min)} negative scores instead"
        )
    if delta.shape[0] != n_neg or delta.shape[1] != n_pos + 1:
        raise ValueError(
            f"expected a delta table of shape ({n_neg}, {n_pos + 1}), got ({delta.shape[0]}, {delta.shape[1]}) instead"
        )
    cdef IncrementalAssignment pos = IncrementalAssignment(pos_max, pos_min, np.full(n_pos, float(n_neg)))
    cdef IncrementalAssignment neg = IncrementalAssignment(neg_max, neg_min, np.full(n_neg, -float(n_pos)))
    cdef double pn = (<double>n_pos) * n_neg
    ranks_arr = np.full(n_neg, n_pos + 1, dtype=np.int64)
    cdef long long[::1] ranks = ranks_arr
    cdef Py_ssize_t j, r, k, choice, lowest = 1, n_exact = 0
    cdef double base_loss = 0.0, d_base, f, best, best_exact = 0.0, new_exact
    cdef bint have_exact = False, better
    for j in range(n_neg):
        base_loss += delta[j, n_pos]
    best = base_loss + (pos._total() + neg._total()) / pn
    for j in range(n_neg):
        choice = n_pos + 1
        d_base = delta[j, n_pos]
        for r in range(n_pos, lowest - 1, -1):
            pos._set(r - 1, pos.coef[r - 1] - 2.0)
            neg._set(j, <double>(n_pos + 2 - 2 * r))
            f = (base_loss - d_base + delta[j, r - 1]) + (pos._total() + neg._total()) / pn
            if f > best + tol:
                better = True
                have_exact = False
            elif f < best - tol:
                better = False
            else:
                # Too close to call in floating point: ask the reference.
                if not have_exact:
                    ranks[j] = choice
                    best_exact = exact_value(ranks_arr)
                    n_exact += 1
                    have_exact = True
                ranks[j] = r
                new_exact = exact_value(ranks_arr)
                n_exact += 1
                better = new_exact > best_exact
                if better:
                    best_exact = new_exact
            if better:
                best, choice = f, r
        for k in range(lowest, choice):
            pos._set(k - 1, pos.coef[k - 1] + 2.0)
        neg._set(j, <double>(n_pos + 2 - 2 * choice))
        ranks[j] = choice
        base_loss += delta[j, choice - 1] - d_base
        lowest = choice
    return ranks_arr, n_exact
