"""Saving fitted rankopt estimators to a small, versioned ``.npz`` file and reading them back.

Fitted estimators also pickle (``pickle``/``joblib``); this format is the
plain, pickle-free export: a NumPy ``.npz`` archive holding arrays and JSON
strings only, readable from any language with an ``.npz`` reader.

========================  =====================================================
``format``                the string ``"rankopt-model"``
``format_version``        :data:`MODEL_FORMAT_VERSION`
``rankopt_version``       the rankopt release that wrote the file
``model_type``            the estimator's class, e.g. ``"RankSVM"``
``loss``                  the loss name (e.g. ``"ap"``), when the model has one
``params``                JSON: the constructor parameters (``get_params``)
``fitted``                JSON: the fitted scalars (``n_features_in_``,
                          ``n_iter_``, ``converged_``, …) and, for a model
                          fitted on a DataFrame, ``feature_names_in_``
``coef`` (etc.)           each fitted array, float64, named after its
                          attribute without the trailing underscore
========================  =====================================================

Which attributes are stored is listed per estimator in :data:`EXPORTS`;
the training history and the loss instance are not stored (the loss is kept
by name, so a model trained with a plugin's loss scores without that plugin).

The format, not the release, is versioned: a reader accepts any file of its
own format version whoever wrote it, and rejects every other version, naming
the release that wrote the file.  Version 1 (rankopt 0.1 before the scale
work) held RankSVM models only and is not read: retrain.
"""

from __future__ import annotations

import importlib.metadata
import json
import numbers
import os
import zipfile
from dataclasses import dataclass, field

import numpy as np

from rankopt.exceptions import brief

__all__ = [
    "EXPORTS",
    "FITTED_COMMON",
    "MODEL_FORMAT",
    "MODEL_FORMAT_VERSION",
    "ModelExport",
    "ModelFileError",
    "load_model",
    "per_feature",
    "register_model_export",
    "save_model",
]

MODEL_FORMAT = "rankopt-model"
MODEL_FORMAT_VERSION = 2
_HEADER = ("format", "format_version", "rankopt_version", "model_type", "params", "fitted")
_ZIP_MAGIC = b"PK\x03\x04"


class ModelFileError(ValueError):
    """A file is not a rankopt model file this release can read (or not of the expected model type)."""


@dataclass(frozen=True)
class ModelExport:
    """What of a fitted estimator of one class a model file holds (:func:`register_model_export`).

    Attributes
    ----------
    cls : type
        The estimator class.
    values : tuple of str
        Fitted JSON values (numbers, booleans, strings, None, lists of numbers).
    arrays : dict
        Fitted float arrays: attribute → its shape as a function of
        ``n_features_in_``.
    defaults : dict
        Fitted values added after format version 2 was fixed, with the value a file without them means.
    """

    cls: type
    values: tuple[str, ...] = ()
    arrays: dict = field(default_factory=lambda: {"coef_": per_feature})
    defaults: dict = field(default_factory=dict)


def per_feature(d: int) -> tuple[int, ...]:
    """The shape of a weight array with one weight per feature."""
    return (d,)


#: The fitted values every estimator of the model file stores.
FITTED_COMMON = ("n_features_in_", "n_iter_", "converged_")
#: The entry-point group of functions that register the estimators a model file can hold (their packages
#: declare it; rankopt's own estimators are there too): called when a file names a class not registered yet.
ENTRY_POINT_GROUP = "rankopt.model_exports"

#: The estimators a model file can hold, by class name: filled by :func:`register_model_export`.
EXPORTS: dict[str, ModelExport] = {}


def register_model_export(cls: type, *, values=(), arrays=None, defaults=None) -> None:
    """Let model files hold fitted estimators of ``cls``: its constructor parameters, the fitted JSON
    ``values`` and float ``arrays`` (attribute → shape as a function of ``n_features_in_``; default
    ``coef_`` with one weight per feature).  Called by the module defining the estimator; a package that
    adds estimators declares a function importing those modules in the ``rankopt.model_exports``
    entry-point group, so that a file naming one of its classes is read before anything imported them."""
    arrays = {"coef_": per_feature} if arrays is None else dict(arrays)
    EXPORTS[cls.__name__] = ModelExport(cls, tuple(values), arrays, dict(defaults or {}))


