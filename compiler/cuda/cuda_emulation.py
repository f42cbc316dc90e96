"""The CUDA emulation: the generated CUDA C compiled by the host C++ compiler, on the CPU.

    lib = build_emulated(source, program)     # g++ -include <header>, cached by source
    lib.launch(kernel, grid, pointers, sizes)  # loops over blocks and threads

`HEADER` gives the CUDA names a generated kernel uses: `dim3`, `threadIdx`, `blockIdx`,
`blockDim`, `gridDim` as `inline thread_local` globals (one instance in the program,
per thread: `static` would give each translation unit its own copy), empty
`__global__`/`__device__`, `atomicAdd`/`atomicCAS` as plain read-modify-writes (the
emulation is serial), and the CUDA math functions libm lacks. Each kernel gets an
`extern "C"` launcher. A kernel without `__syncthreads`, `__shared__`, `__syncwarp`
or warp shuffles runs every (block, thread) in turn to completion, a valid CUDA
schedule for it (the fast path). A kernel with one of them runs each block's threads
as cooperating fibers (`cuda.cuda_fibers`): barriers, shared memory (one instance a
block) and shuffles behave as on a GPU, a divergent barrier is an `EmulationError`
(not a hang), and with `race_check` two threads touching one shared word between
barriers (one writing) is an `EmulationError` naming the kernel and the word.
`build_source` runs hand-written CUDA C the same way.
It is how CI tests the CUDA path without a GPU, and how a user debugs a kernel.

Device memory in emulation is host memory: `EmulatedDevice` has the methods of
`cuda.cuda_driver.Device` that a device call uses (alloc, free, zero, to_device,
to_host, synchronize; streams are accepted and ignored, the emulation is serial), and
`EmulatedModule` those of `cuda_driver.Module` (launch by kernel name). So the device
path of `runtime.cuda_device` -- pointers from `__cuda_array_interface__`, outputs
allocated as `DeviceArray`s, gradients that never leave "the device" -- runs here on
any object whose `__cuda_array_interface__` points at host memory (as Numba's CUDA
simulator does). Such a pointer must be host memory: the emulation cannot tell a real
GPU pointer from a host one, and dereferencing one crashes the process.

Libraries are built once per source text in a process-wide temporary directory.
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import re
import shutil
import subprocess
import tempfile
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from compiler.cuda.cuda_fibers import FIBER_HEADER, race_source, uses_barriers
from compiler.cuda.cuda_nodes import GpuKernel, GpuProgram
from compiler.diagnostics import InternalError, OptionsError

_BASE = r"""// tcc's CUDA emulation header: the generated CUDA C, compiled by g++ for the CPU
#define TCC_EMULATION 1
#include <cmath>
#include <cstring>
#include <vector>
struct dim3 { unsigned int x, y, z; };
inline thread_local dim3 threadIdx, blockIdx, blockDim, gridDim;
inline thread_local unsigned long long tcc_emu_calls;
"""

_REST = r"""
// warp reductions: a warp kernel's launcher runs lanes 31..0 in turn, each thread's
// k-th call leaves its value in slot (k, lane); lane 0, last, combines them as the
// GPU's __shfl_down_sync halving does (its result is defined in lane 0 only)
// (in a fiber kernel, cuda_fibers, they are the GPU's shuffle halving)
inline thread_local std::vector<double> tcc_emu_lanes;
template <typename T, typename F> T tcc_emu_warp(T v, F op) {
#ifdef TCC_EMU_FIBERS
  if (tcc_emu::block) {
    for (int d = 16; d > 0; d >>= 1) v = op(v, __shfl_down_sync(0xffffffffu, v, d));
    return v;
  }
#endif
  unsigned lane = threadIdx.x % 32u;
  size_t k = tcc_emu_calls++;
  if (tcc_emu_lanes.size() < (k + 1) * 32) tcc_emu_lanes.resize((k + 1) * 32);
  tcc_emu_lanes[k * 32 + lane] = (double)v;
  if (lane != 0) return v;
  T s[32];
  for (int l = 0; l < 32; ++l) s[l] = (T)tcc_emu_lanes[k * 32 + l];
  for (int d = 16; d > 0; d >>= 1) for (int l = 0; l < d; ++l) s[l] = op(s[l], s[l + d]);
  return s[0];
}
template <typename T> T tcc_warp_sum(T v) { return tcc_emu_warp(v, [](T a, T b) { return a + b; }); }
template <typename T> T tcc_warp_prod(T v) { return tcc_emu_warp(v, [](T a, T b) { return a * b; }); }
template <typename T> T tcc_warp_max(T v) {
  return tcc_emu_warp(v, [](T a, T b) { return (a < b || b != b) ? b : a; });
}
template <typename T> T tcc_warp_min(T v) {
  return tcc_emu_warp(v, [](T a, T b) { return (b < a || b != b) ? b : a; });
}
#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(...)
inline float __int_as_float(int x) { float f; std::memcpy(&f, &x, 4); return f; }
inline double __longlong_as_double(long long x) { double d; std::memcpy(&d, &x, 8); return d; }
inline float atomicAdd(float* p, float v) { float old = *p; *p = old + v; return old; }
inline double atomicAdd(double* p, double v) { double old = *p; *p = old + v; return old; }
inline unsigned long long atomicCAS(unsigned long long* p, unsigned long long cmp,
                                    unsigned long long v) {
  unsigned long long old = *p; if (old == cmp) *p = v; return old;
}
inline float rsqrtf(float x) { return 1.0f / sqrtf(x); }
inline double rsqrt(double x) { return 1.0 / sqrt(x); }
inline float rcbrtf(float x) { return 1.0f / cbrtf(x); }
inline double rcbrt(double x) { return 1.0 / cbrt(x); }
inline float rhypotf(float x, float y) { return 1.0f / hypotf(x, y); }
inline double rhypot(double x, double y) { return 1.0 / hypot(x, y); }
inline float norm3df(float a, float b, float c) { return (float)std::sqrt((double)a*a + (double)b*b + (double)c*c); }
inline double norm3d(double a, double b, double c) { return std::hypot(a, std::hypot(b, c)); }
inline float norm4df(float a, float b, float c, float d) { return (float)std::sqrt((double)a*a + (double)b*b + (double)c*c + (double)d*d); }
inline double norm4d(double a, double b, double c, double d) { return std::hypot(std::hypot(a, b), std::hypot(c, d)); }
inline float rnorm3df(float a, float b, float c) { return 1.0f / norm3df(a, b, c); }
inline double rnorm3d(double a, double b, double c) { return 1.0 / norm3d(a, b, c); }
inline float rnorm4df(float a, float b, float c, float d) { return 1.0f / norm4df(a, b, c, d); }
inline double rnorm4d(double a, double b, double c, double d) { return 1.0 / norm4d(a, b, c, d); }
inline float normcdff(float x) { return 0.5f * erfcf(-x * 0.70710678118654752f); }
inline double normcdf(double x) { return 0.5 * erfc(-x * 0.70710678118654752440); }
inline float fdividef(float a, float b) { return a / b; }
inline float __expf(float x) { return expf(x); }
inline float __exp10f(float x) { return exp10f(x); }
inline float __logf(float x) { return logf(x); }
inline float __log2f(float x) { return log2f(x); }
inline float __log10f(float x) { return log10f(x); }
inline float __sinf(float x) { return sinf(x); }
inline float __cosf(float x) { return cosf(x); }
inline float __tanf(float x) { return tanf(x); }
inline float __powf(float x, float y) { return powf(x, y); }
inline float __fdividef(float a, float b) { return a / b; }
"""

HEADER = _BASE + _REST
FIBERS_HEADER = _BASE + "#define TCC_EMU_FIBERS 1\n" + FIBER_HEADER + _REST
"""The header of a library with a fiber kernel (the fiber code costs g++ half a second)."""


class EmulationError(RuntimeError):
    """A kernel did what a GPU would hang on or leave undefined (a divergent barrier,
    a shared-memory race under `race_check`): the message names the kernel."""


@dataclass(frozen=True)
class EmulatedLibrary:
    """A built emulation: one launcher per kernel, called through ctypes; the kernels
    in `fibers` run on the fiber launcher (module doc), which reports errors."""

    path: str
    launchers: dict[str, ctypes._CFuncPtr]
    fibers: frozenset[str] = frozenset()
    error: Any = None  # the fiber launcher's last error message (a ctypes function)

    def launch(
        self,
        kernel: GpuKernel,
        grid: tuple[int, int, int],
        pointers: list[int],
        sizes: list[int],
    ) -> None:
        self.call(kernel.name, grid, (kernel.block, 1, 1), [*pointers, *sizes])

    def call(
        self, name: str, grid: Sequence[int], block: Sequence[int], args: Sequence[Any]
    ) -> None:
        """Run kernel `name` on a `grid` of `block`s (3 ints each; a fast-path kernel
        takes blocks along x only). `args` are ints, floats or NumPy arrays (passed as
        their host address). Raises EmulationError when the kernel's launch failed."""
        values = [int(a.ctypes.data) if hasattr(a, "ctypes") else a for a in args]
        fn = self.launchers[name]
        if name not in self.fibers:
            if tuple(block[1:]) != (1, 1):
                raise OptionsError(f"kernel {name} runs on the fast path: 1-D blocks only")
            fn(*grid, block[0], *values)
        elif fn(*grid, *block, *values):
            raise EmulationError(self.error().decode())


