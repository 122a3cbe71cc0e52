# cython: language_level=3
"""Loss-augmented inference for every query of a batch in one nogil loop, queries over OpenMP threads.

Each query runs exactly the single-query path of its method — the same
compiled kernels (``_qs.pxd``, ``_ap.pxd``, ``_greedy.pxd``,
``_pairwise.pxd``), on the same inputs, so the same ranks bit for bit:

* split into positives and negatives in input order (``rel != 0``);
* positives sorted descending, ties by index — the permutation of
  ``descending_order`` (a std::sort of (−score, index) pairs gives it);
* the method's ranks; "search" and "greedy" sort the negatives the same way;
* Observation 2 with the expressions of ``base.ranking_from_ranks``, and the
  loss with NumPy's summation order (``_sums.pxd``), so coefficients and the
  AUC / AP / NDCG losses are the Python path's to the bit.

A position-discount loss gives its discount table T once, for the longest
query; query q then uses T / Σ_{i≤|P_q|} T(i), the single-query path's
normalised table (equal to the bit when T(1) = 1, as for NDCG).

Each thread owns one set of work arrays sized for the longest query; the
queries are handed out dynamically (their costs differ).  Results do not
depend on the number of threads.  Built without OpenMP (``setup.py``), the
loops run on one thread, unchanged otherwise.
"""
import numpy as np

from cython cimport floating
from cython.parallel cimport prange, threadid
from libc.math cimport INFINITY
from libc.stdint cimport int8_t, int32_t, int64_t, uint8_t, uint32_t, uint64_t
from libc.stdlib cimport free, malloc
from libc.string cimport memchr, memcpy, memset

from rankopt.inference._ap cimport search_sorted_f32, search_sorted_f64, select_ranks_f32, select_ranks_f64
from rankopt.inference._greedy cimport greedy_ranks_f32, greedy_ranks_f64
from rankopt.inference._loss cimport LOSS_AP, LOSS_AUC, LOSS_POSITION_DISCOUNT
from rankopt.inference._masked_moves cimport (
    compress_f32,
    compress_f64,
    compress_labels,
    expand_f32,
    expand_f64,
    moves_vectorised,
)
from rankopt.inference._pairwise cimport (
    PairwiseWork,
    pairwise_query_f32,
    pairwise_query_f64,
    pairwise_work_free,
    pairwise_work_init,
    weighted_query_f32,
    weighted_query_f64,
)
from rankopt.inference._qs cimport fill_discount_bends, qs_sorted_ranks_f32, qs_sorted_ranks_f64
from rankopt.inference._scan cimport ScoreScan, scan_block, scan_start
from rankopt.inference._short_counts cimport short_counts_distinct, short_counts_f32, short_counts_f64
from rankopt.inference._sorting cimport (
    SORT_BUCKETS_PER_SCORE,
    Keyed,
    descending_float_bits,
    descending_keyed,
    descending_keyed_down_to,
    packed_key_index,
    packed_key_score,
)
from rankopt.inference._sums cimport numpy_sum
from rankopt.inference._terms cimport negative_coefficient

#: Whether this machine moves a mask's kept values by AVX-512 (``_masked_moves.pxd``), asked once.
cdef bint VECTOR_MOVES = moves_vectorised()

cdef enum:
    # Queries a thread takes at a time: one at a time, the threads would
    # contend for the shared counter after every query of a few microseconds.
    QUERY_CHUNK = 16

# A binary loss's labels as the kernel reads them: int64 grades, or int8 ones where every grade fits
# (a training loop's 0–4 read in an eighth of the bytes).
ctypedef fused label_t:
    int8_t
    int64_t


cdef enum:
    METHOD_QS = 1
    METHOD_SELECT = 2
    METHOD_SEARCH = 3
    METHOD_GREEDY = 4
    METHOD_TOPK = 5

METHOD_CODES = {
    "qs": METHOD_QS, "select": METHOD_SELECT, "search": METHOD_SEARCH, "greedy": METHOD_GREEDY, "topk": METHOD_TOPK
}


cdef struct BinaryWork:
    # Work arrays for queries of up to ``size`` documents (scores as float64:
    # wide enough for either score type).
    double* pos_desc
    double* neg_desc
    double* neg_desc64
    double* table
    Py_ssize_t* pos_idx
    Py_ssize_t* neg_idx
    Keyed* items
    int32_t* sort_ids     # work space of the distribution sort (_sorting.pxd)
    int32_t* sort_ends
    int* ranks
    int64_t* counts
    double* prefix     # prefix sums of the sorted positives and negatives (top-k method)
    # A position discount's normalised tables T / Σ_{i≤|P|} T(i), one row of ``size`` entries per |P| once a
    # query with that many positives has needed it (NULL: queries too long to keep them; divided every time).
    double* tables
    double* table_sums   # Σ_{i≤|P|} T(i) of each filled row; 0 for a row not filled yet
    Py_ssize_t tables_width
    bint tied            # the last query split in order had two documents of one score


cdef void _binary_work_free(BinaryWork* w) noexcept nogil:
    free(w.pos_desc); free(w.neg_desc); free(w.neg_desc64); free(w.table)
    free(w.pos_idx); free(w.neg_idx); free(w.items); free(w.ranks)
    free(w.counts); free(w.prefix); free(w.sort_ids); free(w.sort_ends); free(w.tables); free(w.table_sums)


cdef int _binary_work_init(BinaryWork* w, Py_ssize_t size, bint keep_tables) noexcept nogil:
    cdef Py_ssize_t n = size if size > 0 else 1, k
    w.pos_desc = <double*>malloc(n * sizeof(double))
    w.neg_desc = <double*>malloc(n * sizeof(double))
    w.neg_desc64 = <double*>malloc(n * sizeof(double))
    w.table = <double*>malloc(n * sizeof(double))
    w.pos_idx = <Py_ssize_t*>malloc(n * sizeof(Py_ssize_t))
    w.neg_idx = <Py_ssize_t*>malloc(n * sizeof(Py_ssize_t))
    w.items = <Keyed*>malloc(n * sizeof(Keyed))
    w.sort_ids = <int32_t*>malloc(n * sizeof(int32_t))
    w.sort_ends = <int32_t*>malloc((SORT_BUCKETS_PER_SCORE * n + 1) * sizeof(int32_t))
    w.ranks = <int*>malloc(n * sizeof(int))
    w.counts = <int64_t*>malloc((n + 2) * sizeof(int64_t))
    w.prefix = <double*>malloc((n + 2) * sizeof(double))
    w.tables = NULL
    w.table_sums = NULL
    w.tables_width = n
    if keep_tables and n <= TABLE_ROWS_MAX:
        w.tables = <double*>malloc((n + 1) * n * sizeof(double))
        w.table_sums = <double*>malloc((n + 1) * sizeof(double))
        if w.tables == NULL or w.table_sums == NULL:
            _binary_work_free(w)
            return -1
        for k in range(n + 1):
            w.table_sums[k] = 0.0
    if w.items != NULL:
        for k in range(n):
            w.items[k].idx = k
    if (w.pos_desc == NULL or w.neg_desc == NULL or w.neg_desc64 == NULL
            or w.table == NULL or w.pos_idx == NULL or w.neg_idx == NULL
            or w.items == NULL or w.ranks == NULL or w.counts == NULL
            or w.prefix == NULL or w.sort_ids == NULL or w.sort_ends == NULL):
        _binary_work_free(w)
        return -1
    return 0


cdef enum:
    # Queries up to this long keep a position discount's normalised table per |P| (at most 0.5 MiB a thread):
    # dividing the whole table at every query costs about as much as the walk that reads it.
    TABLE_ROWS_MAX = 255

cdef enum:
    # Score lists up to this long are put in order by counting each one's place (SHORT_LANES of
    # ``_short_counts.pxd``).
    RANK_SORT_MAX = 16

cdef enum:
    # Score lists up to this long are put in order by insertion; longer ones by distribution.
    INSERTION_MAX = 32

cdef enum:
    # Padded rows up to this wide move in copies of this many entries (gather_leading) and in this many lanes
    # (scatter_leading, _count_kept): a library call or a scalar loop per row of ten places costs more.
    SHORT_ROW = 16


cdef inline void _keyed_order(const floating* scores, Py_ssize_t n, BinaryWork* w) noexcept nogil:
    """rankopt's order (descending, ties by index) of the n scores in ``w.items`` (key −score, index).

    Longer lists go through the distribution sort of ``_sorting.pxd`` (a few ns per score, against tens for
    a std::sort of the pairs)."""
    cdef Py_ssize_t k, t, rank
    cdef floating x
    cdef Keyed item
    cdef int32_t place[RANK_SORT_MAX]
    if n <= RANK_SORT_MAX:
        # Each score's place is the count of those before it in the order (a short list, whose insertion
        # would mispredict about every other step): the scores above it, counted sixteen lanes at a time, when
        # no two are equal; with ties, those equal before it too.
        if floating is double:
            short_counts_f64(scores, -1.0, n, place, NULL)
        else:
            short_counts_f32(scores, -1.0, n, place, NULL)
        if short_counts_distinct(place, n):
            for k in range(n):
                w.items[place[k]].key = -(<double>scores[k])
                w.items[place[k]].idx = k
            return
        for k in range(n):
            x = scores[k]
            rank = 0
            for t in range(k):
                rank += scores[t] >= x
            for t in range(k + 1, n):
                rank += scores[t] > x
            w.items[rank].key = -(<double>x)
            w.items[rank].idx = k
        return
    if n <= INSERTION_MAX:
        # Stable by score: equal scores stay in index order.
        for k in range(n):
            item.key = -(<double>scores[k])
            item.idx = k
            t = k
            while t > 0 and item.key < w.items[t - 1].key:
                w.items[t] = w.items[t - 1]
                t -= 1
            w.items[t] = item
        return
    descending_keyed(scores, n, w.items, w.sort_ids, w.sort_ends)


