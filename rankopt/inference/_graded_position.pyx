# cython: language_level=3
"""Loss-augmented inference of graded position-based losses (NDCG@k and kin) for every query, over OpenMP threads.

The kernel of :class:`rankopt.losses.structure.GradedPositionStructure`.  Per
query of n documents with scores s, gains G and the top k' = min(k, n)
discounts D (``rankopt/losses/graded_position.py`` has the model):

* IDCG = Σ_{j<k'} D[j] G_(j), the k' largest gains in decreasing order
  (a partial sort of the gains);
* u_i = s_i / S − G_i / IDCG with S = Σ_{j<k'} D[j];
* the k' largest u, in decreasing order (equal u: higher gain first, then
  higher score), take positions 1…k': coef = D[j] / S there and 0
  elsewhere; DCG = Σ_j D[j] G; the loss 1 − DCG / IDCG, the value
  Σ coef·s + loss.
* documents of equal score and equal gain are interchangeable in that
  assignment, so each gets the mean coefficient of the positions the tie
  group occupies (0 for those beyond k'): a convex combination of optimal
  rankings' Ψ, and the same whatever the order of the rows.  DCG is
  unchanged, since a tie group shares one gain.  A first partial sort of
  (−u, index) pairs finds the top k'; only when two of them tie in u (or
  the k'-th ties a document below) does a second sort by (−u, gain, score)
  form the tie groups, so queries without ties pay for one sort.
* a query of at most 16 documents, all within the cutoff (lists of ten
  under NDCG@10), needs no partial sort: each document's place among the
  gains and among the keys is a count of the values below it, sixteen
  lanes compared at a time, and its position weights and its tie groups'
  mean weights come from tables built once per batch.

That is the n × k' assignment maximising Σ D(π(i)) u_i, solved by sorting
because its weight matrix is the product of u and D (D positive and
decreasing).  A query whose gains are all equal has nothing to order: its
coefficients, loss and value are 0 and it is not ``usable``.

The caller validates: offsets from 0 to n non-decreasing, gains finite and
≥ 0 (one per document, computed from the grades by the loss), discount
holding min(k, longest query) positive non-increasing values, scores finite,
outputs sized n and Q, n_threads ≥ 1.
"""
import numpy as np

from cython cimport floating
from cython.parallel cimport prange, threadid
from libc.math cimport INFINITY, isfinite
from libc.stdint cimport int8_t, int32_t, int64_t, uint8_t, uint64_t
from libc.stdlib cimport free, malloc
from libcpp.algorithm cimport partial_sort
from libcpp.utility cimport pair

from rankopt.inference._scan cimport ScoreScan, scan_block, scan_start
from rankopt.inference._short_counts cimport short_counts_distinct, short_counts_f64
from rankopt.inference._terms cimport COUNT_TABLES, count_values

# Each document's key G_i / IDCG − s_i / S: two divisions a document, the kernel's costliest loop after the
# top's search.  Compiled twice on x86-64 with glibc (GCC's target_clones, as ``_buckets.pxd``'s map), so
# that AVX2 machines divide four doubles an instruction instead of two; the same IEEE divisions and
# subtraction either way, so the same keys to the bit.
cdef extern from *:
    """
    #include <stddef.h>

    #if defined(__x86_64__) && defined(__GLIBC__) && \
        ((defined(__GNUC__) && !defined(__clang__) && __GNUC__ >= 6) || \
         (defined(__clang__) && __clang_major__ >= 14))
    #  define RANKOPT_KEYS_CLONES __attribute__((target_clones("avx2", "default")))
    #else
    #  define RANKOPT_KEYS_CLONES
    #endif

    RANKOPT_KEYS_CLONES static void rankopt_position_keys_f64(
            const double* gains, const double* scores, ptrdiff_t n, double ideal, double total, double* keys) {
        for (ptrdiff_t i = 0; i < n; ++i) keys[i] = gains[i] / ideal - scores[i] / total;
    }

    RANKOPT_KEYS_CLONES static void rankopt_position_keys_f32(
            const double* gains, const float* scores, ptrdiff_t n, double ideal, double total, double* keys) {
        for (ptrdiff_t i = 0; i < n; ++i) keys[i] = gains[i] / ideal - (double)scores[i] / total;
    }
    """
    void rankopt_position_keys_f64(const double* gains, const double* scores, Py_ssize_t n, double ideal,
                                   double total, double* keys) noexcept nogil
    void rankopt_position_keys_f32(const double* gains, const float* scores, Py_ssize_t n, double ideal,
                                   double total, double* keys) noexcept nogil


