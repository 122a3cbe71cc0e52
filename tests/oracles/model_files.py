"""Helpers for tests that tamper with saved model files."""

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
