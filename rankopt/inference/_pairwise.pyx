# cython: language_level=3
"""Loss-augmented inference of the pairwise ROC-area loss over graded relevance, O(n log n) per query.

The output labels every pair (i, j) with g_i > g_j: y_ij = +1 keeps i above
j.  The objective Σ_pairs [y_ij (s_i − s_j) + [y_ij = −1]] / #pairs
decouples over pairs, so y_ij = +1 exactly when s_i − s_j ≥ 1/2 (ties kept,
as the AUC kernels keep a negative below a positive on a zero step).  The
test is the float64 difference ``(double)s_i − (double)s_j >= 0.5``: monotone
in both scores (rounding is monotone), which is all the counting below needs,
and the Python reference computes the same expression.

Document i's coefficient in Ψ is (Σ_j y_ij − Σ_j y_ji) / #pairs over its
pairs: with L_i (H_i) the documents of a lower (higher) grade, A_i those of
a lower grade it stays above (s_i − s_j ≥ 1/2) and B_i those of a higher
grade that stay above it (s_j − s_i ≥ 1/2),

    coef_i · #pairs = (2 A_i − L_i) − (2 B_i − H_i),   Δ · #pairs = Σ_i (L_i − A_i).

A_i: documents in ascending score order; a pointer admits every j with
s_i − s_j ≥ 1/2 (a prefix of that order, growing with s_i) into a Fenwick
tree over the grade levels, which counts those below g_i.  B_i likewise from
the top.  The order of equal scores does not matter (they are admitted
together), so the sort is the distribution sort of ``_sorting.pxd``, read
backwards: expected O(n) on spread scores.  O(n log n) time at worst, O(n)
memory (Joachims,
"Training linear SVMs in linear time", KDD 2006, §4, for any number of
grades).  Coefficients are integers times 1/#pairs, the loss an integer
over #pairs — the expressions of the AUC path, to which this reduces with
two grades.
"""
from cython cimport floating
from libc.stdint cimport int32_t, int64_t, uint64_t
from libc.stdlib cimport free, malloc
from libcpp.algorithm cimport sort
from libcpp.utility cimport pair

from rankopt.inference._sorting cimport SORT_BUCKETS_PER_SCORE, Keyed, descending_keyed, keyed_from_packed
from rankopt.inference._terms cimport COUNT_TABLES, count_values

import numpy as np


# The dense test of one higher document against the lowest level's: GCC does not vectorise the loop as
# written for baseline x86-64 (a double compare feeding 64-bit counts), so it is written with vector
# extensions, four lanes a step (two SSE2 registers, one AVX2 one in the clone the loader picks); the same
# IEEE subtraction and comparison as the scalar tail and the other compilers' loop.
cdef extern from *:
    """
    #include <stddef.h>
    #include <stdint.h>
    #include <string.h>

    #if defined(__x86_64__) && defined(__GLIBC__) && \
        ((defined(__GNUC__) && !defined(__clang__) && __GNUC__ >= 6) || \
         (defined(__clang__) && __clang_major__ >= 14))
    #  define RANKOPT_DENSE_CLONES __attribute__((target_clones("avx2", "default")))
    #else
    #  define RANKOPT_DENSE_CLONES
    #endif

    /* #{j : score - low[j] >= 0.5}, adding each j's outcome (0 or 1) to kept_by[j]. */
    RANKOPT_DENSE_CLONES static int64_t rankopt_kept_above(
            double score, const double* low, int64_t* kept_by, ptrdiff_t n) {
        ptrdiff_t j = 0;
        int64_t kept = 0;
    #if defined(__GNUC__) || defined(__clang__)
        typedef double rankopt_v4d __attribute__((vector_size(32)));
        typedef int64_t rankopt_v4l __attribute__((vector_size(32)));
        rankopt_v4l total = {0, 0, 0, 0};
        const rankopt_v4d half = {0.5, 0.5, 0.5, 0.5};
        for (; j + 4 <= n; j += 4) {
            rankopt_v4d x;
            rankopt_v4l counts;
            memcpy(&x, low + j, sizeof x);
            memcpy(&counts, kept_by + j, sizeof counts);
            rankopt_v4l stays = (score - x) >= half;  /* -1 where true, 0 elsewhere */
            total -= stays;
            counts -= stays;
            memcpy(kept_by + j, &counts, sizeof counts);
        }
        kept = total[0] + total[1] + total[2] + total[3];
    #endif
        for (; j < n; ++j) {
            int64_t stays = score - low[j] >= 0.5;
            kept += stays;
            kept_by[j] += stays;
        }
        return kept;
    }
    """
    int64_t rankopt_kept_above(double score, const double* low, int64_t* kept_by, Py_ssize_t n) noexcept nogil


