"""Running a ranged def on the CPU target: lower, compile once, one native call per run.

    program = compile_native(ranged, options)     # lower + CPU pass + JIT (one entry)
    program.run(inputs, sizes, outputs)           # outputs: fresh arrays, written in place

The lowered Function goes through the CPU target's passes (`compiler.codegen.target`,
`codegen.cpu_parallel`) and becomes one native entry that runs every statement in
order; each statement's outermost parallel loop runs on the native thread pool of
`compiler.codegen.runtime` (libgomp, or the Python fallback) when it has enough work.
`run` makes one ctypes call.

Reads that `poly.schedule` could not prove in bounds report into a small error
buffer (`poly.astgen.ERROR_BUFFER`); after the run a record there becomes the same
ShapeError the reference evaluator raises, naming the tensor, dimension and index.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import weakref
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

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
    CompiledFunction,
    compile_function,
    default_pool,
    keep,
    thread_count,
)
from compiler.codegen.target import get_target, prepare
from compiler.diagnostics import InternalError, ShapeError
from compiler.frontend.ast import Access
from compiler.frontend.checked import RangedDef
from compiler.frontend.printer import print_def, print_expr
from compiler.loops import Function, check_arguments
from compiler.options import Options
from compiler.poly.astgen import ERROR_BUFFER, Lowered
from compiler.poly.lower_expr import ReadCheck

TARGET = "llvm"


@dataclass(frozen=True)
class NativeProgram:
    lowered: Lowered
    function: Function  # what is compiled: the lowered Function after the CPU passes
    compiled: CompiledFunction
    options: Options

    @property
    def threads(self) -> int:
        """The thread count of every call: Options.threads, else one per core."""
        return thread_count(self.options.threads)

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
        env = check_arguments(self.function, arrays, sizes)
        pointers = [arrays[b.name].ctypes.data for b in self.function.buffers]
        self.compiled.call(pointers, [env[n] for n in self.function.size_params], self.threads)
        if error is not None and error[0]:
            raise self.read_error(error, arrays)

    def read_error(self, error: np.ndarray, arrays: Mapping[str, np.ndarray]) -> ShapeError:
        """The ShapeError for the record in the error buffer `error`."""
        return check_failure(self.lowered.checks, error, {n: a.shape for n, a in arrays.items()})

    def info(self) -> dict[str, Any]:
        """How this program runs: target, thread pool, threads, parallel regions."""
        from compiler.codegen.cpu_parallel import parallel_loops

        return {
            "target": TARGET,
            "runtime": default_pool(),
            "threads": self.threads,
            "parallel_loops": len(parallel_loops(self.function)),
            "native_calls_per_run": 1,
            "notes": list(getattr(self.lowered, "notes", ())),
        }


def check_failure(
    checks: Sequence[Any], record: Any, shapes: Mapping[str, tuple[int, ...]]
) -> ShapeError:
    """The ShapeError for an error-buffer record `(check number + 1, value)` of a
    lowered def's `checks`, given the buffers' shapes by name (every target's wording)."""
    check = checks[int(record[0]) - 1]
    value = int(record[1])
    extent = shapes[check.access.name][check.dim]
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
    f = prepare(get_target(TARGET), lowered.function, options)
    return NativeProgram(lowered, f, compile_function(f), options)


# ------------------------------------------------------------ the compile cache
# An entry holds the compiled Function (after the CPU passes), a weak reference to its
# code, and the run-time checks as (number of the Access in a walk of the ranged def,
# dimension): spans come from the def at hand, so sources that differ only in layout
# share the entry. The code (and its JIT engine) lives while a program uses it or the
# runtime's bounded table of recent code (`runtime.keep`) holds it; after that a define
# reloads it from disk (or compiles it again, for an in-memory cache).


@dataclass(frozen=True)
class _Cached:
    function: Function
    code: weakref.ref[CompiledFunction]
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
        "target": TARGET,
        "options": json.dumps(opts, sort_keys=True),
        "tcc": __version__,
        **environment_key(),
    }


def _cached_program(ranged: RangedDef, options: Options, cache: CompileCache) -> NativeProgram:
    key = cache_key(program_key(ranged, options))
    with cache.lock(key):
        entry = cache.get(key)
        compiled = entry.code() if isinstance(entry, _Cached) else None
        if compiled is None or not isinstance(entry, _Cached):
            found = _load(cache, key) or _build(ranged, options, cache, key)
            if found is None:  # a check that cannot be named by position: no caching
                return compile_native(ranged, options)
            entry, compiled = found
            cache.put(key, entry)
        keep(key, compiled)
    accesses = _accesses(ranged.checked.definition)
    if any(not 0 <= i < len(accesses) for i, _, _ in entry.checks):
        return compile_native(ranged, options)
    checks = tuple(ReadCheck(accesses[i], dim, write) for i, dim, write in entry.checks)
    lowered = Lowered(entry.function, checks)
    if entry.notes:
        lowered = dataclasses.replace(lowered, notes=entry.notes)
    return NativeProgram(lowered, entry.function, compiled, options)


def _build(
    ranged: RangedDef, options: Options, cache: CompileCache, key: str
) -> tuple[_Cached, CompiledFunction] | None:
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
    f = prepare(get_target(TARGET), lowered.function, options)
    compiled, stored = compile_to_object(f)
    metadata = {**stored.metadata, "checks": checks, "notes": list(notes)}
    cache.write(key, dataclasses.replace(stored, metadata=metadata))
    return _Cached(f, weakref.ref(compiled), tuple(checks), notes), compiled


def _load(cache: CompileCache, key: str) -> tuple[_Cached, CompiledFunction] | None:
    stored = cache.read(key)
    if stored is None:
        return None
    try:
        f = function_from_json(stored.metadata["function"])
        checks = tuple(_check_entry(c) for c in stored.metadata["checks"])
        notes = tuple(str(n) for n in stored.metadata.get("notes", ()))
        sizes = stored.metadata["objects"]
        if not isinstance(sizes, list):
            raise CacheFormatError("object sizes are not a list")
        compiled = load_object(f, stored.object_code, stored.ir_text, sizes)
    except (CacheFormatError, InternalError, KeyError, TypeError, ValueError, RuntimeError) as err:
        logging.getLogger("compiler.cache").debug("compile cache: entry %s unusable: %s", key, err)
        return None
    return _Cached(f, weakref.ref(compiled), checks, notes), compiled


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


__all__ = ["NativeProgram", "compile_native", "program_key"]