cdef enum:
    # Queries a thread takes at a time (the per-query work is a few microseconds).
    QUERY_CHUNK = 16
    # Cutoffs up to this select their top by insertion: most documents are rejected by one comparison with
    # the k'-th, and one that enters shifts a few places, where partial_sort's heap mispredicts its
    # branches; longer cutoffs use partial_sort, O(n log k').
    INSERTION_TOP = 32
    # Candidates for such a top up to this many are placed by counting (O(m²) comparisons without branches).
    RANK_COUNT_MAX = 32
    # Batches with up to this many grade levels give the ground truth each document's level, so that its
    # coefficient is a lookup (a branch-free loop) instead of a search among the tie groups.
    MAX_TRUTH_LEVELS = 64
    # Batches with up to this many grade levels may give each document's level (a byte) instead of its gain.
    LEVELS_IN_BYTES = 256
    # Queries of at most this many documents, none beyond the cutoff, are ranked in registers
    # (:func:`_short_query`): every document takes a position, so nothing needs a partial sort.
    SHORT_QUERY = 16
    # What :func:`_short_query` returns when two documents tie in u: the general path ranks such a query.
    SHORT_QUERY_TIED = 2

cdef struct Keyed:
    double key         # G_i / IDCG − s_i / S = −u_i, sorted ascending
    double gain
    double score
    Py_ssize_t index


ctypedef pair[double, Py_ssize_t] KeyIndex


cdef struct ShortTables:
    # The position weights of each query length m ≤ SHORT_QUERY within the cutoff: S_m = Σ_{j<m} D[j] at
    # totals[m], D[j] / S_m at weights[m · SHORT_QUERY + j], and the mean weight of each run of positions
    # a … b of such a query at means[(m · SHORT_QUERY + a) · SHORT_QUERY + b] (:func:`short_tables_init`).
    double* totals
    double* weights
    double* means


cdef struct NDCGWork:
    double* negated    # the query's gains negated, partially sorted (ascending) for IDCG
    KeyIndex* pairs    # (−u_i, i), partially sorted: the assignment when no two of the top k' tie in u
    Keyed* keyed       # (−u_i, G_i, s_i, i), partially sorted: the assignment with ties in u
    double* run_gain   # the ground truth's tie groups (equal gains) among the ideal top k': their gain
    double* run_mean   # and the mean position weight each of their documents gets
    double* keys       # −u_i of every document, in input order
    # A short top's search (``_top_keys``): each document's bucket, the buckets' counts, and the candidates'
    # keys and indices.
    int32_t* bucket
    int32_t* bucket_count
    double* found_keys
    Py_ssize_t* found_index
    # The grade levels of the query's documents and the gain of each level (set per query; n_levels 0 when
    # the batch has more than MAX_TRUTH_LEVELS): the ground truth then finds a document's group by a lookup.
    const uint8_t* level
    const double* level_gains
    Py_ssize_t n_levels
    double* query_gains  # the query's gains, looked up from its levels when the batch gives levels only
    double* level_truth  # the ground truth's coefficient of each level, per query
    double* weights      # D[j] / S of the query's top k' positions, divided once in a loop that vectorises
    int64_t* level_counts  # the query's documents per level (COUNT_TABLES tables while counting)
    const ShortTables* short_tables  # the batch's, shared by every thread's work


cdef int work_init(NDCGWork* work, Py_ssize_t size) noexcept nogil:
    """Every array of the work, each NULL where its allocation failed (then −1; work_free frees the others)."""
    work.level_truth = <double*>malloc(MAX_TRUTH_LEVELS * sizeof(double))
    work.level_counts = <int64_t*>malloc(COUNT_TABLES * MAX_TRUTH_LEVELS * sizeof(int64_t))
    work.level = NULL
    work.level_gains = NULL
    work.n_levels = 0
    work.negated = <double*>malloc(size * sizeof(double))
    work.pairs = <KeyIndex*>malloc(size * sizeof(KeyIndex))
    work.keyed = <Keyed*>malloc(size * sizeof(Keyed))
    work.run_gain = <double*>malloc(size * sizeof(double))
    work.run_mean = <double*>malloc(size * sizeof(double))
    work.keys = <double*>malloc(size * sizeof(double))
    work.query_gains = <double*>malloc(size * sizeof(double))
    work.weights = <double*>malloc(size * sizeof(double))
    work.bucket = <int32_t*>malloc(size * sizeof(int32_t))
    work.bucket_count = <int32_t*>malloc(size * sizeof(int32_t))
    work.found_keys = <double*>malloc(size * sizeof(double))
    work.found_index = <Py_ssize_t*>malloc(size * sizeof(Py_ssize_t))
    if (work.negated == NULL or work.pairs == NULL or work.keyed == NULL or work.run_gain == NULL
            or work.run_mean == NULL or work.keys == NULL or work.query_gains == NULL or work.weights == NULL
            or work.level_truth == NULL or work.level_counts == NULL or work.bucket == NULL or work.bucket_count == NULL
            or work.found_keys == NULL or work.found_index == NULL):
        return -1
    return 0


