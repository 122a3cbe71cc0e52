"""The structured hinge of a rank loss as a pytorch-metric-learning loss (the ``experiments`` extra, or
``pip install pytorch-metric-learning``).

:class:`MetricHingeLoss` is a ``BaseMetricLossFunction``: PML's training loops, reducers, distances, miners,
reference sets, ``MultipleLosses`` and ``DistributedLossWrapper`` take it as they take ``FastAPLoss``.  Each
embedding is a query (an anchor); the documents it ranks are the other embeddings of the batch, or the
reference set, ordered by the distance's similarity (a distance such as ``LpDistance`` ranks the nearest
first); the documents of its label are relevant.  ``compute_loss`` returns one ``"element"`` loss per anchor
that has something to rank — the structured hinge of its ranking, the exact subgradient flowing back through
the distance — so the default ``MeanReducer`` gives the mean hinge over those anchors, and every other
reducer works on them.

What each PML feature does with it:

* **distance** (default ``CosineSimilarity()``): the anchor's scores are the similarities, or the negated
  distances of a distance that is not inverted; ``scale`` multiplies them (the hinge's margin is 1/scale).
* **reducer**: receives the per-anchor hinges (``MeanReducer``, ``AvgNonZeroReducer``, ``ThresholdReducer``,
  …).  An anchor with nothing to rank has no element loss at all.
* **miners** (``indices_tuple``, pairs or triplets): anchor a ranks only the positives and negatives the tuples
  pair it with; an anchor with no mined positive or no mined negative has no element loss.  Without a miner,
  every anchor ranks all the others.
* **ref_emb / ref_labels**: the anchors rank the reference set; ``ref_emb is embeddings`` means no reference set
  (each embedding ranks the others, itself excluded), as in PML.  A reference set that holds the batch makes
  each embedding rank itself unless the tuples leave the pair out: :class:`CrossBatchMemory` (PML's memory
  bank, with this loss in its list of supported losses) passes tuples without self-comparisons.
* **SelfSupervisedLoss**: :class:`SelfSupervisedLoss` (PML's wrapper, with this loss in its list) labels each
  embedding and its augmentation alike; ``symmetric=True`` ranks within both, ``False`` the augmentations.
* **DistributedLossWrapper**: gathers the embeddings of every process; the loss of the gathered batch, times
  the world size, as PML does for its own losses.
* **embedding_regularizer**, **collect_stats**: as for every ``BaseMetricLossFunction``.

Importing :mod:`rankopt` or :mod:`rankopt.torch` never imports PML; this module does.
"""

from __future__ import annotations

import torch
from pytorch_metric_learning import losses as pml_losses
from pytorch_metric_learning.distances import CosineSimilarity, DotProductSimilarity
from pytorch_metric_learning.utils import loss_and_miner_utils as lmu

from rankopt._validation import check_positive_float
from rankopt.inference.batched import resolve_rank_loss
from rankopt.plugins import default_registry
from rankopt.torch import RankHingeLoss
from rankopt.torch.functional import device_from_backend

__all__ = ["CrossBatchMemory", "MetricHingeLoss", "SelfSupervisedLoss"]


