# cython: language_level=3
# A padded batch's kept documents moved by AVX-512's compress and expand, sixteen (eight) values an instruction:
# the gather of the scores and labels into the flat layout and the scatter of the gradient back, where a mask
# with holes leaves the row-by-row moves of ``_batched.pyx`` one store a document that waits on the count of
# the kept ones before it.  x86-64 with GCC ≥ 7 or clang ≥ 14 only, chosen at run time (``moves_vectorised``);
# elsewhere the callers keep their own loops.
#
# The same values to the bit: a gather copies; a scatter rounds source · factor to the output's type once, as
# the scalar loop does (one IEEE multiplication, one conversion), and writes +0.0 where the mask drops a place.
# Neither moves past ``n_kept`` / ``n_source`` values, whatever the mask holds.
from libc.stdint cimport int8_t, int64_t, uint8_t, uint64_t


cdef extern from *:
    """
    #include <stddef.h>
    #include <stdint.h>

    #if defined(__x86_64__) && \
        ((defined(__GNUC__) && !defined(__clang__) && __GNUC__ >= 7) || \
         (defined(__clang__) && __clang_major__ >= 14))
    #  define RANKOPT_MOVES_AVX512 1
    #  include <immintrin.h>
    #  define RANKOPT_MOVES_TARGET __attribute__((target("avx512f,popcnt")))
    #else
    #  define RANKOPT_MOVES_AVX512 0
    #endif

    static int rankopt_moves_vectorised(void) {
    #if RANKOPT_MOVES_AVX512
        __builtin_cpu_init();
        return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("popcnt");
    #else
        return 0;
    #endif
    }

    #if RANKOPT_MOVES_AVX512
    /* The lanes whose mask byte is nonzero, of the sixteen (eight) bytes from ``keep``. */
    RANKOPT_MOVES_TARGET static inline __mmask16 rankopt_kept16(const uint8_t* keep) {
        __m512i flags = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i*)keep));
        return _mm512_test_epi32_mask(flags, flags);
    }

    RANKOPT_MOVES_TARGET static inline __mmask8 rankopt_kept8(const uint8_t* keep) {
        __m512i flags = _mm512_cvtepu8_epi64(_mm_loadl_epi64((const __m128i*)keep));
        return _mm512_test_epi64_mask(flags, flags);
    }

    RANKOPT_MOVES_TARGET static ptrdiff_t rankopt_compress_f32(
            const float* source, const uint8_t* keep, ptrdiff_t n, ptrdiff_t n_kept, float* target) {
        ptrdiff_t i = 0, at = 0;
        for (; i + 16 <= n && at + 16 <= n_kept; i += 16) {
            __mmask16 k = rankopt_kept16(keep + i);
            int count = __builtin_popcount((unsigned)k);
            _mm512_mask_storeu_ps(target + at, (__mmask16)((1u << count) - 1u),
                                  _mm512_maskz_compress_ps(k, _mm512_loadu_ps(source + i)));
            at += count;
        }
        for (; i < n && at < n_kept; ++i)
            if (keep[i]) target[at++] = source[i];
        return at;
    }

    RANKOPT_MOVES_TARGET static ptrdiff_t rankopt_compress_f64(
            const double* source, const uint8_t* keep, ptrdiff_t n, ptrdiff_t n_kept, double* target) {
        ptrdiff_t i = 0, at = 0;
        for (; i + 8 <= n && at + 8 <= n_kept; i += 8) {
            __mmask8 k = rankopt_kept8(keep + i);
            int count = __builtin_popcount((unsigned)k);
            _mm512_mask_storeu_pd(target + at, (__mmask8)((1u << count) - 1u),
                                  _mm512_maskz_compress_pd(k, _mm512_loadu_pd(source + i)));
            at += count;
        }
        for (; i < n && at < n_kept; ++i)
            if (keep[i]) target[at++] = source[i];
        return at;
    }

    RANKOPT_MOVES_TARGET static ptrdiff_t rankopt_expand_f32(
            const double* source, ptrdiff_t n_source, double factor, const uint8_t* keep, ptrdiff_t n, float* target) {
        ptrdiff_t i = 0, at = 0;
        __m512d times = _mm512_set1_pd(factor);
        for (; i + 8 <= n && at + 8 <= n_source; i += 8) {
            __mmask8 k = rankopt_kept8(keep + i);
            __m512d values = _mm512_maskz_mul_pd(k, _mm512_maskz_expandloadu_pd(k, source + at), times);
            _mm256_storeu_ps(target + i, _mm512_cvtpd_ps(values));
            at += __builtin_popcount((unsigned)k);
        }
        for (; i < n; ++i) {
            int kept = keep[i] != 0 && at < n_source;
            target[i] = kept ? (float)(source[at] * factor) : 0.0f;
            at += kept;
        }
        return at;
    }

    RANKOPT_MOVES_TARGET static ptrdiff_t rankopt_expand_f64(
            const double* source, ptrdiff_t n_source, double factor, const uint8_t* keep, ptrdiff_t n, double* target) {
        ptrdiff_t i = 0, at = 0;
        __m512d times = _mm512_set1_pd(factor);
        for (; i + 8 <= n && at + 8 <= n_source; i += 8) {
            __mmask8 k = rankopt_kept8(keep + i);
            _mm512_storeu_pd(target + i, _mm512_maskz_mul_pd(k, _mm512_maskz_expandloadu_pd(k, source + at), times));
            at += __builtin_popcount((unsigned)k);
        }
        for (; i < n; ++i) {
            int kept = keep[i] != 0 && at < n_source;
            target[i] = kept ? source[at] * factor : 0.0;
            at += kept;
        }
        return at;
    }
    RANKOPT_MOVES_TARGET static ptrdiff_t rankopt_compress_labels(
            const int64_t* source, const uint8_t* keep, ptrdiff_t n, ptrdiff_t n_kept, int8_t* narrow,
            int64_t* wide, uint64_t* bits) {
        ptrdiff_t i = 0, at = 0;
        uint64_t ored_tail = 0;
        __m512i ored = _mm512_setzero_si512();
        for (; i + 8 <= n && at + 8 <= n_kept; i += 8) {
            __mmask8 k = rankopt_kept8(keep + i);
            int count = __builtin_popcount((unsigned)k);
            __m512i values = _mm512_loadu_si512((const void*)(source + i));
            __m512i packed = _mm512_maskz_compress_epi64(k, values);
            ored = _mm512_mask_or_epi64(ored, k, ored, values);
            if (narrow != NULL)  /* eight bytes, room for them checked: the low byte of each, as a cast */
                _mm_storel_epi64((__m128i*)(narrow + at), _mm512_cvtepi64_epi8(packed));
            else
                _mm512_mask_storeu_epi64(wide + at, (__mmask8)((1u << count) - 1u), packed);
            at += count;
        }
        for (; i < n && at < n_kept; ++i) {
            if (!keep[i]) continue;
            ored_tail |= (uint64_t)source[i];
            if (narrow != NULL) narrow[at] = (int8_t)source[i]; else wide[at] = source[i];
            ++at;
        }
        *bits |= ored_tail | (uint64_t)_mm512_reduce_or_epi64(ored);
        return at;
    }
    #else
    static ptrdiff_t rankopt_compress_labels(const int64_t* s, const uint8_t* k, ptrdiff_t n, ptrdiff_t m,
                                             int8_t* narrow, int64_t* wide, uint64_t* bits) {
        return 0;
    }
    static ptrdiff_t rankopt_compress_f32(const float* s, const uint8_t* k, ptrdiff_t n, ptrdiff_t m, float* t) {
        return 0;
    }
    static ptrdiff_t rankopt_compress_f64(const double* s, const uint8_t* k, ptrdiff_t n, ptrdiff_t m, double* t) {
        return 0;
    }
    static ptrdiff_t rankopt_expand_f32(const double* s, ptrdiff_t m, double f, const uint8_t* k, ptrdiff_t n,
                                        float* t) {
        return 0;
    }
    static ptrdiff_t rankopt_expand_f64(const double* s, ptrdiff_t m, double f, const uint8_t* k, ptrdiff_t n,
                                        double* t) {
        return 0;
    }
    #endif
    """
    # Whether this machine runs the functions below (AVX-512F); when not, they must not be called.
    bint moves_vectorised "rankopt_moves_vectorised"() noexcept nogil
    # The kept values of source[0 … n − 1] (keep[i] ≠ 0) to target, at most n_kept of them; returns how many.
    Py_ssize_t compress_f32 "rankopt_compress_f32"(const float* source, const uint8_t* keep, Py_ssize_t n,
                                                   Py_ssize_t n_kept, float* target) noexcept nogil
    Py_ssize_t compress_f64 "rankopt_compress_f64"(const double* source, const uint8_t* keep, Py_ssize_t n,
                                                   Py_ssize_t n_kept, double* target) noexcept nogil
    # Labels: compress_f64's move of int64 values, to ``narrow`` as their low byte (NULL: to ``wide`` as they
    # are), their bitwise OR added to ``bits``.
    Py_ssize_t compress_labels "rankopt_compress_labels"(const int64_t* source, const uint8_t* keep, Py_ssize_t n,
                                                         Py_ssize_t n_kept, int8_t* narrow, int64_t* wide,
                                                         uint64_t* bits) noexcept nogil
    # target[i] = the next source value · factor where keep[i] ≠ 0 (while source lasts), else +0.0, for i < n;
    # returns how many source values were read.
    Py_ssize_t expand_f32 "rankopt_expand_f32"(const double* source, Py_ssize_t n_source, double factor,
                                               const uint8_t* keep, Py_ssize_t n, float* target) noexcept nogil
    Py_ssize_t expand_f64 "rankopt_expand_f64"(const double* source, Py_ssize_t n_source, double factor,
                                               const uint8_t* keep, Py_ssize_t n, double* target) noexcept nogil