cdef void work_free(NDCGWork* work) noexcept nogil:
    free(work.negated)
    free(work.pairs)
    free(work.keyed)
    free(work.run_gain)
    free(work.run_mean)
    free(work.keys)
    free(work.query_gains)
    free(work.weights)
    free(work.bucket)
    free(work.bucket_count)
    free(work.found_keys)
    free(work.found_index)
    free(work.level_truth)
    free(work.level_counts)


cdef bint _before(Keyed a, Keyed b) noexcept nogil:
    """Ascending −u; among equal u, higher gain, then higher score: an order of values, not of rows."""
    if a.key != b.key:
        return a.key < b.key
    if a.gain != b.gain:
        return a.gain > b.gain
    return a.score > b.score


cdef inline bint _tied(Keyed a, Keyed b) noexcept nogil:
    return a.gain == b.gain and a.score == b.score


cdef bint _ties_in_top(const KeyIndex* pairs, Py_ssize_t kk, Py_ssize_t n) noexcept nogil:
    """Whether two documents of equal u meet among the top k' of a partial sort (a tail key can only tie the k'-th)."""
    cdef Py_ssize_t j
    for j in range(1, kk):
        if pairs[j].first == pairs[j - 1].first:
            return True
    for j in range(kk, n):
        if pairs[j].first == pairs[kk - 1].first:
            return True
    return False


cdef inline void _keep_smallest_doubles(double* a, Py_ssize_t kk, Py_ssize_t n) noexcept nogil:
    """partial_sort(a, a + kk, a + n) by insertion: the kk smallest first, in order; the others after them.

    For the short cutoffs of NDCG@k a value that enters the top shifts a few places, where a heap's
    sift-down mispredicts its branches; most values are rejected by one comparison with the kk-th."""
    cdef Py_ssize_t i, t
    cdef double x
    for i in range(1, kk):
        x = a[i]
        t = i
        while t > 0 and x < a[t - 1]:
            a[t] = a[t - 1]
            t -= 1
        a[t] = x
    for i in range(kk, n):
        x = a[i]
        if not x < a[kk - 1]:
            continue
        a[i] = a[kk - 1]
        t = kk - 1
        while t > 0 and x < a[t - 1]:
            a[t] = a[t - 1]
            t -= 1
        a[t] = x


cdef void _ideal_by_levels(NDCGWork* work, Py_ssize_t n, Py_ssize_t kk) noexcept nogil:
    """The ideal top k' (negated gains, ascending: partial_sort's first k' values) from the query's level
    counts, walking the levels from the highest gain down (gains do not decrease with the grade); the counts
    stay in ``work.level_counts`` for the ground truth (:func:`~rankopt.inference._terms.count_values`: tables
    counted into in turn, since most of a query's documents are of grade 0)."""
    cdef Py_ssize_t i, t, filled = 0, take
    cdef Py_ssize_t n_levels = work.n_levels
    cdef int64_t* counts = work.level_counts
    count_values(work.level, n, n_levels, counts)
    t = n_levels - 1
    while filled < kk:
        take = counts[t] if counts[t] < kk - filled else kk - filled
        for i in range(filled, filled + take):
            work.negated[i] = -work.level_gains[t]
        filled += take
        t -= 1


cdef inline Py_ssize_t _top_candidates(const double* keys, Py_ssize_t kk, Py_ssize_t n, NDCGWork* work) noexcept nogil:
    """Gather into ``work.found_keys`` / ``work.found_index``, in increasing index, documents among which the
    kk smallest (key, index) pairs lie; return how many.

    The keys are counted into n buckets of an affine map (non-decreasing in the key), and the buckets up to
    the one that completes the first kk hold every pair of the top: a later bucket's keys exceed all of
    theirs.  They are gathered without a branch.  Keys that cannot be spread (all equal, a span beyond the
    doubles) and kk = n give every document."""
    cdef Py_ssize_t i, t, m = 0, last_bucket = 0, below = 0
    cdef double x, scale = 0.0, last = <double>(n - 1)
    cdef int32_t* bucket = work.bucket
    cdef int32_t* count = work.bucket_count
    cdef ScoreScan extremes
    if kk < n:
        scan_start(&extremes, keys)
        scan_block(&extremes, keys, n)  # vectorised (_scan.pxd); the keys are finite
        if extremes.hi > extremes.lo:
            scale = last / (extremes.hi - extremes.lo)
    if not (scale > 0.0 and isfinite(scale)):
        for i in range(n):
            work.found_keys[i] = keys[i]
            work.found_index[i] = i
        return n
    for i in range(n):  # a loop the compiler vectorises
        x = (keys[i] - extremes.lo) * scale
        bucket[i] = <int32_t>(x if x < last else last)
    for t in range(n):
        count[t] = 0
    for i in range(n):
        count[bucket[i]] += 1
    while below + count[last_bucket] < kk:
        below += count[last_bucket]
        last_bucket += 1
    for i in range(n):
        work.found_keys[m] = keys[i]
        work.found_index[m] = i
        m += bucket[i] <= last_bucket
    return m


