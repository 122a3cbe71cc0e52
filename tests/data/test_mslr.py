"""The MSLR sample fetcher: caching, checksums, parsing — on a small archive the test makes (no network)."""

from __future__ import annotations

import hashlib
import http.server
import io
import json
import os
import tarfile
import threading
import time

import numpy as np
import pytest

from rankopt.data import mslr

TRAIN = b"2 qid:1 1:3 2:0.5 136:1\n0 qid:1 1:1 3:2\n1 qid:4 2:1\n"
TEST = b"4 qid:7 1:1\n0 qid:7 5:2\n"


def _sdist(members: dict[str, bytes], extra: tuple = ()) -> bytes:
    """A gzipped tar like rankeval's sdist: the given members, and a setup.py that would leave a marker."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
        for info in extra:
            tar.addfile(info)
    return buffer.getvalue()


def _setup_py(marker) -> dict[str, bytes]:
    code = f"open({str(marker)!r}, 'w').write('ran')\n".encode()
    return {"rankeval-0.8.2/setup.py": code, "rankeval-0.8.2/pyproject.toml": b"[build-system]\n"}


class FakeIndex:
    """A PyPI simple index on 127.0.0.1 serving one project page and one archive; records requests."""

    def __init__(self, archive: bytes, json_api: bool = True, listed: str = mslr.SDIST_NAME):
        self.archive, self.json_api, self.listed, self.requests = archive, json_api, listed, []
        index = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):
                index.requests.append(self.path)
                if self.path == "/simple/rankeval/":
                    if index.json_api:
                        body = json.dumps(
                            {"files": [{"filename": index.listed, "url": f"../../files/{index.listed}"}]}
                        ).encode()
                        kind = "application/vnd.pypi.simple.v1+json"
                    else:
                        body = f'<html><body><a href="/files/{index.listed}#sha256=x">{index.listed}</a>'.encode()
                        kind = "text/html"
                elif self.path == f"/files/{index.listed}":
                    body, kind = index.archive, "application/octet-stream"
                else:
                    self.send_error(404)
                    return
                self.send_response(200)
                self.send_header("Content-Type", kind)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/simple/"
        self.thread = threading.Thread(target=self.server.serve_forever, args=(0.02,), daemon=True)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def recorded(monkeypatch):
    """The recorded checksums made those of TRAIN and TEST; returns the members of a matching archive."""
    contents = {"train": TRAIN, "test": TEST}
    monkeypatch.setattr(
        mslr,
        "MSLR_SAMPLE",
        {
            part: mslr.SampleFile(f"msn1.fold1.{part}.5k.txt", hashlib.sha256(data).hexdigest())
            for part, data in contents.items()
        },
    )
    return {f"{mslr.SDIST_DATA_DIR}/msn1.fold1.{part}.5k.txt": data for part, data in contents.items()}


@pytest.fixture
def fake_pypi(recorded, monkeypatch, tmp_path):
    """A local index serving an archive whose SHA-256 is made the recorded one; the index in use."""
    archive = _sdist(recorded)
    monkeypatch.setattr(mslr, "SDIST_SHA256", hashlib.sha256(archive).hexdigest())
    with FakeIndex(archive) as index:
        monkeypatch.setenv(mslr.INDEX_URL_ENV, index.url)
        yield index.requests


def test_fetch_once_then_read_from_the_cache(tmp_path, fake_pypi):
    train = mslr.fetch_mslr_sample("train", data_home=tmp_path)
    assert train.X.shape == (3, 136) and train.X[0, 135] == 1 and train.X[0, 1] == 0.5
    np.testing.assert_array_equal(train.y, [2, 0, 1])
    np.testing.assert_array_equal(train.qid, [1, 1, 4])
    test = mslr.fetch_mslr_sample("test", data_home=tmp_path)
    assert test.X.shape == (2, 136) and list(test.qid) == [7, 7]
    mslr.fetch_mslr_sample("train", data_home=tmp_path)
    assert fake_pypi == ["/simple/rankeval/", f"/files/{mslr.SDIST_NAME}"]  # one download for both files
    assert sorted(os.listdir(tmp_path / "mslr_sample")) == ["msn1.fold1.test.5k.txt", "msn1.fold1.train.5k.txt"]


def test_data_home_defaults_to_the_environment_variable(tmp_path, monkeypatch, fake_pypi):
    monkeypatch.setenv(mslr.DATA_HOME_ENV, str(tmp_path / "cache"))
    mslr.fetch_mslr_sample("test")
    assert (tmp_path / "cache" / "mslr_sample" / "msn1.fold1.test.5k.txt").exists()


def test_a_changed_file_fails_its_checksum(tmp_path, fake_pypi):
    mslr.fetch_mslr_sample("train", data_home=tmp_path)
    (tmp_path / "mslr_sample" / "msn1.fold1.train.5k.txt").write_bytes(TRAIN + b"0 qid:9 1:1\n")
    with pytest.raises(OSError, match="SHA-256"):
        mslr.fetch_mslr_sample("train", data_home=tmp_path)


def test_a_download_with_other_content_is_not_cached(tmp_path, fake_pypi, monkeypatch):
    monkeypatch.setitem(mslr.MSLR_SAMPLE, "train", mslr.SampleFile("msn1.fold1.train.5k.txt", "0" * 64))
    with pytest.raises(mslr.FetchError, match="SHA-256"):
        mslr.fetch_mslr_sample("train", data_home=tmp_path)
    assert not (tmp_path / "mslr_sample").exists()  # all or nothing: the good file is not cached either


def test_an_archive_with_another_hash_is_refused_before_anything_of_it_runs(tmp_path, recorded):
    marker = tmp_path / "marker"
    hostile = _sdist({**recorded, **_setup_py(marker)})  # the right data files, plus code
    with FakeIndex(hostile) as index:
        with pytest.raises(mslr.FetchError, match="refused, nothing of it was opened"):
            mslr.fetch_mslr_sample("train", data_home=tmp_path / "home", index_url=index.url)
    assert not marker.exists()
    assert not (tmp_path / "home" / "mslr_sample").exists()


def test_the_recorded_archive_is_used_as_data_only(tmp_path, recorded, monkeypatch):
    """Even the verified archive's setup.py never runs: the data files are read out of it."""
    marker = tmp_path / "marker"
    archive = _sdist({**recorded, **_setup_py(marker)})
    monkeypatch.setattr(mslr, "SDIST_SHA256", hashlib.sha256(archive).hexdigest())
    with FakeIndex(archive, json_api=False) as index:  # a PEP 503 HTML page this time
        data = mslr.fetch_mslr_sample("test", data_home=tmp_path / "home", index_url=index.url)
    assert list(data.qid) == [7, 7] and not marker.exists()
    assert sorted(os.listdir(tmp_path / "home" / "mslr_sample")) == [
        "msn1.fold1.test.5k.txt",
        "msn1.fold1.train.5k.txt",
    ]


