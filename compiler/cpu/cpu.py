"""The CPU target ("llvm"): loop IR -> LLVM -> machine code in this process.

`CPU_TARGET` implements `compiler.codegen.target.Target`: its options are
`compiler.options.Options`, it implements serial, parallel, vector and unroll loops
(GPU loop kinds are rejected), `compile` emits object code through LLVM
(`compiler.cpu.llvm`) and `load` links it into an MCJIT engine, giving a
`compiler.cpu.runtime.CompiledFunction`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from compiler.codegen.target import Artefact, LoopPass, register_target
from compiler.cpu import llvm as backend
from compiler.cpu.cache import load_object
from compiler.cpu.runtime import CompiledFunction
from compiler.loops import Function, LoopKind
from compiler.options import Options

CPU_LOOP_KINDS = frozenset({LoopKind.SERIAL, LoopKind.PARALLEL, LoopKind.VECTOR, LoopKind.UNROLL})


@dataclass(frozen=True)
class CpuTarget:
    """LLVM for the host CPU (see the module doc)."""

    name: str = "llvm"
    options_type: type = Options
    loop_kinds: frozenset[LoopKind] = CPU_LOOP_KINDS

    def passes(self, options: Any) -> tuple[LoopPass, ...]:
        return ()

    def compile(self, function: Function, options: Any) -> Artefact:
        objects = backend.compile_objects(function)
        meta = {"ir": objects.ir_text, "objects": objects.sizes}
        return Artefact(self.name, function, objects.code, meta)

    def load(self, artefact: Artefact) -> CompiledFunction:
        meta = artefact.metadata
        sizes = meta.get("objects")
        return load_object(artefact.function, artefact.code, str(meta.get("ir", "")), sizes)


CPU_TARGET = register_target(CpuTarget())

__all__ = ["CPU_LOOP_KINDS", "CPU_TARGET", "CpuTarget"]