cdef bint _top_keys(const double* keys, Py_ssize_t kk, Py_ssize_t n, KeyIndex* top, NDCGWork* work) noexcept nogil:
    """The kk smallest (key, index) pairs of ``keys`` into ``top``, in order (partial_sort's first kk); True
    when two documents of equal key meet among them or the kk-th ties one left out.

    The few candidates of :func:`_top_candidates` are placed by counting, for each, the smaller keys and the
    equal keys before it (without branches); insertion, whose comparisons mispredict as often as a document
    enters the top, takes many (a crowded last bucket, or keys that cannot be spread)."""
    cdef Py_ssize_t i, t, rank, equal = 0, index, m = _top_candidates(keys, kk, n, work)
    cdef double x, kth
    cdef double* found_keys = work.found_keys
    cdef Py_ssize_t* found_index = work.found_index
    if m <= RANK_COUNT_MAX:
        # The found come in increasing index: a pair's place is the count of smaller keys, and of equal keys
        # before it.
        for i in range(m):
            x = found_keys[i]
            rank = 0
            for t in range(i):
                rank += found_keys[t] <= x
            for t in range(i + 1, m):
                rank += found_keys[t] < x
            if rank < kk:
                top[rank].first = x
                top[rank].second = found_index[i]
    else:
        # Insertion: most are rejected by one comparison with the kk-th.
        for i in range(m):
            x = found_keys[i]
            index = found_index[i]
            if i >= kk:
                if not x < top[kk - 1].first:
                    continue
                t = kk - 1
            else:
                t = i
            while t > 0 and x < top[t - 1].first:
                top[t] = top[t - 1]
                t -= 1
            top[t].first = x
            top[t].second = index
    for t in range(1, kk):
        if top[t].first == top[t - 1].first:
            return True
    kth = top[kk - 1].first
    for i in range(n):
        equal += keys[i] == kth
    return equal > 1


cdef double _subtract_truth(const floating* scores, const double* gains, Py_ssize_t n, const double* discount,
                           Py_ssize_t kk, double total, NDCGWork* work, double* coef) noexcept nogil:
    """Subtract Ψ*'s coefficients from ``coef`` and return Σ Ψ*·s: each document gets the mean position weight
    D(j) / S of its tie group (equal gains) in the ideal order, whose top k' ``work.negated`` holds (negated
    gains, partially sorted).  The expressions of ``graded_kernels._position_ground_truth``: each group's
    D(j) / S summed over its positions in increasing order, divided by its size."""
    cdef Py_ssize_t start = 0, end, j, i, r, t, n_runs = 0, count
    cdef double run_sum, truth, lowest, dot = 0.0, dot_odd = 0.0
    while start < kk:
        end = start + 1
        while end < kk and work.negated[end] == work.negated[start]:
            end += 1
        run_sum = 0.0
        for j in range(start, end):
            run_sum += work.weights[j]  # discount[j] / total
        count = end - start
        if end == kk:  # the last group may go on beyond k' (a group ending before k' holds every document of its gain)
            if work.n_levels > 0:  # every document of that gain, from the level counts
                count = 0
                for t in range(work.n_levels):
                    if -work.level_gains[t] == work.negated[start]:
                        count += work.level_counts[t]
            else:
                for j in range(kk, n):
                    count += work.negated[j] == work.negated[start]
        work.run_gain[n_runs] = -work.negated[start]
        work.run_mean[n_runs] = run_sum / (<double>count)
        n_runs += 1
        start = end
    lowest = work.run_gain[n_runs - 1]
    if work.n_levels > 0:
        for t in range(work.n_levels):
            truth = 0.0
            if work.level_gains[t] >= lowest:  # a gain of the ideal top, or none of this query's
                for r in range(n_runs):
                    if work.level_gains[t] == work.run_gain[r]:
                        truth = work.run_mean[r]
                        break
            work.level_truth[t] = truth
        for i in range(n):  # adding 0 for the documents beyond the ideal top changes no value
            truth = work.level_truth[work.level[i]]
            coef[i] -= truth
            if i & 1:
                dot_odd += truth * <double>scores[i]
            else:
                dot += truth * <double>scores[i]
        return dot + dot_odd
    for i in range(n):
        if gains[i] < lowest:
            continue  # beyond the ideal top k': Ψ* gives it 0
        # Every gain from the lowest of the ideal top up has a group there; most documents hold the lowest.
        r = n_runs - 1
        while gains[i] != work.run_gain[r]:
            r -= 1
        truth = work.run_mean[r]
        coef[i] -= truth
        # Two running sums, so that consecutive additions do not wait on each other.
        if i & 1:
            dot_odd += truth * <double>scores[i]
        else:
            dot += truth * <double>scores[i]
    return dot + dot_odd


