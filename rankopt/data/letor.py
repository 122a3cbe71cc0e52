"""LETOR / SVM-light files at disk speed: rankopt's own reader, linear in the file.

A file is read a block of whole lines at a time (:data:`BLOCK_BYTES`), the blocks parsed by the compiled
parser (:mod:`rankopt.data._letor`) on ``n_threads`` threads without the GIL, and handed on in file order.
:func:`read_letor` assembles them into one CSR matrix (or a dense array), freeing each block as it is copied,
so its memory stays near the arrays it returns; :func:`parse_blocks` gives the blocks themselves to readers
that write as they go (the query store).  Gzip and bzip2 files are recognised by their first bytes.

The grammar is SVM-light's as scikit-learn's ``load_svmlight_file`` reads it, with every value it accepts
read to the same float: ``label [qid:Q] index:value ... [# comment]``, LF, CRLF or lone-CR line ends.  What
this reader refuses that scikit-learn's takes: non-finite labels and values (also a float32 overflow, checked
after the cast), and numbers with underscores.  Each refusal is a ``ValueError`` naming the file and line.
"""

from __future__ import annotations

import bz2
import gzip
import os
import sys
import time
from collections import deque
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np

__all__ = ["BLOCK_BYTES", "ParsedBlock", "Progress", "available_threads", "parse_blocks", "read_letor"]

#: Bytes of the file a block holds (it ends at the last line break within); small enough that the blocks in
#: flight stay a few tens of MB, large enough that a block's fixed costs vanish.
BLOCK_BYTES = 4 << 20

#: The first bytes of the compressed files the reader opens as such.
_MAGIC = {b"\x1f\x8b": gzip.GzipFile, b"BZh": bz2.BZ2File}

#: The parser's error codes (rankopt/data/_letor.pyx), worded: {token} is the offending token.
_ERRORS = {
    1: "expected a number for the label, got {token} instead",
    2: "expected a finite label, got {token} instead",
    3: "expected an integer query id after qid:, got {token} instead",
    4: "a qid of 2**63 or more ({token}); query ids are 64-bit integers",
    5: "expected index:value pairs after the label, got {token} instead",
    6: "a feature index of 2**31 or more ({token})",
    7: "expected feature indices >= 0, got {token} instead (Invalid index)",
    8: "expected a number after the feature index, got {token} instead",
    9: "expected finite values, got {token} instead",
    10: "expected feature indices in increasing order, each once, got {token} after a feature of the same or a "
    "higher index",
    11: "Invalid index 0 in {token}: the file is read as one-based",
}
_INDEX_BELOW_BASE = 11
_VALUE_NOT_FINITE = 9


def available_threads() -> int:
    """The cores this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - macOS, Windows
        return os.cpu_count() or 1


@dataclass
class ParsedBlock:
    """One block of a file's lines, parsed: CSR pieces with indices as written (not shifted to zero-based)."""

    y: np.ndarray
    qid: np.ndarray
    indptr: np.ndarray
    indices: np.ndarray
    data: np.ndarray
    first_line: int  # the file's line number (1-based) of the block's first line
    n_lines: int  # line breaks in the block
    rows_with_qid: int
    first_line_with_qid: int  # the file's line number, or 0 when none
    first_line_without_qid: int
    largest_index: int  # -1 when the block names no feature
    smallest_index: int
    bytes_read: int = 0  # of the file on disk, once this block was read (compressed bytes for gzip / bzip2)

    @property
    def n_rows(self) -> int:
        return self.y.size

    def dense(self, n_features: int, shift: int) -> np.ndarray:
        """The block's rows as a dense array, column ``index - shift`` for each stored index."""
        from rankopt.data._letor import scatter_dense

        out = np.zeros((self.n_rows, n_features), dtype=self.data.dtype)
        scatter_dense(self.indptr, self.indices, self.data, shift, out)
        return out


