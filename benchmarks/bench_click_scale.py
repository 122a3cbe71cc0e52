"""Click-log scale (issue 51): a multi-query fit on a 2-worker Dask cluster, inference on the row chunks.

A synthetic click-log-like set is written to a query store (:mod:`rankopt.data.query_store`), in bounded
memory: query lengths Zipf-distributed (many short queries, a tail to 10⁴ documents), d = 32 float32
features, grades 0–4 from an unobserved linear model plus noise, 64 partitions at every size.  Each case
fits one loss with one method on a Dask scheduler and 2 worker processes (one thread and 8 GiB each, below
the data's 12.2 GiB at 10⁸ rows), each a process apart from the driver as on a real cluster, from a driver
in a subprocess of its own, and records:

* ``iterations``, ``fit_seconds``, ``seconds_per_iteration`` (wall);
* ``driver_peak_mb`` — the driver's peak resident memory during the fit minus its resident memory before it
  (sampled every 20 ms; the client, the imports and the open store are in the baseline; the gather path's
  labels and query ids, which it must hold, are not);
* ``worker_peak_mb`` and ``scheduler_peak_mb`` — the larger worker's and the scheduler's peak resident
  memory (``ru_maxrss``);
* ``driver_bytes_per_iteration`` — what the driver sends and receives per iteration: for the chunked
  inference the pickled arguments and results of every map-reduce (``RowChunks``' counters); for the gather
  path the score vectors it gathers and the coefficient vectors it sends (their ``nbytes``) plus the
  d-vectors.

Methods: ``chunked`` (``RankSVM.fit`` on the store's Dask arrays: the inference where the data is),
``gather`` (the earlier path, kept in ``QueryRankingProblem``: the N scores gathered to the driver, labels
and query ids in its memory) and ``lightgbm`` (``lightgbm.DaskLGBMRanker``, lambdarank, 100 trees).

Full run (hours at 10⁸; a line of JSON per case is appended to ``--out`` as it finishes)::

    python benchmarks/bench_click_scale.py --sizes 1e6 1e7 1e8 --out results/click-scale.jsonl

``pytest benchmarks/bench_click_scale.py --benchmark-disable`` runs a 2·10⁴-row case of each method in
process, on Dask's threads (CI).
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import os
import subprocess
import sys
import tempfile
import threading
import time

import numpy as np

try:  # the subprocess needs no pytest
    import pytest
except ModuleNotFoundError:  # pragma: no cover
    pytest = None

D = 32
C = 1.0
TOL = 1e-3
MAX_ITER = 60
LONGEST = 10_000
ZIPF_A = 1.7
SEED = 0
#: Grades from the latent score in units of its standard deviation: about 50/25/13/8/4 %.
GRADE_EDGES = (0.0, 0.67, 1.13, 1.55)
#: Rows generated and written at a time (whole queries).
WRITE_ROWS = 1 << 21
LOSSES = ("pairwise", "ndcg_graded")
#: Partitions (row chunks) of every store: the same at every size, so that what scales with N shows.
PARTITIONS = 64


def query_lengths(rng, n_rows: int) -> np.ndarray:
    """Zipf lengths (≥ 1, capped at LONGEST) summing to exactly ``n_rows``."""
    lengths = []
    total = 0
    while total < n_rows:
        batch = np.minimum(rng.zipf(ZIPF_A, 1 << 16), LONGEST)
        lengths.append(batch)
        total += int(batch.sum())
    lengths = np.concatenate(lengths)
    ends = np.cumsum(lengths)
    last = int(np.searchsorted(ends, n_rows))
    lengths = lengths[: last + 1]
    lengths[-1] -= int(ends[last]) - n_rows
    return lengths[lengths > 0]


def make_click_store(path: str, n_rows: int, partition_rows: int, seed: int = SEED) -> dict:
    """Write the synthetic set to a query store at ``path``, WRITE_ROWS at a time; its description."""
    from rankopt.data.query_store import QueryStoreWriter

    rng = np.random.default_rng(seed)
    w_true = rng.normal(size=D) / np.sqrt(D)
    noise = 0.5
    scale = np.sqrt(w_true @ w_true + noise**2)
    lengths = query_lengths(rng, n_rows)
    qid_of = np.repeat(np.arange(lengths.size, dtype=np.int64), lengths)  # 8 B a row: fine to 10⁸ on this machine
    starts = np.concatenate(([0], np.cumsum(lengths)))
    with QueryStoreWriter(path, D, dtype=np.float32, label_dtype=np.int8, partition_rows=partition_rows) as writer:
        q = 0
        while q < lengths.size:
            q_end = int(np.searchsorted(starts, starts[q] + WRITE_ROWS, side="right")) - 1
            q_end = max(q_end, q + 1)
            a, b = int(starts[q]), int(starts[q_end])
            X = rng.standard_normal((b - a, D), dtype=np.float32)
            latent = (X @ w_true.astype(np.float32) + noise * rng.standard_normal(b - a, dtype=np.float32)) / scale
            writer.append(X, np.digitize(latent, GRADE_EDGES).astype(np.int8), qid_of[a:b])
            q = q_end
    info = writer.close()
    return {
        "rows": info.n_rows,
        "queries": info.n_queries,
        "partitions": len(info.partitions) - 1,
        "longest_query": int(lengths.max()),
        "mean_query": float(lengths.mean()),
        "data_mb": info.n_rows * D * 4 / 2**20,
    }


class _PeakRSS:
    """This process's peak resident memory above a baseline, sampled on a thread."""

    def __init__(self, interval=0.02):
        import psutil

        self.process, self.interval = psutil.Process(), interval
        self.baseline = self.peak = self.process.memory_info().rss
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def _sample(self):
        while not self._stop.is_set():
            self.peak = max(self.peak, self.process.memory_info().rss)
            time.sleep(self.interval)

    def __enter__(self):
        self.baseline = self.peak = self.process.memory_info().rss
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, self.process.memory_info().rss)

    @property
    def above_mb(self) -> float:
        return (self.peak - self.baseline) / 2**20


