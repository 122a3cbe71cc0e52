"""The compiled helpers of a training loop's step (issue 50): the padded batch's kept documents, the counts of
relevant documents per query, the grade levels, and the pool of a top-k loss's Δ(m); each equal to its NumPy
definition, on random inputs and at the edges (empty rows, nothing kept, one row)."""

from __future__ import annotations

import numpy as np
import pytest

from rankopt.inference import _batched, _graded_position
from rankopt.inference.topk import POOL_GRID_MAX, CountLossPool, count_losses
from rankopt.losses import PrecisionAtKLoss
from rankopt.losses.structure import grade_levels
from rankopt.torch._padded import Kept


@pytest.mark.parametrize("shape", [(1, 1), (3, 7), (50, 33), (4, 0), (0, 5), (300, 1), (200, 10), (100, 16), (90, 17)])
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int64])
def test_gather_and_scatter_of_the_kept_documents(rng, shape, dtype):
    mask = rng.random(shape) < 0.6
    if mask.size:
        mask[0, :] = False  # an empty row
    values = (rng.normal(size=shape) * 10).astype(dtype)
    offsets = np.empty(shape[0] + 1, dtype=np.int64)
    total = _batched.kept_offsets(mask.view(np.uint8), offsets)
    np.testing.assert_array_equal(offsets, np.concatenate(([0], np.cumsum(mask.sum(axis=1)))))
    assert total == mask.sum()
    np.testing.assert_array_equal(_batched.gather_kept(values, mask.view(np.uint8), total), values[mask])
    if dtype == np.int64:  # the kept labels' bitwise OR comes with them: their sign, a bound on the largest
        bits = np.full(1, 12345, dtype=np.int64)
        np.testing.assert_array_equal(_batched.gather_kept(values, mask.view(np.uint8), total, bits), values[mask])
        assert bits[0] == np.bitwise_or.reduce(values[mask], initial=0)
    # The rows' counts from the gather's own pass, given room for every document.
    counted = np.full(shape[0] + 1, -1, dtype=np.int64)
    room = _batched.gather_kept(values, mask.view(np.uint8), mask.size, offsets=counted)
    np.testing.assert_array_equal(counted, offsets)
    np.testing.assert_array_equal(room[:total], values[mask])
    flat = rng.normal(size=total)
    for out_dtype in (np.float32, np.float64):
        out = np.full(shape, np.nan, dtype=out_dtype)
        _batched.scatter_kept(flat, 0.5, mask.view(np.uint8), out)
        expected = np.zeros(shape, dtype=out_dtype)
        expected[mask] = (flat * 0.5).astype(out_dtype)
        np.testing.assert_array_equal(out, expected)


def _leading_mask(rng, shape):
    """Each row keeps its first 0 … width places, as a DataLoader's padding leaves them."""
    lengths = rng.integers(0, shape[1] + 1, shape[0])
    return np.arange(shape[1])[None, :] < lengths[:, None]


@pytest.mark.parametrize("shape", [(1, 1), (3, 7), (50, 33), (4, 0), (0, 5), (300, 1), (200, 10), (100, 16), (90, 17)])
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int64, np.int8])
def test_rows_that_keep_their_leads_move_without_the_mask(rng, shape, dtype):
    """The gather tells when every row keeps one run from its first place; the batch then moves by its offsets
    alone, to the same values as the mask's gather and scatter, to the bit (−0.0 kept, padding +0.0): rows of
    up to sixteen places by copies of a fixed size, the last rows and wider ones by their own length."""
    mask = _leading_mask(rng, shape)
    values = (rng.normal(size=shape) * 10).astype(dtype)
    offsets, leading = np.empty(shape[0] + 1, dtype=np.int64), np.full(1, 7, dtype=np.uint8)
    total = int(mask.sum())
    _batched.gather_kept(values, mask.view(np.uint8), mask.size, offsets=offsets, leading=leading)
    assert leading[0] == 1
    np.testing.assert_array_equal(_batched.gather_leading(values, offsets), values[mask])
    flat = rng.normal(size=total) * rng.choice([1.0, 0.0, -0.0, 1e-320], total)
    for out_dtype in (np.float32, np.float64):
        out, expected = np.full(shape, np.nan, dtype=out_dtype), np.full(shape, np.nan, dtype=out_dtype)
        _batched.scatter_leading(flat, 0.5, offsets, out)
        _batched.scatter_kept(flat, 0.5, mask.view(np.uint8), expected, vectorised=False)
        np.testing.assert_array_equal(out.view(np.uint8), expected.view(np.uint8))


