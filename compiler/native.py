"""Running a ranged def on the LLVM target: lower, compile once, call per statement.

    program = compile_native(ranged, options)     # lower + JIT (one LLVM function)
    program.run(inputs, sizes, outputs)           # outputs: fresh arrays, written in place

Statements must run one after the other, but each one's outermost parallel loop may
be split across threads. So the lowered Function's top-level nests become *phases*:
the compiled function takes one more size argument, `PHASE`, and runs only the nest
whose number it is given (`if (tcc.phase == p) nest_p`). `run` calls phase after phase;
within a phase the chunks of its top-level parallel loops run on the thread pool of
`compiler.codegen.runtime` (the first chunk starts at -inf and the last ends at +inf,
so sibling loops that isl split off are covered too). A def with one nest has no phase
argument.

Reads that `poly.schedule` could not prove in bounds report into a small error
buffer (`poly.astgen.ERROR_BUFFER`); after the run a record there becomes the same
ShapeError the reference evaluator raises, naming the tensor, dimension and index.
"""

from __future__ import annotations

import ctypes
import os
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from compiler.codegen.runtime import (
    INT64_MAX,
    INT64_MIN,
    CompiledFunction,
    compile_function,
    run_chunks,
)
from compiler.frontend.checked import RangedDef
from compiler.frontend.diagnostics import ShapeError
from compiler.loops import (
    Bin,
    BinOp,
    Block,
    Const,
    DType,
    For,
    Function,
    If,
    Stmt,
    VarRef,
    check_arguments,
    chunk_loops,
    eval_size_expr,
)
from compiler.options import Options
from compiler.poly.astgen import ERROR_BUFFER, Lowered, lower_native

PHASE = "tcc.phase"


@dataclass(frozen=True)
class NativeProgram:
    lowered: Lowered
    function: Function  # what is compiled: the lowered Function, phased
    phases: tuple[Stmt, ...]
    compiled: CompiledFunction
    options: Options

    def run(
        self,
        inputs: Mapping[str, np.ndarray],
        sizes: Mapping[str, int],
        outputs: Mapping[str, np.ndarray],
    ) -> None:
        """Run on `inputs`, writing `outputs` in place (arrays of the output shapes)."""
        arrays = {**inputs, **outputs}
        error = None
        if self.lowered.checks:
            error = arrays[ERROR_BUFFER] = np.zeros(2, dtype=np.int64)
        all_sizes = dict(sizes)
        if len(self.phases) > 1:
            all_sizes[PHASE] = 0
        env = check_arguments(self.function, arrays, all_sizes)
        pointers = [arrays[b.name].ctypes.data for b in self.function.buffers]
        cfunc = _cfunc(self.compiled)
        threads = self.options.threads or os.cpu_count() or 1
        for p, phase in enumerate(self.phases):
            if len(self.phases) > 1:
                env[PHASE] = p
            size_args = [env[n] for n in self.function.size_params]

            def call(lo: int, hi: int, size_args: list[int] = size_args) -> None:
                cfunc(*pointers, *size_args, lo, hi)

            run_chunks(call, _chunks(phase, self.function, env, threads))
            if error is not None and error[0]:
                break
        if error is not None and error[0]:
            raise self._read_error(int(error[0]) - 1, int(error[1]), arrays)

    def _read_error(
        self, check_id: int, value: int, arrays: Mapping[str, np.ndarray]
    ) -> ShapeError:
        check = self.lowered.checks[check_id]
        extent = arrays[check.access.name].shape[check.dim]
        return ShapeError(
            f"index {value} out of range for dimension {check.dim} of '{check.access.name}' "
            f"(size {extent}) in the read {check.access.name}(...)",
            check.access.span,
            hint="an index read from a tensor must lie in [0, size); check the index tensor's "
            "values, or guard the read with a ternary",
        )


def compile_native(ranged: RangedDef, options: Options | None = None) -> NativeProgram:
    """Lower `ranged` (scatters as gathers first: `poly.astgen.lower_native`) and
    JIT-compile it (see the module doc)."""
    options = options or Options()
    lowered = lower_native(ranged, options)
    f = lowered.function
    phases = f.body.stmts if isinstance(f.body, Block) else (f.body,)
    if len(phases) > 1:
        guarded = tuple(
            If(Bin(BinOp.EQ, VarRef(PHASE), Const(p, DType.INT64)), s) for p, s in enumerate(phases)
        )
        f = Function(f.name, f.buffers, (*f.size_params, PHASE), Block(guarded))
    return NativeProgram(lowered, f, tuple(phases), compile_function(f), options)


def _cfunc(compiled: CompiledFunction) -> ctypes._CFuncPtr:
    f = compiled.function
    nargs = len(f.buffers) + len(f.size_params) + 2
    argtypes = [ctypes.c_void_p] * len(f.buffers) + [ctypes.c_int64] * (nargs - len(f.buffers))
    return ctypes.CFUNCTYPE(None, *argtypes)(compiled.code.address)


def _chunks(
    phase: Stmt, f: Function, env: Mapping[str, int], threads: int
) -> list[tuple[int, int]]:
    """[lo, hi) pieces of the phase's top-level parallel loops, one per thread."""
    whole = [(INT64_MIN, INT64_MAX)]
    loops = chunk_loops(Function(f.name, f.buffers, f.size_params, phase))
    if threads <= 1 or not loops:
        return whole
    loop: For = loops[0]
    try:
        lo, hi = eval_size_expr(loop.lo, env), eval_size_expr(loop.hi, env)
    except Exception:  # bounds that read outer names: no split  # noqa: BLE001
        return whole
    trips = max(0, -(-(hi - lo) // loop.step))
    parts = max(1, min(threads, trips))
    if parts <= 1:
        return whole
    bounds = [lo + (trips * k // parts) * loop.step for k in range(parts + 1)]
    bounds[0], bounds[-1] = INT64_MIN, INT64_MAX
    return list(zip(bounds[:-1], bounds[1:], strict=True))


__all__ = ["PHASE", "NativeProgram", "compile_native"]
