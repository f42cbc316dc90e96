"""The CUDA targets: "cuda" (NVRTC + the driver API) and "cuda-emulated" (g++ on the CPU).

    program = compile_cuda(ranged, options, emulated=True)   # lower, map, emit, build
    program.source                                            # the CUDA C
    program.run(inputs, sizes, outputs)                       # NumPy arrays, in place

The pipeline of a CUDA program: `cuda.gpu_lower.lower_gpu` (gather form, the GPU
schedule, parallel bands marked) -> `cuda.cuda_map.map_to_gpu` (grid/block mapping,
atomics, one kernel per phase) -> `cuda.cuda.emit_cuda` (CUDA C) -> either
`cuda.cuda_emulation` (g++, ctypes) or `cuda.cuda_driver` (NVRTC, cuLaunchKernel).
Kernels run one after the other (a phase reads what the previous wrote); for each call
signature `CudaProgram.plan` picks the kernels that run and, for each, its 32-bit
version where `cuda.cuda_width` proves the indices fit in `int`. A failed
bounds check of an indirect read lands in the error record, which becomes the same
`ShapeError` as on the LLVM target.

`CudaTarget` is the target object (name, options type, compile) a target registry can
hold. Compiled images stay in memory (per process, keyed by the source text), not in the
on-disk compile cache.
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Any

import numpy as np

from compiler.cuda.cuda import emit_cuda
from compiler.cuda.cuda_map import GpuKernel, GpuProgram, map_to_gpu
from compiler.cuda.cuda_options import (
    DEFAULT_BLOCKS,
    MAX_GRID_X,
    MAX_GRID_YZ,
    CudaOptions,
    as_cuda_options,
)
from compiler.cuda.cuda_width import fits_int32, narrow_kernel
from compiler.cuda.gpu_lower import lower_gpu
from compiler.diagnostics import OptionsError
from compiler.frontend.checked import RangedDef
from compiler.loops import Buffer, check_arguments, eval_expr, eval_size_expr
from compiler.poly.astgen import ERROR_BUFFER, Lowered
from compiler.runtime.cuda_host import HostState
from compiler.runtime.native import check_failure

CUDA_TARGETS = ("cuda", "cuda-emulated")


@dataclass(frozen=True)
class CudaTarget:
    """A CUDA target as a registry would hold it: its name, options type and compiler."""

    name: str  # "cuda" | "cuda-emulated"
    options_type: type = CudaOptions

    @property
    def emulated(self) -> bool:
        return self.name == "cuda-emulated"

    def compile(self, ranged: RangedDef, options: object = None) -> CudaProgram:
        return compile_cuda(ranged, as_cuda_options(options), emulated=self.emulated)


TARGET_OBJECTS = {name: CudaTarget(name) for name in CUDA_TARGETS}


@dataclass(frozen=True)
class CudaProgram:
    lowered: Lowered  # the Function (phased), the run-time checks, notes
    gpu: GpuProgram  # the kernels and their launch configurations
    source: str  # the CUDA C
    options: CudaOptions
    emulated: bool
    statements: tuple[int, ...]  # the def's statement each kernel comes from
    scatters: tuple[int, ...]  # statements that remain data-dependent scatters

    @cached_property
    def _emulation(self) -> _Kernels:
        from compiler.cuda.cuda_emulation import EmulatedModule, build_emulated

        race = self.options.race_check
        return _Kernels(
            self.gpu,
            lambda sub: EmulatedModule(build_emulated(self._emit(sub), sub, race_check=race)),
        )

    @cached_property
    def _module(self) -> tuple[Any, _Kernels]:
        from compiler.cuda.cuda_driver import current_device

        device = current_device()
        arch, fast = self.options.arch or device.arch, self.options.fast_math
        return device, _Kernels(
            self.gpu, lambda sub: device.load(_image(self._emit(sub), arch, fast))
        )

    def _emit(self, sub: GpuProgram) -> str:
        """The CUDA C of some of the kernels (32-bit versions among them)."""
        narrow = self._narrowed
        index32 = {k.name for k in sub.kernels if narrow.get(k.name) is k}
        return emit_cuda(sub, fast_math=self.options.fast_math, index32=index32)

    @cached_property
    def _narrowed(self) -> dict[str, GpuKernel]:
        return {}  # 32-bit version's name -> the kernel (made when a call first picks it)

    def _narrow(self, kernel: GpuKernel) -> GpuKernel:
        narrow = narrow_kernel(kernel)
        return self._narrowed.setdefault(narrow.name, narrow)

    def is_narrow(self, kernel: GpuKernel) -> bool:
        """Whether `kernel` is a 32-bit version (its sizes are passed as `int`)."""
        return self._narrowed.get(kernel.name) is kernel

    def device_module(self) -> tuple[Any, _Kernels]:
        """(device, kernels) for a device call: the GPU and its kernels (built when first
        launched), or, in emulation, `cuda_emulation.EMULATED_DEVICE` (host memory) and
        the kernels built by g++."""
        if self.emulated:
            from compiler.cuda.cuda_emulation import EMULATED_DEVICE

            return EMULATED_DEVICE, self._emulation
        device, module = self._module
        device.activate()  # the calling thread may be autograd's, with no context current
        return device, module

    def prepare(self) -> None:
        """Build the 32-bit versions of the one-thread-an-output kernels now (g++ or
        NVRTC): the ones a call whose indices fit in `int` runs; thread-tile and warp
        variants, and 64-bit versions, are built when a call's sizes first select them."""
        plain = [self._narrow(k) for k in self.gpu.kernels if not k.variant]
        self.device_module()[1].build(plain)

    @cached_property
    def _plans(self) -> dict[tuple[int, ...], list[tuple[GpuKernel, tuple[int, int, int]]]]:
        return {}  # sizes -> the kernels launched and their grids: once per signature

    def plan(self, env: Mapping[str, int]) -> list[tuple[GpuKernel, tuple[int, int, int]]]:
        """The kernels these sizes launch, in order, with their grids (remembered per
        sizes): each kernel's 32-bit version where `cuda_width.fits_int32` proves every
        index it forms fits in `int`, else the 64-bit one."""
        key = tuple(env[n] for n in self.gpu.size_params)
        found = self._plans.get(key)
        if found is None:
            found = []
            for kernel in self.gpu.kernels:
                grid = self.grid(kernel, env)
                if not grid[0]:
                    continue
                if fits_int32(kernel, self.gpu, env, grid):
                    kernel = self._narrow(kernel)
                found.append((kernel, grid))
            if len(self._plans) > 64:
                self._plans.clear()
            self._plans[key] = found
        return found

    def grids(self, env: Mapping[str, int]) -> list[tuple[int, int, int]]:
        """Every kernel's grid for these sizes, in `gpu.kernels` order ((0, 0, 0): not
        launched); `plan` is what a call runs."""
        return [self.grid(k, env) for k in self.gpu.kernels]

    def grid(self, kernel: GpuKernel, env: Mapping[str, int]) -> tuple[int, int, int]:
        """The kernel's blocks in x, y, z for these sizes; (0, 0, 0) where it has no work
        (an empty band, or its `when` is not > 0): it is not launched."""
        if kernel.when is not None and int(eval_expr(kernel.when, dict(env))) <= 0:
            return 0, 0, 0
        limits = (MAX_GRID_X, MAX_GRID_YZ, MAX_GRID_YZ)
        dims = []
        for g, limit in zip(kernel.grid, limits, strict=True):
            n = DEFAULT_BLOCKS if g is None else int(eval_expr(g, dict(env)))
            if n <= 0:  # the grid of an empty band (grid-stride loops: no work at all)
                return 0, 0, 0
            dims.append(min(limit, n))
        return dims[0], dims[1], dims[2]

    def run(
        self,
        inputs: Mapping[str, np.ndarray],
        sizes: Mapping[str, int],
        outputs: Mapping[str, np.ndarray],
    ) -> None:
        """Run on NumPy `inputs`, writing `outputs` in place (see the module doc)."""
        arrays = {**inputs, **outputs}
        error = None
        if self.lowered.checks:
            error = arrays[ERROR_BUFFER] = np.zeros(2, dtype=np.int64)
        env = check_arguments(self.lowered.function, arrays, sizes)
        if self.emulated:
            self._run_emulated(arrays, env)
        else:
            self._run_device(arrays, env)
        if error is not None and error[0]:
            raise check_failure(self.lowered.checks, error, {n: a.shape for n, a in arrays.items()})

    def _runs(
        self, kernels: _Kernels, env: Mapping[str, int]
    ) -> list[tuple[GpuKernel, tuple[int, int, int]]]:
        """The kernels these sizes launch, with their grids, built in `kernels` first."""
        runs = self.plan(env)
        kernels.build([k for k, _ in runs])
        return runs

    def _temps(
        self, kernel: GpuKernel, env: Mapping[str, int], made: dict[tuple[int, str], np.ndarray]
    ) -> list[np.ndarray]:
        """The kernel's temporaries, zeroed; the kernels of one phase share them (`made`:
        by phase and name), as the phase's `Alloc` wraps all of them."""
        for t in kernel.temps:
            if (kernel.phase, t.name) not in made:
                shape = tuple(eval_size_expr(d, env) for d in t.shape)
                made[kernel.phase, t.name] = np.zeros(shape, t.dtype.np)
        return [made[kernel.phase, t.name] for t in kernel.temps]

    def _run_emulated(self, arrays: dict[str, np.ndarray], env: Mapping[str, int]) -> None:
        kernels = self._emulation
        size_args = [env[n] for n in self.gpu.size_params]
        made: dict[tuple[int, str], np.ndarray] = {}
        for kernel, grid in self._runs(kernels, env):
            temps = self._temps(kernel, env, made)
            pointers = [arrays[b.name].ctypes.data for b in self.gpu.buffers]
            pointers += [t.ctypes.data for t in temps]
            kernels.launch(
                kernel.name, grid, kernel.block, pointers, size_args, index32=self.is_narrow(kernel)
            )

    def _run_device(self, arrays: dict[str, np.ndarray], env: Mapping[str, int]) -> None:
        device, module = self._module
        device_ptrs: dict[str, int] = {}
        allocated: list[int] = []
        try:
            for b in self.gpu.buffers:
                host = arrays[b.name]
                ptr = device.alloc(host.nbytes)
                allocated.append(ptr)
                device.to_device(ptr, host)
                device_ptrs[b.name] = ptr
            self.launch_all(device, module, device_ptrs, env, stream=0)
            device.synchronize(0)
            for b in self.gpu.buffers:
                if b.role.value == "out":
                    device.to_host(arrays[b.name], device_ptrs[b.name])
        finally:
            for ptr in allocated:
                device.free(ptr)

    def launch_all(
        self,
        device: Any,
        module: Any,
        pointers: Mapping[str, int],
        env: Mapping[str, int],
        *,
        stream: int,
        owner: int | None = None,
    ) -> None:
        """Launch every kernel in order on `stream`. Temporaries (shared by the kernels
        of one phase) are pooled device memory of the calls on stream `owner` (default
        `stream`; a graph is captured on another stream than it runs on), zero-filled
        on `stream` before their phase."""
        size_args = [env[n] for n in self.gpu.size_params]
        made: dict[tuple[int, str], int] = {}
        for kernel, grid in self._runs(module, env):
            for t in kernel.temps:
                if (kernel.phase, t.name) in made:
                    continue
                ptr, nbytes = self._temp(device, kernel, t, env, stream if owner is None else owner)
                device.zero(ptr, nbytes, stream)
                made[kernel.phase, t.name] = ptr
            temps = [made[kernel.phase, t.name] for t in kernel.temps]
            ptrs = [pointers[b.name] for b in self.gpu.buffers] + temps
            module.launch(
                kernel.name, grid, kernel.block, ptrs, size_args, stream,
                index32=self.is_narrow(kernel),
            )  # fmt: skip

    def prepare_launch(self, device: Any, module: Any, env: Mapping[str, int], owner: int) -> None:
        """Build the kernels these sizes launch and allocate their temporaries (what
        must not happen while a graph is captured)."""
        for kernel, _ in self._runs(module, env):
            module.resolve(kernel.name)
            for t in kernel.temps:
                self._temp(device, kernel, t, env, owner)

    def _temp(
        self, device: Any, kernel: GpuKernel, t: Buffer, env: Mapping[str, int], owner: int
    ) -> tuple[int, int]:
        """(pointer, bytes) of kernel's temporary `t` for these sizes on stream `owner`."""
        count = int(np.prod([eval_size_expr(d, env) for d in t.shape], dtype=np.int64))
        nbytes = count * t.dtype.np.itemsize
        key = tuple(env[n] for n in self.gpu.size_params)
        return self.host.temps.pointer(device, owner, key, (kernel.phase, t.name), nbytes), nbytes

    @cached_property
    def host(self) -> HostState:
        """The pooled per-stream state of device calls (`runtime.cuda_host`)."""
        return HostState()

    def overwritten(self, env: Mapping[str, int]) -> frozenset[str]:
        """The outputs the kernels write in full before reading them, for these sizes
        (`loops.overwrite`): a device call allocates them without a zero fill."""
        return self.host.overwritten(self.lowered.function, env)


