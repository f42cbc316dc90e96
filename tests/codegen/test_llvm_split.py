"""A module compiled in parts on threads (`cpu.llvm_split`): one object file per
outlined loop body plus one for the rest, linked by one engine into the same program;
the same bytes on any number of threads; parts stored in and loaded from the cache."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from llvmlite import ir

import compiler
from compiler import pipeline
from compiler.cpu import cache as C
from compiler.cpu import llvm as backend
from compiler.cpu import llvm_split
from compiler.cpu.llvm_math import vector_math_available
from compiler.cpu.runtime import compile_function
from compiler.diagnostics import InternalError
from compiler.options import Options
from compiler.runtime.native import TARGET, get_target, prepare
from tests.codegen.kit import F32, buf, func, load, loop, out, store

# three statements, each its own parallel loop nest; the reduction register-tiled
SRC = """
def f(float(N, K) A, float(K, M) B) -> (C, D, E) {
    C(n, m) +=! A(n, k) * B(k, m)
    D(n, m) = exp(C(n, m)) + 1.0
    E(n) +=! D(n, m)
}
"""


def _function(src: str = SRC) -> compiler.loops.Function:
    k = compiler.define(src, cache=False)
    return prepare(get_target(TARGET), pipeline.lower(k.ranged, Options()).function, Options())


def _inputs(n: int, k: int, m: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(n * 100 + m)
    a = rng.standard_normal((n, k)).astype(np.float32) / 4
    b = rng.standard_normal((k, m)).astype(np.float32) / 4
    return a, b


def test_each_outlined_loop_body_is_a_part_of_its_own() -> None:
    module, outlined = backend._build(_function())
    assert len(outlined) >= 3  # a work function per parallel loop nest
    texts = llvm_split.part_texts(module, outlined)
    assert len(texts) == 1 + len(outlined)
    for fn, text in zip(outlined, texts[1:], strict=True):
        defined = [line for line in text.splitlines() if line.startswith("define")]
        assert len(defined) == 1 and f'@"{fn.name}"' in defined[0]
        assert "internal" not in defined[0]  # reached from part 0's object
    entry = [line for line in texts[0].splitlines() if line.startswith("define")]
    assert not any(f'@"{fn.name}"(' in line for line in entry for fn in outlined)
    assert f'declare void @"{outlined[0].name}"' in texts[0]
    assert str(module).count("define") == sum(t.count("\ndefine") for t in texts)


@pytest.mark.parametrize("shape", [(1, 1, 1), (7, 3, 5), (33, 17, 40), (2, 1, 13)])
def test_the_linked_parts_compute_what_the_reference_does(shape: tuple[int, int, int]) -> None:
    ref = compiler.define(SRC, target="interp")
    k = compiler.define(SRC, cache=False)
    a, b = _inputs(*shape)
    for got, want in zip(k(a, b), ref(a, b), strict=True):
        np.testing.assert_allclose(got, want, rtol=2e-5, atol=1e-5)


def test_the_object_code_does_not_depend_on_the_thread_count(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    f = _function()
    monkeypatch.setattr(llvm_split, "COMPILE_THREADS", 1)
    serial = backend.compile_objects(f)
    monkeypatch.setattr(llvm_split, "COMPILE_THREADS", 4)
    threaded = backend.compile_objects(f)
    assert len(serial.parts) > 1 and serial.parts == threaded.parts
    assert serial.ir_text == threaded.ir_text


def test_the_locked_path_compiles_the_same_code(monkeypatch: pytest.MonkeyPatch) -> None:
    f = _function()
    unlocked = backend.compile_objects(f)
    monkeypatch.setattr(llvm_split, "_unlocked", lambda: None)  # an llvmlite without them
    assert backend.compile_objects(f).parts == unlocked.parts


def test_concurrent_compiles_on_threads_agree() -> None:
    from concurrent.futures import ThreadPoolExecutor

    f = _function()
    want = backend.compile_objects(f).parts
    with ThreadPoolExecutor(3) as pool:
        found = list(pool.map(lambda _: backend.compile_objects(f).parts, range(6)))
    assert all(parts == want for parts in found)


def test_printed_llvm_ir_holds_every_part_optimised() -> None:
    f = _function()
    text = backend.emit_llvm(f)
    _, outlined = backend._build(f)
    for fn in outlined:
        assert f"define void @{fn.name}(" in text or f'define void @"{fn.name}"(' in text
    assert "x float>" in text  # vectorised


def test_a_module_with_a_mutable_global_is_not_split() -> None:
    module, outlined = backend._build(_function())
    g = ir.GlobalVariable(module, ir.IntType(64), "tcc.counter")
    g.initializer = ir.Constant(ir.IntType(64), 0)
    with pytest.raises(InternalError, match="repeats global tcc.counter"):
        llvm_split.part_texts(module, outlined)


def test_the_cache_stores_the_parts_and_loads_them(tmp_path: Path) -> None:
    cache = C.CompileCache(tmp_path)
    k = compiler.define(SRC, cache=cache)
    a, b = _inputs(9, 5, 11)
    want = k(a, b)  # the first call compiles and writes the entry
    (path,) = sorted(tmp_path.glob("*.tcc"))
    stored = C.decode_entry(path.read_bytes(), path.stem, (tmp_path / ".secret").read_bytes())
    sizes = stored.metadata["objects"]
    assert len(sizes) > 1 and sum(sizes) == len(stored.object_code)
    again = compiler.define(SRC, cache=C.CompileCache(tmp_path))  # from disk
    for got, expected in zip(again(a, b), want, strict=True):
        np.testing.assert_array_equal(got, expected)


@pytest.mark.parametrize("sizes", [[], [1], [-5, 10**9], "12", [True, 3], None])
def test_object_sizes_that_do_not_divide_the_code_are_a_miss(tmp_path: Path, sizes: object) -> None:
    cache = C.CompileCache(tmp_path)
    compiler.define(SRC, cache=cache)(*_inputs(4, 3, 2))  # compiles, writes the entry
    (path,) = sorted(tmp_path.glob("*.tcc"))
    secret = (tmp_path / ".secret").read_bytes()
    stored = C.decode_entry(path.read_bytes(), path.stem, secret)
    metadata = dict(stored.metadata)
    if sizes is None:
        del metadata["objects"]
    else:
        metadata["objects"] = sizes
    bad = C.StoredEntry(metadata, stored.object_code, stored.ir_text)
    path.write_bytes(C.encode_entry(bad, path.stem, secret))
    k = compiler.define(SRC, cache=C.CompileCache(tmp_path))  # rebuilt, no error
    a, b = _inputs(4, 3, 2)
    ref = compiler.define(SRC, target="interp")
    for got, want in zip(k(a, b), ref(a, b), strict=True):
        np.testing.assert_allclose(got, want, rtol=2e-5, atol=1e-5)
    rebuilt = C.decode_entry(path.read_bytes(), path.stem, secret)
    assert rebuilt.metadata["objects"] == stored.metadata["objects"]


def test_load_object_refuses_sizes_that_do_not_add_up() -> None:
    f = _function()
    objects = backend.compile_objects(f)
    data = b"".join(objects.parts)
    with pytest.raises(C.CacheFormatError, match="do not divide"):
        C.load_object(f, data, "", [len(data) - 1])
    good = C.load_object(f, data, objects.ir_text, [len(p) for p in objects.parts])
    assert good.ir() == objects.ir_text
    assert compile_function(f).ir()  # the uncached path prints its parts too


def test_only_parts_without_loops_get_the_fast_code_generator() -> None:
    rows = "def g(float(N, M) A) -> (D, E) {\n    D(n, m) = exp(A(n, m)) + 1.0\n    E(n) +=! D(n, m)\n}"
    module, outlined = backend._build(_function(rows))
    entry = module.globals["tcc.g"]
    assert outlined and not llvm_split._has_loop(entry)  # every loop outlined
    assert all(llvm_split._has_loop(fn) for fn in outlined)
    # SRC's packed matmul launches its packing loop once per block of a serial loop
    module, _ = backend._build(_function())
    assert llvm_split._has_loop(module.globals["tcc.f"])
    # a serial loop stays in the entry: part 0 has a loop then
    A, Out = buf("A", F32, "N"), out("O", F32, "N")
    f = func("serial", [A, Out], "N", loop("i", 0, "N", store(Out, ("i",), load(A, "i"))))
    module, outlined = backend._build(f)
    assert outlined == [] and llvm_split._has_loop(module.globals[backend.symbol(f)])
    a = np.arange(5, dtype=np.float32)
    got = compile_function(f)({"A": a, "O": np.zeros(5, np.float32)}, {"N": 5})["O"]
    np.testing.assert_array_equal(got, a)


def _efforts(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The effort of each part compiled from now on, in order (`llvm_split._compile`)."""
    efforts: list[str] = []
    real = llvm_split._compile

    def spy(text: str, effort: llvm_split.Effort, unlocked: object) -> tuple[bytes, str]:
        efforts.append(effort)
        return real(text, effort, unlocked)  # type: ignore[arg-type]

    monkeypatch.setattr(llvm_split, "_compile", spy)
    return efforts


