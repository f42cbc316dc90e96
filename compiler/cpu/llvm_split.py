"""One module compiled as several parts, the parts on threads at once.

Requires: an llvmlite module being built by `cpu.llvm`, and its outlined loop bodies
(the `work` functions of `cpu.llvm_parallel`, `FunctionEmitter.outlined`).
Ensures: `Compiling`: `add(module, fn)` starts a work function's part as soon as the
emitter has built it (`FunctionEmitter.on_outlined`), `finish(module, outlined)` starts
part 0 of the complete module, `result() -> Objects`: one object file per part, which
one MCJIT engine links into the program the whole module is (`cpu.llvm.load_objects`),
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
metadata and its `llvm.compiler.used` list are repeated (only the references matter);
a work function's part is printed before that list exists, so it gets one of its own
naming the vector math variants declared so far. A part would repeat a global variable
too, so one that is not a constant is refused. Each work function starts compiling
while the emitter builds the rest, which took 0.2 to 0.3 s of a conv2d gradient's
cold compile before its first part could start.

A part without loops (part 0 where every loop is outlined: the entry's size checks, grain
estimates and thread records, and the thunks) runs a few hundred instructions per call;
its machine code is made at LLVM's codegen level 0 (fast instruction selection and
register allocation) after the O0 pipeline: the conv2d gradient's part 0 took 24 instead
of 100 ms to emit, and 1.5 ms to optimise where O1 took 23 (O3 86). It is the last part
to start, after the emitter is done, so its time is all on a cold compile's critical
path; the calls it slows by running unoptimised stayed within 0.1 us (4.7 us calls of
a 4-element add, 9.5 us of a 2x4 softmax). A part with a loop is optimised at O3 and
emitted at level 3, unless its loops only launch outlined bodies (the entry's serial
loop over a packed matmul's blocks: `FunctionEmitter.compute_loops` is 0); the matmul
gradient's part 0 took 248 ms at O3 and level 3. A part whose loops only move data
(`llvm_parallel.moves_only`: copies, transposes, zero fills) is optimised at O1 without
vectorisation (`MOVES`): the conv2d gradient's two transposes took 45 and 43 ms at O3,
20 and 18 at O1, and the kernels ran as fast (tools/bench conv rows, fwd+bwd, same
process, new / old 0.96-1.02).

Threads: llvmlite wraps every call into LLVM in one process-wide lock; LLVM compiles
modules of distinct LLVMContexts concurrently. Each part gets its own context, target
machine and pass builder, made under the lock; the two long calls (the pass pipeline,
object emission) go through llvmlite's underlying ctypes functions, which release the
GIL and take no lock. Where this llvmlite has no such functions, the parts compile one
after the other, locked. `COMPILE_THREADS` (default: the CPUs this process may use)
bounds the threads; 1 compiles on the calling thread.

The GIL: a part's compile makes dozens of short calls into LLVM around its two long
ones, and each takes the GIL back afterwards. While the calling thread runs Python
(building the next body), each such take waited for the interpreter's switch interval
(5 ms by default): a part took 2.5 times as long beside a busy Python thread (80 ->
210 ms, part 0 of the conv2d gradient). While parts compile on threads the switch
interval is at most `HANDOFF_SECONDS` (0.5 ms: 90 ms beside the busy thread), and what
it was is restored when the last compile ends.
"""

from __future__ import annotations

import ctypes
import os
import sys
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Literal

import llvmlite.binding as llvm
from llvmlite import ir
from llvmlite.binding import ffi

from compiler.cpu.llvm_math import vector_variants
from compiler.diagnostics import InternalError


def _usable_cpus() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


COMPILE_THREADS = _usable_cpus()
# How much LLVM does for a part (module doc): loops that compute (O3, vectorised),
# loops that only move data (O1), no loops (O0, fast instruction selection).
Effort = Literal["compute", "moves", "straight"]
COMPUTE: Effort = "compute"
MOVES: Effort = "moves"
STRAIGHT: Effort = "straight"
# What an emitter calls with each outlined body once built (`Compiling.add`): the
# module, the body, and whether its loops only move data (`llvm_parallel.moves_only`).
OnOutlined = Callable[[ir.Module, ir.Function, bool], None]
# The interpreter's switch interval while parts compile on threads (module doc).
HANDOFF_SECONDS = 0.0005