cdef inline Py_ssize_t _count_above(const floating* desc, Py_ssize_t lo, Py_ssize_t hi, double x,
                                    bint or_equal) noexcept nogil:
    """#{i in lo…hi−1 : desc[i] > x} (≥ x with ``or_equal``), ``desc`` sorted high to low: a binary search
    without branches on the data (each halving a conditional move), whose outcomes a processor cannot predict."""
    cdef Py_ssize_t base = lo, n = hi - lo, half
    if n <= 0:
        return 0
    if or_equal:
        while n > 1:
            half = n // 2
            base = base + half if <double>desc[base + half] >= x else base
            n -= half
        return base - lo + (<double>desc[base] >= x)
    while n > 1:
        half = n // 2
        base = base + half if <double>desc[base + half] > x else base
        n -= half
    return base - lo + (<double>desc[base] > x)


cdef inline Py_ssize_t _count_keyed_above(const Keyed* items, Py_ssize_t n, double x) noexcept nogil:
    """#{j < n : −items[j].key > x}, the items in rankopt's order: :func:`_count_above` on the scores the keys
    hold (the key is −score, exactly)."""
    cdef Py_ssize_t base = 0, half
    if n <= 0:
        return 0
    while n > 1:
        half = n // 2
        base = base + half if -items[base + half].key > x else base
        n -= half
    return base + (-items[base].key > x)


cdef double _topk_ranks(const floating* p, Py_ssize_t n_pos, const Keyed* q, Py_ssize_t n_neg, Py_ssize_t k,
                        const double* count_loss, double* prefix, int* ranks, bint to_input,
                        const int* positives_before=NULL) noexcept nogil:
    """``rankopt.inference.topk`` for one query: the interleaving ranks of the negatives ``q`` (key −score, index)
    against the positives ``p`` (sorted high to low), for a loss whose Δ counts the positives in the top k;
    ``count_loss[m − m_lo]`` is Δ for m of them, m_lo ≤ m ≤ m_hi.  Tries every m, updating the boundary
    penalties U + V by one row and one column per step; returns Δ of the chosen m.

    ``q`` is in rankopt's order as far as it is read, as :func:`descending_keyed_down_to` leaves it: the first
    min(k', |N|) and every one at or above the lowest positive; after them the rest, each below every
    positive, in any order (read only as negatives that every positive passes).  Negative j's rank goes to
    ``ranks[q[j].idx]`` (its place in the input) with ``to_input``, else to ``ranks[j]``; the scores are read
    from the keys, never copied out.  ``positives_before[j]`` (NULL: none), where every negative is in order and
    no score ties a positive's, is the positives above negative j: the ranks are then read off it instead of
    walked (a walk's exit per negative mispredicts); it may be ``ranks`` itself, each entry read before its
    own rank is written there."""
    cdef Py_ssize_t kept = min(k, n_pos + n_neg), m, b, i, j, last, pos_above, width, best_m
    cdef Py_ssize_t m_lo = max(<Py_ssize_t>0, kept - n_neg), m_hi = min(kept, n_pos)
    cdef double* sp = prefix                 # sp[i] = p_0 + … + p_{i−1}
    cdef double* sq = prefix + n_pos + 1     # sq[j] = q_0 + … + q_{j−1}
    cdef double penalty = 0.0, objective, best, scale = 2.0 / ((<double>n_pos) * (<double>n_neg)), pm, qb
    sp[0] = 0.0
    for i in range(n_pos):
        sp[i + 1] = sp[i] + <double>p[i]
    sq[0] = 0.0
    for j in range(n_neg):
        sq[j + 1] = sq[j] - q[j].key
    # U(m_lo) + V(m_lo), row by row and column by column.
    b = kept - m_lo
    for i in range(m_lo):  # Σ_{j ≥ b} (q_j − p_i)⁺
        last = _count_keyed_above(q, n_neg, <double>p[i])
        if last > b:
            penalty += sq[last] - sq[b] - (last - b) * <double>p[i]
    for j in range(b):  # Σ_{i ≥ m_lo} (p_i − q_j)⁺
        last = _count_above(p, 0, n_pos, -q[j].key, False)
        if last > m_lo:
            penalty += sp[last] - sp[m_lo] - (last - m_lo) * (-q[j].key)
    best = count_loss[0] - scale * penalty
    best_m = m_lo
    for m in range(m_lo, m_hi):
        b = kept - m  # ≥ 1: a negative leaves the top as positive m joins it
        pm = <double>p[m]
        qb = -q[b - 1].key
        # Two binary searches, not four: the scores equal to the one searched for follow those above it.
        pos_above = _count_above(p, 0, n_pos, qb, False)
        i = pos_above  # positives i ≥ this score below q_{b−1}
        while i < n_pos and <double>p[i] >= qb:
            i += 1
        # U gains column b − 1 over the top positives i < m, and row m from column b − 1 on.
        if m > i:
            penalty += (m - i) * qb - (sp[m] - sp[i])
        last = _count_keyed_above(q, n_neg, pm)
        if last > b - 1:
            penalty += sq[last] - sq[b - 1] - (last - b + 1) * pm
        # V loses row m over the negatives j < b, and column b − 1 over the positives after m.
        j = last  # negatives j ≥ this score below p_m
        while j < n_neg and -q[j].key >= pm:
            j += 1
        if b > j:
            penalty -= (b - j) * pm - (sq[b] - sq[j])
        if pos_above > m + 1:
            penalty -= sp[pos_above] - sp[m + 1] - (pos_above - m - 1) * qb
        objective = count_loss[m + 1 - m_lo] - scale * penalty
        # Of the maximisers, the largest m: the negatives as low as they can go, every method's tie rule.
        if objective >= best:
            best = objective
            best_m = m + 1
    _topk_chosen_ranks(p, n_pos, q, n_neg, kept - best_m, best_m, ranks, to_input, positives_before)
    return count_loss[best_m - m_lo]


cdef inline void _topk_chosen_ranks(const floating* p, Py_ssize_t n_pos, const Keyed* q, Py_ssize_t n_neg,
                                    Py_ssize_t b, Py_ssize_t best_m, int* ranks, bint to_input,
                                    const int* positives_before) noexcept nogil:
    """:func:`_topk_ranks`' ranks once it has chosen best_m positives in the top (b negatives with them): each
    negative's positives at or above it, among the top group's (j < b) or the rest's."""
    cdef Py_ssize_t i, j
    if positives_before != NULL:  # read, not walked: the walks' counts, no score tying a positive's
        for j in range(n_neg):
            i = positives_before[j]
            i = min(i, best_m) if j < b else max(i, best_m)
            ranks[q[j].idx if to_input else j] = <int>(1 + i)
        return
    # The negatives come high to low, so one pointer per group walks down the positives (_count_above's counts).
    i = 0
    for j in range(min(b, n_neg)):
        while i < best_m and <double>p[i] >= -q[j].key:
            i += 1
        ranks[q[j].idx if to_input else j] = <int>(1 + i)
    i = best_m
    for j in range(b, n_neg):
        while i < n_pos and <double>p[i] >= -q[j].key:
            i += 1
        ranks[q[j].idx if to_input else j] = <int>(1 + i)


cdef const double* _normalised_table(const double* discount, Py_ssize_t n_pos, Py_ssize_t n, BinaryWork* w,
                                     double* z) noexcept nogil:
    """The single-query table D / Σ_{i≤|P|} D(i) of a query of n documents, divided as NumPy divides it;
    its sum in ``z``.  Kept per |P| when the work arrays keep tables (the batch's longest query as row)."""
    cdef Py_ssize_t k, width
    cdef double* row
    if w.tables == NULL:
        z[0] = numpy_sum(discount, n_pos)
        for k in range(n):
            w.table[k] = discount[k] / z[0]
        return w.table
    width = w.tables_width
    row = w.tables + n_pos * width
    if w.table_sums[n_pos] == 0.0:
        w.table_sums[n_pos] = numpy_sum(discount, n_pos)
        for k in range(width):
            row[k] = discount[k] / w.table_sums[n_pos]
    z[0] = w.table_sums[n_pos]
    return row