class Progress:
    """Bytes read out of a total: a tqdm bar on a terminal, else a line per 5 % or per minute on ``stream``.

    Each line gives the share, bytes, rows and rate, so a log shows how far a long read has come.
    """

    def __init__(self, total: int, what: str, *, enabled: bool = True, stream=None, step: float = 0.05):
        self.total, self.what, self.enabled = max(int(total), 1), what, enabled
        self.stream = sys.stderr if stream is None else stream
        self.steps, self.start = max(1, round(1 / step)), time.monotonic()
        self.done = self.rows = 0
        self._bar = None
        self._next, self._last_line = 1, self.start  # the next line at _next / steps of the total
        if enabled and _isatty(self.stream):
            try:
                from tqdm.auto import tqdm
            except ImportError:  # the lines below serve a terminal too
                return
            self._bar = tqdm(total=self.total, unit="B", unit_scale=True, desc=what, file=self.stream)

    def update(self, done: int, rows: int) -> None:
        """Now ``done`` bytes and ``rows`` rows in all."""
        if not self.enabled:
            return
        if self._bar is not None:
            self._bar.update(done - self.done)
            self.done, self.rows = done, rows
            return
        self.done, self.rows = done, rows
        now = time.monotonic()
        if done * self.steps >= self._next * self.total or now - self._last_line >= 60:
            self._line(now)
            self._next = done * self.steps // self.total + 1

    def _line(self, now: float) -> None:
        elapsed = max(now - self.start, 1e-9)
        print(
            f"rankopt: {self.what}: {100 * self.done / self.total:.0f}% ({_megabytes(self.done)} of "
            f"{_megabytes(self.total)}, {self.rows:,} rows, {self.done / elapsed / 1e6:.0f} MB/s)",
            file=self.stream,
            flush=True,
        )
        self._last_line = now

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()


def _isatty(stream) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):
        return False


def _megabytes(n: int) -> str:
    return f"{n / 1e9:.2f} GB" if n >= 1e9 else f"{n / 1e6:.1f} MB"


def open_source(path: str):
    """``path`` opened for bytes, with the bytes of the file on disk read so far (:class:`_Source`).

    Gzip and bzip2 are recognised by their first bytes, whatever the name; a pipe or FIFO is read as a file
    (its first bytes are peeked at, never sought back to).
    """
    raw = open(path, "rb")  # noqa: SIM115 - closed with the decompressor over it (see _Source)
    head = raw.peek(3)[:3]
    opener = next((opener for magic, opener in _MAGIC.items() if head.startswith(magic)), None)
    handle = raw if opener is None else opener(raw) if opener is bz2.BZ2File else opener(fileobj=raw)
    return _Source(handle, raw)


class _Source:
    """A file being read, and how far into the file on disk: its position, or on a pipe (which has none)
    the bytes handed out."""

    def __init__(self, handle, raw):
        self.handle, self.raw, self.handed_out = handle, raw, 0
        try:
            raw.tell()
            self._seekable = True
        except OSError:
            self._seekable = False

    def read(self, n: int) -> bytes:
        chunk = self.handle.read(n)
        self.handed_out += len(chunk)
        return chunk

    def position(self) -> int:
        return self.raw.tell() if self._seekable else self.handed_out

    def __iter__(self):
        return iter(self.handle)

    def __enter__(self):
        return self

    def __exit__(self, *exc_info):
        try:
            self.handle.close()
        finally:
            self.raw.close()


def line_blocks(path: str, block_bytes: int):
    """(block, bytes of the file read so far) for blocks of whole lines, in order."""
    with open_source(path) as source:
        rest = b""
        while True:
            try:
                chunk = source.read(block_bytes)
            except (OSError, EOFError, ValueError) as exc:  # a corrupt or truncated gzip / bzip2 stream
                raise ValueError(f"cannot read {path!r}: {exc}") from None
            if not chunk:
                break
            block = rest + chunk if rest else chunk
            end = max(block.rfind(b"\n"), block.rfind(b"\r")) + 1
            if end == 0:  # one line longer than a block: keep reading
                rest = block
                continue
            rest = block[end:]
            yield block[:end], source.position()
        if rest:
            yield rest, source.position()


