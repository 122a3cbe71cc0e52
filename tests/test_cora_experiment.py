"""The Cora experiment's protocol: per-fold inner CV, HOAP-SVM's own search, raw results that rebuild the table."""

import numpy as np
import pytest

pytest.importorskip("pyarrow")
cora = pytest.importorskip("rankopt.data.cora")

try:
    cora.cora_dir()
except FileNotFoundError as exc:  # pragma: no cover - depends on the environment
    pytest.skip(str(exc), allow_module_level=True)

from experiments.cora import METHODS, hoap_C, load_result, run_cora_experiment  # noqa: E402


@pytest.fixture(scope="module")
def searched(tmp_path_factory):
    """A quick run whose grids have two points, so every method is chosen by inner CV per outer fold."""
    path = tmp_path_factory.mktemp("cora") / "result.json"
    result = run_cora_experiment(
        quick=True, subjects=[3], subsample=150, C_grid=(0.1, 10.0), hoap_C_grid=(0.1, 10.0), json_output=path
    )
    return result, path


def test_hyperparameters_are_chosen_per_outer_fold(searched):
    result, _ = searched
    for method in METHODS:
        chosen = result.params[method]["Probabilistic_Methods"]
        assert len(chosen) == result.config["n_folds"]
        assert all(p is not None for p in chosen)
    assert all(p["C"] in (0.1, 10.0) for p in result.params["SVM"]["Probabilistic_Methods"])
    hoap = result.params["HOAP-SVM"]["Probabilistic_Methods"]
    hob = result.params["HOB-SVM"]["Probabilistic_Methods"]
    assert all(p["C"] in (0.1, 10.0) for p in hoap)  # its own grid, not HOB-SVM's C
    assert [p["eta"] for p in hoap] == [p["eta"] for p in hob]


def test_raw_results_rebuild_the_table(searched):
    result, path = searched
    again = load_result(path)
    assert again.to_markdown() == result.to_markdown()
    assert len(again.hoap_diagnostics) == result.config["n_folds"]
    for record in again.hoap_diagnostics:
        assert np.all(np.diff(record["objectives"]) <= 1e-9 * abs(record["objectives"][0]))  # CCCP never rises
        assert 0.0 <= record["train_ap"] <= 1.0


def test_hoap_c_is_ap_svm_c_in_hoap_units():
    assert hoap_C(2.0, 10) == pytest.approx(100.0)


def test_runs_over_disjoint_subjects_merge_into_one_table():
    from experiments.cora import merge_results

    runs = [run_cora_experiment(quick=True, subjects=[s], subsample=150) for s in (0, 3)]
    merged = merge_results(runs)
    assert merged.subjects == ["Neural_Networks", "Probabilistic_Methods"]
    for method in METHODS:
        assert merged.ap[method]["Neural_Networks"] == runs[0].ap[method]["Neural_Networks"]
        assert len(merged.fit_seconds[method]) == sum(len(r.fit_seconds[method]) for r in runs)
        assert merged.unconverged[method] == sum(r.unconverged[method] for r in runs)
    assert "| certified converged |" in merged.to_markdown()
    with pytest.raises(ValueError, match="disjoint subjects"):
        merge_results([runs[0], runs[0]])


def test_hoap_diagnostics_record_the_certificate_and_the_ray_start(searched):
    result, _ = searched
    for record in result.hoap_diagnostics:
        assert record["init_scale"] >= 0.0
        assert len(record["accepted"]) == len(record["inner_converged"]) == len(record["inner_gap_over_tol"])
        assert record["converged"] in (True, False)
