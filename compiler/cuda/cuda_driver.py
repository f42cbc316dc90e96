"""NVRTC and the CUDA driver API, through NVIDIA's `cuda-bindings` (the `[cuda]` extra).

    image = compile_source(source, arch="sm_90", fast_math=False)   # NVRTC: cubin or PTX
    device = current_device()          # cuInit + the primary context; CudaUnavailable if none
    module = device.load(image)        # cuModuleLoadData
    module.launch("k0", grid, block, pointers, sizes, stream=0)

A module keeps each kernel's launch argument array and refills it at each launch. The
device also has what `runtime.cuda_host` needs for a call that never waits: page-locked
slots, events, and graph capture (`capture`, `launch_graph`) on a stream of its own.

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
    return _compile(source, arch, fast_math, name, [])[0]


def compile_with_ptxas_info(source: str, *, arch: str, name: str = "tcc") -> tuple[bytes, str]:
    """The cubin of `source` for `arch` ("sm_90") and NVRTC's own ptxas's `-v` report
    (registers, spills, shared memory per kernel): the assembler of the NVRTC that made
    the PTX, where a ptxas on PATH may be older and refuse its PTX version."""
    if not arch.startswith("sm_"):
        raise InternalError(f"compile_with_ptxas_info: {arch} is not a cubin architecture")
    return _compile(source, arch, False, name, [b"-Xptxas=-v"])


def _compile(
    source: str, arch: str, fast_math: bool, name: str, extra: list[bytes]
) -> tuple[bytes, str]:
    """The image (cubin or PTX) and NVRTC's log."""
    _, nvrtc = _bindings()
    prog = _check(nvrtc.nvrtcCreateProgram(source.encode(), f"{name}.cu".encode(), 0, [], []),
                  "nvrtcCreateProgram")  # fmt: skip
    opts = [f"--gpu-architecture={arch}".encode(), b"-std=c++17"]
    # Only a sum's product is fused into its addition (the emitter writes `fma`); every
    # other multiply-add rounds as written, as on the LLVM target (docs: numerics).
    opts.append(b"--use_fast_math" if fast_math else b"--fmad=false")
    opts.extend(extra)
    try:
        status = nvrtc.nvrtcCompileProgram(prog, len(opts), opts)[0]
        size = _check(nvrtc.nvrtcGetProgramLogSize(prog), "nvrtcGetProgramLogSize")
        log = b" " * size
        _check(nvrtc.nvrtcGetProgramLog(prog, log), "nvrtcGetProgramLog")
        if int(status) != 0:
            raise InternalError(f"NVRTC could not compile the generated CUDA C:\n{log.decode()}")
        if arch.startswith("sm_"):
            size = _check(nvrtc.nvrtcGetCUBINSize(prog), "nvrtcGetCUBINSize")
            image = b" " * size
            _check(nvrtc.nvrtcGetCUBIN(prog, image), "nvrtcGetCUBIN")
        else:
            size = _check(nvrtc.nvrtcGetPTXSize(prog), "nvrtcGetPTXSize")
            image = b" " * size
            _check(nvrtc.nvrtcGetPTX(prog, image), "nvrtcGetPTX")
        return image, log.rstrip(b"\0 ").decode(errors="replace")
    finally:
        nvrtc.nvrtcDestroyProgram(prog)


# ------------------------------------------------------------ the driver


@dataclass
class Module:
    """A loaded module: its functions, looked up once, and each kernel's launch
    arguments (`_Arguments`), built once and refilled in place at each launch."""

    handle: Any
    functions: dict[str, Any] = field(default_factory=dict)
    arguments: dict[tuple[str, int, int, bool], _Arguments] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)

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
        *,
        index32: bool = False,
    ) -> None:
        """`cuLaunchKernel` of `name` with these pointers and sizes (`int` parameters
        where `index32`, else `long long`). The argument buffers of a kernel are made
        at its first launch and refilled at later ones (the driver copies them when
        the launch is enqueued; the lock keeps two threads from refilling at once)."""
        driver, _ = _bindings()
        function = self.function(name)
        key = (name, len(pointers), len(sizes), index32)
        with self.lock:
            args = self.arguments.get(key)
            if args is None:
                args = self.arguments[key] = _Arguments(len(pointers), len(sizes), index32)
            args.fill(pointers, sizes)
            _check(driver.cuLaunchKernel(function, *grid, block, 1, 1, 0, stream,
                                         args.address, 0), f"cuLaunchKernel({name})")  # fmt: skip