def _file_index(path, recorded, monkeypatch):
    """A local index directory holding the recorded sdist as ``path/rankeval/<sdist>``."""
    archive = _sdist(recorded)
    monkeypatch.setattr(mslr, "SDIST_SHA256", hashlib.sha256(archive).hexdigest())
    (path / "rankeval").mkdir(parents=True)
    (path / "rankeval" / mslr.SDIST_NAME).write_bytes(archive)
    return path


def test_a_file_index_and_pips_index_variable_are_honoured(tmp_path, recorded, monkeypatch):
    index = _file_index(tmp_path / "simple", recorded, monkeypatch)
    (index / "rankeval" / "index.html").write_text(f'<a href="{mslr.SDIST_NAME}">{mslr.SDIST_NAME}</a>')
    monkeypatch.delenv(mslr.INDEX_URL_ENV, raising=False)
    monkeypatch.setenv("PIP_INDEX_URL", index.as_uri())
    assert mslr.index_url_in_use() == index.as_uri() + "/"
    # a file:// directory serves the page as its index.html (issue 38, point 20: it failed with
    # "[Errno 21] Is a directory", which this test hid by patching _get)
    assert mslr.fetch_mslr_sample("train", data_home=tmp_path / "home").X.shape == (3, 136)


def test_a_file_index_directory_without_an_index_page_is_listed_as_pip_lists_it(tmp_path, recorded, monkeypatch):
    index = _file_index(tmp_path / "idx", recorded, monkeypatch)
    (index / "rankeval" / "rankeval-0.7.tar.gz").write_bytes(b"another version")
    monkeypatch.setenv(mslr.INDEX_URL_ENV, index.as_uri() + "/")
    assert mslr.fetch_mslr_sample("train", data_home=tmp_path / "home").X.shape == (3, 136)
    (index / "rankeval" / mslr.SDIST_NAME).unlink()
    with pytest.raises(mslr.FetchError, match=f"expected {mslr.SDIST_NAME}"):
        mslr.download_rankeval_sdist()


