# C-level entry points of _qs.pyx, for the batched kernels (``_batched.pyx``):
# qs_ranks with its default strategy, on raw pointers, without the GIL.  The
# caller validates exactly what :func:`rankopt.inference._qs.qs_ranks` needs.

# ``bends`` (NULL: none) are the bends of a position-discount table T · ``bend_z`` (fill_discount_bends), which
# let the sweep walk the negatives where f_j is concave.

from rankopt.inference._sorting cimport Keyed

cdef void fill_discount_bends(const double* table, Py_ssize_t n, double* bends) noexcept nogil
cdef int qs_ranks_f64(const double* pos_desc, Py_ssize_t n_pos, const double* neg_scores, Py_ssize_t n_neg,
                      int code, const double* table, bint unimodal, const double* bends, double bend_z,
                      int* ranks) except -1 nogil
cdef int qs_ranks_f32(const float* pos_desc, Py_ssize_t n_pos, const float* neg_scores, Py_ssize_t n_neg,
                      int code, const double* table, bint unimodal, const double* bends, double bend_z,
                      int* ranks) except -1 nogil

# The same ranks for negatives in rankopt's order already (``items``: key −score; negative j's rank goes to
# ``ranks[items[j].idx]``), by the sweep at every size: the caller sorted them, so no strategy saves a sort.
cdef void qs_sorted_ranks_f64(const double* pos_desc, Py_ssize_t n_pos, const Keyed* items, Py_ssize_t n_neg,
                              int code, const double* table, bint unimodal, const double* bends, double bend_z,
                              int* ranks) noexcept nogil
cdef void qs_sorted_ranks_f32(const float* pos_desc, Py_ssize_t n_pos, const Keyed* items, Py_ssize_t n_neg,
                              int code, const double* table, bint unimodal, const double* bends, double bend_z,
                              int* ranks) noexcept nogil
