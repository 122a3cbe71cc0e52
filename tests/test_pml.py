"""``rankopt.pml.MetricHingeLoss`` as a pytorch-metric-learning loss (issue 49): reducers, distances, miners,
reference sets, memory, ``MultipleLosses``, the trainer with a miner, ``DistributedLossWrapper``."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="the torch extra (rankopt[torch]) is not installed")
pytest.importorskip("pytorch_metric_learning", reason="pytorch-metric-learning is not installed")
from pytorch_metric_learning import distances, losses, miners, reducers, regularizers  # noqa: E402

import rankopt  # noqa: E402
from rankopt.pml import CrossBatchMemory, MetricHingeLoss  # noqa: E402
from rankopt.torch import MetricHingeLoss as TorchMetricHingeLoss  # noqa: E402
from rankopt.torch import RankHingeLoss  # noqa: E402


def _batch(seed=0, n=24, d=5, classes=4, dtype=torch.float64):
    generator = torch.Generator().manual_seed(seed)
    labels = torch.randint(0, classes, (n,), generator=generator)
    embeddings = torch.randn(n, d, generator=generator, dtype=dtype)
    return embeddings.requires_grad_(), labels


def _value_and_grad(loss_fn, embeddings, labels, *args, **kwargs):
    embeddings = embeddings.detach().clone().requires_grad_()
    value = loss_fn(embeddings, labels, *args, **kwargs)
    value.backward()
    return float(value.detach()), embeddings.grad.clone()


def test_it_is_a_pml_loss_and_rankopt_torch_needs_no_pml():
    assert isinstance(MetricHingeLoss(), losses.BaseMetricLossFunction)
    import subprocess
    import sys
    import tempfile

    probe = (
        "import sys; sys.modules['pytorch_metric_learning'] = None\n"
        "import rankopt.torch\nprint(rankopt.torch.RankHingeLoss.__name__)"
    )
    # From a neutral directory: the checkout's sources (without compiled kernels) must not shadow the install.
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=120, cwd=tempfile.gettempdir()
    )
    assert done.returncode == 0 and done.stdout.strip() == "RankHingeLoss", done.stderr[-2000:]


@pytest.mark.parametrize(
    "distance, similarity",
    [
        (None, "cosine"),
        ("cosine", "cosine"),
        (distances.DotProductSimilarity(normalize_embeddings=False), "dot"),
        ("dot", "dot"),
    ],
    ids=["default", "cosine shorthand", "DotProductSimilarity", "dot shorthand"],
)
def test_without_a_miner_it_is_the_torch_layers_mean_hinge(distance, similarity):
    embeddings, labels = _batch()
    kwargs = {} if distance is None else {"distance": distance}
    ours = _value_and_grad(MetricHingeLoss("ap", scale=3.0, **kwargs), embeddings, labels)
    plain = _value_and_grad(TorchMetricHingeLoss("ap", similarity=similarity, scale=3.0), embeddings, labels)
    assert ours[0] == pytest.approx(plain[0], rel=1e-9)
    torch.testing.assert_close(ours[1], plain[1], rtol=1e-7, atol=1e-10)


def _per_anchor(loss_fn, embeddings, labels):
    """The element losses and their anchors, as a reducer receives them."""
    ref = embeddings
    loss_dict = loss_fn.compute_loss(embeddings, labels, None, ref, labels)["loss"]
    return loss_dict["losses"], loss_dict["indices"]


@pytest.mark.parametrize(
    "reducer, expected",
    [
        (reducers.MeanReducer(), lambda v: v.mean()),
        (reducers.SumReducer(), lambda v: v.sum()),
        (reducers.AvgNonZeroReducer(), lambda v: v[v > 0].mean()),
        (reducers.ThresholdReducer(low=0.3), lambda v: v[v > 0.3].mean()),
    ],
    ids=lambda x: type(x).__name__ if not callable(x) or isinstance(x, reducers.BaseReducer) else "",
)
def test_every_reducer_gets_the_per_anchor_hinges(reducer, expected):
    embeddings, labels = _batch(1)
    values, anchors = _per_anchor(MetricHingeLoss("ap", scale=2.0), embeddings, labels)
    assert anchors.numel() == values.numel() and values.numel() > 0
    reduced = MetricHingeLoss("ap", scale=2.0, reducer=reducer)(embeddings, labels).detach()
    assert float(reduced) == pytest.approx(float(expected(values.detach())), rel=1e-9)


@pytest.mark.parametrize("labels", [[0, 0, 1, 1, 2, 2], [0, 0, 1, 1, 1, 7], [3, 3, 3, 3, 3, 3]], ids=str)
def test_the_anchors_are_those_with_both_kinds_of_reference(labels):
    """Without a miner the anchors come from one count of each row's relevant references (itself among them);
    they are those a miner of every pair finds too, with the same losses and gradients: a class of one has no
    positive, a batch of one class no negative."""
    labels = torch.tensor(labels)
    embeddings = torch.randn(labels.numel(), 5, generator=torch.Generator().manual_seed(3), dtype=torch.float64)
    every_pair = miners.BatchEasyHardMiner(pos_strategy="all", neg_strategy="all")
    loss_fn = MetricHingeLoss("ap", scale=2.0)
    values, anchors = _per_anchor(loss_fn, embeddings, labels)
    expected = [q for q in range(labels.numel()) if 1 < int((labels == labels[q]).sum()) < labels.numel()]
    if not expected:  # PML's zero loss
        assert anchors is None and float(values) == 0.0
        return
    mined = loss_fn.compute_loss(embeddings, labels, every_pair(embeddings, labels), embeddings, labels)
    assert anchors.tolist() == mined["loss"]["indices"].tolist() == expected
    torch.testing.assert_close(values, mined["loss"]["losses"], rtol=1e-12, atol=0)


def test_lp_distance_ranks_the_nearest_first():
    embeddings, labels = _batch(2)
    value, grad = _value_and_grad(
        MetricHingeLoss("ap", distance=distances.LpDistance(normalize_embeddings=False)), embeddings, labels
    )
    e = embeddings.detach().clone().requires_grad_()
    scores = -torch.cdist(e, e)
    relevant = (labels[:, None] == labels[None, :]).long()
    mask = ~torch.eye(labels.numel(), dtype=torch.bool)
    expected = RankHingeLoss("ap")(scores, relevant, mask=mask)
    expected.backward()
    assert value == pytest.approx(float(expected.detach()), rel=1e-9)
    torch.testing.assert_close(grad, e.grad, rtol=1e-7, atol=1e-10)


def _random_tuples(generator, labels, kind):
    n = labels.numel()
    size = int(torch.randint(1, 3 * n, (1,), generator=generator))
    a = torch.randint(0, n, (size,), generator=generator)
    other = torch.randint(0, n, (size,), generator=generator)
    same, keep = labels[a] == labels[other], a != other
    if kind == "pairs":
        second_a = torch.randint(0, n, (size,), generator=generator)
        second = torch.randint(0, n, (size,), generator=generator)
        differ = (labels[second_a] != labels[second]) & (second_a != second)
        return a[same & keep], other[same & keep], second_a[differ], second[differ]
    negative = torch.randint(0, n, (size,), generator=generator)
    valid = same & keep & (labels[negative] != labels[a])
    return a[valid], other[valid], negative[valid]


def _loop_reference(embeddings, labels, tuples, scale):
    """The mean over anchors of RankHingeLoss on each anchor's mined items, by a loop."""
    from pytorch_metric_learning.utils import loss_and_miner_utils as lmu

    a1, p, a2, n = lmu.convert_to_pairs(tuples, labels)
    unit = torch.nn.functional.normalize(embeddings, dim=1)
    scores = unit @ unit.T * scale
    hinges = []
    for anchor in range(labels.numel()):
        items = torch.unique(torch.cat([p[a1 == anchor], n[a2 == anchor]]))
        items = items[items != anchor]
        relevant = (labels[items] == labels[anchor]).long()
        if items.numel() and 0 < int(relevant.sum()) < items.numel():
            hinges.append(RankHingeLoss("ap", reduction="sum")(scores[anchor, items], relevant))
    return torch.stack(hinges).mean() if hinges else None