cdef inline Py_ssize_t _split_in_order(const floating* s, const label_t* rel, int64_t relevant_from, Py_ssize_t n,
                                       const uint64_t* keys, BinaryWork* w, floating* pos_desc) noexcept nogil:
    """The query's documents in rankopt's order, split by relevance: the positives' scores to ``pos_desc`` and
    their documents to ``w.pos_idx``, the negatives' keys (−score) to ``w.items`` and documents to ``w.neg_idx``
    (``w.items[j].idx`` is j, set once by :func:`_binary_work_init`, or here after the kernel's own sort); the
    number of positives.  ``w.tied``: whether two documents share a score.  ``w.ranks[j]``: the positives before
    negative j (the top-k method's ranks without a walk, when no two scores tie).

    The order is ``keys`` (:func:`packed_descending_keys`, sorted: each document's index, score and class in
    its key) when given, else one distribution sort of the n scores (``_sorting.pxd``).  Branch-free: each document
    is written to both lists, and only one of them advances; five stores a document, the loop's limit."""
    cdef Py_ssize_t t, d, n_pos = 0, n_neg = 0, is_pos
    cdef floating x, previous
    cdef bint any_tie = False
    if keys == NULL:
        _keyed_order(s, n, w)
        previous = s[w.items[0].idx]
        for t in range(n):
            d = w.items[t].idx  # read before the write at n_neg ≤ t
            x = s[d]
            is_pos = rel[d] >= relevant_from
            pos_desc[n_pos] = x
            w.pos_idx[n_pos] = d
            w.items[n_neg].key = -(<double>x)
            w.items[n_neg].idx = n_neg
            w.neg_idx[n_neg] = d
            w.ranks[n_neg] = <int>n_pos
            n_pos += is_pos
            n_neg += 1 - is_pos
            any_tie |= (t > 0) & (x == previous)
            previous = x
    else:  # document, score and class from the key: no gather from the scores and labels
        previous = <floating>packed_key_score(keys[0])
        for t in range(n):
            d = packed_key_index(keys[t])
            x = <floating>packed_key_score(keys[t])
            is_pos = <Py_ssize_t>(keys[t] & 1)
            pos_desc[n_pos] = x
            w.pos_idx[n_pos] = d
            w.items[n_neg].key = -(<double>x)
            w.neg_idx[n_neg] = d
            w.ranks[n_neg] = <int>n_pos
            n_pos += is_pos
            n_neg += 1 - is_pos
            any_tie |= (t > 0) & (x == previous)
            previous = x
    w.tied = any_tie
    return n_pos


cdef inline void _negative_scores(const Keyed* items, Py_ssize_t n_neg, floating* neg_desc) noexcept nogil:
    """The sorted negatives' scores from their keys, exactly (a key is −score, the score widened)."""
    cdef Py_ssize_t k
    for k in range(n_neg):
        neg_desc[k] = <floating>(-items[k].key)


cdef inline int _negative_ranks(const floating* pos_desc, Py_ssize_t n_pos, floating* neg_desc,
                                Py_ssize_t n_neg, int method, int code, const double* table, bint unimodal,
                                const double* bends, double z, Py_ssize_t top_k, const double* count_loss,
                                BinaryWork* w, double* count_delta) except -1 nogil:
    """Each negative's interleaving rank in ``w.ranks``, the negatives in rankopt's order (``w.items``), by
    ``method``; a top-k method's Δ in ``count_delta``."""
    cdef Py_ssize_t k
    if method == METHOD_SELECT or method == METHOD_SEARCH or method == METHOD_GREEDY:
        _negative_scores(w.items, n_neg, neg_desc)
    if method == METHOD_QS:
        if floating is double:
            qs_sorted_ranks_f64(pos_desc, n_pos, w.items, n_neg, code, table, unimodal, bends, z, w.ranks)
        else:
            qs_sorted_ranks_f32(pos_desc, n_pos, w.items, n_neg, code, table, unimodal, bends, z, w.ranks)
    elif method == METHOD_SELECT:  # the negatives' input order is their sorted one here: ties by index still
        if floating is double:
            select_ranks_f64(pos_desc, n_pos, neg_desc, n_neg, w.ranks)
        else:
            select_ranks_f32(pos_desc, n_pos, neg_desc, n_neg, w.ranks)
    elif method == METHOD_TOPK:
        count_delta[0] = _topk_ranks(pos_desc, n_pos, w.items, n_neg, top_k, count_loss, w.prefix, w.ranks, True,
                                     <const int*>NULL if w.tied else w.ranks)
    elif method == METHOD_SEARCH:
        for k in range(n_neg):
            w.neg_desc64[k] = <double>neg_desc[k]
        if floating is double:
            search_sorted_f64(pos_desc, n_pos, w.neg_desc64, n_neg, w.ranks)
        else:
            search_sorted_f32(pos_desc, n_pos, w.neg_desc64, n_neg, w.ranks)
    elif floating is double:
        greedy_ranks_f64(pos_desc, n_pos, neg_desc, n_neg, code, table, w.ranks)
    else:
        greedy_ranks_f32(pos_desc, n_pos, neg_desc, n_neg, code, table, w.ranks)
    return 0


cdef inline double _negatives_dot(const floating* s, const label_t* rel, int64_t relevant_from, Py_ssize_t n,
                                  const double* coef, double* products) noexcept nogil:
    """Σ coef·score over the query's negatives in input order, in two running sums by the negative's parity
    (the order rankopt has always summed in: ``_terms.pxd``).  The products are first gathered into
    ``products`` (n entries) without a branch on the labels: each document's is written at the next free
    place, which only a negative's advances (every coefficient is written, and finite).  Each sum then adds
    its own negatives only, half the chain of a pass that adds a product or zero to both at every document."""
    cdef Py_ssize_t d, k = 0
    cdef double even = 0.0, odd = 0.0
    for d in range(n):
        products[k] = coef[d] * s[d]
        k += rel[d] < relevant_from
    for d in range(0, k - 1, 2):
        even += products[d]
        odd += products[d + 1]
    if k & 1:
        even += products[k - 1]
    return even + odd


cdef inline bint _short_counted_query(const floating* s, const label_t* rel, int64_t relevant_from, Py_ssize_t n,
                                      Py_ssize_t n_pos, int method, int code, Py_ssize_t top_k,
                                      const double* count_loss, bint relative_to_truth, double* coef, double* loss,
                                      double* value) noexcept nogil:
    """:func:`_binary_query` by counting, on a list of at most RANK_SORT_MAX documents of both classes and
    distinct scores: AUC by the ``qs`` method, or a top-k count by its method when the cutoff holds every
    document (one count of positives in the top: Δ(|P|), ``count_loss``'s only entry, whatever the order).
    False, with nothing written, for any other list: longer, tied, or of another loss or method.

    Each method moves negative j past positive p on a verdict monotone in both scores: AUC's walk while
    δ + 2·scale·(s_p − s_j) ≥ 0 (``_auc_walk``'s expression; each operation rounds monotonically), the top-k
    method's while s_p ≥ s_j (``_topk_ranks`` with every document in the top).  So j's rank is 1 + the
    positives it holds for and a positive's negatives above it are those it does not hold for: neither a walk
    nor the negatives' order is needed.  The positives' order is the one Σ coef·s adds them in (the highest
    first); a tie would ask for the coefficients' mean over a run, which the general path computes."""
    cdef int32_t place[RANK_SORT_MAX]
    cdef int32_t order[RANK_SORT_MAX]
    cdef int32_t pos_doc[RANK_SORT_MAX]
    cdef int32_t neg_doc[RANK_SORT_MAX]
    cdef int32_t held[RANK_SORT_MAX]
    cdef double pos_x[RANK_SORT_MAX]
    cdef double neg_x[RANK_SORT_MAX]
    cdef Py_ssize_t d, t, j, k, n_neg = n - n_pos, k_pos = 0, k_neg = 0
    cdef int64_t rank, above, above_sum = 0
    cdef bint holds
    cdef double scale = 1.0 / ((<double>n_pos) * (<double>n_neg))
    cdef double walk_scale = 2.0 / ((<double>n_pos) * n_neg), delta = -1.0 / ((<double>n_pos) * n_neg)
    cdef double truth_pos = 1.0 / (<double>n_pos) if relative_to_truth else 0.0
    cdef double truth_neg = -1.0 / (<double>n_neg) if relative_to_truth else 0.0
    cdef double even = 0.0, odd = 0.0, dot
    cdef bint auc = code == LOSS_AUC and method == METHOD_QS
    if n > RANK_SORT_MAX or not (auc or (method == METHOD_TOPK and n <= top_k)):
        return False
    if floating is double:
        short_counts_f64(s, -1.0, n, place, NULL)
    else:
        short_counts_f32(s, -1.0, n, place, NULL)
    if not short_counts_distinct(place, n):
        return False
    for d in range(n):
        order[place[d]] = <int32_t>d
    # Branch-free: each document is written to both lists, and only one of them advances.
    for t in range(n):  # the positives from the highest down
        d = order[t]
        pos_x[k_pos] = <double>s[d]
        pos_doc[k_pos] = <int32_t>d
        k_pos += rel[d] >= relevant_from
    for d in range(n):  # the negatives in input order
        neg_x[k_neg] = <double>s[d]
        neg_doc[k_neg] = <int32_t>d
        k_neg += rel[d] < relevant_from
    for k in range(n_pos):
        held[k] = 0
    for j in range(n_neg):
        rank = 1
        for k in range(n_pos):
            if auc:
                holds = delta + walk_scale * (pos_x[k] - neg_x[j]) >= 0.0
            else:
                holds = pos_x[k] >= neg_x[j]
            rank += holds
            held[k] += holds
        coef[neg_doc[j]] = negative_coefficient(n_pos, scale, rank) - truth_neg
        # Σ coef·score over the negatives in input order, in two sums by parity (_negatives_dot's order).
        if j & 1:
            odd += coef[neg_doc[j]] * neg_x[j]
        else:
            even += coef[neg_doc[j]] * neg_x[j]
    dot = even + odd
    for k in range(n_pos):
        above = n_neg - held[k]
        above_sum += above
        coef[pos_doc[k]] = ((<double>n_neg) + 2.0 - 2.0 * (above + 1)) * scale - truth_pos
        dot += coef[pos_doc[k]] * pos_x[k]
    loss[0] = (<double>above_sum) / ((<double>n_pos) * (<double>n_neg)) if auc else count_loss[0]
    value[0] = dot + loss[0]
    return True