def _registered(name: str) -> ModelExport | None:
    """The export of the class ``name``, after the registering modules are imported if it is not known yet."""
    if name not in EXPORTS:
        for entry_point in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP):
            entry_point.load()()
    return EXPORTS.get(name)


def _export_for(model) -> tuple[str, ModelExport]:
    export = EXPORTS.get(type(model).__name__)
    if export is None or export.cls is not type(model):
        raise ValueError(
            f"expected one of the estimators {sorted(EXPORTS)} to export, got a {type(model).__qualname__} "
            "instead; pickle it (pickle or joblib) to save it"
        )
    return type(model).__name__, export


def _json_param(model_type: str, key: str, value):
    """A constructor parameter as JSON: losses by name, numbers, strings, None."""
    from rankopt.losses.base import Loss

    if isinstance(value, Loss):
        return value.name
    if value is None or isinstance(value, (bool, str)):
        return value
    if isinstance(value, np.ndarray) and value.dtype.kind in "biuf":
        return value.tolist()
    if isinstance(value, numbers.Integral):
        return int(value)
    if isinstance(value, numbers.Real):
        return float(value)
    raise ValueError(
        f"expected the parameters of {model_type} to be numbers, strings, None or numeric arrays to export "
        "them, got "
        f"{key}={value!r} instead; pickle the model to keep it"
    )


def _json_value(value):
    if isinstance(value, (np.bool_, bool)):
        return bool(value)
    if isinstance(value, numbers.Integral):
        return int(value)
    if isinstance(value, numbers.Real):
        return float(value)
    if isinstance(value, (list, tuple, np.ndarray)):
        return [_json_value(item) for item in value]
    return value


def save_model(model, path) -> None:
    """Write a fitted estimator (one of :data:`EXPORTS`) to ``path`` (the name is used as given)."""
    from sklearn.utils.validation import check_is_fitted

    from rankopt import __version__

    model_type, export = _export_for(model)
    check_is_fitted(model, "coef_")
    params = {key: _json_param(model_type, key, value) for key, value in model.get_params(deep=False).items()}
    fitted = {key: _json_value(getattr(model, key)) for key in export.values}
    if hasattr(model, "feature_names_in_"):  # only set when fitted on a DataFrame with string column names
        fitted["feature_names_in_"] = [str(name) for name in model.feature_names_in_]
    arrays = {key.rstrip("_"): np.asarray(getattr(model, key), dtype=np.float64) for key in export.arrays}
    loss = getattr(model, "loss_", None)
    extra = {} if loss is None else {"loss": np.array(loss.name)}
    # An open handle keeps np.savez from appending ".npz" to the caller's name.
    with open(os.fspath(path), "wb") as handle:
        # numpy's stub lets a **dict fill savez's allow_pickle, hence the two ignores below.
        np.savez(
            handle,
            format=np.array(MODEL_FORMAT),
            format_version=np.array(MODEL_FORMAT_VERSION),
            rankopt_version=np.array(__version__),
            model_type=np.array(model_type),
            params=np.array(json.dumps(params)),
            fitted=np.array(json.dumps(fitted)),
            **extra,  # type: ignore[arg-type]
            **arrays,  # type: ignore[arg-type]
        )


def _feature_names(path, names, n_features) -> np.ndarray:
    """The stored column names as scikit-learn keeps them: an object array of str, one per feature."""
    if not isinstance(names, list) or len(names) != n_features or not all(isinstance(n, str) for n in names):
        raise ModelFileError(
            f"{path!r} is a damaged rankopt model file: expected feature_names_in_ to hold {n_features} "
            f"column names, got {names!r} instead"
        )
    return np.asarray(names, dtype=object)


def _type_name(model_type) -> str | None:
    if model_type is None or isinstance(model_type, str):
        return model_type
    return model_type.__name__