# The merge's table (``_tabled_sweeps``): row c + 1 = row c + [t > level of the c-th highest document], sixteen
# 32-bit lanes a row, one vector add (four SSE2 ones, two in the AVX2 clone) where a Cython loop stays scalar.
cdef extern from *:
    """
    #include <stddef.h>
    #include <stdint.h>
    #include <string.h>

    RANKOPT_DENSE_CLONES static void rankopt_below_table(const int32_t* level, ptrdiff_t n, int32_t* table) {
    #if defined(__GNUC__) || defined(__clang__)
        /* Two halves of eight lanes (one AVX2 register each; a 64-byte vector goes through the stack). */
        typedef int32_t rankopt_v8i __attribute__((vector_size(32)));
        rankopt_v8i low_step[16], high_step[16], low = {0}, high = {0};  /* 1 in the lanes t > v */
        for (int v = 0; v < 16; ++v)
            for (int t = 0; t < 8; ++t) {
                low_step[v][t] = t > v;
                high_step[v][t] = t + 8 > v;
            }
        memcpy(table, &low, sizeof low);
        memcpy(table + 8, &high, sizeof high);
        for (ptrdiff_t c = 0; c < n; ++c) {
            low += low_step[level[c]];
            high += high_step[level[c]];
            memcpy(table + (c + 1) * 16, &low, sizeof low);
            memcpy(table + (c + 1) * 16 + 8, &high, sizeof high);
        }
    #else
        for (int t = 0; t < 16; ++t) table[t] = 0;
        for (ptrdiff_t c = 0; c < n; ++c)
            for (int t = 0; t < 16; ++t) table[(c + 1) * 16 + t] = table[c * 16 + t] + (t > level[c]);
    #endif
    }
    """
    void rankopt_below_table(const int32_t* level, Py_ssize_t n, int32_t* table) noexcept nogil