class _Kernels:
    """A program's kernels, built when first launched: the kernels a call runs that are
    not built yet are built together (one NVRTC program, or one g++ library), so a def
    whose thread-tile or warp variants the sizes never select never compiles them (the
    conv2d gradient's 16 kernels took NVRTC 2.3 s together, its 7 one-thread-an-output
    kernels 0.6 s). `build(sub_program)` gives a module with `launch(name, ...)`."""

    def __init__(self, gpu: GpuProgram, build: Callable[[GpuProgram], Any]) -> None:
        self._gpu, self._build = gpu, build
        self._modules: dict[str, Any] = {}  # kernel name -> the module holding it
        self._lock = threading.Lock()

    def build(self, kernels: Sequence[GpuKernel]) -> None:
        if all(k.name in self._modules for k in kernels):
            return  # every call after the first for a size signature
        with self._lock:
            missing = tuple(k for k in kernels if k.name not in self._modules)
            if missing:
                module = self._build(dataclasses.replace(self._gpu, kernels=missing))
                self._modules.update((k.name, module) for k in missing)

    def resolve(self, name: str) -> None:
        """Look kernel `name` up in its module now (a driver module's `function`), so
        that a graph capture's launches make no other driver calls."""
        function = getattr(self._modules[name], "function", None)
        if function is not None:
            function(name)

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
        """Launch kernel `name` (built by an earlier `build`); `index32`: its sizes are
        `int` parameters (a 32-bit version)."""
        self._modules[name].launch(name, grid, block, pointers, sizes, stream, index32=index32)