@pytest.mark.parametrize(
    "rows",
    [
        [[0, 1, 1], [1, 1, 1]],  # a row that starts late
        [[1, 0, 1], [1, 1, 0]],  # a row with two runs
        [[1, 1, 0], [0, 0, 1]],  # an empty start, one kept at the end
    ],
)
def test_rows_with_a_gap_do_not_lead(rows):
    mask = np.array(rows, dtype=bool)
    leading, offsets = np.ones(1, dtype=np.uint8), np.empty(3, dtype=np.int64)
    _batched.gather_kept(np.zeros(mask.shape), mask.view(np.uint8), mask.size, offsets=offsets, leading=leading)
    assert leading[0] == 0


def test_leading_moves_refuse_offsets_that_do_not_fit():
    values, out = np.zeros((2, 3)), np.zeros((2, 3))
    for offsets in ([0, 2], [1, 2, 3], [0, 4, 5], [0, 2, 1]):
        with pytest.raises(ValueError, match="expected offsets of 3 entries from 0"):
            _batched.gather_leading(values, np.array(offsets, dtype=np.int64))
    with pytest.raises(ValueError, match="4 values in all"):  # more kept places than values to put there
        _batched.scatter_leading(np.zeros(4), 1.0, np.array([0, 3, 5], dtype=np.int64), out)


def test_gather_refuses_another_shape():
    with pytest.raises(ValueError, match="mask's shape"):
        _batched.gather_kept(np.zeros((2, 3)), np.ones((3, 2), dtype=np.uint8), 6)
    with pytest.raises(ValueError, match="room for every document"):  # counting needs the whole mask's room
        _batched.gather_kept(np.zeros((2, 3)), np.ones((2, 3), dtype=np.uint8), 5, offsets=np.zeros(3, np.int64))


def test_gather_tells_the_sign_of_integers_only():
    with pytest.raises(ValueError, match="with int64 values only"):
        _batched.gather_kept(np.zeros((2, 3)), np.ones((2, 3), dtype=np.uint8), 6, np.zeros(1, dtype=np.int64))
    with pytest.raises(ValueError, match="narrow only with them"):
        _batched.gather_kept(np.zeros((2, 3), dtype=np.int64), np.ones((2, 3), dtype=np.uint8), 6, narrow=True)


@pytest.mark.parametrize("top", [0, 4, 127, 128, 300])
def test_narrow_gather_is_the_labels_when_they_fit(rng, top):
    values = rng.integers(0, top + 1, (20, 9))
    values[3, 2] = top
    mask = rng.random(values.shape) < 0.7
    mask[3, 2] = True
    bits = np.zeros(1, dtype=np.int64)
    narrow = _batched.gather_kept(values, mask.view(np.uint8), int(mask.sum()), bits, True)
    assert narrow.dtype == np.int8 and bits[0] == np.bitwise_or.reduce(values[mask])
    # The caller's test: the int8 copy holds the labels exactly when their OR lies in 0 … 127.
    assert (0 <= bits[0] < 128) == (top < 128)
    if top < 128:
        np.testing.assert_array_equal(narrow, values[mask])


