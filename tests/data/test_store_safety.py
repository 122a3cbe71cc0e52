"""Issue 60: a query store that never loses a byte, and evaluate / predict that read one.

Each defect the click-log user met has its test: overwrite of a directory that is not a store, a refused
write leaving a half-written directory, a feature id of 1e9, 1e39 in a float32 store, a file of comments
only, labels refused only at fit time, gzip and lone-CR files; a SIGKILL mid-write leaves the destination
as it was.
"""

from __future__ import annotations

import gzip
import os
import signal
import subprocess
import sys
import tempfile
import time

import numpy as np
import pytest

pytest.importorskip("zarr")
pytest.importorskip("dask.array")

from rankopt import RankSVM  # noqa: E402
from rankopt.cli import main  # noqa: E402
from rankopt.data import is_query_store, open_query_store, read_svmlight, write_query_store  # noqa: E402
from rankopt.data.model_file import save_model  # noqa: E402


def _letor_text(rng, n_queries=60, *, n_features=4) -> str:
    lines = []
    for q in range(n_queries):
        for _ in range(int(rng.integers(2, 12))):
            features = " ".join(f"{j + 1}:{rng.normal():.5g}" for j in range(n_features))
            lines.append(f"{rng.integers(0, 5)} qid:{100 + q} {features}")
    return "\n".join(lines) + "\n"


@pytest.fixture
def letor_file(tmp_path, rng):
    path = tmp_path / "train.txt"
    path.write_text(_letor_text(rng))
    return path


def _siblings(folder) -> list[str]:
    return sorted(name for name in os.listdir(folder) if ".rankopt-" in name)


def test_overwrite_never_empties_a_directory_that_is_not_a_store(letor_file, tmp_path):
    before = letor_file.read_bytes()
    with pytest.raises(ValueError, match="holds it"):
        write_query_store(letor_file, tmp_path, overwrite=True, progress=False)
    other = tmp_path / "results"
    other.mkdir()
    (other / "keep.txt").write_text("precious")
    with pytest.raises(ValueError, match="expected overwrite to replace a query store, got .* which is not one"):
        write_query_store(letor_file, other, overwrite=True, progress=False)
    assert letor_file.read_bytes() == before and (other / "keep.txt").read_text() == "precious"


def test_overwrite_replaces_a_store(letor_file, tmp_path, rng):
    store = tmp_path / "s.zarr"
    write_query_store(letor_file, store, progress=False)
    with pytest.raises(FileExistsError, match="exists: pass overwrite=True"):
        write_query_store(letor_file, store, progress=False)
    second = tmp_path / "second.txt"
    second.write_text(_letor_text(rng, 7))
    info = write_query_store(second, store, overwrite=True, progress=False)
    assert info.n_queries == 7 and open_query_store(store)[0].shape[0] == info.n_rows
    assert _siblings(tmp_path) == []


@pytest.mark.parametrize(
    "last_line, message",
    [
        ("nan qid:999 1:1", "expected a finite label, got 'nan'"),
        ("2.5 qid:999 1:1", "grades"),
        ("-3 qid:999 1:1", "grades"),
        ("1 qid:999 1:1e39", r"finite values, got '1:1e39'.*float32"),
        ("1 qid:999 1000000000:1", "at most 1048576 features"),
        ("1 qid:100 1:1", "query id 100 again after other queries"),
        ("1 1:1", "expected qid: on every line"),
    ],
)
def test_a_refused_file_writes_nothing(letor_file, tmp_path, last_line, message):
    bad = tmp_path / "bad.txt"
    bad.write_text(letor_file.read_text() + last_line + "\n")
    store = tmp_path / "s.zarr"
    with pytest.raises(ValueError, match=message):
        write_query_store(bad, store, progress=False)
    assert not os.path.lexists(store) and _siblings(tmp_path) == []
    write_query_store(letor_file, store, progress=False)  # the corrected file then writes
    assert is_query_store(store)


def test_a_file_of_comments_only_is_refused_in_words(tmp_path):
    path = tmp_path / "c.txt"
    path.write_text("# exported 2026-11-28\n# no rows\n")
    with pytest.raises(ValueError, match="expected at least one sample .* no sample lines"):
        write_query_store(path, tmp_path / "s.zarr", progress=False)
    assert not os.path.lexists(tmp_path / "s.zarr")


def test_gzip_lone_cr_and_sidecar_files_make_the_same_store(letor_file, tmp_path):
    reference = read_svmlight(letor_file)
    text = letor_file.read_text()
    gz = tmp_path / "train.txt.gz"
    gz.write_bytes(gzip.compress(text.encode()))
    cr = tmp_path / "mac.txt"
    cr.write_bytes(text.replace("\n", "\r").encode())
    lightgbm = tmp_path / "lightgbm.txt"
    lightgbm.write_text(
        "".join(line.split(" ", 2)[0] + " " + line.split(" ", 2)[2] + "\n" for line in text.splitlines())
    )
    (tmp_path / "lightgbm.txt.query").write_text(
        "\n".join(str(n) for n in np.unique(reference.qid, return_counts=True)[1])
    )
    for source in (gz, cr, lightgbm):
        store = tmp_path / f"{source.name}.zarr"
        write_query_store(source, store, dtype=np.float64, progress=False)
        X, y, qid = (a.compute() for a in open_query_store(store))
        np.testing.assert_array_equal(X, reference.X.toarray())
        np.testing.assert_array_equal(y, reference.y)
        if source is lightgbm:  # query ids 0, 1, ... in file order
            np.testing.assert_array_equal(
                np.unique(qid, return_index=True)[1], np.unique(reference.qid, return_index=True)[1]
            )
        else:
            np.testing.assert_array_equal(qid, reference.qid)


