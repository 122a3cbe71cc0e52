"""The multi-query ranking problem with its inference where the data lives: one map-reduce per oracle call.

:class:`~rankopt.models.ranking.QueryRankingProblem` gathers the N scores to run the inference in this
process.  Its slack is a sum over queries, and each query is whole within a row chunk of X, so a chunk's
part of the cut needs only that chunk's rows, labels and query ids.  Here every chunk keeps its queries,
labels and scores where it was computed (a :class:`~rankopt.data.dask_backend.RowChunks` state) and
answers each oracle call with a d-vector and a few numbers: the driver holds O(d) per chunk and never an
N-vector.  The engine is the same: this is one more :class:`~rankopt.engine.problem.StructuredProblem`,
with the cheap segment of a linear problem (scores interpolated on the chunks) and the engine's plane
cache kept by query on the chunks.

Everything a chunk computes is what the in-memory problem computes on that chunk's queries, with the
same kernels, so the fits agree to rounding (sums over chunks are added in another order).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from rankopt._validation import GradeSigns, check_grade_block, group_queries, query_ids
from rankopt.engine.problem import (
    BlockCuts,
    BlockPlaneCache,
    Constraint,
    PlaneCache,
    Segment,
    StructuredProblem,
    cache_parts,
)
from rankopt.inference.batched import (
    PreparedRankings,
    ground_truth_coefficients,
    queries_the_loss_orders,
    refuse_nothing_to_order,
)
from rankopt.inference.structure_table import kernel_for_loss, reads_grades
from rankopt.models.query_layout import UsedQueries, log_left_out

__all__ = ["ChunkedQueryRankingProblem"]


#: Inference results a chunk keeps per segment besides its start's (a line search prices a few points
#: and cuts at one of them; a result not kept is computed again, to the same bits).
_KEPT_RESULTS = 2


# ------------------------------------------------------------------ a chunk's state (on the workers)


@dataclass
class _Inference:
    coef: np.ndarray  # per row, in the chunk's row order, divided by Q
    loss_sum: float  # Σ Δ_q over the chunk's used queries (not divided by Q)
    losses: np.ndarray  # Δ_q / Q per used query (the cache's block losses)


@dataclass
class _ChunkSegment:
    token: int
    s0: np.ndarray
    s1: np.ndarray
    results: dict = field(default_factory=dict)  # t → _Inference

    def scores(self, t: float, ds: np.ndarray | None = None) -> np.ndarray:
        """s(t) = s0 + t·(s1 − s0), exactly s1 at t = 1 (``ds``: s1 − s0 when the caller has it)."""
        if t == 1.0:
            return self.s1
        return self.s0 + t * (self.s1 - self.s0 if ds is None else ds)


@dataclass
class _QueryChunk:
    """One row chunk's queries: labels grouped by query, the prepared inference, and what the solve keeps."""

    index: int
    n_rows: int
    grades: Any  # relevance per row (grades, or 0/1 for a binary loss), until the solve is prepared
    queries: Any  # the chunk's QueryIndex, until the solve is prepared
    usable: Any = None
    layout: Any = None  # the used queries (UsedQueries), once the solve is prepared
    rankings: Any = None
    inputs: Any = None  # what ``rankings`` is prepared from
    ground_truth: Any = None  # c*/Q per row
    feature_map: Any = None
    n_queries_used: int = 1  # Q over all chunks
    segment: Any = None
    pending: Any = None  # (token, planes, losses): the last cut's parts by query
    cache: Any = None

    def prepare(self, loss, relevance, method, registry) -> None:
        self.inputs = (loss, relevance, method, registry)
        self.rankings = PreparedRankings(loss, relevance, self.layout.offsets, method, registry=registry)

    def __getstate__(self):
        # A chunk moves or spills to disk pickled: the prepared inference (locks, tables) is rebuilt from its
        # inputs where it lands, the registry (plugin modules) pickled by reference.
        import cloudpickle  # a dependency of Dask, which alone moves chunks

        state = dict(self.__dict__, rankings=None)
        if self.inputs is not None:
            state["inputs"] = cloudpickle.dumps(self.inputs)
        return state

    def __setstate__(self, state):
        # Arrays unpickled here may sit at any address: realigned, their sums round as they did before the move.
        self.__dict__.update({key: _realigned(value) for key, value in state.items()})
        if isinstance(self.inputs, bytes):
            import cloudpickle

            self.prepare(*cloudpickle.loads(self.inputs))

    def infer(self, scores: np.ndarray) -> _Inference:
        coef, losses = self.layout.infer(self.rankings, scores, self.n_queries_used, f"of row chunk {self.index}")
        return _Inference(coef, float(losses.sum()), losses / self.n_queries_used)

    def cut(self, X, inference: _Inference, token: int, parts: bool):
        """This chunk's part of the cut: Xᵀc and Σ Δ; the parts by query kept for the plane cache."""
        feature = np.asarray(self.feature_map.combine(X, inference.coef), dtype=np.float64)
        if parts:
            planes = self.feature_map.combine_groups(
                X, self.ground_truth - inference.coef, self.layout.row_query, self.layout.n_used
            )
            self.pending = (token, planes, inference.losses)
        return feature, inference.loss_sum

    @property
    def n_used(self) -> int:
        return 0 if self.layout is None else self.layout.n_used