def _parse_one(block: bytes, min_index: int, dtype):
    from rankopt.data._letor import parse_block, upper_bounds

    text = np.frombuffer(block, dtype=np.uint8)
    max_rows, max_nnz = upper_bounds(text)
    y = np.empty(max_rows, dtype=np.float64)
    qid = np.empty(max_rows, dtype=np.int64)
    indptr = np.empty(max_rows + 1, dtype=np.int64)
    indices = np.empty(max_nnz, dtype=np.int32)
    data = np.empty(max_nnz, dtype=dtype)
    code, counts = parse_block(text, min_index, y, qid, indptr, indices, data)
    rows, nnz = counts[0], counts[1]
    return code, counts, (y[:rows].copy(), qid[:rows].copy(), indptr[: rows + 1].copy(), indices[:nnz], data[:nnz])


def parse_blocks(
    path,
    *,
    dtype=np.float64,
    zero_based=True,
    n_threads: int | None = None,
    progress: Progress | None = None,
    max_index: int | None = None,
    too_wide_message=None,
    block_bytes: int | None = None,
):
    """The file's :class:`ParsedBlock`\\ s in order, parsed on ``n_threads`` threads (default: every core).

    ``zero_based=False`` refuses index 0; ``max_index`` refuses a larger feature index as soon as a block
    holds one, before anything of the file's width is made, in the words of ``too_wide_message(index)``
    (by default :func:`too_wide`'s).
    """
    path = os.fspath(path)
    dtype = np.dtype(dtype)
    n_threads = available_threads() if n_threads is None else n_threads
    min_index = 0 if zero_based is not False else 1
    first_line, rows = 1, 0
    in_flight: deque = deque()
    with ThreadPoolExecutor(max_workers=n_threads) if n_threads > 1 else _InThisThread() as pool:
        blocks = line_blocks(path, BLOCK_BYTES if block_bytes is None else block_bytes)
        exhausted = False
        while True:
            while not exhausted and len(in_flight) < 2 * n_threads:
                item = next(blocks, None)
                if item is None:
                    exhausted = True
                    break
                block, done = item
                in_flight.append((block, done, pool.submit(_parse_one, block, min_index, dtype)))
            if not in_flight:
                break
            block, done, future = in_flight.popleft()
            code, counts, arrays = future.result()
            if code:
                raise ValueError(_error_message(path, code, counts, block, first_line, dtype))
            y, qid, indptr, indices, data = arrays
            parsed = ParsedBlock(
                y=y,
                qid=qid,
                indptr=indptr,
                indices=indices,
                data=data,
                first_line=first_line,
                n_lines=counts[2],
                rows_with_qid=counts[3],
                first_line_with_qid=first_line + counts[4] if counts[4] >= 0 else 0,
                first_line_without_qid=first_line + counts[5] if counts[5] >= 0 else 0,
                largest_index=counts[6],
                smallest_index=counts[7],
                bytes_read=done,
            )
            if max_index is not None and parsed.largest_index > max_index:
                words = too_wide_message or (lambda index: too_wide(path, index, max_index))
                raise ValueError(words(parsed.largest_index))
            first_line += counts[2]
            rows += parsed.n_rows
            if progress is not None:
                progress.update(done, rows)
            yield parsed


class _InThisThread:
    """The executor of ``n_threads=1``: each block parsed where it is read, one thread in all."""

    def __enter__(self):
        return self

    def __exit__(self, *exc_info):
        return False

    def submit(self, function, *args) -> Future:
        future: Future = Future()
        future.set_result(function(*args))
        return future


def too_wide(path: str, largest_index: int, max_index: int) -> str:
    return (
        f"expected {path!r} to use at most {max_index} features, got a file {largest_index} features wide (a "
        "feature index of that size) instead; pass max_features= to read wider data (on the command line "
        "--max-features)"
    )