@pytest.mark.parametrize("dtype", [np.int8, np.int64])
@pytest.mark.parametrize("relevant_from", [1, 3, 200])
def test_relevant_per_query(rng, dtype, relevant_from):
    grades = rng.integers(0, 5, 900).astype(dtype)
    grades[:300] = 4  # one query past the 255 labels a byte lane counts at a time
    offsets = np.concatenate(([0, 300], np.sort(rng.integers(300, 901, 40)), [900])).astype(np.int64)
    counts = np.empty(offsets.size - 1, dtype=np.int64)
    _batched.relevant_per_query(grades, relevant_from, offsets, counts)
    rows = zip(offsets[:-1], offsets[1:], strict=True)
    np.testing.assert_array_equal(counts, [(grades[lo:hi] >= relevant_from).sum() for lo, hi in rows])
    with pytest.raises(ValueError, match="relevant_from >= 1"):
        _batched.relevant_per_query(grades, 0, offsets, counts)


@pytest.mark.parametrize("top", [0, 4, 1000, (1 << 16) - 1])
def test_present_levels_and_their_lookup_are_grade_levels(rng, top):
    grades = rng.integers(0, top + 1, 250).astype(np.int64)  # at most 250 levels: each fits a byte
    levels = _graded_position.present_levels(grades)
    expected_levels, expected_of = grade_levels(grades)
    np.testing.assert_array_equal(levels, expected_levels)
    level_of = _graded_position.level_lookup(grades, levels)
    np.testing.assert_array_equal(level_of, expected_of)
    assert level_of.dtype == np.uint8


def test_level_helpers_at_their_edges():
    assert _graded_position.present_levels(np.array([0, 1 << 16], dtype=np.int64)) is None
    assert _graded_position.present_levels(np.zeros(0, dtype=np.int64)).size == 0
    none = np.zeros(0, dtype=np.int64)
    assert _graded_position.level_lookup(none, none).size == 0
    with pytest.raises(ValueError, match="a grade beyond them"):  # never read past the table
        _graded_position.level_lookup(np.array([0, 9], dtype=np.int64), np.array([0, 1]))
    many = np.arange(_graded_position.MAX_BYTE_LEVELS + 1, dtype=np.int64)
    with pytest.raises(ValueError, match="at most 256 levels"):  # a level that would not fit its byte
        _graded_position.level_lookup(many, many)


@pytest.mark.parametrize("k", [1, 3, 10])
def test_the_count_loss_pool_answers_as_the_loss_on_both_paths(rng, k, monkeypatch):
    structure = PrecisionAtKLoss(k).structure()
    pool = CountLossPool(structure)
    for call in range(4):
        n_pos, n_neg = rng.integers(1, 30, 60), rng.integers(1, 30, 60)
        if call == 3:  # past the grid: the dictionary path
            monkeypatch.setattr("rankopt.inference.topk.POOL_GRID_MAX", 4)
        values, starts = pool.entries(n_pos, n_neg)
        for p, n, start in zip(n_pos.tolist(), n_neg.tolist(), starts.tolist(), strict=True):
            kept = min(k, p + n)
            counts = np.arange(max(0, kept - n), min(kept, p) + 1)
            np.testing.assert_array_equal(values[start : start + counts.size], count_losses(structure, counts, p, n))
    assert POOL_GRID_MAX >= 1 << 20


@pytest.mark.parametrize("dtype", [np.int8, np.int64])
@pytest.mark.parametrize("relevant_from", [1, 3, 200])
def test_count_table_starts_are_the_pools_entries(rng, dtype, relevant_from):
    """The compiled lookup a training loop's step takes gives the pool's starts, 0 for a query with one class,
    and gives up (False) on a pair the pool has not met."""
    grades = rng.integers(0, 5, 400).astype(dtype)
    offsets = np.concatenate(([0], np.sort(rng.integers(0, 401, 30)), [400])).astype(np.int64)
    rows = zip(offsets[:-1], offsets[1:], strict=True)
    n_pos = np.array([(grades[lo:hi] >= relevant_from).sum() for lo, hi in rows])
    n_neg = np.diff(offsets) - n_pos
    usable = (n_pos > 0) & (n_neg > 0)
    pool = CountLossPool(PrecisionAtKLoss(3).structure())
    starts = np.full(offsets.size - 1, -7, dtype=np.int64)
    if usable.any():
        assert not _batched.count_table_starts(grades, relevant_from, offsets, pool.arrays()[1], starts)
        _, expected = pool.entries(n_pos[usable], n_neg[usable])
    else:
        expected = np.zeros(0, dtype=np.int64)
    assert _batched.count_table_starts(grades, relevant_from, offsets, pool.arrays()[1], starts)
    np.testing.assert_array_equal(starts[usable], expected)
    np.testing.assert_array_equal(starts[~usable], 0)
    with pytest.raises(ValueError, match="relevant_from >= 1"):
        _batched.count_table_starts(grades, 0, offsets, pool.arrays()[1], starts)