def _realigned(value):
    """``value`` with every NumPy array in it (in dicts, tuples and the state's own objects) realigned."""
    if isinstance(value, np.ndarray):
        from rankopt.data.backends import aligned  # only states that crossed processes get here

        return aligned(value)
    if isinstance(value, dict):
        return {key: _realigned(item) for key, item in value.items()}
    if isinstance(value, tuple):
        return tuple(_realigned(item) for item in value)
    if isinstance(value, (_ChunkSegment, _Inference, BlockPlaneCache, UsedQueries)):
        value.__dict__.update(_realigned(value.__dict__))
    return value


def _open_chunk(grades, qid, index, loss, relevant_at, method, registry):
    """Check one chunk's labels and query ids and find its usable queries (run where the chunk is)."""
    n_rows = int(np.asarray(grades).shape[0]) if np.ndim(grades) else 0
    if n_rows == 0 and np.ndim(grades) == 1 and np.ndim(qid) == 1 and np.size(qid) == 0:
        # An empty chunk (Dask allows them): nothing to check, no query.
        grades, signs = np.zeros(0, dtype=np.int64), GradeSigns(False, False, False)
        queries = group_queries(np.zeros(0, dtype=np.int64))
    else:
        grades, signs = check_grade_block(grades, None, "y")
        queries = group_queries(query_ids(qid, n_rows, "qid"))
    graded = reads_grades(loss)
    relevance = grades if graded else grades >= relevant_at
    chunk = _QueryChunk(index, n_rows, relevance, queries)
    usable, two_levels = queries_the_loss_orders(loss, relevance, queries, method, registry=registry)
    chunk.usable = usable
    summary = _ChunkSummary(
        n_queries=queries.n_queries,
        n_used=int(np.count_nonzero(usable)),
        two_levels=two_levels,
        longest=int(queries.sizes.max(initial=0)),
        signs=signs,
        any_relevant=graded or bool(relevance.any()),  # relevant_at matters for a binary loss only
        highest=int(grades.max(initial=0)),
        ids=(int(queries.qid[0]), int(queries.qid[-1])) if queries.n_queries else None,
    )
    return chunk, summary


@dataclass(frozen=True)
class _ChunkSummary:
    n_queries: int
    n_used: int
    two_levels: int
    longest: int
    signs: GradeSigns
    any_relevant: bool
    highest: int
    ids: tuple[int, int] | None  # smallest and largest query id


