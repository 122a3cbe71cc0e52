# C-level entry points of _greedy.pyx, for the batched kernels (``_batched.pyx``).

cdef void greedy_ranks_f64(const double* pos_desc, Py_ssize_t n_pos, const double* neg_desc,
                           Py_ssize_t n_neg, int code, const double* table, int* ranks) noexcept nogil
cdef void greedy_ranks_f32(const float* pos_desc, Py_ssize_t n_pos, const float* neg_desc,
                           Py_ssize_t n_neg, int code, const double* table, int* ranks) noexcept nogil
