"""PyTorch tensors <-> the NumPy arrays kernels run on, without copies where possible.

    tensor_to_array(info, value, what)  -> np.ndarray   (a view of a contiguous CPU tensor)
    array_to_tensor(array)              -> torch.Tensor (a view of the array)
    torch_dtype(scalar_type)            -> torch.dtype

Rules: a contiguous CPU tensor of the declared dtype is shared with the kernel
through `.numpy()` (no copy); a non-contiguous one is copied once with
`.contiguous()`; results come back through `torch.from_numpy` (no copy). A tensor of
another dtype is a `ShapeError` whose hint shows the `.to(torch.<dtype>)` to write
(never a silent cast). `requires_grad` tensors are detached first, so a non-training
layer accepts them too.

Devices (`on_device` decides, per call, from the layer's target):

- target "llvm" / "interp": CPU tensors; a CUDA tensor is a `TCError` whose hint says
  to define the layer with target="cuda".
- target "cuda": CUDA tensors take the device path (`device_tensor`: the tensor itself,
  detached and contiguous, handed to `Kernel`, whose outputs are CUDA tensors made on
  torch's current stream); CPU tensors take the NumPy path (copied to the GPU and back,
  CPU tensors out); a mix of CPU and CUDA tensors is a `TCError`.
- target "cuda-emulated": CPU tensors take the device path (in emulation the device's
  memory is the host's), so CI runs the code a GPU runs; a CUDA tensor is a `TCError`.

Any other device (meta, mps, ...) is refused the same way.
"""

from __future__ import annotations

import numbers
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from compiler.diagnostics import ShapeError, TCError
from compiler.frontend.ast import ScalarType
from compiler.frontend.checked import TensorInfo
from compiler.interp.expr import NP_DTYPE

# torch.from_numpy knows each NumPy dtype's tensor dtype: derive the table from it.
TORCH_DTYPE: dict[ScalarType, torch.dtype] = {
    t: torch.from_numpy(np.zeros(0, dtype=np_type)).dtype for t, np_type in NP_DTYPE.items()
}


def torch_dtype(scalar_type: ScalarType) -> torch.dtype:
    """The tensor dtype of a TC scalar type (`float` -> torch.float32, ...)."""
    return TORCH_DTYPE[scalar_type]


def _dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def check_device(info: TensorInfo, value: torch.Tensor, what: str, target: str = "llvm") -> None:
    """Refuse tensors a layer of `target` cannot take (see the module doc), with a
    TCError: CUDA tensors unless the target is "cuda", devices other than CPU/CUDA."""
    device = value.device
    if device.type == "cpu" or (device.type == "cuda" and target == "cuda"):
        return
    if device.type == "cuda":
        runs = "the CUDA C emulated on the CPU" if target == "cuda-emulated" else "the CPU"
        raise TCError(
            f"{what} '{info.name}' is a CUDA tensor ({device}), but this layer is defined "
            f"for target '{target}', which runs on {runs}",
            info.span,
            hint="define the layer with target='cuda' to run on CUDA tensors, or move it "
            f"to the CPU with {info.name}.cpu()",
        )
    raise TCError(
        f"{what} '{info.name}' is on device '{device}'; only CPU tensors (and CUDA tensors "
        "on target 'cuda') are supported",
        info.span,
        hint=f"move it to the CPU with {info.name}.cpu()",
    )


def on_device(target: str, infos: Sequence[TensorInfo], values: Sequence[Any]) -> bool:
    """Whether a layer call of `target` with `values` takes the device path (the
    tensors go to the kernel as they are; see the module doc). A TCError for a mix of
    CPU and CUDA tensors, or a device the target cannot take."""
    tensors = [(i, v) for i, v in zip(infos, values, strict=False) if isinstance(v, torch.Tensor)]
    for info, v in tensors:
        check_device(info, v, "input", target)
    if target not in ("cuda", "cuda-emulated"):
        return False
    if not tensors or target == "cuda-emulated":  # emulation: CPU memory is the device's
        return bool(tensors)
    cuda = [v.is_cuda for _, v in tensors]
    if all(cuda) or not any(cuda):
        return all(cuda)
    cpu = next(i for (i, _), c in zip(tensors, cuda, strict=True) if not c)
    raise TCError(
        f"input '{cpu.name}' is a CPU tensor, the others are CUDA tensors: a layer of "
        "target 'cuda' takes all its tensors on the GPU, or all on the CPU",
        cpu.span,
        hint=f"move it with {cpu.name}.cuda() (tcc never copies between devices implicitly)",
    )


def _checked_tensor(info: TensorInfo, value: Any, what: str) -> torch.Tensor:
    """`value` checked to be a tensor of the declared dtype, detached and contiguous."""
    if not isinstance(value, torch.Tensor):
        raise ShapeError(
            f"{what} '{info.name}' must be a torch.Tensor, got {type(value).__name__}",
            info.span,
            hint=f"convert with torch.as_tensor(..., dtype=torch.{_dtype_name(torch_dtype(info.dtype))})",
        )
    expected = torch_dtype(info.dtype)
    if value.dtype != expected:
        raise ShapeError(
            f"{what} '{info.name}' is declared {info.dtype.value}, got a tensor of dtype "
            f"{_dtype_name(value.dtype)}",
            info.span,
            hint=f"convert it with {info.name}.to(torch.{_dtype_name(expected)})",
        )
    tensor = value.detach()
    if not tensor.is_contiguous():
        tensor = tensor.contiguous()
    return tensor.resolve_conj().resolve_neg()


def device_tensor(info: TensorInfo, value: Any, what: str = "input") -> Any:
    """A kernel argument on the device path: the tensor itself (detached, contiguous,
    of the declared dtype), or a Python number for a 0-d input."""
    if isinstance(value, (numbers.Number, np.generic)) and not isinstance(value, torch.Tensor):
        return value
    return _checked_tensor(info, value, what)


def tensor_to_array(info: TensorInfo, value: Any, what: str = "input") -> Any:
    """A kernel argument for a tensor (or a Python number for a 0-d input).

    The result shares memory with `value` when it is a contiguous CPU tensor of the
    declared dtype. Shape errors other than dtype and device are left to the kernel,
    which reports them against the def's declaration."""
    if isinstance(value, (numbers.Number, np.generic)) and not isinstance(value, torch.Tensor):
        return value
    if isinstance(value, torch.Tensor):
        check_device(info, value, what)
    return _checked_tensor(info, value, what).numpy()


def array_to_tensor(array: np.ndarray) -> torch.Tensor:
    """The array as a tensor sharing its memory (a copy only if NumPy forbids writes)."""
    if not array.flags.writeable or not array.flags.c_contiguous:
        array = np.array(array, order="C")
    return torch.from_numpy(array)


__all__ = [
    "TORCH_DTYPE",
    "array_to_tensor",
    "check_device",
    "device_tensor",
    "on_device",
    "tensor_to_array",
    "torch_dtype",
]
