"""The torch layer's one check of a call's layout: shapes, dtypes and devices, nothing that reads the data
(each device checks the values where they are, with the same messages)."""

from __future__ import annotations

import numpy as np
import torch

from rankopt._validation import check_grades, check_hinge_layout, qid_or_group, query_ids

__all__ = ["checked_call", "describe", "labels_on", "refuse_pml_keywords"]

_FLOAT_DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)


def checked_call(scores, y, mask, qid, group):
    """The call's layout checked, without reading the data: (y, mask, qid) as the operator takes them.

    What is torch's is checked here (a tensor of floating scores, the other tensors on its device); the layout
    rules are :func:`rankopt._validation.check_hinge_layout`'s, on the shapes."""
    if not isinstance(scores, torch.Tensor):
        raise TypeError(f"expected scores to be a torch.Tensor, got {type(scores).__name__} instead")
    if scores.dtype not in _FLOAT_DTYPES:
        raise TypeError(f"expected floating-point scores (float16/bfloat16/float32/float64), got {scores.dtype}")
    y = _as_grades(_on_device(y if isinstance(y, torch.Tensor) else _label_array(y), scores, "y"))
    mask = None if mask is None else _on_device(mask, scores, "mask")
    check_hinge_layout(
        tuple(scores.shape),
        tuple(y.shape),
        y_dtype=y.dtype,
        y_numeric=not (y.dtype == torch.bool or y.is_complex()),
        mask_shape=None if mask is None else tuple(mask.shape),
        mask_dtype=None if mask is None else mask.dtype,
        mask_boolean=mask is None or mask.dtype == torch.bool,
        queries_given=qid is not None or group is not None,
    )
    qid = qid_or_group(_host_ids(qid), _host_ids(group), scores.shape[0])
    if qid is not None:
        qid = torch.from_numpy(query_ids(qid, scores.shape[0], per="score"))
    return y, mask, qid


#: Unsigned labels torch's reductions do not take (``min``, ``max``): widened to int64, which holds them all.
_WIDENED = (torch.uint16, torch.uint32)


def _as_grades(y: torch.Tensor) -> torch.Tensor:
    """Labels every device takes: bool as 0/1 (BCE users pass ``y > 0``), unsigned types torch cannot reduce as
    int64; uint64 labels past int64 are refused here, where they can still be named (the only read of data)."""
    if y.dtype == torch.bool:
        return y.to(torch.uint8)
    if y.dtype in _WIDENED:
        return y.to(torch.int64)
    if y.dtype == torch.uint64:
        signed = y.view(torch.int64)
        if bool((signed < 0).any()):
            check_grades(y.reshape(-1).cpu().numpy(), name="y")  # names the first label past int64, as the host does
        return signed
    return y


def _label_array(y) -> np.ndarray:
    """Labels given as an array or a list: numbers as they are; an object array of numbers (a pandas column's)
    read as the host reads it, and anything else refused with the host's words (strings, None)."""
    array = np.asarray(y)
    if array.dtype.kind in "biuf" or array.ndim == 0:
        return array
    return check_grades(array.reshape(-1), name="y").reshape(array.shape)


def _on_device(value, scores: torch.Tensor, name: str) -> torch.Tensor:
    """``value`` as a tensor on the scores' device: a tensor must be there already, an array is moved."""
    if isinstance(value, torch.Tensor):
        if value.device != scores.device:
            raise ValueError(f"expected {name} on the scores' device {scores.device}, got it on {value.device} instead")
        return value  # itself, not a detached view: the host keeps a batch's preparation while it is the same
    array = np.asarray(value)
    if array.dtype.kind not in "biuf":
        raise ValueError(f"expected {name} to hold numbers, got an array of dtype {array.dtype} instead")
    return torch.as_tensor(array, device=scores.device)


def _host_ids(value):
    """Query ids or group sizes as the host validation reads them."""
    if isinstance(value, torch.Tensor):
        # Read outside any torch.func transform: under jacfwd even a captured tensor's storage cannot be read.
        # Ids are data, never differentiated or batched, so the transforms have nothing to see here.
        with torch._C._DisableFuncTorch():
            return value.detach().cpu().numpy()
    return value


def describe(value) -> str:
    return f"shape {tuple(value.shape)}" if isinstance(value, torch.Tensor) else type(value).__name__


def labels_on(labels, embeddings: torch.Tensor, name: str) -> torch.Tensor:
    """``labels`` as a 1-D tensor on the embeddings' device, or an error naming both devices."""
    if not isinstance(labels, torch.Tensor):
        array = None if labels is None else np.asarray(labels)
        if array is None or array.dtype.kind not in "biuf":
            raise TypeError(
                f"expected {name} to be a 1-D tensor or array of numeric class labels, got "
                f"{'None' if array is None else f'an array of dtype {array.dtype}'} instead (encode other labels "
                "as integers, e.g. with sklearn.preprocessing.LabelEncoder)"
            )
        labels = torch.as_tensor(array, device=embeddings.device)
    elif labels.device != embeddings.device:
        raise ValueError(f"expected {name} on the embeddings' device {embeddings.device}, got {labels.device} instead")
    if labels.dim() != 1:
        raise ValueError(f"expected {name} to be 1-D, got shape {tuple(labels.shape)} instead")
    return labels


#: The keywords of pytorch-metric-learning's BaseMetricLossFunction, which rankopt.pml.MetricHingeLoss takes.
PML_KEYWORDS = frozenset({"reducer", "distance", "embedding_regularizer", "embedding_reg_weight", "collect_stats"})


def refuse_pml_keywords(loss_params: dict) -> None:
    """Refuse PML's keywords given to the PML-free metric loss (they would reach the rank loss as parameters),
    naming the class that takes them."""
    pml = sorted(set(loss_params) & PML_KEYWORDS)
    if pml:
        raise TypeError(
            f"expected rankopt.torch.MetricHingeLoss's keywords, got PML's {', '.join(pml)} instead: they belong to "
            "rankopt.pml.MetricHingeLoss, the same loss as a pytorch-metric-learning loss (reducers, distances, "
            "regularizers, stats)"
        )
