"""Fuzzing the two file formats rankopt reads: only the documented errors, never a traceback.

SVM-light lines are drawn from a grammar that mixes valid tokens with the
ones a hostile or broken writer produces (huge or negative indices, qids
beyond 64 bits, NaN, missing colons, stray bytes, qid on some lines only);
model files are a genuine file with members replaced, JSON rewritten, bytes
flipped or cut.  ``read_svmlight`` may only raise ``ValueError`` (its
documented error for a bad file), ``rankopt train`` / ``evaluate`` may only
exit 0 or print one ``rankopt: error:`` line and exit 2, and ``load_model``
may only raise ``ModelFileError``.
"""

from __future__ import annotations

import io
import json
import zipfile

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rankopt import RankSVM
from rankopt.cli import main
from rankopt.data.loaders import read_svmlight
from rankopt.data.model_file import ModelFileError, load_model, save_model

SETTINGS = {"deadline": None, "suppress_health_check": [HealthCheck.function_scoped_fixture, HealthCheck.too_slow]}

labels = st.one_of(
    st.sampled_from(["0", "1", "-1", "2", "4", "+1", "1.0", "0.5", "nan", "inf", "-inf", "1e19", "x", ""]),
    st.integers(-5, 5).map(str),
)
indices = st.one_of(st.integers(0, 40), st.sampled_from([-1, 2**20, 2**20 + 1, 10**7, 2**31 - 1, 2**31, 2**63, 10**30]))
values = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True).map(repr),
    st.sampled_from(["1", "0", "-0", "1e308", "1e-320", "nan", "abc", ""]),
)
feature = st.one_of(
    st.tuples(indices, values).map(lambda p: f"{p[0]}:{p[1]}"),
    st.sampled_from(["3", ":1", "1:", "1:2:3", "qid", "qid:", "#", "\x00", "é:1"]),
)
qid_token = st.one_of(
    st.integers(0, 5).map(lambda q: f"qid:{q}"),
    st.sampled_from(["qid:-1", "qid:9223372036854775807", "qid:9223372036854775808", "qid:1.5", "qid:x"]),
)
line = st.tuples(labels, st.one_of(st.none(), qid_token), st.lists(feature, max_size=5), st.booleans()).map(
    lambda t: " ".join([t[0], *([t[1]] if t[1] else []), *t[2]]) + (" # comment" if t[3] else "")
)
files = st.one_of(
    st.lists(line, min_size=0, max_size=12).map(lambda lines: "\n".join(lines).encode("utf-8", "surrogatepass")),
    st.binary(max_size=200),
)


@settings(max_examples=1500, **SETTINGS)
@given(content=files)
def test_read_svmlight_raises_only_value_error(tmp_path, content):
    path = tmp_path / "fuzz.svm"
    path.write_bytes(content)
    try:
        data = read_svmlight(path)
    except ValueError:
        return
    assert data.X.shape[0] == data.y.size
    assert data.qid is None or data.qid.size == data.y.size
    assert data.X.shape[1] <= 2**20


@settings(max_examples=300, **SETTINGS)
@given(content=files)
def test_cli_train_and_evaluate_fail_in_one_line(tmp_path, capsys, content):
    path = tmp_path / "fuzz.svm"
    path.write_bytes(content)
    model = tmp_path / "model.npz"
    for argv in (["train", path, model, "--max-iter", "5"], ["evaluate", model, path]):
        if argv[0] == "evaluate" and not model.exists():
            continue
        status = main([str(a) for a in argv])
        err = capsys.readouterr().err
        assert status in (0, 2)
        assert "Traceback" not in err
        if status == 2:
            errors = [entry for entry in err.splitlines() if entry.startswith("rankopt: error: ")]
            assert len(errors) == 1, err


@pytest.fixture(scope="module")
def genuine(tmp_path_factory):
    rng = np.random.default_rng(0)
    X = rng.standard_normal((40, 3))
    path = tmp_path_factory.mktemp("genuine") / "m.npz"
    save_model(RankSVM().fit(X, X[:, 0] > 0.3), path)
    with zipfile.ZipFile(path) as archive:
        return path.read_bytes(), {name: archive.read(name) for name in archive.namelist()}


