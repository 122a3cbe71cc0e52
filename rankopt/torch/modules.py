"""The structured hinge as ``torch.nn`` modules, thin over :mod:`rankopt.torch.functional`: each stores its
hyperparameters as given and calls its function, as ``torch.nn.MarginRankingLoss`` calls
``torch.nn.functional.margin_ranking_loss``."""

from __future__ import annotations

import torch

from rankopt.torch._handles import loss_handle, resolved_loss
from rankopt.torch._inputs import refuse_pml_keywords
from rankopt.torch.functional import (
    SIMILARITIES,
    check_metric_options,
    check_options,
    device_from_backend,
    hinge_of_handle,
    metric_hinge_of_handle,
)

__all__ = ["MetricHingeLoss", "RankHingeLoss"]


class _LossHandle:
    """A module's resolved loss and its handle (:func:`_resolved`) are this process's: copies and pickles start
    without them and resolve their own ``loss`` again."""

    def __getstate__(self):
        state = dict(self.__dict__)
        state.pop("_resolved", None)
        return state


class RankHingeLoss(_LossHandle, torch.nn.Module):
    """The structured hinge of a rank loss, for training any scorer with PyTorch.

    Parameters
    ----------
    loss : str or RankLoss, default "ap"
        A registered rank-loss name or instance.
    relevant_at : float, default 1
        The grade from which a document counts as relevant for a binary loss.
    reduction : {"mean", "sum", "none"}, default "mean"
        "mean" over the queries with something to order (a query with one relevance level contributes
        0 and is not counted), "sum", or "none" (one value per query: per row of the padded layout,
        per qid, increasing, of the flat one).
    n_threads : int, optional
        Threads of the compiled inference (default: ``OMP_NUM_THREADS``, else every core).
    device : {"auto", "cpu", "torch"}, default "auto"
        Where the inference runs (:func:`rankopt.torch.functional.rank_hinge`): the compiled kernels on the
        host, or the tensor kernels on the scores' device; "auto" takes the compiled kernels for CPU tensors
        and the tensor ones elsewhere.
    backend : {"auto", "compiled", "torch"}, optional
        Deprecated: ``device=`` (``backend="compiled"`` is ``device="cpu"``).
    **loss_params
        Parameters of a loss given by name, e.g. ``RankHingeLoss("ndcg_graded", k=5)``.

    Calling it:

    * flat layout, like ``RankSVM.fit``: ``loss_fn(scores, y, qid=None, group=None)`` with 1-D scores;
    * padded list layout, as neural LTR libraries use: ``loss_fn(scores, y, mask=None)`` with
      scores and y of shape (B, L), each row one query, ``mask`` True for the real documents.
    """

    def __init__(
        self, loss="ap", *, relevant_at=1, reduction="mean", n_threads=None, device="auto", backend=None, **loss_params
    ):
        super().__init__()
        self.loss, self.loss_params = loss, loss_params
        self.relevant_at, self.reduction, self.n_threads = relevant_at, reduction, n_threads
        self.device = device_from_backend(device, backend, type(self).__name__)
        self.rank_loss  # noqa: B018 - an unknown loss is named here, not at the first call
        check_options(reduction, self.device, n_threads)

    @property
    def rank_loss(self):
        """The loss instance the layer computes with: ``loss`` itself, or the loss it names with
        ``loss_params``, built once (its ``set_params`` is seen by the next call)."""
        return _resolved(self, self.loss, self.loss_params)[0]

    def extra_repr(self) -> str:
        return f"loss={self.loss!r}, reduction={self.reduction!r}, device={self.device!r}"

    def forward(self, scores: torch.Tensor, y, qid=None, group=None, mask=None) -> torch.Tensor:
        """The reduced structured hinge of ``scores``; its backward is the exact subgradient.

        Parameters
        ----------
        scores : Tensor, shape (n,) or (B, L)
            Floating-point scores: one flat query or queries given by ``qid``/``group``; or one query per row.
        y : Tensor or array-like, same shape as ``scores``
            Whole relevance grades ≥ 0 ({−1, 1} reads as {0, 1}), any integer or floating dtype.
        qid, group : array-like, optional
            The queries of flat scores: one id per document, or LightGBM's contiguous group sizes.
        mask : Tensor or ndarray of bool, shape (B, L), optional
            The real documents of the padded layout; padding may hold anything.

        Returns
        -------
        Tensor
            A scalar ("mean", "sum"), or one value per query ("none").
        """
        options = dict(reduction=self.reduction, relevant_at=self.relevant_at, n_threads=self.n_threads)
        handle = _resolved(self, self.loss, self.loss_params)[1]
        return hinge_of_handle(scores, y, handle, mask=mask, qid=qid, group=group, device=self.device, **options)


