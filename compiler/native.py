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
import dataclasses
import json
import logging
import os
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from compiler import pipeline
from compiler.codegen.cache import (
    CacheFormatError,
    CompileCache,
    cache_key,
    compile_to_object,
    environment_key,
    function_from_json,
    load_object,
)
from compiler.codegen.runtime import (
    INT64_MAX,
    INT64_MIN,
    CompiledFunction,
    compile_function,
    run_chunks,
)
from compiler.frontend.ast import Access
from compiler.frontend.checked import RangedDef
from compiler.frontend.diagnostics import InternalError, ShapeError
from compiler.frontend.printer import print_def, print_expr
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
from compiler.poly.astgen import ERROR_BUFFER, Lowered
from compiler.poly.lower_expr import ReadCheck

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
        if check.write:  # the wording of compiler.interp's data-dependent scatter
            return ShapeError(
                f"write out of range: index {value} for dimension {check.dim} of "
                f"'{check.access.name}' (size {extent})",
                check.access.span,
                hint="the output is too small for the statement's domain; check the where "
                "clauses, or the shape of the output passed with out=",
            )
        return ShapeError(
            f"index {value} out of range for dimension {check.dim} of '{check.access.name}' "
            f"(size {extent}) in the read {check.access.name}(...)",
            check.access.span,
            hint="an index read from a tensor must lie in [0, size); check the index tensor's "
            "values, or guard the read with a ternary",
        )


def compile_native(
    ranged: RangedDef, options: Options | None = None, *, cache: CompileCache | None = None
) -> NativeProgram:
    """Lower `ranged` and JIT-compile it (see the module doc); with a `cache`
    (`compiler.codegen.cache`), reuse the code compiled for an equal def."""
    options = options or Options()
    if cache is not None:
        return _cached_program(ranged, options, cache)
    return compile_lowered(pipeline.lower(ranged, options), options)


def compile_lowered(lowered: Lowered, options: Options) -> NativeProgram:
    """JIT-compile lowered loops (the pipeline's `codegen` pass for the CPU)."""
    f, phases = _phased(lowered.function)
    return NativeProgram(lowered, f, phases, compile_function(f), options)


def _phased(f: Function) -> tuple[Function, tuple[Stmt, ...]]:
    """`f` with one PHASE guard per top-level nest (when there are several), and the nests."""
    phases = f.body.stmts if isinstance(f.body, Block) else (f.body,)
    if len(phases) > 1:
        guarded = tuple(
            If(Bin(BinOp.EQ, VarRef(PHASE), Const(p, DType.INT64)), s) for p, s in enumerate(phases)
        )
        f = Function(f.name, f.buffers, (*f.size_params, PHASE), Block(guarded))
    return f, tuple(phases)


# ------------------------------------------------------------ the compile cache
# An entry holds the phased Function, its code, and the run-time checks as
# (number of the Access in a walk of the ranged def, dimension): spans come from the
# def at hand, so sources that differ only in layout share the entry.


@dataclass(frozen=True)
class _Cached:
    function: Function
    compiled: CompiledFunction
    checks: tuple[tuple[int, int, bool], ...]  # (Access number, dimension, write)
    notes: tuple[str, ...] = ()


def program_key(ranged: RangedDef, options: Options) -> dict[str, str]:
    """Everything that decides the code of `ranged` (see `compiler.codegen.cache`)."""
    from compiler import __version__

    checked = ranged.checked
    bounds = [
        [n, [[print_expr(b.lo), print_expr(b.hi)] for b in bs]] for n, bs in ranged.output_bounds
    ]
    opts = {f.name: repr(getattr(options, f.name)) for f in dataclasses.fields(options)}
    return {
        "source": print_def(checked.definition),
        "entry": ranged.name,
        "dtypes": json.dumps([[t.name, t.dtype.value] for t in checked.tensors]),
        "output_bounds": json.dumps(bounds),
        "target": "llvm",
        "options": json.dumps(opts, sort_keys=True),
        "tcc": __version__,
        **environment_key(),
    }