# a transpose, a zero fill with a copy, a cast copy: loops that only move data; the
# others compute (a sum, a product, a select)
MOVES = """
def mv(float(N, M) A, int32(M) J) -> (T, P, D, S, Q, R) {
    T(m, n) = A(n, m)
    P(n, m) = 0.0 where n in 0:N + 2, m in 0:M
    P(n, m) = A(n, m)
    D(m) = J(m)
    S(n) +=! A(n, m)
    Q(n, m) = A(n, m) * 2.0
    R(n, m) = n > 0 ? A(n, m) : 0.0
}
"""


def test_loops_that_only_move_data_get_the_light_pipeline(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from compiler.cpu.llvm_parallel import moves_only

    f = _function(MOVES)
    L = compiler.loops
    stores = [n for n in L.walk(f.body) if isinstance(n, L.Store)]
    alone = {n.buffer.name: moves_only(n) for n in stores if n.buffer.name != "P"}
    assert alone == {"T": True, "D": True, "S": False, "Q": False, "R": False}
    nests = [s for s in f.body.stmts if isinstance(s, L.For)]
    assert [moves_only(s.body) for s in nests] == [True, True, True, True, False]
    efforts = _efforts(monkeypatch)
    k = compiler.define(MOVES, cache=False)
    for n, m in [(1, 1), (2, 3), (7, 13), (33, 17)]:
        rng = np.random.default_rng(n + m)
        a = rng.standard_normal((n, m)).astype(np.float32)
        j = rng.integers(-9, 9, m).astype(np.int32)
        t, p, d, s_, q, r = k(a, j)
        np.testing.assert_array_equal(t, a.T)
        np.testing.assert_array_equal(p, np.concatenate([a, np.zeros((2, m), np.float32)]))
        np.testing.assert_array_equal(d, j.astype(np.float32))
        np.testing.assert_allclose(s_, a.sum(1), rtol=1e-5, atol=1e-5)
        np.testing.assert_array_equal(q, a * 2)
        np.testing.assert_array_equal(r, np.where(np.arange(n)[:, None] > 0, a, 0))
    assert efforts.count(llvm_split.MOVES) >= 3 and llvm_split.COMPUTE in efforts


def test_an_entry_whose_loops_only_launch_bodies_gets_the_fast_pipeline(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # SRC's packed matmul: a serial loop over blocks in the entry, launching the packing
    # and the tile loops; the serial `f` below: a loop that computes in the entry
    module, emitter = backend._emit(_function(), None)
    assert llvm_split._has_loop(module.globals[emitter.fn.name]) and emitter.compute_loops == 0
    A, Out = buf("A", F32, "N"), out("O", F32, "N")
    f = func("serial", [A, Out], "N", loop("i", 0, "N", store(Out, ("i",), load(A, "i"))))
    assert backend._emit(f, None)[1].compute_loops == 1
    efforts = _efforts(monkeypatch)
    monkeypatch.setattr(llvm_split, "COMPILE_THREADS", 1)  # in order: part 0 last
    backend.compile_objects(_function())
    assert efforts[-1] == llvm_split.STRAIGHT
    assert llvm_split.STRAIGHT not in efforts[:-1] and llvm_split.COMPUTE in efforts
    efforts.clear()
    backend.compile_objects(f)
    assert efforts == [llvm_split.COMPUTE]


@pytest.mark.skipif(not vector_math_available(), reason="no libmvec on this host")
def test_a_body_compiled_before_the_module_is_complete_calls_vector_math() -> None:
    # the work function's part is printed before MathEmitter.finish writes the module's
    # llvm.compiler.used: its own keeps the libmvec variants for the vectoriser
    f = _function("def lg(float(N, M) A) -> (O) {\n    O(n, m) = log(A(n, m)) * 2.0\n}")
    parts = backend.compile_objects(f).ir_text.split("\n; ModuleID")
    defines = [[line for line in p.splitlines() if line.startswith("define")] for p in parts]
    (work,) = [p for p, d in zip(parts, defines, strict=True) if ".work(" in d[0]]
    assert any("call" in line and "@_ZGV" in line for line in work.splitlines())


def test_bodies_start_compiling_while_the_module_is_built(monkeypatch: pytest.MonkeyPatch) -> None:
    started: list[tuple[str, int]] = []
    real = llvm_split._compile

    def spy(text: str, effort: llvm_split.Effort, unlocked: object) -> tuple[bytes, str]:
        defined = [line for line in text.splitlines() if line.startswith("define")]
        started.append((defined[0], len(defined)))
        return real(text, effort, unlocked)  # type: ignore[arg-type]

    f = _function()
    monkeypatch.setattr(llvm_split, "_compile", spy)
    monkeypatch.setattr(llvm_split, "COMPILE_THREADS", 1)  # compiled when started, in order
    objects = backend.compile_objects(f)
    assert len(started) == len(objects.parts) >= 4
    # every outlined body (one definition each) before part 0, the entry and its thunks
    assert all(".work" in line and n == 1 for line, n in started[:-1])
    assert (
        f"@{backend.symbol(f)}(" in started[-1][0] or f'@"{backend.symbol(f)}"(' in started[-1][0]
    )


def test_parts_on_threads_shorten_the_switch_interval_and_restore_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import sys

    seen: list[float] = []
    real = llvm_split._compile

    def spy(text: str, effort: llvm_split.Effort, unlocked: object) -> tuple[bytes, str]:
        seen.append(sys.getswitchinterval())
        return real(text, effort, unlocked)  # type: ignore[arg-type]

    f = _function()
    monkeypatch.setattr(llvm_split, "_compile", spy)
    before = sys.getswitchinterval()
    try:
        sys.setswitchinterval(0.01)
        monkeypatch.setattr(llvm_split, "COMPILE_THREADS", 2)
        backend.compile_objects(f)
        assert seen and max(seen) <= llvm_split.HANDOFF_SECONDS
        assert sys.getswitchinterval() == pytest.approx(0.01)
        # a compile that fails while its bodies compile restores it too
        compiling = llvm_split.Compiling()
        module, outlined = backend._build(f, compiling.add)
        compiling.cancel()
        assert sys.getswitchinterval() == pytest.approx(0.01)
        # on the calling thread (one thread, or llvmlite without unlocked calls) it stays
        seen.clear()
        monkeypatch.setattr(llvm_split, "COMPILE_THREADS", 1)
        backend.compile_objects(f)
        assert seen and min(seen) == pytest.approx(0.01)
    finally:
        sys.setswitchinterval(before)