cdef int _binary_query(const floating* s, const label_t* rel, int64_t relevant_from, Py_ssize_t n, int method,
                       int code,
                       const double* discount, const double* bends, bint unimodal, Py_ssize_t top_k,
                       const double* count_loss, bint relative_to_truth, const uint64_t* keys, bint short_queries,
                       BinaryWork* w, double* coef, double* loss, double* value) except -1 nogil:
    """One query of a binary rank loss; returns 1 when usable, 0 when one class only.

    A document is relevant when its label is ≥ ``relevant_from`` (1 for 0/1 labels).  The documents are put
    in order once (``keys``, sorted, or a sort here: :func:`_split_in_order`); every method reads both
    classes sorted, and the rest is linear passes; with ``short_queries`` and no ``keys``, some short lists
    are ranked by counting instead (:func:`_short_counted_query`).

    With ``relative_to_truth`` the ground truth's coefficients (1/|P| for a positive, −1/|N| for a
    negative, ``ground_truth_coefficients``'s expressions) are subtracted from ``coef`` and their
    product with the scores from ``value``: the structured hinge's subgradient and value.
    """
    cdef floating* pos_desc = <floating*>w.pos_desc
    cdef floating* neg_desc = <floating*>w.neg_desc
    cdef const double* table = discount
    cdef Py_ssize_t k, n_pos, n_neg, r
    cdef int64_t above = 0, above_sum = 0
    cdef double scale, dot, z = 1.0, count_delta = 0.0
    cdef double truth_pos = 0.0, truth_neg = 0.0
    n_pos = _count_relevant(rel, n, relevant_from)
    n_neg = n - n_pos
    if n_pos == 0 or n_neg == 0:
        for k in range(n):
            coef[k] = 0.0
        loss[0] = 0.0
        value[0] = 0.0
        return 0
    if short_queries and keys == NULL and _short_counted_query(s, rel, relevant_from, n, n_pos, method, code, top_k,
                                                               count_loss, relative_to_truth, coef, loss, value):
        return 1
    _split_in_order(s, rel, relevant_from, n, keys, w, pos_desc)
    if relative_to_truth:
        truth_pos = 1.0 / (<double>n_pos)
        truth_neg = -1.0 / (<double>n_neg)
    if code == LOSS_POSITION_DISCOUNT and method != METHOD_TOPK:
        table = _normalised_table(discount, n_pos, n, w, &z)

    _negative_ranks(pos_desc, n_pos, neg_desc, n_neg, method, code, table, unimodal, bends, z, top_k, count_loss,
                    w, &count_delta)

    # Observation 2, with base.ranking_from_ranks's expressions.
    scale = 1.0 / ((<double>n_pos) * (<double>n_neg))
    for k in range(n_pos + 2):
        w.counts[k] = 0
        # A negative's coefficient at each rank, computed once (w.prefix is free again).
        w.prefix[k] = negative_coefficient(n_pos, scale, k) - truth_neg
    for k in range(n_neg):
        r = w.ranks[k]
        w.counts[r] += 1
        coef[w.neg_idx[k]] = w.prefix[r]
    # The k-th highest positive has every negative of rank ≤ k above it; w.neg_desc64
    # (free again) collects the loss's terms for NumPy's summation order.
    for k in range(n_pos):
        above += w.counts[k + 1]
        coef[w.pos_idx[k]] = ((<double>n_neg) + 2.0 - 2.0 * (above + 1)) * scale - truth_pos
        if method == METHOD_TOPK:
            continue  # Δ came with the count
        if code == LOSS_AP:
            w.neg_desc64[k] = (<double>(k + 1)) / (<double>(k + 1 + above))
        elif code == LOSS_AUC:
            above_sum += above
        else:
            w.neg_desc64[k] = discount[k + above]  # D at the positive's position k + 1 + above
    # Σ coef·score: the negatives in input order, then the positives from the highest down (_terms.pxd).
    dot = _negatives_dot(s, rel, relevant_from, n, coef, w.prefix)
    for k in range(n_pos):
        dot += coef[w.pos_idx[k]] * pos_desc[k]
    loss[0] = _query_loss(method, code, count_delta, w.neg_desc64, n_pos, n_neg, above_sum, z)
    value[0] = dot + loss[0]
    # The hinge's subgradient: the one that does not depend on the documents' order (nothing to do untied).
    if relative_to_truth and w.tied:
        _mean_over_runs(pos_desc, n_pos, w.pos_idx, coef)
        _negative_scores(w.items, n_neg, neg_desc)
        if _ranks_split_a_tie(neg_desc, n_neg, w.ranks):
            _mean_over_runs(neg_desc, n_neg, w.neg_idx, coef)
    return 1


cdef inline void _mean_over_runs(const floating* sorted_scores, Py_ssize_t m, const Py_ssize_t* doc,
                                 double* coef) noexcept nogil:
    """Each document's coefficient averaged over its run of equal scores: documents of one relevance and one
    score are interchangeable in a most violated ranking, so the mean is a subgradient too (a convex
    combination of optimal rankings' Ψ), and the one permuting the documents permutes.  ``sorted_scores[j]``
    is document ``doc[j]``'s; Σ coef·s is unchanged, the scores of a run being equal."""
    cdef Py_ssize_t start = 0, j, i
    cdef double total
    for j in range(1, m + 1):
        if j == m or sorted_scores[j] != sorted_scores[start]:
            if j - start > 1:
                total = 0.0
                for i in range(start, j):
                    total += coef[doc[i]]
                total /= <double>(j - start)
                for i in range(start, j):
                    coef[doc[i]] = total
            start = j


cdef inline bint _ranks_split_a_tie(const floating* neg_desc, Py_ssize_t n_neg, const int* ranks) noexcept nogil:
    """Whether negatives of one score (sorted, ``ranks`` in their order) got different interleaving ranks: only
    then are their coefficients averaged (a tie group at one rank shares its coefficient already)."""
    cdef Py_ssize_t j
    cdef bint split = False
    for j in range(1, n_neg):
        split |= (neg_desc[j] == neg_desc[j - 1]) & (ranks[j] != ranks[j - 1])
    return split


cdef inline double _query_loss(int method, int code, double count_delta, const double* terms, Py_ssize_t n_pos,
                               Py_ssize_t n_neg, int64_t above_sum, double z) noexcept nogil:
    """Δ of the ranking from the positives' ``terms`` (their AP precisions or discounts, in order), the pairs
    swapped (AUC) or the count's Δ (top k)."""
    if method == METHOD_TOPK:
        return count_delta
    if code == LOSS_AP:
        return 1.0 - numpy_sum(terms, n_pos) / (<double>n_pos)
    if code == LOSS_AUC:
        return (<double>above_sum) / ((<double>n_pos) * (<double>n_neg))
    return 1.0 - numpy_sum(terms, n_pos) / z


def topk_ranks(const floating[::1] pos_desc, const floating[::1] neg_desc, Py_ssize_t k,
               const double[::1] count_loss, int[::1] ranks_sorted):
    """The per-query ``topk`` method's ranks, by the batch's own code (:func:`_topk_ranks`), so the two
    agree to the bit, ties included.  Fills ``ranks_sorted`` (the negatives' interleaving ranks, sorted
    order) and returns Δ of the chosen count.  The caller (``rankopt.inference.topk``) validates: both
    score arrays non-empty, finite and sorted high to low; ``count_loss`` Δ(m) for m = max(0, k' − |N|)
    … min(k', |P|), k' = min(k, |P| + |N|); ``ranks_sorted`` of length |N|.
    """
    cdef Py_ssize_t n_pos = pos_desc.shape[0], n_neg = neg_desc.shape[0], j
    cdef double[::1] prefix = np.empty(n_pos + n_neg + 2, dtype=np.float64)
    cdef double delta
    cdef Keyed* items = <Keyed*>malloc(n_neg * sizeof(Keyed))
    if items == NULL:
        raise MemoryError(f"cannot allocate the keys of {n_neg} negatives")
    try:
        with nogil:
            for j in range(n_neg):
                items[j].key = -(<double>neg_desc[j])
                items[j].idx = j
            delta = _topk_ranks(&pos_desc[0], n_pos, items, n_neg, k, &count_loss[0], &prefix[0],
                                &ranks_sorted[0], False)
    finally:
        free(items)
    return delta


