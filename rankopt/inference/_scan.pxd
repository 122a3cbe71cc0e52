# One read of a score array for the checks every inference makes before it writes anything:
# the extremes (hence the largest magnitude, for the overflow-safe-sum rule of
# ``rankopt._validation.check_score_sums``) and whether every score is finite.
# Header only.  The kernels call it on blocks they have just read for their
# own work, so that the check costs no pass over memory of its own.
#
# The loop is written with GCC's vector extensions, since compilers do not
# vectorise a min/max reduction without -ffast-math (which would also license
# them to drop the NaN test).  x86-64 with GCC builds it for AVX2 and for the
# baseline, the loader picking one (as ``_buckets.pxd``'s bucket map); other
# compilers get the scalar loop, with the same results.

from cython cimport floating
from libc.math cimport isfinite


cdef extern from *:
    """
    #include <stddef.h>

    #if defined(__x86_64__) && defined(__GLIBC__) && defined(__GNUC__) && !defined(__clang__) && __GNUC__ >= 6
    #  define RANKOPT_SCAN_CLONES __attribute__((target_clones("avx2", "default")))
    #else
    #  define RANKOPT_SCAN_CLONES
    #endif

    /* Extremes of x[0 … n-1] folded into lo[0], hi[0]; bad[0] becomes NaN when an entry is
       NaN or infinite (x - x is 0 for finite x, NaN otherwise, and NaN survives the sum).
       A NaN never enters lo or hi: comparisons with it are false. */
    #define RANKOPT_EXTREMES_BODY(T, LANES)                                                      \\
        ptrdiff_t k = 0;                                                                         \\
        T l = (T)lo[0], h = (T)hi[0], b = (T)0;                                                  \\
        RANKOPT_EXTREMES_VECTOR(T, LANES)                                                        \\
        for (; k < n; ++k) {                                                                     \\
            T v = x[k];                                                                          \\
            l = v < l ? v : l;                                                                   \\
            h = v > h ? v : h;                                                                   \\
            b += v - v;                                                                          \\
        }                                                                                        \\
        lo[0] = l; hi[0] = h; bad[0] += b;

    #if defined(__GNUC__) && !defined(__clang__) && defined(__cplusplus)
    /* Two independent vectors of lanes per step, so that consecutive compares do not wait on each other. */
    #  define RANKOPT_EXTREMES_VECTOR(T, LANES)                                                  \\
        {                                                                                        \\
            typedef T vec __attribute__((vector_size(LANES * sizeof(T))));                      \\
            vec l1 = l - (vec){}, l2 = l1, h1 = h - (vec){}, h2 = h1, b1 = (vec){}, b2 = b1;     \\
            for (; k + 2 * LANES <= n; k += 2 * LANES) {                                         \\
                vec v1, v2;                                                                      \\
                __builtin_memcpy(&v1, x + k, sizeof(vec));                                       \\
                __builtin_memcpy(&v2, x + k + LANES, sizeof(vec));                               \\
                l1 = v1 < l1 ? v1 : l1;  h1 = v1 > h1 ? v1 : h1;  b1 += v1 - v1;                 \\
                l2 = v2 < l2 ? v2 : l2;  h2 = v2 > h2 ? v2 : h2;  b2 += v2 - v2;                 \\
            }                                                                                    \\
            for (int t = 0; t < LANES; ++t) {                                                    \\
                l = l1[t] < l ? l1[t] : l;  l = l2[t] < l ? l2[t] : l;                           \\
                h = h1[t] > h ? h1[t] : h;  h = h2[t] > h ? h2[t] : h;                           \\
                b += b1[t] + b2[t];                                                              \\
            }                                                                                    \\
        }
    #else
    #  define RANKOPT_EXTREMES_VECTOR(T, LANES)
    #endif

    RANKOPT_SCAN_CLONES static void rankopt_extremes_f64(const double* x, ptrdiff_t n, double* lo,
                                                         double* hi, double* bad) {
        RANKOPT_EXTREMES_BODY(double, 4)
    }

    RANKOPT_SCAN_CLONES static void rankopt_extremes_f32(const float* x, ptrdiff_t n, double* lo,
                                                         double* hi, double* bad) {
        RANKOPT_EXTREMES_BODY(float, 8)
    }
    """
    void rankopt_extremes_f64(const double* x, Py_ssize_t n, double* lo, double* hi, double* bad) noexcept nogil
    void rankopt_extremes_f32(const float* x, Py_ssize_t n, double* lo, double* hi, double* bad) noexcept nogil


cdef struct ScoreScan:
    # What the scanned scores are measured against (set by the caller) …
    double largest_other   # the largest |score| of the scores scanned elsewhere (the positives)
    double n_documents     # the documents whose scores are summed (|P| + |N|)
    double sum_bound       # the largest |score| × n_documents allowed (check_score_sums's bound)
    # … and what the scan found.
    double lo, hi          # extremes of the scanned scores (meaningful when finite)
    double bad             # NaN when a scanned score is NaN or infinite, else 0
    double largest         # max(largest_other, |lo|, |hi|)
    int status             # one of the SCAN_* codes


cdef enum:
    SCAN_OK = 0
    SCAN_NOT_FINITE = 1
    SCAN_OVERFLOW = 2


cdef inline void scan_start(ScoreScan* scan, const floating* x) noexcept nogil:
    """Start the extremes at x[0] (the caller guarantees n ≥ 1)."""
    scan.lo = x[0]
    scan.hi = x[0]
    scan.bad = 0.0
    scan.status = SCAN_OK


cdef inline void scan_block(ScoreScan* scan, const floating* x, Py_ssize_t n) noexcept nogil:
    if floating is double:
        rankopt_extremes_f64(x, n, &scan.lo, &scan.hi, &scan.bad)
    else:
        rankopt_extremes_f32(x, n, &scan.lo, &scan.hi, &scan.bad)


cdef inline int scan_verdict(ScoreScan* scan) noexcept nogil:
    """The status of the scores scanned so far, with ``check_score_sums``'s comparison (same doubles)."""
    cdef double largest = -scan.lo if -scan.lo > scan.hi else scan.hi
    if not (scan.bad == 0.0 and isfinite(scan.lo) and isfinite(scan.hi)):
        scan.status = SCAN_NOT_FINITE
        return scan.status
    scan.largest = largest if largest > scan.largest_other else scan.largest_other
    scan.status = SCAN_OVERFLOW if scan.largest * scan.n_documents > scan.sum_bound else SCAN_OK
    return scan.status


cdef inline int scan_all(ScoreScan* scan, const floating* x, Py_ssize_t n) noexcept nogil:
    """Scan x[0 … n − 1] (n ≥ 1) in one go; return the verdict."""
    scan_start(scan, x)
    scan_block(scan, x, n)
    return scan_verdict(scan)