def _worker_peak_mb(client) -> float:
    return max(client.run(_own_peak_mb).values())


def fit_chunked(store: str, loss: str, C: float = C) -> dict:
    from rankopt import RankSVM
    from rankopt.data.dask_backend import RowChunks
    from rankopt.data.query_store import open_query_store

    made = []
    original = RowChunks.__init__

    def recording(self, *args, **kwargs):
        original(self, *args, **kwargs)
        made.append(self)

    RowChunks.__init__ = recording
    X, y, qid = open_query_store(store)
    model = RankSVM(loss=loss, C=C, tol=TOL, max_iter=MAX_ITER)
    with _PeakRSS() as memory:
        start = time.perf_counter()
        model.fit(X, y, qid=qid)
        seconds = time.perf_counter() - start
    RowChunks.__init__ = original
    chunks = made[-1]
    return {
        "iterations": model.n_iter_,
        "converged": bool(model.converged_),
        "fit_seconds": seconds,
        "driver_peak_mb": memory.above_mb,
        "driver_bytes_per_iteration": (chunks.sent_bytes + chunks.received_bytes) / model.n_iter_,
        "map_reduce_steps": chunks.steps,
        "chunks": chunks.n_chunks,
        "coef": model.coef_.tolist(),
    }


def fit_gather(store: str, loss: str, C: float = C) -> dict:
    """The earlier path: QueryRankingProblem on a Dask X, the scores gathered to the driver."""
    from rankopt._validation import check_grades, check_qid
    from rankopt.data.dask_backend import DaskBackend
    from rankopt.data.query_store import open_query_store
    from rankopt.engine.solvers import get_solver
    from rankopt.estimators.parameters import plugin_registry
    from rankopt.features.linear import LinearFeatureMap
    from rankopt.models.ranking import RankingModel

    X, y, qid = open_query_store(store)
    traffic = [0]
    scores, combine = DaskBackend.scores, DaskBackend.combine

    def counted_scores(self, X, w):
        out = scores(self, X, w)
        traffic[0] += out.nbytes + w.nbytes
        return out

    def counted_combine(self, X, coef):
        out = combine(self, X, coef)
        traffic[0] += np.asarray(coef, dtype=X.dtype).nbytes + out.nbytes
        return out

    DaskBackend.scores, DaskBackend.combine = counted_scores, counted_combine
    registry = plugin_registry()
    loss_ = registry.resolve_loss(loss)
    with _PeakRSS() as memory:
        start = time.perf_counter()
        grades = check_grades(y.compute())
        relevance = grades if loss_.graded else grades >= 1
        queries = check_qid(qid.compute(), X.shape[0])
        problem = RankingModel().build_problem(
            X, relevance, loss_, LinearFeatureMap(), registry=registry, queries=queries
        )
        result = get_solver("cutting_plane").run(problem, C, tol=TOL, max_iter=MAX_ITER, warn=False)
        seconds = time.perf_counter() - start
    DaskBackend.scores, DaskBackend.combine = scores, combine
    return {
        "iterations": result.n_iter,
        "converged": bool(result.converged),
        "fit_seconds": seconds,
        "driver_peak_mb": memory.above_mb,
        "driver_bytes_per_iteration": traffic[0] / result.n_iter,
        "coef": result.w.tolist(),
    }


