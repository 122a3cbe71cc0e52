"""LETOR files at disk speed (issue 60): rankopt's reader, ``rankopt store``, ``evaluate`` and ``predict``.

Files: ``label qid:Q 1:v ... 20:v`` lines (grades 0-4, query lengths uniform in 1-72, values of 6 significant
digits, about 222 bytes a line), as LETOR exports write them; the same rows without ``qid:`` beside a
LightGBM ``FILE.query`` of group sizes.  Every measurement runs in a fresh process of its own and records:

* ``wall_s`` and ``cpu_s`` of the call, ``mb_per_s`` (the file's bytes over the wall time);
* ``peak_mb`` (the process's peak resident memory above its resident memory just before the call) and
  ``arrays_mb`` (what the reader returns: CSR data, indices, indptr, labels, query ids), and their ratio;
* for the reader: one thread and every core; against scikit-learn's ``load_svmlight_file`` (with
  ``query_id=True`` on the qid file, without on the other) and LightGBM's ``Dataset`` construction from the
  no-qid file with its ``.query`` file (LightGBM's own text loading), one thread and every core;
* ``rankopt store`` of the qid file (every core), ``rankopt evaluate`` / ``predict`` of the qid file and of
  its store with ``--workers 2``: wall time and the command's peak resident memory (the driver's; a cluster's
  workers are processes apart).

Full run (a line of JSON per measurement is appended to ``--out`` as it finishes; 10⁸ lines need about
22 GB of disk)::

    python benchmarks/bench_letor_io.py --lines 1e5 1e6 --dir /tmp/letor-io --out results/letor-io.jsonl
    python benchmarks/bench_letor_io.py --lines 1e7 --dir /tmp/letor-io --out results/letor-io.jsonl --skip sklearn
    python benchmarks/bench_letor_io.py --lines 1e8 --dir /tmp/letor-io --out results/letor-io.jsonl --skip sklearn

``pytest benchmarks/bench_letor_io.py --benchmark-disable`` runs a 2·10⁴-line case of the reader and of
scikit-learn's (CI).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time

import numpy as np

try:  # the measuring subprocess needs no pytest
    import pytest
except ModuleNotFoundError:  # pragma: no cover
    pytest = None

N_FEATURES = 20
LONGEST_QUERY = 72
SEED = 0
#: Lines generated and written at a time.
WRITE_LINES = 100_000


def write_letor_files(path: str, n_lines: int, *, seed: int = SEED) -> tuple[str, str]:
    """Write ``path`` (with ``qid:``) and ``path.noqid`` with ``path.noqid.query``: the same rows."""
    rng = np.random.default_rng(seed)
    pool = np.array([f"{v:.6g}" for v in rng.random(4096) * 10], dtype=object)
    plain = path + ".noqid"
    qid, left, sizes = 0, 0, []
    with open(path, "w") as with_qid, open(plain, "w") as without:
        for start in range(0, n_lines, WRITE_LINES):
            n = min(WRITE_LINES, n_lines - start)
            values = pool[rng.integers(0, pool.size, (n, N_FEATURES))]
            grades = rng.integers(0, 5, n)
            lines, bare = [], []
            for i in range(n):
                if left == 0:
                    qid, left = qid + 1, int(rng.integers(1, LONGEST_QUERY + 1))
                    sizes.append(0)
                left -= 1
                sizes[-1] += 1
                features = " ".join(f"{j + 1}:{value}" for j, value in enumerate(values[i]))
                lines.append(f"{grades[i]} qid:{qid} {features}\n")
                bare.append(f"{grades[i]} {features}\n")
            with_qid.write("".join(lines))
            without.write("".join(bare))
    with open(plain + ".query", "w") as handle:
        handle.write("".join(f"{size}\n" for size in sizes))
    return path, plain


def _rss_mb() -> float:
    with open("/proc/self/status") as handle:
        for line in handle:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")  # pragma: no cover


def _arrays_mb(X, *rest) -> float:
    parts = [X.data, X.indices, X.indptr] if hasattr(X, "indptr") else [X]
    return sum(a.nbytes for a in [*parts, *(r for r in rest if r is not None)]) / 2**20


def _reader(case: dict) -> dict:
    """One read in this process: the call's wall, CPU and peak memory."""
    path, threads = case["path"], case["threads"]
    if case["what"] == "rankopt":
        import rankopt.data._letor  # noqa: F401 - the reader's imports are not the read's memory
        import rankopt.data.letor  # noqa: F401
        from rankopt.data.loaders import read_svmlight

        def call():
            data = read_svmlight(path, n_threads=threads, queries_from_sidecar=False)
            return _arrays_mb(data.X, data.y, data.qid)
    elif case["what"] == "sklearn":
        from sklearn.datasets import load_svmlight_file

        def call():
            out = load_svmlight_file(path, query_id=case["qid"])
            return _arrays_mb(*out)
    else:  # lightgbm: Dataset construction from its text file and .query sidecar
        import lightgbm

        def call():
            params = {"num_threads": threads, "verbose": -1, "max_bin": 255}
            lightgbm.Dataset(path, params=params).construct()
            return float("nan")  # LightGBM's binned data is not the arrays a reader returns

    before = _rss_mb()
    start, cpu = time.perf_counter(), time.process_time()
    arrays = call()
    wall, cpu = time.perf_counter() - start, time.process_time() - cpu
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024 - before
    return {"wall_s": wall, "cpu_s": cpu, "peak_mb": peak, "arrays_mb": arrays}


