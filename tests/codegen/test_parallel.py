"""The CPU runtime's parallel loops: the CPU pass, both thread pools, the grain rule,
and one native call per def (checked against the loop-IR interpreter)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

import compiler
from compiler import loops as L
from compiler.cpu import compile_function, cpu_parallel, llvm_parallel, runtime
from compiler.cpu.llvm import emit_llvm
from compiler.loops import Function, LoopKind, run_function
from compiler.options import Options
from tests.codegen.kit import F32, add, buf, c, func, load, loop, mul, out, pfor, store

POOLS = ["python"] + (["gomp"] if runtime.default_pool() == "gomp" else [])


def _axpb() -> Function:
    A, Out = buf("A", F32, "N"), out("O", F32, "N")
    value = add(mul(load(A, "i"), c(2.0, F32)), c(1.0, F32))
    return func("axpb", [A, Out], "N", pfor("i", 0, "N", store(Out, ("i",), value)))


def _two_loops() -> Function:
    """Two top-level parallel loops (two statements), the second with step 3, and a
    parallel loop nested in the first (made serial by the CPU pass)."""
    A, Out, P = buf("A", F32, "N"), out("O", F32, "N"), out("P", F32, "N", "M")
    first = pfor(
        "i", 0, "N", pfor("j", 0, "M", store(P, ("i", "j"), mul(load(A, "i"), c(3.0, F32))))
    )
    second = pfor("k", 1, "N", store(Out, ("k",), add(load(A, "k"), c(1.0, F32))), step=3)
    return func("two", [A, Out, P], "N M", first, second)


def test_the_cpu_pass_keeps_only_outermost_parallel_loops() -> None:
    f = cpu_parallel.run(_two_loops())
    kinds = [lp.kind for lp in cpu_parallel.parallel_loops(f)]
    assert kinds == [LoopKind.PARALLEL, LoopKind.PARALLEL]
    inner = f.body.stmts[0].body  # type: ignore[attr-defined]
    assert inner.kind is LoopKind.SERIAL
    assert cpu_parallel.run(f) == f  # idempotent


def test_a_parallel_loop_under_a_serial_loop_stays_parallel_but_not_in_a_local() -> None:
    A, Out = buf("A", F32, "N"), out("O", F32, "N")
    inner = pfor("i", 0, "N", store(Out, ("i",), load(A, "i")))
    f = func("nested", [A, Out], "N", loop("t", 0, 2, inner))
    assert [lp.var for lp in cpu_parallel.parallel_loops(f)] == ["i"]
    local = func("local", [A, Out], "N", L.Local("x", F32, c(0.0, F32), inner))
    assert cpu_parallel.parallel_loops(local) == []


@pytest.mark.parametrize("pool", POOLS)
def test_a_parallel_loop_under_a_serial_loop_runs_once_per_iteration(
    pool: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # O(i) += A(i) for t in 0:3, the i loop on threads each time
    monkeypatch.setattr(llvm_parallel, "GRAIN", 0)
    A, Out = buf("A", F32, "N"), out("O", F32, "N")
    body = store(Out, ("i",), add(load(Out, "i"), load(A, "i")))
    f = func("repeat", [A, Out], "N", loop("t", 0, 3, pfor("i", 0, "N", body)))
    a = np.arange(1001, dtype=np.float32)
    o = np.ones_like(a)
    compile_function(f)({"A": a, "O": o}, {"N": a.size}, threads=3, pool=pool)
    np.testing.assert_array_equal(o, 1 + 3 * a)


@pytest.mark.parametrize("pool", POOLS)
@pytest.mark.parametrize("n", [0, 1, 2, 7, 4099, 100003])
@pytest.mark.parametrize("threads", [1, 2, 3])
def test_both_pools_agree_with_the_interpreter(pool: str, n: int, threads: int) -> None:
    f = _two_loops()
    m = 5
    rng = np.random.default_rng(n)
    arrays = {
        "A": rng.standard_normal(n).astype(np.float32),
        "O": np.zeros(n, np.float32),
        "P": np.zeros((n, m), np.float32),
    }
    want = {k: a.copy() for k, a in arrays.items()}
    run_function(f, want, {"N": n, "M": m})
    compile_function(f)(arrays, {"N": n, "M": m}, threads=threads, pool=pool)
    for name in arrays:
        np.testing.assert_array_equal(arrays[name], want[name])


def test_the_grain_rule_keeps_small_loops_on_the_caller() -> None:
    cf = compile_function(_axpb())
    before = runtime.python_launches()
    for n in (0, 1, 4, 100):
        a = np.arange(n, dtype=np.float32)
        o = np.zeros(n, np.float32)
        cf({"A": a, "O": o}, {"N": n}, threads=4, pool="python")
        np.testing.assert_array_equal(o, a * 2 + 1)
    assert runtime.python_launches() == before  # no region was started
    big = np.arange(llvm_parallel.GRAIN, dtype=np.float32)  # at least one operation each
    o = np.zeros_like(big)
    cf({"A": big, "O": o}, {"N": big.size}, threads=4, pool="python")
    np.testing.assert_array_equal(o, big * 2 + 1)
    assert runtime.python_launches() == before + 1
    cf({"A": big, "O": o}, {"N": big.size}, threads=1, pool="python")
    assert runtime.python_launches() == before + 1  # one thread: never a region


def test_the_entry_calls_the_launcher_through_its_argument() -> None:
    text = emit_llvm(cpu_parallel.run(_axpb()), optimised=False)
    assert "tcc.threads" in text and "tcc.launch" in text
    assert "axpb.i.work" in text and "axpb.i.thread" in text
    assert "GOMP" not in text  # object code stays independent of the pool


def test_unknown_or_missing_pools_are_options_errors() -> None:
    with pytest.raises(compiler.OptionsError, match="unknown thread pool 'tbb'"):
        compile_function(_axpb())(
            {"A": np.zeros(1, np.float32), "O": np.zeros(1, np.float32)}, {"N": 1}, pool="tbb"
        )


def test_a_kernel_of_three_statements_is_one_native_call(monkeypatch: pytest.MonkeyPatch) -> None:
    src = """
    def softmax(float(N, D) X) -> (M, S, Y) {
        M(n) max=! X(n, d)
        S(n) +=! exp(X(n, d) - M(n))
        Y(n, d) = exp(X(n, d) - M(n)) / S(n)
    }
    """
    k = compiler.define(src, options=Options(threads=2), cache=None)
    calls: list[str] = []
    compiled = k._native.compiled
    for entry in ("_cfunc", "_objects"):  # the entry taking addresses, the one taking arrays
        real = getattr(compiled, entry)
        if real is not None:

            def counting(*args: object, real: object = real, entry: str = entry) -> None:
                calls.append(entry)
                real(*args)  # type: ignore[operator]

            monkeypatch.setattr(compiled, entry, counting)
    x = np.random.default_rng(0).standard_normal((300, 257)).astype(np.float32)
    got = k(x)
    assert len(calls) == 1
    want = compiler.define(src, target="interp")(x)
    for g, w in zip(got, want, strict=True):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)
    info = k.info()
    assert info["runtime"] == runtime.default_pool()
    # the three statements fuse into one parallel loop over rows (compiler/loops/fuse.py)
    assert info["threads"] == 2 and info["parallel_loops"] == 1


def test_default_threads_is_read_once() -> None:
    assert runtime.DEFAULT_THREADS >= 1
    assert runtime.thread_count(None) == runtime.DEFAULT_THREADS


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_a_forked_child_runs_parallel_kernels_on_the_python_pool() -> None:
    k = compiler.define("def f(float(N) A) -> (B) { B(i) = A(i) * 3 }", options=Options(threads=2))
    a = np.arange(llvm_parallel.GRAIN, dtype=np.float32)
    np.testing.assert_array_equal(k(a)[0], a * 3)  # the parent's pool has run a region
    pid = os.fork()
    if pid == 0:  # the child: exit 0 only if the kernel ran, right, on the Python pool
        ok = False
        try:
            ok = bool(np.array_equal(k(a)[0], a * 3)) and runtime.python_launches() == 1
            ok = ok and k.info()["runtime"] == "python"
        finally:
            os._exit(0 if ok else 1)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            assert os.waitstatus_to_exitcode(status) == 0
            break
        time.sleep(0.05)
    else:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        pytest.fail("the forked child hung")


@pytest.mark.skipif(runtime.default_pool() != "gomp", reason="needs libgomp")
def test_a_process_with_spinning_gomp_threads_exits_cleanly() -> None:
    # OMP_WAIT_POLICY=active: libgomp's workers spin in its code after a region; at
    # exit llvmlite closes the libraries it loaded, which unmapped libgomp under them
    script = (
        "import numpy as np, compiler\n"
        "from compiler.options import Options\n"
        "k = compiler.define('def f(float(N) A) -> (B) { B(i) = A(i) * 3 }',"
        " options=Options(threads=2), cache=None)\n"
        "a = np.ones(1 << 20, np.float32)\n"
        "assert k.info()['runtime'] == 'gomp' and float(k(a)[0].sum()) == 3 * a.size\n"
    )
    env = {**os.environ, "OMP_WAIT_POLICY": "active"}
    done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, timeout=300)
    assert done.returncode == 0, done.stderr.decode()[-2000:]