cdef inline void _scale_run(const double* values, double factor, floating* out, Py_ssize_t n) noexcept nogil:
    """``out[i] = values[i] · factor`` rounded to ``out``'s type once, for i < n: the gradient's one rounding,
    which :func:`scale_into` and :func:`scatter_kept` share."""
    cdef Py_ssize_t i
    for i in range(n):
        out[i] = <floating>(values[i] * factor)


#: KEEP_32[n][k], KEEP_64[n][k]: every bit set for the lanes k < n, none for the others (masks of floats' bits);
#: KEEP_1[n][k]: 1 for the lanes k < n, else 0.
cdef uint32_t KEEP_32[SHORT_ROW + 1][SHORT_ROW]
cdef uint64_t KEEP_64[SHORT_ROW + 1][SHORT_ROW]
cdef uint8_t KEEP_1[SHORT_ROW + 1][SHORT_ROW]


cdef void _fill_keep_masks() noexcept:
    """The KEEP tables, once, when the module loads."""
    cdef Py_ssize_t n, k
    for n in range(SHORT_ROW + 1):
        for k in range(SHORT_ROW):
            KEEP_32[n][k] = 0xFFFFFFFFU if k < n else 0
            KEEP_64[n][k] = 0xFFFFFFFFFFFFFFFFULL if k < n else 0
            KEEP_1[n][k] = k < n


_fill_keep_masks()


cdef inline void _scale_short_row(const double* values, double factor, floating* row, Py_ssize_t n) noexcept nogil:
    """:func:`_scale_run` on a padded row of at most SHORT_ROW places whose first n are kept, the rest of its
    places +0, in SHORT_ROW lanes of a fixed count: every lane scaled, then the places past n cleared by a mask
    of their bits (a loop of n stays scalar, a library call zeroes the rest, and a select on k < n is split
    into both by the compiler).  Reads SHORT_ROW values and writes SHORT_ROW places from the row's start, the
    caller's check; the places past the row, the next rows', are written again by their own."""
    cdef floating lanes[SHORT_ROW]
    cdef uint32_t bits_32[SHORT_ROW]
    cdef uint64_t bits_64[SHORT_ROW]
    cdef Py_ssize_t k
    for k in range(SHORT_ROW):
        lanes[k] = <floating>(values[k] * factor)
    if floating is float:
        memcpy(bits_32, lanes, sizeof(lanes))
        for k in range(SHORT_ROW):
            bits_32[k] &= KEEP_32[n][k]
        memcpy(row, bits_32, sizeof(lanes))
    else:
        memcpy(bits_64, lanes, sizeof(lanes))
        for k in range(SHORT_ROW):
            bits_64[k] &= KEEP_64[n][k]
        memcpy(row, bits_64, sizeof(lanes))


def scale_into(const double[::1] values, double factor, floating[::1] out):
    """``out[k] = values[k] · factor`` rounded to ``out``'s type, in one pass (NumPy's multiply into a float32
    array takes two: the product in float64, then the cast).  The caller checks that the sizes match."""
    if values.shape[0] == 0:
        return
    with nogil:
        _scale_run(&values[0], factor, &out[0], values.shape[0])


ctypedef fused kept_value:
    float
    double
    int64_t
    int8_t


def kept_offsets(const uint8_t[:, ::1] mask, int64_t[::1] offsets):
    """``offsets[q + 1] − offsets[q]`` = the documents row q of a padded batch's ``mask`` keeps (its nonzero
    bytes, as :func:`gather_kept` and :func:`scatter_kept` read them: a bool tensor made from other bytes keeps
    a document once), ``offsets[0]`` = 0 (B + 1 entries): the flat layout's queries, in one pass.  Returns the
    total."""
    cdef int64_t kept
    with nogil:
        kept = _count_kept(mask, offsets)
    return kept


cdef inline int64_t _count_kept(const uint8_t[:, ::1] mask, int64_t[::1] offsets) noexcept nogil:
    """:func:`kept_offsets`' counts into ``offsets``; returns the total.  A row of up to SHORT_ROW places is
    counted in SHORT_ROW lanes of a fixed count, those past the row masked off (a loop over ten places stays
    scalar), where the array holds them."""
    cdef Py_ssize_t q, k, width = mask.shape[1], size = mask.shape[0] * mask.shape[1]
    cdef const uint8_t* row
    cdef int64_t kept = 0
    cdef uint8_t in_row
    offsets[0] = 0
    for q in range(mask.shape[0]):
        row = &mask[0, 0] + q * width
        if width <= SHORT_ROW and q * width + SHORT_ROW <= size:
            in_row = 0
            for k in range(SHORT_ROW):
                in_row += (row[k] != 0) & KEEP_1[width][k]
            kept += in_row
        else:
            for k in range(width):
                kept += row[k] != 0
        offsets[q + 1] = kept
    return kept


cdef inline Py_ssize_t _count_relevant(const label_t* rel, Py_ssize_t n, int64_t relevant_from) noexcept nogil:
    """How many of n labels are ≥ ``relevant_from`` (≥ 1); int8 labels compared as bytes and counted in a byte
    per lane, 255 at most at a time, which vectorises sixteen labels to an instruction."""
    cdef Py_ssize_t k, start, total = 0
    cdef int8_t from_byte
    cdef uint8_t chunk
    if label_t is int8_t:
        if relevant_from > 127:
            return 0
        from_byte = <int8_t>relevant_from
        for start in range(0, n, 255):
            chunk = 0
            for k in range(start, min(start + 255, n)):
                chunk += rel[k] >= from_byte
            total += chunk
        return total
    for k in range(n):
        total += rel[k] >= relevant_from
    return total


def query_size_range(const int64_t[::1] offsets):
    """The smallest and the largest query size ``offsets[q + 1] − offsets[q]`` over the queries, (0, 0) for none,
    in one pass: NumPy's ``diff`` allocates B entries and each reduction reads them again, a millisecond at 10⁵
    queries for every call of a training loop's hinge.  Each difference wraps around as NumPy's does (unchecked
    offsets may be anything), without C's undefined overflow."""
    cdef Py_ssize_t q
    cdef int64_t size, smallest = 0, largest = 0
    if offsets.shape[0] < 2:
        return 0, 0
    smallest = largest = <int64_t>(<uint64_t>offsets[1] - <uint64_t>offsets[0])
    with nogil:
        for q in range(1, offsets.shape[0] - 1):
            size = <int64_t>(<uint64_t>offsets[q + 1] - <uint64_t>offsets[q])
            smallest = min(smallest, size)
            largest = max(largest, size)
    return smallest, largest


def relevant_per_query(const label_t[::1] rel, int64_t relevant_from, const int64_t[::1] offsets,
                       int64_t[::1] counts):
    """``counts[q]`` = query q's labels ≥ ``relevant_from`` (≥ 1), for q < B, in one pass without a boolean copy
    (:func:`_count_relevant`, as :func:`count_table_starts` counts them)."""
    cdef Py_ssize_t q
    if relevant_from < 1:
        raise ValueError(f"expected relevant_from >= 1, got {relevant_from} instead")
    if counts.shape[0] < offsets.shape[0] - 1:
        raise ValueError(f"expected a count per query ({offsets.shape[0] - 1}), got {counts.shape[0]} instead")
    with nogil:
        for q in range(offsets.shape[0] - 1):
            counts[q] = _count_relevant(&rel[offsets[q]] if offsets[q + 1] > offsets[q] else NULL,
                                        offsets[q + 1] - offsets[q], relevant_from)


def count_table_starts(const label_t[::1] rel, int64_t relevant_from, const int64_t[::1] offsets,
                       const int64_t[:, ::1] grid, int64_t[::1] starts):
    """For a top-k count loss: ``starts[q]`` = ``grid[|P_q|, |N_q|]``, where query q's Δ(m) entries start in its
    pool (:class:`rankopt.inference.topk.CountLossPool`), |P_q| counting the labels ≥ ``relevant_from``, and 0
    for a query with one class; in one pass.  False as soon as a query's pair lies outside the grid or was
    never asked (−1): the caller then asks the pool.  The caller validates: labels ≥ 0, ``relevant_from`` ≥ 1,
    offsets from 0 to n non-decreasing, ``starts`` of one entry per query."""
    cdef Py_ssize_t q, n_pos, n_neg, n_queries = offsets.shape[0] - 1
    cdef int64_t start
    cdef bint found = True
    if relevant_from < 1:
        raise ValueError(f"expected relevant_from >= 1, got {relevant_from} instead")
    if starts.shape[0] < n_queries:
        raise ValueError(f"expected a start per query ({n_queries}), got {starts.shape[0]} instead")
    with nogil:
        for q in range(n_queries):
            n_pos = _count_relevant(&rel[offsets[q]] if offsets[q + 1] > offsets[q] else NULL,
                                    offsets[q + 1] - offsets[q], relevant_from)
            n_neg = offsets[q + 1] - offsets[q] - n_pos
            if n_pos == 0 or n_neg == 0:
                starts[q] = 0
                continue
            if n_pos >= grid.shape[0] or n_neg >= grid.shape[1]:
                found = False
                break
            start = grid[n_pos, n_neg]
            if start < 0:
                found = False
                break
            starts[q] = start
    return found