#: ``rankopt ARGS`` run in this process, then its peak resident memory on stderr.
_COMMAND_PROBE = """
import resource, sys
from rankopt.cli import main
status = main(sys.argv[1:])
print(f"PEAK_MB={resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}", file=sys.stderr)
sys.exit(status)
"""


def _measure(case: dict, timeout: float) -> dict:
    """``case`` run in a fresh process (the reader), or the ``rankopt`` command it names, timed from here."""
    size = os.path.getsize(case["path"])
    env = {**os.environ, "OMP_NUM_THREADS": str(case.get("threads") or os.cpu_count())}
    try:
        if "command" in case:
            start = time.perf_counter()
            done = subprocess.run(
                [sys.executable, "-c", _COMMAND_PROBE, *case["command"]],
                capture_output=True,
                text=True,
                timeout=timeout,
                env=env,
                check=False,
            )
            result = {"wall_s": time.perf_counter() - start, "returncode": done.returncode}
            peaks = [line for line in done.stderr.splitlines() if line.startswith("PEAK_MB=")]
            if peaks:  # the driver's (this command's process') peak; a cluster's workers are apart
                result["peak_mb"] = float(peaks[-1][len("PEAK_MB=") :])
            if done.returncode:
                result["stderr"] = done.stderr[-500:]
        else:
            done = subprocess.run(
                [sys.executable, __file__, "--one", json.dumps(case)],
                capture_output=True,
                text=True,
                timeout=timeout,
                env=env,
                check=True,
            )
            result = json.loads(done.stdout.strip().splitlines()[-1])
    except subprocess.TimeoutExpired:
        result = {"timed_out_after_s": timeout}
    except subprocess.CalledProcessError as exc:
        result = {"error": exc.stderr[-500:]}
    if "wall_s" in result:
        result["mb_per_s"] = size / 1e6 / result["wall_s"]
    return {**{k: v for k, v in case.items() if k != "command"}, "bytes": size, **result}


