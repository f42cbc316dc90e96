"""Thread safety of compiled kernels: concurrent calls and defines, calls from inside
the runtime's own pool, errors raised in workers, and the life of the MCJIT engine.

Every result is compared with NumPy or the reference evaluator. Deadlocks would show
as a timeout on a future, never as a hung test run.
"""

from __future__ import annotations

import dataclasses
import gc
import threading
import weakref
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest

import compiler
from compiler.cpu import runtime
from compiler.cpu.cache import compile_to_object
from compiler.options import Options
from compiler.runtime.native import ProgramCode

MATMUL = "def matmul(float(M, K) A, float(K, N) B) -> (C) {\n    C(m, n) +=! A(m, k) * B(k, n)\n}\n"
SCALE = "def scale(float(N) A) -> (B) {{\n    B(i) = A(i) * {s}\n}}\n"
TIMEOUT = 60


def _mm_inputs(seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    return (
        rng.standard_normal((33, 17)).astype(np.float32),
        rng.standard_normal((17, 9)).astype(np.float32),
    )


def _matmul(threads: int) -> compiler.kernel.Kernel:
    return compiler.define(MATMUL, target="llvm", options=Options(threads=threads), cache=None)


def test_one_kernel_called_from_many_threads_at_once() -> None:
    k = _matmul(threads=3)
    barrier = threading.Barrier(6)

    def work(seed: int) -> bool:
        a, b = _mm_inputs(seed)
        barrier.wait(TIMEOUT)
        results = [k(a, b)[0] for _ in range(20)]
        return all(np.allclose(r, a @ b, rtol=1e-5, atol=1e-5) for r in results)

    with ThreadPoolExecutor(6) as pool:
        assert all(pool.map(work, range(6), timeout=TIMEOUT))


def test_calls_from_inside_the_runtime_pool_do_not_deadlock() -> None:
    k = _matmul(threads=4)
    a, b = _mm_inputs(1)
    k(a, b)  # makes the shared pool
    pool = runtime._pool(4)
    # More callers than workers: each would wait for chunks that only a worker can run.
    futures = [pool.submit(k, a, b) for _ in range(3 * pool._max_workers)]
    for future in futures:
        np.testing.assert_allclose(future.result(TIMEOUT)[0], a @ b, rtol=1e-5, atol=1e-5)


def test_a_kernel_called_inside_another_kernels_chunk() -> None:
    inner = _matmul(threads=2)
    a, b = _mm_inputs(2)
    seen: list[np.ndarray] = []

    def chunk(lo: int, hi: int) -> None:
        seen.append(inner(a, b)[0])

    runtime.run_chunks(chunk, [(0, 1), (1, 2), (2, 3)])
    assert len(seen) == 3
    for got in seen:
        np.testing.assert_allclose(got, a @ b, rtol=1e-5, atol=1e-5)


def test_an_error_in_a_worker_chunk_is_raised_in_the_caller() -> None:
    done: list[int] = []

    def chunk(lo: int, hi: int) -> None:
        if lo == 2:
            raise ValueError("chunk 2 failed")
        done.append(lo)

    with pytest.raises(ValueError, match="chunk 2 failed"):
        runtime.run_chunks(chunk, [(0, 1), (1, 2), (2, 3), (3, 4)])
    assert sorted(done) == [0, 1, 3]  # the other chunks still ran to the end


def test_concurrent_defines_of_one_source_compile_it_once(tmp_path: Path) -> None:
    barrier = threading.Barrier(4)

    def define(_: int) -> compiler.kernel.Kernel:
        barrier.wait(TIMEOUT)
        return compiler.define(MATMUL, target="llvm", cache=tmp_path)

    with ThreadPoolExecutor(4) as pool:
        kernels = list(pool.map(define, range(4), timeout=TIMEOUT))
    assert len({id(k._native.compiled) for k in kernels}) == 1
    assert len(list(tmp_path.glob("*.tcc"))) == 1
    a, b = _mm_inputs(4)
    np.testing.assert_allclose(kernels[-1](a, b)[0], a @ b, rtol=1e-5, atol=1e-5)


def test_concurrent_defines_of_different_sources(tmp_path: Path) -> None:
    def define_and_run(s: int) -> bool:
        k = compiler.define(SCALE, constants={"s": s}, target="llvm", cache=tmp_path / str(s % 2))
        a = np.arange(50, dtype=np.float32)
        return bool(np.array_equal(k(a)[0], a * np.float32(s)))

    with ThreadPoolExecutor(4) as pool:
        assert all(pool.map(define_and_run, range(2, 10), timeout=TIMEOUT))


def test_the_engine_lives_as_long_as_its_compiled_function() -> None:
    k = compiler.define(MATMUL, target="llvm", cache=False, options=Options(threads=2))
    compiled, _ = compile_to_object(k._native.function)  # held by nothing else
    code = ProgramCode(compiled.function, k._native.code.build).adopt(compiled)
    program = dataclasses.replace(k._native, code=code)
    engine = weakref.ref(compiled.code.engine)
    del k, compiled
    gc.collect()
    for s in range(3):  # other compilations would reuse the memory, had it been freed
        compiler.define(SCALE, constants={"s": s + 20}, target="llvm", cache=False)
    assert engine() is not None
    a, b = _mm_inputs(5)
    out = {"C": np.zeros((33, 9), np.float32)}
    program.run({"A": a, "B": b}, {"M": 33, "K": 17, "N": 9}, out)
    np.testing.assert_allclose(out["C"], a @ b, rtol=1e-5, atol=1e-5)
    del program, code
    gc.collect()
    assert engine() is None  # freed with its last function: no leak per compilation