class MetricHingeLoss(pml_losses.BaseMetricLossFunction):
    """The structured hinge of a rank loss for metric learning, as a pytorch-metric-learning loss.

    Parameters
    ----------
    loss : str or RankLoss, default "ap"
        Any registered rank loss ("ap", "ndcg", "auc", "precision_at_k", a plugin's), by name or as an
        instance (``rankopt.get_loss("precision_at_k", k=5)``).  A document is relevant to an anchor when it
        shares its label: a graded loss ("ndcg_graded", "pairwise") sees grades 1 and 0, as
        :class:`rankopt.torch.MetricHingeLoss` gives them.
    scale : float, default 1.0
        The scores are the similarities times ``scale``; the hinge weighs score differences against a loss in
        [0, 1], so its margin is 1/scale in similarity units.
    n_threads : int, optional
        Threads of the compiled inference (:class:`rankopt.torch.RankHingeLoss`).
    device : {"auto", "cpu", "torch"}, default "auto"
        Where the inference runs (:class:`rankopt.torch.RankHingeLoss`).
    backend : {"auto", "compiled", "torch"}, optional
        Deprecated: ``device=``.
    **kwargs
        PML's: ``distance`` (a PML distance object, or the shorthand ``"cosine"`` or ``"dot"``: the unnormalised
        dot product), ``reducer``, ``embedding_regularizer``, ``embedding_reg_weight``, ``collect_stats``.

    The module docstring says what each PML feature does with the loss.
    """

    #: The shorthands ``distance=`` takes for PML's distance objects.
    DISTANCES = {"cosine": lambda: CosineSimilarity(), "dot": lambda: DotProductSimilarity(normalize_embeddings=False)}

    def __init__(self, loss="ap", *, scale=1.0, n_threads=None, device="auto", backend=None, **kwargs):
        distance = kwargs.get("distance")
        if isinstance(distance, str):
            if distance not in self.DISTANCES:
                raise ValueError(
                    f"expected distance to be a PML distance object or one of {sorted(self.DISTANCES)}, got "
                    f"{distance!r} instead"
                )
            kwargs["distance"] = self.DISTANCES[distance]()
        super().__init__(**kwargs)
        self.scale = check_positive_float(scale, "scale")
        rank_loss = resolve_rank_loss(loss, default_registry())
        device = device_from_backend(device, backend, type(self).__name__)
        self.hinge = RankHingeLoss(rank_loss, reduction="none", n_threads=n_threads, device=device)
        self.add_to_recordable_attributes(list_of_names=["scale"], is_stat=False)

    def get_default_distance(self):
        return CosineSimilarity()

    def compute_loss(self, embeddings, labels, indices_tuple, ref_emb, ref_labels):
        if labels is None:
            raise ValueError("expected labels (the documents of an anchor's label are relevant to it), got None")
        scores, relevant, ranked = self.rankings(embeddings, labels, indices_tuple, ref_emb, ref_labels)
        usable = self._usable(
            labels, ref_labels, relevant, ranked, mined=indices_tuple is not None, self_reference=ref_emb is embeddings
        )
        anchors = torch.nonzero(usable).reshape(-1)
        if anchors.numel() == 0:
            return self.zero_losses()
        if anchors.numel() < usable.numel():  # the anchors with both kinds of reference to rank, alone
            scores, relevant, ranked = scores[anchors], relevant[anchors], ranked[anchors]
        hinges = self.hinge(scores, relevant, mask=ranked)  # boolean labels: 0/1 relevance, a byte each
        return {"loss": {"losses": hinges.to(embeddings.dtype), "indices": anchors, "reduction_type": "element"}}

    @staticmethod
    def _usable(labels, ref_labels, relevant, ranked, mined: bool, self_reference: bool):
        """Which anchors rank a relevant reference and an irrelevant one.  Without a miner an anchor ranks every
        reference but itself, so its count of relevant references tells (itself among them when the references
        are the batch), counted from the sorted reference labels (two binary searches an anchor, where a sum over
        its row of the relevance matrix reads every pair); a miner's pairs are read from ``ranked``."""
        if mined:
            return (ranked & relevant).any(dim=1) & (ranked & ~relevant).any(dim=1)
        common = torch.promote_types(labels.dtype, ref_labels.dtype)
        ordered = torch.sort(ref_labels.to(common)).values
        labels = labels.to(common)
        n_relevant = torch.searchsorted(ordered, labels, right=True) - torch.searchsorted(ordered, labels)
        return (n_relevant > int(self_reference)) & (n_relevant < ordered.numel())

    def rankings(self, embeddings, labels, indices_tuple, ref_emb, ref_labels):
        """(scores, relevant, ranked), each (batch, references): each anchor's scores of the references, which
        are relevant to it, and which it ranks (all others, or what the miner's tuples pair it with)."""
        self_reference = ref_emb is embeddings
        if ref_labels is None:
            raise ValueError("expected ref_labels with ref_emb, got None")
        matrix = self.distance(embeddings, ref_emb)
        scores = (matrix if self.distance.is_inverted else -matrix) * self.scale
        relevant = labels[:, None] == ref_labels[None, :]
        if indices_tuple is None:
            ranked = torch.ones_like(relevant)
        else:
            ranked = torch.zeros_like(relevant)
            a1, p, a2, n = lmu.convert_to_pairs(indices_tuple, labels, ref_labels)
            ranked[a1, p] = True
            ranked[a2, n] = True
        if self_reference:
            ranked.fill_diagonal_(False)
        return scores, relevant, ranked


class CrossBatchMemory(pml_losses.CrossBatchMemory):
    """PML's memory bank, with :class:`MetricHingeLoss` among the losses it takes.

    PML keeps a list of the loss classes its ``CrossBatchMemory`` supports; this subclass adds
    ``MetricHingeLoss`` and changes nothing else.  The memory passes each call tuples that pair every
    embedding with the memory's entries except itself (or, with ``enqueue_mask``, only the embeddings not
    enqueued query the memory), so no embedding ranks itself.
    """

    @staticmethod
    def supported_losses():
        return [*pml_losses.CrossBatchMemory.supported_losses(), MetricHingeLoss.__name__]


class SelfSupervisedLoss(pml_losses.SelfSupervisedLoss):
    """PML's self-supervised wrapper, with :class:`MetricHingeLoss` among the losses it takes.

    ``SelfSupervisedLoss(MetricHingeLoss("ap"))(embeddings, ref_emb)``: each embedding's augmentation is its one
    relevant item, labelled by position.  PML keeps a list of the loss classes its wrapper supports (as for
    ``CrossBatchMemory``); this subclass adds ``MetricHingeLoss`` and changes nothing else.
    """

    @staticmethod
    def supported_losses():
        return [*pml_losses.SelfSupervisedLoss.supported_losses(), MetricHingeLoss.__name__]