class MetricHingeLoss(_LossHandle, torch.nn.Module):
    """The structured hinge of a rank loss for metric learning: every embedding ranks the others.

    Called as pytorch-metric-learning's losses are, ``loss_fn(embeddings, labels, indices_tuple=None,
    ref_emb=None, ref_labels=None)``, without needing PML.  With PML installed, :class:`rankopt.pml.MetricHingeLoss`
    is the same loss as a ``BaseMetricLossFunction``, with PML's distances, reducers, miners and wrappers.
    Each embedding is a query; the documents it ranks are the other embeddings of the batch (itself
    excluded), or the reference set when ``ref_emb``/``ref_labels`` are given. A document is relevant
    when it shares the query's label. The loss is the mean structured hinge over the queries that have
    both a relevant and an irrelevant document (:func:`rankopt.torch.functional.metric_hinge`: the hinge of
    the padded query × document similarity matrix, so its gradient is the exact subgradient through the
    similarities).

    Parameters
    ----------
    loss : str or RankLoss, default "ap"
        Any registered rank loss: "ap", "ndcg", "auc", a plugin's.
    similarity : {"cosine", "dot"}, default "cosine"
        The score a query gives a document: the cosine of their embeddings, or their dot product.
    scale : float, default 1.0
        The scores are the similarities times ``scale``. The hinge weighs score differences against a loss in
        [0, 1]: cosines in [−1, 1] at scale 1 rarely leave the margin, so the hinge stays active on every
        query; a larger scale asks for a margin that shrinks as 1/scale (the digits experiment chooses it on
        validation data).
    relevant : {"same_label"}, default "same_label"
        Which documents are relevant to a query: those with its label.
    n_threads : int, optional
        Threads of the compiled inference.
    device : {"auto", "cpu", "torch"}, default "auto"
        Where the inference runs (:class:`RankHingeLoss`): on a GPU, "auto" keeps the similarity matrix there.
    backend : {"auto", "compiled", "torch"}, optional
        Deprecated: ``device=``.
    **loss_params
        Parameters of a loss given by name.
    """

    SIMILARITIES = SIMILARITIES

    def __init__(
        self,
        loss="ap",
        *,
        similarity="cosine",
        scale=1.0,
        relevant="same_label",
        n_threads=None,
        device="auto",
        backend=None,
        **loss_params,
    ):
        super().__init__()
        refuse_pml_keywords(loss_params)
        self.loss, self.loss_params = loss, loss_params
        self.similarity, self.scale, self.relevant = (
            similarity,
            check_metric_options(similarity, scale, relevant),
            relevant,
        )
        self.n_threads = n_threads
        self.device = device_from_backend(device, backend, type(self).__name__)
        self.rank_loss  # noqa: B018
        check_options("mean", self.device, n_threads)

    @property
    def rank_loss(self):
        """The loss instance the layer computes with (:attr:`RankHingeLoss.rank_loss`)."""
        return _resolved(self, self.loss, self.loss_params)[0]

    def extra_repr(self) -> str:
        return f"loss={self.loss!r}, similarity={self.similarity!r}, scale={self.scale!r}"

    def forward(self, embeddings: torch.Tensor, labels, indices_tuple=None, ref_emb=None, ref_labels=None):
        """The mean structured hinge of the queries the embeddings make, as pytorch-metric-learning calls a loss.

        Parameters
        ----------
        embeddings : Tensor, shape (batch, dim)
        labels : Tensor or array-like of numeric class labels, shape (batch,)
        indices_tuple : None
            A miner's tuples have no role: every embedding ranks all the others.
        ref_emb, ref_labels : Tensor, shape (n, dim) and (n,), optional
            A reference set the queries rank instead of the batch (both or neither).

        Returns
        -------
        Tensor
            A scalar; 0 with a zero gradient when no embedding has anything to rank (a batch of one).
        """
        handle = _resolved(self, self.loss, self.loss_params)[1]
        references = (indices_tuple, ref_emb, ref_labels)
        options = (self.similarity, self.scale, references, self.device, self.n_threads)
        return metric_hinge_of_handle(embeddings, labels, handle, *options)


def _resolved(module: torch.nn.Module, loss, loss_params: dict) -> tuple:
    """(the loss instance, its handle) for ``loss`` (a name with ``loss_params``, or an instance): made once and
    kept on ``module`` for as long as its ``loss`` and ``loss_params`` are the same objects holding the same
    values (``layer.loss_params["k"] = 1`` is seen by the next call), so that a traced forward reads the handle
    as a constant."""
    held = module.__dict__.get("_resolved")
    if held is None or held[0] is not loss or held[1] is not loss_params or not _same_items(held[2], loss_params):
        resolved = resolved_loss(loss, loss_params)
        held = (loss, loss_params, tuple(loss_params.items()), resolved, loss_handle(resolved))
        module.__dict__["_resolved"] = held
    return held[3:]


def _same_items(items: tuple, params: dict) -> bool:
    """Whether ``params`` holds the very values ``items`` were taken from, and nothing else."""
    return len(items) == len(params) and all(params.get(key, _ABSENT) is value for key, value in items)


_ABSENT = object()
