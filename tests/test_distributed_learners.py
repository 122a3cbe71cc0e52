"""Every learner under its host's distributed mode (issue 49, point 5): LightGBM's and XGBoost's Dask modes with
the hinge objective and its metric, ``DistributedLossWrapper`` around ``rankopt.pml.MetricHingeLoss`` and
``RankHingeLoss`` under ``DistributedDataParallel``, each on two worker processes of this machine.

The partition rule of the boosting libraries: every query lies whole within one partition (the Dask arrays are
chunked on query boundaries, ``group`` chunked alike).  A query split across two partitions reaches each worker
as two queries — neither LightGBM nor XGBoost tells the objective otherwise — so it is the caller's to keep
(``docs/scale.md``).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import rankopt

pytestmark = pytest.mark.distributed

WORKERS = Path(__file__).with_name("distributed_workers.py")


def _queries(seed=0, n_queries=40, size=20):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n_queries * size, 5))
    y = np.clip(np.round(X[:, 0] + 0.5 * rng.normal(size=X.shape[0]) + 1), 0, 4).astype(int)
    return X, y, np.full(n_queries, size)


@pytest.fixture(scope="module")
def client():
    distributed = pytest.importorskip("distributed")
    with (
        distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None) as cluster,
        distributed.Client(cluster) as dask_client,
    ):
        yield dask_client


def _on_query_boundaries(X, y, sizes, client, n_partitions=2):
    """Dask arrays of X, y and the group sizes, each partition holding whole queries."""
    import dask.array as da

    per_partition = np.array_split(sizes, n_partitions)
    rows = tuple(int(part.sum()) for part in per_partition)
    return (
        da.from_array(X, chunks=(rows, X.shape[1])),
        da.from_array(y, chunks=(rows,)),
        da.from_array(sizes, chunks=(tuple(part.size for part in per_partition),)),
    )


@pytest.mark.filterwarnings("ignore:Parameter n_jobs will be ignored:UserWarning")  # LightGBM's Dask, always
def test_dask_lgbm_ranker_trains_on_the_hinge_and_logs_its_metric(client):
    lightgbm = pytest.importorskip("lightgbm")
    from rankopt.lightgbm import eval_metric, hinge_objective

    X, y, sizes = _queries()
    X_valid, y_valid, sizes_valid = _queries(1, n_queries=20)
    dX, dy, dgroup = _on_query_boundaries(X, y, sizes, client)
    vX, vy, vgroup = _on_query_boundaries(X_valid, y_valid, sizes_valid, client)
    ranker = lightgbm.DaskLGBMRanker(
        objective=hinge_objective("pairwise"), metric="None", n_estimators=40, verbose=-1, client=client
    )
    ranker.fit(
        dX, dy, group=dgroup, eval_X=(vX,), eval_y=(vy,), eval_group=[vgroup], eval_metric=eval_metric("ndcg_graded")
    )
    record = ranker.evals_result_["valid_0"]
    assert list(record) == ["ndcg_graded"] and len(record["ndcg_graded"]) == 40
    qid = np.repeat(np.arange(sizes.size), sizes)
    trained = rankopt.metrics.ndcg_at_k(y, ranker.predict(dX).compute(), qid)
    single = lightgbm.LGBMRanker(objective=hinge_objective("pairwise"), metric="None", n_estimators=40, verbose=-1)
    alone = rankopt.metrics.ndcg_at_k(y, single.fit(X, y, group=sizes).predict(X), qid)
    assert trained > rankopt.metrics.ndcg_at_k(y, np.zeros(y.size), qid) + 0.1
    assert trained == pytest.approx(alone, abs=0.03)


def test_xgboost_dask_trains_on_the_hinge_with_its_metric(client):
    pytest.importorskip("xgboost")
    import xgboost.dask

    from rankopt import xgboost as rankopt_xgboost

    X, y, sizes = _queries()
    qid = np.repeat(np.arange(sizes.size), sizes)
    dX, dy, _ = _on_query_boundaries(X, y, sizes, client)
    import dask.array as da

    dqid = da.from_array(qid, chunks=dy.chunks)
    train = xgboost.dask.DaskDMatrix(client, dX, dy, qid=dqid)
    out = xgboost.dask.train(
        client,
        {"tree_method": "hist", "disable_default_eval_metric": 1},
        train,
        20,
        obj=rankopt_xgboost.hinge_objective("pairwise"),
        custom_metric=rankopt_xgboost.eval_metric("ndcg_graded"),
        evals=[(train, "train")],
    )
    history = out["history"]["train"]["ndcg_graded"]
    assert len(history) == 20 and history[-1] > history[0]
    predictions = xgboost.dask.predict(client, out["booster"], dX).compute()
    assert rankopt.metrics.ndcg_at_k(y, predictions, qid) > rankopt.metrics.ndcg_at_k(y, np.zeros(y.size), qid) + 0.1


def _two_processes(mode: str, tmp_path) -> list[dict]:
    torch = pytest.importorskip("torch")
    done = subprocess.run(
        [sys.executable, str(WORKERS), mode, str(tmp_path)], capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return [torch.load(tmp_path / f"rank{rank}.pt") for rank in range(2)]


def test_distributed_loss_wrapper_equals_one_process_on_the_gathered_batch(tmp_path):
    """PML's wrapper returns the gathered batch's loss times the world size, as for its own losses; each
    process's gradient is that of its own embeddings, times the world size."""
    torch = pytest.importorskip("torch")
    pytest.importorskip("pytorch_metric_learning")
    sys.path.insert(0, str(WORKERS.parent))
    try:
        from distributed_workers import metric_batch
    finally:
        sys.path.pop(0)
    from rankopt.pml import MetricHingeLoss

    results = _two_processes("pml", tmp_path)
    embeddings, labels = metric_batch()
    whole = embeddings.clone().requires_grad_()
    loss = MetricHingeLoss("ap", scale=2.0)(whole, labels)
    loss.backward()
    for result in results:
        torch.testing.assert_close(result["loss"] / 2, loss.detach(), rtol=1e-6, atol=1e-9)
        torch.testing.assert_close(result["grad"] / 2, whole.grad[result["rows"]], rtol=1e-6, atol=1e-9)


def test_ddp_with_the_documented_reduction_gives_the_whole_batchs_gradient(tmp_path):
    torch = pytest.importorskip("torch")
    sys.path.insert(0, str(WORKERS.parent))
    try:
        from distributed_workers import ranking_batch
    finally:
        sys.path.pop(0)
    from rankopt.torch import RankHingeLoss

    results = _two_processes("ddp", tmp_path)
    X, y, weights = ranking_batch()
    model = torch.nn.Linear(5, 1, bias=False).double()
    with torch.no_grad():
        model.weight.copy_(weights)
    RankHingeLoss("ap")(model(X).squeeze(-1), y).backward()
    for result in results:
        torch.testing.assert_close(result["grad"], model.weight.grad, rtol=1e-6, atol=1e-9)
