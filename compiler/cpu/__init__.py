"""The CPU target: its schedule decisions and its code generation.

Schedule (on the loop level, below the def the user sees): the CPU cost model
(`cpu_model`: loop order, register tiles, packing, `cpu_registers`), cache tiling
(`tiling`), register tiles (`regtile`), packed panels (`pack`), transposed copies
(`transpose`), zero-padded reads of clamped gathers (`pad`), L1 set aliasing
(`aliasing`), blocked column sums (`colsum`).

Code generation: the target's loop pass (`cpu_parallel`), LLVM IR through llvmlite
(`llvm`, `llvm_emit` and its helpers `llvm_*`), the runtime that calls compiled code on
NumPy arrays across a thread pool (`runtime`), the compile cache (`cache`) and the
`Target` registration (`cpu`).
"""

from __future__ import annotations

from compiler.cpu.llvm import build_module, emit_llvm, jit, target_machine
from compiler.cpu.runtime import CompiledFunction, compile_function, run_chunks

__all__ = [
    "CompiledFunction",
    "build_module",
    "compile_function",
    "emit_llvm",
    "jit",
    "run_chunks",
    "target_machine",
]
