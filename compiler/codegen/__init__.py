"""Code generation from the loop IR: the target seam (`target`: protocol and registry),
the CPU target (`cpu`: its loop pass `cpu_parallel`, LLVM through llvmlite in `llvm`,
`llvm_emit`, `llvm_parallel`) and the CPU runtime that calls compiled code on NumPy
arrays (`runtime`). Imports only `compiler.loops`."""

from __future__ import annotations

from compiler.codegen.llvm import build_module, emit_llvm, jit, target_machine
from compiler.codegen.runtime import CompiledFunction, compile_function, run_chunks

__all__ = [
    "CompiledFunction",
    "build_module",
    "compile_function",
    "emit_llvm",
    "jit",
    "run_chunks",
    "target_machine",
]