@pytest.mark.parametrize(
    "archive, message",
    [
        (b"not a tar archive at all", "cannot be read"),
        (b"\x1f\x8b\x08\x00" + b"\x00" * 40, "cannot be read"),  # a gzip header, then garbage
        (None, "no such member"),
        ("symlink", "regular file"),
    ],
)
def test_a_bad_archive_is_one_fetch_error(tmp_path, recorded, monkeypatch, archive, message):
    if archive is None:
        archive = _sdist({})
    elif archive == "symlink":
        links = []
        for name in recorded:
            info = tarfile.TarInfo(name)
            info.type, info.linkname = tarfile.SYMTYPE, "/etc/passwd"
            links.append(info)
        archive = _sdist({}, tuple(links))
    monkeypatch.setattr(mslr, "SDIST_SHA256", hashlib.sha256(archive).hexdigest())
    with FakeIndex(archive) as index:
        with pytest.raises(mslr.FetchError, match=message) as caught:
            mslr.fetch_mslr_sample("train", data_home=tmp_path, index_url=index.url)
    assert isinstance(caught.value, OSError)
    assert not (tmp_path / "mslr_sample").exists()


def test_index_failures_are_one_line_fetch_errors(tmp_path, recorded, monkeypatch):
    with FakeIndex(b"", listed="rankeval-0.8.1.tar.gz") as index:
        with pytest.raises(mslr.FetchError, match="expected rankeval-0.8.2.tar.gz on .* got 1 other files"):
            mslr.fetch_mslr_sample("train", data_home=tmp_path, index_url=index.url)
    closed = FakeIndex(b"")
    url = closed.url
    closed.server.server_close()  # nothing listens there any more
    with pytest.raises(mslr.FetchError, match="could not read the index page of rankeval") as caught:
        mslr.fetch_mslr_sample("train", data_home=tmp_path, index_url=url)
    assert "\n" not in str(caught.value) and mslr.INDEX_URL_ENV in str(caught.value)
    monkeypatch.setattr(mslr, "MAX_SDIST_BYTES", 10)
    with FakeIndex(_sdist(recorded)) as index:
        with pytest.raises(mslr.FetchError, match="at most 10 bytes"):
            mslr.fetch_mslr_sample("train", data_home=tmp_path, index_url=index.url)
    assert not (tmp_path / "mslr_sample").exists()


def test_without_download_a_missing_file_is_an_error(tmp_path, fake_pypi):
    with pytest.raises(OSError, match="download_if_missing is False"):
        mslr.fetch_mslr_sample("train", data_home=tmp_path, download_if_missing=False)
    assert not fake_pypi
    with pytest.raises(ValueError, match="expected subset to be one of"):
        mslr.fetch_mslr_sample("validation", data_home=tmp_path)


