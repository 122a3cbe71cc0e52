"""The structure table: one kernel object per declared loss structure and device.

A loss declares what its Δ and Ψ are (:meth:`rankopt.losses.RankLoss.structure`); everything rankopt
runs for a loss — batched and per-query inference, the ground truth, the brute-force check of
:func:`rankopt.testing.check_loss`, the cost estimate — comes from the kernel this table holds for that
structure.  Binary rank losses that declare no structure map to the kernel whose methods their compiled
form and C1–C4 choose.  Nothing outside this module and :mod:`rankopt.losses.structure` tests a structure's
class.

A new structure is its class, its kernel (a :class:`~rankopt.inference.kernel_base.StructureKernel`) and one
:func:`register_kernel` call; a second implementation of a structure (a tensor-op kernel that runs where the
scores are) registers under another ``device``, and :func:`kernel_for` chooses between them.
"""

from __future__ import annotations

import importlib
from typing import Literal, overload

from rankopt.inference.binary_kernels import BinaryRankKernel, TopKCountKernel
from rankopt.inference.graded_kernels import GradedPairKernel, GradedPositionKernel, GradedQueryKernel
from rankopt.inference.kernel_base import Kernel, StructureKernel
from rankopt.losses.base import RankLoss

__all__ = ["kernel_for", "kernel_for_loss", "register_kernel", "registered_structures"]

#: (structure class or None, device) → kernel.
_KERNELS: dict[tuple[type | None, str], Kernel] = {}
#: The modules that register a device's kernels, imported on the first lookup for that device (the
#: tensor kernels import torch, which ``import rankopt`` never does).
_DEVICE_MODULES = {"torch": "rankopt.inference.tensor_kernels"}


def register_kernel(kernel: Kernel) -> None:
    """Register ``kernel`` for its structure and device; a second kernel for the same pair is refused."""
    if not isinstance(kernel, Kernel):
        raise TypeError(f"expected a Kernel instance, got {type(kernel).__name__} instead")
    key = (kernel.structure, kernel.device)
    held = _KERNELS.get(key)
    if held is not None and held is not kernel:
        raise ValueError(
            f"expected one kernel per structure and device, got a second for {_name(kernel.structure)} on "
            f"{kernel.device!r}: {type(kernel).__qualname__} beside {type(held).__qualname__}"
        )
    _KERNELS[key] = kernel


def registered_structures() -> list[str]:
    """The names of the structures with a kernel on the CPU, for messages."""
    return sorted(_name(structure) for structure, device in _KERNELS if device == "cpu")


@overload
def kernel_for(structure, device: Literal["cpu"] = "cpu") -> StructureKernel: ...


@overload
def kernel_for(structure, device: str) -> Kernel: ...


def kernel_for(structure, device: str = "cpu") -> Kernel:
    """The kernel of a declared structure (None: a binary rank loss that declares none) on ``device``
    ("cpu": the compiled kernels; "torch": the tensor-op ones).

    Looked up by the structure's exact class: a subclass of a structure may promise something else.
    Raises ValueError naming the registered structures when there is none.
    """
    if device in _DEVICE_MODULES:
        importlib.import_module(_DEVICE_MODULES[device])  # registers its kernels on first import
    key = (None if structure is None else type(structure), device)
    kernel = _KERNELS.get(key)
    if kernel is None:
        raise ValueError(
            f"expected a loss structure with a registered kernel on {device!r} ({', '.join(registered_structures())}), "
            f"got {type(structure).__qualname__} instead"
        )
    return kernel


def kernel_for_loss(loss: RankLoss, device: str = "cpu"):
    """(kernel, structure) for ``loss``: its declared structure's kernel, or a ValueError saying why it has none.

    A graded loss must declare a graded structure: over grades there is no default.
    """
    structure = loss.structure()
    kernel = kernel_for(structure, device) if structure is not None or not loss.graded else None
    if kernel is None or kernel.graded != loss.graded:
        raise ValueError(
            f"no inference over {'graded' if loss.graded else 'binary'} relevance is known for the loss "
            f"{loss.name!r} ({type(loss).__module__}.{type(loss).__qualname__}): its structure() declares "
            f"{'none' if structure is None else repr(structure)}. The built-in graded losses declare theirs for "
            "themselves, not subclasses (a subclass may change Δ); subclass rankopt.losses.GradedPositionLoss "
            "(gain and discount) or return a rankopt.losses.structure.GradedPositionStructure (docs/plugins.md)"
        )
    return kernel, structure


def _name(structure: type | None) -> str:
    return "binary rank loss (no structure)" if structure is None else structure.__name__


for _kernel in (BinaryRankKernel(), TopKCountKernel(), GradedPositionKernel(), GradedPairKernel(), GradedQueryKernel()):
    register_kernel(_kernel)