class _Arguments:
    """The `void**` array `cuLaunchKernel` takes, over one ctypes value per parameter:
    pointers as `void*`, sizes as `long long` or (32-bit kernels) `int`."""

    def __init__(self, n_pointers: int, n_sizes: int, index32: bool) -> None:
        size_type = ctypes.c_int if index32 else ctypes.c_longlong
        self.pointers = [ctypes.c_void_p(0) for _ in range(n_pointers)]
        self.sizes = [size_type(0) for _ in range(n_sizes)]
        holders = [*self.pointers, *self.sizes]
        self.params = (ctypes.c_void_p * max(1, len(holders)))(
            *[ctypes.addressof(h) for h in holders]
        )
        self.address = ctypes.addressof(self.params)

    def fill(self, pointers: Sequence[int], sizes: Sequence[int]) -> None:
        for holder, value in zip(self.pointers, pointers, strict=True):
            holder.value = value
        for holder, value in zip(self.sizes, sizes, strict=True):
            holder.value = value


@dataclass
class Device:
    """The first GPU and its primary context (shared with PyTorch, CuPy, ...)."""

    device: Any
    context: Any
    arch: str
    modules: dict[bytes, Module] = field(default_factory=dict)
    capture_stream: int | None = None  # the stream graphs are captured on (made once)

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

    # ------------------------------------------------ the host path (runtime.cuda_host)

    def pinned_int64(self, count: int) -> tuple[int, Any]:
        """(address, NumPy view) of `count` int64 in page-locked host memory (the target
        of an asynchronous copy); never freed (a few per program and stream)."""
        import numpy as np

        driver, _ = _bindings()
        ptr = int(_check(driver.cuMemHostAlloc(8 * count, 0), "cuMemHostAlloc"))
        view = np.ctypeslib.as_array((ctypes.c_int64 * count).from_address(ptr))
        return ptr, view

    def copy_to_host_async(self, host_ptr: int, ptr: int, nbytes: int, stream: int) -> None:
        driver, _ = _bindings()
        _check(driver.cuMemcpyDtoHAsync(host_ptr, ptr, nbytes, stream), "cuMemcpyDtoHAsync")

    def new_event(self) -> Any:
        driver, _ = _bindings()
        flags = int(driver.CUevent_flags.CU_EVENT_DISABLE_TIMING)
        return _check(driver.cuEventCreate(flags), "cuEventCreate")

    def record_event(self, event: Any, stream: int) -> None:
        driver, _ = _bindings()
        _check(driver.cuEventRecord(event, stream), "cuEventRecord")

    def event_done(self, event: Any) -> bool:
        """Whether the work before the event has finished (cuEventQuery: no waiting)."""
        driver, _ = _bindings()
        status = driver.cuEventQuery(event)[0]
        if status == driver.CUresult.CUDA_ERROR_NOT_READY:
            return False
        _check((status,), "cuEventQuery")
        return True

    def capture(self, run: Any, module: Any) -> Any:
        """An executable CUDA graph of what `run(self, module, stream)` enqueues,
        captured on a stream of tcc's own (stream capture needs one other than 0)."""
        driver, _ = _bindings()
        stream = self._capture_stream()
        mode = driver.CUstreamCaptureMode.CU_STREAM_CAPTURE_MODE_THREAD_LOCAL
        _check(driver.cuStreamBeginCapture(stream, mode), "cuStreamBeginCapture")
        try:
            run(self, module, stream)
        finally:
            graph = _check(driver.cuStreamEndCapture(stream), "cuStreamEndCapture")
        try:
            return _check(driver.cuGraphInstantiate(graph, 0), "cuGraphInstantiate")
        finally:
            _check(driver.cuGraphDestroy(graph), "cuGraphDestroy")

    def launch_graph(self, graph: Any, stream: int) -> None:
        driver, _ = _bindings()
        _check(driver.cuGraphLaunch(graph, stream), "cuGraphLaunch")

    def destroy_graph(self, graph: Any) -> None:
        driver, _ = _bindings()
        _check(driver.cuGraphExecDestroy(graph), "cuGraphExecDestroy")

    def _capture_stream(self) -> int:
        if self.capture_stream is None:
            driver, _ = _bindings()
            flags = int(driver.CUstream_flags.CU_STREAM_NON_BLOCKING)  # no implicit sync
            self.capture_stream = int(_check(driver.cuStreamCreate(flags), "cuStreamCreate"))
        return self.capture_stream


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
    to a NumPy array. The memory is freed with the object. With `zero` it is zeroed
    on the default stream (asynchronously: in stream order before later launches
    there and before `get()`), else left as allocated (an output every element of
    which a kernel writes first)."""

    def __init__(
        self, shape: tuple[int, ...], dtype: Any, device: Device, *, zero: bool = True
    ) -> None:
        import numpy as np

        self.shape, self.dtype, self.device = tuple(shape), np.dtype(dtype), device
        self.nbytes = int(np.prod(self.shape, dtype=np.int64)) * self.dtype.itemsize
        self.ptr = device.alloc(self.nbytes)
        if zero:
            device.zero(self.ptr, self.nbytes)

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
