"""Packed register tiles (`compiler/cpu/pack.py`) against the reference evaluator:
one-loop contractions (matmul, transposed and batched operands, offset reads,
accumulating `+=`) at odd sizes (1, primes, extents below, at and between multiples of
the lanes, the row block and the cache tiles), float32 and float64, forced and
model-chosen tiles; and the shape of the generated loops."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import compiler
from compiler import loops as L
from compiler.cpu import compile_function, cpu_registers, llvm_parallel, runtime
from compiler.cpu.cache import CompileCache
from compiler.cpu.model import lower
from compiler.frontend.check import check_def
from compiler.frontend.parser import parse
from compiler.loops.printer import print_function
from compiler.options import Options
from compiler.poly.ranges import infer_ranges
from tests.codegen.kit import find, reference_and_llvm

# one register tile per nest: no versions for fewer rows than its block (conftest)
pytestmark = pytest.mark.usefixtures("no_few_rows")

POOLS = ["python"] + (["gomp"] if runtime.default_pool() == "gomp" else [])
MATMUL = "def mm(float(M, K) A, float(K, N) B) -> (C) { C(m, n) +=! A(m, k) * B(k, n) }"
SOURCES = {
    "matmul": MATMUL,
    "transposed": "def mt(float(K, M) A, float(K, N) B) -> (C) { C(m, n) +=! A(k, m) * B(k, n) }",
    "offset": (
        "def mo(float(M, K) A, float(K, N) B) -> (C) "
        "{ C(m, n) +=! A(m, k) * B(k, n + 2) where n in 0:N - 2 }"
    ),
    "scaled": "def ms(float(M, K) A, float(K, N) B) -> (C) { C(m, n) +=! A(m, k) * B(k, n) * 2.0 }",
    "batched": (
        "def bm(float(P, M, K) A, float(P, K, N) B) -> (C) "
        "{ C(p, m, n) +=! A(p, m, k) * B(p, k, n) }"
    ),
}


def _arrays(name: str, m: int, k: int, n: int, dtype: type, rng: np.random.Generator) -> list:
    shapes = {
        "matmul": [(m, k), (k, n)],
        "transposed": [(k, m), (k, n)],
        "offset": [(m, k), (k, n + 2)],
        "scaled": [(m, k), (k, n)],
        "batched": [(2, m, k), (2, k, n)],
    }[name]
    return [rng.standard_normal(s).astype(dtype) for s in shapes]


# compiles with the run-time test patched to always take the panels (its constants are
# not part of the compile cache's key: an entry of the unpatched lowering would be reused)
_PANELS = CompileCache(None)


def _check(
    text: str,
    arrays: list[np.ndarray],
    options: Options,
    out: np.ndarray | None = None,
    cache: object = None,
) -> None:
    e, g = reference_and_llvm(text, arrays, options, out, cache)
    tol = 1e-12 if g.dtype == np.float64 else 2e-5
    scale = max(1.0, float(np.abs(e).max(initial=0)))
    np.testing.assert_allclose(g, e, rtol=tol, atol=tol * scale * np.sqrt(arrays[0].shape[-1]))


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    name=st.sampled_from(sorted(SOURCES)),
    m=st.sampled_from([1, 2, 3, 4, 5, 6, 7, 13, 15, 37, 47, 67]),
    k=st.sampled_from([1, 2, 7, 31, 259]),
    n=st.sampled_from([1, 15, 16, 17, 33, 47]),
    tile=st.sampled_from([None, (8, 5), (3, 2), (64, 256)]),
    block=st.sampled_from([None, 3]),
    dtype=st.sampled_from([np.float32, np.float64]),
    seed=st.integers(0, 2**16),
)
def test_packed_contractions_match_the_reference(
    name: str, m: int, k: int, n: int, tile: tuple[int, int] | None, block: int | None,
    dtype: type, seed: int,
) -> None:  # fmt: skip
    rng = np.random.default_rng(seed)
    text = SOURCES[name] if dtype == np.float32 else SOURCES[name].replace("float(", "double(")
    arrays = _arrays(name, m, k, n, dtype, rng)
    options = Options(threads=2, register_tile=16, tile=tile, block=block)
    _check(text, arrays, options)


TRANSPOSED = {
    "abt": ("def abt(float(M, K) A, float(N, K) B) -> (C) { C(m, n) +=! A(m, k) * B(n, k) }"),
    "grad": (  # matmul's A_grad: lanes along k, B(k, n) read transposed, summed over n
        "def ag(float(M, N) G, float(K, N) B) -> (C) { C(m, k) +=! G(m, n) * B(k, n) }"
    ),
    "offset": (
        "def abo(float(M, K) A, float(N, K) B) -> (C) "
        "{ C(m, n) +=! A(m, k) * B(n + 1, k) * 0.5 where n in 0:N - 1 }"
    ),
    "accumulate": "def aba(float(M, K) A, float(N, K) B) -> (C) { C(m, n) += A(m, k) * B(n, k) }",
    "max": "def abm(float(M, K) A, float(N, K) B) -> (C) { C(m, n) max=! A(m, k) * B(n, k) }",
}


@settings(max_examples=16, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    name=st.sampled_from(sorted(TRANSPOSED)),
    m=st.sampled_from([1, 3, 8, 13, 67, 130]),
    k=st.sampled_from([1, 2, 31, 259]),
    n=st.sampled_from([1, 15, 32, 33, 47, 97]),
    tile=st.sampled_from([None, (8, 5), (3, 2)]),
    panels=st.booleans(),
    dtype=st.sampled_from([np.float32, np.float64]),
    seed=st.integers(0, 2**16),
)
def test_transposed_panels_match_the_reference(
    name: str, m: int, k: int, n: int, tile: tuple[int, int] | None, panels: bool,
    dtype: type, seed: int,
) -> None:  # fmt: skip
    # `panels`: the run-time test takes the panels for any rows (else the model's:
    # the dot tile below panel_rows() rows or PANEL_LANES columns, as at these sizes)
    from compiler.cpu import alternatives, cpu_registers

    rng = np.random.default_rng(seed)
    text = (
        TRANSPOSED[name] if dtype == np.float32 else TRANSPOSED[name].replace("float(", "double(")
    )
    a = rng.standard_normal((m, k)).astype(dtype)
    b = rng.standard_normal((n + (name == "offset"), k)).astype(dtype)
    arrays = [a, b]  # for "grad": G(M, N) is (m, k) and B(K, N) is (n, k)
    out = rng.standard_normal((m, n)).astype(dtype) if name == "accumulate" else None
    with pytest.MonkeyPatch.context() as patch:
        if panels:
            patch.setattr(cpu_registers, "PANEL_ROWS", 1)
            patch.setattr(cpu_registers, "PANEL_ROWS_16", 1)
            patch.setattr(alternatives, "PANEL_LANES", 1)
        _check(text, arrays, Options(threads=2, tile=tile), out, _PANELS if panels else None)


def test_a_b_transposed_copies_its_panels_transposed() -> None:
    f = _lowered(TRANSPOSED["abt"], Options(vector_bits=512))
    (alloc,) = find(f.body, L.Alloc)  # no full transposed copy of B, only its panels
    assert alloc.buffer.name == "B.pack1"
    (copy,) = [s for s in find(f.body, L.Store) if s.buffer.name == alloc.buffer.name]
    (load,) = find(copy, L.Load)
    assert load.buffer.name == "B" and L.print_expr(load.index[-1]) == "k"
    # each `k` gathers a column of the panel's rows into one panel row: the lanes are
    # the innermost loop, a VECTOR loop, and its part is vectorised (not moves-only)
    loops = [lp for lp in find(f.body, L.For) if copy in find(lp, L.Store)]
    assert [lp.var for lp in loops[-2:]] == ["k", "n_lane"]
    assert loops[-1].kind is L.LoopKind.VECTOR
    parallel = [lp for lp in loops if lp.kind is L.LoopKind.PARALLEL]
    assert parallel and not llvm_parallel.moves_only(parallel[-1].body)
    # the dot tile runs instead below panel_rows() rows or PANEL_LANES columns (`RowsCheck`)
    conditions = [L.print_expr(s.cond) for s in find(f.body, L.If)]
    assert "M - 0 < 256 || N - 0 < 64" in conditions


@pytest.mark.parametrize("size", [(1, 1, 1), (5, 7, 17), (67, 259, 33)])
def test_accumulating_matmul_adds_to_the_given_output(size: tuple[int, int, int]) -> None:
    m, k, n = size
    rng = np.random.default_rng(m)
    text = "def acc(float(M, K) A, float(K, N) B) -> (C) { C(m, n) += A(m, k) * B(k, n) }"
    arrays = [rng.standard_normal((m, k)).astype(np.float32) for _ in range(1)]
    arrays.append(rng.standard_normal((k, n)).astype(np.float32))
    out = rng.standard_normal((m, n)).astype(np.float32)
    _check(text, arrays, Options(threads=2, register_tile=16), out=out)


def _lowered(text: str, options: Options) -> L.Function:
    return lower(infer_ranges(check_def(parse(text).defs[0])), options)


@pytest.mark.parametrize("block", [None, 5, 7])
def test_a_packed_row_tile_holds_whole_register_tiles(block: int | None) -> None:
    # a row tile that is not a multiple of the register tile's rows would run its last
    # rows one at a time in every tile (6-row tiles in 128 rows: 20% slower)
    text = print_function(_lowered(MATMUL, Options(block=block)))
    rows = cpu_registers.packed_cache_tile(Options())[0]
    tile = 6 if block is None else block  # 6 rows of 16 lanes with AVX2 (conftest)
    expect = rows // tile * tile
    assert f"m = {expect} * m_t; m < {expect} * m_t + " in text
    assert f"{rows} * m_t" not in text or expect == rows


def test_the_model_packs_a_matmul_panel() -> None:
    f = _lowered(MATMUL, Options())
    (alloc,) = find(f.body, L.Alloc)
    assert alloc.buffer.name.startswith("B.pack")
    steps = cpu_registers.packed_cache_tile(Options())[1]  # 384 with AVX2 (conftest)
    assert alloc.buffer.shape[1:] == (L.Const(steps, L.DType.INT64), L.Const(16, L.DType.INT64))
    # shared by the threads: allocated once around the reduction's cache tiles; each
    # tile's panel is copied by one parallel loop, then read by the parallel row tiles
    k_t = alloc.body
    assert isinstance(k_t, L.For) and (k_t.var, k_t.kind) == ("k_t", L.LoopKind.SERIAL)
    assert isinstance(k_t.body, L.Block)
    copy, rows, rest = k_t.body.stmts
    assert isinstance(copy, L.For) and copy.kind is L.LoopKind.PARALLEL
    # the threads split the (row tile, panel column) pairs; the remainder columns
    # (`N % 16`) run in a second parallel loop over the row tiles
    assert isinstance(rows, L.For) and (rows.var, rows.kind) == ("pair", L.LoopKind.PARALLEL)
    assert isinstance(rest, L.For) and (rest.var, rest.kind) == ("m_t", L.LoopKind.PARALLEL)
    lets = [s.var for s in find(rows, L.Let)][:2]
    assert lets == ["m_t", "n"]
    # the full tiles' lanes read the panel, never B: B is read by the copy and the
    # remainder (narrower tiles, `cpu.regtile.MIN_LANES`, then memory form)
    reads = {
        frozenset(x.buffer.name for x in find(lanes, L.Load))
        for lanes in find(f.body, L.For)
        if lanes.kind is L.LoopKind.UNROLL
    }
    assert reads == {frozenset({"A", alloc.buffer.name}), frozenset({"A", "B"})}
    tiles = find(rest, L.For)  # the remainder's tiles: 8 lanes, 4 lanes, then single columns
    assert sorted({t.step for t in tiles if t.var == "n"}) == [1, 4, 8]
    copies = [s for s in find(f.body, L.Store) if s.buffer.name == alloc.buffer.name]
    assert len(copies) == 1 and {x.buffer.name for x in find(copies[0], L.Load)} == {"B"}


@pytest.mark.parametrize("pool", POOLS)
@pytest.mark.parametrize("size", [(1, 1, 1), (67, 259, 33), (130, 300, 70)])
@pytest.mark.parametrize("name", ["matmul", "transposed"])
def test_a_shared_panel_is_copied_before_any_thread_reads_it(
    pool: str, size: tuple[int, int, int], name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # every parallel loop on threads, however small (the grain rule would keep these
    # on the caller): several reduction tiles, each copied by the threads, then read;
    # A(k, m) is read from row panels that each thread copies for its row tile
    monkeypatch.setattr(llvm_parallel, "GRAIN", 0)
    m, k, n = size
    rng = np.random.default_rng(k)
    a, b = _arrays(name, m, k, n, np.float64, rng)
    c = np.full((m, n), np.nan)
    f = _lowered(SOURCES[name].replace("float(", "double("), Options(tile=(8, 64)))
    compile_function(f)({"A": a, "B": b, "C": c}, {"M": m, "K": k, "N": n}, threads=3, pool=pool)
    want = a @ b if name == "matmul" else a.T @ b
    np.testing.assert_allclose(c, want, rtol=1e-12, atol=1e-12)


def test_a_read_a_row_apart_for_every_k_is_packed_in_row_panels() -> None:
    # C(m, n) +=! A(k, m) * B(k, n): the 4 rows of a block read A(k, m..m+3), one
    # cache line a row of A apart for every k; a row panel holds them contiguously
    # (128 steps of 4 rows with AVX-512: cpu_registers.packed_lanes)
    f = _lowered(SOURCES["transposed"], Options(vector_bits=512))
    (rows,) = [a for a in find(f.body, L.Alloc) if a.buffer.name.startswith("A.rows")]
    assert rows.buffer.shape[1:] == (L.Const(128, L.DType.INT64), L.Const(4, L.DType.INT64))
    unrolled = [u for u in find(f.body, L.For) if u.kind is L.LoopKind.UNROLL]
    loads = {frozenset(x.buffer.name for x in find(u, L.Load)) for u in unrolled}
    assert loads == {
        frozenset({rows.buffer.name, "B.pack1"}),
        frozenset({"A", "B.pack1"}),
        frozenset({"A", "B"}),
    }
    # (the row blocks read the panel; the remainder rows, single, read A itself; the
    # remainder columns' narrower tiles read A and B)
    # matmul's A(m, k) is contiguous along k: no row panel
    allocs = find(_lowered(MATMUL, Options()).body, L.Alloc)
    assert not [a for a in allocs if ".rows" in a.buffer.name]


def test_two_reads_a_row_apart_each_get_a_row_panel() -> None:
    # A(k, m) and D(k, m): one mutator rewrites both (each once left its copy unread)
    src = (
        "def f(float(K, M) A, float(K, M) D, float(K, N) B) -> (C) "
        "{ C(m, n) +=! A(k, m) * D(k, m) * B(k, n) }"
    )
    f = _lowered(src, Options(vector_bits=512))
    panels = {a.buffer.name for a in find(f.body, L.Alloc) if ".rows" in a.buffer.name}
    assert {p.split(".")[0] for p in panels} == {"A", "D"}
    unrolled = [u for u in find(f.body, L.For) if u.kind is L.LoopKind.UNROLL]
    assert any(panels <= {x.buffer.name for x in find(u, L.Load)} for u in unrolled)
    rng = np.random.default_rng(1)
    a, d, b = (rng.standard_normal(s).astype(np.float32) for s in ((37, 19), (37, 19), (37, 33)))
    got = compiler.define(src, options=Options(threads=2), cache=False)(a, d, b)
    np.testing.assert_allclose(np.asarray(got).reshape(19, 33), (a * d).T @ b, rtol=1e-4, atol=1e-4)


def test_no_packing_without_a_strided_panel_or_a_register_tile() -> None:
    # the same contraction in memory form (register_tile=1) has nothing to pack
    assert not find(_lowered(MATMUL, Options(register_tile=1)).body, L.Alloc)
    # B(n, k) with a forced block: the dot-product form (transposed panels are the
    # model's own choice; a batched one takes them: test_batched_products_...)
    dot = "def d(float(M, K) A, float(N, K) B) -> (C) { C(m, n) +=! A(m, k) * B(n, k) }"
    assert not find(_lowered(dot, Options(block=2)).body, L.Alloc)


def test_matmul_gradient_matches_finite_differences() -> None:
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((19, 37)), rng.standard_normal((37, 21))
    kernel = compiler.define(MATMUL.replace("float(", "double("), cache=None)
    packed = compiler.pipeline.run(kernel.text, upto="lower", grad=True)
    assert ".pack" in compiler.pipeline.dump(packed)  # B_grad's panel of C_grad
    compiler.gradcheck(kernel, a, b)  # raises GradcheckError on a mismatch


def test_a_panel_under_another_alloc_is_still_one_per_thread() -> None:
    # a transposed copy (cpu.transpose) allocated around the parallel row tiles: the
    # panel that each iteration fills goes inside the parallel loop, not around it
    from compiler.cpu.pack import _hoist
    from tests.codegen.kit import F32, buf, load, pfor, store

    src, panel, t = buf("B", F32, "N"), buf("B.pack1", F32, 16), buf("B.t0", F32, "N")
    fill = store(panel, (0,), load(t, 0))
    copy = pfor("i", 0, "N", store(t, ("i",), load(src, "i")))
    nest = L.Alloc(t, L.Block((copy, pfor("p", 0, "N", fill))))
    placed = _hoist(nest, [panel])
    assert isinstance(placed, L.Alloc) and placed.buffer.name == "B.t0"
    (rows,) = [s for s in find(placed, L.For) if s.var == "p"]
    assert isinstance(rows.body, L.Alloc) and rows.body.buffer.name == "B.pack1"


BATCHED = (
    "def qkt(float(B, T, E) Q, float(B, T, E) K) -> (S) {\n"
    "    S(b, i, j) +=! Q(b, i, e) * K(b, j, e)\n}"
)


def test_batched_products_take_transposed_panels_per_batch() -> None:
    """Attention's `Q K^T`: the panels of `K` are copied inside the parallel batch loop
    (each thread's own), with the dot tile as the run-time alternative."""
    f = _lowered(BATCHED, Options(vector_bits=512))
    conditions = [L.print_expr(s.cond) for s in find(f.body, L.If)]
    assert "T - 0 < 256 || T - 0 < 64" in conditions
    packs = [a for a in find(f.body, L.Alloc) if ".pack" in a.buffer.name]
    assert packs
    parallel = [lp for lp in find(f.body, L.For) if lp.kind is L.LoopKind.PARALLEL]
    assert any(packs[0] in find(lp, L.Alloc) and lp.var == "b" for lp in parallel)


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    b=st.integers(1, 3),
    t=st.sampled_from([1, 5, 31, 32, 33, 70]),
    e=st.sampled_from([1, 3, 16, 67, 300]),
    panels=st.booleans(),
    seed=st.integers(0, 2**16),
)
def test_batched_transposed_panels_match_the_reference(
    b: int, t: int, e: int, panels: bool, seed: int
) -> None:
    from compiler.cpu import alternatives, cpu_registers

    rng = np.random.default_rng(seed)
    arrays = [rng.standard_normal((b, t, e)).astype(np.float32) for _ in range(2)]
    with pytest.MonkeyPatch.context() as patch:
        if panels:
            patch.setattr(cpu_registers, "PANEL_ROWS", 1)
            patch.setattr(cpu_registers, "PANEL_ROWS_16", 1)
            patch.setattr(alternatives, "PANEL_LANES", 1)
        _check(BATCHED, arrays, Options(threads=2), None, _PANELS if panels else None)
