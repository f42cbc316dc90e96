"""NVRTC and the CUDA driver API, through NVIDIA's `cuda-bindings` (the `[cuda]` extra).

    image = compile_source(source, arch="sm_90", fast_math=False)   # NVRTC: cubin or PTX
    device = current_device()          # cuInit + the primary context; CudaUnavailable if none
    module = device.load(image)        # cuModuleLoadData
    module.launch("k0", grid, block, pointers, sizes, stream=0)

NVRTC runs without a GPU (it only needs the `nvidia-cuda-nvrtc` wheel): with an `sm_XX`
architecture it returns a cubin, with `compute_XX` PTX. The driver needs a GPU:
`current_device()` raises `CudaUnavailable` (a TCError) saying why when there is none.
pycuda is never imported (it cannot be built without a driver); device arrays of any
library arrive as raw pointers from `__cuda_array_interface__`.
"""

from __future__ import annotations

import ctypes
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from compiler.diagnostics import InternalError, TCError


class CudaUnavailable(TCError):
    """The CUDA target cannot run here (no cuda-bindings, no driver, or no GPU)."""


def _bindings() -> tuple[Any, Any]:
    try:
        from cuda.bindings import driver, nvrtc
    except ImportError as err:
        raise CudaUnavailable(
            f"target 'cuda' needs NVIDIA's cuda-bindings: {err}",
            hint="pip install 'tcc[cuda]' (cuda-bindings, nvidia-cuda-nvrtc), or use "
            "target='cuda-emulated'",
        ) from None
    return driver, nvrtc


def _check(result: Any, what: str) -> Any:
    """The value(s) after a cuda-bindings status code, or InternalError."""
    if isinstance(result, tuple):
        status, rest = result[0], result[1:]
    else:
        status, rest = result, ()
    if int(status) != 0:
        raise InternalError(f"{what} failed: {status!r}")
    return rest[0] if len(rest) == 1 else rest


# ------------------------------------------------------------ NVRTC


def compile_source(source: str, *, arch: str, fast_math: bool = False, name: str = "tcc") -> bytes:
    """`source` compiled by NVRTC for `arch` ("sm_90": a cubin; "compute_90": PTX)."""
    _, nvrtc = _bindings()
    prog = _check(nvrtc.nvrtcCreateProgram(source.encode(), f"{name}.cu".encode(), 0, [], []),
                  "nvrtcCreateProgram")  # fmt: skip
    opts = [f"--gpu-architecture={arch}".encode(), b"-std=c++17"]
    # Only a sum's product is fused into its addition (the emitter writes `fma`); every
    # other multiply-add rounds as written, as on the LLVM target (docs: numerics).
    opts.append(b"--use_fast_math" if fast_math else b"--fmad=false")
    try:
        status = nvrtc.nvrtcCompileProgram(prog, len(opts), opts)[0]
        if int(status) != 0:
            size = _check(nvrtc.nvrtcGetProgramLogSize(prog), "nvrtcGetProgramLogSize")
            log = b" " * size
            _check(nvrtc.nvrtcGetProgramLog(prog, log), "nvrtcGetProgramLog")
            raise InternalError(f"NVRTC could not compile the generated CUDA C:\n{log.decode()}")
        if arch.startswith("sm_"):
            size = _check(nvrtc.nvrtcGetCUBINSize(prog), "nvrtcGetCUBINSize")
            image = b" " * size
            _check(nvrtc.nvrtcGetCUBIN(prog, image), "nvrtcGetCUBIN")
        else:
            size = _check(nvrtc.nvrtcGetPTXSize(prog), "nvrtcGetPTXSize")
            image = b" " * size
            _check(nvrtc.nvrtcGetPTX(prog, image), "nvrtcGetPTX")
        return image
    finally:
        nvrtc.nvrtcDestroyProgram(prog)


# ------------------------------------------------------------ the driver


@dataclass
class Module:
    handle: Any
    functions: dict[str, Any] = field(default_factory=dict)

    def function(self, name: str) -> Any:
        driver, _ = _bindings()
        found = self.functions.get(name)
        if found is None:
            found = _check(driver.cuModuleGetFunction(self.handle, name.encode()),
                           f"cuModuleGetFunction({name})")  # fmt: skip
            self.functions[name] = found
        return found

    def launch(
        self,
        name: str,
        grid: tuple[int, int, int],
        block: int,
        pointers: Sequence[int],
        sizes: Sequence[int],
        stream: int = 0,
    ) -> None:
        driver, _ = _bindings()
        holders: list[Any] = [ctypes.c_void_p(p) for p in pointers]
        holders += [ctypes.c_longlong(s) for s in sizes]
        params = (ctypes.c_void_p * max(1, len(holders)))(*[ctypes.addressof(h) for h in holders])
        _check(driver.cuLaunchKernel(self.function(name), *grid, block, 1, 1, 0, stream,
                                     ctypes.addressof(params), 0), f"cuLaunchKernel({name})")  # fmt: skip


