# cython: language_level=3
"""The LETOR / SVM-light line parser: one block of whole lines to CSR pieces, in one pass, without the GIL.

A line is ``label [qid:Q] index:value ... [# comment]``, tokens apart by spaces, tabs, vertical tabs or form
feeds, lines ended by LF, CRLF or a lone CR.  Numbers follow Python's ``float`` / ``int`` syntax (no
underscores): the label and values through ``std::from_chars`` (correctly rounded, never the locale's), the
query id and feature index as decimal integers.  Every value is checked after its cast to the output type, so a
float32 store never holds the infinity that 1e39 becomes.  The caller (:mod:`rankopt.data.letor`) validates the
block's place in the file and words the errors; this module reports a code, a line and the token.
"""

from libc.stdint cimport int32_t, int64_t, uint64_t
from libc.math cimport isfinite

import numpy as np

cimport cython
from cython cimport floating


cdef extern from *:
    """
    #include <charconv>
    #include <cstdlib>
    #include <cstring>
    #include <string>
    #include <system_error>

    static const double rankopt_powers_of_ten[23] = {
        1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10, 1e11,
        1e12, 1e13, 1e14, 1e15, 1e16, 1e17, 1e18, 1e19, 1e20, 1e21, 1e22};

    /* The whole of [first, last) as a float in Python's syntax (sign, digits, point, exponent; inf and nan
       too, which the caller refuses), through std::from_chars, correctly rounded and never the locale's: 1
       and the value, or 0.  Its overflow and underflow are told apart by strtod on a copy (rare), as Python
       does: 1e400 is inf, 1e-400 is 0. */
    static inline int rankopt_parse_double(const char* first, const char* last, double* out) {
        const char* p = first;
        bool negative = false;
        if (p < last && (*p == '+' || *p == '-')) { negative = (*p == '-'); ++p; }
        if (p == last || *p == '+' || *p == '-') return 0;
        double value = 0.0;
        std::from_chars_result result = std::from_chars(p, last, value, std::chars_format::general);
        if (result.ptr != last || result.ec == std::errc::invalid_argument) return 0;
        if (result.ec == std::errc::result_out_of_range) {
            std::string copy(p, last);
            value = std::strtod(copy.c_str(), nullptr);
        }
        *out = negative ? -value : value;
        return 1;
    }

    static inline bool rankopt_ends_token(char c) {
        return c == ' ' || c == '\\t' || c == '\\v' || c == '\\f' || c == '\\r' || c == '\\n' || c == '#';
    }

    /* The number that starts at first and runs to the end of its token: 1 and the value, or 0; *stop is
       the token's end either way.  A plain decimal is read in the same pass that finds its end: at most 19
       digits making an integer m <= 2**53, at most 22 of them after the point, is m / 10**k, both exact
       doubles, so the one division is the correctly rounded value (Clinger's fast path).  Anything else
       goes to rankopt_parse_double. */
    static inline int rankopt_scan_double(const char* first, const char* end, double* out, const char** stop) {
        const char* p = first;
        bool negative = false;
        if (p < end && (*p == '+' || *p == '-')) { negative = (*p == '-'); ++p; }
        unsigned long long mantissa = 0;
        int digits = 0, after_point = 0;
        const char* q = p;
        while (q < end && (unsigned)(*q - '0') < 10u && digits < 20) {
            mantissa = mantissa * 10 + (unsigned long long)(*q - '0'); ++digits; ++q;
        }
        if (q < end && *q == '.') {
            ++q;
            while (q < end && (unsigned)(*q - '0') < 10u && digits < 20) {
                mantissa = mantissa * 10 + (unsigned long long)(*q - '0'); ++digits; ++after_point; ++q;
            }
        }
        if ((q == end || rankopt_ends_token(*q)) && digits > 0 && digits <= 19 && mantissa <= (1ULL << 53)
                && after_point <= 22) {
            double value = (double)mantissa;
            if (after_point) value /= rankopt_powers_of_ten[after_point];
            *out = negative ? -value : value;
            *stop = q;
            return 1;
        }
        while (q < end && !rankopt_ends_token(*q)) ++q;
        *stop = q;
        return rankopt_parse_double(first, q, out);
    }
    """
    bint rankopt_ends_token(char c) nogil
    int rankopt_scan_double(const char* first, const char* end, double* out, const char** stop) nogil


# Error codes, worded by rankopt.data.letor (its ERRORS table follows this order).
cdef enum:
    OK = 0
    BAD_LABEL = 1
    LABEL_NOT_FINITE = 2
    BAD_QID = 3
    QID_TOO_LARGE = 4
    BAD_FEATURE = 5
    INDEX_TOO_LARGE = 6
    NEGATIVE_INDEX = 7
    BAD_VALUE = 8
    VALUE_NOT_FINITE = 9
    INDICES_NOT_INCREASING = 10
    INDEX_BELOW_BASE = 11

