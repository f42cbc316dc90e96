"""Loop IR -> LLVM IR (through llvmlite's IRBuilder) -> optimised, JIT-compiled code.

Requires: a Function that `compiler.loops.verify` accepts.
Ensures: one LLVM function with the ABI

    void tcc.<name>(ptr buf0, ptr buf1, ..., i64 size0, ..., i64 threads, ptr launch)

buffers in declaration order (`noalias`, dense row-major), then the size parameters,
then the thread count and the address of a launcher `void launch(ptr thunk, ptr data,
i64 n)`: the entry runs the whole body, and each parallel loop is outlined and handed
to `launch` when it has enough work (`cpu.llvm_parallel`; the runtime supplies the
launcher: `cpu.runtime`). Which loops are parallel is decided before, by the CPU
target's pass (`cpu.cpu_parallel`).

Lowering choices: loops are one helper (`_loop`: a header with a phi, a body, a latch);
Local scalars are stack slots in the entry block (mem2reg makes them registers); an
Assign that accumulates into its own Local (`acc = acc + x`, `acc = max(acc, x)`) gets
fast-math flags so the vectoriser may reorder the reduction, and nothing else does;
a Select whose sides read memory branches, so the load not taken never happens;
integer division guards zero and INT_MIN/-1 (Halide's x/0 == 0, never a trap);
booleans are i1 in registers and i8 in memory; Alloc calls calloc/free.
The module gets the host's triple and data layout and is optimised at O3 with loop and
SLP vectorisation by the new pass builder, in parts on threads: each outlined loop body
is compiled to an object file of its own, and one MCJIT engine links the objects
(`cpu.llvm_split`, `compile_objects` / `load_objects`).

Example: `For(i, 0, N, 1, Store(C, (i,), A[i] + 1.0f), parallel)` becomes a function
`tcc.f.i.work(A, C, N, first, last)` whose loop O3 vectorises to `<16 x float>` adds,
called directly for small N and from every thread of the pool for large N.
"""

from __future__ import annotations

import ctypes.util
import threading
from collections.abc import Sequence
from dataclasses import dataclass

import llvmlite.binding as llvm
from llvmlite import ir

from compiler.cpu.llvm_emit import FunctionEmitter, symbol
from compiler.cpu.llvm_math import LIBM_SYMBOLS, load_vector_math
from compiler.cpu.llvm_split import COMPUTE, MOVES, Compiling, Effort, Objects, OnOutlined
from compiler.diagnostics import InternalError
from compiler.loops import (
    Function,
    verify,
)

_LLVM_LOCK = threading.RLock()  # LLVM's global state is not thread-safe
# O3's non-trivial loop unswitching (LLVM's default cost limit: 50) clones whole loop
# nests on the trip-count guards of their inner loops (`W - KW + 1 > 0`), which hold for
# every size that does work: it tripled the code of a convolution's weight gradient
# (its reduction nests, each then vectorised again per clone) for no measured speed
# (tools/bench conv, attention, linear rows). A limit of 1 turns it off; trivial
# unswitching stays. A process-wide LLVM option, set once with the target.
UNSWITCH_THRESHOLD = 1
_TARGET: list[llvm.TargetMachine] = []


def target_machine() -> llvm.TargetMachine:
    """The host's target machine (shared; never hand it to an execution engine)."""
    with _LLVM_LOCK:
        if not _TARGET:
            llvm.initialize_native_target()
            llvm.initialize_native_asmprinter()
            libm = ctypes.util.find_library("m")
            if libm:
                llvm.load_library_permanently(libm)
            _check_libm()
            load_vector_math()  # libmvec's variants, bound before any code (cached too) loads
            llvm.set_option("tcc", f"-unswitch-threshold={UNSWITCH_THRESHOLD}")
            _TARGET.append(_new_target_machine())
        return _TARGET[0]


def _new_target_machine(opt: int = 3) -> llvm.TargetMachine:
    """The host's target machine, its code generation at level `opt` (0-3)."""
    return llvm.Target.from_default_triple().create_target_machine(
        cpu=llvm.get_host_cpu_name(),
        features=llvm.get_host_cpu_features().flatten(),
        opt=opt,
        jit=True,
    )


def _check_libm() -> None:
    missing = [s for s in LIBM_SYMBOLS if not llvm.address_of_symbol(s)]
    for name in missing:  # not exported by the process: take it from libm via ctypes
        try:
            address = ctypes.cast(
                getattr(ctypes.CDLL(ctypes.util.find_library("m")), name), ctypes.c_void_p
            )
        except (AttributeError, OSError):
            continue
        llvm.add_symbol(name, address.value)


def build_module(f: Function) -> ir.Module:
    """The unoptimised llvmlite module holding `f` (verified first)."""
    return _build(f)[0]


def _build(
    f: Function, on_outlined: OnOutlined | None = None
) -> tuple[ir.Module, list[ir.Function]]:
    """`build_module(f)` and its outlined loop bodies (`cpu.llvm_split`); each body
    is handed to `on_outlined` as soon as its code is complete."""
    module, emitter = _emit(f, on_outlined)
    return module, emitter.outlined