cdef int pairwise_work_init(PairwiseWork* work, Py_ssize_t size, Py_ssize_t n_grade_values) noexcept nogil:
    """Allocate ``work`` for queries of up to ``size`` documents; 0 on success, −1 when out of memory.

    ``n_grade_values`` > 0 promises grades in 0 … n_grade_values − 1: levels
    are then found by counting, O(n + n_grade_values) per query, instead of
    by sorting the grades (use it when that bound is small, as for LETOR's 0–4).
    """
    cdef Py_ssize_t n = size if size > 0 else 1
    work.size = size
    work.n_grade_values = n_grade_values
    work.grade_level = NULL
    if n_grade_values > 0:
        work.grade_level = <int64_t*>malloc(COUNT_TABLES * n_grade_values * sizeof(int64_t))
        if work.grade_level == NULL:
            return -1
    work.by_score = <Keyed*>malloc(n * sizeof(Keyed))
    work.sort_ids = <int32_t*>malloc(n * sizeof(int32_t))
    work.sort_ends = <int32_t*>malloc((SORT_BUCKETS_PER_SCORE * n + 1) * sizeof(int32_t))
    work.by_grade = <pair[int64_t, Py_ssize_t]*>malloc(n * sizeof(pair[int64_t, Py_ssize_t]))
    work.level = <Py_ssize_t*>malloc(n * sizeof(Py_ssize_t))
    work.level_size = <int64_t*>malloc(n * sizeof(int64_t))
    work.level_below = <int64_t*>malloc(n * sizeof(int64_t))
    work.level_truth = <double*>malloc(n * sizeof(double))
    work.tree = <int64_t*>malloc((n + 1) * sizeof(int64_t))
    work.kept_lower = <int64_t*>malloc(n * sizeof(int64_t))
    work.low_scores = <double*>malloc(n * sizeof(double))
    work.low_kept = <int64_t*>malloc(n * sizeof(int64_t))
    work.low_index = <Py_ssize_t*>malloc(n * sizeof(Py_ssize_t))
    work.high_index = <Py_ssize_t*>malloc(n * sizeof(Py_ssize_t))
    work.below_table = <int32_t*>malloc((min(n, <Py_ssize_t>TABLED_MAX) + 1) * TABLE_LANES * sizeof(int32_t))
    if (work.below_table == NULL or work.by_score == NULL or work.sort_ids == NULL or work.sort_ends == NULL or work.by_grade == NULL
            or work.level == NULL or work.level_size == NULL or work.level_below == NULL or work.level_truth == NULL or work.tree == NULL
            or work.kept_lower == NULL or work.low_scores == NULL or work.low_kept == NULL
            or work.low_index == NULL or work.high_index == NULL):
        pairwise_work_free(work)
        return -1
    return 0


cdef void pairwise_work_free(PairwiseWork* work) noexcept nogil:
    free(work.by_score)
    free(work.sort_ids)
    free(work.sort_ends)
    free(work.by_grade)
    free(work.level)
    free(work.level_size)
    free(work.level_below)
    free(work.level_truth)
    free(work.tree)
    free(work.kept_lower)
    free(work.low_scores)
    free(work.low_kept)
    free(work.low_index)
    free(work.high_index)
    free(work.below_table)
    free(work.grade_level)
    work.grade_level = NULL
    work.by_score = NULL
    work.sort_ids = NULL
    work.sort_ends = NULL
    work.by_grade = NULL
    work.level = NULL
    work.level_size = NULL
    work.level_below = NULL
    work.level_truth = NULL
    work.tree = NULL
    work.kept_lower = NULL
    work.low_scores = NULL
    work.low_kept = NULL
    work.low_index = NULL
    work.high_index = NULL
    work.below_table = NULL


cdef inline void _tree_add(int64_t* tree, Py_ssize_t n_levels, Py_ssize_t level) noexcept nogil:
    cdef Py_ssize_t t = level + 1
    while t <= n_levels:
        tree[t] += 1
        t += t & -t


cdef enum:
    # Up to this many grade levels the admitted documents are counted in a dense array of "admitted below
    # level t" (each admission adds to every entry, a fixed, branch-free loop) instead of a Fenwick tree,
    # whose data-dependent loops mispredict: LETOR's five grades.
    DENSE_LEVELS = 16
    # Up to this many documents above the lowest grade, every pair (higher, lower) is tested directly, in a
    # branch-free loop four pairs at a time (``rankopt_kept_above``): |upper| · n tests against the sweeps'
    # n data-dependent loop exits (a LETOR query: 10 graded documents of 100, 1,000 tests).
    DENSE_UPPER = 32
    # Queries up to this long sweep by merging (_tabled_sweeps), whose steps cost less than the loops' from 10³
    # to 10⁵ documents; its table takes 64 bytes a document, so it stops at 8 MB a thread.
    TABLED_MAX = 1 << 17
    # The merge's table holds the counts below levels 0 … TABLE_LANES − 1 for each document: queries of fewer
    # levels take it (LETOR's five), one vector of int32 a document.
    TABLE_LANES = 16