cdef inline Py_ssize_t _next_kept(const uint8_t* row, Py_ssize_t k, Py_ssize_t width) noexcept nogil:
    """The first place ≥ k that ``row`` keeps (a nonzero byte), or ``width``: eight bytes at a time over padding."""
    cdef uint64_t word
    while k + 8 <= width:
        memcpy(&word, row + k, 8)
        if word != 0:
            break
        k += 8
    while k < width and row[k] == 0:
        k += 1
    return k


cdef inline Py_ssize_t _next_dropped(const uint8_t* row, Py_ssize_t k, Py_ssize_t width) noexcept nogil:
    """The first place ≥ k that ``row`` does not keep (a zero byte), or ``width``."""
    cdef const void* found = memchr(row + k, 0, width - k)
    return width if found == NULL else <const uint8_t*>found - row


cdef inline uint64_t _copy_run(const kept_value* source, kept_value* target, Py_ssize_t n) noexcept nogil:
    """Copy n entries; for int64 entries return their bitwise OR (a vectorised pass over the run, in cache), else 0."""
    cdef Py_ssize_t i
    cdef uint64_t bits = 0
    if kept_value is int64_t:
        for i in range(n):
            target[i] = source[i]
            bits |= <uint64_t>source[i]
        return bits
    memcpy(target, source, n * sizeof(kept_value))
    return 0


cdef inline uint64_t _narrow_run(const int64_t* source, int8_t* target, Py_ssize_t n) noexcept nogil:
    """Copy n int64 entries as int8 (their low byte) and return their bitwise OR, which tells whether they fit."""
    cdef Py_ssize_t i
    cdef uint64_t bits = 0
    for i in range(n):
        target[i] = <int8_t>source[i]
        bits |= <uint64_t>source[i]
    return bits


cdef inline Py_ssize_t _compact_rest(const uint8_t* row, const kept_value* source, kept_value* target,
                                     int8_t* narrow_target, Py_ssize_t k, Py_ssize_t width, Py_ssize_t at,
                                     uint64_t* bits) noexcept nogil:
    """The kept entries of places k … width − 1 of a row with holes, to ``target`` (or, narrowed, to
    ``narrow_target``) from ``at`` on, without a branch on the mask: each entry is written and only a kept one
    advances (room for the whole rest is the caller's check); int64 entries' OR to ``bits``.  Returns the new
    ``at``.  A row whose documents were filtered at random has a run every few places, and runs found by
    searching cost tens of nanoseconds each."""
    cdef Py_ssize_t i, keep
    cdef uint64_t ones
    for i in range(k, width):
        keep = row[i] != 0
        if kept_value is int64_t:
            ones = <uint64_t>0 - <uint64_t>keep
            bits[0] |= <uint64_t>source[i] & ones
            if narrow_target != NULL:
                narrow_target[at] = <int8_t>source[i]
            else:
                target[at] = source[i]
        else:
            target[at] = source[i]
        at += keep
    return at


cdef inline void _rows_kept(const uint8_t[:, ::1] mask, int64_t[::1] offsets, uint8_t[::1] leading) noexcept nogil:
    """:func:`gather_kept`'s ``offsets`` and ``leading`` (either None) from the mask alone, in passes the
    compiler vectorises: each row's kept count (:func:`_count_kept`), and whether one of its kept places follows
    a dropped one (every row keeps one run from its first place, or nothing, when none does).

    The places that follow a dropped one are counted over the whole mask as one array, a pass without rows
    (a loop per row of ten places stays scalar), and those at the start of a row, which do not count, taken
    off: every row leads when nothing else is left."""
    cdef Py_ssize_t q, k, start, width = mask.shape[1], size = mask.shape[0] * mask.shape[1]
    cdef const uint8_t* flat = &mask[0, 0]
    cdef int64_t rises = 0
    cdef uint8_t chunk
    if offsets is not None:
        _count_kept(mask, offsets)
    if leading is None:
        return
    for start in range(1, size, 255):  # a byte per lane, 255 places at most at a time: sixteen an instruction
        chunk = 0
        for k in range(start, min(start + 255, size)):
            chunk += (flat[k] != 0) & (flat[k - 1] == 0)
        rises += chunk
    for q in range(1, mask.shape[0]):
        rises -= (flat[q * width] != 0) & (flat[q * width - 1] == 0)
    leading[0] = rises == 0


cdef bint _gather_rows(const kept_value[:, ::1] values, const uint8_t[:, ::1] mask, Py_ssize_t n_kept,
                       int64_t[::1] offsets, kept_value* target, int8_t* narrow_target,
                       uint64_t* kept_bits) noexcept nogil:
    """:func:`gather_kept`'s loops, row by row (its docstring); returns whether every row keeps one leading run."""
    cdef Py_ssize_t q, k, end, run, at = 0, width = mask.shape[1]
    cdef bint rows_lead = True
    cdef const uint8_t* row
    cdef const kept_value* source
    if offsets is not None:
        offsets[0] = 0
    for q in range(mask.shape[0]):
        row = &mask[0, 0] + q * width
        source = &values[0, 0] + q * width
        k = _next_kept(row, 0, width)
        rows_lead = rows_lead and (k == 0 or k == width)
        while k < width:
            end = _next_dropped(row, k, width)
            run = min(end - k, n_kept - at)
            if kept_value is int64_t:
                if narrow_target != NULL:
                    kept_bits[0] |= _narrow_run(source + k, narrow_target + at, run)
                else:
                    kept_bits[0] |= _copy_run(source + k, target + at, run)
            else:
                _copy_run(source + k, target + at, run)
            at += run
            k = _next_kept(row, end, width)
            rows_lead = rows_lead and k == width  # no second run
            if k < width and at + (width - k) <= n_kept:  # a hole: the rest of the row in one pass
                at = _compact_rest(row, source, target, narrow_target, k, width, at, kept_bits)
                break
        if offsets is not None:
            offsets[q + 1] = at
    return rows_lead


def gather_kept(const kept_value[:, ::1] values, const uint8_t[:, ::1] mask, Py_ssize_t n_kept,
                int64_t[::1] bits=None, bint narrow=False, int64_t[::1] offsets=None, uint8_t[::1] leading=None,
                bint vectorised=True):
    """The ``n_kept`` entries of ``values`` that ``mask`` keeps (:func:`kept_offsets`' total), row by row: the
    flat layout of a padded batch in one pass, without NumPy's index array.  A row's first run of kept entries
    is copied whole (a padded batch's row is one run), the rest of a row with holes in one branch-free pass
    (:func:`_compact_rest`), never past ``n_kept`` entries.

    int64 values only: ``bits[0]`` receives the bitwise OR of the kept entries, negative exactly when one of
    them is, else at least the largest (0 when none is kept): integer labels gathered and their sign and size
    learnt in the same pass.  With ``narrow`` they are gathered as int8, their low byte: the same values when
    0 <= ``bits[0]`` < 128, which the caller checks (labels of 0–4 in an eighth of the bytes).

    ``offsets`` (B + 1 entries) receives :func:`kept_offsets`' counts from the same pass: the caller then passes
    the mask's size as ``n_kept`` and keeps the first ``offsets[B]`` entries.  ``leading[0]`` (one entry)
    receives 1 when the pass finds every row keeping one run of places from its first on (padding at the ends
    of rows, as a ``DataLoader``'s collation leaves it), else 0 (0 too when ``n_kept`` leaves nothing to read):
    then :func:`gather_leading` and :func:`scatter_leading` move that batch's values without reading the mask.

    int8 values are labels of a byte each (0/1 relevance from a boolean tensor), gathered by the loops.  float32
    and float64 values without ``offsets`` or ``leading`` (a later gather of the same mask: the scores) move
    by AVX-512's compress where the machine has it (``_masked_moves.pxd``) and ``vectorised``
    (the tests' switch to the loops), the same values."""
    cdef Py_ssize_t width = mask.shape[1]
    cdef bint rows_lead
    cdef kept_value* target = NULL
    cdef int8_t* narrow_target = NULL
    cdef uint64_t kept_bits = 0
    if values.shape[0] != mask.shape[0] or values.shape[1] != mask.shape[1]:
        raise ValueError(f"expected values of the mask's shape {tuple(mask.shape)[:2]}, got {tuple(values.shape)[:2]}")
    if (bits is not None or narrow) and (kept_value is not int64_t or bits is None or bits.shape[0] < 1):
        raise ValueError("expected bits (one int64 entry), and narrow only with them, with int64 values only")
    if offsets is not None and (offsets.shape[0] != mask.shape[0] + 1 or n_kept < mask.size):
        raise ValueError(f"expected offsets of {mask.shape[0] + 1} entries and room for every document, got "
                         f"{offsets.shape[0]} entries and {n_kept}")
    if leading is not None and leading.shape[0] < 1:
        raise ValueError("expected leading to hold one entry, got none")
    work = np.empty(n_kept, dtype=np.int8 if narrow else np.asarray(values).dtype)
    if mask.size == 0 or n_kept <= 0:
        if bits is not None:
            bits[0] = 0
        if offsets is not None:
            offsets[:] = 0
        if leading is not None:
            leading[0] = mask.size == 0
        return work
    cdef kept_value[::1] out
    cdef int8_t[::1] narrow_out
    if narrow:
        narrow_out = work
        narrow_target = &narrow_out[0]
    else:
        out = work
        target = &out[0]
    if vectorised and VECTOR_MOVES:
        if kept_value is int64_t:
            if bits is not None:
                with nogil:
                    _rows_kept(mask, offsets, leading)
                    compress_labels(&values[0, 0], &mask[0, 0], mask.shape[0] * width, n_kept, narrow_target,
                                    target, &kept_bits)
                bits[0] = <int64_t>kept_bits
                return work
        elif kept_value is float and offsets is None and leading is None:
            with nogil:
                compress_f32(&values[0, 0], &mask[0, 0], mask.shape[0] * width, n_kept, target)
            return work
        elif kept_value is double and offsets is None and leading is None:
            with nogil:
                compress_f64(&values[0, 0], &mask[0, 0], mask.shape[0] * width, n_kept, target)
            return work
    with nogil:
        rows_lead = _gather_rows(values, mask, n_kept, offsets, target, narrow_target, &kept_bits)
    if bits is not None:
        bits[0] = <int64_t>kept_bits
    if leading is not None:
        leading[0] = rows_lead
    return work