cdef inline void _tied_top(const floating* scores, const double* gains, Py_ssize_t n, const double* discount,
                           Py_ssize_t kk, double total, NDCGWork* work, double* coef, double* sums) noexcept nogil:
    """The top k' with ties among the keys: each tie group's position weights shared by its members (those
    beyond k' too); ``sums`` gets (w·s, DCG) of the ranking."""
    cdef Py_ssize_t i, j, start, end, outside
    cdef double weight, position_weights, psi = 0.0, dcg = 0.0
    if kk <= INSERTION_TOP:  # the rare ties: every pair, as partial_sort leaves them
        for i in range(n):
            work.pairs[i].first = work.keys[i]
            work.pairs[i].second = i
        partial_sort(work.pairs, work.pairs + kk, work.pairs + n)
    for i in range(n):
        work.keyed[i].key = work.pairs[i].first
        work.keyed[i].gain = gains[work.pairs[i].second]
        work.keyed[i].score = <double>scores[work.pairs[i].second]
        work.keyed[i].index = work.pairs[i].second
    partial_sort(work.keyed, work.keyed + kk, work.keyed + n, _before)
    start = 0
    while start < kk:
        # The tie group at positions start…end − 1, and how many of its members lie beyond k'.
        end = start + 1
        position_weights = discount[start]
        while end < kk and _tied(work.keyed[end], work.keyed[start]):
            position_weights += discount[end]
            end += 1
        outside = 0
        if end == kk:
            for j in range(kk, n):
                if _tied(work.keyed[j], work.keyed[start]):
                    outside += 1
        weight = position_weights / total / <double>(end - start + outside)
        for j in range(start, end):
            coef[work.keyed[j].index] = weight
            psi += weight * work.keyed[j].score
            dcg += discount[j] * work.keyed[j].gain
        if outside:
            for j in range(kk, n):
                if _tied(work.keyed[j], work.keyed[start]):
                    coef[work.keyed[j].index] = weight
                    psi += weight * work.keyed[j].score
        start = end
    sums[0] = psi
    sums[1] = dcg


cdef int short_tables_init(ShortTables* tables, const double* discount, Py_ssize_t longest) noexcept nogil:
    """The position weights of every query length m ≤ ``longest`` (≤ SHORT_QUERY, and within the cutoff) that
    :func:`_short_query` reads: S_m = Σ_{j<m} D[j], D[j] / S_m, and each run a..b's mean weight (the summed
    weights of its positions, in increasing position, over its length).  The expressions of the general path."""
    cdef Py_ssize_t m, j, a, b
    cdef double total, run
    cdef double* weights
    tables.totals = <double*>malloc((longest + 1) * sizeof(double))
    tables.weights = <double*>malloc((longest + 1) * SHORT_QUERY * sizeof(double))
    tables.means = <double*>malloc((longest + 1) * SHORT_QUERY * SHORT_QUERY * sizeof(double))
    if tables.totals == NULL or tables.weights == NULL or tables.means == NULL:
        return -1
    for m in range(1, longest + 1):
        weights = &tables.weights[m * SHORT_QUERY]
        total = 0.0
        for j in range(m):
            total += discount[j]
        tables.totals[m] = total
        for j in range(m):
            weights[j] = discount[j] / total
        for a in range(m):
            run = 0.0
            for b in range(a, m):
                run += weights[b]
                tables.means[(m * SHORT_QUERY + a) * SHORT_QUERY + b] = run / <double>(b - a + 1)
    return 0