def _ready_chunk(chunk: _QueryChunk, X, loss, method, registry, n_queries_used, feature_map, by_query):
    """Prepare the chunk's inference for the solve: its part of Ψ(X, Y*), and whether the feature map splits
    its combinations by query (the plane cache's parts)."""
    chunk.layout = UsedQueries(chunk.queries, chunk.usable, chunk.n_rows, by_query=by_query)
    relevance = np.ascontiguousarray(chunk.layout.grouped(chunk.grades))
    chunk.n_queries_used, chunk.feature_map = n_queries_used, feature_map
    chunk.prepare(loss, relevance, method, registry)
    chunk.ground_truth = chunk.layout.scatter(
        ground_truth_coefficients(loss, relevance, chunk.layout.offsets, registry=registry), n_queries_used
    )
    chunk.grades = chunk.usable = chunk.queries = None  # the prepared inference holds what the solve needs
    feature = np.asarray(feature_map.combine(X, chunk.ground_truth), dtype=np.float64)
    splits = (
        by_query
        and feature_map.combine_groups(
            X[:1], np.zeros(min(1, chunk.n_rows)), np.zeros(min(1, chunk.n_rows), np.intp), 1
        )
        is not None
    )
    return chunk, (feature, splits)


def _has_query(chunk: _QueryChunk, X, query_id):
    return chunk, bool(np.any(chunk.queries.qid == query_id))


def _chunk_query_ids(chunk: _QueryChunk):
    return chunk.queries.qid, None


def _merge_query_ids(a, b):
    """Two chunk groups' sorted query ids, merged, and the first id both hold (or one found before)."""
    if a[1] is not None or b[1] is not None:
        return a if a[1] is not None else b
    shared = np.intersect1d(a[0], b[0], assume_unique=True)
    if shared.size:
        return np.empty(0, dtype=np.int64), int(shared[0])
    return np.union1d(a[0], b[0]), None


def _shared_query(merged):
    return merged[1]


def _cut_at(chunk: _QueryChunk, X, w, token, parts):
    scores = np.asarray(chunk.feature_map.scores(X, w), dtype=np.float64)
    return chunk, chunk.cut(X, chunk.infer(scores), token, parts)


def _open_segment(chunk: _QueryChunk, X, token, w0, w1, carry):
    """Start a segment: its end scores, and c*·s at both ends (``carry``: its start is the last segment's t)."""
    start = None
    if carry is None:
        s0 = np.asarray(chunk.feature_map.scores(X, w0), dtype=np.float64)
    else:
        previous = _segment(chunk, carry[0])
        s0, start = previous.scores(carry[1]), previous.results.get(carry[1])
    s1 = np.asarray(chunk.feature_map.scores(X, w1), dtype=np.float64)
    chunk.segment = _ChunkSegment(token, s0, s1, {} if start is None else {0.0: start})
    return chunk, (
        float(chunk.ground_truth @ s0),
        float(chunk.ground_truth @ s1),
        float(chunk.ground_truth @ (s1 - s0)),
    )


def _segment(chunk: _QueryChunk, token) -> _ChunkSegment:
    if chunk.segment is None or chunk.segment.token != token:
        raise RuntimeError(f"row chunk {chunk.index} holds no segment {token}: a segment was used after the next one")
    return chunk.segment


def _segment_result(chunk: _QueryChunk, token, t, scores: np.ndarray | None = None) -> _Inference:
    """The inference at the segment's point t, kept (``scores``: s(t) when the caller has it)."""
    segment = _segment(chunk, token)
    if t not in segment.results:
        kept = [key for key in segment.results if key != 0.0]
        for key in kept[: max(0, len(kept) - _KEPT_RESULTS + 1)]:
            del segment.results[key]
        segment.results[t] = chunk.infer(segment.scores(t) if scores is None else scores)
    return segment.results[t]


def _segment_slack(chunk: _QueryChunk, X, token, t):
    segment = _segment(chunk, token)
    ds = segment.s1 - segment.s0
    scores = segment.scores(t, ds)  # once, for the inference and its value
    result = _segment_result(chunk, token, t, scores)
    return chunk, (float(result.coef @ scores), result.loss_sum, float(result.coef @ ds))