cdef int _check_leading_offsets(const int64_t[::1] offsets, Py_ssize_t n_rows, Py_ssize_t width,
                                Py_ssize_t n_values) except -1:
    """The offsets of :func:`gather_leading` and :func:`scatter_leading`, checked: B + 1 entries from 0, each
    row's count between 0 and the width, in all at most the flat values'."""
    cdef Py_ssize_t q
    cdef bint fits = offsets.shape[0] == n_rows + 1 and offsets[0] == 0
    if fits:
        with nogil:
            for q in range(n_rows):
                fits = fits and 0 <= offsets[q + 1] - offsets[q] <= width
        fits = fits and offsets[n_rows] <= n_values
    if not fits:
        raise ValueError(f"expected offsets of {n_rows + 1} entries from 0, each row's count within its {width} "
                         f"places and {n_values} values in all, got {np.asarray(offsets)!r}")
    return 0


def gather_leading(const kept_value[:, ::1] values, const int64_t[::1] offsets):
    """The flat layout of a padded batch each of whose rows q keeps its first ``offsets[q + 1] − offsets[q]``
    places (``gather_kept``'s ``leading``): each row's lead copied whole, the mask not read."""
    cdef Py_ssize_t q, width = values.shape[1]
    _check_leading_offsets(offsets, values.shape[0], width, values.shape[0] * width)
    work = np.empty(offsets[values.shape[0]], dtype=np.asarray(values).dtype)
    if work.size == 0:
        return work
    cdef kept_value[::1] out = work
    cdef Py_ssize_t n_rows = values.shape[0], total = offsets[n_rows]
    with nogil:
        for q in range(n_rows):
            if width <= SHORT_ROW and offsets[q] + SHORT_ROW <= total and q * width + SHORT_ROW <= n_rows * width:
                # A copy of a fixed size, inline: the entries past the row's lead land where the next rows' go,
                # which are copied after it (the tail's rows, whose copy would end past an array, copy their own).
                memcpy(&out[0] + offsets[q], &values[0, 0] + q * width, SHORT_ROW * sizeof(kept_value))
            else:
                memcpy(&out[0] + offsets[q], &values[0, 0] + q * width,
                       (offsets[q + 1] - offsets[q]) * sizeof(kept_value))
    return work


def scatter_leading(const double[::1] values, double factor, const int64_t[::1] offsets, floating[:, ::1] out):
    """:func:`scatter_kept` for a padded batch whose rows keep their leads (``gather_kept``'s ``leading``):
    row q's first ``offsets[q + 1] − offsets[q]`` places get the next values times ``factor``, rounded to
    ``out``'s type once, the rest 0; the mask not read."""
    cdef Py_ssize_t q, n, width = out.shape[1], n_values = values.shape[0], n_places = out.shape[0] * out.shape[1]
    cdef floating* row
    _check_leading_offsets(offsets, out.shape[0], width, n_values)
    if out.size == 0:
        return
    with nogil:
        for q in range(out.shape[0]):
            row = &out[0, 0] + q * width
            n = offsets[q + 1] - offsets[q]
            if width <= SHORT_ROW and q * width + SHORT_ROW <= n_places and offsets[q] + SHORT_ROW <= n_values:
                _scale_short_row(&values[0] + offsets[q], factor, row, n)
                continue
            if n > 0:
                _scale_run(&values[0] + offsets[q], factor, row, n)
            memset(row + n, 0, (width - n) * sizeof(floating))


def scatter_kept(const double[::1] values, double factor, const uint8_t[:, ::1] mask, floating[:, ::1] out,
                 bint vectorised=True):
    """``out[q, k]`` = ``values`` (the flat layout's entries, in order) times ``factor`` where ``mask`` keeps a
    document, 0 elsewhere, rounded to ``out``'s type once: the padded gradient in one pass, a row's runs of
    kept and of padded places at a time, or by AVX-512's expand where the machine has it and ``vectorised``
    (``_masked_moves.pxd``, the same values).  Reads at most ``values.shape[0]`` entries (0 past them)."""
    cdef Py_ssize_t q, k, end, kept_end, at = 0, width = mask.shape[1], n_values = values.shape[0]
    cdef const uint8_t* row
    cdef const double* source = &values[0] if n_values > 0 else NULL
    cdef floating* target
    if mask.shape[0] != out.shape[0] or mask.shape[1] != out.shape[1]:
        raise ValueError(f"expected an output of the mask's shape {tuple(mask.shape)[:2]}, got {tuple(out.shape)[:2]}")
    if mask.size == 0:
        return
    if vectorised and VECTOR_MOVES and n_values > 0:
        with nogil:
            if floating is float:
                expand_f32(source, n_values, factor, &mask[0, 0], mask.shape[0] * width, &out[0, 0])
            else:
                expand_f64(source, n_values, factor, &mask[0, 0], mask.shape[0] * width, &out[0, 0])
        return
    with nogil:
        for q in range(mask.shape[0]):
            row = &mask[0, 0] + q * width
            target = &out[0, 0] + q * width
            k = 0
            while k < width:
                end = _next_kept(row, k, width)
                memset(target + k, 0, (end - k) * sizeof(floating))
                if end == width:
                    break
                k = end
                end = _next_dropped(row, k, width)
                kept_end = min(end, k + n_values - at)
                _scale_run(source + at, factor, target + k, kept_end - k)
                at += kept_end - k
                memset(target + kept_end, 0, (end - kept_end) * sizeof(floating))
                k = end
                if k < width and at + (width - k) <= n_values:  # a hole: the rest of the row in one pass
                    at = _spread_rest(row, source, factor, target, k, width, at)
                    break


cdef inline Py_ssize_t _spread_rest(const uint8_t* row, const double* source, double factor, floating* target,
                                    Py_ssize_t k, Py_ssize_t width, Py_ssize_t at) noexcept nogil:
    """:func:`scatter_kept` on places k … width − 1 of a row with holes, without a branch on the mask: each
    place reads the next value (the caller has checked that the rest of the row cannot read past them) and
    keeps it or 0; returns the new ``at``."""
    cdef Py_ssize_t i, keep
    cdef floating value
    for i in range(k, width):
        keep = row[i] != 0
        value = <floating>(source[at] * factor)
        target[i] = value if keep else 0
        at += keep
    return at


def largest_magnitude(const floating[::1] scores):
    """max |score| of a non-empty batch in one vectorised pass (``_scan.pxd``), NaN when a score is NaN or
    infinite: the check of :func:`rankopt._validation.largest_magnitude`, whose NumPy form takes two."""
    cdef ScoreScan scan
    if scores.shape[0] == 0:
        raise ValueError("expected at least one score")
    with nogil:
        scan_start(&scan, &scores[0])
        scan_block(&scan, &scores[0], scores.shape[0])
    if scan.bad != 0.0 or scan.bad != scan.bad:
        return float("nan")
    return max(-scan.lo, scan.hi)


