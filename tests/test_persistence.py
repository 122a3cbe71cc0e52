"""Fitted estimators round-trip through pickle/joblib and the plain .npz + JSON model file."""

import io
import json
import pickle
import subprocess
import sys
import tempfile
import warnings

import joblib
import numpy as np
import pytest
import scipy.sparse as sp
from oracles.model_files import rewrite_archive

from rankopt import HOAPSVM, HOBSVM, LatentAPSVM, LatentSSVM, LatentSVM, RankSVM
from rankopt.cli import main
from rankopt.data.model_file import EXPORTS, MODEL_FORMAT_VERSION, ModelFileError, load_model, save_model
from rankopt.exceptions import ConvergenceWarning


def _ranking_data(rng, n=200, d=5):
    X = rng.standard_normal((n, d))
    y = X[:, 0] + rng.standard_normal(n) > 1.0
    return X, y


def _bags(rng, n_bags=10, d=4):
    bags = [rng.standard_normal((int(rng.integers(2, 4)), d)) for _ in range(n_bags)]
    y = np.arange(n_bags) % 2
    for bag, label in zip(bags, y, strict=True):
        if label:
            bag[0, 0] += 3.0
    return bags, y


def _homophilous(rng, n=30, d=3):
    groups = rng.integers(0, 8, n)
    y = (rng.uniform(size=8) < 0.4)[groups] ^ (rng.uniform(size=n) < 0.1)
    y[:2] = [True, False]
    return rng.normal(size=(n, d)) + 0.6 * y[:, None] * (np.arange(d) == 0), y, groups


