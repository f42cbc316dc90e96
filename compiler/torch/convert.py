"""PyTorch tensors <-> the NumPy arrays kernels run on, without copies where possible.

    tensor_to_array(info, value, what)  -> np.ndarray   (a view of a contiguous CPU tensor)
    array_to_tensor(array)              -> torch.Tensor (a view of the array)
    torch_dtype(scalar_type)            -> torch.dtype

Rules: a contiguous CPU tensor of the declared dtype is shared with the kernel
through `.numpy()` (no copy); a non-contiguous one is copied once with
`.contiguous()`; results come back through `torch.from_numpy` (no copy). A tensor of
another dtype is a `ShapeError` whose hint shows the `.to(torch.<dtype>)` to write
(never a silent cast); a CUDA tensor is a `TCError` saying the CUDA target is not
available yet; any other non-CPU device is refused the same way. `requires_grad`
tensors are detached first, so a non-training layer accepts them too.
"""

from __future__ import annotations

import numbers
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


def check_device(info: TensorInfo, value: torch.Tensor, what: str) -> None:
    """Refuse tensors that do not live in CPU memory, with a clear TCError."""
    device = value.device
    if device.type == "cpu":
        return
    if device.type == "cuda":
        raise TCError(
            f"{what} '{info.name}' is a CUDA tensor ({device}); the CUDA target is not "
            f"available yet",
            info.span,
            hint=f"move it to the CPU with {info.name}.cpu() (tcc runs on the llvm target)",
        )
    raise TCError(
        f"{what} '{info.name}' is on device '{device}'; only CPU tensors are supported",
        info.span,
        hint=f"move it to the CPU with {info.name}.cpu()",
    )


def tensor_to_array(info: TensorInfo, value: Any, what: str = "input") -> Any:
    """A kernel argument for a tensor (or a Python number for a 0-d input).

    The result shares memory with `value` when it is a contiguous CPU tensor of the
    declared dtype. Shape errors other than dtype and device are left to the kernel,
    which reports them against the def's declaration."""
    if isinstance(value, (numbers.Number, np.generic)) and not isinstance(value, torch.Tensor):
        return value
    if not isinstance(value, torch.Tensor):
        raise ShapeError(
            f"{what} '{info.name}' must be a torch.Tensor, got {type(value).__name__}",
            info.span,
            hint=f"convert with torch.as_tensor(..., dtype=torch.{_dtype_name(torch_dtype(info.dtype))})",
        )
    check_device(info, value, what)
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
    return tensor.resolve_conj().resolve_neg().numpy()


def array_to_tensor(array: np.ndarray) -> torch.Tensor:
    """The array as a tensor sharing its memory (a copy only if NumPy forbids writes)."""
    if not array.flags.writeable or not array.flags.c_contiguous:
        array = np.array(array, order="C")
    return torch.from_numpy(array)


__all__ = ["TORCH_DTYPE", "array_to_tensor", "check_device", "tensor_to_array", "torch_dtype"]