def packed_descending_keys(const float[::1] scores, const label_t[::1] rel, int64_t relevant_from,
                           const int64_t[::1] offsets, uint64_t[:, ::1] keys):
    """Row q of ``keys``: query q's documents as keys whose ascending order is rankopt's order (descending score,
    ties by index) — the score's bits, mapped so that a larger float is a smaller integer, in the high 32 bits,
    the document's index in the query in the next 31, and whether it is relevant (``rel`` ≥ ``relevant_from``)
    in the lowest — then ``UINT64_MAX`` to the row's end.  NumPy's sort of the rows (a SIMD sort of integers,
    several times faster than an argsort of the scores) is then the order :func:`binary_batch` reads
    (``sorted_keys``), and each key tells it the document, its score and its class: reading them in order
    gathers nothing from the scores or labels (:func:`_split_in_order`), which on a long query miss the cache.

    The caller checks: scores finite (no key is ``UINT64_MAX``: that would take a NaN's bits), one row per
    query, every query at most the rows' width and below 2³¹ documents.  −0.0 is keyed as +0.0, its equal."""
    cdef Py_ssize_t q, t, lo, n, width = keys.shape[1]
    cdef float x
    cdef uint32_t bits
    cdef uint64_t* row
    with nogil:
        for q in range(offsets.shape[0] - 1):
            lo = offsets[q]
            n = offsets[q + 1] - lo
            row = &keys[q, 0]
            for t in range(n):
                x = scores[lo + t] + <float>0.0
                memcpy(&bits, &x, 4)
                bits = descending_float_bits(bits)
                row[t] = ((<uint64_t>bits) << 32) | ((<uint64_t>t) << 1) | <uint64_t>(rel[lo + t] >= relevant_from)
            for t in range(n, width):
                row[t] = 0xFFFFFFFFFFFFFFFFULL


def binary_batch(const floating[::1] scores, const label_t[::1] rel, const int64_t[::1] offsets, int method,
                 int code, const double[::1] discount, bint unimodal, double[::1] coef, double[::1] losses,
                 double[::1] values, uint8_t[::1] usable, int n_threads, Py_ssize_t top_k=0,
                 const double[::1] count_loss=None, const int64_t[::1] count_offsets=None,
                 bint relative_to_truth=False, int64_t relevant_from=1, const uint64_t[:, ::1] sorted_keys=None,
                 bint short_queries=True):
    """Every query of a binary rank loss; outputs written in place.

    The caller (``rankopt.inference.batched``) validates everything: offsets
    from 0 to n non-decreasing, ``rel`` 0/1 — or grades ≥ 0, relevant from
    ``relevant_from`` ≥ 1 on — as int64 or int8, scores finite, ``method`` one of
    :data:`METHOD_CODES` exact for the loss, ``code`` its kernel code,
    ``discount`` the position-discount table T(1 … longest query) for that
    code (any non-empty array otherwise), outputs sized n and Q, n_threads ≥ 1;
    with ``METHOD_TOPK`` a loss whose Δ counts the positives in the top
    ``top_k`` ≥ 1 (its declared structure), ``count_loss[count_offsets[q] + t]``
    Δ of query q with m_lo + t of them (m_lo = max(0, k' − |N_q|) … min(k', |P_q|)).
    With ``relative_to_truth`` the coefficients and values are taken relative to the ground truth
    (see ``_binary_query``).  ``sorted_keys`` (float32 scores only): row q the query's
    :func:`packed_descending_keys`, sorted, its first |q| entries read; None: each query sorts its own.
    ``short_queries=False`` puts the short queries that ``_binary_query`` counts through the sort and walk too
    (the tests' switch: the same outputs to the bit).
    """
    cdef Py_ssize_t n_queries = offsets.shape[0] - 1, q, t, size = 0, lo, hi, n_ready = 0
    cdef BinaryWork* works
    cdef const double* counted = &count_loss[0] if count_loss is not None else NULL
    cdef const int64_t* counted_at = &count_offsets[0] if count_offsets is not None else NULL
    cdef double* bends = NULL
    for q in range(n_queries):
        size = max(size, offsets[q + 1] - offsets[q])
    if size == 0:
        return
    n_threads = <int>min(<Py_ssize_t>n_threads, n_queries)
    works = <BinaryWork*>malloc(n_threads * sizeof(BinaryWork))
    if works == NULL:
        raise MemoryError()
    try:
        for t in range(n_threads):
            if _binary_work_init(&works[t], size, method != METHOD_TOPK and code == LOSS_POSITION_DISCOUNT) != 0:
                raise MemoryError(f"cannot allocate the work arrays for queries of {size} documents")
            n_ready += 1
        if method == METHOD_QS and code == LOSS_POSITION_DISCOUNT:
            # The discount's bends, shared by every query: where they let the sweep walk (_qs.pyx).
            bends = <double*>malloc((size + 1) * sizeof(double))
            if bends == NULL:
                raise MemoryError()
            fill_discount_bends(&discount[0], size, bends)
        for q in prange(n_queries, nogil=True, num_threads=n_threads, schedule="dynamic", chunksize=QUERY_CHUNK):
            lo = offsets[q]
            hi = offsets[q + 1]
            usable[q] = <uint8_t>_binary_query(&scores[lo], &rel[lo], relevant_from, hi - lo, method, code,
                                               &discount[0], bends, unimodal, top_k,
                                               counted + counted_at[q] if counted != NULL else NULL,
                                               relative_to_truth,
                                               &sorted_keys[q, 0] if sorted_keys is not None and hi > lo else NULL,
                                               short_queries, &works[threadid()], &coef[lo], &losses[q], &values[q])
    finally:
        for t in range(n_ready):
            _binary_work_free(&works[t])
        free(works)
        free(bends)


def pairwise_batch(const floating[::1] scores, const int64_t[::1] grades, const int64_t[::1] offsets,
                   double[::1] coef, double[::1] losses, double[::1] values, uint8_t[::1] usable, int n_threads,
                   Py_ssize_t n_grade_values=0, const double[::1] weight=None, bint relative_to_truth=False,
                   const uint64_t[:, ::1] sorted_keys=None):
    """Every query of a pairwise loss over graded relevance; outputs written in place (relative to the ground
    truth with ``relative_to_truth``: the structured hinge's subgradient and value).  ``sorted_keys`` (float32
    scores, unweighted pairs): row q the query's :func:`packed_descending_keys`, sorted, the order its sweeps
    read; None: each query sorts its own.

    The caller validates: offsets from 0 to n non-decreasing, grades ≥ 0 (and
    below ``n_grade_values`` when positive: levels by counting), scores
    finite, outputs sized n and Q, n_threads ≥ 1.  With ``weight`` (the
    K × K weights of the pairs of levels, row: the higher, finite and ≥ 0,
    K = ``n_grade_values``) the grades are those levels, 0 … K − 1, and
    every pair weighs its entry.
    """
    cdef Py_ssize_t n_queries = offsets.shape[0] - 1, q, t, size = 0, lo, hi, n_ready = 0
    cdef PairwiseWork* works
    cdef bint weighted = weight is not None
    cdef const double* pair_weight = &weight[0] if weighted else NULL
    for q in range(n_queries):
        size = max(size, offsets[q + 1] - offsets[q])
    if size == 0:
        return
    n_threads = <int>min(<Py_ssize_t>n_threads, n_queries)
    works = <PairwiseWork*>malloc(n_threads * sizeof(PairwiseWork))
    if works == NULL:
        raise MemoryError()
    try:
        for t in range(n_threads):
            # The weighted sweeps count per level, and the batch's levels may outnumber a query's documents.
            if (pairwise_work_init(&works[t], max(size, n_grade_values), 0) if weighted
                    else pairwise_work_init(&works[t], size, n_grade_values)) != 0:
                raise MemoryError(f"cannot allocate the work arrays for queries of {size} documents")
            n_ready += 1
        for q in prange(n_queries, nogil=True, num_threads=n_threads, schedule="dynamic", chunksize=QUERY_CHUNK):
            lo = offsets[q]
            hi = offsets[q + 1]
            if hi > lo:
                if weighted:
                    if floating is double:
                        usable[q] = weighted_query_f64(&scores[lo], &grades[lo], hi - lo, pair_weight,
                                                       n_grade_values, &works[threadid()], &coef[lo], &losses[q],
                                                       &values[q], relative_to_truth)
                    else:
                        usable[q] = weighted_query_f32(&scores[lo], &grades[lo], hi - lo, pair_weight,
                                                       n_grade_values, &works[threadid()], &coef[lo], &losses[q],
                                                       &values[q], relative_to_truth)
                elif floating is double:
                    usable[q] = pairwise_query_f64(&scores[lo], &grades[lo], hi - lo,
                                                   &works[threadid()], &coef[lo], &losses[q],
                                                   &values[q], relative_to_truth)
                else:
                    usable[q] = pairwise_query_f32(&scores[lo], &grades[lo], hi - lo,
                                                   &works[threadid()], &coef[lo], &losses[q],
                                                   &values[q], relative_to_truth,
                                                   &sorted_keys[q, 0] if sorted_keys is not None else NULL)
    finally:
        for t in range(n_ready):
            pairwise_work_free(&works[t])
        free(works)


