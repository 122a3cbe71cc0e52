"""Issue 60: rankopt's own LETOR / SVM-light reader (rankopt.data.letor, _letor.pyx).

Values equal scikit-learn's reader on every file both accept (a property test over generated files with
comments, CRLF, sparse rows and extreme values); what ours refuses, it refuses with the line; blocks cut
anywhere give the same arrays; gzip, bzip2, lone CR, float32 overflow, LightGBM's sidecars.
"""

from __future__ import annotations

import bz2
import gzip
import io
import os

import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sklearn.datasets import load_svmlight_file

from rankopt.data import letor, read_svmlight

SETTINGS = {"deadline": None, "suppress_health_check": [HealthCheck.function_scoped_fixture, HealthCheck.too_slow]}

#: Numbers as writers write them: short decimals, repr's 17 digits, exponents, signs, extremes.
numbers = st.one_of(
    st.floats(allow_nan=False, allow_infinity=False).map(repr),
    st.floats(allow_nan=False, allow_infinity=False, width=32).map(lambda v: f"{v:.9g}"),
    st.decimals(allow_nan=False, allow_infinity=False, places=6, min_value=-1e6, max_value=1e6).map(str),
    st.sampled_from(["0", "-0", "+1", "1.", ".5", "1e-400", "4.9e-324", "1.7976931348623157e308", "2.5E+3", "007"]),
    st.integers(-(10**25), 10**25).map(str),
)
separators = st.sampled_from([" ", "\t", "  ", " \t"])


@st.composite
def svmlight_lines(draw, with_qid: bool):
    label = draw(st.one_of(st.integers(-3, 5).map(str), numbers))
    indices = sorted(draw(st.sets(st.integers(1, 30), max_size=6)))
    tokens = [label] + ([f"qid:{draw(st.integers(-(2**63), 2**63 - 1))}"] if with_qid else [])
    tokens += [f"{i}:{draw(numbers)}" for i in indices]
    line = draw(separators).join(tokens)
    if draw(st.booleans()):
        line += draw(st.sampled_from([" # a comment: 3:4", "#x", "  # qid:1 1:1"]))
    return line


@st.composite
def svmlight_files(draw):
    with_qid = draw(st.booleans())
    lines = draw(st.lists(svmlight_lines(with_qid), min_size=1, max_size=15))
    extra = draw(st.lists(st.sampled_from(["", "# only a comment", "   "]), max_size=3))
    lines = lines + extra
    draw(st.randoms()).shuffle(lines) if extra else None
    ending = draw(st.sampled_from(["\n", "\r\n"]))
    return (ending.join(lines) + draw(st.sampled_from(["", ending]))).encode(), with_qid


@settings(max_examples=400, **SETTINGS)
@given(content=svmlight_files(), dtype=st.sampled_from([np.float64, np.float32]))
def test_values_equal_scikit_learns_reader_on_every_file_both_accept(tmp_path, content, dtype):
    text, with_qid = content
    path = tmp_path / "f.svm"
    path.write_bytes(text)
    try:
        X, y, qid = load_svmlight_file(io.BytesIO(text), dtype=dtype, query_id=True, zero_based=True)
    except ValueError:
        theirs = None
    else:
        # scikit-learn takes what ours refuses: non-finite values (1e400 overflows) and a float32 overflow.
        if not (np.all(np.isfinite(X.data)) and np.all(np.isfinite(y))) or X.nnz == 0:
            theirs = None
        else:
            theirs = (X, y, qid)
    try:
        ours = read_svmlight(path, zero_based=True, dtype=dtype, queries_from_sidecar=False)
    except ValueError:
        assert theirs is None, "ours refuses a file scikit-learn reads to finite values"
        return
    assert theirs is not None, "ours reads a file scikit-learn refuses"
    X, y, qid = theirs
    width = max(X.shape[1], ours.X.shape[1])
    X = sp.csr_matrix((X.data, X.indices, X.indptr), shape=(X.shape[0], width))
    np.testing.assert_array_equal(ours.X.indptr, X.indptr)
    np.testing.assert_array_equal(ours.X.indices, X.indices)
    np.testing.assert_array_equal(ours.X.data.view(np.uint8), X.data.astype(dtype).view(np.uint8))  # bit for bit
    np.testing.assert_array_equal(ours.y, y)
    assert ours.X.dtype == dtype
    if with_qid:
        np.testing.assert_array_equal(ours.qid, qid)
    else:
        assert ours.qid is None