def test_a_miners_tuples_restrict_what_each_anchor_ranks_as_a_loop_over_anchors():
    """≥ 200 random batches with random pairs and triplets: the loss and its gradient equal the loop's."""
    generator = torch.Generator().manual_seed(7)
    checked = 0
    for batch in range(300):
        embeddings, labels = _batch(100 + batch, n=int(torch.randint(4, 20, (1,), generator=generator)), classes=3)
        tuples = _random_tuples(generator, labels, "pairs" if batch % 2 else "triplets")
        value, grad = _value_and_grad(MetricHingeLoss("ap", scale=2.0), embeddings, labels, tuples)
        e = embeddings.detach().clone().requires_grad_()
        expected = _loop_reference(e, labels, tuples, 2.0)
        if expected is None:
            assert value == 0.0 and not grad.any()
            continue
        expected.backward()
        assert value == pytest.approx(float(expected.detach()), rel=1e-9, abs=1e-12)
        torch.testing.assert_close(grad, e.grad, rtol=1e-7, atol=1e-10)
        checked += 1
    assert checked >= 200


@pytest.mark.filterwarnings("ignore:Converting a tensor with requires_grad=True:UserWarning")  # PML's progress bar
def test_pmls_trainer_runs_with_a_tuple_miner():
    from pytorch_metric_learning import samplers, trainers

    generator = torch.Generator().manual_seed(0)
    labels = torch.arange(8).repeat_interleave(8)
    data = torch.randn(labels.numel(), 6, generator=generator) + 2.0 * torch.nn.functional.one_hot(labels, 8)[:, :6]
    trunk = torch.nn.Sequential(torch.nn.Linear(6, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))
    trainer = trainers.MetricLossOnly(
        models={"trunk": trunk},
        optimizers={"trunk_optimizer": torch.optim.SGD(trunk.parameters(), lr=0.05)},
        batch_size=32,
        loss_funcs={"metric_loss": MetricHingeLoss("ap", scale=4.0)},
        mining_funcs={"tuple_miner": miners.MultiSimilarityMiner(epsilon=0.1)},
        dataset=torch.utils.data.TensorDataset(data, labels),
        sampler=samplers.MPerClassSampler(labels.tolist(), m=4, length_before_new_iter=64),
        dataloader_num_workers=0,
        data_and_label_getter=lambda batch: (batch[0], batch[1]),
    )
    trainer.train(num_epochs=2)
    assert np.isfinite(trainer.losses["metric_loss"])