@dataclass
class Device:
    """The first GPU and its primary context (shared with PyTorch, CuPy, ...)."""

    device: Any
    context: Any
    arch: str
    modules: dict[bytes, Module] = field(default_factory=dict)

    def activate(self) -> None:
        driver, _ = _bindings()
        _check(driver.cuCtxSetCurrent(self.context), "cuCtxSetCurrent")

    def load(self, image: bytes) -> Module:
        driver, _ = _bindings()
        found = self.modules.get(image)
        if found is None:
            self.activate()
            found = Module(_check(driver.cuModuleLoadData(image), "cuModuleLoadData"))
            self.modules[image] = found
        return found

    def alloc(self, nbytes: int) -> int:
        driver, _ = _bindings()
        return int(_check(driver.cuMemAlloc(max(1, nbytes)), "cuMemAlloc"))

    def free(self, ptr: int) -> None:
        driver, _ = _bindings()
        _check(driver.cuMemFree(ptr), "cuMemFree")

    def to_device(self, ptr: int, host: Any) -> None:
        driver, _ = _bindings()
        if host.nbytes:
            _check(driver.cuMemcpyHtoD(ptr, host.ctypes.data, host.nbytes), "cuMemcpyHtoD")

    def to_host(self, host: Any, ptr: int) -> None:
        driver, _ = _bindings()
        if host.nbytes:
            _check(driver.cuMemcpyDtoH(host.ctypes.data, ptr, host.nbytes), "cuMemcpyDtoH")

    def zero(self, ptr: int, nbytes: int, stream: int = 0) -> None:
        driver, _ = _bindings()
        if nbytes:
            _check(driver.cuMemsetD8Async(ptr, 0, nbytes, stream), "cuMemsetD8Async")

    def synchronize(self, stream: int = 0) -> None:
        driver, _ = _bindings()
        _check(driver.cuStreamSynchronize(stream), "cuStreamSynchronize")


_LOCK = threading.Lock()
_DEVICE: list[Device] = []


def current_device() -> Device:
    """The first GPU, initialised once; `CudaUnavailable` when there is none."""
    with _LOCK:
        if _DEVICE:
            _DEVICE[0].activate()
            return _DEVICE[0]
        driver, _ = _bindings()
        try:
            status = driver.cuInit(0)[0]
        except Exception as err:  # noqa: BLE001  (no libcuda: the pathfinder raises)
            raise CudaUnavailable(
                f"target 'cuda' needs an NVIDIA GPU and its driver; none here ({err})",
                hint="use target='cuda-emulated' to run the generated CUDA C on the CPU",
            ) from None
        if int(status) != 0:
            raise CudaUnavailable(
                f"target 'cuda' needs an NVIDIA GPU; cuInit failed ({status!r})",
                hint="use target='cuda-emulated' to run the generated CUDA C on the CPU",
            )
        count = _check(driver.cuDeviceGetCount(), "cuDeviceGetCount")
        if count < 1:
            raise CudaUnavailable(
                "target 'cuda' needs an NVIDIA GPU; the driver sees none",
                hint="use target='cuda-emulated' to run the generated CUDA C on the CPU",
            )
        dev = _check(driver.cuDeviceGet(0), "cuDeviceGet")
        attr = driver.CUdevice_attribute
        major = _check(driver.cuDeviceGetAttribute(
            attr.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev), "cuDeviceGetAttribute")  # fmt: skip
        minor = _check(driver.cuDeviceGetAttribute(
            attr.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev), "cuDeviceGetAttribute")  # fmt: skip
        ctx = _check(driver.cuDevicePrimaryCtxRetain(dev), "cuDevicePrimaryCtxRetain")
        found = Device(dev, ctx, f"sm_{major}{minor}")
        found.activate()
        _DEVICE.append(found)
        return found


class DeviceArray:
    """A C-contiguous array in GPU memory that tcc allocated (an output when the caller's
    device arrays are not torch tensors). It exposes `__cuda_array_interface__` (so CuPy,
    Numba and torch can wrap it without a copy: `cupy.asarray(a)`), and `get()` copies it
    to a NumPy array. The memory is freed with the object."""

    def __init__(self, shape: tuple[int, ...], dtype: Any, device: Device) -> None:
        import numpy as np

        self.shape, self.dtype, self.device = tuple(shape), np.dtype(dtype), device
        self.nbytes = int(np.prod(self.shape, dtype=np.int64)) * self.dtype.itemsize
        self.ptr = device.alloc(self.nbytes)
        device.zero(self.ptr, self.nbytes)
        device.synchronize()

    @property
    def __cuda_array_interface__(self) -> dict[str, Any]:
        return {
            "shape": self.shape,
            "typestr": self.dtype.str,
            "data": (self.ptr, False),
            "strides": None,
            "version": 3,
        }

    def get(self) -> Any:
        import numpy as np

        host = np.empty(self.shape, self.dtype)
        self.device.to_host(host, self.ptr)
        return host

    def __del__(self) -> None:
        try:
            self.device.free(self.ptr)
        except Exception:  # noqa: BLE001, S110  (interpreter shutdown: the context is gone)
            pass


__all__ = ["CudaUnavailable", "Device", "DeviceArray", "Module", "compile_source", "current_device"]