cdef inline void _admit(int64_t* tree, Py_ssize_t n_levels, Py_ssize_t level) noexcept nogil:
    """Count one admitted document of ``level``: a Fenwick tree, or the dense array below DENSE_LEVELS."""
    cdef Py_ssize_t t
    if n_levels <= DENSE_LEVELS:
        for t in range(n_levels + 1):
            tree[t] += t > level
    else:
        _tree_add(tree, n_levels, level)


cdef inline int64_t _admitted_below(const int64_t* tree, Py_ssize_t n_levels, Py_ssize_t level) noexcept nogil:
    """How many admitted documents have a level < ``level`` (0 ≤ level ≤ n_levels)."""
    if n_levels <= DENSE_LEVELS:
        return tree[level]
    return _tree_below(tree, level)


cdef inline int64_t _tree_below(const int64_t* tree, Py_ssize_t level) noexcept nogil:
    """How many admitted documents have a level < ``level``."""
    cdef int64_t total = 0
    cdef Py_ssize_t t = level
    while t > 0:
        total += tree[t]
        t -= t & -t
    return total


cdef void _dense_kept(const floating* scores, Py_ssize_t n, PairwiseWork* w) noexcept nogil:
    """A_i in ``w.kept_lower`` and B_i in ``w.tree`` (the sweeps' counts) by testing every pair whose higher
    document is above the lowest level: the same test, ``(double)s_i − (double)s_j >= 0.5``.

    The lowest level's documents, below every higher one, are gathered first (their scores as doubles, with
    their own counts) so that the test against them is a loop over two arrays without a level in it, four
    pairs a step (``rankopt_kept_above``); the few higher documents test each other with their levels.
    """
    cdef Py_ssize_t i, j, k, n_low = 0, n_high = 0, upper, is_low
    cdef int64_t kept, stays
    cdef double score
    cdef double* low_scores = w.low_scores
    cdef int64_t* low_kept = w.low_kept
    # Branch-free: each document is written to both lists, and only one of them advances.
    for k in range(n):
        is_low = w.level[k] == 0
        low_scores[n_low] = <double>scores[k]
        w.low_index[n_low] = k
        w.high_index[n_high] = k
        n_low += is_low
        n_high += 1 - is_low
    for j in range(n_low):
        low_kept[j] = 0
    for k in range(n):
        w.kept_lower[k] = 0
        w.tree[k] = 0
    for k in range(n_high):
        i = w.high_index[k]
        score = <double>scores[i]
        kept = rankopt_kept_above(score, low_scores, low_kept, n_low)
        upper = w.level[i]
        for j in range(n_high):
            stays = (w.level[w.high_index[j]] < upper) & (score - <double>scores[w.high_index[j]] >= 0.5)
            kept += stays
            w.tree[w.high_index[j]] += stays
        w.kept_lower[i] = kept
    for j in range(n_low):
        w.tree[w.low_index[j]] = low_kept[j]


cdef inline double _coefficient(PairwiseWork* w, Py_ssize_t n, Py_ssize_t level, int64_t kept_lower,
                                int64_t kept_higher, double scale, bint relative) noexcept nogil:
    """coef_i = ((2 A_i − L_i) − (2 B_i − H_i)) / #pairs, less the ground truth's (L_i − H_i) / #pairs when
    ``relative``, for a document of ``level`` with A_i = ``kept_lower`` and B_i = ``kept_higher``."""
    cdef int64_t lower = w.level_below[level]
    cdef int64_t higher = n - lower - w.level_size[level]
    cdef double coef = (<double>(2 * kept_lower - lower - 2 * kept_higher + higher)) * scale
    if relative:
        coef -= w.level_truth[level]
    return coef


cdef inline void _finish(const floating* scores, Py_ssize_t n, const double* coef, int64_t swapped, int64_t n_pairs,
                         double* loss, double* value) noexcept nogil:
    """The loss (swapped pairs over all) and the value Σ coef·s + loss, in index order."""
    cdef Py_ssize_t k
    cdef double dot = 0.0
    for k in range(n):
        dot += coef[k] * scores[k]
    loss[0] = (<double>swapped) / (<double>n_pairs)
    value[0] = dot + loss[0]


