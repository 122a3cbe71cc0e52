# The pairwise (graded ROC-area) loss's inference for one query, for the
# batched kernels (``_batched.pyx``); see ``_pairwise.pyx``.
from libc.stdint cimport int32_t, int64_t, uint64_t
from libcpp.utility cimport pair

from rankopt.inference._sorting cimport Keyed


cdef struct PairwiseWork:
    # Work arrays for queries of up to ``size`` documents.
    Py_ssize_t size
    Keyed* by_score        # the documents in descending score order (``_sorting.pxd``)
    int32_t* sort_ids      # work space of that sort: size entries
    int32_t* sort_ends     # and SORT_BUCKETS_PER_SCORE·size + 1
    pair[int64_t, Py_ssize_t]* by_grade
    Py_ssize_t* level      # each document's grade level 0 … K − 1
    int64_t* level_size    # documents per level
    int64_t* level_below   # documents of lower levels
    double* level_truth    # the ground truth's coefficient of each level (the hinge's form)
    int64_t* tree          # Fenwick tree over the levels, size + 1 entries
    int64_t* kept_lower    # per document: pairs with a lower grade it stays above
    double* low_scores     # the dense test's lowest-level documents: scores as doubles,
    int64_t* low_kept      # higher documents that stay above each,
    Py_ssize_t* low_index  # and their positions in the query;
    Py_ssize_t* high_index # the positions of the others
    int32_t* below_table   # _tabled_sweeps' counts: TABLE_LANES a document, for queries up to TABLED_MAX
    Py_ssize_t n_grade_values  # > 0: grades lie in 0 … n_grade_values − 1, levels found by counting
    int64_t* grade_level   # COUNT_TABLES · n_grade_values entries: a grade's count (count_values), then its level


cdef int pairwise_work_init(PairwiseWork* work, Py_ssize_t size, Py_ssize_t n_grade_values) noexcept nogil
cdef void pairwise_work_free(PairwiseWork* work) noexcept nogil
cdef bint pairwise_query_f64(const double* scores, const int64_t* grades, Py_ssize_t n, PairwiseWork* work,
                             double* coef, double* loss, double* value, bint relative) noexcept nogil
cdef bint pairwise_query_f32(const float* scores, const int64_t* grades, Py_ssize_t n, PairwiseWork* work,
                             double* coef, double* loss, double* value, bint relative,
                             const uint64_t* keys) noexcept nogil
cdef bint weighted_query_f64(const double* scores, const int64_t* levels, Py_ssize_t n, const double* weight,
                             Py_ssize_t n_levels, PairwiseWork* work, double* coef, double* loss,
                             double* value, bint relative) noexcept nogil
cdef bint weighted_query_f32(const float* scores, const int64_t* levels, Py_ssize_t n, const double* weight,
                             Py_ssize_t n_levels, PairwiseWork* work, double* coef, double* loss,
                             double* value, bint relative) noexcept nogil
