"""Helpers for tests that tamper with saved model files."""

import io
import json
import zipfile

import numpy as np


def rewrite_archive(src, dst, **changes):
    """Copy the .npz model file ``src`` to ``dst`` with entries replaced (or removed, for None)."""
    with np.load(src, allow_pickle=False) as archive:
        contents = {key: archive[key] for key in archive.files}
    for key, value in changes.items():
        if value is None:
            del contents[key]
        else:
            contents[key] = np.array(value)
    with open(dst, "wb") as handle:
        np.savez(handle, **contents)


def archive_members(path) -> dict[str, bytes]:
    with zipfile.ZipFile(path) as archive:
        return {name: archive.read(name) for name in archive.namelist()}


def write_archive(path, members: dict[str, bytes], deflate=()) -> None:
    with zipfile.ZipFile(path, "w") as archive:
        for name, data in members.items():
            kind = zipfile.ZIP_DEFLATED if name in deflate else zipfile.ZIP_STORED
            archive.writestr(zipfile.ZipInfo(name), data, compress_type=kind)


def npy_header(shape, descr="<f8") -> bytes:
    """A .npy file holding only a header that claims ``shape`` of ``descr``."""
    buffer = io.BytesIO()
    np.lib.format.write_array_header_1_0(buffer, {"descr": descr, "fortran_order": False, "shape": shape})
    return buffer.getvalue()


def npy_bytes(value) -> bytes:
    buffer = io.BytesIO()
    np.save(buffer, np.asarray(value), allow_pickle=False)
    return buffer.getvalue()


def claim_size(path, member: str, claimed: int) -> None:
    """Rewrite the zip headers (local and central) of ``member`` to claim ``claimed`` bytes, stored and inflated."""
    raw = bytearray(path.read_bytes())
    name = member.encode()
    for signature, sizes_at in ((b"PK\x03\x04", 18), (b"PK\x01\x02", 20)):
        name_at = 30 if signature == b"PK\x03\x04" else 46
        start = raw.find(signature)
        while start != -1:
            if raw[start + name_at : start + name_at + len(name)] == name:
                raw[start + sizes_at : start + sizes_at + 8] = claimed.to_bytes(4, "little") * 2
            start = raw.find(signature, start + 4)
    path.write_bytes(bytes(raw))


def lying_files(tmp_path, model_file) -> list:
    """Small files whose zip headers claim ~4 GB members: a 2 GB string header, a 2 GB coef with a matching width."""
    members = archive_members(model_file)
    with np.load(model_file) as archive:
        fitted = json.loads(str(archive["fitted"][()]))
    files = []
    for name, member, payload, extra in (
        ("string", "format.npy", npy_header((), descr="<U500000000") + bytes(64), {}),
        ("coef", "coef.npy", npy_header((2**28,)) + bytes(64), {"fitted.npy": npy_bytes(json.dumps(fitted))}),
    ):
        if name == "coef":
            fitted_wide = {**fitted, "n_features_in_": 2**28}
            extra = {"fitted.npy": npy_bytes(json.dumps(fitted_wide))}
        path = tmp_path / f"claims-{name}.npz"
        write_archive(path, {**members, **extra, member: payload})
        claim_size(path, member, 4_000_000_000)
        assert path.stat().st_size < 10_000
        files.append(path)
    return files