def launcher_source(program: GpuProgram, fibers: frozenset[str] = frozenset()) -> str:
    """The `extern "C"` launchers (appended to the kernels' source in emulation); the
    kernels named in `fibers` get the fiber launcher."""
    lines = [_ERROR_FUNCTION if fibers else _NO_ERROR]
    for k in program.kernels:
        n_ptr = len(program.buffers_of(k))
        n_size = len(program.size_params)
        params = [f"void* p{i}" for i in range(n_ptr)] + [f"long long s{i}" for i in range(n_size)]
        args = [f"({_param_type(program, k, i)})p{i}" for i in range(n_ptr)]
        args += [f"s{i}" for i in range(n_size)]
        if k.name in fibers:
            lines.append(_fiber_launcher(k.name, params, args))
            continue
        head = ", ".join(["unsigned gx", "unsigned gy", "unsigned gz", "unsigned bx", *params])
        # a warp kernel's lanes run 31..0 (lane 0 last: see tcc_emu_warp in HEADER)
        thread = (
            "unsigned t = (u & ~31u) | (31u - (u & 31u));"
            if k.variant == "warp"
            else "unsigned t = u;"
        )
        lines += [
            f'extern "C" void tcc_launch_{k.name}({head}) {{',
            "  gridDim = dim3{gx, gy, gz}; blockDim = dim3{bx, 1, 1};",
            "  for (unsigned z = 0; z < gz; ++z) for (unsigned y = 0; y < gy; ++y)",
            "  for (unsigned x = 0; x < gx; ++x) for (unsigned u = 0; u < bx; ++u) {",
            f"    {thread}",
            "    blockIdx = dim3{x, y, z}; threadIdx = dim3{t, 0, 0}; tcc_emu_calls = 0;",
            f"    {k.name}({', '.join(args)});",
            "  }",
            "}",
        ]
    return "\n".join(lines) + "\n"


