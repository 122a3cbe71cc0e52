"""Data sets and files: the bundled digits, SVM-light files, saved models."""
from rankopt.data.loaders import SvmLightData, load_digits, read_svmlight, write_svmlight
from rankopt.data.model_file import ModelFileError, load_model, save_model

__all__ = [
    "ModelFileError",
    "SvmLightData",
    "load_digits",
    "load_model",
    "read_svmlight",
    "save_model",
    "write_svmlight",
]
