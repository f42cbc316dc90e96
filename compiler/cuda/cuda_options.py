"""Options of the CUDA targets: one frozen dataclass, validated when it is made.

    CudaOptions()                        the model default: 256 threads a block, as many
                                         blocks as cover the band (grid-stride beyond)
    CudaOptions(block=128, grid=1024)    128 threads a block, at most 1024 blocks in x
    CudaOptions(fast_math=True)          `__expf` & co. and NVRTC's --use_fast_math
    CudaOptions(atomics=False)           data-dependent scatters run on one thread
    CudaOptions(thread_tile=(1, 1))      one thread per output of every contraction
    CudaOptions(warp_outputs=0)          no warp reductions
    CudaOptions(graph=True)              device calls replay a captured CUDA graph
    CudaOptions(race_check=True)         cuda-emulated checks shared memory for races
    CudaOptions(shared_memory=False)     no shared-memory tiling of contractions

- `block`: threads per block (1..1024), all along x; the band's collapsed inner loops
  map to `blockIdx.x * blockDim.x + threadIdx.x`. A multiple of 32 (a warp) is best.
- `grid`: the most blocks along x, or None: enough to cover the extent when the host
  can compute it from the sizes (else 1024). Loops are grid-stride, so any value is
  correct; it only changes how much work a thread does.
- `fast_math`: float32 math through CUDA's fast intrinsics (`__expf`, `__logf`, ...),
  less accurate; off by default.
- `atomics`: a serial nest whose only writes are `T[i] += v` (a data-dependent scatter)
  runs in parallel with `atomicAdd` (float32, float64); False runs it on one thread.
- `thread_tile`: `(ty, tx)`, the outputs of a contraction one thread computes
  (`cuda.cuda_tile`): `ty` along the band variable whose copies share the most
  loads, `tx` along the innermost one, 32 apart (coalesced). `(1, 1)`: one output a
  thread. At most 64 outputs a thread. The default (8, 4) with 256 threads a block
  was the fastest of 19 variants for matmul 4096^3 on an H200 (7.5 ms; 42.9 ms with
  one output a thread, 10.8 with 4 x 4; cuBLAS 2.7).
- `tile_threads`: the tiled kernels run when they have at least this many threads
  (the band at least `ty * tx * tile_threads` iterations); smaller bands run one
  thread per output (more threads to hide latency with). The host decides per call
  from the sizes. 32768 (about 8 warps an SM of an H100) is a model guess, not a
  measured optimum: a convolution gradient's small bands got slower when tiled.
- `warp_outputs`: a band of at most this many outputs over a long reduction (an
  innermost reduction loop of at least 16 steps) runs a warp an output
  (`cuda.cuda_warp`): the 32 lanes split the reduction and combine their partial
  results with warp shuffles. 0 turns this off; it needs `block` a multiple of 32.
  On an H200 the warp form took sum_j exp(A(i, j)) * b(j) at 4096^2 from 0.75 to
  0.095 ms, and at 65536 x 256 from 0.145 to 0.09 ms; 65536 itself is a model guess
  (no measured case had more outputs).
- `graph`: a device call (`runtime.cuda_device`) captures its launches as a CUDA
  graph, once per stream, sizes and buffer pointers, and replays it with one
  `cuGraphLaunch` (`runtime.cuda_host.GraphCache`); it pays when a call repeats
  with the same arrays (`out=` given, inputs reused). Off by default.
- `race_check`: in `cuda-emulated`, kernels that use `__shared__` memory check every
  access: two threads of a block touching one shared element between two barriers,
  one of them writing, fails the launch with an `EmulationError` naming the kernel,
  the array and the element (`cuda.cuda_fibers`). A debugging aid: slower; ignored
  on a GPU.
- `shared_memory`: contractions (matmul, bmm, the implicit-GEMM view of a convolution;
  `cuda.cuda_shared`) get a kernel whose blocks stage tiles of both operands in
  `__shared__` memory between `__syncthreads()`, each thread accumulating a register
  tile. On by default; False turns it off.
- `shared_tile`: `(BM, BN, BK, TM, TN)`: a block computes BM x BN outputs with
  (BM / TM) x (BN / TN) threads, TM x TN each, over K in steps of BK. The default
  (128, 128, 8, 8, 8) (256 threads, 8.4 KB of shared memory in float32) is the usual
  SGEMM shape, a model default not tuned on a GPU here.
- `shared_min_outputs`: the shared-memory kernel runs where the contraction has at
  least this many outputs (rows x columns of the GEMM view; 16384, a model guess:
  one default tile); smaller ones run the other kernels.
- `fuse_rows`: consecutive statements over the same rows, independent row by row
  (softmax, layer norm), run as one kernel a warp a row (`cuda.cuda_rows`) where the
  rows give enough warps; False keeps one kernel (or more) per statement. On by default.
- `arch`: NVRTC's `--gpu-architecture` (e.g. "sm_90"), or None: the device's.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from compiler.diagnostics import OptionsError

MAX_BLOCK = 1024
MAX_GRID_X = 2**31 - 1
MAX_GRID_YZ = 65535
MAX_TILE = 64  # outputs (register accumulators) a thread
DEFAULT_BLOCKS = 1024  # blocks along a dimension whose extent the host cannot compute


@dataclass(frozen=True, slots=True)
class CudaOptions:
    """How to map and compile a def for the CUDA targets (frozen; validated when made).

    Attributes:
        block (int): threads per block, 1..1024.
        grid (int | None): the most blocks along x; None: enough to cover the band
            (kernels are grid-stride loops, so any grid covers any extent).
        fast_math (bool): CUDA's fast intrinsics (`__expf`) instead of `expf`.
        atomics (bool): run data-dependent scatters in parallel with `atomicAdd`
            (False: one thread).
        arch (str | None): NVRTC's `sm_XX`; None: the device's.
        graph (bool): device calls capture and replay CUDA graphs.
        race_check (bool): cuda-emulated checks shared memory for races.
        shared_memory (bool): contractions stage operand tiles in shared memory.
        shared_tile (tuple[int, int, int, int, int]): BM, BN, BK, TM, TN of it.
        shared_min_outputs (int): it runs for at least this many outputs.
        fuse_rows (bool): statements over the same independent rows run as one kernel.
        thread_tile (tuple[int, int]): outputs a thread computes in a band over a
            reduction: rows of the variable whose copies share the most loads, times
            columns of the innermost one.
        tile_threads (int): thread tiles run for bands of at least `32 * tile_threads`
            iterations.
        warp_outputs (int): a band of at most this many outputs over a long reduction
            runs a warp an output.

    Raises:
        OptionsError: a value out of range or of the wrong type, with a hint.

    Example:
        ```python
        k = compiler.define(src, target="cuda", options=CudaOptions(block=128, fast_math=True))
        ```
    """

    block: int = 256
    grid: int | None = None
    fast_math: bool = False
    atomics: bool = True
    arch: str | None = None
    thread_tile: tuple[int, int] = (8, 4)
    tile_threads: int = 32768
    warp_outputs: int = 65536
    graph: bool = False
    race_check: bool = False
    shared_memory: bool = True
    shared_tile: tuple[int, int, int, int, int] = (128, 128, 8, 8, 8)
    shared_min_outputs: int = 16384
    fuse_rows: bool = True

    def __post_init__(self) -> None:
        if not _is_int(self.block) or not 1 <= self.block <= MAX_BLOCK:
            raise OptionsError(
                f"CudaOptions.block must be an int in 1..{MAX_BLOCK}, got {self.block!r}",
                hint="CudaOptions(block=256): a multiple of 32 threads",
            )
        if self.grid is not None and (not _is_int(self.grid) or not 1 <= self.grid <= MAX_GRID_X):
            raise OptionsError(
                f"CudaOptions.grid must be None or an int in 1..{MAX_GRID_X}, got {self.grid!r}",
                hint="CudaOptions(grid=None) covers the extent",
            )
        for name in ("fast_math", "atomics", "graph", "race_check", "shared_memory", "fuse_rows"):
            if not isinstance(getattr(self, name), bool):
                raise OptionsError(
                    f"CudaOptions.{name} must be True or False, got {getattr(self, name)!r}"
                )
        tile = self.thread_tile
        if not (
            isinstance(tile, tuple)
            and len(tile) == 2
            and all(_is_int(t) and t >= 1 for t in tile)
            and tile[0] * tile[1] <= MAX_TILE
        ):
            raise OptionsError(
                f"CudaOptions.thread_tile must be two ints >= 1 with a product of at most "
                f"{MAX_TILE}, got {tile!r}",
                hint="CudaOptions(thread_tile=(8, 4)); (1, 1) turns thread tiles off",
            )
        _check_shared(self.shared_tile, self.shared_min_outputs)
        if not _is_int(self.tile_threads) or self.tile_threads < 1:
            raise OptionsError(
                f"CudaOptions.tile_threads must be an int >= 1, got {self.tile_threads!r}"
            )
        if not _is_int(self.warp_outputs) or self.warp_outputs < 0:
            raise OptionsError(
                f"CudaOptions.warp_outputs must be an int >= 0, got {self.warp_outputs!r}",
                hint="CudaOptions(warp_outputs=0) turns warp reductions off",
            )
        if self.arch is not None and (
            not isinstance(self.arch, str) or not re.fullmatch(r"(sm|compute)_\d+[af]?", self.arch)
        ):
            raise OptionsError(
                f"CudaOptions.arch must be None or like 'sm_90', got {self.arch!r}",
                hint="None compiles for the device at hand",
            )


def _check_shared(tile: object, min_outputs: object) -> None:
    """`shared_tile` is (BM, BN, BK, TM, TN): TM divides BM, TN divides BN, at most
    MAX_TILE accumulators and 32..1024 threads (a multiple of 32) a block."""
    ok = isinstance(tile, tuple) and len(tile) == 5 and all(_is_int(t) and t >= 1 for t in tile)
    if ok:
        bm, bn, bk, tm, tn = tile  # type: ignore[misc]
        count = (bm // tm) * (bn // tn)
        ok = bm % tm == 0 and bn % tn == 0 and tm * tn <= MAX_TILE and 32 <= count <= MAX_BLOCK
        ok = ok and count % 32 == 0 and bk <= 64
    if not ok:
        raise OptionsError(
            f"CudaOptions.shared_tile must be (BM, BN, BK, TM, TN) with TM | BM, TN | BN, "
            f"TM * TN <= {MAX_TILE}, BK <= 64 and (BM / TM) * (BN / TN) threads a multiple "
            f"of 32 in 32..{MAX_BLOCK}, got {tile!r}",
            hint="CudaOptions(shared_tile=(128, 128, 8, 8, 8)), the model default",
        )
    if not _is_int(min_outputs) or min_outputs < 1:  # type: ignore[operator]
        raise OptionsError(
            f"CudaOptions.shared_min_outputs must be an int >= 1, got {min_outputs!r}"
        )


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def as_cuda_options(value: object) -> CudaOptions:
    """`value` as CudaOptions: None gives the defaults; anything else is an OptionsError."""
    if value is None:
        return CudaOptions()
    if isinstance(value, CudaOptions):
        return value
    raise OptionsError(
        f"options= for a CUDA target must be a CudaOptions, got {type(value).__name__}",
        hint="from compiler.cuda.cuda_options import CudaOptions; options=CudaOptions(block=128)",
    )


__all__ = [
    "DEFAULT_BLOCKS",
    "MAX_BLOCK",
    "MAX_GRID_X",
    "MAX_GRID_YZ",
    "MAX_TILE",
    "CudaOptions",
    "as_cuda_options",
]
