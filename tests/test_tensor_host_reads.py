"""The tensor backend reads the device once per forward and backward (issue 50, point 3), counted on the CPU.

A CUDA step that waits for the loss cannot overlap the next batch's work, and CUDA graphs and ``torch.compile``
cannot take it whole.  Counted here: the data-dependent operators (whose output shape or value the host must
read: ``nonzero``, ``unique``, ``masked_select``, a boolean index, ``_local_scalar_dense``…) through a
``TorchDispatchMode``, and the Python calls that read a tensor (``tolist``, ``numpy``, ``cpu``, ``item``, and
``bool``/``int``/``float`` of a tensor).  The one read is the input checks' verdicts, sent home with every size
the kernel needs from the data (:meth:`rankopt.inference.tensor_kernels.TensorKernel.facts`).
"""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="the torch extra (rankopt[torch]) is not installed")
from torch.utils._python_dispatch import TorchDispatchMode  # noqa: E402

from rankopt.torch import RankHingeLoss  # noqa: E402

#: Operators whose result the host must read from the device to go on.
DATA_DEPENDENT = {
    "aten::_local_scalar_dense",
    "aten::nonzero",
    "aten::nonzero_static",
    "aten::_unique2",
    "aten::unique_dim",
    "aten::unique_consecutive",
    "aten::masked_select",
    "aten::bincount",
    "aten::repeat_interleave",
}
#: Tensor methods that hand the host a tensor's values.
READS = ("tolist", "numpy", "cpu", "item", "__bool__", "__int__", "__float__", "__index__")


class _Counter(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.ops: list[str] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = func._schema.name
        boolean_index = name == "aten::index" and any(
            isinstance(index, torch.Tensor) and index.dtype == torch.bool
            for index in (args[1] if len(args) > 1 else [])
        )
        if name in DATA_DEPENDENT or boolean_index:
            self.ops.append(name)
        return func(*args, **(kwargs or {}))


@pytest.fixture
def reads(monkeypatch):
    """The Python-level reads, counted while the test runs."""
    seen: list[str] = []
    for method in READS:
        original = getattr(torch.Tensor, method)

        def counted(self, *args, _original=original, _method=method, **kwargs):
            seen.append(_method)
            return _original(self, *args, **kwargs)

        monkeypatch.setattr(torch.Tensor, method, counted)
    return seen


BUILT_IN = [
    ("ap", {}),
    ("ndcg", {}),
    ("auc", {}),
    ("precision_at_k", {"k": 10}),
    ("ndcg_graded", {"k": 10}),
    ("pairwise", {}),
]


@pytest.mark.parametrize("name, params", BUILT_IN, ids=[name for name, _ in BUILT_IN])
@pytest.mark.parametrize("masked", [False, True], ids=["no mask", "mask"])
def test_one_forward_and_backward_reads_the_device_once(name, params, masked, reads):
    rng = np.random.default_rng(0)
    scores = torch.tensor(rng.normal(size=(64, 30)), dtype=torch.float32, requires_grad=True)
    y = torch.tensor(np.where(rng.random((64, 30)) < 0.2, rng.integers(1, 5, (64, 30)), 0))
    mask = torch.tensor(np.arange(30)[None, :] < rng.integers(10, 31, 64)[:, None]) if masked else None
    layer = RankHingeLoss(name, device="torch", **params)
    layer(scores, y, mask=mask)  # warm: constants copied to the device once
    reads.clear()
    with _Counter() as counter:
        value = layer(scores, y, mask=mask)
        value.backward()
    assert len(reads) <= 1, reads
    assert counter.ops == [], counter.ops