@pytest.mark.parametrize("block_bytes", [1, 7, 64, 4096])
@pytest.mark.parametrize("n_threads", [1, 3])
def test_blocks_cut_anywhere_read_as_one(tmp_path, rng, monkeypatch, block_bytes, n_threads):
    sizes = rng.integers(1, 9, 40)
    lines = []
    for q, size in enumerate(sizes):
        for _ in range(size):
            features = " ".join(f"{j}:{rng.normal():.6g}" for j in sorted(rng.choice(12, 4, replace=False) + 1))
            lines.append(f"{rng.integers(0, 5)} qid:{q} {features}")
    path = tmp_path / "f.txt"
    path.write_text("\r\n".join(lines) + "\r\n# trailing comment")
    whole = read_svmlight(path, n_threads=1)
    monkeypatch.setattr(letor, "BLOCK_BYTES", block_bytes)
    cut = read_svmlight(path, n_threads=n_threads)
    assert (whole.X != cut.X).nnz == 0 and np.array_equal(whole.y, cut.y) and np.array_equal(whole.qid, cut.qid)
    assert whole.X.shape == (sizes.sum(), 12) and np.array_equal(whole.qid, np.repeat(np.arange(40), sizes))


def test_an_error_names_its_line_whatever_the_blocks(tmp_path, monkeypatch):
    path = tmp_path / "f.txt"
    path.write_text("".join(f"1 qid:1 1:{i}\n" for i in range(500)) + "1 qid:1 1:x\n")
    for block_bytes in (16, 1000, 1 << 20):
        monkeypatch.setattr(letor, "BLOCK_BYTES", block_bytes)
        with pytest.raises(ValueError, match=r"line 501: expected a number after the feature index, got '1:x'"):
            read_svmlight(path)


@pytest.mark.parametrize(
    "content, message",
    [
        (b"1 2:1 1:1\n", r"line 1: expected feature indices in increasing order, each once, got '1:1'"),
        (b"1 1:1 1:2\n", r"increasing order, each once, got '1:2'"),
        (b"0 1:1\n1 1:nan\n", r"line 2: expected finite values, got '1:nan'"),
        (b"0 1:1\n1 1:1e400\n", r"line 2: expected finite values, got '1:1e400'"),
        (b"inf 1:1\n", r"line 1: expected a finite label, got 'inf'"),
        (b"1 qid:1.5 1:1\n", r"line 1: expected an integer query id after qid:, got 'qid:1.5'"),
        (b"1 qid:9223372036854775808 1:1\n", r"qid of 2\*\*63 or more"),
        (b"1 2147483648:1\n", r"feature index of 2\*\*31 or more"),
        (b"1 -3:1\n", r"expected feature indices >= 0, got '-3:1'"),
        (b"1 1:1_0\n", r"expected a number after the feature index, got '1:1_0'"),
        (b"1 abc\n", r"expected index:value pairs after the label, got 'abc'"),
        (b"# comments\n\n  # only\n", r"got no sample lines \(only blank lines or comments\)"),
        (b"", r"got an empty file"),
        (b"1\n0\n", r"got lines holding a label only"),
    ],
)
def test_refusals_name_the_line_and_token(tmp_path, content, message):
    path = tmp_path / "bad.svm"
    path.write_bytes(content)
    with pytest.raises(ValueError, match=message):
        read_svmlight(path)


def test_float32_refuses_what_overflows_once_cast(tmp_path):
    path = tmp_path / "f.svm"
    path.write_bytes(b"1 qid:1 1:1e39 2:3\n")
    with pytest.raises(ValueError, match=r"finite values, got '1:1e39'.*beyond float32's range"):
        read_svmlight(path, dtype=np.float32)
    assert read_svmlight(path).X[0, 0] == 1e39


@pytest.mark.parametrize("compress", [gzip.compress, bz2.compress])
@pytest.mark.parametrize("name", ["train.txt.gz", "train.txt"])
def test_compressed_files_are_read_by_their_first_bytes(tmp_path, compress, name):
    plain = b"2 qid:4 1:0.5 3:1\n0 qid:4 2:-1 # c\n1 qid:9 3:2\n"
    path = tmp_path / name
    path.write_bytes(compress(plain))
    (tmp_path / "plain.txt").write_bytes(plain)
    ours, reference = read_svmlight(path), read_svmlight(tmp_path / "plain.txt")
    assert (ours.X != reference.X).nnz == 0 and np.array_equal(ours.qid, [4, 4, 9])


