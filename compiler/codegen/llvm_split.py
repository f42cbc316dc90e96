"""One module compiled as several parts, the parts on threads at once.

Requires: an llvmlite module built by `codegen.llvm.build_module`, and its outlined loop
bodies (the `work` functions of `codegen.llvm_parallel`, `FunctionEmitter.outlined`).
Ensures: `compile_parts(module, outlined) -> Objects`: one object file per part, which
one MCJIT engine links into the program the whole module is (`codegen.llvm.load_objects`),
and the parts' optimised IR as one text.

Why: LLVM's O3 pipeline and its machine-code emission take most of a cold compile (a
conv2d gradient: 0.9 of 1.5 s) and run on one core. The `work` functions hold nearly all
of a def's code, and no work function calls another: the entry calls each (its serial
path) and so does each thunk. So each work function is a part of its own, and part 0 is
everything else (the entry, the `.objects` entry, the thunks). Compiled one at a time
the parts took 0.87 s against 1.10 s for the whole module (conv2d gradient, Zen 3):
the entry no longer inlines the work functions that it alone calls; on 2 threads, 0.5 s.

The split depends only on the module, never on the thread count, so every machine
compiles the same code for a def. A work function's linkage becomes external (part 0's
calls and thunks reach it in another object; MCJIT resolves them within its engine,
through a stub); in every other part each function is a declaration, and the module's
metadata and its `llvm.compiler.used` list are repeated (only the references matter).
A part would repeat a global variable too, so one that is not a constant is refused.

A part without loops (part 0 where every loop is outlined: the entry's size checks, grain
estimates and thread records, and the thunks) runs a few hundred instructions per call;
its machine code is made at LLVM's codegen level 0 (fast instruction selection and
register allocation) after the same O3 pipeline: the conv2d gradient's part 0 took 24
instead of 100 ms to emit. A part with a loop is emitted at level 3.

Threads: llvmlite wraps every call into LLVM in one process-wide lock; LLVM compiles
modules of distinct LLVMContexts concurrently. Each part gets its own context, target
machine and pass builder, made under the lock; the two long calls (the pass pipeline,
object emission) go through llvmlite's underlying ctypes functions, which release the
GIL and take no lock. Where this llvmlite has no such functions, the parts compile one
after the other, locked. `COMPILE_THREADS` (default: the CPUs this process may use)
bounds the threads; 1 compiles on the calling thread.
"""

from __future__ import annotations

import ctypes
import os
from collections.abc import Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import closing
from dataclasses import dataclass
from typing import Any

import llvmlite.binding as llvm
from llvmlite import ir
from llvmlite.binding import ffi

from compiler.diagnostics import InternalError


def _usable_cpus() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


COMPILE_THREADS = _usable_cpus()


@dataclass(frozen=True)
class Objects:
    """Object files of one module's parts (part 0 first) and their optimised IR."""

    parts: tuple[bytes, ...]
    ir_text: str

    @property
    def sizes(self) -> list[int]:
        """The byte size of each part: `code` split back into the parts."""
        return [len(part) for part in self.parts]

    @property
    def code(self) -> bytes:
        """The parts one after the other (what the compile cache stores)."""
        return b"".join(self.parts)


def part_texts(module: ir.Module, outlined: Sequence[ir.Function]) -> list[str]:
    """The LLVM IR of each part of `module` (see the module doc); part 0 first."""
    with closing(_printed(module, outlined)) as printed:
        return [text for _, (text, _) in sorted(printed)]


def _has_loop(fn: ir.Function) -> bool:
    """Whether the control flow graph of `fn` has a cycle (a depth-first search meets
    a block on its own path)."""
    if not fn.blocks:
        return False
    successors = {
        id(b): [
            id(op)
            for op in (b.terminator.operands if b.terminator else ())
            if isinstance(op, ir.Block)
        ]
        for b in fn.blocks
    }
    on_path: set[int] = set()
    done: set[int] = set()
    stack = [(id(fn.blocks[0]), iter(successors[id(fn.blocks[0])]))]
    on_path.add(stack[0][0])
    while stack:
        block, rest = stack[-1]
        nxt = next(rest, None)
        if nxt is None:
            stack.pop()
            on_path.discard(block)
            done.add(block)
        elif nxt in on_path:
            return True
        elif nxt not in done:
            on_path.add(nxt)
            stack.append((nxt, iter(successors[nxt])))
    return False


