"""CUDA C for a fused kernel's lane loop (`cuda.cuda_rows`), on the GPU and in emulation.

Requires: a GPU_THREAD loop over the 32 lanes of a warp whose body is the sections of
a row group separated by `WarpSync` (`cuda_rows.is_lane_loop`), and the kernel
emitter of `cuda.cuda` (its writer, names and statement printer).
Ensures:  `emit_lane_loop(emitter, loop)` writes both versions, chosen by the
preprocessor:

- on the GPU (`#ifndef TCC_EMULATION`), the loop as any GPU_THREAD loop (each of the
  block's 32 threads runs its lane), `__syncwarp()` between the sections;
- in the emulation where it runs a block's threads one after another to completion
  (not as cooperating fibers, `cuda.cuda_fibers`, which run the GPU's version),
  thread 0 runs the warp: each section as a loop over the lanes, lane 31 down to 0,
  setting `threadIdx.x` to the lane (and restarting the warp reduction's call
  count, `tcc_emu_calls`), so lane 0 comes last in every section, as the
  emulated `tcc_warp_*` combination needs; every lane's writes of one section are
  done before any lane's next section starts (what `__syncwarp()` guarantees on
  the GPU). Threads 1..31 skip the loop.

Worked example, two sections `S0`, `S1` over lane `l`:

    #if defined(TCC_EMULATION) && !defined(TCC_EMU_FIBERS)
    if (threadIdx.x == 0u) {
      for (long long l = 31LL; l >= 0LL; --l) { threadIdx.x = (unsigned)l; tcc_emu_calls = 0; S0 }
      for (long long l = 31LL; l >= 0LL; --l) { threadIdx.x = (unsigned)l; tcc_emu_calls = 0; S1 }
      threadIdx.x = 0u;
    }
    #else
    for (long long l = blockIdx.x * blockDim.x + threadIdx.x; l < 32LL; ...) { S0 __syncwarp(); S1 }
    #endif
"""

from __future__ import annotations

from typing import Any

from compiler import loops as L
from compiler.cuda.cuda_rows import sections
from compiler.cuda.cuda_warp import LANES


def emit_lane_loop(emitter: Any, loop: L.For) -> None:
    """Write `loop` (a fused kernel's lane loop) with `emitter` (module doc)."""
    w = emitter.w
    v, t = emitter.name(loop.var), emitter.itype
    last = f"{LANES - 1}" if emitter.narrow else f"{LANES - 1}LL"
    zero = "0" if emitter.narrow else "0LL"
    w.line("#if defined(TCC_EMULATION) && !defined(TCC_EMU_FIBERS)")
    with emitter._scope("if (threadIdx.x == 0u)"):
        for section in sections(loop):
            with emitter._scope(f"for ({t} {v} = {last}; {v} >= {zero}; --{v})"):
                with emitter._binding(loop.var, emitter.narrow):
                    w.line(f"threadIdx.x = (unsigned){v}; tcc_emu_calls = 0;")
                    emitter.stmt(section)
        w.line("threadIdx.x = 0u;")
    w.line("#else")
    emitter.stmt(loop)
    w.line("#endif")


__all__ = ["emit_lane_loop"]