class _Handoff:
    """While any `Compiling` has threads: the switch interval at most `HANDOFF_SECONDS`
    (counted, so concurrent compiles nest; the interval before is restored after)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._active = 0
        self._saved = 0.0

    def enter(self) -> None:
        with self._lock:
            if self._active == 0:
                self._saved = sys.getswitchinterval()
                sys.setswitchinterval(min(self._saved, HANDOFF_SECONDS))
            self._active += 1

    def exit(self) -> None:
        with self._lock:
            self._active -= 1
            if self._active == 0:
                sys.setswitchinterval(self._saved)


_HANDOFF = _Handoff()


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


def _check_globals(module: ir.Module) -> None:
    for g in module.globals.values():
        if isinstance(g, ir.GlobalVariable) and not (
            g.global_constant or g.name == "llvm.compiler.used"
        ):
            raise InternalError(f"LLVM backend: a module split in parts repeats global {g.name}")


def _part_text(module: ir.Module, part: Sequence[ir.Function]) -> str:
    """The LLVM IR of `module` with only the functions of `part` defined: the others'
    bodies are hidden while it is printed, and restored after. A module still being
    built has no `llvm.compiler.used` yet: the vector math variants declared so far are
    kept alive by one written for the part (`MathEmitter.finish` writes the module's)."""
    here = {id(g) for g in part}
    saved = [
        (g, g.blocks, g.linkage)
        for g in module.globals.values()
        if isinstance(g, ir.Function) and g.blocks and id(g) not in here
    ]
    try:
        for g, _, _ in saved:
            g.blocks, g.linkage = [], ""  # a declaration has no linkage
        text = str(module)
    finally:
        for g, blocks, linkage in saved:
            g.blocks, g.linkage = blocks, linkage
    if "llvm.compiler.used" not in module.globals:
        kept = vector_variants(module)
        if kept:
            refs = ", ".join(f"ptr {fn.get_reference()}" for fn in kept)
            text += (
                f"\n@llvm.compiler.used = appending global [{len(kept)} x ptr] [{refs}], "
                'section "llvm.metadata"\n'
            )
    return text


def _rest(module: ir.Module, outlined: Sequence[ir.Function]) -> list[ir.Function]:
    """Part 0: every function `module` defines that is not an outlined loop body."""
    alone = {id(g) for g in outlined}
    return [
        g
        for g in module.globals.values()
        if isinstance(g, ir.Function) and g.blocks and id(g) not in alone
    ]


def part_texts(module: ir.Module, outlined: Sequence[ir.Function]) -> list[str]:
    """The LLVM IR of each part of a built `module` (see the module doc); part 0 first."""
    _check_globals(module)
    for g in outlined:
        g.linkage = ""  # called from part 0
    return [
        _part_text(module, part) for part in [_rest(module, outlined), *([g] for g in outlined)]
    ]


class Compiling:
    """The parts of one module on their way to object files: each outlined loop body is
    printed and started as soon as it is built (`add`, while the emitter builds the
    next), part 0 when the module is complete (`finish`); `result()` waits for all."""

    def __init__(self) -> None:
        self._unlocked = _unlocked() if COMPILE_THREADS > 1 else None
        self._jobs: list[Future[tuple[bytes, str]]] = []  # the bodies, then part 0
        self._pool: ThreadPoolExecutor | None = None
        self._finished = False
        self._handoff = False

    def _start(self, text: str, effort: Effort) -> None:
        if self._unlocked is None:  # here and now, locked
            job: Future[tuple[bytes, str]] = Future()
            job.set_result(_compile(text, effort, None))
        else:
            if self._pool is None:
                self._pool = ThreadPoolExecutor(COMPILE_THREADS, thread_name_prefix="tcc-llvm")
                _HANDOFF.enter()
                self._handoff = True
            job = self._pool.submit(_compile, text, effort, self._unlocked)
        self._jobs.append(job)

    def add(self, module: ir.Module, fn: ir.Function, moves: bool = False) -> None:
        """Start compiling the part of `fn`, an outlined loop body whose code is complete
        (called from the module's emitter: `FunctionEmitter.on_outlined`); `moves`:
        its loops only move data (`MOVES`)."""
        fn.linkage = ""  # called from part 0
        effort = (MOVES if moves else COMPUTE) if _has_loop(fn) else STRAIGHT
        self._start(_part_text(module, [fn]), effort)

    def finish(
        self, module: ir.Module, outlined: Sequence[ir.Function], loops: bool | None = None
    ) -> Compiling:
        """Start part 0 of the complete `module`, once every outlined body was added;
        `loops`: whether it has loops that compute (None: any loop counts)."""
        if len(outlined) != len(self._jobs):
            raise InternalError("LLVM backend: an outlined loop body was not compiled")
        _check_globals(module)
        rest = _rest(module, outlined)
        if loops is None:
            loops = any(_has_loop(g) for g in rest)
        self._start(_part_text(module, rest), COMPUTE if loops else STRAIGHT)
        self._finished = True
        return self

    def cancel(self) -> None:
        """Drop the parts started (the module could not be built)."""
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
        if self._handoff:
            self._handoff = False
            _HANDOFF.exit()

    def result(self) -> Objects:
        """Wait for every part; their object files and IR (LLVM's errors raised here)."""
        if not self._finished:
            raise InternalError("LLVM backend: result() of parts before finish()")
        try:
            done = [job.result() for job in [self._jobs[-1], *self._jobs[:-1]]]
        finally:
            self.cancel()
        return Objects(tuple(d for d, _ in done), "\n".join(t for _, t in done))


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


def _compile(text: str, effort: Effort, unlocked: tuple[Any, Any] | None) -> tuple[bytes, str]:
    """One part's object file and optimised IR; with `unlocked`, the long calls outside
    every lock (the caller runs parts on threads). A `STRAIGHT` part gets LLVM's fast
    instruction selection and register allocation (module doc)."""
    from compiler.cpu.llvm import _LLVM_LOCK, _new_target_machine, pass_builder

    with _LLVM_LOCK:
        context = llvm.create_context()
        ref = llvm.parse_assembly(text, context=context)
        ref.verify()
        tm = _new_target_machine(0 if effort == STRAIGHT else 3)
        # the pipeline tuned for level 3, the O0 one for straight-line code (module doc)
        pb = pass_builder(tm if effort != STRAIGHT else _new_target_machine(), effort)
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


__all__ = [
    "COMPILE_THREADS",
    "COMPUTE",
    "MOVES",
    "STRAIGHT",
    "Compiling",
    "Effort",
    "Objects",
    "part_texts",
]
