"""A structured-hinge loss layer for PyTorch rankers: any registered rank loss, exact inference.

``RankHingeLoss(loss)`` is :func:`rankopt.structured_hinge` as a ``torch.nn.Module``, thin over
:func:`rankopt.torch.functional.rank_hinge`: the forward pass computes each query's structured hinge
h(s) = max_R [Δ(R*, R) + Σ_i (c_i(R) − c_i(R*)) s_i] with the batched loss-augmented inference (no Python
loop over queries), and the backward pass returns the exact subgradient c(R̂) − c(R*), scaled like the
reduction.  The loss is any registered rank loss — AP, NDCG, ROC area, precision at k, graded NDCG@k,
pairwise, a plugin's.  ``MetricHingeLoss`` ranks a batch's embeddings by similarity
(:func:`rankopt.torch.functional.metric_hinge`).

Two devices compute the same hinge (``device=``).  ``"cpu"``: the compiled kernels on the host, with OpenMP
threads; CUDA (or other device) scores are copied to the host once per call and the gradient copied back.
``"torch"``: the structure table's tensor-op kernels (:mod:`rankopt.inference.tensor_kernels`), in torch
operations on the scores' own device, so GPU scores never leave the GPU; it takes the padded layout (and one
flat query) of every structure but a loss's own per-query inference, and a loss or layout it cannot take runs
on the compiled kernels with one log line saying so.  ``"auto"`` (the default) is ``"cpu"`` for CPU tensors
and ``"torch"`` elsewhere.  float16 and bfloat16 scores are computed in float32, and their loss value is
returned in float32 (a hinge can exceed float16's range); the gradient keeps the scores' dtype.  In the padded
layout only the documents the mask keeps are read: padding may hold anything.  Labels may be any integer or
floating dtype holding whole grades (float16 and bfloat16 included, read through float32).

Both run as one operator, ``torch.ops.rankopt.rank_hinge`` (:mod:`rankopt.torch._op`), so that
``torch.compile`` takes a training step with the hinge as one node of its graph.  Importing :mod:`rankopt`
never imports torch; this module does (the ``rankopt[torch]`` extra).

The hinge is piecewise linear in the scores: its second derivative is 0 almost everywhere, and a double
backward is refused with that reason rather than returning zeros silently.
"""

from __future__ import annotations

from rankopt.torch.functional import metric_hinge, rank_hinge
from rankopt.torch.modules import MetricHingeLoss, RankHingeLoss

__all__ = ["MetricHingeLoss", "RankHingeLoss", "metric_hinge", "rank_hinge"]
