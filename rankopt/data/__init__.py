"""Data sets and files: the bundled digits, SVM-light files, saved models.

The names below are imported on first access (PEP 562's module
``__getattr__``), so that importing a light submodule (``rankopt.data.mil``
for its list of data sets) does not import SciPy.
"""

from rankopt._lazy import lazy_attributes

_LAZY = {
    "ModelFileError": "rankopt.data.model_file",
    "QueryStoreWriter": "rankopt.data.query_store",
    "SvmLightData": "rankopt.data.loaders",
    "dask_client": "rankopt.data.dask_backend",
    "fetch_mslr_sample": "rankopt.data.mslr",
    "is_query_store": "rankopt.data.query_store",
    "load_digits": "rankopt.data.loaders",
    "load_model": "rankopt.data.model_file",
    "open_npy": "rankopt.data.dask_backend",
    "open_query_store": "rankopt.data.query_store",
    "read_svmlight": "rankopt.data.loaders",
    "save_model": "rankopt.data.model_file",
    "write_query_store": "rankopt.data.query_store",
    "write_svmlight": "rankopt.data.loaders",
}

__all__ = sorted(_LAZY)

__getattr__, __dir__ = lazy_attributes("rankopt.data", globals(), _LAZY)
