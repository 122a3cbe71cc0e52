"""Saving a fitted RankSVM to a small, versioned ``.npz`` file and reading it back.

The file is a NumPy ``.npz`` archive (no pickles) holding

========================  =====================================================
``format``                the string ``"rankopt-model"``
``format_version``        :data:`MODEL_FORMAT_VERSION`
``rankopt_version``       the rankopt release that wrote the file
``coef``                  w, float64 of shape (n_features,)
``n_features``            the number of features
``loss``                  the loss name (e.g. ``"ap"``)
``params``                JSON: C, tol, max_iter, inference
``fit_info``              JSON: n_iter, converged, the inference method used
========================  =====================================================

The format, not the release, is versioned: a reader accepts any file of its
own format version whoever wrote it, and rejects every other version, naming
the release that wrote the file.  Only ``coef`` and ``n_features`` are needed
to score; the rest records how the model was trained.
"""
from __future__ import annotations

import json
import os
import zipfile

import numpy as np

__all__ = ["MODEL_FORMAT", "MODEL_FORMAT_VERSION", "ModelFileError", "load_model", "save_model"]

MODEL_FORMAT = "rankopt-model"
MODEL_FORMAT_VERSION = 1
_KEYS = ("format", "format_version", "rankopt_version", "coef", "n_features", "loss", "params", "fit_info")
_ZIP_MAGIC = b"PK\x03\x04"


class ModelFileError(ValueError):
    """A file is not a rankopt model file this release can read."""


def save_model(model, path) -> None:
    """Write a fitted :class:`~rankopt.RankSVM` to ``path`` (the name is used as given)."""
    from rankopt import __version__
    from sklearn.utils.validation import check_is_fitted

    check_is_fitted(model, "coef_")
    coef = np.asarray(model.coef_, dtype=np.float64)
    params = {"C": float(model.C), "tol": float(model.tol), "max_iter": int(model.max_iter),
              "inference": model.inference}
    fit_info = {"n_iter": int(model.n_iter_), "converged": bool(model.converged_),
                "inference": model.inference_}
    # An open handle keeps np.savez from appending ".npz" to the caller's name.
    with open(os.fspath(path), "wb") as handle:
        np.savez(
            handle,
            format=np.array(MODEL_FORMAT),
            format_version=np.array(MODEL_FORMAT_VERSION),
            rankopt_version=np.array(__version__),
            coef=coef,
            n_features=np.array(coef.size),
            loss=np.array(model.loss_.name),
            params=np.array(json.dumps(params)),
            fit_info=np.array(json.dumps(fit_info)),
        )


def load_model(path):
    """Read a model file written by :func:`save_model` as a fitted RankSVM.

    The estimator has ``coef_``, ``n_features_in_``, ``n_iter_``,
    ``converged_`` and ``inference_`` restored and its parameters set; the
    loss is kept as its name (``loss_`` and ``history_`` are not stored), so
    a model trained with a plugin's loss scores without that plugin.

    Raises
    ------
    OSError
        The file cannot be opened.
    ModelFileError
        The file is not a rankopt model file, is damaged, or has another
        format version.
    """
    from rankopt.models.rank_svm import RankSVM

    path = os.fspath(path)
    with open(path, "rb") as handle:
        magic = handle.read(len(_ZIP_MAGIC))
    if magic != _ZIP_MAGIC:
        raise ModelFileError(f"{path!r} is not a rankopt model file (expected an .npz archive "
                             "written by `rankopt train`)")
    try:
        with np.load(path, allow_pickle=False) as archive:
            if "format" not in archive.files or str(archive["format"][()]) != MODEL_FORMAT:
                raise ModelFileError(f"{path!r} is an .npz archive but not a rankopt model file")
            version = archive["format_version"][()] if "format_version" in archive.files else None
            writer = str(archive["rankopt_version"][()]) if "rankopt_version" in archive.files else "unknown"
            if version is None or int(version) != MODEL_FORMAT_VERSION:
                raise ModelFileError(
                    f"{path!r} has model format version {version}, written by rankopt {writer}; "
                    f"this rankopt reads version {MODEL_FORMAT_VERSION} only: retrain the model"
                )
            missing = [key for key in _KEYS if key not in archive.files]
            if missing:
                raise ModelFileError(f"{path!r} is a damaged rankopt model file: it lacks {missing}")
            coef = np.asarray(archive["coef"], dtype=np.float64)
            n_features = int(archive["n_features"][()])
            loss = str(archive["loss"][()])
            params = json.loads(str(archive["params"][()]))
            fit_info = json.loads(str(archive["fit_info"][()]))
        if coef.shape != (n_features,) or n_features < 1 or not np.all(np.isfinite(coef)):
            raise ModelFileError(
                f"{path!r} is a damaged rankopt model file: expected {n_features} finite weights, "
                f"got an array of shape {coef.shape} instead"
            )
        model = RankSVM(loss=loss, C=params["C"], tol=params["tol"], max_iter=params["max_iter"],
                        inference=params["inference"])
        model.coef_ = coef
        model.n_features_in_ = n_features
        model.n_iter_ = int(fit_info["n_iter"])
        model.converged_ = bool(fit_info["converged"])
        model.inference_ = fit_info["inference"]
    except ModelFileError:
        raise
    except (zipfile.BadZipFile, ValueError, KeyError, TypeError, EOFError) as exc:
        raise ModelFileError(f"{path!r} is a damaged rankopt model file: {exc!r}") from None
    return model