def _emit(f: Function, on_outlined: OnOutlined | None) -> tuple[ir.Module, FunctionEmitter]:
    verify(f)
    module = ir.Module(name=f.name)
    tm = target_machine()
    module.triple = tm.triple
    module.data_layout = str(tm.target_data)
    emitter = FunctionEmitter(module, f)
    emitter.on_outlined = on_outlined
    emitter.emit()
    _objects_entry(module, f, emitter.fn)
    return module, emitter


def objects_symbol(f: Function) -> str:
    """The name of `f`'s second entry, which takes NumPy arrays (see `_objects_entry`)."""
    return f"{symbol(f)}.objects"


def _objects_entry(module: ir.Module, f: Function, entry: ir.Function) -> None:
    """`void tcc.<name>.objects(ptr array0, ..., i64 size0, ..., i64 threads, ptr launch,
    i64 offset)`: the entry called with the buffers' PyArrayObject pointers, each data
    pointer read at `offset` bytes (NumPy's `PyArray_DATA`; the runtime measures the
    offset once and passes 0 when it cannot, never calling this entry then). It saves
    the runtime the per-call `ndarray.ctypes.data` lookups."""
    ty = ir.FunctionType(ir.VoidType(), [*entry.function_type.args, ir.IntType(64)])
    fn = ir.Function(module, ty, name=objects_symbol(f))
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    nbuf = len(f.buffers)
    offset = fn.args[-1]
    data = [
        b.load(b.gep(arg, [offset], inbounds=True, source_etype=ir.IntType(8)), typ=arg.type)
        for arg in fn.args[:nbuf]
    ]
    b.call(entry, [*data, *fn.args[nbuf:-1]])
    b.ret_void()
    entry.attributes.add("noinline")  # one copy of the kernel's code, not two


def pass_builder(tm: llvm.TargetMachine, effort: Effort = COMPUTE) -> llvm.PassBuilder:
    """For `tm`, by a part's `effort` (`cpu.llvm_split`): O3 with loop and SLP
    vectorisation, unrolling and interleaving for loops that compute; O1 without them
    for loops that only move data (copies, transposes, fills: a transpose's part took
    45 ms at O3 and 20 at O1, and the kernels ran as fast); the O0 pipeline
    for straight-line code, which runs once a call and gains nothing from optimising
    (O1 took 23 ms to do it)."""
    loops = effort == COMPUTE
    with _LLVM_LOCK:
        level = 3 if loops else 1 if effort == MOVES else 0
        pto = llvm.create_pipeline_tuning_options(speed_level=level)
        pto.loop_vectorization = loops
        pto.slp_vectorization = loops
        pto.loop_unrolling = loops
        pto.loop_interleaving = loops
        return llvm.create_pass_builder(tm, pto)


def emit_llvm(f: Function, *, optimised: bool = True) -> str:
    """The LLVM IR text of `f`, optimised unless asked otherwise: what runs, the parts of
    `cpu.llvm_split` one after the other."""
    if optimised:
        return compile_objects(f).ir_text
    return str(build_module(f))


def compile_objects(f: Function) -> Objects:
    """The object files of `f`'s parts, compiled on threads (`cpu.llvm_split`)."""
    return start_objects(f).result()


def start_objects(f: Function) -> Compiling:
    """`compile_objects(f)` started: its `result()` waits for the threads. Each outlined
    loop body starts compiling as soon as it is built, while the next is built."""
    target_machine()
    compiling = Compiling()
    try:
        module, emitter = _emit(f, compiling.add)
        # the entry's loops that only launch outlined bodies need no O3 (llvm_split)
        return compiling.finish(module, emitter.outlined, emitter.compute_loops > 0)
    except BaseException:
        compiling.cancel()
        raise


@dataclass(frozen=True)
class JitCode:
    """Machine code for one Function: keep `engine` alive while `address` is called."""

    engine: llvm.ExecutionEngine
    address: int
    symbol: str
    ir_text: str  # the optimised LLVM IR it was compiled from


def load_objects(f: Function, parts: Sequence[bytes], ir_text: str) -> JitCode:
    """`f`'s code from its object files (one MCJIT engine of their own); a RuntimeError
    from LLVM for bytes that are no object file."""
    with _LLVM_LOCK:
        target_machine()  # initialises LLVM and the math symbols once
        # The engine takes ownership of (and frees) its target machine: give it its own.
        engine = llvm.create_mcjit_compiler(llvm.parse_assembly(""), _new_target_machine())
        for data in parts:
            engine.add_object_file(llvm.ObjectFileRef.from_data(data))
        engine.finalize_object()
        address = engine.get_function_address(symbol(f))
    if not address:
        raise InternalError(f"LLVM backend: no code for {f.name}")
    return JitCode(engine, address, symbol(f), ir_text)


def jit(f: Function) -> JitCode:
    """Compile `f` to machine code in this process."""
    objects = compile_objects(f)
    return load_objects(f, objects.parts, objects.ir_text)


def compile_function(f: Function) -> object:
    """`compiler.cpu.runtime.compile_function`: a callable on NumPy arrays."""
    from compiler.cpu.runtime import compile_function as compile_

    return compile_(f)