def _error_message(path: str, code: int, counts, block: bytes, first_line: int, dtype) -> str:
    line = first_line + counts[8]
    token = block[counts[9] : counts[10]][:60].decode("utf-8", errors="replace")
    message = _ERRORS.get(code, "unreadable line (parser code {token})").format(token=repr(token))
    if code == _VALUE_NOT_FINITE and dtype == np.float32:
        message += " (beyond float32's range once cast: read it as float64)"
    if code == _INDEX_BELOW_BASE:
        message += (
            " (the file counts features from 0, as scikit-learn's dump_svmlight_file does by default: read it "
            "with zero_based=True or 'auto', on the command line --zero-based yes or auto)"
        )
    return f"cannot read {path!r} as SVM-light: line {line}: {message}"


@dataclass
class LetorArrays:
    """What :func:`read_letor` read: X, the labels, the query ids (None without qid:) and the index base."""

    X: object
    y: np.ndarray
    qid: np.ndarray | None
    zero_based: bool
    file_width: int  # the features the file itself spans


def read_letor(
    path,
    *,
    dtype=np.float64,
    zero_based="auto",
    n_features: int | None = None,
    max_features: int,
    dense: bool = False,
    n_threads: int | None = None,
    progress: bool = False,
) -> LetorArrays:
    """Read a whole LETOR / SVM-light file into CSR (or dense) X, labels and query ids.

    ``zero_based="auto"`` reads indices as zero-based exactly when index 0 occurs (scikit-learn's rule).
    A file spanning more than ``max_features`` features, or more than ``n_features`` when given, is refused;
    X is ``n_features`` wide when given.  Memory: the returned arrays and the blocks in flight (a dense X
    is made from the CSR one at the end).
    """
    import scipy.sparse as sp

    path = os.fspath(path)
    dtype = np.dtype(dtype)
    size = os.path.getsize(path)
    meter = Progress(size, f"reading {os.path.basename(path)}", enabled=progress)
    limit, words = max_features, None
    if n_features is not None:  # an index past n_features is too wide whichever the base
        limit = n_features

        def words(index: int) -> str:
            return wider_than_asked(path, n_features, index, zero_based)

    rows = _Columns(y=np.float64, qid=np.int64, indptr=np.int64)
    values = _Columns(indices=np.int32, data=dtype)
    n_rows = nnz = with_qid = 0
    largest, smallest, first_without = -1, np.iinfo(np.int64).max, 0
    try:
        for block in parse_blocks(
            path,
            dtype=dtype,
            zero_based=zero_based,
            n_threads=n_threads,
            progress=meter,
            max_index=limit,
            too_wide_message=words,
        ):
            rows.append(y=block.y, qid=block.qid, indptr=block.indptr[:-1] + nnz)
            values.append(indices=block.indices, data=block.data)
            if n_rows == 0 and block.n_rows and 0 < block.bytes_read < size:
                # Room for the whole file at the first block's density: untouched pages cost nothing, and the
                # arrays need not grow (ndarray.resize writes zeros over what it adds, a second pass).
                share = size / block.bytes_read * _ROOM
                rows.reserve(int(block.n_rows * share) + 1024)
                values.reserve(int(block.indices.size * share) + 1024)
            n_rows, nnz = n_rows + block.n_rows, nnz + block.indices.size
            with_qid += block.rows_with_qid
            largest, smallest = max(largest, block.largest_index), min(smallest, block.smallest_index)
            first_without = first_without or block.first_line_without_qid
    finally:
        meter.close()
    refuse_no_rows(path, n_rows, size)
    if with_qid not in (0, n_rows):
        raise ValueError(
            f"expected qid: on every line of {path!r} or on none, got it on {with_qid} of {n_rows} lines "
            f"(the first line without it: {_line_text(path, first_without)})"
        )
    zero_based, file_width = base_and_width(path, largest, smallest, zero_based, n_features, max_features)
    shift = 0 if zero_based else 1
    width = file_width if n_features is None else n_features
    y, qid, indptr = rows.arrays(last={"indptr": nnz})
    indices, data = values.arrays()
    if shift:
        np.subtract(indices, shift, out=indices)
    X = sp.csr_matrix((data, indices, indptr), shape=(n_rows, width))
    if dense:
        X = X.toarray()
    return LetorArrays(X=X, y=y, qid=qid if with_qid else None, zero_based=bool(zero_based), file_width=file_width)


