"""MetricHingeLoss (issue 40, point 4): the structured hinge for metric learning, PML's calling convention."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from rankopt.torch import MetricHingeLoss, RankHingeLoss  # noqa: E402


def _batch(seed=0, n=24, dim=5, classes=4):
    generator = torch.Generator().manual_seed(seed)
    embeddings = torch.randn(n, dim, generator=generator, dtype=torch.float64)
    labels = torch.randint(0, classes, (n,), generator=generator)
    return embeddings, labels


@pytest.mark.parametrize("device", ["cpu", "torch"])
@pytest.mark.parametrize("loss", ["ap", "ndcg", "auc", "precision_at_k"])
def test_dot_similarity_is_the_mean_of_each_anchors_rank_hinge(loss, device):
    embeddings, labels = _batch()
    embeddings.requires_grad_(True)
    value = MetricHingeLoss(loss, similarity="dot", scale=2.0, device=device)(embeddings, labels)
    value.backward()
    grad = embeddings.grad.clone()
    embeddings.grad = None
    single = RankHingeLoss(loss, reduction="sum")
    total, counted = 0.0, 0
    for i in range(labels.numel()):
        others = torch.arange(labels.numel()) != i
        relevance = (labels[others] == labels[i]).long()
        if 0 < int(relevance.sum()) < relevance.numel():
            total = total + single(2.0 * (embeddings[others] @ embeddings[i]), relevance)
            counted += 1
    reference = total / counted
    reference.backward()
    assert value.item() == pytest.approx(reference.item(), rel=1e-12)
    np.testing.assert_allclose(grad.numpy(), embeddings.grad.numpy(), rtol=1e-10, atol=1e-12)


def test_cosine_is_the_dot_product_of_normalised_embeddings():
    embeddings, labels = _batch(1)
    unit = torch.nn.functional.normalize(embeddings, dim=1)
    cosine = MetricHingeLoss("ap")(embeddings, labels)
    dot = MetricHingeLoss("ap", similarity="dot")(unit, labels)
    assert cosine.item() == pytest.approx(dot.item(), rel=1e-12)


def test_a_reference_set_ranks_every_reference_and_excludes_nothing():
    embeddings, labels = _batch(2, n=6)
    ref_emb, ref_labels = _batch(3, n=20)
    value = MetricHingeLoss("ap", similarity="dot")(embeddings, labels, ref_emb=ref_emb, ref_labels=ref_labels)
    relevance = (labels[:, None] == ref_labels[None, :]).long()
    reference = RankHingeLoss("ap")(embeddings @ ref_emb.T, relevance)
    assert value.item() == pytest.approx(reference.item(), rel=1e-12)


def test_bad_input_is_refused_clearly():
    embeddings, labels = _batch()
    loss_fn = MetricHingeLoss("ap")
    with pytest.raises(ValueError, match="indices_tuple=None"):
        loss_fn(embeddings, labels, indices_tuple=(labels, labels, labels))
    with pytest.raises(ValueError, match="ref_emb and ref_labels together"):
        loss_fn(embeddings, labels, ref_emb=embeddings)
    with pytest.raises(ValueError, match="embeddings of shape"):
        loss_fn(embeddings[0], labels)
    with pytest.raises(ValueError, match="similarity"):
        MetricHingeLoss(similarity="euclidean")
    with pytest.raises(ValueError, match="scale"):
        MetricHingeLoss(scale=0.0)


@pytest.mark.filterwarnings("ignore:Converting a tensor with requires_grad=True:UserWarning")  # PML's progress bar
def test_it_drops_into_pytorch_metric_learnings_training_loop_in_place_of_fastap():
    """PML's trainer (MetricLossOnly) with its own sampler and loop, the loss swapped for FastAP's."""
    pml = pytest.importorskip("pytorch_metric_learning")
    from pytorch_metric_learning import losses, samplers, trainers

    generator = torch.Generator().manual_seed(0)
    labels = torch.arange(8).repeat_interleave(8)
    data = torch.randn(labels.numel(), 6, generator=generator) + 2.0 * torch.nn.functional.one_hot(labels, 8)[:, :6]
    dataset = torch.utils.data.TensorDataset(data, labels)
    for loss_fn in (losses.FastAPLoss(), MetricHingeLoss("ap", scale=4.0)):
        trunk = torch.nn.Sequential(torch.nn.Linear(6, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))
        optimizer = torch.optim.SGD(trunk.parameters(), lr=0.05)
        trainer = trainers.MetricLossOnly(
            models={"trunk": trunk},
            optimizers={"trunk_optimizer": optimizer},
            batch_size=32,
            loss_funcs={"metric_loss": loss_fn},
            dataset=dataset,
            sampler=samplers.MPerClassSampler(labels.tolist(), m=4, length_before_new_iter=64),
            dataloader_num_workers=0,
            data_and_label_getter=lambda batch: (batch[0], batch[1]),
        )
        trainer.train(num_epochs=2)
        assert np.isfinite(trainer.losses["metric_loss"])
    assert pml.__version__
