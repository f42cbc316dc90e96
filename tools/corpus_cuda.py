"""The `cuda-emulated` stage of tools.corpus: the generated CUDA C, run on the CPU.

Every kernel runs through target="cuda-emulated" (`compiler.runtime.cuda`: the GPU
schedule and mapping, CUDA C, g++ with tcc's emulation header) on the `llvm` stage's
inputs and must equal the reference evaluator (float32, and float64 where the def has
a float64 variant), with the default options and again with thread tiles forced
(`TILES_FORCED`); then, where the `grad` stage made a gradient point, the CUDA
kernel's vjp (float64) must equal interp's at that point, and its gradient kernels may
use atomicAdd only for data-dependent scatters (the gather pass made the rest gathers).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from compiler.cuda.cuda_options import CudaOptions
from compiler.diagnostics import InternalError
from tools.corpus_grad import NotApplicable
from tools.corpus_interp import SKIPPED_CATEGORIES

TARGET = "cuda-emulated"
# every contraction of the corpus through the thread tiles (cuda.cuda_tile), whose
# default threshold its sizes rarely reach: 3 x 2 outputs a thread, rests included
TILES_FORCED = CudaOptions(block=64, thread_tile=(3, 2), tile_threads=1)


def run_cuda_emulated(text: str, entry: Mapping[str, Any], report: Any) -> tuple[str, ...]:
    """Check `entry` on the emulated CUDA target; notes for the report."""
    from compiler.gradcheck import as_float64
    from compiler.kernel import define
    from tools.corpus_grad import _agree
    from tools.corpus_llvm import run_llvm

    if entry.get("category") in SKIPPED_CATEGORIES or "inputs" not in entry:
        raise NotApplicable("not run", informative=False)
    notes = list(run_llvm(text, entry, target=TARGET))
    notes.extend(run_llvm(text, entry, target=TARGET, options=TILES_FORCED))
    notes.append(f"{TARGET}: equal with thread tiles forced")
    point = getattr(report, "point", None)
    if point is not None and point.vjp is not None and report.scatters is not None:
        kernel = as_float64(define(text, entry["def"], target=TARGET))
        _agree(kernel, point, TARGET)
        notes.append(f"{TARGET}: vjp == interp's")
        notes.extend(_atomics(kernel.grad._native))
    return tuple(notes)


def _atomics(program: Any) -> list[str]:
    """The gather pass on the GPU: a gradient kernel may use atomicAdd only for a
    data-dependent scatter; any other is a compiler bug."""
    notes = []
    for kernel in program.gpu.kernels:
        stmt = program.statements[kernel.phase]
        if kernel.mode != "atomic":
            continue
        if stmt not in program.scatters:
            raise InternalError(f"{TARGET}: atomicAdd for the affine statement {stmt}")
        notes.append(f"{TARGET}: atomicAdd for the data-dependent scatter {stmt}")
    return notes


__all__ = ["run_cuda_emulated"]