_ERROR_FUNCTION = 'extern "C" const char* tcc_emu_error() { return tcc_emu::error.c_str(); }'
_NO_ERROR = 'extern "C" const char* tcc_emu_error() { return ""; }'
_DIMS = [f"unsigned {d}" for d in ("gx", "gy", "gz", "bx", "by", "bz")]


def _fiber_launcher(name: str, params: list[str], args: list[str]) -> str:
    return (
        f'extern "C" int tcc_launch_{name}({", ".join([*_DIMS, *params])}) {{\n'
        f'  return tcc_emu::launch("{name}", gx, gy, gz, bx, by, bz, [&]() {{ '
        f"{name}({', '.join(args)}); }});\n}}"
    )


def kernel_texts(source: str) -> dict[str, str]:
    """Each `__global__` function's name and text (up to the next one) in `source`."""
    heads = list(_KERNEL_HEAD.finditer(source))
    ends = [h.start() for h in heads[1:]] + [len(source)]
    return {h["name"]: source[h.start() : end] for h, end in zip(heads, ends, strict=True)}


_KERNEL_HEAD = re.compile(
    r"__global__\s+void\s+(?:__launch_bounds__\s*\([^)]*\)\s*)?(?P<name>\w+)\s*\("
)


def _param_type(program: GpuProgram, kernel: GpuKernel, i: int) -> str:
    from compiler.cuda.cuda import ctype

    b = program.buffers_of(kernel)[i]
    const = "const " if b.role.value == "in" else ""
    return f"{const}{ctype(b.dtype)}*"


