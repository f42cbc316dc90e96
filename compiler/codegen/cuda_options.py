"""Options of the CUDA targets: one frozen dataclass, validated when it is made.

    CudaOptions()                        the model default: 256 threads a block, as many
                                         blocks as cover the band (grid-stride beyond)
    CudaOptions(block=128, grid=1024)    128 threads a block, at most 1024 blocks in x
    CudaOptions(fast_math=True)          `__expf` & co. and NVRTC's --use_fast_math
    CudaOptions(atomics=False)           data-dependent scatters run on one thread

- `block`: threads per block (1..1024), all along x; the band's collapsed inner loops
  map to `blockIdx.x * blockDim.x + threadIdx.x`. A multiple of 32 (a warp) is best.
- `grid`: the most blocks along x, or None: enough to cover the extent when the host
  can compute it from the sizes (else 1024). Loops are grid-stride, so any value is
  correct; it only changes how much work a thread does.
- `fast_math`: float32 math through CUDA's fast intrinsics (`__expf`, `__logf`, ...),
  less accurate; off by default.
- `atomics`: a serial nest whose only writes are `T[i] += v` (a data-dependent scatter)
  runs in parallel with `atomicAdd` (float32, float64); False runs it on one thread.
- `arch`: NVRTC's `--gpu-architecture` (e.g. "sm_90"), or None: the device's.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from compiler.diagnostics import OptionsError

MAX_BLOCK = 1024
MAX_GRID_X = 2**31 - 1
MAX_GRID_YZ = 65535
DEFAULT_BLOCKS = 1024  # blocks along a dimension whose extent the host cannot compute


@dataclass(frozen=True, slots=True)
class CudaOptions:
    """How to map and compile a def for the CUDA targets (see the module doc)."""

    block: int = 256
    grid: int | None = None
    fast_math: bool = False
    atomics: bool = True
    arch: str | None = None

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
        for name in ("fast_math", "atomics"):
            if not isinstance(getattr(self, name), bool):
                raise OptionsError(
                    f"CudaOptions.{name} must be True or False, got {getattr(self, name)!r}"
                )
        if self.arch is not None and (
            not isinstance(self.arch, str) or not re.fullmatch(r"(sm|compute)_\d+[af]?", self.arch)
        ):
            raise OptionsError(
                f"CudaOptions.arch must be None or like 'sm_90', got {self.arch!r}",
                hint="None compiles for the device at hand",
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
        hint="from compiler.codegen.cuda_options import CudaOptions; options=CudaOptions(block=128)",
    )


__all__ = [
    "DEFAULT_BLOCKS",
    "MAX_BLOCK",
    "MAX_GRID_X",
    "MAX_GRID_YZ",
    "CudaOptions",
    "as_cuda_options",
]