def _printed(
    module: ir.Module, outlined: Sequence[ir.Function]
) -> Iterator[tuple[int, tuple[str, bool]]]:
    """(number, (LLVM IR, has loops)) of each part, the largest (in instructions) first:
    a part's text is printed by hiding the other parts' bodies, and restored after."""
    for g in module.globals.values():
        if isinstance(g, ir.GlobalVariable) and not (
            g.global_constant or g.name == "llvm.compiler.used"
        ):
            raise InternalError(f"LLVM backend: a module split in parts repeats global {g.name}")
    defined = [g for g in module.globals.values() if isinstance(g, ir.Function) and g.blocks]
    alone = {id(g) for g in outlined}
    parts = [[g for g in defined if id(g) not in alone], *([g] for g in outlined)]
    sizes = [sum(len(b.instructions) for g in part for b in g.blocks) for part in parts]
    for g in outlined:
        g.linkage = ""  # called from part 0
    saved = [(g, g.blocks, g.linkage) for g in defined]
    try:
        for k in sorted(range(len(parts)), key=lambda k: -sizes[k]):
            here = {id(g) for g in parts[k]}
            for g, blocks, linkage in saved:
                g.blocks = blocks if id(g) in here else []
                g.linkage = linkage if id(g) in here else ""  # a declaration has no linkage
            yield k, (str(module), any(_has_loop(g) for g in parts[k]))
    finally:
        for g, blocks, linkage in saved:
            g.blocks, g.linkage = blocks, linkage


class Compiling:
    """The parts of one module on their way to object files (`start_parts`)."""

    def __init__(self, module: ir.Module, outlined: Sequence[ir.Function]) -> None:
        count = 1 + len(outlined)
        threads = min(COMPILE_THREADS, count)
        unlocked = _unlocked() if threads > 1 else None
        self._done: list[tuple[bytes, str]] | None = None
        self._futures: list[tuple[int, Future[tuple[bytes, str]]]] = []
        self._pool: ThreadPoolExecutor | None = None
        with closing(_printed(module, outlined)) as printed:
            if unlocked is None:
                done = sorted((k, _compile(t, loops, None)) for k, (t, loops) in printed)
                self._done = [d for _, d in done]
                return
            self._pool = ThreadPoolExecutor(threads, thread_name_prefix="tcc-llvm")
            try:  # each part starts while the next is printed (the GIL is free in LLVM)
                for k, (text, loops) in printed:
                    job = self._pool.submit(_compile, text, loops, unlocked)
                    self._futures.append((k, job))
            except BaseException:
                self._pool.shutdown(wait=True, cancel_futures=True)
                raise

    def result(self) -> Objects:
        """Wait for every part; their object files and IR (LLVM's errors raised here)."""
        if self._done is None:
            assert self._pool is not None
            try:
                found = sorted((k, f.result()) for k, f in self._futures)
            finally:
                self._pool.shutdown(wait=True, cancel_futures=True)
            self._done = [d for _, d in found]
        return Objects(tuple(d for d, _ in self._done), "\n".join(t for _, t in self._done))


def start_parts(module: ir.Module, outlined: Sequence[ir.Function]) -> Compiling:
    """Print the parts of `module` and start compiling them on threads (see the module
    doc); the caller may work meanwhile, then call `result()`."""
    return Compiling(module, outlined)


def compile_parts(module: ir.Module, outlined: Sequence[ir.Function]) -> Objects:
    """Optimise and compile each part of `module` (see the module doc)."""
    return start_parts(module, outlined).result()


def _unlocked() -> tuple[Any, Any] | None:
    """llvmlite's ctypes functions for running a pass pipeline and emitting an object
    file, without its lock; None if this llvmlite has none."""
    found = []
    for name in ("LLVMPY_RunNewModulePassManager", "LLVMPY_TargetMachineEmitToMemory"):
        fn = getattr(getattr(ffi.lib, name, None), "_cfn", None)
        if fn is None:
            return None
        found.append(fn)
    return found[0], found[1]


def _compile(text: str, loops: bool, unlocked: tuple[Any, Any] | None) -> tuple[bytes, str]:
    """One part's object file and optimised IR; with `unlocked`, the long calls outside
    every lock (the caller runs parts on threads). A part without `loops` gets LLVM's
    fast instruction selection and register allocation (module doc)."""
    from compiler.codegen.llvm import _LLVM_LOCK, _new_target_machine, pass_builder

    with _LLVM_LOCK:
        context = llvm.create_context()
        ref = llvm.parse_assembly(text, context=context)
        ref.verify()
        tm = _new_target_machine(3 if loops else 0)
        pb = pass_builder(tm if loops else _new_target_machine())  # O3 tuned for level 3
        mpm = pb.getModulePassManager()
        if unlocked is None:
            mpm.run(ref, pb)
            optimised = str(ref)  # before emission, whose passes change the module
            return bytes(tm.emit_object(ref)), optimised
    run, emit = unlocked
    run(mpm, ref, pb)
    with _LLVM_LOCK:
        optimised = str(ref)
    with ffi.OutputString() as error:
        buffer = emit(tm, ref, 1, error)
        if not buffer:
            raise InternalError(f"LLVM backend: no object code: {error}")
    with _LLVM_LOCK:
        try:
            start, size = (
                ffi.lib.LLVMPY_GetBufferStart(buffer),
                ffi.lib.LLVMPY_GetBufferSize(buffer),
            )
            return ctypes.string_at(start, size), optimised
        finally:
            ffi.lib.LLVMPY_DisposeMemoryBuffer(buffer)


__all__ = ["COMPILE_THREADS", "Compiling", "Objects", "compile_parts", "part_texts", "start_parts"]
