# cython: language_level=3
# The order of a list of at most sixteen values by counting: each value's count of the values below it (and of
# those equal to it), all sixteen lanes compared with one value at a time.  For the short queries of the graded
# position kernel (a list of ten under NDCG@10: the gains' order and the keys') and of the binary batch (the
# scores' order), where a sort of ten values costs a mispredicted branch about every other step and a count
# over variable-length loops stays scalar.
#
# Exact: the values are converted to double and multiplied by ±1, both exact, and compared; the counts are
# integers.  Equal values share a count, so a caller that needs a strict order checks for ties (the counts
# of distinct values below each are 0 … n − 1, and sum to less when two are equal).
from libc.stdint cimport int32_t


cdef extern from *:
    """
    #include <math.h>
    #include <stddef.h>
    #include <stdint.h>
    #include <string.h>

    #if defined(__x86_64__) && defined(__GLIBC__) && \\
        ((defined(__GNUC__) && !defined(__clang__) && __GNUC__ >= 6) || \\
         (defined(__clang__) && __clang_major__ >= 14))
    #  define RANKOPT_SHORT_CLONES __attribute__((target_clones("avx2", "default")))
    #else
    #  define RANKOPT_SHORT_CLONES
    #endif

    #define RANKOPT_SHORT_LANES 16

    #if defined(__GNUC__) || defined(__clang__)
    #  define RANKOPT_SHORT_INLINE static inline __attribute__((always_inline))
    #else
    #  define RANKOPT_SHORT_INLINE static inline
    #endif

    /* below[i] = #{t : v_t < v_i} and, where equal is not NULL, equal[i] = #{t : v_t == v_i} (itself
       included) for the n <= 16 values in lanes[0 .. n) (the lanes past n hold anything finite). */
    RANKOPT_SHORT_INLINE void rankopt_short_counts_lanes(
            const double* lanes, ptrdiff_t n, int32_t* below, int32_t* equal) {
    #if defined(__GNUC__) || defined(__clang__)
        /* Four quarters of four lanes (one AVX2 register each, two SSE2 ones), named so that they stay in
           registers; comparisons give -1 where true. */
        typedef double rankopt_v4d __attribute__((vector_size(32)));
        typedef int64_t rankopt_v4l __attribute__((vector_size(32)));
        rankopt_v4d q0, q1, q2, q3;
        rankopt_v4l l0 = {0, 0, 0, 0}, l1 = l0, l2 = l0, l3 = l0, e0 = l0, e1 = l0, e2 = l0, e3 = l0;
        int64_t counts[RANKOPT_SHORT_LANES];
        memcpy(&q0, lanes, sizeof q0);
        memcpy(&q1, lanes + 4, sizeof q1);
        memcpy(&q2, lanes + 8, sizeof q2);
        memcpy(&q3, lanes + 12, sizeof q3);
        if (equal != NULL) {
            for (ptrdiff_t t = 0; t < n; ++t) {
                const rankopt_v4d x = {lanes[t], lanes[t], lanes[t], lanes[t]};
                l0 -= x < q0; l1 -= x < q1; l2 -= x < q2; l3 -= x < q3;
                e0 -= x == q0; e1 -= x == q1; e2 -= x == q2; e3 -= x == q3;
            }
            memcpy(counts, &e0, sizeof e0);
            memcpy(counts + 4, &e1, sizeof e1);
            memcpy(counts + 8, &e2, sizeof e2);
            memcpy(counts + 12, &e3, sizeof e3);
            for (ptrdiff_t i = 0; i < n; ++i) equal[i] = (int32_t)counts[i];
        } else {
            for (ptrdiff_t t = 0; t < n; ++t) {
                const rankopt_v4d x = {lanes[t], lanes[t], lanes[t], lanes[t]};
                l0 -= x < q0; l1 -= x < q1; l2 -= x < q2; l3 -= x < q3;
            }
        }
        memcpy(counts, &l0, sizeof l0);
        memcpy(counts + 4, &l1, sizeof l1);
        memcpy(counts + 8, &l2, sizeof l2);
        memcpy(counts + 12, &l3, sizeof l3);
        for (ptrdiff_t i = 0; i < n; ++i) below[i] = (int32_t)counts[i];
    #else
        for (ptrdiff_t i = 0; i < n; ++i) {
            int32_t lower = 0, same = 0;
            for (ptrdiff_t t = 0; t < n; ++t) {
                lower += lanes[t] < lanes[i];
                same += lanes[t] == lanes[i];
            }
            below[i] = lower;
            if (equal != NULL) equal[i] = same;
        }
    #endif
    }

    /* The counts of v = sign * value for double or float values (sign 1 or -1: -1 counts those above). */
    RANKOPT_SHORT_CLONES static void rankopt_short_counts_f64(
            const double* values, double sign, ptrdiff_t n, int32_t* below, int32_t* equal) {
        double lanes[RANKOPT_SHORT_LANES];
        for (ptrdiff_t t = 0; t < RANKOPT_SHORT_LANES; ++t) lanes[t] = t < n ? sign * values[t] : 0.0;
        rankopt_short_counts_lanes(lanes, n, below, equal);
    }

    RANKOPT_SHORT_CLONES static void rankopt_short_counts_f32(
            const float* values, double sign, ptrdiff_t n, int32_t* below, int32_t* equal) {
        double lanes[RANKOPT_SHORT_LANES];
        for (ptrdiff_t t = 0; t < RANKOPT_SHORT_LANES; ++t) lanes[t] = t < n ? sign * (double)values[t] : 0.0;
        rankopt_short_counts_lanes(lanes, n, below, equal);
    }
    """
    int SHORT_LANES "RANKOPT_SHORT_LANES"
    void short_counts_f64 "rankopt_short_counts_f64"(const double* values, double sign, Py_ssize_t n, int32_t* below,
                                                      int32_t* equal) noexcept nogil
    void short_counts_f32 "rankopt_short_counts_f32"(const float* values, double sign, Py_ssize_t n, int32_t* below,
                                                      int32_t* equal) noexcept nogil


cdef inline bint short_counts_distinct(const int32_t* below, Py_ssize_t n) noexcept nogil:
    """Whether the n values whose counts below are ``below`` are distinct: their counts are then 0 … n − 1, and
    equal values, sharing a count, make the sum smaller."""
    cdef Py_ssize_t i, total = 0
    for i in range(n):
        total += below[i]
    return total == n * (n - 1) // 2