cdef uint8_t _short_query(const floating* scores, const double* gains, Py_ssize_t n, const double* discount,
                          const NDCGWork* work, double* coef, double* loss, double* value,
                          bint relative) noexcept nogil:
    """:func:`position_query` for a query whose n ≤ SHORT_QUERY documents all lie within the cutoff, or
    SHORT_QUERY_TIED (nothing written) when two of its documents tie in u.

    Every document takes a position, so the ideal order and the u's are found by counting
    (``_short_counts.pxd``), each tie group of the ground truth holds every document of its gain, and the
    position weights and the groups' mean weights are the batch's tables (:func:`short_tables_init`).  The same
    expressions, summed in the same order, as the general path's: the same values to the bit."""
    cdef int32_t higher[SHORT_QUERY]     # documents of a higher gain: where the document's tie group starts
    cdef int32_t same_gain[SHORT_QUERY]  # documents of its gain, itself included: the group's size
    cdef int32_t rank[SHORT_QUERY]       # documents of a smaller −u: its position, when no two tie
    cdef double group_gain[SHORT_QUERY]
    cdef double ideal_gains[SHORT_QUERY]
    cdef Py_ssize_t order[SHORT_QUERY]
    cdef const double* weights = &work.short_tables.weights[n * SHORT_QUERY]
    cdef const double* means = &work.short_tables.means[n * SHORT_QUERY * SHORT_QUERY]
    cdef double* keys = work.keys  # −u of each document
    cdef Py_ssize_t i, j
    cdef double ideal = 0.0, total, dcg = 0.0, psi = 0.0, truth, dot = 0.0, dot_odd = 0.0
    short_counts_f64(gains, -1.0, n, higher, same_gain)
    if same_gain[0] == n:  # every gain equal: nothing to order
        for i in range(n):
            coef[i] = 0.0
        loss[0] = 0.0
        value[0] = 0.0
        return 0
    for j in range(n):
        group_gain[j] = INFINITY
    for i in range(n):
        group_gain[higher[i]] = gains[i]
    ideal_gains[0] = group_gain[0]
    for j in range(1, n):  # each group's gain from its first position on: the gains fall from group to group
        ideal_gains[j] = min(ideal_gains[j - 1], group_gain[j])
    for j in range(n):
        ideal -= discount[j] * -ideal_gains[j]
    total = work.short_tables.totals[n]
    if floating is double:
        rankopt_position_keys_f64(gains, scores, n, ideal, total, keys)
    else:
        rankopt_position_keys_f32(gains, scores, n, ideal, total, keys)
    short_counts_f64(keys, 1.0, n, rank, NULL)
    if not short_counts_distinct(rank, n):  # equal keys share a rank
        return SHORT_QUERY_TIED
    for i in range(n):
        order[rank[i]] = i
    for j in range(n):
        i = order[j]
        psi += weights[j] * <double>scores[i]
        dcg += discount[j] * gains[i]
    loss[0] = 1.0 - dcg / ideal
    value[0] = psi + loss[0]
    if not relative:
        for i in range(n):
            coef[i] = weights[rank[i]]
        return 1
    for i in range(n):  # Ψ*: the mean weight of the positions higher[i] … higher[i] + same_gain[i] − 1
        truth = means[higher[i] * SHORT_QUERY + higher[i] + same_gain[i] - 1]
        coef[i] = weights[rank[i]] - truth
        if i & 1:
            dot_odd += truth * <double>scores[i]
        else:
            dot += truth * <double>scores[i]
    value[0] -= dot + dot_odd
    return 1


