"""Calling a target="cuda" Kernel on device arrays: memory stays on the GPU.

    C, = k(A_dev, B_dev)              # torch CUDA tensors, CuPy arrays, pycuda GPUArrays, ...

Any object with `__cuda_array_interface__` (version 2 or 3) is a device array: its
pointer, shape and dtype are read from the interface, validated as NumPy inputs are
(rank, dtype, C-contiguous), and passed to the kernels as they are, with no copy.
Outputs are allocated on the device: torch tensors when the inputs are torch tensors
(launched on torch's current stream), else `codegen.cuda_driver.DeviceArray`s (wrap
them with `cupy.asarray(...)`, or `.get()` a NumPy copy). `out=` may give device
arrays to write into. The call synchronises only when it must read the error record
of a bounds check or free temporaries.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from compiler.diagnostics import ShapeError
from compiler.interp.expr import NP_DTYPE
from compiler.poly.astgen import ERROR_BUFFER
from compiler.runtime.native import check_failure
from compiler.shapes import bind_sizes, output_shapes


def is_device_array(value: object) -> bool:
    """True for a device array (a torch tensor only when it is on a CUDA device)."""
    if _is_torch(value):
        return bool(value.is_cuda)  # type: ignore[attr-defined]
    return hasattr(type(value), "__cuda_array_interface__") or hasattr(
        value, "__cuda_array_interface__"
    )


def _is_torch(value: object) -> bool:
    return type(value).__module__.startswith("torch")


def _interface(value: Any) -> tuple[int, tuple[int, ...], np.dtype, bool]:
    """(pointer, shape, dtype, C-contiguous); torch tensors are read directly (reading
    their `__cuda_array_interface__` costs tens of microseconds a call)."""
    if _is_torch(value):
        dtype = _TORCH_DTYPES.get(value.dtype)
        if dtype is None:
            import torch

            try:
                dtype = torch.empty(0, dtype=value.dtype).numpy().dtype
            except (TypeError, RuntimeError):  # bfloat16 & co.: no NumPy dtype, never declared
                dtype = np.dtype([("torch", "V1")])
            _TORCH_DTYPES[value.dtype] = dtype
        return int(value.data_ptr()), tuple(value.shape), dtype, bool(value.is_contiguous())
    face = value.__cuda_array_interface__
    shape = tuple(int(d) for d in face["shape"])
    dtype = np.dtype(face["typestr"])
    strides = face.get("strides")
    contiguous = strides is None or tuple(strides) == _c_strides(shape, dtype.itemsize)
    return int(face["data"][0]), shape, dtype, contiguous


_TORCH_DTYPES: dict[Any, np.dtype] = {}


def _view(info: Any, value: Any, what: str) -> tuple[int, tuple[int, ...]]:
    """(pointer, shape) of a device array, checked against the declaration `info`."""
    if not is_device_array(value):
        raise ShapeError(
            f"{what} '{info.name}' must be a device array like the others "
            f"(__cuda_array_interface__), got {type(value).__name__}",
            info.span,
            hint="on target 'cuda' pass all arrays on the device, or all as NumPy arrays",
        )
    ptr, shape, dtype, contiguous = _interface(value)
    expected = np.dtype(NP_DTYPE[info.dtype])
    if len(shape) != info.rank:
        raise ShapeError(
            f"{what} '{info.name}' is declared with rank {info.rank}, got a device array "
            f"of shape {shape}",
            info.span,
        )
    if dtype != expected:
        raise ShapeError(
            f"{what} '{info.name}' is declared {info.dtype.value}, got a device array of "
            f"dtype {dtype}",
            info.span,
            hint=f"convert it on the device to {expected.name}",
        )
    if not contiguous:
        raise ShapeError(
            f"{what} '{info.name}' must be C-contiguous on the device",
            info.span,
            hint="pass a contiguous copy (torch: .contiguous(); CuPy: cupy.ascontiguousarray)",
        )
    return ptr, shape


def _c_strides(shape: tuple[int, ...], itemsize: int) -> tuple[int, ...]:
    strides, step = [], itemsize
    for d in reversed(shape):
        strides.append(step)
        step *= max(d, 1)
    return tuple(reversed(strides))


def device_call(kernel: Any, arrays: Sequence[Any], out: Any) -> tuple[Any, ...]:
    """Run `kernel` (target "cuda") on device arrays; see the module doc."""
    from compiler.codegen.cuda_driver import DeviceArray

    program = kernel._native
    device, module = program._module
    infos = kernel._inputs
    if len(arrays) != len(infos):
        raise ShapeError(
            f"def '{kernel.name}' takes {len(infos)} input(s), got {len(arrays)}",
            kernel.ranged.checked.definition.span,
        )
    pointers: dict[str, int] = {}
    shapes_in: dict[str, tuple[int, ...]] = {}
    for info, value in zip(infos, arrays, strict=True):
        pointers[info.name], shapes_in[info.name] = _view(info, value, "input")
    sizes, shapes = _signature(program, kernel, shapes_in)
    torch_like = next((a for a in arrays if type(a).__module__.startswith("torch")), None)
    given = _given(kernel, out)
    results = []
    for info in kernel._outputs:
        value = given.get(info.name)
        if value is None:
            dtype = np.dtype(NP_DTYPE[info.dtype])
            if torch_like is not None:
                value = _torch_zeros(shapes[info.name], dtype, torch_like)
            else:
                value = DeviceArray(shapes[info.name], dtype, device)
        ptr, shape = _view(info, value, "output")
        if shape != shapes[info.name]:
            raise ShapeError(
                f"out= for output '{info.name}' has shape {shape}, expected {shapes[info.name]}",
                info.span,
            )
        pointers[info.name] = ptr
        results.append(value)
    stream = _torch_stream(torch_like) if torch_like is not None else 0
    allocated: list[int] = []
    error = None
    if program.lowered.checks:
        error = device.alloc(16)
        allocated.append(error)
        device.zero(error, 16, stream)
        pointers[ERROR_BUFFER] = error
    try:
        program.launch_all(device, module, pointers, sizes, stream=stream, allocated=allocated)
        if allocated:
            device.synchronize(stream)
        if error is not None:
            record = np.zeros(2, np.int64)
            device.to_host(record, error)
            if record[0]:
                raise check_failure(program.lowered.checks, record, {**shapes_in, **shapes})
    finally:
        for ptr in allocated:
            device.free(ptr)
    return tuple(results)


def _signature(
    program: Any, kernel: Any, shapes_in: dict[str, tuple[int, ...]]
) -> tuple[dict[str, int], dict[str, tuple[int, ...]]]:
    """The sizes and output shapes for these input shapes (remembered per shapes: the
    host's work per call should be a few launches, not shape inference)."""
    memo = program.__dict__.setdefault("_signatures", {})
    key = tuple(shapes_in.items())
    found = memo.get(key)
    if found is None:
        sizes = bind_sizes(kernel.ranged, shapes_in)
        found = (sizes, output_shapes(kernel.ranged, sizes))
        if len(memo) > 64:
            memo.clear()
        memo[key] = found
    return found


def _given(kernel: Any, out: Any) -> dict[str, Any]:
    if out is None:
        return {}
    names = [t.name for t in kernel._outputs]
    if isinstance(out, Mapping):
        return {k: v for k, v in out.items() if v is not None}
    if isinstance(out, (tuple, list)) and len(out) == len(names):
        return {n: v for n, v in zip(names, out, strict=True) if v is not None}
    raise ShapeError(
        "out= must be a tuple/list of device arrays (one per output) or a dict by name"
    )


def _torch_zeros(shape: tuple[int, ...], dtype: np.dtype, like: Any) -> Any:
    import torch

    tdtype = torch.from_numpy(np.empty(0, dtype)).dtype
    return torch.zeros(shape, dtype=tdtype, device=like.device)


def _torch_stream(like: Any) -> int:
    import torch

    return int(torch.cuda.current_stream(like.device).cuda_stream)


__all__ = ["device_call", "is_device_array"]