#: A member of a model file may inflate to at most this plus _INFLATE_RATIO times its stored size:
#: save_model stores members uncompressed (ratio 1), and a hostile archive cannot claim gigabytes
#: behind a few deflated bytes.  A file under 1 MB thus never makes a reader allocate more than
#: about (4 MiB + 8 MB) per member it reads.
_INFLATE_BASE = 1 << 22
_INFLATE_RATIO = 8
#: JSON of the parameters and fitted values nests at most this deep (lists of numbers or names: 2).
_MAX_JSON_DEPTH = 8

#: The fitted values a model file may set, by attribute, and what each must be.
_FITTED_CHECKS = {
    "n_features_in_": lambda v: _is_int(v) and v >= 1,
    "n_iter_": lambda v: _is_int(v) and v >= 0,
    "converged_": lambda v: isinstance(v, bool),
    "inference_": lambda v: v is None or isinstance(v, str),
    "n_easy_": lambda v: v is None or (_is_int(v) and v >= 0),
    "n_hard_constraints_": lambda v: v is None or (_is_int(v) and v >= 0),
    "intercept_": lambda v: _is_float(v),
    "objective_": lambda v: _is_float(v),
    "objectives_": lambda v: isinstance(v, list) and all(_is_float(x) for x in v),
    "init_objectives_": lambda v: isinstance(v, list) and all(_is_float(x) for x in v),
    "eta_": lambda v: _is_float(v) and v > 0,
    "fitted_with_pairs_": lambda v: isinstance(v, bool),
    "fitted_with_qid_": lambda v: isinstance(v, bool),
}