cdef uint8_t position_query(const floating* scores, const double* gains, Py_ssize_t n,
                            const double* discount, Py_ssize_t k, NDCGWork* work, double* coef, double* loss,
                            double* value, bint relative) noexcept nogil:
    cdef Py_ssize_t i, j, kk = k if k < n else n
    cdef double lowest, highest, ideal = 0.0, total = 0.0, dcg = 0.0, psi = 0.0, weight
    cdef double sums[2]
    cdef bint ties
    cdef uint8_t short_usable
    if n <= k and n <= SHORT_QUERY and work.short_tables != NULL:
        short_usable = _short_query(scores, gains, n, discount, work, coef, loss, value, relative)
        if short_usable != SHORT_QUERY_TIED:
            return short_usable
    lowest = gains[0]
    highest = gains[0]
    for i in range(n):
        coef[i] = 0.0
        # Negated: the default ascending order, whose comparison the compiler inlines.
        work.negated[i] = -gains[i]
        if gains[i] < lowest:
            lowest = gains[i]
        if gains[i] > highest:
            highest = gains[i]
    loss[0] = 0.0
    value[0] = 0.0
    if not highest > lowest:
        return 0
    if work.n_levels > 0:
        _ideal_by_levels(work, n, kk)
    elif kk <= INSERTION_TOP:
        _keep_smallest_doubles(work.negated, kk, n)
    else:
        partial_sort(work.negated, work.negated + kk, work.negated + n)
    for j in range(kk):
        ideal -= discount[j] * work.negated[j]
        total += discount[j]
    for j in range(kk):  # the same divisions as one at a time, four to an instruction
        work.weights[j] = discount[j] / total
    if floating is double:
        rankopt_position_keys_f64(gains, scores, n, ideal, total, work.keys)
    else:
        rankopt_position_keys_f32(gains, scores, n, ideal, total, work.keys)
    if kk <= INSERTION_TOP:
        ties = _top_keys(work.keys, kk, n, work.pairs, work)
    else:
        for i in range(n):
            work.pairs[i].first = work.keys[i]
            work.pairs[i].second = i
        partial_sort(work.pairs, work.pairs + kk, work.pairs + n)
        ties = _ties_in_top(work.pairs, kk, n)
    if not ties:
        for j in range(kk):
            i = work.pairs[j].second
            weight = work.weights[j]
            coef[i] = weight
            psi += weight * <double>scores[i]
            dcg += discount[j] * gains[i]
        loss[0] = 1.0 - dcg / ideal
        value[0] = psi + loss[0]
        if relative:
            value[0] -= _subtract_truth(scores, gains, n, discount, kk, total, work, coef)
        return 1
    _tied_top(scores, gains, n, discount, kk, total, work, coef, sums)
    psi, dcg = sums[0], sums[1]
    loss[0] = 1.0 - dcg / ideal
    value[0] = psi + loss[0]
    if relative:
        value[0] -= _subtract_truth(scores, gains, n, discount, kk, total, work, coef)
    return 1


def position_batch(const floating[::1] scores, const double[::1] gains, const int64_t[::1] offsets,
                   const double[::1] discount, double[::1] coef, double[::1] losses,
                   double[::1] values, uint8_t[::1] usable, int n_threads, bint relative_to_truth=False,
                   const uint8_t[::1] levels=None, const double[::1] level_gains=None, bint short_queries=True):
    """Every query's most violated ranking for a graded position-based loss (k' ≤ ``discount.shape[0]``).

    Outputs in place.  Each document's gain comes from ``gains`` (G(grade) of every document), or, when
    ``gains`` is None, from ``levels`` (each document's grade level, 0 … K − 1, K ≤ LEVELS_IN_BYTES) and
    ``level_gains`` (G of each level): a byte a document instead of eight.  With ``relative_to_truth`` the
    ground truth's coefficients and score are subtracted: the structured hinge's subgradient and value; given
    levels of at most MAX_TRUTH_LEVELS, it looks each document's tie group up.  ``short_queries=False`` ranks
    the queries of at most SHORT_QUERY documents within the cutoff by the general path too (the same outputs
    to the bit: the tests compare the two).
    """
    cdef Py_ssize_t n_queries = offsets.shape[0] - 1, q, t, size = 0, lo, hi, n_ready = 0
    cdef Py_ssize_t k = discount.shape[0]
    cdef Py_ssize_t n_levels = 0, truth_levels = 0, i
    cdef const double* query_gains
    cdef NDCGWork* works
    cdef ShortTables short_tables
    cdef const ShortTables* shared_tables = NULL
    short_tables.totals = NULL
    short_tables.weights = NULL
    short_tables.means = NULL
    if levels is not None and level_gains is not None:
        n_levels = level_gains.shape[0]
        if n_levels > LEVELS_IN_BYTES or levels.shape[0] != scores.shape[0] or (n_levels == 0 < scores.shape[0]):
            raise ValueError(f"expected a level for each of {scores.shape[0]} documents among 1 to "
                             f"{LEVELS_IN_BYTES} levels, got {levels.shape[0]} among {n_levels} instead")
        truth_levels = n_levels if n_levels <= MAX_TRUTH_LEVELS else 0
    elif gains is None or gains.shape[0] != scores.shape[0]:
        raise ValueError(f"expected a gain for each of {scores.shape[0]} documents, or their levels, got "
                         f"{'none' if gains is None else gains.shape[0]} instead")
    for q in range(n_queries):
        size = max(size, offsets[q + 1] - offsets[q])
    if size == 0 or k == 0:
        return
    n_threads = <int>min(<Py_ssize_t>n_threads, n_queries)
    works = <NDCGWork*>malloc(n_threads * sizeof(NDCGWork))
    if works == NULL:
        raise MemoryError()
    try:
        if short_queries:
            if short_tables_init(&short_tables, &discount[0], min(size, k, <Py_ssize_t>SHORT_QUERY)) != 0:
                raise MemoryError("cannot allocate the position weights of short queries")
            shared_tables = &short_tables
        for t in range(n_threads):  # work_init assigns every array (NULL where it fails): work_free frees them
            works[t].short_tables = shared_tables
            n_ready += 1
            if work_init(&works[t], size) != 0:
                raise MemoryError(f"cannot allocate the work arrays for queries of {size} documents")
        for q in prange(n_queries, nogil=True, num_threads=n_threads, schedule="dynamic", chunksize=QUERY_CHUNK):
            lo = offsets[q]
            hi = offsets[q + 1]
            if hi > lo:
                if n_levels > 0:
                    for i in range(hi - lo):
                        works[threadid()].query_gains[i] = level_gains[levels[lo + i]]
                    query_gains = works[threadid()].query_gains
                    works[threadid()].level = &levels[lo]
                    works[threadid()].level_gains = &level_gains[0]
                    works[threadid()].n_levels = truth_levels
                else:
                    query_gains = &gains[lo]
                usable[q] = position_query(&scores[lo], query_gains, hi - lo, &discount[0], k,
                                           &works[threadid()], &coef[lo], &losses[q], &values[q],
                                           relative_to_truth)
    finally:
        for t in range(n_ready):
            work_free(&works[t])
        free(works)
        free(short_tables.totals)
        free(short_tables.weights)
        free(short_tables.means)