def refuse_no_rows(path: str, n_rows: int, size: int) -> None:
    """Refuse a file of ``size`` bytes that held no sample line."""
    if n_rows == 0:
        what = "an empty file" if size == 0 else "no sample lines (only blank lines or comments)"
        raise ValueError(f"expected at least one sample in {path!r}, got {what} instead")


def base_and_width(path: str, largest: int, smallest: int, zero_based, n_features, max_features):
    """(whether indices are zero-based, the features the file spans), its width checked against the limits."""
    if zero_based == "auto":
        zero_based = largest >= 0 and smallest == 0
    file_width = largest + (1 if zero_based else 0) if largest >= 0 else 0
    if file_width > max_features:
        raise ValueError(too_wide(path, file_width, max_features))
    if file_width == 0:
        raise ValueError(
            f"expected feature:value pairs in {path!r}, got lines holding a label only (no line names a "
            "feature); if it is LightGBM's group-size file (FILE.query), pass the data file FILE instead"
        )
    if n_features is not None and file_width > n_features:
        raise ValueError(wider_than_asked(path, n_features, largest, zero_based))
    return bool(zero_based), file_width


def wider_than_asked(path: str, n_features: int, index: int, zero_based) -> str:
    base = {True: "zero-based", False: "one-based"}.get(zero_based, "either base")
    return (
        f"expected {path!r} to use at most {n_features} features, got feature index {index} instead (read as "
        f"{base}; if the training file counted from the other base, say which with zero_based / --zero-based)"
    )


#: The room read_letor makes after the first block, over the whole file at that block's density.
_ROOM = 1.02


class _Columns:
    """Arrays grown in place as blocks arrive (``ndarray.resize``: realloc, which moves large buffers by
    remapping their pages), so the whole file is never held twice; trimmed to their length at the end."""

    GROWTH = 1.25

    def __init__(self, **dtypes):
        self._arrays = {name: np.empty(1 << 16, dtype=dtype) for name, dtype in dtypes.items()}
        self._length = 0

    def reserve(self, n: int) -> None:
        """Room for ``n`` values in all (the last value included), in fresh arrays holding what is there."""
        for name, array in self._arrays.items():
            if n + 1 > array.size:
                room = np.empty(n + 1, dtype=array.dtype)
                room[: self._length] = array[: self._length]
                self._arrays[name] = room

    def append(self, **pieces) -> None:
        n = len(next(iter(pieces.values())))
        for name, piece in pieces.items():
            array = self._arrays[name]
            if self._length + n + 1 > array.size:  # + 1: room for a last value (arrays' last=)
                array.resize(max(int(array.size * self.GROWTH), self._length + n + 1), refcheck=False)
            array[self._length : self._length + n] = piece
        self._length += n

    def arrays(self, last: dict | None = None) -> list[np.ndarray]:
        """The arrays trimmed to their length; ``last`` gives arrays one more value at the end."""
        out = []
        for name, array in self._arrays.items():
            if last and name in last:
                array[self._length] = last[name]
                array.resize(self._length + 1, refcheck=False)
            else:
                array.resize(self._length, refcheck=False)
            out.append(array)
        return out


def _line_text(path: str, number: int) -> str:
    """``line N: <start of the line>`` for line ``number`` of the file."""
    with open_source(path) as source:
        for count, line in enumerate(source, start=1):
            if count == number:
                text = line.split(b"#", 1)[0].strip()
                return f"line {number}: {text[:60].decode('utf-8', errors='replace')!r}"
    return f"line {number}"  # pragma: no cover - the parser counted it
