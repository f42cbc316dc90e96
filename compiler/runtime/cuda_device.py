"""Calling a CUDA-target Kernel on device arrays: memory stays on the device.

    C, = k(A_dev, B_dev)              # torch CUDA tensors, CuPy arrays, pycuda GPUArrays, ...
    dA, dB = k.vjp(A_dev, B_dev, grad_outputs=(dC_dev,))   # compiler.backward: same rule

Any object with `__cuda_array_interface__` (version 2 or 3) is a device array: its
pointer, shape and dtype are read from the interface, validated as NumPy inputs are
(rank, dtype, C-contiguous), and passed to the kernels as they are, with no copy.
A 0-d input may be a Python number (copied to a small device buffer). Outputs are
allocated on the device: torch tensors when some argument is a torch tensor
(launched on torch's current stream), else `cuda.cuda_driver.DeviceArray`s (wrap
them with `cupy.asarray(...)`, or `.get()` a NumPy copy); an output the kernels
overwrite in full is not zero-filled. `out=` may give device arrays to write into.
The call allocates nothing and does not synchronise in the steady state
(`runtime.cuda_host`: the error record and temporaries are pooled per stream, a
bounds error surfaces when the host can read it without waiting, or at
`synchronize(kernel)`); only a 0-d input given as a number makes it synchronise (to
free its buffer). `CudaOptions(graph=True)` replays a captured CUDA graph.

The rule for mixing: once one argument is a device array, every array argument must
be one (a NumPy array among them is a `ShapeError`: tcc never copies implicitly
between host and device). All arguments on the host take the NumPy path instead.

Target "cuda-emulated" runs the same code (`CudaProgram.device_module`: host memory
behind the driver's methods, `cuda.cuda_emulation.EmulatedDevice`): there a device
array is any object whose `__cuda_array_interface__` points at host memory, and a
torch tensor on the CPU (the emulated device's memory is the host's). A torch CUDA
tensor or a CuPy array there is a `TCError` (its memory is on a real GPU).
"""

from __future__ import annotations

import numbers
import sys
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from compiler.diagnostics import ShapeError, TCError
from compiler.interp.expr import NP_DTYPE
from compiler.poly.astgen import ERROR_BUFFER
from compiler.shapes import bind_sizes, output_shapes

ScalarInput = Callable[[Any, Any, np.dtype], np.ndarray]  # (info, number, dtype) -> 0-d array
_REAL_GPU_MODULES = ("cupy", "numba.cuda.cudadrv", "pycuda")


def is_device_array(value: object, emulated: bool = False) -> bool:
    """True for a device array of the target: a torch tensor on a CUDA device (in
    emulation: any torch tensor, CPU ones being the emulated device's), or any object
    with `__cuda_array_interface__`."""
    if is_torch(value):
        return emulated or bool(value.is_cuda)  # type: ignore[attr-defined]
    return hasattr(type(value), "__cuda_array_interface__") or hasattr(
        value, "__cuda_array_interface__"
    )


def uses_device(kernel: Any, values: Sequence[Any]) -> bool:
    """Whether a call of `kernel` with `values` (None entries ignored) takes the device
    path: a CUDA target and some device array among them. A ShapeError when device
    arrays and NumPy arrays are mixed (see the module doc)."""
    if kernel.target not in ("cuda", "cuda-emulated"):
        return False
    emulated = kernel.target == "cuda-emulated"
    found = [v for v in values if v is not None and is_device_array(v, emulated)]
    if not found:
        return False
    for v in values:
        if v is None or is_device_array(v, emulated) or _is_number(v):
            continue
        raise ShapeError(
            f"def '{kernel.name}' on target '{kernel.target}' got device arrays and "
            f"a host value ({type(v).__name__}): all arrays must be on the device, or all "
            "NumPy arrays",
            kernel.ranged.checked.definition.span,
            hint="tcc never copies between host and device implicitly: copy it yourself "
            "(torch: .cuda(); CuPy: cupy.asarray), or pass every array as NumPy",
        )
    return True


def host_only(kernel: Any, what: str, values: Sequence[Any]) -> None:
    """A TCError when `Kernel.<what>` (jvp, hvp: NumPy only) gets device arrays."""
    if not uses_device(kernel, values):
        return
    raise TCError(
        f"Kernel.{what} of def '{kernel.name}' takes NumPy arrays; on target "
        f"'{kernel.target}' device arrays are supported by calls and Kernel.vjp only",
        kernel.ranged.checked.definition.span,
        hint=f"copy the arrays to the host (torch: .cpu().numpy()) for {what}",
    )