@pytest.mark.parametrize("dtype", [np.int8, np.int64])
def test_count_table_starts_count_long_queries(dtype):
    """Int8 labels are counted a byte per lane, 255 at a time: a query of 600 relevant documents and one not."""
    grades = np.ones(601, dtype=dtype)
    grades[300] = 0
    offsets = np.array([0, 601], dtype=np.int64)
    pool = CountLossPool(PrecisionAtKLoss(3).structure())
    _, expected = pool.entries(np.array([600]), np.array([1]))
    starts = np.zeros(1, dtype=np.int64)
    assert _batched.count_table_starts(grades, 1, offsets, pool.arrays()[1], starts)
    np.testing.assert_array_equal(starts, expected)


def test_a_mask_of_other_nonzero_bytes_keeps_each_document_once(rng):
    """A bool array made from other bytes (a uint8 view) keeps a document wherever its byte is nonzero, in the
    counts, the gather and the scatter alike: never a count past the documents gathered."""
    clean = rng.random((60, 9)) < 0.5
    raw = clean.astype(np.uint8) * rng.integers(1, 256, clean.shape).astype(np.uint8)
    offsets, clean_offsets = np.empty(61, dtype=np.int64), np.empty(61, dtype=np.int64)
    total = _batched.kept_offsets(raw, offsets)
    assert total == _batched.kept_offsets(clean.view(np.uint8), clean_offsets) == clean.sum()
    np.testing.assert_array_equal(offsets, clean_offsets)
    values = rng.normal(size=clean.shape)
    np.testing.assert_array_equal(_batched.gather_kept(values, raw, total), values[clean])
    out, expected = np.full(clean.shape, np.nan), np.zeros(clean.shape)
    flat = rng.normal(size=total)
    _batched.scatter_kept(flat, 2.0, raw, out)
    expected[clean] = flat * 2.0
    np.testing.assert_array_equal(out, expected)