cdef inline int64_t _sorted_sweeps(const floating* scores, Py_ssize_t n, Py_ssize_t n_levels, PairwiseWork* w,
                                   double* coef, double scale, bint relative, const uint64_t* keys) noexcept nogil:
    """The coefficients of a query with many documents above its lowest level: two sweeps over the documents
    sorted by score (the order of ``keys``, sorted packed keys, when given), counting the kept pairs of each level
    in a Fenwick tree; the swapped pairs' count."""
    cdef Py_ssize_t k, t, p, i
    cdef int64_t swapped = 0, kept_higher, admitted
    cdef double s
    # Descending; ascending position k is descending position n − 1 − k, and −key is the score.
    if keys != NULL:
        keyed_from_packed(keys, n, w.by_score)
    else:
        descending_keyed(scores, n, w.by_score, w.sort_ids, w.sort_ends)
    cdef const Keyed* desc = w.by_score
    if n_levels < TABLE_LANES and n <= TABLED_MAX:
        return _tabled_sweeps(desc, n, w, coef, scale, relative)

    # A_i, ascending: admit every j with s_i − s_j ≥ 1/2.
    for t in range(n_levels + 1):
        w.tree[t] = 0
    p = n - 1
    for k in range(n - 1, -1, -1):
        s = -desc[k].key
        while p >= 0 and s - (-desc[p].key) >= 0.5:
            _admit(w.tree, n_levels, w.level[desc[p].idx])
            p -= 1
        i = desc[k].idx
        w.kept_lower[i] = _admitted_below(w.tree, n_levels, w.level[i])

    # B_i, descending: admit every j with s_j − s_i ≥ 1/2; then the coefficients.
    for t in range(n_levels + 1):
        w.tree[t] = 0
    p = 0
    admitted = 0
    for k in range(n):
        s = -desc[k].key
        while p < n and (-desc[p].key) - s >= 0.5:
            _admit(w.tree, n_levels, w.level[desc[p].idx])
            admitted += 1
            p += 1
        i = desc[k].idx
        kept_higher = admitted - _admitted_below(w.tree, n_levels, w.level[i] + 1)
        coef[i] = _coefficient(w, n, w.level[i], w.kept_lower[i], kept_higher, scale, relative)
        swapped += w.level_below[w.level[i]] - w.kept_lower[i]
    return swapped


cdef inline void _lower_step(const Keyed* desc, Py_ssize_t n, const int32_t* levels, const int32_t* table,
                             const int64_t* level_below, int64_t* kept_lower, Py_ssize_t* k,
                             Py_ssize_t* p) noexcept nogil:
    """One step of :func:`_tabled_sweeps`' merge for A: admit the next lowest document, or pass document k."""
    cdef Py_ssize_t level = levels[n - 1 - k[0]]
    cdef int64_t take = (-desc[n - 1 - k[0]].key) - (-desc[n - 1 - p[0]].key) >= 0.5
    kept_lower[n - 1 - k[0]] = level_below[level] - table[(n - p[0]) * TABLE_LANES + level]
    p[0] += take
    k[0] += 1 - take


cdef inline void _higher_step(const Keyed* desc, const int32_t* levels, const int32_t* table, int64_t* kept_higher,
                              Py_ssize_t* k, Py_ssize_t* p) noexcept nogil:
    """One step of :func:`_tabled_sweeps`' merge for B: admit the next highest document, or pass document k."""
    cdef int64_t take = (-desc[p[0]].key) - (-desc[k[0]].key) >= 0.5
    kept_higher[k[0]] = p[0] - table[p[0] * TABLE_LANES + levels[k[0]] + 1]
    p[0] += take
    k[0] += 1 - take


