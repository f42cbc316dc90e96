"""Running a ranged def on the CPU target: lower, compile once, one native call per run.

    program = compile_native(ranged, options)     # lower + CPU pass + JIT (one entry)
    program.run(inputs, sizes, outputs)           # outputs: fresh arrays, written in place

The lowered Function goes through the CPU target's passes (`compiler.codegen.target`,
`cpu.cpu_parallel`) and becomes one native entry that runs every statement in
order; each statement's outermost parallel loop runs on the native thread pool of
`compiler.cpu.runtime` (libgomp, or the Python fallback) when it has enough work.
`run` makes one ctypes call.

Code the sizes decide. Where the sizes alone decide what runs (the lowering's
versions of a statement -- padded or clamped gathers, loop orders for L1-aliasing
strides --, a register tile's fallback for narrow rows, a tile's remainder loop:
the choice points of `loops.versions`), a `Kernel`'s program compiles nothing at
define time: its first call compiles the Function restricted to the branches its
sizes take, and a later call whose sizes take a branch not compiled compiles every
branch (`ProgramCode`: at most two compiles). The conv2d gradient's code for one
call is about half of the whole. `compile_lowered` (the pipeline's codegen pass, `tcc
compile`) compiles every branch at once.

Reads that `poly.schedule` could not prove in bounds report into a small error
buffer (`poly.astgen.ERROR_BUFFER`); after the run a record there becomes the same
ShapeError the reference evaluator raises, naming the tensor, dimension and index.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import threading
import weakref
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from compiler import pipeline
from compiler.codegen.target import get_target, prepare
from compiler.cpu.cache import (
    CacheFormatError,
    CompileCache,
    StoredEntry,
    cache_key,
    compile_to_object,
    environment_key,
    function_from_json,
    function_to_json,
    load_object,
)
from compiler.cpu.runtime import (
    CompiledFunction,
    compile_function,
    default_pool,
    keep,
    thread_count,
)
from compiler.diagnostics import InternalError, ShapeError
from compiler.frontend.ast import Access
from compiler.frontend.checked import RangedDef
from compiler.frontend.printer import print_def, print_expr
from compiler.interp.expr import out_of_range_hint
from compiler.loops import Function, check_arguments
from compiler.loops.overwrite import Overwrites
from compiler.loops.versions import Branch, Choices, describe
from compiler.options import Options
from compiler.poly.astgen import ERROR_BUFFER, Lowered
from compiler.poly.lower_expr import ReadCheck

TARGET = "llvm"


Build = Callable[[Function, frozenset[Branch]], CompiledFunction]


class ProgramCode:
    """A Function's machine code, compiled for the branches its calls take (see the
    module doc): `build(restricted function, its branches)` compiles; `adopt` takes
    code compiled or loaded elsewhere. Each code compiled stays alive with this object
    (call plans hold its entry)."""

    MAX_SIGNATURES = 64  # sizes whose code is remembered (then forgotten all at once)

    def __init__(self, function: Function, build: Build) -> None:
        self.function = function
        self.build = build
        self._choices = Choices(function)
        self._codes: list[tuple[frozenset[Branch], CompiledFunction]] = []
        self._by_sizes: dict[tuple[int, ...], CompiledFunction] = {}
        self._lock = threading.Lock()
        self._overwrites: Overwrites | None = None

    def overwritten(self, sizes: Mapping[str, int]) -> frozenset[str]:
        """The outputs whose first statement writes all of them for `sizes`
        (`loops.overwrite`: their starting contents are never read)."""
        if self._overwrites is None:
            self._overwrites = Overwrites(self.function)
        return self._overwrites.outputs(sizes)

    @property
    def versions(self) -> bool:
        """Whether the sizes decide some of the code (else it compiles once, whole)."""
        return bool(self._choices.every)

    @property
    def compiled_branches(self) -> frozenset[Branch] | None:
        """The branches of the latest code (each earlier code's are among them)."""
        return self._codes[-1][0] if self._codes else None

    @property
    def compiles(self) -> int:
        """How many times this Function was compiled (or loaded from the disk cache)."""
        return len(self._codes)

    def for_sizes(self, sizes: Sequence[int]) -> CompiledFunction:
        """Code that runs `function` right for `sizes` (the size parameters' values)."""
        codes = self._codes
        if codes and codes[-1][0] == self._choices.every:
            return codes[-1][1]
        key = tuple(sizes)
        found = self._by_sizes.get(key)
        if found is None:
            env = dict(zip(self.function.size_params, key, strict=True))
            found = self.for_branches(self._choices.branches(env))
            if len(self._by_sizes) >= self.MAX_SIGNATURES:
                self._by_sizes.clear()
            self._by_sizes[key] = found
        return found

    def for_branches(self, needed: frozenset[Branch]) -> CompiledFunction:
        """Code holding at least the branches `needed`: the latest if it does, else
        compiled now -- the first time just those, after that every branch (so a
        Function compiles at most twice)."""
        with self._lock:
            if self._codes and needed <= self._codes[-1][0]:
                return self._codes[-1][1]
            kept = self._choices.every if self._codes else needed
            compiled = self.build(self._choices.restrict(kept), kept)
            self._codes.append((kept, compiled))
            return compiled

    def whole(self) -> CompiledFunction:
        """Code of every branch (compiled now unless it was)."""
        return self.for_branches(self._choices.every)

    def adopt(
        self, compiled: CompiledFunction, kept: frozenset[Branch] | None = None
    ) -> ProgramCode:
        """This code with `compiled` (loaded, or compiled elsewhere), the code of the
        branches `kept` (None: every branch), as its latest."""
        with self._lock:
            self._codes.append((self.every if kept is None else kept, compiled))
        return self

    @property
    def every(self) -> frozenset[Branch]:
        """Every branch of the Function."""
        return self._choices.every

    @property
    def points(self) -> tuple[Any, ...]:
        """The Function's choice points (`loops.versions`)."""
        return self._choices.points


def _compile_restricted(g: Function, kept: frozenset[Branch]) -> CompiledFunction:
    """A ProgramCode's `build` without a compile cache (the runtime's table of recent
    code still shares equal Functions)."""
    return compile_function(g)


@dataclass(frozen=True)
class NativeProgram:
    lowered: Lowered
    function: Function  # what is compiled: the lowered Function after the CPU passes
    code: ProgramCode
    options: Options

    @property
    def compiled(self) -> CompiledFunction:
        """The code of every version (compiled now if calls compiled fewer)."""
        return self.code.whole()

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
        sizes_ = [env[n] for n in self.function.size_params]
        self.code.for_sizes(sizes_).call(pointers, sizes_, self.threads)
        if error is not None and error[0]:
            raise self.read_error(error, arrays)

    def read_error(self, error: np.ndarray, arrays: Mapping[str, np.ndarray]) -> ShapeError:
        """The ShapeError for the record in the error buffer `error`."""
        return check_failure(self.lowered.checks, error, {n: a.shape for n, a in arrays.items()})

    def info(self) -> dict[str, Any]:
        """How this program runs: target, thread pool, threads, parallel regions, and
        its code: `choice_points` (statements the sizes decide), `compiles` so far."""
        from compiler.cpu.cpu_parallel import parallel_loops

        return {
            "target": TARGET,
            "runtime": default_pool(),
            "threads": self.threads,
            "parallel_loops": len(parallel_loops(self.function)),
            "native_calls_per_run": 1,
            "choice_points": len(self.code.points),
            "compiles": self.code.compiles,
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
        hint=out_of_range_hint(check.access, check.dim),
    )


def compile_native(
    ranged: RangedDef, options: Options | None = None, *, cache: CompileCache | None = None
) -> NativeProgram:
    """Lower `ranged` and JIT-compile it (see the module doc: a def with versions
    compiles at its first call); with a `cache` (`compiler.cpu.cache`), reuse the
    code compiled for an equal def."""
    options = options or Options()
    if cache is not None:
        return _cached_program(ranged, options, cache)
    return compile_lowered(pipeline.lower(ranged, options), options, every=False)


def compile_lowered(lowered: Lowered, options: Options, *, every: bool = True) -> NativeProgram:
    """JIT-compile lowered loops (the pipeline's `codegen` pass for the CPU): all of
    them now, or with `every=False` only for a def without versions (the others at
    their first call)."""
    f = prepare(get_target(TARGET), lowered.function, options)
    return NativeProgram(lowered, f, _code(f, _compile_restricted, every), options)


def _code(f: Function, build: Build, every: bool) -> ProgramCode:
    """`f`'s ProgramCode, compiled now if `every` or if `f` has no versions."""
    code = ProgramCode(f, build)
    if every or not code.versions:
        code.whole()
    return code


# ------------------------------------------------------------ the compile cache
# An entry holds the compiled Function (after the CPU passes), a weak reference to its
# ProgramCode, and the run-time checks as (number of the Access in a walk of the ranged
# def, dimension): spans come from the def at hand, so sources that differ only in
# layout share the entry. The code (and its JIT engines) lives while a program uses it
# or the runtime's bounded table of recent code (`runtime.keep`) holds it; after that a
# define reloads it from disk (or compiles it again, for an in-memory cache). On disk,
# a def's entry holds its Function and the code of its first compile, with the
# branches that code holds (`"branches"`; none: every branch); code for any other set
# of branches has an entry of its own (`_branches_key`), of code alone.


@dataclass(frozen=True)
class _Cached:
    function: Function
    code: weakref.ref[ProgramCode]
    checks: tuple[tuple[int, int, bool], ...]  # (Access number, dimension, write)
    notes: tuple[str, ...] = ()


def program_key(ranged: RangedDef, options: Options) -> dict[str, str]:
    """Everything that decides the code of `ranged` (see `compiler.cpu.cache`)."""
    from compiler import __version__

    checked = ranged.checked
    bounds = [
        [n, [[print_expr(b.lo), print_expr(b.hi)] for b in bs]] for n, bs in ranged.output_bounds
    ]
    # the thread count is an argument of the code (`cpu.llvm_parallel`), not part of it:
    # kernels that differ only in it share one compile
    fields = (f.name for f in dataclasses.fields(options) if f.name != "threads")
    opts = {name: repr(getattr(options, name)) for name in fields}
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
        code = entry.code() if isinstance(entry, _Cached) else None
        if code is None or not isinstance(entry, _Cached):
            found = _load(cache, key) or _build(ranged, options, cache, key)
            if found is None:  # a check that cannot be named by position: no caching
                return compile_native(ranged, options)
            entry, code = found
            cache.put(key, entry)
        keep(key, code)
    accesses = _accesses(ranged.checked.definition)
    if any(not 0 <= i < len(accesses) for i, _, _ in entry.checks):
        return compile_native(ranged, options)
    checks = tuple(ReadCheck(accesses[i], dim, write) for i, dim, write in entry.checks)
    lowered = Lowered(entry.function, checks)
    if entry.notes:
        lowered = dataclasses.replace(lowered, notes=entry.notes)
    return NativeProgram(lowered, entry.function, code, options)


def _build(
    ranged: RangedDef, options: Options, cache: CompileCache, key: str
) -> tuple[_Cached, ProgramCode] | None:
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
    metadata = {"checks": checks, "notes": list(notes)}
    code = ProgramCode(f, _from_disk(cache, key, f, metadata))
    if not code.versions:
        code.whole()  # at define time: the sizes decide nothing
    return _Cached(f, weakref.ref(code), tuple(checks), notes), code


_UNUSABLE = (CacheFormatError, InternalError, KeyError, TypeError, ValueError, RuntimeError)


def _load(cache: CompileCache, key: str) -> tuple[_Cached, ProgramCode] | None:
    stored = cache.read(key)
    if stored is None:
        return None
    try:
        f = function_from_json(stored.metadata["function"])
        checks = tuple(_check_entry(c) for c in stored.metadata["checks"])
        notes = tuple(str(n) for n in stored.metadata.get("notes", ()))
        code = ProgramCode(f, _from_disk(cache, key))
        kept = stored.metadata.get("branches")
        if kept is not None:
            kept = frozenset((int(k), bool(side)) for k, side in kept)
            if not kept <= code.every:
                raise CacheFormatError("branches that the Function does not have")
        code.adopt(_load_code(f, stored), kept)
    except _UNUSABLE as err:
        logging.getLogger("compiler.cache").debug("compile cache: entry %s unusable: %s", key, err)
        return None
    return _Cached(f, weakref.ref(code), checks, notes), code


def _load_code(f: Function, stored: StoredEntry) -> CompiledFunction:
    sizes = stored.metadata["objects"]
    if not isinstance(sizes, list):
        raise CacheFormatError("object sizes are not a list")
    return load_object(f, stored.object_code, stored.ir_text, sizes)


def _branches_key(key: str, kept: frozenset[Branch]) -> str:
    """The entry of the code of program `key` restricted to the branches `kept`."""
    return cache_key({"program": key, "branches": describe(kept)})


def _from_disk(
    cache: CompileCache,
    key: str,
    f: Function | None = None,
    metadata: Mapping[str, Any] | None = None,
) -> Build:
    """A ProgramCode's `build` for program `key`. Given the program's Function `f` and
    `metadata` (a program just lowered), its first compile writes the program's entry:
    `f`, the metadata, and the code with the branches it holds. Every other compile
    (or one of a program loaded from its entry) reads and writes the entry of its set
    of branches (`_branches_key`), which holds only code."""
    first = [(f, metadata)] if f is not None and metadata is not None else []

    def build(g: Function, kept: frozenset[Branch]) -> CompiledFunction:
        if first:
            whole, data = first.pop()
            entry: dict[str, Any] = {**data}

            def describe_program() -> None:  # while LLVM compiles
                entry["function"] = function_to_json(whole)
                if g is not whole:
                    entry["branches"] = sorted([k, side] for k, side in kept)

            compiled, stored = compile_to_object(g, meanwhile=describe_program)
            cache.write(
                key, StoredEntry({**stored.metadata, **entry}, stored.object_code, stored.ir_text)
            )
            return compiled
        where = _branches_key(key, kept)
        stored = cache.read(where)
        if stored is not None:
            try:
                return _load_code(g, stored)
            except _UNUSABLE as err:
                logging.getLogger("compiler.cache").debug("compile cache: %s: %s", where, err)
        compiled, stored = compile_to_object(g)
        cache.write(where, stored)
        return compiled

    return build


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


__all__ = ["NativeProgram", "ProgramCode", "compile_native", "program_key"]
