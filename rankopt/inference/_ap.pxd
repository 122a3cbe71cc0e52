# C-level entry points of _ap.pyx, for the batched kernels (``_batched.pyx``):
# select_ranks with its default strategy and the search over sorted negatives,
# on raw pointers, without the GIL.  The caller validates what the def
# functions of _ap.pyx need.

cdef int select_ranks_f64(const double* pos_desc, Py_ssize_t n_pos, const double* neg_scores,
                          Py_ssize_t n_neg, int* ranks) except -1 nogil
cdef int select_ranks_f32(const float* pos_desc, Py_ssize_t n_pos, const float* neg_scores,
                          Py_ssize_t n_neg, int* ranks) except -1 nogil
cdef void search_sorted_f64(const double* pos_desc, Py_ssize_t n_pos, const double* neg_desc,
                            Py_ssize_t n_neg, int* ranks) noexcept nogil
cdef void search_sorted_f32(const float* pos_desc, Py_ssize_t n_pos, const double* neg_desc,
                            Py_ssize_t n_neg, int* ranks) noexcept nogil