#: Feature indices are stored as int32: 2**31 and beyond are refused.
cdef int64_t INDEX_LIMIT = 2147483648


cdef inline bint _is_space(char c) noexcept nogil:
    return c == b' ' or c == b'\t' or c == b'\v' or c == b'\f'


cdef inline const char* _token_end(const char* p, const char* end) noexcept nogil:
    while p < end and not rankopt_ends_token(p[0]):
        p += 1
    return p


cdef inline const char* _skip_spaces(const char* p, const char* end) noexcept nogil:
    while p < end and _is_space(p[0]):
        p += 1
    return p


cdef inline const char* _line_end(const char* p, const char* end) noexcept nogil:
    while p < end and p[0] != b'\n' and p[0] != b'\r':
        p += 1
    return p


cdef inline int _parse_qid(const char* p, const char* end, int64_t* out) noexcept nogil:
    """A query id: OK, BAD_QID or QID_TOO_LARGE (beyond int64, either sign)."""
    cdef bint negative = False
    cdef uint64_t value = 0
    cdef uint64_t limit
    cdef bint too_large = False
    if p < end and (p[0] == b'+' or p[0] == b'-'):
        negative = p[0] == b'-'
        p += 1
    if p == end:
        return BAD_QID
    limit = (<uint64_t>1 << 63) if negative else ((<uint64_t>1 << 63) - 1)
    while p < end:
        if p[0] < c'0' or p[0] > c'9':
            return BAD_QID
        if not too_large:
            if value > (limit - <uint64_t>(p[0] - c'0')) // 10:
                too_large = True
            else:
                value = value * 10 + <uint64_t>(p[0] - c'0')
        p += 1
    if too_large:
        return QID_TOO_LARGE
    out[0] = -<int64_t>(value - 1) - 1 if negative and value else <int64_t>value
    return OK


@cython.boundscheck(False)
@cython.wraparound(False)
def upper_bounds(const unsigned char[::1] text):
    """(rows, stored values) a block can hold at most: its line breaks + 1, and its colons."""
    cdef Py_ssize_t i, n = text.shape[0]
    cdef Py_ssize_t breaks = 0, colons = 0
    cdef unsigned char c
    with nogil:
        for i in range(n):
            c = text[i]
            breaks += (c == b'\n') + (c == b'\r')
            colons += c == b':'
    return breaks + 1, colons


cdef struct Cursor:
    # Where the parse is, and what it has counted; the token is the last one read (the culprit on an error).
    const char* p
    const char* end
    const char* token
    const char* stop
    int64_t nnz
    int64_t largest
    int64_t smallest


cdef inline int _scan_index(Cursor* at, int64_t* out) noexcept nogil:
    """The feature index that starts the token at ``at.token``, up to its colon (``at.p`` then just past
    it): OK, BAD_FEATURE, NEGATIVE_INDEX or INDEX_TOO_LARGE (``at.stop`` set to the token's end on an error)."""
    cdef const char* p = at.token
    cdef const char* end = at.end
    cdef bint negative = False
    cdef uint64_t value = 0
    cdef int digits = 0
    if p < end and (p[0] == b'+' or p[0] == b'-'):
        negative = p[0] == b'-'
        p += 1
    while p < end and p[0] >= c'0' and p[0] <= c'9':
        if value < <uint64_t>INDEX_LIMIT:  # past the limit it only grows: stop before it can wrap
            value = value * 10 + <uint64_t>(p[0] - c'0')
        digits += 1
        p += 1
    if digits == 0 or p == end or p[0] != b':':
        at.stop = _token_end(p, end)
        return BAD_FEATURE
    if (negative and value != 0) or value >= <uint64_t>INDEX_LIMIT:
        at.stop = _token_end(p, end)
        return NEGATIVE_INDEX if negative else INDEX_TOO_LARGE
    out[0] = <int64_t>value
    at.p = p + 1
    return OK


@cython.boundscheck(False)
@cython.wraparound(False)
cdef inline int _parse_features(
    Cursor* at, int64_t min_index, int32_t* indices, floating* data
) noexcept nogil:
    """One line's index:value pairs, up to its end or comment: OK or an error code."""
    cdef int64_t index, previous = -1
    cdef double value
    cdef floating cast
    cdef int code
    while at.p < at.end and at.p[0] != b'\n' and at.p[0] != b'\r':
        if at.p[0] == b'#':
            at.p = _line_end(at.p, at.end)
            break
        at.token = at.p
        code = _scan_index(at, &index)
        if code != OK:
            return code
        if not rankopt_scan_double(at.p, at.end, &value, &at.stop):
            return BAD_VALUE
        cast = <floating>value
        if not isfinite(cast):
            return VALUE_NOT_FINITE
        if index < min_index:
            return INDEX_BELOW_BASE
        if index <= previous:
            return INDICES_NOT_INCREASING
        previous = index
        if index > at.largest:
            at.largest = index
        if index < at.smallest:
            at.smallest = index
        indices[at.nnz] = <int32_t>index
        data[at.nnz] = cast
        at.nnz += 1
        at.p = _skip_spaces(at.stop, at.end)
    return OK