def array_shape(value: Any) -> tuple[int, ...]:
    """The shape of a device array (from its interface; a number's is ())."""
    return () if _is_number(value) else _interface(value)[1]


def _is_number(value: object) -> bool:
    return isinstance(value, (numbers.Number, np.generic)) and not isinstance(value, np.ndarray)


def is_torch(value: object) -> bool:
    """A torch tensor (its own types by module name, fast; subclasses by isinstance)."""
    if type(value).__module__.startswith("torch"):
        return True
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(value, torch.Tensor)


def _interface(value: Any) -> tuple[int, tuple[int, ...], np.dtype, bool]:
    """(pointer, shape, dtype, C-contiguous); torch tensors are read directly (reading
    their `__cuda_array_interface__` costs tens of microseconds a call)."""
    if is_torch(value):
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


def _check_memory(info: Any, value: Any, what: str, emulated: bool) -> None:
    """In emulation, refuse arrays whose memory is known to be on a real GPU."""
    if not emulated:
        return
    module = type(value).__module__
    if is_torch(value):
        where = str(value.device)
        on_gpu = value.device.type != "cpu"  # CUDA, or meta & co.: no host memory
    else:
        where, on_gpu = type(value).__name__, module.startswith(_REAL_GPU_MODULES)
    if on_gpu:
        raise TCError(
            f"{what} '{info.name}' is not in host memory ({where}); target "
            "'cuda-emulated' runs on the CPU, where device arrays are host memory",
            info.span,
            hint="define the kernel with target='cuda' to run on GPU arrays",
        )


def _view(info: Any, value: Any, what: str, emulated: bool) -> tuple[int, tuple[int, ...]]:
    """(pointer, shape) of a device array, checked against the declaration `info`."""
    if not is_device_array(value, emulated):
        raise ShapeError(
            f"{what} '{info.name}' must be a device array like the others "
            f"(__cuda_array_interface__), got {type(value).__name__}",
            info.span,
            hint="on a CUDA target pass all arrays on the device, or all as NumPy arrays",
        )
    _check_memory(info, value, what, emulated)
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


def device_call(
    kernel: Any, arrays: Sequence[Any], out: Any, scalar: ScalarInput
) -> tuple[Any, ...]:
    """Run `kernel` (a CUDA target) on device arrays; see the module doc. `scalar`
    checks a number given for a 0-d input (`compiler.kernel`'s rule) into a NumPy
    0-d array."""
    program = kernel._native
    emulated = program.emulated
    device, module = program.device_module()
    shapes_in, pointers, scalars = _inputs(kernel, arrays, emulated, scalar)
    sizes, shapes = _signature(program, kernel, shapes_in)
    like = next((a for a in arrays if is_torch(a)), None)
    results = _outputs(kernel, out, sizes, shapes, like, device, pointers)
    stream = _torch_stream(like) if like is not None and like.is_cuda else 0
    records = program.host.records(device, stream) if program.lowered.checks else None
    if records is not None:
        earlier = records.poll()  # a failed call before this one, finished since
        if earlier is not None:
            raise earlier
        pointers[ERROR_BUFFER] = records.ptr
    allocated: list[int] = []
    try:
        for name, value in scalars.items():  # 0-d inputs given as numbers
            pointers[name] = device.alloc(value.nbytes)
            allocated.append(pointers[name])
            device.to_device(pointers[name], value)
        _launch(program, device, module, pointers, sizes, stream)
        call = (
            None
            if records is None
            else records.enqueue(program.lowered.checks, {**shapes_in, **shapes})
        )
        if allocated:
            device.synchronize(stream)
        if records is not None:
            failed = records.poll(current=call)
            if failed is not None:
                raise failed
    finally:
        for ptr in allocated:
            device.free(ptr)
    return tuple(results)


def _outputs(
    kernel: Any,
    out: Any,
    sizes: Mapping[str, int],
    shapes: Mapping[str, tuple[int, ...]],
    like: Any,
    device: Any,
    pointers: dict[str, int],
) -> list[Any]:
    """The call's outputs (given by `out=`, else allocated: zero-filled unless the
    kernels overwrite them in full, `CudaProgram.overwritten`), their pointers put
    into `pointers`."""
    program = kernel._native
    given = _given(kernel, out)
    fresh = program.overwritten(sizes)
    results = []
    for info in kernel._outputs:
        value = given.get(info.name)
        if value is None:
            dtype = np.dtype(NP_DTYPE[info.dtype])
            value = device_array(shapes[info.name], dtype, like, device, info.name not in fresh)
        ptr, shape = _view(info, value, "output", program.emulated)
        if shape != shapes[info.name]:
            raise ShapeError(
                f"out= for output '{info.name}' has shape {shape}, expected {shapes[info.name]}",
                info.span,
            )
        pointers[info.name] = ptr
        results.append(value)
    return results