@pytest.mark.skipif(
    not os.environ.get("RANKOPT_NETWORK_TESTS"), reason="set RANKOPT_NETWORK_TESTS=1 to fetch from PyPI"
)
def test_the_real_sample(tmp_path):
    for subset in ("train", "test"):
        data = mslr.fetch_mslr_sample(subset, data_home=tmp_path)
        assert data.X.shape == (5000, 136) and np.unique(data.qid).size == 43
        assert set(np.unique(data.y)) == {0, 1, 2, 3, 4}


def test_fetcher_is_importable_from_rankopt_data():
    import rankopt.data

    assert rankopt.data.fetch_mslr_sample is mslr.fetch_mslr_sample
    assert "fetch_mslr_sample" in dir(rankopt.data)


class TricklingIndex(FakeIndex):
    """An index that sends its page one byte at a time, each well within the per-read timeout."""

    def __init__(self, pause: float):
        super().__init__(b"")
        index = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):
                body = b"<html>" + b" " * 10_000
                self.send_response(200)
                self.send_header("Content-Type", "text/html")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                for byte in body:
                    if index.stopped.is_set():
                        return
                    self.wfile.write(bytes([byte]))
                    self.wfile.flush()
                    index.stopped.wait(pause)

            def log_message(self, *args):
                pass

        self.stopped = threading.Event()
        self.server.RequestHandlerClass = Handler

    def __exit__(self, *exc):
        self.stopped.set()
        super().__exit__(*exc)


def test_a_trickling_server_is_cut_off_at_the_deadline(tmp_path, recorded, monkeypatch):
    """The timeout bounded each read only: one byte a second held a 3 s fetch for 20 s and more."""
    monkeypatch.setattr(mslr, "TIMEOUT", 1)
    monkeypatch.setattr(mslr, "DEADLINE", 1)
    home = tmp_path / "fresh" / "home"
    with TricklingIndex(pause=0.05) as index:
        started = time.monotonic()
        with pytest.raises(mslr.FetchError, match=r"within 1 s \(\d+ bytes arrived\)"):
            mslr.fetch_mslr_sample("train", data_home=home, index_url=index.url)
        assert time.monotonic() - started < 1 + 1 + 1  # DEADLINE + one read's TIMEOUT, and slack
    assert not (tmp_path / "fresh").exists()


def test_every_failure_leaves_a_fresh_data_home_absent(tmp_path, recorded, monkeypatch):
    """The user guide promises no cache directory after a failure; fetch_mslr_sample created data_home first."""
    failures = [
        lambda home: mslr.fetch_mslr_sample("train", data_home=home, download_if_missing=False),
        lambda home: mslr.fetch_mslr_sample("train", data_home=home, index_url=(tmp_path / "no-index").as_uri()),
    ]
    with FakeIndex(_sdist(recorded)) as index:  # served, but not the recorded archive
        failures.append(lambda home: mslr.fetch_mslr_sample("train", data_home=home, index_url=index.url))
        for number, fail in enumerate(failures):
            home = tmp_path / f"home-{number}" / "cache"
            with pytest.raises(OSError):
                fail(home)
            assert not (tmp_path / f"home-{number}").exists()


def test_a_failed_write_removes_the_directories_it_made(tmp_path, fake_pypi, monkeypatch):
    def full_disk(*args, **kwargs):
        raise OSError(28, "No space left on device")

    for fails_after in (0, 1):  # the first file's move fails, or the second's
        replace = mslr.os.replace
        moves = []

        def move_then_fail(src, dst, moves=moves, fails_after=fails_after, replace=replace):
            if len(moves) == fails_after:
                full_disk()
            moves.append(dst)
            replace(src, dst)

        monkeypatch.setattr(mslr.os, "replace", move_then_fail)
        with pytest.raises(OSError, match="No space left"):
            mslr.fetch_mslr_sample("train", data_home=tmp_path / "new" / "cache")
        monkeypatch.setattr(mslr.os, "replace", replace)
        assert not (tmp_path / "new").exists()