@pytest.mark.parametrize("share", [0.0, 0.1, 0.5, 0.9, 1.0])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_vectorised_moves_are_the_loops_to_the_bit(rng, share, dtype):
    """AVX-512's compress and expand (``_masked_moves.pxd``, where the machine has them) against the row-by-row
    loops: masks of every density with bytes other than 1, widths off the vectors' 8 and 16, a gather told to
    stop early, a scatter whose values run out (0 past them), a negative factor (signed zeros)."""
    for shape in [(37, 29), (3, 1000), (500, 10)]:
        mask = ((rng.random(shape) < share) * rng.integers(1, 256, shape)).astype(np.uint8)
        values = rng.normal(size=shape).astype(dtype)
        kept = int(np.count_nonzero(mask))
        for n_kept in {kept, kept // 2, max(kept - 13, 0)}:
            vector = _batched.gather_kept(values, mask, n_kept)
            loops = _batched.gather_kept(values, mask, n_kept, vectorised=False)
            assert vector.tobytes() == loops.tobytes() == values[mask != 0][:n_kept].tobytes()
        flat = np.concatenate([rng.normal(size=kept), [0.0, -0.0]])[:kept]
        for n_values in {kept, kept // 2, max(kept - 5, 0)}:
            for factor in (0.5, -1.0 / 3.0):
                outs = [np.full(shape, np.nan, dtype=dtype) for _ in range(2)]
                _batched.scatter_kept(flat[:n_values], factor, mask, outs[0])
                _batched.scatter_kept(flat[:n_values], factor, mask, outs[1], vectorised=False)
                assert outs[0].tobytes() == outs[1].tobytes()
                expected = np.zeros(shape, dtype=dtype)
                expected[mask != 0] = np.concatenate([flat[:n_values] * factor, np.zeros(kept - n_values)]).astype(
                    dtype
                )
                np.testing.assert_array_equal(outs[0], expected)


@pytest.mark.parametrize("layout", ["holes", "leading", "late start", "empty rows"])
@pytest.mark.parametrize("narrow", [False, True])
def test_vectorised_label_gather_is_the_loops(rng, layout, narrow):
    """The labels' gather with its counts, lead test and bitwise OR (``Kept.with_grades``' call), by AVX-512's
    compress where the machine has it, against the loops: the same labels, offsets, ``leading`` and bits."""
    for shape in [(37, 29), (3, 1000), (500, 10), (1, 1)]:
        if layout == "holes":
            mask = rng.random(shape) < 0.9
        else:
            mask = _leading_mask(rng, shape)
            if layout == "late start" and shape[1] > 1:
                mask[-1, 0] = False
                mask[-1, 1] = True
            if layout == "empty rows":
                mask[::2] = False
        mask = (mask * rng.integers(1, 256, shape)).astype(np.uint8)
        labels = rng.integers(0, 5 if narrow else 300, shape).astype(np.int64)
        results = []
        for vectorised in (True, False):
            offsets, bits, leading = np.empty(shape[0] + 1, np.int64), np.zeros(1, np.int64), np.zeros(1, np.uint8)
            flat = _batched.gather_kept(labels, mask, mask.size, bits, narrow, offsets, leading, vectorised=vectorised)
            results.append((flat[: offsets[-1]].tobytes(), offsets.tolist(), int(bits[0]), int(leading[0])))
        assert results[0] == results[1]
        kept = labels[mask != 0]
        assert results[0][0] == (kept.astype(np.int8) if narrow else kept).tobytes()
        kept_rows = mask != 0
        assert results[0][3] == all(row[: row.sum()].all() for row in kept_rows)


@pytest.mark.parametrize("dtype", [np.bool_, np.uint8])
@pytest.mark.parametrize("layout", ["holes", "leading", "empty rows"])
@pytest.mark.parametrize("narrow", [False, True])
def test_byte_labels_are_gathered_as_the_int64_ones(rng, dtype, layout, narrow):
    """Boolean and uint8 labels (a metric-learning batch's relevance; torch's booleans come as uint8) are grades
    as they are: gathered a byte each, they give the int64 labels' kept documents, offsets and lead, as int8 when
    narrowed and every one is below 128 (uint8 labels of 128 and more as int64)."""
    for shape in [(37, 29), (3, 1000), (1, 1)]:
        mask = rng.random(shape) < 0.8 if layout == "holes" else _leading_mask(rng, shape)
        if layout == "empty rows":
            mask[::2] = False
        for top in [1] if dtype == np.bool_ else [1, 127, 255]:
            labels = rng.integers(0, top + 1, shape).astype(dtype)
            kept, grades = Kept.with_grades(mask, labels, narrow)
            reference, expected = Kept.with_grades(mask, labels.astype(np.int64), narrow)
            np.testing.assert_array_equal(kept.offsets, reference.offsets)
            assert kept.leading == reference.leading and kept.n_kept == reference.n_kept
            np.testing.assert_array_equal(grades, expected)
            assert grades.dtype == expected.dtype


@pytest.mark.parametrize(
    "offsets",
    [[0], [0, 0], [0, 7], [0, 3, 3, 10, 11], [0, 5, 2, 9], [0, 2**63 - 1, -(2**63), 4], [5, -(2**63), 2**63 - 1]],
)
def test_query_size_range_is_the_sizes_smallest_and_largest(offsets):
    """One pass over the offsets gives what NumPy's ``diff`` and two reductions do, wrapping around as it does
    on unchecked offsets, and (0, 0) for a batch of no query."""
    offsets = np.array(offsets, dtype=np.int64)
    sizes = np.diff(offsets)
    expected = (int(sizes.min()), int(sizes.max())) if sizes.size else (0, 0)
    assert _batched.query_size_range(offsets) == expected