def test_the_store_command_reports_progress_in_lines_and_takes_its_options(letor_file, tmp_path, rankopt_command):
    rankopt = rankopt_command
    done = rankopt("store", letor_file, tmp_path / "s.zarr", "--max-features", 3)
    assert done.returncode == 2 and "at most 3 features" in done.stderr
    done = rankopt("store", letor_file, tmp_path / "s.zarr", "--threads", 2)
    assert done.returncode == 0, done.stderr
    assert "rankopt: checking train.txt: 100%" in done.stderr and "rankopt: writing train.txt: 100%" in done.stderr
    again = rankopt("store", letor_file, tmp_path / "s.zarr")
    assert again.returncode == 2 and "which exists" in again.stderr and "--overwrite" in again.stderr
    assert rankopt("store", letor_file, tmp_path / "s.zarr", "--overwrite").returncode == 0
    (tmp_path / "plain").mkdir()
    refused = rankopt("store", letor_file, tmp_path / "plain", "--overwrite")
    assert refused.returncode == 2 and "not one" in refused.stderr


def test_train_on_a_directory_that_is_not_a_store_says_so(tmp_path, capsys):
    (tmp_path / "half").mkdir()
    assert main(["train", str(tmp_path / "half"), str(tmp_path / "m.npz")]) == 2
    assert "which is neither (no partition table" in capsys.readouterr().err


def _partial_chunks(folder) -> int:
    """Files written so far under a writer's partial sibling's X array."""
    partials = [os.path.join(folder, name) for name in _siblings(folder) if "partial" in name]
    return sum(len(files) for partial in partials for _, _, files in os.walk(os.path.join(partial, "X")))


def test_a_killed_store_command_leaves_the_destination_as_it_was(tmp_path, rng):
    source = tmp_path / "big.txt"
    source.write_text(_letor_text(rng, 15000))  # about 100k rows: hundreds of zarr chunks at 100-row partitions
    store = tmp_path / "s.zarr"
    write_query_store(source, store, progress=False)
    before = sorted(
        (root, name, os.path.getsize(os.path.join(root, name))) for root, _, names in os.walk(store) for name in names
    )
    X_before = open_query_store(store)[0].compute()
    process = subprocess.Popen(
        [sys.executable, "-m", "rankopt", "store", str(source), str(store), "--overwrite", "--partition-rows", "100"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        cwd=tempfile.gettempdir(),
    )
    deadline = time.monotonic() + 120
    while _partial_chunks(tmp_path) < 3 and time.monotonic() < deadline and process.poll() is None:
        time.sleep(0.001)
    assert process.poll() is None, "the write ended before it could be killed"
    os.kill(process.pid, signal.SIGKILL)
    process.wait()
    assert _partial_chunks(tmp_path) >= 3  # killed mid-write, its rows half on disk beside the store
    after = sorted(
        (root, name, os.path.getsize(os.path.join(root, name))) for root, _, names in os.walk(store) for name in names
    )
    assert after == before
    np.testing.assert_array_equal(open_query_store(store)[0].compute(), X_before)
    write_query_store(source, store, overwrite=True, progress=False)  # the next write beside it tidies up
    assert _siblings(tmp_path) == []


@pytest.fixture
def model_and_files(tmp_path, rng):
    text = _letor_text(rng, 80)
    path = tmp_path / "test.txt"
    path.write_text(text)
    data = read_svmlight(path)
    model = RankSVM(loss="pairwise", C=1.0).fit(data.X, data.y, qid=data.qid)
    save_model(model, tmp_path / "m.npz")
    store = tmp_path / "test.zarr"
    write_query_store(path, store, dtype=np.float64, partition_rows=90, progress=False)
    return tmp_path / "m.npz", path, store


def test_evaluate_and_predict_read_a_store_as_they_read_the_file(model_and_files, tmp_path, capsys):
    model, path, store = model_and_files
    outputs = {}
    for name, data in (("file", path), ("store", store)):
        assert main(["predict", str(model), str(data), "-o", str(tmp_path / f"{name}.scores")]) == 0
        assert main(["evaluate", str(model), str(data), "--per-query", str(tmp_path / f"{name}.tsv")]) == 0
        outputs[name] = capsys.readouterr().out
    assert (tmp_path / "file.scores").read_text() == (tmp_path / "store.scores").read_text()
    assert (tmp_path / "file.tsv").read_text() == (tmp_path / "store.tsv").read_text()
    assert outputs["file"] == outputs["store"] and "MAP" in outputs["file"]
    status = main(["predict", str(model), str(path), "--workers", "2"])
    assert status == 2 and "expected --workers with a query store" in capsys.readouterr().err


def test_evaluate_and_predict_on_workers(model_and_files, tmp_path, rankopt_command):
    rankopt = rankopt_command
    model, path, store = model_and_files
    done = rankopt("predict", model, store, "-o", tmp_path / "w.scores", "--workers", 2, "-v")
    assert done.returncode == 0, done.stderr
    # The scheduler's and nannies' INFO lines stay out of -v (its handler writes "name: message" lines).
    assert not [line for line in done.stderr.splitlines() if line.startswith("distributed.")]
    file_scores = rankopt("predict", model, path).stdout
    assert (tmp_path / "w.scores").read_text() == file_scores
    evaluated = rankopt("evaluate", model, store, "--workers", 2)
    assert evaluated.returncode == 0 and evaluated.stdout == rankopt("evaluate", model, path).stdout
    assert [name for name in os.listdir(tmp_path) if name.startswith(".rankopt-scores-")] == []