def _cases(paths: dict, n_lines: int, skip: set, workdir: str) -> list[dict]:
    qid_file, plain = paths["qid"], paths["plain"]
    cores = os.cpu_count() or 1
    cases = []
    for threads in (1, cores):
        for name, path in (("qid", qid_file), ("noqid", plain)):
            cases.append({"what": "rankopt", "file": name, "path": path, "threads": threads, "lines": n_lines})
        if "lightgbm" not in skip:
            cases.append({"what": "lightgbm", "file": "noqid", "path": plain, "threads": threads, "lines": n_lines})
    if "sklearn" not in skip:
        for name, path in (("qid", qid_file), ("noqid", plain)):
            cases.append({"what": "sklearn", "file": name, "path": path, "qid": name == "qid", "threads": 1})
    store, model = os.path.join(workdir, f"store-{n_lines}.zarr"), os.path.join(workdir, "model.npz")
    cases.append(
        {"what": "store", "path": qid_file, "lines": n_lines, "command": ["store", qid_file, store, "--overwrite"]}
    )
    if "evaluate" not in skip and os.path.exists(model):
        for what in ("evaluate", "predict"):
            out = [] if what == "evaluate" else ["-o", os.path.join(workdir, "scores.txt")]
            cases.append({"what": what, "path": qid_file, "lines": n_lines, "command": [what, model, qid_file, *out]})
            cases.append(
                {
                    "what": f"{what} store, 2 workers",
                    "path": qid_file,
                    "lines": n_lines,
                    "command": [what, model, store, "--workers", "2", *out],
                }
            )
    return cases


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--lines", nargs="+", type=float, default=[1e5, 1e6])
    parser.add_argument("--dir", default="/tmp/letor-io", help="where the generated files go")
    parser.add_argument("--out", default="results/letor-io.jsonl")
    parser.add_argument("--skip", nargs="*", default=[], choices=["sklearn", "lightgbm", "evaluate"])
    parser.add_argument("--timeout", type=float, default=1800, help="seconds one measurement may take")
    parser.add_argument("--one", help=argparse.SUPPRESS)  # a reader case, run in this process
    args = parser.parse_args(argv)
    if args.one:
        print(json.dumps(_reader(json.loads(args.one))))
        return
    os.makedirs(args.dir, exist_ok=True)
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    for n_lines in (int(n) for n in args.lines):
        qid_file = os.path.join(args.dir, f"letor-{n_lines}.txt")
        if not os.path.exists(qid_file + ".noqid.query"):
            write_letor_files(qid_file, n_lines)
        model = os.path.join(args.dir, "model.npz")
        if not os.path.exists(model):  # a model to evaluate with: pairwise on the first 10^5 lines
            head = os.path.join(args.dir, "head.txt")
            with open(qid_file) as source, open(head, "w") as target:
                target.writelines(line for _, line in zip(range(100_000), source, strict=False))
            subprocess.run([sys.executable, "-m", "rankopt", "train", head, model, "--loss", "pairwise"], check=True)
        paths = {"qid": qid_file, "plain": qid_file + ".noqid"}
        for case in _cases(paths, n_lines, set(args.skip), args.dir):
            result = _measure(case, args.timeout)
            with open(args.out, "a") as handle:
                handle.write(json.dumps(result) + "\n")
            print(json.dumps(result), flush=True)


if pytest is not None:

    @pytest.fixture(scope="module")
    def small_files(tmp_path_factory):
        path = str(tmp_path_factory.mktemp("letor-io") / "small.txt")
        return write_letor_files(path, 20_000)

    @pytest.mark.parametrize("threads", [1, 2])
    def test_rankopt_reader(benchmark, small_files, threads):
        from rankopt.data import read_svmlight

        data = benchmark(read_svmlight, small_files[0], n_threads=threads)
        assert data.X.shape == (20_000, N_FEATURES) and data.qid is not None

    def test_scikit_learn_reader(benchmark, small_files):
        from sklearn.datasets import load_svmlight_file

        X, _, qid = benchmark(load_svmlight_file, small_files[0], query_id=True)
        assert X.shape == (20_000, N_FEATURES) and qid.size == 20_000

    def test_a_measurement_runs_in_a_process_of_its_own(small_files):
        result = _measure({"what": "rankopt", "file": "qid", "path": small_files[0], "threads": 1}, timeout=120)
        assert result["wall_s"] > 0 and result["arrays_mb"] > 0 and result["mb_per_s"] > 0


if __name__ == "__main__":
    main()
