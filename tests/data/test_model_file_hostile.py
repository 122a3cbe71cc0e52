"""Hostile model files: each gets one ModelFileError, read as data, in bounded memory."""

from __future__ import annotations

import io
import json
import subprocess
import sys
import textwrap

import numpy as np
import pytest
from oracles.model_files import archive_members, lying_files, npy_bytes, npy_header, rewrite_archive, write_archive

from rankopt import RankSVM
from rankopt.data.model_file import ModelFileError, load_model, save_model


@pytest.fixture(scope="module")
def model_file(tmp_path_factory):
    rng = np.random.default_rng(0)
    X = rng.standard_normal((60, 4))
    y = X[:, 0] > 0.5
    path = tmp_path_factory.mktemp("model") / "m.npz"
    save_model(RankSVM(C=1.0).fit(X, y), path)
    return path


def test_a_genuine_file_loads(model_file):
    assert load_model(model_file).coef_.shape == (4,)


def test_deeply_nested_json_is_refused(tmp_path, model_file):
    bad = tmp_path / "nested.npz"
    rewrite_archive(model_file, bad, params="[" * 100_000 + "]" * 100_000)
    with pytest.raises(ModelFileError, match="nest at most"):
        load_model(bad)


@pytest.mark.parametrize("items", [2**31, 2**40])
def test_a_header_claiming_a_huge_array_is_refused_before_allocation(tmp_path, model_file, items):
    members = archive_members(model_file)
    members["coef.npy"] = npy_header((items,))
    bad = tmp_path / "huge.npz"
    write_archive(bad, members)
    with pytest.raises(ModelFileError, match="at most 4 values"):
        load_model(bad)


def test_a_zip_bomb_is_refused_by_its_inflation(tmp_path, model_file):
    members = archive_members(model_file)
    members["coef.npy"] = npy_header((4,)) + bytes(50_000_000)  # 50 MB of zeros, deflated to ~50 kB
    bad = tmp_path / "bomb.npz"
    write_archive(bad, members, deflate={"coef.npy"})
    assert bad.stat().st_size < 1_000_000
    with pytest.raises(ModelFileError, match="would inflate"):
        load_model(bad)


def test_a_deflated_genuine_file_still_loads(tmp_path, model_file):
    good = tmp_path / "deflated.npz"
    write_archive(good, archive_members(model_file), deflate=set(archive_members(model_file)))
    np.testing.assert_array_equal(load_model(good).coef_, load_model(model_file).coef_)


@pytest.mark.parametrize(
    "key, value, message",
    [
        ("decision_function", "boom", "not fitted values of this model"),
        ("n_features_in_", -3, "n_features_in_ = -3 is not a valid value"),
        ("n_features_in_", 4.5, "is not a valid value"),
        ("converged_", "yes", "converged_ = 'yes' is not a valid value"),
        ("n_iter_", [1, 2], "is not a valid value"),
    ],
)
def test_fitted_values_come_from_an_allow_list_with_their_types(tmp_path, model_file, key, value, message):
    with np.load(model_file) as archive:
        fitted = json.loads(str(archive["fitted"][()]))
    fitted[key] = value
    bad = tmp_path / "fitted.npz"
    rewrite_archive(model_file, bad, fitted=json.dumps(fitted))
    with pytest.raises(ModelFileError, match=message):
        load_model(bad)


@pytest.mark.parametrize(
    "change, message", [({"unknown_param": 1}, "has no parameters"), ({"C": {"a": 1}}, "parameter C to be a number")]
)
def test_parameters_come_from_the_estimator(tmp_path, model_file, change, message):
    with np.load(model_file) as archive:
        params = json.loads(str(archive["params"][()]))
    bad = tmp_path / "params.npz"
    rewrite_archive(model_file, bad, params=json.dumps({**params, **change}))
    with pytest.raises(ModelFileError, match=message):
        load_model(bad)


