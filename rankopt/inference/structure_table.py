"""The structure table: one kernel object per declared loss structure and device.

A loss declares what its Δ and Ψ are (:meth:`rankopt.losses.RankLoss.structure`); everything rankopt
runs for a loss — batched and per-query inference, the ground truth, the brute-force check of
:func:`rankopt.testing.check_loss`, the cost estimate — comes from the kernel this table holds for that
structure.  Binary rank losses that declare no structure map to the kernel whose methods their compiled
form and C1–C4 choose.  Nothing outside this module and :mod:`rankopt.losses.structure` tests a structure's
class.

A new structure is its class, its kernel (a :class:`~rankopt.inference.kernel_base.StructureKernel`) and one
:func:`register_kernel` call; a second implementation of a structure registers under another ``device``, and
:func:`kernel_for` chooses between them.  Devices are not listed anywhere: a device is the name its kernels
register under (``"cpu"``, the compiled kernels registered here; ``"torch"``, the tensor kernels that
:mod:`rankopt.inference.tensor_kernels` registers when :mod:`rankopt.torch` imports it; any other a module of
kernels registers, CONTRIBUTING's "Adding a device").
"""

from __future__ import annotations

from rankopt.inference.binary_kernels import BinaryRankKernel, TopKCountKernel
from rankopt.inference.graded_kernels import GradedPairKernel, GradedPositionKernel, GradedQueryKernel
from rankopt.inference.kernel_base import Kernel
from rankopt.losses.base import RankLoss

__all__ = [
    "device_array_type",
    "kernel_for",
    "kernel_for_loss",
    "reads_grades",
    "register_kernel",
    "registered_devices",
    "registered_kernels",
    "registered_structures",
    "unregister_kernel",
]

#: (structure class or None, device) → kernel.  Kept across ``importlib.reload`` of this module: the table
#: holds plugins' and devices' registrations, which a reload of the module would not make again.
_KERNELS: dict[tuple[type | None, str], Kernel] = globals().get("_KERNELS", {})


def register_kernel(kernel: Kernel) -> None:
    """Register ``kernel`` for its structure and its device (``kernel.device``, any name: the first kernel
    registered under a name makes the device); a second kernel for the same pair is refused.

    The same kernel class registered again — its module imported a second time, or reloaded — replaces the
    first: the class is the same code, and a notebook re-running its cell must not fail.
    """
    if not isinstance(kernel, Kernel):
        raise TypeError(f"expected a Kernel instance, got {type(kernel).__name__} instead")
    key = (_structure_key(kernel.structure), kernel.device)
    held = _KERNELS.get(key)
    if held is not None and held is not kernel and _class_name(held) != _class_name(kernel):
        raise ValueError(
            f"expected one kernel per structure and device, got a second for {_name(kernel.structure)} on "
            f"{kernel.device!r}: {type(kernel).__qualname__} beside {type(held).__qualname__}; "
            f"unregister_kernel({_name(kernel.structure)}, device={kernel.device!r}) first to replace it"
        )
    _KERNELS[key] = kernel


def unregister_kernel(structure: type | None, device: str = "cpu") -> Kernel:
    """Remove and return the kernel of the structure class ``structure`` (None: the binary rank losses that
    declare none) on ``device``; a KeyError naming the registered ones when there is none."""
    key = (_structure_key(structure), device)
    if key not in _KERNELS:
        raise KeyError(
            f"expected a structure class with a kernel on {device!r} ({', '.join(registered_structures(device))}), "
            f"got {_name(structure)} instead"
        )
    return _KERNELS.pop(key)


def registered_kernels() -> list[tuple[str, str, str]]:
    """(structure, device, kernel class) of every registered kernel, for ``rankopt plugins`` (the tensor kernels
    are there once :mod:`rankopt.torch` is imported)."""
    return sorted((_name(structure), device, _class_name(kernel)) for (structure, device), kernel in _KERNELS.items())


def registered_structures(device: str = "cpu") -> list[str]:
    """The names of the structures with a kernel on ``device``, for messages."""
    return sorted(_name(structure) for structure, held_device in _KERNELS if held_device == device)


def registered_devices() -> list[str]:
    """Every device some kernel is registered on."""
    return sorted({device for _, device in _KERNELS})


def device_array_type(device: str) -> str:
    """The arrays ``device``'s kernels take ("numpy" or "torch"), or a ValueError naming the devices."""
    for (_, held_device), kernel in _KERNELS.items():
        if held_device == device:
            return kernel.array_type
    raise _unknown_device(device)


def _unknown_device(device: str) -> ValueError:
    return ValueError(
        f"expected a device with registered kernels ({', '.join(registered_devices())}), got {device!r} instead "
        "(a device's kernels register when its module is imported: the tensor kernels, 'torch', with rankopt.torch)"
    )


def kernel_for(structure, device: str = "cpu") -> Kernel:
    """The kernel of a declared structure (None: a binary rank loss that declares none) on ``device``
    ("cpu": the compiled kernels; "torch": the tensor-op ones; any device a module registered).

    Looked up by the structure's exact class: a subclass of a structure may promise something else.
    Raises ValueError naming the registered devices or structures when there is none.
    """
    if device not in registered_devices():
        raise _unknown_device(device)
    key = (None if structure is None else type(structure), device)
    kernel = _KERNELS.get(key)
    if kernel is None:
        raise ValueError(
            f"expected a loss structure with a registered kernel on {device!r} "
            f"({', '.join(registered_structures(device))}), got {type(structure).__qualname__} instead"
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


def reads_grades(loss) -> bool:
    """Whether ``loss``'s kernel reads relevance grades (a graded structure's) rather than 0/1 relevance, which
    the labels give from ``relevant_at`` on: the question every consumer asks here, of the kernel.

    False for a loss that ranks nothing (a labeling loss).  A graded loss that declares no graded structure has
    no kernel; it is taken at its word here, and refused, with :func:`kernel_for_loss`'s message, where its
    inference is asked for.
    """
    if not isinstance(loss, RankLoss):
        return False
    try:
        kernel, _ = kernel_for_loss(loss)
    except ValueError:
        return loss.graded
    return kernel.graded


def _name(structure: type | None) -> str:
    return "binary rank loss (no structure)" if structure is None else structure.__name__


def _class_name(kernel: Kernel) -> str:
    return f"{type(kernel).__module__}.{type(kernel).__qualname__}"


def _structure_key(structure):
    """A structure class; an instance given by mistake is refused with what to pass."""
    if structure is not None and not isinstance(structure, type):
        raise TypeError(f"expected a structure class (or None), got an instance of {type(structure).__name__} instead")
    return structure


# The built-in kernels, where nothing holds their place: a reload keeps a kernel that replaced one.
for _kernel in (BinaryRankKernel(), TopKCountKernel(), GradedPositionKernel(), GradedPairKernel(), GradedQueryKernel()):
    _KERNELS.setdefault((_kernel.structure, _kernel.device), _kernel)
