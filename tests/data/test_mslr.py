"""The MSLR sample fetcher: caching, checksums, parsing — on a small archive the test makes (no network)."""

from __future__ import annotations

import hashlib
import io
import os
import tarfile

import numpy as np
import pytest

from rankopt.data import mslr

TRAIN = b"2 qid:1 1:3 2:0.5 136:1\n0 qid:1 1:1 3:2\n1 qid:4 2:1\n"
TEST = b"4 qid:7 1:1\n0 qid:7 5:2\n"


@pytest.fixture
def fake_pypi(monkeypatch):
    """rankeval's sdist replaced by an archive holding two small files; counts the downloads."""
    contents = {"train": TRAIN, "test": TEST}
    monkeypatch.setattr(
        mslr,
        "MSLR_SAMPLE",
        {
            part: mslr.SampleFile(f"msn1.fold1.{part}.5k.txt", hashlib.sha256(data).hexdigest())
            for part, data in contents.items()
        },
    )
    calls = []

    def download(destination):
        calls.append(destination)
        archive = os.path.join(destination, "rankeval-0.8.2.tar.gz")
        with tarfile.open(archive, "w:gz") as tar:
            for part, data in contents.items():
                info = tarfile.TarInfo(f"{mslr.SDIST_DATA_DIR}/msn1.fold1.{part}.5k.txt")
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
        return archive

    monkeypatch.setattr(mslr, "download_rankeval_sdist", download)
    return calls


def test_fetch_once_then_read_from_the_cache(tmp_path, fake_pypi):
    train = mslr.fetch_mslr_sample("train", data_home=tmp_path)
    assert train.X.shape == (3, 136) and train.X[0, 135] == 1 and train.X[0, 1] == 0.5
    np.testing.assert_array_equal(train.y, [2, 0, 1])
    np.testing.assert_array_equal(train.qid, [1, 1, 4])
    test = mslr.fetch_mslr_sample("test", data_home=tmp_path)
    assert test.X.shape == (2, 136) and list(test.qid) == [7, 7]
    mslr.fetch_mslr_sample("train", data_home=tmp_path)
    assert len(fake_pypi) == 1  # both files came from one download
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
    with pytest.raises(OSError, match="SHA-256"):
        mslr.fetch_mslr_sample("train", data_home=tmp_path)
    assert not (tmp_path / "mslr_sample" / "msn1.fold1.train.5k.txt").exists()


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