@cython.boundscheck(False)
@cython.wraparound(False)
cdef int _parse(
    const char* begin,
    const char* end,
    int64_t min_index,
    double* y,
    int64_t* qid,
    int64_t* indptr,
    int32_t* indices,
    floating* data,
    int64_t* counts,
) noexcept nogil:
    """Parse [begin, end) into the arrays; counts: rows, nnz, line breaks, rows with qid, first line with and
    without qid, largest and smallest index, and on an error its line and token (start, end offsets)."""
    cdef Cursor at
    cdef int64_t line = 0, row = 0, with_qid = 0, first_with = -1, first_without = -1, query
    cdef double label
    cdef int code = OK
    at.p, at.end, at.token, at.stop = begin, end, begin, begin
    at.nnz, at.largest, at.smallest = 0, -1, INDEX_LIMIT
    indptr[0] = 0
    while at.p < end:
        at.p = _skip_spaces(at.p, end)
        if at.p == end:
            break
        if at.p[0] == b'\n' or at.p[0] == b'\r':
            at.p += 2 if at.p[0] == b'\r' and at.p + 1 < end and at.p[1] == b'\n' else 1
            line += 1
            continue
        if at.p[0] == b'#':
            at.p = _line_end(at.p, end)
            continue
        at.token = at.p
        if not rankopt_scan_double(at.token, end, &label, &at.stop):
            code = BAD_LABEL
            break
        if not isfinite(label):
            code = LABEL_NOT_FINITE
            break
        y[row] = label
        at.p = _skip_spaces(at.stop, end)
        query = 0
        at.token = at.p
        at.stop = _token_end(at.p, end)
        if at.stop - at.token >= 4 and at.token[0] == b'q' and at.token[1] == b'i' and at.token[2] == b'd' \
                and at.token[3] == b':':
            code = _parse_qid(at.token + 4, at.stop, &query)
            if code != OK:
                break
            with_qid += 1
            first_with = line if first_with < 0 else first_with
            at.p = _skip_spaces(at.stop, end)
        elif first_without < 0:
            first_without = line
        qid[row] = query
        code = _parse_features(&at, min_index, indices, data)
        if code != OK:
            break
        row += 1
        indptr[row] = at.nnz
    counts[0], counts[1], counts[2], counts[3] = row, at.nnz, line, with_qid
    counts[4], counts[5], counts[6], counts[7] = first_with, first_without, at.largest, at.smallest
    counts[8] = line
    counts[9] = at.token - begin if code != OK else 0
    counts[10] = at.stop - begin if code != OK else 0
    return code


@cython.boundscheck(False)
@cython.wraparound(False)
def parse_block(
    const unsigned char[::1] text,
    int64_t min_index,
    double[::1] y,
    int64_t[::1] qid,
    int64_t[::1] indptr,
    int32_t[::1] indices,
    floating[::1] data,
):
    """Parse one block of whole lines into arrays sized by :func:`upper_bounds`, without the GIL.

    Returns (code, counts): code 0 or an error code; counts as ``_parse`` fills them.
    """
    cdef int64_t counts[11]
    cdef const char* begin = <const char*>&text[0] if text.shape[0] else NULL
    cdef int code
    if text.shape[0] == 0:
        return OK, (0, 0, 0, 0, -1, -1, -1, INDEX_LIMIT, 0, 0, 0)
    with nogil:
        code = _parse(
            begin, begin + text.shape[0], min_index, &y[0], &qid[0], &indptr[0],
            &indices[0] if indices.shape[0] else NULL, &data[0] if data.shape[0] else NULL, counts,
        )
    return code, tuple([counts[i] for i in range(11)])


@cython.boundscheck(False)
@cython.wraparound(False)
def scatter_dense(
    const int64_t[::1] indptr,
    const int32_t[::1] indices,
    const floating[::1] data,
    int64_t shift,
    floating[:, ::1] out,
):
    """Write CSR rows (their indices less ``shift``) into the zeroed dense ``out``; indices are in range."""
    cdef Py_ssize_t row, j
    with nogil:
        for row in range(out.shape[0]):
            for j in range(indptr[row], indptr[row + 1]):
                out[row, indices[j] - shift] = data[j]
