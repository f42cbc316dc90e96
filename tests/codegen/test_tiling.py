"""Cache tiling (`Options.tile`, `compiler/cpu/tiling.py`): every tiling computes
what target="interp" computes — matmul, batched matmul, conv2d, a convolution's input
gradient in gather form — with sizes that are not multiples of the tiles and sizes
smaller than a tile, in float32 and float64, on 1 and 2 threads. Also: the options are
validated, the default model tiles contractions with one reduction loop and nothing
else, the tile loops sit above the point loops with the parallel loop outermost, and
a later reduction loop is never tiled."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from compiler import loops as L
from compiler import pipeline
from compiler.cpu.model import lower
from compiler.cpu.tiling import COLUMNS, OUTER, REDUCTION, ROWS
from compiler.diagnostics import OptionsError
from compiler.frontend.check import check_def
from compiler.frontend.parser import parse
from compiler.kernel import define
from compiler.options import Options
from compiler.poly.ranges import infer_ranges
from tests.codegen.kit import find as _find

PROGRAMS = {
    "matmul": "def f(FT(M, K) A, FT(K, N) B) -> (C) { C(m, n) +=! A(m, k) * B(k, n) }",
    "bmm": "def f(FT(B, M, K) X, FT(B, K, N) Y) -> (Z) { Z(b, m, n) +=! X(b, m, k) * Y(b, k, n) }",
    "conv2d": "def f(FT(N, C, H, W) I, FT(M, C, KH, KW) W1) -> (O) "
    "{ O(n, m, h, w) +=! I(n, c, h + kh, w + kw) * W1(m, c, kh, kw) }",
    "conv_input_grad": "def f(FT(N, M, H, W) G, FT(M, C, KH, KW) W1) -> (IG) "
    "{ IG(n, c, h + kh, w + kw) +=! G(n, m, h, w) * W1(m, c, kh, kw) }",
    "exp_contract": "def f(FT(M, K) A, FT(K, N) B) -> (E, C) "
    "{ E(m, k) = exp(A(m, k))  C(m, n) +=! E(m, k) * B(k, n) }",
    # one output variable, reduced over the rows: a column reduction (strip-mined)
    "column_sum": "def f(FT(M, N) A, FT(M) G) -> (S) { S(n) +=! G(m) * exp(A(m, n)) }",
}
SIZES = {"B": 3, "M": 11, "K": 13, "N": 19, "C": 5, "H": 7, "W": 9, "KH": 3, "KW": 2}
TINY = {"B": 1, "M": 1, "K": 2, "N": 3, "C": 1, "H": 2, "W": 3, "KH": 2, "KW": 1}

TILINGS = [
    Options(),  # the model: sizes smaller than its tiles
    Options(tile=(4, 5, 8)),  # several partial tiles in every tiled loop
    Options(tile=(1, 3, 2, 5), unroll=2, block=3),  # the first loop hoisted whole
    Options(tile=(2, 2, 2, 2, 2, 2, 4), unroll=1, block=1),  # later reductions: ignored
    Options(tile=(3,)),  # only the outermost loop
]
CASES = [(o, "float", t, SIZES) for o in TILINGS for t in (1, 2)]
CASES += [(o, "double", 2, SIZES) for o in TILINGS[:2]]
CASES += [(o, "float", 2, TINY) for o in TILINGS[:3]]


def _inputs(src: str, sizes: dict[str, int], rng: np.random.Generator) -> list[np.ndarray]:
    d = parse(src).get()
    dtype = np.float64 if "double" in src else np.float32
    return [
        rng.standard_normal([sizes[str(getattr(e, "name", e))] for e in p.dims]).astype(dtype)
        for p in d.params
    ]


@pytest.mark.parametrize(("options", "ft", "threads", "sizes"), CASES, ids=repr)
@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_tiled_equals_interp(
    name: str, options: Options, ft: str, threads: int, sizes: dict[str, int]
) -> None:
    src = PROGRAMS[name].replace("FT", ft)
    arrays = _inputs(src, sizes, np.random.default_rng(len(name)))
    expected = define(src, target="interp")(*arrays)
    options = Options(threads, options.innermost, options.unroll, options.block, options.tile)
    got = define(src, target="llvm", options=options)(*arrays)
    got = got if isinstance(got, tuple) else (got,)
    expected = expected if isinstance(expected, tuple) else (expected,)
    for e, g in zip(expected, got, strict=True):
        tol = 1e-4 if g.dtype == np.float32 else 1e-11
        np.testing.assert_allclose(g, e, rtol=tol, atol=tol)


@pytest.mark.parametrize("tile", [[4], (0, 2), (2, True), (1.5,), (2, 1 << 21), "64"], ids=repr)
def test_bad_tiles_are_options_errors(tile: object) -> None:
    with pytest.raises(OptionsError, match="Options.tile"):
        Options(tile=tile)  # type: ignore[arg-type]


def _loops(s: L.Node) -> list[L.For]:
    found: list[L.For] = []

    class _V(L.Visitor):
        def visit_For(self, node: L.For) -> None:
            found.append(node)
            self.generic_visit(node)

    _V().visit(s)
    return found


def _main_nest(name: str, options: Options) -> L.Stmt:
    src = PROGRAMS[name].replace("FT", "float")
    options = dataclasses.replace(options, fuse=False)  # the init nest stays apart
    f = pipeline.lower(infer_ranges(check_def(parse(src).get())), options).function
    return f.body.stmts[-1] if isinstance(f.body, L.Block) else f.body


def test_model_tiles_matmul_above_the_point_loops() -> None:
    main = _main_nest("matmul", Options(unroll=1, block=1, register_tile=1))
    assert [lp.var for lp in _loops(main)] == ["m_t", "k_t", "m", "k", "n"]
    assert isinstance(main, L.For) and main.kind is L.LoopKind.PARALLEL
    assert all(lp.kind is L.LoopKind.SERIAL for lp in _loops(main)[1:])
    m, k = _loops(main)[2:4]
    assert L.Bin(L.BinOp.MUL, L.Const(OUTER, L.DType.INT64), L.VarRef("m_t")) == m.lo
    assert L.Bin(L.BinOp.MUL, L.Const(REDUCTION, L.DType.INT64), L.VarRef("k_t")) == k.lo


def test_model_keeps_the_batch_loop_parallel_and_outermost() -> None:
    main = _main_nest("bmm", Options(unroll=1, block=1, register_tile=1))
    assert [lp.var for lp in _loops(main)] == ["b", "m_t", "k_t", "m", "k", "n"]
    assert isinstance(main, L.For) and main.kind is L.LoopKind.PARALLEL


def test_model_does_not_tile_convolutions_and_tile_off_is_untiled() -> None:
    conv = [
        lp.var for lp in _loops(_main_nest("conv2d", Options(unroll=1, block=1, register_tile=1)))
    ]
    assert not any(v.endswith("_t") for v in conv)
    plain = [
        lp.var
        for lp in _loops(_main_nest("matmul", Options(unroll=1, block=1, register_tile=1, tile=())))
    ]
    assert plain == ["m", "k", "n"]


def test_only_the_first_reduction_loop_is_tiled() -> None:
    main = _main_nest(
        "conv2d", Options(unroll=1, block=1, register_tile=1, tile=(1, 1, 1, 2, 2, 2, 4))
    )
    names = [lp.var for lp in _loops(main)]
    assert names[:3] == ["n", "c_t", "w_t"]
    assert "kh_t" not in names and "kw_t" not in names


def test_literal_order_ignores_tiles() -> None:
    src = PROGRAMS["matmul"].replace("FT", "float")
    f = lower(infer_ranges(check_def(parse(src).get())), Options(innermost=None, tile=(2, 2, 2)))
    assert not any(lp.var.endswith("_t") for lp in _loops(f.body))


def test_a_column_reduction_runs_in_parallel_strips_with_blocked_sums() -> None:
    main = _main_nest("column_sum", Options(unroll=1))
    # strips of COLUMNS (the parallel loop), blocks of ROWS rows summed in a local
    # strip buffer, then added to the output (cpu.colsum)
    assert [lp.var for lp in _loops(main)] == ["n_t", "m_t", "m", "n", "n"]
    assert isinstance(main, L.For) and main.kind is L.LoopKind.PARALLEL
    (alloc,) = [s for s in _find(main, L.Alloc)]
    assert alloc.buffer.name == "S.strip" and alloc.buffer.shape == (
        L.Const(COLUMNS, L.DType.INT64),
    )
    n = _loops(main)[3]
    assert L.Bin(L.BinOp.MUL, L.Const(COLUMNS, L.DType.INT64), L.VarRef("n_t")) == n.lo
    m_t = _loops(main)[1]
    m = _loops(main)[2]
    assert L.Bin(L.BinOp.MUL, L.Const(ROWS, L.DType.INT64), L.VarRef("m_t")) == m.lo
    assert m_t.kind is L.LoopKind.SERIAL
    # no row blocks: plain strips; the literal order, or no strips: a parallel register sum
    strips = _main_nest("column_sum", Options(unroll=1, tile=(1, COLUMNS)))
    assert [lp.var for lp in _loops(strips)] == ["n_t", "m", "n"] and not _find(strips, L.Alloc)
    for options in (Options(innermost=None), Options(tile=()), Options(tile=(4, 1))):
        plain = _main_nest("column_sum", options)
        assert [lp.var for lp in _loops(plain)] == ["n", "m"]
        assert isinstance(plain, L.For) and plain.kind is L.LoopKind.PARALLEL


@pytest.mark.parametrize("rows", [1, 5, 37])  # sizes are at least 1 in TC
@pytest.mark.parametrize("cols", [1, COLUMNS - 1, COLUMNS, 2 * COLUMNS + 3])
@pytest.mark.parametrize("ft", ["float", "double"])
def test_column_reduction_equals_interp_at_odd_sizes(rows: int, cols: int, ft: str) -> None:
    src = PROGRAMS["column_sum"].replace("FT", ft)
    arrays = _inputs(src, {"M": rows, "N": cols}, np.random.default_rng(rows + cols))
    (expected,) = define(src, target="interp")(*arrays)
    for options in (
        Options(threads=2),
        Options(threads=2, tile=(1, 7)),  # strips without row blocks
        Options(threads=2, tile=(3, 7)),  # blocks of 3 rows, the last one partial
        Options(threads=2, tile=(5, 7), unroll=2),  # jammed rows with a remainder per block
    ):
        (got,) = define(src, target="llvm", options=options)(*arrays)
        tol = 1e-5 if ft == "float" else 1e-12
        np.testing.assert_allclose(got, expected, rtol=tol, atol=tol)


@pytest.mark.parametrize(
    "stmt", ["S(n) max=! A(m, n)", "S(n) += A(m, n) * 2", "S(n) +=! A(m, n) where m in 0:M"]
)
def test_other_column_reductions_equal_interp(stmt: str) -> None:
    # max: strips without the buffer (exact anyway); `+=`: the blocks add to the given S
    src = f"def f(float(M, N) A) -> (S) {{ {stmt} }}"
    rng = np.random.default_rng(3)
    a = rng.standard_normal((37, 2 * COLUMNS + 3)).astype(np.float32)
    out = rng.standard_normal(2 * COLUMNS + 3).astype(np.float32) if "+= " in stmt else None
    extra = {"out": (out.copy(),)} if out is not None else {}
    (expected,) = define(src, target="interp")(a, **extra)
    extra = {"out": (out.copy(),)} if out is not None else {}
    (got,) = define(src, target="llvm", options=Options(tile=(5, 7)))(a, **extra)
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)


def test_default_column_sums_stay_accurate_over_many_rows() -> None:
    # the strips' blocks of ROWS rows (cpu.colsum) keep the sum as accurate as the
    # literal order's blocked, compensated register sum (1.4e-5 and 1.6e-5 here)
    a = np.full((1 << 20, 4), 0.1, np.float32)
    (got,) = define("def f(float(M, N) A) -> (S) { S(n) +=! A(m, n) }")(a)
    np.testing.assert_allclose(got, a.astype(np.float64).sum(0), rtol=1e-4)
