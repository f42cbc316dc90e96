"""The CUDA target's own loop-IR nodes and the result of the GPU mapping
(`cuda.cuda_map.map_to_gpu`): one `GpuKernel` per phase with its launch configuration,
gathered into a `GpuProgram`. Here apart from the mapping so that the passes the
mapping calls (rows, shared memory) build these nodes without importing it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from compiler.loops import Buffer, DType, Expr, Stmt

I64 = DType.INT64


# ------------------------------------------------------------ CUDA-only nodes


@dataclass(frozen=True, slots=True)
class AtomicAdd(Stmt):
    """`atomicAdd(&buffer[index], value)`: the one write of a data-dependent scatter."""

    buffer: Buffer
    index: tuple[Expr, ...]
    value: Expr


@dataclass(frozen=True, slots=True)
class PosDiv(Expr):
    """`a / b` for int64 operands known to be >= 0 and b >= 1 (index decomposition)."""

    a: Expr
    b: Expr

    @property
    def dtype(self) -> DType:
        return I64


@dataclass(frozen=True, slots=True)
class PosMod(Expr):
    """`a % b` for int64 operands known to be >= 0 and b >= 1."""

    a: Expr
    b: Expr

    @property
    def dtype(self) -> DType:
        return I64


@dataclass(frozen=True, slots=True)
class SharedArray(Stmt):
    """`__shared__ T name[size];` (one array a block), then `body`. `buffer` is 1-D,
    its one extent a constant; it is no kernel parameter (loads and stores of it index
    the block's array)."""

    buffer: Buffer
    body: Stmt

    def emit_cuda(self, em: Any) -> None:
        size = self.buffer.shape[0]
        em.w.line(
            f"__shared__ {_C_TYPES[self.buffer.dtype]} {em.name(self.buffer.name)}[{size.value}];"
        )  # type: ignore[attr-defined]
        em.stmt(self.body)


@dataclass(frozen=True, slots=True)
class BlockSync(Stmt):
    """`__syncthreads()`: every thread of the block waits for the others; their writes
    to shared memory before it are visible to all after it. Every thread of the block
    must reach it (a uniform condition and loop around it)."""

    def emit_cuda(self, em: Any) -> None:
        em.w.line("__syncthreads();")


_C_TYPES = {DType.FLOAT32: "float", DType.FLOAT64: "double"}


# ------------------------------------------------------------ the result


@dataclass(frozen=True)
class GpuKernel:
    name: str
    body: Stmt
    mode: str  # "parallel" | "atomic" | "serial"
    block: int  # threads per block (x)
    grid: tuple[Expr | None, Expr | None, Expr | None]  # blocks in x, y, z (None: DEFAULT_BLOCKS)
    dims: tuple[tuple[str, str], ...]  # GPU_BLOCK loop variable -> "y" | "z"
    temps: tuple[Buffer, ...]  # allocated by the host, zero-filled
    phase: int = 0  # the phase of the Function it runs (several kernels may share one)
    when: Expr | None = None  # runs only where this int64 size expression is > 0
    # "tile" (cuda_tile), "warp" (lanes combine values), "split" (cuda_split), "rows" (cuda_rows)
    variant: str = ""
    reason: str = ""  # why a "serial" kernel runs on one thread


@dataclass(frozen=True)
class GpuProgram:
    name: str
    buffers: tuple[Buffer, ...]
    size_params: tuple[str, ...]
    kernels: tuple[GpuKernel, ...]

    def buffers_of(self, kernel: GpuKernel) -> tuple[Buffer, ...]:
        """The kernel's pointer parameters, in order: the Function's, then its temps."""
        return self.buffers + kernel.temps


__all__ = [
    "AtomicAdd",
    "BlockSync",
    "GpuKernel",
    "GpuProgram",
    "PosDiv",
    "PosMod",
    "SharedArray",
]