def test_ref_emb_is_embeddings_means_no_reference_set():
    embeddings, labels = _batch(3)
    loss_fn = MetricHingeLoss("ap", scale=2.0)
    alone = _value_and_grad(loss_fn, embeddings, labels)
    e = embeddings.detach().clone().requires_grad_()
    same = loss_fn(e, labels, ref_emb=e, ref_labels=labels)
    same.backward()
    assert float(same.detach()) == pytest.approx(alone[0], rel=1e-12)
    reference, ref_labels = _batch(4, n=10)
    other = loss_fn(embeddings, labels, ref_emb=reference.detach(), ref_labels=ref_labels)
    expected = TorchMetricHingeLoss("ap", scale=2.0)(
        embeddings, labels, ref_emb=reference.detach(), ref_labels=ref_labels
    )
    assert float(other.detach()) == pytest.approx(float(expected.detach()), rel=1e-9)


def test_the_memory_bank_never_makes_an_embedding_rank_itself():
    embeddings, labels = _batch(5, n=12, dtype=torch.float32)
    memory = CrossBatchMemory(MetricHingeLoss("ap", scale=2.0), embedding_size=5, memory_size=64)
    value = memory(embeddings, labels)  # the memory holds exactly this batch now
    expected = MetricHingeLoss("ap", scale=2.0)(embeddings.detach(), labels)  # each ranks the others, not itself
    assert float(value.detach()) == pytest.approx(float(expected.detach()), rel=1e-5)
    with pytest.raises(Exception, match="not supported"):
        losses.CrossBatchMemory(MetricHingeLoss(), embedding_size=5)  # PML's own list: the subclass is the way