def fit_lightgbm(store: str, loss: str, C: float = C) -> dict:
    import dask.array as da
    import lightgbm

    from rankopt.data.query_store import open_query_store

    X, y, qid = open_query_store(store)

    def run_lengths(ids):
        return np.diff(np.flatnonzero(np.r_[True, ids[1:] != ids[:-1], True]))

    group = qid.map_blocks(run_lengths, dtype=np.int64, chunks=(np.nan,))
    group = group.compute_chunk_sizes()
    model = lightgbm.DaskLGBMRanker(objective="lambdarank", n_estimators=100, verbose=-1)
    with _PeakRSS() as memory:
        start = time.perf_counter()
        model.fit(X, y.astype(np.int32), group=group)
        seconds = time.perf_counter() - start
    del da
    return {"iterations": 100, "converged": None, "fit_seconds": seconds, "driver_peak_mb": memory.above_mb}


FITS = {"chunked": fit_chunked, "gather": fit_gather, "lightgbm": fit_lightgbm}


@contextlib.contextmanager
def cluster(memory_limit, workers: int = 2):
    """A scheduler and ``workers`` one-thread worker processes, each a process apart from this driver (as on
    a real cluster: a LocalCluster would run its scheduler in the driver, whose bookkeeping per task would
    count as the driver's memory); a client to them."""
    from rankopt.data.dask_backend import dask_client

    # The states are the fit's working memory: no spilling them to disk mid-solve, and no pausing a worker
    # that holds them (it would wait for memory nothing frees); a worker beyond 95 % of its limit is
    # restarted and the case fails, with why.
    env = dict(
        os.environ,
        DASK_DISTRIBUTED__WORKER__MEMORY__TARGET="False",
        DASK_DISTRIBUTED__WORKER__MEMORY__SPILL="False",
        DASK_DISTRIBUTED__WORKER__MEMORY__PAUSE="False",
    )
    bin_dir = os.path.dirname(sys.executable)
    with tempfile.TemporaryDirectory() as scratch:
        address_file = os.path.join(scratch, "scheduler.json")
        common = {"env": env, "stdout": subprocess.DEVNULL, "stderr": subprocess.DEVNULL}
        processes = [
            subprocess.Popen(
                [
                    os.path.join(bin_dir, "dask"),
                    "scheduler",
                    "--scheduler-file",
                    address_file,
                    "--port",
                    "0",
                    "--dashboard-address",
                    ":0",
                ],
                **common,
            )
        ]
        try:
            for _ in range(600):
                if os.path.exists(address_file):
                    break
                time.sleep(0.1)
            processes.append(
                subprocess.Popen(
                    [
                        os.path.join(bin_dir, "dask"),
                        "worker",
                        "--scheduler-file",
                        address_file,
                        "--nworkers",
                        str(workers),
                        "--nthreads",
                        "1",
                        "--memory-limit",
                        str(memory_limit),
                        "--local-directory",
                        scratch,
                    ],
                    **common,
                )
            )
            with open(address_file) as file:
                address = json.load(file)["address"]
            with dask_client(address, timeout=60) as client:
                client.wait_for_workers(workers, timeout=120)
                yield client
        finally:
            for process in reversed(processes):
                process.terminate()
                process.wait(timeout=60)


