"""Scale: float32 vs float64, CSR vs dense, Dask out of core vs NumPy in memory, the 10⁷-sample target.

Every case fits an AP-SVM (``RankSVM(loss="ap")``) and reports, in
``extra_info``:

* ``fit_seconds``, ``n_iter``, ``seconds_per_iter`` and ``oracle_seconds_per_iter``
  (one oracle call: the score product, the loss-augmented inference and the
  joint-feature combination, from ``RankSVM.history_``);
* ``data_mb`` — the training matrix (``nbytes``, or data + indices for CSR);
* ``peak_mb`` — the fitting process's peak resident memory minus its
  resident memory after importing rankopt (and Dask), so the in-memory data
  counts and the interpreter does not.  Peaks are per process, so with
  ``--bench-scale full`` each case runs in a subprocess of its own
  (``python bench_scale.py CASE``), its data generated there, and the peak
  is reset (``/proc/self/clear_refs``) after generating the data, which then
  sits in memory and counts; ``peak_over_data`` = ``peak_mb / data_mb``;
* ``coef_max_abs_diff`` — for a case with a reference (float32 vs float64,
  CSR vs dense, Dask vs NumPy), how far its w is from the reference's;
* Dask only: ``pass_seconds`` — one plain pass over the data (``X.sum()``) on
  the same cluster, the yardstick for an iteration's two passes, and
  ``worker_peak_mb`` — the largest worker's peak resident memory.

The benchmark's own time is the subprocess (start-up and data generation
included); compare the ``fit_seconds`` of ``extra_info``.

Cases (``full``; ``small`` runs tiny sizes in-process, so its memory
figures mean nothing, in a few seconds):

* ``dtype-float64`` / ``dtype-float32`` — dense, n = 2·10⁶, d = 64;
* ``sparse-dense`` / ``sparse-csr`` — n = 2·10⁵, d = 500, 1 % non-zeros, float64;
* ``dask-numpy`` / ``dask-2workers`` — n = 2·10⁶, d = 100, float64 (1.6 GB) in a
  zarr store on disk in chunks of 25,000 rows (20 MB); NumPy reads it into
  memory, Dask fits on a 2-worker ``LocalCluster`` (one thread and 512 MiB
  each, of which a worker's interpreter and imports take 150 MB: the cluster
  cannot hold the data either);
* ``target-float32`` — the issue's target: n = 10⁷, d = 64, float32 in
  memory (2.56 GB); its ``peak_over_data`` is to stay ≤ 1.5.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import numpy as np

try:  # the subprocess needs no pytest
    import pytest
except ModuleNotFoundError:  # pragma: no cover
    pytest = None

C = 1.0
TOL = 1e-3
SEED = 0

CASES = {
    "full": {
        "dtype-float64": dict(kind="dense", n=2_000_000, d=64, dtype="float64"),
        "dtype-float32": dict(kind="dense", n=2_000_000, d=64, dtype="float32", reference="dtype-float64"),
        "sparse-dense": dict(kind="dense", n=200_000, d=500, dtype="float64", density=0.01),
        "sparse-csr": dict(kind="csr", n=200_000, d=500, dtype="float64", density=0.01, reference="sparse-dense"),
        "dask-numpy": dict(kind="zarr-numpy", n=2_000_000, d=100, dtype="float64", chunk_rows=25_000),
        "dask-2workers": dict(
            kind="zarr-dask",
            n=2_000_000,
            d=100,
            dtype="float64",
            chunk_rows=25_000,
            workers=2,
            processes=True,
            memory_limit="512MiB",
            reference="dask-numpy",
        ),
        "target-float32": dict(kind="dense", n=10_000_000, d=64, dtype="float32"),
    },
    "small": {
        "dtype-float64": dict(kind="dense", n=3000, d=8, dtype="float64"),
        "dtype-float32": dict(kind="dense", n=3000, d=8, dtype="float32", reference="dtype-float64"),
        "sparse-dense": dict(kind="dense", n=2000, d=50, dtype="float64", density=0.05),
        "sparse-csr": dict(kind="csr", n=2000, d=50, dtype="float64", density=0.05, reference="sparse-dense"),
        "dask-numpy": dict(kind="zarr-numpy", n=3000, d=10, dtype="float64", chunk_rows=1000),
        # In-process workers measure the whole (pytest) process against their memory
        # limit and would pause forever under one: no limit at this size.
        "dask-2workers": dict(
            kind="zarr-dask",
            n=3000,
            d=10,
            dtype="float64",
            chunk_rows=1000,
            workers=2,
            processes=False,
            memory_limit=0,
            reference="dask-numpy",
        ),
        "target-float32": dict(kind="dense", n=10_000, d=64, dtype="float32"),
    },
}
ISOLATED = {"full": True, "small": False}


# ------------------------------------------------------------------ data


def _labels(scores: np.ndarray, rng) -> np.ndarray:
    """About 10 % relevant: the top decile of the scores plus noise."""
    noisy = scores + 2.0 * rng.standard_normal(scores.size).astype(scores.dtype, copy=False)
    return noisy > np.quantile(noisy, 0.9)


def _true_w(d: int) -> np.ndarray:
    w = np.zeros(d)
    w[: min(8, d)] = 1.0
    return w


def make_dense(n, d, dtype, density=None):
    """X ~ N(0, 1) (zeroed outside ``density``), generated in place: no temporary as large as X."""
    rng = np.random.default_rng(SEED)
    X = rng.standard_normal((n, d), dtype=np.dtype(dtype).type)
    if density is not None:
        step = max(1, (1 << 22) // d)
        for start in range(0, n, step):
            block = X[start : start + step]
            block[rng.random(block.shape) >= density] = 0
    return X, _labels(X @ _true_w(d).astype(X.dtype), rng)


def make_csr(n, d, dtype, density):
    import scipy.sparse as sp

    X, y = make_dense(n, d, dtype, density)  # the same matrix as "sparse-dense"
    return sp.csr_matrix(X), y


def write_zarr(path, n, d, dtype, chunk_rows):
    """X and y on disk, X written chunk by chunk (it never sits in memory whole)."""
    import dask.array as da

    X = da.random.default_rng(SEED).standard_normal((n, d), chunks=(chunk_rows, d), dtype=np.dtype(dtype).type)
    X.to_zarr(os.path.join(path, "X.zarr"), overwrite=True)
    X = da.from_zarr(os.path.join(path, "X.zarr"))
    y = _labels((X @ _true_w(d).astype(X.dtype)).compute(), np.random.default_rng(SEED))
    np.save(os.path.join(path, "y.npy"), y)


# ------------------------------------------------------------------ one measurement


def _rss() -> tuple[int, int]:
    """(current, peak) resident bytes of this process (Linux)."""
    with open("/proc/self/status") as handle:
        fields = dict(line.split(":", 1) for line in handle)
    return int(fields["VmRSS"].split()[0]) * 1024, int(fields["VmHWM"].split()[0]) * 1024


def _reset_peak() -> None:
    with open("/proc/self/clear_refs", "w") as handle:
        handle.write("5")


def _release_free_memory() -> None:
    """Hand freed heap memory back to the OS (glibc), so data generation leaves no resident slack."""
    import ctypes
    import ctypes.util

    name = ctypes.util.find_library("c")
    if name is not None:
        ctypes.CDLL(name).malloc_trim(0)


def _nbytes(X) -> int:
    import scipy.sparse as sp

    if sp.issparse(X):
        return X.data.nbytes + X.indices.nbytes + X.indptr.nbytes
    return int(X.nbytes)


def measure(case: dict, data_dir: str | None = None, isolated: bool = True) -> dict:
    """Fit the AP-SVM of ``case`` and return its numbers (see the module docstring)."""
    import rankopt

    kind = case["kind"]
    if kind.startswith("zarr"):
        import dask.array as da
        import distributed  # noqa: F401  (imported before the baseline)
    rankopt.get_loss("ap")
    baseline = _rss()[0]
    client = None
    if kind == "dense":
        X, y = make_dense(case["n"], case["d"], case["dtype"], case.get("density"))
    elif kind == "csr":
        X, y = make_csr(case["n"], case["d"], case["dtype"], case["density"])
    else:
        y = np.load(os.path.join(data_dir, "y.npy"))
        X = da.from_zarr(os.path.join(data_dir, "X.zarr"))
        if kind == "zarr-numpy":
            # Chunk by chunk into one array: X.compute() would hold the chunks and their concatenation.
            loaded = np.empty(X.shape, dtype=X.dtype)
            da.store(X, loaded, lock=False, scheduler="threads")
            X = loaded
        else:
            from rankopt.data import dask_client

            client = dask_client(
                n_workers=case["workers"],
                threads_per_worker=1,
                processes=case["processes"],
                memory_limit=case["memory_limit"],
                dashboard_address=":0",
            )
            start = time.perf_counter()
            X.sum().compute()
            pass_seconds = time.perf_counter() - start
            baseline = _rss()[0]  # the scheduler is in this process, the workers are not
    data_bytes = _nbytes(X) if kind != "zarr-dask" else int(X.nbytes)
    _release_free_memory()
    if isolated:
        _reset_peak()
    before = _rss()[0]
    start = time.perf_counter()
    model = rankopt.RankSVM(loss="ap", C=C, tol=TOL).fit(X, y)
    fit_seconds = time.perf_counter() - start
    peak = _rss()[1]
    result = dict(
        n=case["n"],
        d=case["d"],
        dtype=case["dtype"],
        kind=kind,
        data_mb=data_bytes / 2**20,
        peak_mb=(peak - baseline) / 2**20,
        fit_added_mb=(peak - before) / 2**20,
        peak_over_data=(peak - baseline) / data_bytes,
        fit_seconds=fit_seconds,
        n_iter=int(model.n_iter_),
        converged=bool(model.converged_),
        seconds_per_iter=fit_seconds / model.n_iter_,
        oracle_seconds_per_iter=float(np.mean([r.inference_seconds for r in model.history_])),
        inference=model.inference_,
        isolated=isolated,
        coef=model.coef_.tolist(),
    )
    if client is not None:
        result["pass_seconds"] = pass_seconds
        worker_peaks = client.run(_worker_peak_rss)
        result["worker_peak_mb"] = max(worker_peaks.values()) / 2**20
        client.close()
    return result


def _worker_peak_rss() -> int:
    return _rss()[1]


def run_case(case: dict, data_dir: str | None, isolated: bool) -> dict:
    if not isolated:
        return measure(case, data_dir, isolated=False)
    completed = subprocess.run(
        [sys.executable, os.path.abspath(__file__), json.dumps(case), data_dir or ""],
        capture_output=True,
        text=True,
        check=False,
    )
    if completed.returncode != 0:
        raise RuntimeError(f"case {case} failed:\n{completed.stderr[-4000:]}")
    return json.loads(completed.stdout.strip().splitlines()[-1])


# ------------------------------------------------------------------ the benchmarks

if pytest is not None:

    @pytest.fixture(scope="module")
    def scale(request):
        return request.config.rankopt_bench_scale

    @pytest.fixture(scope="module")
    def zarr_dir(tmp_path_factory, scale):
        pytest.importorskip("zarr")
        pytest.importorskip("distributed")
        case = CASES[scale]["dask-numpy"]
        path = str(tmp_path_factory.mktemp("scale-zarr"))
        write_zarr(path, case["n"], case["d"], case["dtype"], case["chunk_rows"])
        return path

    @pytest.fixture(scope="module")
    def results():
        return {}

    NAMES = list(CASES["full"])

    @pytest.mark.parametrize("name", NAMES)
    def test_scale(benchmark, request, scale, results, name):
        case = CASES[scale][name]
        data_dir = request.getfixturevalue("zarr_dir") if case["kind"].startswith("zarr") else None
        reference = case.get("reference")
        if reference is not None and reference not in results:
            pytest.skip(f"its reference case {reference!r} did not run first")
        benchmark.group = f"scale-{name.split('-')[0]}"
        result = benchmark.pedantic(run_case, args=(case, data_dir, ISOLATED[scale]), rounds=1, iterations=1)
        coef = np.array(result.pop("coef"))
        results[name] = coef
        if reference is not None:
            result["reference"] = reference
            result["coef_max_abs_diff"] = float(np.abs(coef - results[reference]).max())
        benchmark.extra_info.update(bench="scale", case=name, **result)
        if case["kind"] == "zarr-dask":
            # The same w as in memory: the same products, summed in another order.
            assert result["coef_max_abs_diff"] < 1e-6


if __name__ == "__main__":
    print(json.dumps(measure(json.loads(sys.argv[1]), sys.argv[2] or None)))