def _is_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_float(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and np.isfinite(value)


def _json_depth(text: str) -> int:
    """How deep the arrays and objects of a JSON text nest (strings skipped), without parsing it."""
    depth = deepest = 0
    in_string = escaped = False
    for char in text:
        if in_string:
            if escaped:
                escaped = False
            elif char == "\\":
                escaped = True
            elif char == '"':
                in_string = False
        elif char == '"':
            in_string = True
        elif char in "[{":
            depth += 1
            deepest = max(deepest, depth)
        elif char in "]}":
            depth -= 1
    return deepest


class _ModelArchive:
    """The members of a model file, each checked from its zip entry and .npy header before it is read."""

    def __init__(self, path: str, archive: zipfile.ZipFile, size: int):
        self.path, self.archive, self.size = path, archive, size
        self.files = {name[: -len(".npy")] for name in archive.namelist() if name.endswith(".npy")}

    def _damaged(self, why: str) -> ModelFileError:
        return ModelFileError(f"{self.path!r} is a damaged rankopt model file: {why}")

    def read(self, key: str, kinds: str, max_items: int) -> np.ndarray:
        """Member ``key``, refused unless its dtype kind is in ``kinds`` and it holds at most ``max_items`` values."""
        info = self.archive.getinfo(f"{key}.npy")
        # The zip headers' sizes are claims: the stored bytes must fit in the file, and a stored
        # (uncompressed) member inflates to exactly them, before any size derived from them is trusted.
        if info.compress_size > self.size - info.header_offset:
            raise self._damaged(
                f"{key} claims {info.compress_size} stored bytes at offset {info.header_offset}, but the file "
                f"holds {self.size} bytes"
            )
        if info.compress_type == zipfile.ZIP_STORED and info.file_size != info.compress_size:
            raise self._damaged(
                f"{key} is stored uncompressed in {info.compress_size} bytes but claims {info.file_size}"
            )
        if info.file_size > _INFLATE_BASE + _INFLATE_RATIO * info.compress_size:
            raise self._damaged(
                f"{key} would inflate from {info.compress_size} to {info.file_size} bytes (save_model stores "
                "members uncompressed; re-save the model)"
            )
        with self.archive.open(info) as handle:
            version = np.lib.format.read_magic(handle)
            if version == (1, 0):
                shape, _, dtype = np.lib.format.read_array_header_1_0(handle)
            elif version == (2, 0):
                shape, _, dtype = np.lib.format.read_array_header_2_0(handle)
            else:
                raise self._damaged(f"{key} has .npy format version {version}, expected 1.0 or 2.0")
        items = int(np.prod(shape, dtype=object))
        if dtype.hasobject or dtype.kind not in kinds:
            raise self._damaged(f"expected {key} to hold {_KIND_NAMES[kinds]}, got dtype {dtype} instead")
        if items > max_items or items * dtype.itemsize > info.file_size:
            raise self._damaged(
                f"expected {key} to hold at most {max_items} values within its {info.file_size} bytes, "
                f"got a header claiming shape {shape} of {dtype} instead"
            )
        with self.archive.open(info) as handle:
            return np.lib.format.read_array(handle, allow_pickle=False)

    def text(self, key: str) -> str:
        value = self.read(key, "U", 1)
        if value.shape != ():
            raise self._damaged(f"expected {key} to be one string, got an array of shape {value.shape} instead")
        return str(value[()])

    def integer(self, key: str) -> int:
        value = self.read(key, "iu", 1)
        if value.shape != ():
            raise self._damaged(f"expected {key} to be one integer, got an array of shape {value.shape} instead")
        return int(value[()])

    def json(self, key: str):
        text = self.text(key)
        if _json_depth(text) > _MAX_JSON_DEPTH:
            raise self._damaged(f"expected {key} to nest at most {_MAX_JSON_DEPTH} levels deep, got more")
        value = json.loads(text)
        if not isinstance(value, dict):
            raise self._damaged(f"expected {key} to be a JSON object, got {type(value).__name__} instead")
        return value


_KIND_NAMES = {"U": "a string", "iu": "an integer", "fiu": "real numbers"}


def _check_params(path: str, cls: type, params: dict) -> dict:
    """The constructor parameters, refused unless ``cls`` takes them and each is a JSON scalar or a list of numbers."""
    known = set(cls().get_params(deep=False))
    unknown = sorted(set(params) - known)
    if unknown:
        raise ModelFileError(f"{path!r} is a damaged rankopt model file: {cls.__name__} has no parameters {unknown}")
    for key, value in params.items():
        scalar = value is None or isinstance(value, (bool, int, float, str))
        numbers_list = isinstance(value, list) and all(_is_float(item) for item in value)
        if not (scalar or numbers_list):
            raise ModelFileError(
                f"{path!r} is a damaged rankopt model file: expected parameter {key} to be a number, a string, "
                f"None or a list of numbers, got {type(value).__name__} instead"
            )
    return params


def _check_fitted(path: str, export: ModelExport, fitted: dict) -> dict:
    """The fitted values, refused unless each is one :data:`EXPORTS` lists for the model, of its type."""
    allowed = {*export.values, "feature_names_in_"}
    unknown = sorted(set(fitted) - allowed)
    if unknown:
        raise ModelFileError(
            f"{path!r} is a damaged rankopt model file: it sets {unknown}, which are not fitted values of this model"
        )
    for key, value in fitted.items():
        check = _FITTED_CHECKS.get(key)
        if check is not None and not check(value):
            raise ModelFileError(
                f"{path!r} is a damaged rankopt model file: {key} = {brief(repr(value), 80)} is not a valid value"
            )
    return fitted


def load_model(path, model_type=None):
    """Read a model file written by :func:`save_model` as a fitted estimator.

    Parameters
    ----------
    path : path-like
    model_type : str or class, optional
        The estimator the caller expects (e.g. ``RankSVM``); a file holding
        another one is refused.

    The estimator has its parameters and the fitted attributes of
    :data:`EXPORTS` restored.  The file is read as data only, and checked
    before anything is allocated from it: every member's declared sizes
    against the file's real size, its ``.npy`` header (dtype, shape) against
    what the model type stores, the JSON's
    nesting, and an allow-list of parameters and fitted values with their
    types.

    Raises
    ------
    OSError
        The file cannot be opened.
    ModelFileError
        The file is not a rankopt model file, is damaged, has another format
        version, or holds another model type than ``model_type``.
    """
    path = os.fspath(path)
    expected = _type_name(model_type)
    with open(path, "rb") as handle:
        magic = handle.read(len(_ZIP_MAGIC))
    if magic != _ZIP_MAGIC:
        raise ModelFileError(
            f"{path!r} is not a rankopt model file (expected an .npz archive "
            "written by `rankopt train` or rankopt.data.save_model)"
        )
    try:
        with open(path, "rb") as raw, zipfile.ZipFile(raw) as zipped:
            archive = _ModelArchive(path, zipped, os.fstat(raw.fileno()).st_size)
            found = _checked_header(path, archive, expected)
            export = EXPORTS[found]
            cls = export.cls
            params = _check_params(path, cls, archive.json("params"))
            fitted = _check_fitted(path, export, archive.json("fitted"))
            names = [key.rstrip("_") for key in export.arrays]
            missing = [key for key in names if key not in archive.files]
            fitted = {**export.defaults, **fitted}
            missing += [key for key in export.values if key not in fitted]
            if missing:
                raise ModelFileError(f"{path!r} is a damaged rankopt model file: it lacks {missing}")
            n_features = fitted["n_features_in_"]
            arrays = _checked_arrays(path, archive, export, n_features)
        if "feature_names_in_" in fitted:
            fitted["feature_names_in_"] = _feature_names(path, fitted["feature_names_in_"], n_features)
        model = cls(**params)
        for key, value in {**fitted, **arrays}.items():
            setattr(model, key, value)
    except ModelFileError:
        raise
    except (zipfile.BadZipFile, zipfile.LargeZipFile, ValueError, KeyError, TypeError, EOFError) as exc:
        raise ModelFileError(f"{path!r} is a damaged rankopt model file: {brief(repr(exc), 300)}") from None
    except (RecursionError, OverflowError, NotImplementedError, RuntimeError) as exc:
        raise ModelFileError(f"{path!r} is a damaged rankopt model file: {type(exc).__name__}") from None
    except OSError as exc:  # zipfile seeking to an offset a damaged header gives (found by the fuzz test)
        raise ModelFileError(
            f"{path!r} is a damaged or unreadable rankopt model file: {brief(repr(exc), 300)}"
        ) from None
    return model


def _checked_header(path: str, archive, expected: str | None) -> str:
    """The model type the archive's header names, after its format, version and members are checked."""
    if "format" not in archive.files or archive.text("format") != MODEL_FORMAT:
        raise ModelFileError(f"{path!r} is an .npz archive but not a rankopt model file")
    version = archive.integer("format_version") if "format_version" in archive.files else None
    writer = archive.text("rankopt_version") if "rankopt_version" in archive.files else "unknown"
    if version != MODEL_FORMAT_VERSION:
        raise ModelFileError(
            f"{path!r} has model format version {version}, written by rankopt {writer}; "
            f"this rankopt reads version {MODEL_FORMAT_VERSION} only: retrain the model"
        )
    missing = [key for key in _HEADER if key not in archive.files]
    if missing:
        raise ModelFileError(f"{path!r} is a damaged rankopt model file: it lacks {missing}")
    found = archive.text("model_type")
    if _registered(found) is None:
        raise ModelFileError(
            f"{path!r} holds a model of type {brief(repr(found), 80)}, which this rankopt cannot read "
            f"(it reads {sorted(EXPORTS)})"
        )
    if expected is not None and found != expected:
        raise ModelFileError(f"{path!r} holds a {found} model, expected a {expected} model")
    return found


def _checked_arrays(path: str, archive, export, n_features: int) -> dict:
    """The model type's weight arrays, each of its shape for ``n_features`` and finite, as float64."""
    arrays = {}
    for key in export.arrays:
        shape = export.arrays[key](n_features)
        values = archive.read(key.rstrip("_"), "fiu", int(np.prod(shape)))
        if values.shape != shape or not np.all(np.isfinite(values)):
            raise ModelFileError(
                f"{path!r} is a damaged rankopt model file: expected {key} to hold finite weights of "
                f"shape {shape}, got an array of shape {values.shape} instead"
            )
        arrays[key] = values.astype(np.float64)
    return arrays