def _launch(
    program: Any,
    device: Any,
    module: Any,
    pointers: Mapping[str, int],
    sizes: Mapping[str, int],
    stream: int,
) -> None:
    """Every kernel of the call, launched on `stream`, or, with `CudaOptions.graph`,
    as the replay of the graph captured for these sizes and pointers."""
    if not program.options.graph:
        program.launch_all(device, module, pointers, sizes, stream=stream)
        return
    names = [b.name for b in program.gpu.buffers]
    key = (stream, tuple(sizes[n] for n in program.gpu.size_params), *(pointers[n] for n in names))
    program.prepare_launch(device, module, sizes, stream)
    frozen = dict(pointers)

    def run(dev: Any, mod: Any, capture_stream: int) -> None:
        program.launch_all(dev, mod, frozen, sizes, stream=capture_stream, owner=stream)

    program.host.graphs.launch(device, module, key, stream, run)


def synchronize(kernel: Any) -> None:
    """Wait for every device call of `kernel` (a CUDA-target Kernel) to finish and
    raise the `ShapeError` of a bounds check that failed in one of them (the first;
    see `runtime.cuda_host`: a call does not wait for its kernels)."""
    program = kernel._native
    for records in program.host.all_records():
        failed = records.poll(wait=True)
        if failed is not None:
            raise failed


def device_output_shapes(
    kernel: Any, arrays: Sequence[Any], scalar: ScalarInput
) -> dict[str, tuple[int, ...]]:
    """Every output's shape for device-array inputs (validated as `device_call` does)."""
    shapes_in, _, _ = _inputs(kernel, arrays, kernel._native.emulated, scalar)
    return dict(_signature(kernel._native, kernel, shapes_in)[1])


def _inputs(
    kernel: Any, arrays: Sequence[Any], emulated: bool, scalar: ScalarInput
) -> tuple[dict[str, tuple[int, ...]], dict[str, int], dict[str, np.ndarray]]:
    """(shape, pointer per input; 0-d inputs given as numbers, as NumPy 0-d arrays)."""
    infos = kernel._inputs
    if len(arrays) != len(infos):
        names = ", ".join(t.name for t in infos) or "none"
        raise ShapeError(
            f"def '{kernel.name}' takes {len(infos)} input(s) ({names}), got {len(arrays)}",
            kernel.ranged.checked.definition.span,
            hint="pass one array per input, in parameter order; outputs go in out=",
        )
    shapes: dict[str, tuple[int, ...]] = {}
    pointers: dict[str, int] = {}
    scalars: dict[str, np.ndarray] = {}
    for info, value in zip(infos, arrays, strict=True):
        if info.rank == 0 and _is_number(value):
            expected = np.dtype(NP_DTYPE[info.dtype])
            scalars[info.name] = scalar(info, value, expected)
            shapes[info.name] = ()
            continue
        pointers[info.name], shapes[info.name] = _view(info, value, "input", emulated)
    return shapes, pointers, scalars


def device_zeros(shape: tuple[int, ...], dtype: np.dtype, like: Any, device: Any) -> Any:
    """A zeroed device array: a torch tensor on `like`'s device when `like` is a torch
    tensor, else a `DeviceArray` on `device` (the GPU, or the emulated device)."""
    return device_array(shape, dtype, like, device, True)


def device_array(
    shape: tuple[int, ...], dtype: np.dtype, like: Any, device: Any, zero: bool
) -> Any:
    """A device array as `device_zeros` makes, zero-filled only where `zero`."""
    if like is not None and is_torch(like):
        return _torch_array(shape, dtype, like, zero)
    from compiler.cuda.cuda_driver import DeviceArray

    return DeviceArray(shape, dtype, device, zero=zero)


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


def _torch_array(shape: tuple[int, ...], dtype: np.dtype, like: Any, zero: bool) -> Any:
    import torch

    tdtype = torch.from_numpy(np.empty(0, dtype)).dtype
    make = torch.zeros if zero else torch.empty
    return make(shape, dtype=tdtype, device=like.device)


def _torch_stream(like: Any) -> int:
    import torch

    return int(torch.cuda.current_stream(like.device).cuda_stream)


__all__ = [
    "array_shape",
    "device_call",
    "device_output_shapes",
    "device_array",
    "device_zeros",
    "is_device_array",
    "is_torch",
    "host_only",
    "synchronize",
    "uses_device",
]
