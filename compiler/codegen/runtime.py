"""Calling JIT-compiled loop-IR functions on NumPy arrays, across threads.

`compile_function(f)` returns a `CompiledFunction` (cached in memory by the Function's
full repr, so compiling an equal Function twice is free). Calling it checks the arrays
and sizes against the Function's buffers (`compiler.loops.check_arguments`: dtype,
shape, C-contiguity, writeable outputs; a `ShapeError` otherwise), then calls the
machine code through ctypes, which releases the GIL. When the Function's body is one
parallel loop (`compiler.loops.splittable_loop`), its iterations are split into
`threads` contiguous chunks run on a shared thread pool; the caller runs the first
chunk itself and waits for the rest, and an exception in any chunk is re-raised in the
caller. Compiled code keeps no state, so several Python threads may call one
CompiledFunction at once. The MCJIT engine lives as long as the CompiledFunction.

Example:
    cf = compile_function(f)                  # f: C[i] = A[i] + 1 over i < N
    cf({"A": a, "C": c}, {"N": len(a)}, threads=2)
"""

from __future__ import annotations

import ctypes
import os
import threading
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor

import numpy as np

from compiler.codegen.llvm import JitCode, jit
from compiler.frontend.diagnostics import OptionsError
from compiler.loops import Function, check_arguments, eval_size_expr, splittable_loop

INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1

_CACHE: dict[str, CompiledFunction] = {}
_CACHE_LOCK = threading.Lock()
_POOL: list[ThreadPoolExecutor] = []
_POOL_LOCK = threading.Lock()
_WORKER = threading.local()  # .active is True in the pool's threads


def compile_function(f: Function) -> CompiledFunction:
    """JIT-compile `f` (or reuse the compiled code of an equal Function)."""
    key = repr(f)
    with _CACHE_LOCK:
        cached = _CACHE.get(key)
        if cached is None:
            cached = _CACHE[key] = CompiledFunction(f, jit(f))
    return cached


class CompiledFunction:
    """Machine code for a loop-IR Function, callable on NumPy arrays."""

    def __init__(self, f: Function, code: JitCode, *, ir_text: str | None = None) -> None:
        self.function = f
        self.code = code  # holds the MCJIT engine: the address is valid while it lives
        self._ir_text = ir_text  # code loaded from an object file has no module to print
        nargs = len(f.buffers) + len(f.size_params) + 2
        argtypes = [ctypes.c_void_p] * len(f.buffers) + [ctypes.c_int64] * (nargs - len(f.buffers))
        self._cfunc = ctypes.CFUNCTYPE(None, *argtypes)(code.address)
        self._split = splittable_loop(f)

    def __call__(
        self,
        arrays: Mapping[str, np.ndarray],
        sizes: Mapping[str, int],
        *,
        threads: int | None = None,
    ) -> dict[str, np.ndarray]:
        """Run on `arrays` (outputs written in place); returns the arrays by name."""
        env = check_arguments(self.function, arrays, sizes)
        threads = _thread_count(threads)
        pointers = [arrays[b.name].ctypes.data for b in self.function.buffers]
        size_args = [env[name] for name in self.function.size_params]

        def call(lo: int, hi: int) -> None:
            self._cfunc(*pointers, *size_args, lo, hi)

        run_chunks(call, self.chunks(env, threads))
        return dict(arrays)

    def chunks(self, env: Mapping[str, int], threads: int) -> list[tuple[int, int]]:
        """The [lo, hi) pieces of the parallel loop's range, one per thread (at most)."""
        loop = self._split
        if loop is None or threads <= 1:
            return [(INT64_MIN, INT64_MAX)]
        lo, hi = eval_size_expr(loop.lo, env), eval_size_expr(loop.hi, env)
        trips = max(0, -(-(hi - lo) // loop.step))
        parts = max(1, min(threads, trips))
        bounds = [lo + (trips * k // parts) * loop.step for k in range(parts + 1)]
        return list(zip(bounds[:-1], bounds[1:], strict=True))

    def ir(self) -> str:
        """The optimised LLVM IR this function was compiled from."""
        return self._ir_text if self._ir_text is not None else str(self.code.module)


def run_chunks(call: Callable[[int, int], None], chunks: Sequence[tuple[int, int]]) -> None:
    """Run `call` on every chunk: the first here, the others on the pool; re-raise errors.

    A call from a pool worker (a kernel called inside another's chunk) runs its chunks
    here, one after the other: waiting on the pool from the pool could deadlock."""
    if len(chunks) == 1 or getattr(_WORKER, "active", False):
        for lo, hi in chunks:
            call(lo, hi)
        return
    pool = _pool(len(chunks) - 1)
    futures: list[Future[None]] = [pool.submit(call, lo, hi) for lo, hi in chunks[1:]]
    error: BaseException | None = None
    try:
        call(*chunks[0])
    except BaseException as exc:  # noqa: BLE001 - still wait for the workers, then re-raise
        error = exc
    for future in futures:
        exc = future.exception()
        if exc is not None and error is None:
            error = exc
    if error is not None:
        raise error


def _thread_count(threads: int | None) -> int:
    if threads is None:
        return os.cpu_count() or 1
    if isinstance(threads, bool) or not isinstance(threads, int) or threads < 1:
        raise OptionsError(f"threads must be a positive int, got {threads!r}")
    return threads


def _pool(workers: int) -> ThreadPoolExecutor:
    """A shared pool with at least `workers` threads (grown by replacing it).

    A replaced pool is not shut down: another caller may still be submitting to it.
    Its idle threads exit once it is garbage (ThreadPoolExecutor's weakref)."""
    with _POOL_LOCK:
        if not _POOL or _POOL[0]._max_workers < workers:
            size = max(workers, os.cpu_count() or 1)
            _POOL[:] = [
                ThreadPoolExecutor(
                    max_workers=size, thread_name_prefix="tcc", initializer=_mark_worker
                )
            ]
        return _POOL[0]


def _mark_worker() -> None:
    _WORKER.active = True