class EmulatedModule:
    """A built emulation behind `cuda_driver.Module`'s launch signature."""

    def __init__(self, library: EmulatedLibrary) -> None:
        self.library = library

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
        """Run kernel `name` to completion (the stream is ignored: all is serial). The
        launcher takes the sizes as `long long` whatever the kernel's index width
        (`index32`): C++ converts them at the kernel's call."""
        self.library.call(name, grid, (block, 1, 1), [*pointers, *sizes])


class EmulatedDevice:
    """Host memory behind `cuda_driver.Device`'s memory methods (see the module doc).

    `alloc` returns the address of a fresh zeroed host buffer that stays alive until
    `free` (or the end of the process); the pointer is what a `DeviceArray` holds."""

    arch = "emulated"

    def __init__(self) -> None:
        self._buffers: dict[int, Any] = {}
        self._lock = threading.Lock()

    def alloc(self, nbytes: int) -> int:
        import numpy as np

        buffer = np.zeros(max(1, -(-nbytes // 16)), dtype=np.complex128)  # 16-byte aligned
        ptr = int(buffer.ctypes.data)
        with self._lock:
            self._buffers[ptr] = buffer
        return ptr

    def free(self, ptr: int) -> None:
        with self._lock:
            self._buffers.pop(ptr, None)

    def allocated(self) -> int:
        """How many buffers are alive (tests check that temporaries are freed)."""
        with self._lock:
            return len(self._buffers)

    def to_device(self, ptr: int, host: Any) -> None:
        if host.nbytes:
            ctypes.memmove(ptr, host.ctypes.data, host.nbytes)

    def to_host(self, host: Any, ptr: int) -> None:
        if host.nbytes:
            ctypes.memmove(host.ctypes.data, ptr, host.nbytes)

    def zero(self, ptr: int, nbytes: int, stream: int = 0) -> None:
        if nbytes:
            ctypes.memset(ptr, 0, nbytes)

    def synchronize(self, stream: int = 0) -> None:
        """Nothing to wait for: every launch ran to completion."""

    # ------------------------------------------------ the host path (runtime.cuda_host)

    def pinned_int64(self, count: int) -> tuple[int, Any]:
        """(address, NumPy array) of `count` int64 of host memory (kept by the array)."""
        import numpy as np

        host = np.zeros(count, np.int64)
        return int(host.ctypes.data), host

    def copy_to_host_async(self, host_ptr: int, ptr: int, nbytes: int, stream: int) -> None:
        ctypes.memmove(host_ptr, ptr, nbytes)

    def new_event(self) -> object:
        return object()

    def record_event(self, event: object, stream: int) -> None:
        """Nothing to record: the work before it has run."""

    def event_done(self, event: object) -> bool:
        return True

    def capture(self, run: Any, module: Any) -> list[Any]:
        """The "graph" of `run(device, module, stream)`: its launches and zero fills,
        recorded (not run) as calls to replay in order."""
        ops: list[Any] = []
        run(_Recorder(self, ops), _Recorder(module, ops), 0)
        return ops

    def launch_graph(self, graph: list[Any], stream: int) -> None:
        for op in graph:
            op()

    def destroy_graph(self, graph: list[Any]) -> None:
        graph.clear()


class _Recorder:
    """A device or module whose `launch` and `zero` are recorded into `ops` (as calls
    of the real object's) instead of run; other attributes are the real object's."""

    def __init__(self, real: Any, ops: list[Any]) -> None:
        self._real, self._ops = real, ops

    def launch(self, *args: Any, **kwargs: Any) -> None:
        self._ops.append(lambda: self._real.launch(*args, **kwargs))

    def zero(self, *args: Any, **kwargs: Any) -> None:
        self._ops.append(lambda: self._real.zero(*args, **kwargs))

    def __getattr__(self, name: str) -> Any:
        return getattr(self._real, name)


EMULATED_DEVICE = EmulatedDevice()
"""The one emulated device of the process (its buffers are `DeviceArray` memory)."""


_LOCK = threading.Lock()
_BUILT: dict[str, EmulatedLibrary] = {}
_DIR: list[str] = []


def build_emulated(
    source: str, program: GpuProgram, *, race_check: bool = False
) -> EmulatedLibrary:
    """Compile `source` (from `cuda.cuda.emit_cuda`) for the CPU and load it; kernels
    that use barriers, shared memory or shuffles run as fibers (with `race_check`, their
    shared arrays are checked for races)."""
    texts = kernel_texts(source)
    fibers = frozenset(k.name for k in program.kernels if uses_barriers(texts.get(k.name, "")))
    text = (race_source(source) if race_check else source) + "\n"
    text += launcher_source(program, fibers)
    specs = {}
    for k in program.kernels:
        n_ptr, n_size = len(program.buffers_of(k)), len(program.size_params)
        dims = 6 if k.name in fibers else 4
        specs[k.name] = (
            [ctypes.c_uint] * dims + [ctypes.c_void_p] * n_ptr + [ctypes.c_longlong] * n_size
        )
    return _load(text, specs, fibers)


def build_source(
    source: str, kernels: dict[str, Sequence[str]], *, race_check: bool = False
) -> EmulatedLibrary:
    """Hand-written CUDA C run in emulation, every kernel on the fiber launcher.

    `kernels` maps each `__global__` function's name to its parameters' C types, e.g.
    `{"reduce": ["const float*", "float*", "int"]}`; `lib.call(name, grid, block, args)`
    runs one (pointers as NumPy arrays or addresses; integer and floating-point values
    as Python numbers)."""
    lines = [_ERROR_FUNCTION]
    specs = {}
    for name, types in kernels.items():
        params, args, argtypes = [], [], []
        for i, t in enumerate(types):
            if "*" in t:
                params.append(f"void* a{i}")
                args.append(f"({t})a{i}")
                argtypes.append(ctypes.c_void_p)
            elif t.strip() in ("float", "double"):
                params.append(f"double a{i}")
                args.append(f"({t})a{i}")
                argtypes.append(ctypes.c_double)
            else:
                params.append(f"long long a{i}")
                args.append(f"({t})a{i}")
                argtypes.append(ctypes.c_longlong)
        lines.append(_fiber_launcher(name, params, args))
        specs[name] = [ctypes.c_uint] * 6 + argtypes
    text = (race_source(source) if race_check else source) + "\n" + "\n".join(lines) + "\n"
    return _load(text, specs, frozenset(kernels))


def _load(text: str, specs: dict[str, list[Any]], fibers: frozenset[str]) -> EmulatedLibrary:
    key = hashlib.sha256(text.encode()).hexdigest()[:24]
    with _LOCK:
        found = _BUILT.get(key)
        if found is not None:
            return found
        path = _compile(text, key, bool(fibers))
        lib = ctypes.CDLL(path)
        launchers = {}
        for name, argtypes in specs.items():
            fn = getattr(lib, f"tcc_launch_{name}")
            fn.argtypes = argtypes
            fn.restype = ctypes.c_int if name in fibers else None
            launchers[name] = fn
        error = lib.tcc_emu_error
        error.argtypes, error.restype = [], ctypes.c_char_p
        built = EmulatedLibrary(path, launchers, fibers, error)
        _BUILT[key] = built
        return built


def host_compiler() -> str:
    """The C++ compiler of the emulation ($CXX is not read: options travel as values)."""
    for name in ("g++", "c++", "clang++"):
        found = shutil.which(name)
        if found:
            return found
    raise OptionsError(
        "target 'cuda-emulated' needs a C++ compiler (g++ or clang++) on PATH",
        hint="install g++, or use target='cuda' on a machine with a GPU",
    )


def _compile(text: str, key: str, fibers: bool) -> str:
    if not _DIR:
        _DIR.append(tempfile.mkdtemp(prefix="tcc-cuda-emu-"))
    folder = _DIR[0]
    src = os.path.join(folder, f"{key}.cu.cpp")
    name = "tcc_cuda_emulation_fibers.h" if fibers else "tcc_cuda_emulation.h"
    header = os.path.join(folder, name)
    out = os.path.join(folder, f"{key}.so")
    with open(header, "w", encoding="utf-8") as fh:
        fh.write(FIBERS_HEADER if fibers else HEADER)
    with open(src, "w", encoding="utf-8") as fh:
        fh.write(text)
    cmd = [
        host_compiler(), "-std=c++17", "-O1", "-fwrapv", "-fPIC", "-shared", "-w",
        "-include", header, "-x", "c++", src, "-o", out,
    ]  # fmt: skip
    done = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise InternalError(f"the CUDA emulation failed to compile {src}:\n{done.stderr[-4000:]}")
    return out


__all__ = [
    "EMULATED_DEVICE",
    "HEADER",
    "EmulatedDevice",
    "EmulatedLibrary",
    "EmulatedModule",
    "EmulationError",
    "build_emulated",
    "build_source",
    "kernel_texts",
    "host_compiler",
    "launcher_source",
]