def _cached_program(ranged: RangedDef, options: Options, cache: CompileCache) -> NativeProgram:
    key = cache_key(program_key(ranged, options))
    with cache.lock(key):
        entry = cache.get(key)
        if not isinstance(entry, _Cached):
            entry = _load(cache, key) or _build(ranged, options, cache, key)
            if entry is None:  # a check that cannot be named by position: no caching
                return compile_native(ranged, options)
            cache.put(key, entry)
    accesses = _accesses(ranged.checked.definition)
    if any(not 0 <= i < len(accesses) for i, _, _ in entry.checks):
        return compile_native(ranged, options)
    checks = tuple(ReadCheck(accesses[i], dim, write) for i, dim, write in entry.checks)
    f = entry.function
    unphased = f
    if PHASE in f.size_params:
        phases = tuple(s.then for s in f.body.stmts)  # type: ignore[attr-defined]
        unphased = Function(f.name, f.buffers, f.size_params[:-1], Block(phases))
    _, phases = _phased(unphased)
    lowered = Lowered(unphased, checks)
    if entry.notes:
        lowered = dataclasses.replace(lowered, notes=entry.notes)
    return NativeProgram(lowered, f, phases, entry.compiled, options)


def _build(ranged: RangedDef, options: Options, cache: CompileCache, key: str) -> _Cached | None:
    lowered = pipeline.lower(ranged, options)
    accesses = _accesses(ranged.checked.definition)
    checks = []
    for check in lowered.checks:  # the read itself, else the one at its span, else an equal one
        found = [i for i, a in enumerate(accesses) if a is check.access]
        found = found or [i for i, a in enumerate(accesses) if a.span == check.access.span]
        found = found or [i for i, a in enumerate(accesses) if a == check.access]
        if not found:
            return None
        checks.append((found[0], check.dim, check.write))
    notes = tuple(getattr(lowered, "notes", ()))
    f, _ = _phased(lowered.function)
    compiled, stored = compile_to_object(f)
    metadata = {**stored.metadata, "checks": checks, "notes": list(notes)}
    cache.write(key, dataclasses.replace(stored, metadata=metadata))
    return _Cached(f, compiled, tuple(checks), notes)


def _load(cache: CompileCache, key: str) -> _Cached | None:
    stored = cache.read(key)
    if stored is None:
        return None
    try:
        f = function_from_json(stored.metadata["function"])
        checks = tuple(_check_entry(c) for c in stored.metadata["checks"])
        notes = tuple(str(n) for n in stored.metadata.get("notes", ()))
        compiled = load_object(f, stored.object_code, stored.ir_text)
    except (CacheFormatError, InternalError, KeyError, TypeError, ValueError, RuntimeError) as err:
        logging.getLogger("compiler.cache").debug("compile cache: entry %s unusable: %s", key, err)
        return None
    return _Cached(f, compiled, checks, notes)


def _check_entry(stored: list) -> tuple[int, int, bool]:
    """(Access number, dimension, write) from the cache's JSON (older entries: no write)."""
    i, dim, *write = stored
    return int(i), int(dim), bool(write and write[0])


def _accesses(node: object) -> list[Access]:
    """Every Access in `node`, in a fixed walk order (equal defs give equal lists)."""
    found: list[Access] = []
    stack = [node]
    while stack:
        item = stack.pop()
        if isinstance(item, Access):
            found.append(item)
        if isinstance(item, tuple):
            stack.extend(reversed(item))
        elif dataclasses.is_dataclass(item) and not isinstance(item, type):
            fields = [getattr(item, f.name) for f in dataclasses.fields(item) if f.name != "span"]
            stack.extend(reversed(fields))
    return found


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


__all__ = ["PHASE", "NativeProgram", "compile_native", "program_key"]
