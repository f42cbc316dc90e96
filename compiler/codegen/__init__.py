"""Code generation from the loop IR: LLVM (`llvm`, JIT through llvmlite) and the runtime
that calls compiled code on NumPy arrays (`runtime`). Imports only `compiler.loops`."""

from __future__ import annotations

from compiler.codegen.llvm import build_module, emit_llvm, jit, optimise, target_machine
from compiler.codegen.runtime import CompiledFunction, compile_function, run_chunks

__all__ = [
    "CompiledFunction",
    "build_module",
    "compile_function",
    "emit_llvm",
    "jit",
    "optimise",
    "run_chunks",
    "target_machine",
]