def _npy(value) -> bytes:
    buffer = io.BytesIO()
    np.save(buffer, value, allow_pickle=False)
    return buffer.getvalue()


json_values = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(), st.floats(), st.text(max_size=5)),
    lambda children: st.one_of(
        st.lists(children, max_size=3), st.dictionaries(st.text(max_size=4), children, max_size=3)
    ),
    max_leaves=10,
)
arrays = st.one_of(
    st.sampled_from(
        [
            np.zeros(3),
            np.zeros(4),
            np.zeros((3, 1)),
            np.array([1 + 1j, 0, 0]),
            np.array(["a", "b", "c"]),
            np.array(3),
            np.array("rankopt-model"),
            np.array(2),
            np.array([np.nan, 0, 0]),
            np.zeros(3, dtype=np.float32),
            np.zeros(3, dtype=bool),
            np.zeros(3, dtype=np.int8),
        ]
    ),
    json_values.map(lambda v: np.array(json.dumps(v))),
)
member_names = st.sampled_from(
    ["format", "format_version", "rankopt_version", "model_type", "params", "fitted", "coef", "loss"]
)
edits = st.one_of(
    st.tuples(st.just("replace"), member_names, arrays),
    st.tuples(st.just("drop"), member_names, st.none()),
    st.tuples(st.just("json"), st.sampled_from(["params", "fitted"]), json_values),
    st.tuples(st.just("raw"), member_names, st.binary(max_size=64)),
    # A .npy header alone, claiming a large array or string (a hostile header allocates nothing).
    st.tuples(
        st.just("header"),
        member_names,
        st.tuples(st.sampled_from(["<f8", "<U500000000", "<U8", "<i8"]), st.sampled_from([(), (2**28,), (4,)])),
    ),
)
#: A zip header field to overwrite: (which entry, local or central; which size; the claimed value).
size_claims = st.tuples(
    st.integers(0, 20), st.sampled_from(["local", "central"]), st.sampled_from([0, 4]), st.integers(0, 2**32 - 1)
)


def _claim(content: bytearray, claim) -> None:
    """Overwrite one compressed (0) or inflated (4) size of the n-th local or central zip header."""
    index, where, which, value = claim
    signature, sizes_at = (b"PK\x03\x04", 18) if where == "local" else (b"PK\x01\x02", 20)
    starts = [i for i in range(len(content)) if content[i : i + 4] == signature]
    if starts:
        at = starts[index % len(starts)] + sizes_at + which
        content[at : at + 4] = value.to_bytes(4, "little")


@settings(max_examples=700, **SETTINGS)
@given(
    edit_list=st.lists(edits, min_size=1, max_size=3),
    flip=st.one_of(st.none(), st.integers(0, 10**6)),
    claims=st.lists(size_claims, max_size=2),
)
def test_load_model_raises_only_model_file_error(tmp_path, genuine, edit_list, flip, claims):
    raw, members = genuine
    members = dict(members)
    for kind, key, payload in edit_list:
        name = f"{key}.npy"
        if kind == "replace":
            members[name] = _npy(payload)
        elif kind == "drop":
            members.pop(name, None)
        elif kind == "json":
            members[name] = _npy(np.array(json.dumps(payload)))
        elif kind == "header":
            descr, shape = payload
            header = io.BytesIO()
            np.lib.format.write_array_header_1_0(header, {"descr": descr, "fortran_order": False, "shape": shape})
            members[name] = header.getvalue() + bytes(16)
        else:
            members[name] = payload
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        for name, data in members.items():
            archive.writestr(name, data)
    content = bytearray(buffer.getvalue())
    for claim in claims:
        _claim(content, claim)
    if flip is not None:
        position = flip % len(content)
        content[position] ^= 0xFF
        if flip % 3 == 0:
            content = content[: position + 1]  # cut
    path = tmp_path / "fuzz.npz"
    path.write_bytes(bytes(content))
    try:
        model = load_model(path)
    except ModelFileError:
        return
    assert model.coef_.shape == (model.n_features_in_,) and np.all(np.isfinite(model.coef_))