def test_a_truncated_gzip_file_is_a_value_error(tmp_path):
    path = tmp_path / "f.gz"
    path.write_bytes(gzip.compress(b"1 qid:1 1:1\n" * 1000)[:40])
    with pytest.raises(ValueError, match="cannot read"):
        read_svmlight(path)


def test_lone_cr_line_ends_are_lines(tmp_path):
    path = tmp_path / "mac.svm"
    path.write_bytes(b"1 qid:1 1:1\r0 qid:1 2:1\r\r1 qid:2 1:3\r")
    data = read_svmlight(path)
    assert data.X.shape == (3, 2) and np.array_equal(data.qid, [1, 1, 2])


def test_dense_output_is_the_sparse_one(tmp_path, rng):
    path = tmp_path / "f.svm"
    path.write_text("1 qid:1 2:0.5 5:1\n0 qid:1 1:2\n")
    sparse, dense = read_svmlight(path), read_svmlight(path, dense=True, dtype=np.float32)
    assert isinstance(dense.X, np.ndarray) and dense.X.dtype == np.float32
    np.testing.assert_array_equal(dense.X, sparse.X.toarray())


@pytest.mark.parametrize("suffix", [".query", ".group"])
def test_lightgbm_sidecars_give_the_queries(tmp_path, suffix):
    path = tmp_path / "rank.train"
    path.write_text("1 1:1\n0 1:2\n0 2:1\n1 2:2\n0 1:1\n")
    (tmp_path / f"rank.train{suffix}").write_text("2\n3\n")
    data = read_svmlight(path)
    assert np.array_equal(data.qid, [0, 0, 1, 1, 1]) and data.query_file.endswith(suffix)


@pytest.mark.parametrize(
    "option, message",
    [
        ({"n_threads": 0}, "n_threads to be a positive integer"),
        ({"n_threads": True}, "n_threads to be a positive integer"),
        ({"dtype": np.int32}, "dtype float32 or float64"),
        ({"n_features": 0}, "n_features to be a positive integer"),
    ],
)
def test_bad_options_are_refused_before_the_file_is_read(tmp_path, option, message):
    with pytest.raises(ValueError, match=message):
        read_svmlight(tmp_path / "never-opened.svm", **option)


def test_progress_writes_lines_on_a_non_terminal():
    stream = io.StringIO()
    meter = letor.Progress(1000, "reading f", stream=stream)
    for done in range(0, 1001, 10):
        meter.update(done, done // 2)
    lines = stream.getvalue().splitlines()
    assert 19 <= len(lines) <= 21 and lines[-1].startswith("rankopt: reading f: 100% (0.0 MB of 0.0 MB, 500 rows")
    quiet = io.StringIO()
    letor.Progress(1000, "x", stream=quiet, enabled=False).update(1000, 1)
    assert quiet.getvalue() == ""


def test_group_sizes_follow_the_rows(tmp_path):
    path = tmp_path / "f.svm"
    path.write_text("1 qid:9 1:1\n0 qid:9 1:2\n1 qid:2 1:1\n0 qid:5 1:3\n1 qid:5 1:1\n0 qid:5 1:1\n")
    data = read_svmlight(path)
    np.testing.assert_array_equal(data.group, [2, 1, 3])  # np.unique's counts would give [1, 3, 2]
    path.write_text("1 qid:1 1:1\n0 qid:2 1:2\n1 qid:1 1:1\n")
    with pytest.raises(ValueError, match="got query id 1 again after other queries"):
        _ = read_svmlight(path).group
    path.write_text("1 1:1\n0 1:2\n")
    assert read_svmlight(path).group is None


def test_a_pipe_is_read_as_a_file(tmp_path):
    import threading

    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    content = gzip.compress(b"1 qid:1 1:1 2:2\n0 qid:1 2:3\n" * 1000)

    def feed():
        with open(fifo, "wb") as handle:
            handle.write(content)

    writer = threading.Thread(target=feed)
    writer.start()
    data = read_svmlight(fifo)
    writer.join()
    assert data.X.shape == (2000, 2) and data.X.sum() == 6000