cdef inline int64_t _tabled_sweeps(const Keyed* desc, Py_ssize_t n, PairwiseWork* w, double* coef, double scale,
                                   bint relative) noexcept nogil:
    """:func:`_sorted_sweeps` for fewer than TABLE_LANES levels without a branch on the scores: a table T[c][t]
    = the documents among the c highest whose level is below t (``rankopt_below_table``, a vector add a
    document); then each sweep is a merge of the documents with themselves shifted by 1/2, one step per
    document admitted or passed (at most 2n), whose pointer p tells how many are admitted: A_i = (documents
    below level_i) − T[n − p][level_i] (the p lowest are the complement of the n − p highest) and B_i = p −
    T[p][level_i + 1], written at every step and final at the step that passes i.  The loops of
    :func:`_sorted_sweeps` exit on the scores, which a processor cannot predict (half of them mispredicted on a
    balanced query), and a merge that counted each admission by level (one add per level a step) waited on
    those counts; here a step is a comparison and a lookup, and A, B and the coefficients are written in the
    descending order (a long query's documents in their own order would be a cache miss each).  The same
    counts, so the same coefficients to the bit."""
    cdef Py_ssize_t ka = 0, pa = 0, kb = 0, pb = 0, c
    cdef int64_t swapped = 0
    cdef int32_t* table = w.below_table
    cdef int32_t* levels = <int32_t*>w.sort_ids  # free once the documents are sorted
    cdef int64_t* kept_lower = w.kept_lower  # A and B in descending order: written in sequence
    cdef int64_t* kept_higher = w.low_kept
    for c in range(n):
        levels[c] = <int32_t>w.level[desc[c].idx]
    rankopt_below_table(levels, n, table)
    # A, ascending (position ka is desc[n − 1 − ka]): admit j while s_i − s_j ≥ 1/2, which holds only for
    # j below i, so pa < ka whenever it is admitted.  B, descending: admit j while s_j − s_i ≥ 1/2 (j above
    # i).  Each step waits on the one before (its load's address is the pointer that step moved); the two
    # merges are independent, so they step together, and the processor overlaps their chains.
    while ka < n and kb < n:
        _lower_step(desc, n, levels, table, w.level_below, kept_lower, &ka, &pa)
        _higher_step(desc, levels, table, kept_higher, &kb, &pb)
    while ka < n:
        _lower_step(desc, n, levels, table, w.level_below, kept_lower, &ka, &pa)
    while kb < n:
        _higher_step(desc, levels, table, kept_higher, &kb, &pb)
    # The coefficients in descending order: one write a document in the query's.
    for c in range(n):
        coef[desc[c].idx] = _coefficient(w, n, levels[c], kept_lower[c], kept_higher[c], scale, relative)
        swapped += w.level_below[levels[c]] - kept_lower[c]
    return swapped