def _segment_cut(chunk: _QueryChunk, X, token, t, cut_token, parts):
    return chunk, chunk.cut(X, _segment_result(chunk, token, t), cut_token, parts)


def _cache_add(chunk: _QueryChunk, X, token, n_parts):
    if chunk.n_used == 0:
        return chunk, None
    if chunk.pending is None or chunk.pending[0] != token:
        raise RuntimeError(f"row chunk {chunk.index} holds no parts of cut {token} for the plane cache")
    if chunk.cache is None:
        chunk.cache = BlockPlaneCache(chunk.n_used, chunk.pending[1].shape[1], n_parts)
    chunk.cache.add_parts(chunk.pending[1], chunk.pending[2])
    chunk.pending = None
    return chunk, None


def _cache_most_violated(chunk: _QueryChunk, X, w):
    if chunk.cache is None:
        return chunk, None
    return chunk, chunk.cache.most_violated(w)


# ------------------------------------------------------------------ the problem (on the driver)


class ChunkedQueryRankingProblem(StructuredProblem):
    """Q queries over the row chunks of a Dask X, each chunk's inference where the chunk is.

    The problem of :class:`~rankopt.models.ranking.QueryRankingProblem` (SVM^map's and SVM^rank's 1-slack
    formulation, Ψ and Δ the means over used queries), built from ``chunks``, a
    :class:`~rankopt.data.dask_backend.RowChunks` over X with the raw labels and query ids as its columns.
    Every query must be whole within one chunk: a query id found in two chunks is refused, with how to
    rechunk.  Labels are checked chunk by chunk with the messages of the in-memory checks.
    """

    def __init__(self, chunks, loss, feature_map, inference, registry, relevant_at):
        self.chunks, self.loss, self.feature_map = chunks, loss, feature_map
        X = chunks.X
        self.n_features = feature_map.n_features(X)
        summaries = chunks.open(_open_chunk, loss, relevant_at, inference, registry)
        self._check_labels(summaries, loss, relevant_at)
        self._check_whole_queries(summaries)
        self.n_queries = sum(s.n_queries for s in summaries)
        self.n_queries_used = sum(s.n_used for s in summaries)
        if self.n_queries_used == 0:
            refuse_nothing_to_order(
                loss,
                self.n_queries,
                sum(s.two_levels for s in summaries),
                relevant_at=None if reads_grades(loss) else relevant_at,
            )
        log_left_out(self.n_queries, self.n_queries_used)
        kernel, structure = kernel_for_loss(loss)
        longest = max(s.longest for s in summaries)
        self.inference = kernel.resolve_method(loss, structure, inference, longest, registry)
        self.inference_note = f"{self.inference!r} on each of {chunks.n_chunks} row chunks, where the chunk is"
        # The engine's plane cache, by query on the chunks, where it would keep one in memory.
        self._parts = cache_parts(self.n_queries_used, self.n_features)
        readies = chunks.map(
            _ready_chunk, loss, self.inference, registry, self.n_queries_used, feature_map, self._parts >= 2, rows=True
        )
        self._psi_star = np.sum([feature for feature, _ in readies], axis=0)
        self._cache_parts = self._parts >= 2 and all(splits for _, splits in readies)
        # Two products with X per oracle call (scores and combination); the parts by query are a third.
        self.oracle_cost = 3.0 * float(np.prod(X.shape))
        self._tokens = 0

    @staticmethod
    def _check_labels(summaries, loss, relevant_at) -> None:
        signs = summaries[0].signs
        for summary in summaries[1:]:
            signs = signs | summary.signs
        signs.check("y")
        if not reads_grades(loss) and not any(s.any_relevant for s in summaries):
            highest = max(s.highest for s in summaries)
            raise ValueError(
                f"expected relevant_at={relevant_at:g} to be reached by some label of y, got labels of at most "
                f"{highest} instead"
            )

    def _check_whole_queries(self, summaries) -> None:
        """Refuse a query id seen in two chunks.  Chunks whose id ranges overlap none other's (rows sorted by
        qid) need no more; otherwise the chunks' ids are merged pairwise where they are, and only the first
        shared id comes back."""
        ranges = sorted((s.ids, i) for i, s in enumerate(summaries) if s.ids is not None)
        if all(second[0] > first[1] for (first, _), (second, _) in zip(ranges[:-1], ranges[1:], strict=True)):
            return
        shared = self.chunks.reduce(_chunk_query_ids, _merge_query_ids, _shared_query)
        if shared is None:
            return
        holders = [i for i, found in enumerate(self.chunks.map(_has_query, shared)) if found]
        raise ValueError(
            f"expected every query whole within one row chunk of X (a chunk's inference sees only its own rows), "
            f"got query id {shared} in chunks {holders[0]} and {holders[1]} instead: sort the rows by qid and "
            "rechunk X, y and qid alike so that chunks end where queries do (rankopt.data.write_query_store "
            "writes a store chunked so)"
        )

    def _next_token(self) -> int:
        self._tokens += 1
        return self._tokens

    def ground_truth_feature(self):
        return self._psi_star

    def _constraint(self, results, token) -> Constraint:
        feature = np.sum([f for f, _ in results], axis=0)
        loss = sum(loss_sum for _, loss_sum in results) / self.n_queries_used
        return Constraint(feature, loss, _ChunkedCut(self, token) if self._cache_parts else None)

    def most_violated(self, w):
        token = self._next_token()
        w = np.asarray(w, dtype=np.float64)
        return self._constraint(self.chunks.map(_cut_at, w, token, self._cache_parts, rows=True), token)

    def segment(self, w0, w1):
        return _ChunkedSegment(self, w0, w1, None)