_IMAGES: dict[tuple[str, str, bool], bytes] = {}
_IMAGES_LOCK = threading.Lock()


def _image(source: str, arch: str, fast_math: bool) -> bytes:
    """NVRTC's image of `source`, compiled once per process (in memory)."""
    from compiler.cuda.cuda_driver import compile_source

    key = (source, arch, fast_math)
    with _IMAGES_LOCK:
        found = _IMAGES.get(key)
    if found is None:
        found = compile_source(source, arch=arch, fast_math=fast_math)
        with _IMAGES_LOCK:
            _IMAGES[key] = found
            while len(_IMAGES) > 256:
                del _IMAGES[next(iter(_IMAGES))]
    return found


def compile_cuda(
    ranged: RangedDef, options: CudaOptions | None = None, *, emulated: bool = False
) -> CudaProgram:
    """Lower, map and emit `ranged` for a CUDA target (see the module doc). The code is
    built (g++ / NVRTC) at the first run, or by `CudaProgram.prepare()`."""
    options = options or CudaOptions()
    for t in ranged.checked.tensors:
        if t.dtype.value in ("float16", "half"):
            raise OptionsError(
                f"the CUDA targets do not support float16 yet ('{t.name}')",
                t.span,
                hint="declare it float (float32)",
            )
    gl = lower_gpu(ranged)
    f = gl.lowered.function
    gpu = map_to_gpu(f, gl.phases, options, error=ERROR_BUFFER)
    source = emit_cuda(gpu, fast_math=options.fast_math)
    return CudaProgram(gl.lowered, gpu, source, options, emulated, gl.statements, gl.scatters)


def cuda_source(ranged: RangedDef, options: CudaOptions | None = None) -> str:
    """The CUDA C of `ranged` with its notes (what `tcc compile --emit cuda` prints)."""
    program = compile_cuda(ranged, options)
    notes = "".join(f"// {n}\n" for n in program.lowered.notes)
    return notes + program.source


__all__ = [
    "CUDA_TARGETS",
    "CudaProgram",
    "CudaTarget",
    "TARGET_OBJECTS",
    "compile_cuda",
    "cuda_source",
]