def run_case(store: str, loss: str, method: str, memory_limit, C: float = C) -> dict:
    """One fit on a fresh cluster of 2 worker processes (this process is the driver)."""
    with cluster(memory_limit) as client:
        record = FITS[method](store, loss, C)
        record["worker_peak_mb"] = _worker_peak_mb(client)
        record["scheduler_peak_mb"] = client.run_on_scheduler(_own_peak_mb)
    record["C"] = C
    record["seconds_per_iteration"] = record["fit_seconds"] / record["iterations"]
    return record


def _own_peak_mb() -> float:
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", nargs="+", type=float, default=[1e6, 1e7, 1e8])
    parser.add_argument("--losses", nargs="+", default=list(LOSSES))
    parser.add_argument("--methods", nargs="+", default=["chunked", "gather", "lightgbm"])
    parser.add_argument("--gather-up-to", type=float, default=1e7, help="largest size for gather and lightgbm")
    parser.add_argument("--workdir", default=os.path.join(tempfile.gettempdir(), "rankopt-click-scale"))
    parser.add_argument("--out", help="JSON lines, one per case, appended as each finishes")
    parser.add_argument("--table", metavar="JSONL", help="print the markdown table of these results and stop")
    parser.add_argument("--C", nargs="+", type=float, default=[C], help="slack weights to fit (default: 1)")
    parser.add_argument("--case", nargs=4, metavar=("STORE", "LOSS", "METHOD", "MEMORY_LIMIT"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.table:
        print(table(args.table))
        return
    if not args.out:
        parser.error("--out is required to run cases")
    if args.case:  # in a subprocess of its own: peaks are per process
        store, loss, method, limit = args.case
        print("RESULT=" + json.dumps(run_case(store, loss, method, limit, args.C[0])), flush=True)
        return
    os.makedirs(args.workdir, exist_ok=True)
    for size in args.sizes:
        n_rows = int(size)
        store = os.path.join(args.workdir, f"clicks-{n_rows}.zarr")
        if not os.path.exists(os.path.join(store, "zarr.json")) or not _complete(store):
            import shutil

            shutil.rmtree(store, ignore_errors=True)
            start = time.perf_counter()
            description = make_click_store(store, n_rows, partition_rows=n_rows // PARTITIONS)
            description["write_seconds"] = time.perf_counter() - start
            with open(store + ".json", "w") as file:
                json.dump(description, file)
        with open(store + ".json") as file:
            description = json.load(file)
        # Each worker's limit below the data's size (12.2 GiB at 10⁸ rows): no worker can hold X.  The workers
        # hold their chunks' states (about 90 bytes a row, docs/scale.md), not X.
        limit = "8GiB"
        for loss, method, c_value in itertools.product(args.losses, args.methods, args.C):
            if method != "chunked" and n_rows > args.gather_up_to:
                continue
            if method == "lightgbm" and (loss != args.losses[0] or c_value != args.C[0]):
                continue  # one lambdarank fit per size
            started = time.perf_counter()
            done = subprocess.run(
                [
                    sys.executable,
                    __file__,
                    "--out",
                    args.out,
                    "--C",
                    str(c_value),
                    "--case",
                    store,
                    loss,
                    method,
                    limit,
                ],
                capture_output=True,
                text=True,
                check=False,
            )
            lines = [line for line in done.stdout.splitlines() if line.startswith("RESULT=")]
            record = {"rows": n_rows, "loss": loss, "method": method, "memory_limit": limit, "C": c_value}
            record.update(description)
            if lines:
                record.update(json.loads(lines[-1][len("RESULT=") :]))
            else:
                record["error"] = done.stderr[-3000:]
            record["case_seconds"] = time.perf_counter() - started
            with open(args.out, "a") as file:
                file.write(json.dumps(record) + "\n")
            print(
                n_rows,
                loss,
                method,
                {k: record.get(k) for k in ("iterations", "fit_seconds", "driver_peak_mb")},
                flush=True,
            )


def table(path: str) -> str:
    """The markdown table of docs/scale.md from the JSON lines at ``path`` (the last record of each case)."""
    records = {}
    with open(path) as file:
        for line in file:
            record = json.loads(line)
            if record.get("C", C) == C:
                records[(record["rows"], record["loss"], record["method"])] = record
    lines = [
        "| rows | data | queries (longest) | loss | method | iterations | s / iteration | driver peak "
        "| driver peak / data | bytes to and from the driver per iteration | larger worker's peak |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for (rows, loss, method), r in sorted(records.items()):
        data = f"{r['data_mb']:.0f} MB"
        rows = _rows(rows)
        if "error" in r:
            lines.append(f"| {rows} | {data} | | {loss} | {method} | failed: {r['error'][-120:]!r} | | | | | |")
            continue
        traffic = r.get("driver_bytes_per_iteration")
        lines.append(
            f"| {rows} | {data} | {r['queries']:,} ({r['longest_query']:,}) | "
            f"{loss if method != 'lightgbm' else 'lambdarank, 100 trees'} | {method} | {r['iterations']}"
            f"{'' if r['converged'] in (True, None) else ' (not certified)'} | {r['seconds_per_iteration']:.2f} | "
            f"{r['driver_peak_mb']:.1f} MB | {r['driver_peak_mb'] / r['data_mb']:.2%} | "
            f"{'' if traffic is None else _bytes(traffic)} | {r['worker_peak_mb']:.0f} MB |"
        )
    return "\n".join(lines)


def _rows(n: int) -> str:
    """10⁸ for a power of ten, else 12,345."""
    power = round(np.log10(n))
    return f"10{str(power).translate(SUPERSCRIPTS)}" if 10**power == n else f"{n:,}"


SUPERSCRIPTS = str.maketrans("0123456789", "⁰¹²³⁴⁵⁶⁷⁸⁹")


def _bytes(n: float) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1000:
            return f"{n:.0f} {unit}"
        n /= 1000
    return f"{n:.0f} TB"


def _complete(store: str) -> bool:
    from rankopt.data.query_store import is_query_store

    return is_query_store(store) and os.path.exists(store + ".json")


if pytest is not None:

    @pytest.mark.parametrize("method", ["chunked", "gather"])
    def test_click_scale_small(benchmark, tmp_path, method):
        """CI: a 2·10⁴-row store, one fit per method on Dask's threads (no cluster); both give one w."""
        store = str(tmp_path / "clicks.zarr")
        description = make_click_store(store, 20_000, partition_rows=4000)
        assert description["rows"] == 20_000 and description["partitions"] >= 4
        record = benchmark.pedantic(FITS[method], args=(store, "pairwise"), rounds=1, iterations=1)
        assert record["iterations"] >= 2
        if method == "chunked":
            from rankopt import RankSVM
            from rankopt.data.query_store import open_query_store

            X, y, qid = (a.compute() for a in open_query_store(store))
            in_memory = RankSVM(loss="pairwise", C=C, tol=TOL, max_iter=MAX_ITER).fit(X, y, qid=qid)
            assert record["iterations"] == in_memory.n_iter_
            np.testing.assert_allclose(
                record["coef"], in_memory.coef_, rtol=0, atol=1e-6 * np.abs(in_memory.coef_).max()
            )
            # A d-vector and a few numbers per chunk and step: far below the N scores of the gather path.
            assert record["driver_bytes_per_iteration"] < fit_gather(store, "pairwise")["driver_bytes_per_iteration"]
        benchmark.extra_info.update({k: v for k, v in record.items() if k != "coef"})


if __name__ == "__main__":
    main()