def test_multiple_losses_regularizers_and_stats():
    embeddings, labels = _batch(6)
    hinge, triplet = MetricHingeLoss("ap"), losses.TripletMarginLoss()
    with torch.no_grad():
        both = losses.MultipleLosses([hinge, triplet], weights=[1.0, 0.5])(embeddings, labels)
        assert float(both) == pytest.approx(
            float(hinge(embeddings, labels) + 0.5 * triplet(embeddings, labels)), rel=1e-9
        )
    regularised = MetricHingeLoss("ap", embedding_regularizer=regularizers.LpRegularizer(), embedding_reg_weight=0.1)
    with torch.no_grad():
        assert float(regularised(embeddings, labels)) > float(hinge(embeddings, labels))
    with_stats = MetricHingeLoss("ap", collect_stats=True)
    with_stats(embeddings, labels)
    assert "scale" in with_stats._record_these


@pytest.mark.parametrize("loss", ["ndcg_graded", "pairwise"])
def test_graded_losses_are_taken_as_the_torch_module_takes_them(loss):
    """Issue 61, point 11: rankopt.torch.MetricHingeLoss took them, rankopt.pml.MetricHingeLoss refused them."""
    embeddings, labels = _batch()
    ours = _value_and_grad(MetricHingeLoss(loss, scale=3.0), embeddings, labels)
    plain = _value_and_grad(TorchMetricHingeLoss(loss, scale=3.0), embeddings, labels)
    assert ours[0] == pytest.approx(plain[0], rel=1e-9) and ours[0] > 0
    torch.testing.assert_close(ours[1], plain[1], rtol=1e-7, atol=1e-10)


def test_edges_a_batch_of_one_and_a_graded_loss():
    embeddings = torch.randn(1, 3, requires_grad=True)
    value = MetricHingeLoss()(embeddings, torch.tensor([0]))
    value.backward()
    assert float(value.detach()) == 0.0 and not embeddings.grad.any()
    with pytest.raises(ValueError, match="PML distance object or one of \\['cosine', 'dot'\\]"):
        MetricHingeLoss(distance="euclid")
    assert MetricHingeLoss(rankopt.get_loss("precision_at_k", k=3)).hinge.rank_loss.k == 3


def test_the_self_supervised_wrapper_takes_the_loss_as_pml_tests_its_own():
    """Issue 61, point 19a: PML's SelfSupervisedLoss refused the loss ("not supported for MetricHingeLoss");
    rankopt.pml.SelfSupervisedLoss takes it, and passes PML's own test of the wrapper (the wrapped loss equals
    the loss given position labels, and identical embeddings and augmentations cost ~0)."""
    from rankopt.pml import SelfSupervisedLoss

    with pytest.raises(Exception, match="not supported"):
        losses.SelfSupervisedLoss(MetricHingeLoss())  # PML's own list: the subclass is the way
    generator = torch.Generator().manual_seed(0)
    for dtype in (torch.float32, torch.float64):
        embeddings = torch.nn.functional.normalize(torch.randn(40, 32, generator=generator, dtype=dtype))
        ref_emb = torch.nn.functional.normalize(torch.randn(40, 32, generator=generator, dtype=dtype))
        labels = torch.arange(40)
        for name in ("ap", "ndcg", "precision_at_k"):
            loss = MetricHingeLoss(name, scale=2.0)
            wrapped = SelfSupervisedLoss(loss, symmetric=False)(embeddings, ref_emb)
            direct = loss(embeddings, labels, ref_emb=ref_emb, ref_labels=labels)
            torch.testing.assert_close(wrapped, direct)
            both = SelfSupervisedLoss(loss)(embeddings, ref_emb)
            torch.testing.assert_close(both, loss(torch.cat([embeddings, ref_emb]), torch.cat([labels, labels])))
            # the hinge weighs a swap by 1/|N|: its margin, 1/scale per pair, needs a large scale to be met
            same = SelfSupervisedLoss(MetricHingeLoss(name, scale=1000.0))(embeddings, embeddings)
            assert float(same) == pytest.approx(0.0, abs=1e-2)