cdef bint _pairwise_query(const floating* scores, const int64_t* grades, Py_ssize_t n, PairwiseWork* w,
                          double* coef, double* loss, double* value, bint relative=False,
                          const uint64_t* keys=NULL) noexcept nogil:
    """One query (n ≤ w.size): fill ``coef[0:n]``, ``loss``, ``value``; False when it has one grade only.

    With ``relative`` the ground truth's coefficients, (L_i − H_i) / #pairs, are subtracted inside: the
    structured hinge's subgradient and value.  ``keys``: the query's packed keys sorted
    (``_batched.packed_descending_keys``, float32 scores), the order the sweeps read instead of sorting."""
    cdef Py_ssize_t k, t, i, n_levels = 0
    cdef int64_t n_pairs = 0, swapped = 0, lower, higher
    cdef double scale
    if w.n_grade_values > 0:
        count_values(grades, n, w.n_grade_values, w.grade_level)
        for t in range(w.n_grade_values):  # counts become levels, in increasing grade
            if w.grade_level[t] > 0:
                w.level_size[n_levels] = w.grade_level[t]
                w.grade_level[t] = n_levels
                n_levels += 1
        for k in range(n):
            w.level[k] = w.grade_level[grades[k]]
    else:
        for k in range(n):
            w.by_grade[k].first = grades[k]
            w.by_grade[k].second = k
        sort(w.by_grade, w.by_grade + n)
        for k in range(n):
            if k == 0 or w.by_grade[k].first != w.by_grade[k - 1].first:
                w.level_size[n_levels] = 0
                n_levels += 1
            w.level[w.by_grade[k].second] = n_levels - 1
            w.level_size[n_levels - 1] += 1
    if n_levels < 2:
        for k in range(n):
            coef[k] = 0.0
        loss[0] = 0.0
        value[0] = 0.0
        return False
    lower = 0
    for t in range(n_levels):
        w.level_below[t] = lower
        n_pairs += lower * w.level_size[t]
        lower += w.level_size[t]
    if relative:  # the ground truth's (L − H) / #pairs, ground_truth_coefficients's expression, once per level
        for t in range(n_levels):
            higher = n - w.level_below[t] - w.level_size[t]
            w.level_truth[t] = (<double>(w.level_below[t] - higher)) / (<double>n_pairs)

    scale = 1.0 / (<double>n_pairs)
    if n - w.level_size[0] <= DENSE_UPPER:
        _dense_kept(scores, n, w)
        for i in range(n):
            coef[i] = _coefficient(w, n, w.level[i], w.kept_lower[i], w.tree[i], scale, relative)
            swapped += w.level_below[w.level[i]] - w.kept_lower[i]
        _finish(scores, n, coef, swapped, n_pairs, loss, value)
        return True
    swapped = _sorted_sweeps(scores, n, n_levels, w, coef, scale, relative, keys)
    _finish(scores, n, coef, swapped, n_pairs, loss, value)
    return True


cdef bint _weighted_query(const floating* scores, const int64_t* levels, Py_ssize_t n, const double* weight,
                          Py_ssize_t n_levels, PairwiseWork* w, double* coef, double* loss,
                          double* value, bint relative=False) noexcept nogil:
    """One query of the pairwise loss with a weight per pair of grade levels (``weight[h * K + l]`` for h > l).

    Ψ = Σ_{g_i > g_j} w_ij y_ij (x_i − x_j) / W and Δ = Σ_{y_ij = −1} w_ij / W with W = Σ w_ij: still
    y_ij = +1 exactly when s_i − s_j ≥ 1/2.  With A_il the documents of level l < g_i that i stays
    above, B_ih those of level h > g_i that stay above i, and L_l the documents of level l,

        coef_i · W = Σ_{l < g_i} w(g_i, l) (2 A_il − L_l) − Σ_{h > g_i} w(h, g_i) (2 B_ih − L_h),
        Δ · W = Σ_i Σ_{l < g_i} w(g_i, l) (L_l − A_il),

    the two sweeps of the unweighted kernel counting per level: O(n K) for K levels.  With ``relative`` the
    ground truth's coefficients (every y_ij = +1: the L terms once more) are subtracted inside.
    ``levels`` are 0 … K − 1 (global, increasing with the grade); the caller validates.
    """
    cdef Py_ssize_t k, t, p, i, g
    cdef int64_t* size = w.level_size      # documents per level in this query
    cdef int64_t* admitted = w.level_below  # documents of each level admitted by the sweep
    cdef double total = 0.0, swapped = 0.0, part, s, dot = 0.0, lower_weight
    cdef int64_t truth_factor = 2 if relative else 1
    for t in range(n_levels):
        size[t] = 0
    for k in range(n):
        size[levels[k]] += 1
    for t in range(n_levels):
        for g in range(t):
            total += weight[t * n_levels + g] * (<double>size[t]) * (<double>size[g])
    if not total > 0.0:
        for k in range(n):
            coef[k] = 0.0
        loss[0] = 0.0
        value[0] = 0.0
        return False
    descending_keyed(scores, n, w.by_score, w.sort_ids, w.sort_ends)
    cdef const Keyed* desc = w.by_score
    # Lower levels, ascending: admit every j with s_i − s_j ≥ 1/2.
    for t in range(n_levels):
        admitted[t] = 0
    p = n - 1
    for k in range(n - 1, -1, -1):
        s = -desc[k].key
        while p >= 0 and s - (-desc[p].key) >= 0.5:
            admitted[levels[desc[p].idx]] += 1
            p -= 1
        i = desc[k].idx
        part = 0.0
        for g in range(levels[i]):
            lower_weight = weight[levels[i] * n_levels + g]
            part += lower_weight * (<double>(2 * admitted[g] - truth_factor * size[g]))
            swapped += lower_weight * (<double>(size[g] - admitted[g]))
        coef[i] = part
    # Higher levels, descending: admit every j with s_j − s_i ≥ 1/2.
    for t in range(n_levels):
        admitted[t] = 0
    p = 0
    for k in range(n):
        s = -desc[k].key
        while p < n and (-desc[p].key) - s >= 0.5:
            admitted[levels[desc[p].idx]] += 1
            p += 1
        i = desc[k].idx
        part = 0.0
        for g in range(levels[i] + 1, n_levels):
            part += weight[g * n_levels + levels[i]] * (<double>(2 * admitted[g] - truth_factor * size[g]))
        coef[i] = (coef[i] - part) / total
    for k in range(n):
        dot += coef[k] * scores[k]
    loss[0] = swapped / total
    value[0] = dot + loss[0]
    return True