def _fitted(name, rng):
    """A fitted estimator of every exported type and a function scoring data with it."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        if name == "RankSVM":
            X, y = _ranking_data(rng)
            model = RankSVM(loss="ndcg", C=3.0).fit(X, y)
        elif name == "RankSVM-approx-float32":
            X, y = _ranking_data(rng)
            X = X.astype(np.float32)
            model = RankSVM(C=3.0, approx=50).fit(X, y)
        elif name in ("HOBSVM", "HOAPSVM"):
            X, y, groups = _homophilous(rng)
            if name == "HOBSVM":
                model = HOBSVM(C=5.0, eta=0.5).fit(X, y, groups=groups)
            else:
                model = HOAPSVM(C=5.0, eta=0.5, init=np.zeros(3 * X.shape[1]), cccp_max_iter=3).fit(X, y, groups=groups)
            return model, lambda m: m.decision_function(X, groups=groups)
        else:
            X, y = _bags(rng)
            cls = {"LatentAPSVM": LatentAPSVM, "LatentSSVM": LatentSSVM, "LatentSVM": LatentSVM}[name]
            extra = {"max_iter": 30, "cccp_max_iter": 3} if cls is LatentSSVM else {}
            model = cls(C=2.0, n_init=1, random_state=0, **extra).fit(X, y)
    return model, lambda m: m.decision_function(X)


NAMES = ["RankSVM", "RankSVM-approx-float32", "LatentAPSVM", "LatentSSVM", "LatentSVM", "HOBSVM", "HOAPSVM"]


def _same_model(a, b, score):
    assert type(a) is type(b)
    assert json.dumps(a.get_params(), default=list) == json.dumps(b.get_params(), default=list)
    np.testing.assert_array_equal(a.coef_, b.coef_)
    np.testing.assert_array_equal(score(a), score(b))
    for key in ("n_features_in_", "n_iter_", "converged_"):
        assert getattr(a, key) == getattr(b, key)


def test_every_estimator_is_exported():
    import rankopt.estimators  # noqa: F401 - the estimators fill the registry when their modules are imported

    assert set(EXPORTS) == {"RankSVM", "LatentAPSVM", "LatentSSVM", "LatentSVM", "HOBSVM", "HOAPSVM"}


def test_a_file_is_read_before_anything_imported_its_estimator(tmp_path, rng):
    """Issue 48: the model file imports no estimator; it asks its registry, which the estimators fill, and a
    class not registered yet is found through the rankopt.model_exports entry points."""
    model, _ = _fitted("RankSVM", rng)
    path = tmp_path / "model.npz"
    save_model(model, path)
    code = (
        "import sys\n"
        "from rankopt.data.model_file import EXPORTS, load_model\n"
        "assert 'rankopt.estimators' not in sys.modules and not EXPORTS\n"
        f"model = load_model({str(path)!r})\n"
        "print(type(model).__name__, model.coef_.shape)"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=tempfile.gettempdir())
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["RankSVM", f"({model.coef_.size},)"]


@pytest.mark.parametrize("name", NAMES)
def test_pickle_and_joblib_round_trip(rng, name):
    model, score = _fitted(name, rng)
    _same_model(model, pickle.loads(pickle.dumps(model)), score)
    buffer = io.BytesIO()
    joblib.dump(model, buffer)
    buffer.seek(0)
    restored = joblib.load(buffer)
    _same_model(model, restored, score)
    if name.startswith("RankSVM"):
        assert restored.loss_.name == model.loss_.name and len(restored.history_) == model.n_iter_


@pytest.mark.parametrize("name", NAMES)
def test_model_file_round_trip(tmp_path, rng, name):
    model, score = _fitted(name, rng)
    path = tmp_path / "model.npz"
    save_model(model, path)
    restored = load_model(path)
    _same_model(model, restored, score)
    export = EXPORTS[type(model).__name__]
    for key in export.values:
        assert getattr(restored, key) == pytest.approx(getattr(model, key))
    for key in export.arrays:
        np.testing.assert_array_equal(getattr(restored, key), getattr(model, key))
    assert load_model(path, model_type=type(model)).coef_.dtype == np.float64


def test_model_file_is_plain_arrays_and_json(tmp_path, rng):
    model, _ = _fitted("RankSVM-approx-float32", rng)
    save_model(model, tmp_path / "m.npz")
    with np.load(tmp_path / "m.npz", allow_pickle=False) as archive:  # no pickles inside
        assert str(archive["model_type"]) == "RankSVM"
        assert int(archive["format_version"]) == MODEL_FORMAT_VERSION
        assert str(archive["loss"]) == "ap"
        params = json.loads(str(archive["params"]))
        fitted = json.loads(str(archive["fitted"]))
        assert params["approx"] == 50 and params["C"] == 3.0
        assert fitted["n_hard_constraints_"] == model.n_hard_constraints_
        assert archive["coef"].dtype == np.float64


def test_another_model_type_is_named(tmp_path, rng):
    model, _ = _fitted("LatentAPSVM", rng)
    save_model(model, tmp_path / "latent.npz")
    with pytest.raises(ModelFileError, match="holds a LatentAPSVM model, expected a RankSVM model"):
        load_model(tmp_path / "latent.npz", model_type=RankSVM)
    with pytest.raises(ModelFileError, match="holds a LatentAPSVM model, expected a RankSVM model"):
        load_model(tmp_path / "latent.npz", model_type="RankSVM")


def test_cli_refuses_a_latent_model(tmp_path, rng, capsys):
    model, _ = _fitted("LatentSVM", rng)
    save_model(model, tmp_path / "latent.npz")
    data = tmp_path / "d.svm"
    data.write_text("1 1:1 2:0.5\n0 3:1\n")
    assert main(["predict", str(tmp_path / "latent.npz"), str(data)]) == 2
    err = capsys.readouterr().err
    assert "holds a LatentSVM model, expected a RankSVM model" in err


@pytest.fixture
def model_path(tmp_path, rng):
    model, _ = _fitted("RankSVM", rng)
    save_model(model, tmp_path / "good.npz")
    return tmp_path / "good.npz"


@pytest.mark.parametrize(
    "changes, fragments",
    [
        ({"model_type": "HOBSVM9000"}, ["type 'HOBSVM9000'", "cannot read", "RankSVM"]),
        ({"format_version": 1, "rankopt_version": "0.0.9"}, ["format version 1", "rankopt 0.0.9", "retrain"]),
        ({"format_version": MODEL_FORMAT_VERSION + 1}, [f"format version {MODEL_FORMAT_VERSION + 1}"]),
        ({"fitted": None}, ["lacks ['fitted']"]),
        ({"fitted": json.dumps({"n_features_in_": 5})}, ["lacks", "n_iter_"]),
        ({"coef": np.ones(3)}, ["expected coef_ to hold finite weights of shape (5,)", "shape (3,)"]),
        ({"coef": np.array([1.0, np.nan, 0, 0, 0])}, ["finite weights"]),
        ({"params": json.dumps({"no_such_param": 1})}, ["damaged", "no_such_param"]),
        ({"params": "{not json"}, ["damaged"]),
    ],
    ids=[
        "unknown-type",
        "version-1",
        "future-version",
        "no-fitted",
        "missing-value",
        "short-coef",
        "nan-coef",
        "unknown-param",
        "bad-json",
    ],
)
def test_bad_model_files_are_named(tmp_path, model_path, changes, fragments):
    bad = tmp_path / "bad.npz"
    rewrite_archive(model_path, bad, **changes)
    with pytest.raises(ModelFileError) as excinfo:
        load_model(bad)
    for fragment in fragments:
        assert fragment in str(excinfo.value)


def test_only_exported_estimators_with_json_parameters_are_saved(tmp_path, rng):
    class MyRanker(RankSVM):
        pass

    X, y = _ranking_data(rng)
    with pytest.raises(ValueError, match="got a .*MyRanker instead; pickle it"):
        save_model(MyRanker().fit(X, y), tmp_path / "m")
    model = LatentAPSVM(n_init=1, random_state=np.random.RandomState(0)).fit(*_bags(rng))
    with pytest.raises(ValueError, match="random_state=RandomState"):
        save_model(model, tmp_path / "m")


def test_models_fitted_on_sparse_or_dask_data_save_the_same(tmp_path, rng):
    import dask.array as da

    X, y = _ranking_data(rng)
    for data in (sp.csr_matrix(X), da.from_array(X, chunks=(50, 5))):
        save_model(RankSVM().fit(data, y), tmp_path / "m.npz")
        np.testing.assert_allclose(load_model(tmp_path / "m.npz").coef_, RankSVM().fit(X, y).coef_, atol=1e-9)


def test_feature_names_are_saved_and_checked_after_loading(tmp_path, rng):
    pd = pytest.importorskip("pandas")
    X, y = _ranking_data(rng)
    frame = pd.DataFrame(X, columns=[f"f{i}" for i in range(X.shape[1])])
    model = RankSVM().fit(frame, y)
    save_model(model, tmp_path / "named.npz")
    restored = load_model(tmp_path / "named.npz")
    np.testing.assert_array_equal(restored.feature_names_in_, model.feature_names_in_)
    assert restored.feature_names_in_.dtype == object
    np.testing.assert_array_equal(restored.decision_function(frame), model.decision_function(frame))
    with pytest.raises(ValueError, match="Feature names must be in the same order"):
        restored.decision_function(frame[frame.columns[::-1]])
    # a model fitted on an array has none, saved or not
    save_model(RankSVM().fit(X, y), tmp_path / "plain.npz")
    assert not hasattr(load_model(tmp_path / "plain.npz"), "feature_names_in_")
    # a wrong list is a damaged file
    fitted = json.loads(str(np.load(tmp_path / "named.npz")["fitted"][()]))
    rewrite_archive(
        tmp_path / "named.npz", tmp_path / "bad.npz", fitted=json.dumps({**fitted, "feature_names_in_": ["f0"]})
    )
    with pytest.raises(ModelFileError, match="expected feature_names_in_ to hold 5 column names"):
        load_model(tmp_path / "bad.npz")