class _ChunkedSegment(Segment):
    """The problem along a segment, the scores interpolated on the chunks: :class:`ScoreSegment`'s arithmetic
    (``rankopt.engine.problem``), each point one map over the chunks and no pass over the data."""

    cheap = True

    def __init__(self, problem: ChunkedQueryRankingProblem, w0, w1, carry):
        super().__init__(w0, w1)
        self.problem = problem
        self.token = problem._next_token()
        ends = problem.chunks.map(_open_segment, self.token, None if carry else self.w0, self.w1, carry, rows=True)
        self.star_ends = (sum(e[0] for e in ends), sum(e[1] for e in ends))
        self.star_slope = sum(e[2] for e in ends)

    def slack(self, t):
        parts = self.problem.chunks.map(_segment_slack, self.token, t)
        value = sum(p[0] for p in parts) + sum(p[1] for p in parts) / self.problem.n_queries_used
        star = self.star_ends[int(t)] if t in (0.0, 1.0) else self.star_ends[0] + t * self.star_slope
        xi = value - star
        return max(0.0, xi), sum(p[2] for p in parts) - self.star_slope

    def most_violated(self, t):
        problem = self.problem
        token = problem._next_token()
        return problem._constraint(
            problem.chunks.map(_segment_cut, self.token, t, token, problem._cache_parts, rows=True), token
        )

    def next(self, t, w):
        return _ChunkedSegment(self.problem, self.point(t), w, (self.token, t))


class _ChunkedCut(BlockCuts):
    """A cut whose parts by query stay on the chunks (one per used query, as the in-memory problem's)."""

    def __init__(self, problem: ChunkedQueryRankingProblem, token: int):
        self.problem, self.token = problem, token

    def open_cache(self, n_features):
        return _ChunkedPlaneCache(self.problem)


class _ChunkedPlaneCache(PlaneCache):
    """The engine's plane cache, one :class:`BlockPlaneCache` per chunk for the chunk's queries."""

    def __init__(self, problem: ChunkedQueryRankingProblem):
        self.problem = problem

    def add(self, cut):
        self.problem.chunks.map(_cache_add, cut.token, self.problem._parts)

    def most_violated(self, w):
        found = [r for r in self.problem.chunks.map(_cache_most_violated, np.asarray(w, dtype=np.float64)) if r]
        return np.sum([plane for plane, _ in found], axis=0), float(sum(loss for _, loss in found))