ctypedef fused grade_t:  # a batch's grades: int8 from a training loop's narrowed labels, or int64
    int8_t
    int64_t


cdef enum:
    LEVEL_TABLE = 1 << 16

#: Grades below this are levelled through a table indexed by the grade (:func:`present_levels`).
LEVEL_TABLE_GRADES = LEVEL_TABLE
#: Batches with at most this many grade levels give the kernel each document's level as a byte.
MAX_BYTE_LEVELS = LEVELS_IN_BYTES


def present_levels(const grade_t[::1] grades):
    """The distinct grades (int64, increasing) of grades ≥ 0 below LEVEL_TABLE_GRADES, in one pass that marks
    each grade present in a table indexed by the grade; None when a grade reaches LEVEL_TABLE_GRADES (the
    caller sorts them: :func:`rankopt.losses.structure.grade_levels`, the same map in NumPy)."""
    cdef Py_ssize_t k, n = grades.shape[0]
    cdef uint64_t g
    # One entry past the table stands for every grade beyond it (a negative one too: unsigned), so the pass
    # has no branch and no running maximum; the largest present grade is found in the table afterwards.
    present_table = np.zeros(LEVEL_TABLE + 1, dtype=np.uint8)
    cdef uint8_t[::1] present = present_table
    with nogil:
        for k in range(n):
            g = <uint64_t>grades[k]
            present[g if g < LEVEL_TABLE else LEVEL_TABLE] = 1
    if present[LEVEL_TABLE]:
        return None
    return np.flatnonzero(present_table).astype(np.int64)


def level_lookup(const grade_t[::1] grades, const int64_t[::1] levels):
    """Each grade's index among ``levels`` as a byte (uint8), in one pass through a table indexed by the grade.
    ``levels`` are :func:`present_levels`' of the same grades (increasing, below LEVEL_TABLE_GRADES, at most
    LEVELS_IN_BYTES of them); a grade beyond the largest level is refused, never read past the table."""
    cdef Py_ssize_t k, n = grades.shape[0], n_levels = levels.shape[0]
    cdef int64_t g
    cdef bint beyond = False
    if not n_levels <= LEVELS_IN_BYTES:
        raise ValueError(f"expected at most {LEVELS_IN_BYTES} levels, got {n_levels} instead")
    level_of = np.empty(n, dtype=np.uint8)
    if n == 0:
        return level_of
    cdef int64_t top = levels[n_levels - 1]
    if not 0 <= top < LEVEL_TABLE:
        raise ValueError(f"expected levels below {LEVEL_TABLE}, got {top} instead")
    index_table = np.zeros(top + 1, dtype=np.uint8)
    index_table[np.asarray(levels)] = np.arange(n_levels)
    cdef uint8_t[::1] index = index_table
    cdef uint8_t[::1] out_level = level_of
    with nogil:
        for k in range(n):
            g = grades[k]
            beyond |= <uint64_t>g > <uint64_t>top
            out_level[k] = index[g if <uint64_t>g <= <uint64_t>top else 0]
    if beyond:
        raise ValueError(f"expected every grade among the {n_levels} levels, up to {top}, got a grade beyond them")
    return level_of