@pytest.mark.parametrize(
    "value, message",
    [
        (np.array([1 + 2j, 0, 0, 0]), "real numbers, got dtype complex128"),
        (np.array(["a", "b", "c", "d"]), "real numbers, got dtype <U1"),
        (np.array([1.0, 2.0]), "shape \\(4,\\)"),
        (np.array([1.0, np.nan, 0, 0]), "finite weights"),
    ],
)
def test_arrays_of_another_kind_or_shape_are_refused(tmp_path, model_file, value, message):
    members = archive_members(model_file)
    members["coef.npy"] = npy_bytes(value)
    bad = tmp_path / "coef.npz"
    write_archive(bad, members)
    with pytest.raises(ModelFileError, match=message):
        load_model(bad)


def test_object_arrays_are_refused_without_unpickling(tmp_path, model_file):
    members = archive_members(model_file)
    buffer = io.BytesIO()
    np.save(buffer, np.array([object()] * 4, dtype=object), allow_pickle=True)
    members["coef.npy"] = buffer.getvalue()
    bad = tmp_path / "object.npz"
    write_archive(bad, members)
    with pytest.raises(ModelFileError, match="real numbers, got dtype object"):
        load_model(bad)


def test_hostile_files_load_in_bounded_memory(tmp_path, model_file):
    """Each hostile file is refused with at most 200 MB of address space beyond the interpreter's."""
    members = archive_members(model_file)
    files = []
    for name, payload, deflate in (
        ("huge", npy_header((2**40,)), ()),
        ("bomb", npy_header((4,)) + bytes(200_000_000), ("coef.npy",)),
        ("lying", npy_header((2**28,)) + bytes(1000), ()),
    ):
        path = tmp_path / f"{name}.npz"
        write_archive(path, {**members, "coef.npy": payload}, deflate=deflate)
        files.append(str(path))
    assert _outcomes_under_a_memory_limit(tmp_path, model_file, files) == ["refused"] * 3


def _outcomes_under_a_memory_limit(tmp_path, model_file, files) -> list[str]:
    """Load each file with 200 MB of address space beyond the interpreter's: "refused" per ModelFileError."""
    script = textwrap.dedent(
        f"""
        import resource
        from rankopt.data.model_file import ModelFileError, load_model
        load_model({str(model_file)!r})  # imports what loading needs, before the limit
        with open("/proc/self/statm") as f:
            pages = int(f.read().split()[0])
        limit = pages * resource.getpagesize() + 200 * 2**20
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
        for path in {[str(path) for path in files]!r}:
            try:
                load_model(path)
            except ModelFileError:
                print("refused")
        """
    )
    # Outside the checkout: from its root, python -c would import the source tree (no compiled kernels).
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    return done.stdout.split()


def test_members_claiming_more_bytes_than_the_file_holds_are_refused(tmp_path, model_file):
    """load_model allocated ~2 GB from these headers before: a MemoryError, not a ModelFileError, under a limit."""
    for path in lying_files(tmp_path, model_file):
        with pytest.raises(ModelFileError, match="claims 4000000000 stored bytes"):
            load_model(path)


def test_a_stored_member_inflating_to_another_size_is_refused(tmp_path, model_file):
    members = archive_members(model_file)
    path = tmp_path / "inflating.npz"
    write_archive(path, members)
    raw = bytearray(path.read_bytes())
    start = raw.find(b"PK\x01\x02")  # the first member's central entry: its inflated size only
    while raw[start + 46 : start + 46 + len(b"coef.npy")] != b"coef.npy":
        start = raw.find(b"PK\x01\x02", start + 4)
    raw[start + 24 : start + 28] = (10**6).to_bytes(4, "little")
    path.write_bytes(bytes(raw))
    with pytest.raises(ModelFileError, match="stored uncompressed"):
        load_model(path)


def test_lying_headers_are_refused_under_an_address_space_limit(tmp_path, model_file):
    files = lying_files(tmp_path, model_file)
    assert _outcomes_under_a_memory_limit(tmp_path, model_file, files) == ["refused"] * 2