cdef bint weighted_query_f64(const double* scores, const int64_t* levels, Py_ssize_t n, const double* weight,
                             Py_ssize_t n_levels, PairwiseWork* work, double* coef, double* loss,
                             double* value, bint relative) noexcept nogil:
    return _weighted_query(scores, levels, n, weight, n_levels, work, coef, loss, value, relative)


cdef bint weighted_query_f32(const float* scores, const int64_t* levels, Py_ssize_t n, const double* weight,
                             Py_ssize_t n_levels, PairwiseWork* work, double* coef, double* loss,
                             double* value, bint relative) noexcept nogil:
    return _weighted_query(scores, levels, n, weight, n_levels, work, coef, loss, value, relative)


cdef bint pairwise_query_f64(const double* scores, const int64_t* grades, Py_ssize_t n, PairwiseWork* work,
                             double* coef, double* loss, double* value, bint relative) noexcept nogil:
    return _pairwise_query(scores, grades, n, work, coef, loss, value, relative)


cdef bint pairwise_query_f32(const float* scores, const int64_t* grades, Py_ssize_t n, PairwiseWork* work,
                             double* coef, double* loss, double* value, bint relative,
                             const uint64_t* keys) noexcept nogil:
    return _pairwise_query(scores, grades, n, work, coef, loss, value, relative, keys)


def pairwise_query(const floating[::1] scores, const int64_t[::1] grades, Py_ssize_t n_grade_values=0):
    """One query's inference: (coef, loss, value, usable), for the tests.

    The caller validates: ``scores`` finite, ``grades`` of the same length,
    ≥ 0 and below ``n_grade_values`` when that is positive (counting levels).
    """
    cdef Py_ssize_t n = scores.shape[0]
    cdef PairwiseWork work
    cdef double loss_value = 0.0, value = 0.0
    cdef bint usable
    if grades.shape[0] != n:
        raise ValueError(f"expected {n} grades, got {grades.shape[0]} instead")
    coef = np.zeros(n, dtype=np.float64)
    cdef double[::1] coef_view = coef
    if n == 0:
        return coef, 0.0, 0.0, False
    if pairwise_work_init(&work, n, n_grade_values) != 0:
        raise MemoryError(f"cannot allocate the work arrays for {n} documents")
    try:
        with nogil:
            usable = _pairwise_query(&scores[0], &grades[0], n, &work, &coef_view[0], &loss_value, &value)
    finally:
        pairwise_work_free(&work)
    return coef, loss_value, value, usable
