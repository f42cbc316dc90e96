"""Register-tiled contractions (`compiler/cpu/regtile.py`) against the reference
evaluator: convolutions with strides and dilations, odd sizes (1, primes, extents
below and between multiples of the lane count), `+=!` and accumulating `+=`, forced
and model-chosen lane counts; and the shape of the generated loops."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import compiler
from compiler import loops as L
from compiler.cpu.llvm_emit import SUM_BLOCK
from compiler.cpu.model import lower
from compiler.frontend.check import check_def
from compiler.frontend.parser import parse
from compiler.options import Options
from compiler.poly.ranges import infer_ranges
from tests.codegen.kit import find as _find
from tests.codegen.kit import reference_and_llvm

# one register tile per nest: no versions for fewer rows than its block (conftest)
pytestmark = pytest.mark.usefixtures("no_few_rows")


def conv_source(stride: int, dilation: int, op: str = "+=!", name: str = "conv") -> str:
    h = f"{stride} * h + {dilation} * kh" if stride > 1 or dilation > 1 else "h + kh"
    w = f"{stride} * w + {dilation} * kw" if stride > 1 or dilation > 1 else "w + kw"
    return (
        f"def {name}(float(N, C, H, W) I, float(M, C, KH, KW) W1) -> (O) {{\n"
        f"    O(n, m, h, w) {op} I(n, c, {h}, {w}) * W1(m, c, kh, kw)\n}}"
    )


def _check(
    text: str, arrays: list[np.ndarray], options: Options, out: np.ndarray | None = None
) -> None:
    e, g = reference_and_llvm(text, arrays, options, out)
    np.testing.assert_allclose(
        g, e, rtol=2e-5, atol=2e-5 * max(1.0, float(np.abs(e).max(initial=0)))
    )


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    n=st.sampled_from([1, 2]),
    c=st.sampled_from([1, 3]),
    m=st.sampled_from([1, 2, 5, 7]),
    kh=st.sampled_from([1, 2, 3]),
    kw=st.sampled_from([1, 3]),
    out_w=st.sampled_from([1, 7, 15, 16, 17, 31, 33, 47]),
    out_h=st.sampled_from([1, 3]),
    stride=st.sampled_from([1, 2, 3]),
    dilation=st.sampled_from([1, 2]),
    lanes=st.sampled_from([None, 4, 8, 16]),
    block=st.sampled_from([None, 1, 3]),
    seed=st.integers(0, 2**16),
)
def test_convolutions_match_the_reference(
    n: int, c: int, m: int, kh: int, kw: int, out_w: int, out_h: int, stride: int,
    dilation: int, lanes: int | None, block: int | None, seed: int,
) -> None:  # fmt: skip
    rng = np.random.default_rng(seed)
    height = stride * (out_h - 1) + dilation * (kh - 1) + 1
    width = stride * (out_w - 1) + dilation * (kw - 1) + 1
    arrays = [
        rng.standard_normal((n, c, height, width)).astype(np.float32),
        rng.standard_normal((m, c, kh, kw)).astype(np.float32),
    ]
    text = conv_source(stride, dilation, name=f"conv_{stride}_{dilation}")
    _check(text, arrays, Options(threads=2, register_tile=lanes, block=block))


@pytest.mark.parametrize("width", [5, 16, 29])
def test_accumulating_without_init_adds_to_the_given_output(width: int) -> None:
    rng = np.random.default_rng(width)
    arrays = [
        rng.standard_normal((2, 3, 4, width + 2)).astype(np.float32),
        rng.standard_normal((4, 3, 3, 3)).astype(np.float32),
    ]
    out = rng.standard_normal((2, 4, 2, width)).astype(np.float32)
    text = conv_source(1, 1, op="+=", name="conv_acc")
    _check(text, arrays, Options(register_tile=8), out=out)


@pytest.mark.parametrize("shape", [(1, 1, 1), (5, 300, 45), (37, 129, 16), (8, 3, 33)])
def test_forced_register_tile_on_matmul_with_cache_tiles(shape: tuple[int, int, int]) -> None:
    m, k, n = shape
    rng = np.random.default_rng(m * k)
    text = "def mm(float(M, K) A, float(K, N) B) -> (C) { C(m, n) +=! A(m, k) * B(k, n) }"
    arrays = [
        rng.standard_normal((m, k)).astype(np.float32),
        rng.standard_normal((k, n)).astype(np.float32),
    ]
    _check(text, arrays, Options(register_tile=16))


def _lowered(text: str, options: Options) -> L.Function:
    return lower(infer_ranges(check_def(parse(text).get())), options)


def test_the_full_tile_keeps_outputs_in_locals_without_guards() -> None:
    # lanes along w, as asked (the model would take a strided conv's lanes along m)
    f = _lowered(conv_source(2, 1), Options(innermost="w", register_tile=8, block=2))
    tiles = [lp for lp in _find(f.body, L.For) if lp.var == "w" and lp.step == 8]
    # one tile loop for the blocked output channels (2 x 8 accumulators), one for the
    # channel left over when M is odd (1 x 8); each in both reduction orders
    # (`cpu.aliasing`: the run-time alias test picks one)
    assert sorted(len(_find(t.body, L.Local)) for t in tiles) == [8, 8, 16, 16]
    for tile in tiles:
        assert not _find(tile.body, L.If)  # full tiles: no guard inside
        reads = [ld for ld in _find(tile.body, L.Load) if ld.buffer.name == "O"]
        assert not reads  # `+=!` after its Init: the accumulators start at 0


def test_the_model_register_tiles_convolutions_and_packed_matmul_only() -> None:
    conv = _lowered(conv_source(1, 1), Options())
    assert any(lp.var == "w" and lp.step == 16 for lp in _find(conv.body, L.For))
    mm = _lowered(
        "def mm(float(M, K) A, float(K, N) B) -> (C) { C(m, n) +=! A(m, k) * B(k, n) }", Options()
    )
    # a one-loop contraction is register-tiled only with its panel packed (cpu.pack)
    # (the full tiles' `n` is bound per (row tile, column) pair, `cpu.pack._spread`;
    # the remainder columns keep their loop)
    (pack,) = _find(mm.body, L.Alloc)
    assert pack.buffer.name == "B.pack1" and pack.buffer.shape[-1] == L.Const(16, L.DType.INT64)
    assert [lt.var for lt in _find(mm.body, L.Let)][:2] == ["m_t", "n"]
    # no read along n moves with k (B(m, n) is fixed over the sum): nothing to pack,
    # no register tile
    row = _lowered(
        "def rs(float(M, K) A, float(M, N) B) -> (C) { C(m, n) +=! A(m, k) * B(m, n) }", Options()
    )
    assert not any(lp.step == 16 for lp in _find(row.body, L.For))
    assert not _find(row.body, L.Alloc)


def test_conv_gradients_are_register_tiled_and_correct() -> None:
    text = conv_source(1, 1, name="convg")
    k = compiler.define(text, target="llvm", cache=None)
    rng = np.random.default_rng(3)
    i = rng.standard_normal((2, 3, 9, 21)).astype(np.float32)
    w = rng.standard_normal((4, 3, 3, 3)).astype(np.float32)
    (o,) = k(i, w)
    g = rng.standard_normal(o.shape).astype(np.float32)
    ref = compiler.define(text, target="interp")
    got = k.vjp(i, w, grad_outputs=(g,))
    want = ref.vjp(i, w, grad_outputs=(g,))
    for a, b in zip(got, want, strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-4)


LINEAR = "def lin(float(B, I) X, float(O, I) W) -> (Y) { Y(b, o) +=! X(b, i) * W(o, i) }"
SCORES = (
    "def scores(float(B, T, E) Q, float(B, S, E) K) -> (A) {\n"
    "    A(b, t, s) +=! Q(b, t, e) * K(b, s, e)\n}"
)


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    b=st.sampled_from([1, 2, 3, 5]),
    o=st.sampled_from([1, 3, 4, 9]),
    i=st.sampled_from([1, 17, 64, 2053, 4099]),
    seed=st.integers(0, 2**16),
)
def test_dot_product_tiles_match_the_reference(b: int, o: int, i: int, seed: int) -> None:
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((b, i)).astype(np.float32)
    w = rng.standard_normal((o, i)).astype(np.float32)
    _check(LINEAR, [x, w], Options(threads=2))


@settings(max_examples=16, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    b=st.sampled_from([1, 4, 5, 13, 67]),
    o=st.sampled_from([1, 3, 9, 131]),
    i=st.sampled_from([1, 17, 259, 2053]),
    tile=st.sampled_from([None, (1, 5), (3, 5), (8, 1), (1, 128)]),
    dtype=st.sampled_from([np.float32, np.float64]),
    seed=st.integers(0, 2**16),
)
def test_cache_tiled_dot_tiles_match_the_reference(
    b: int, o: int, i: int, tile: tuple[int, int] | None, dtype: type, seed: int
) -> None:
    # blocks of the columns (`o`) that do not divide them, the rows' jam remainder, and
    # the swapped alternative (131 x 2053 floats streamed: `o` outside) with its tiles
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((b, i)).astype(dtype)
    w = rng.standard_normal((o, i)).astype(dtype)
    text = LINEAR if dtype == np.float32 else LINEAR.replace("float(", "double(")
    _check(text, [x, w], Options(threads=2, tile=tile))


def test_a_dot_tile_streams_rows_through_blocks_of_columns() -> None:
    from compiler.cpu.tiling import DOT_COLUMNS
    from compiler.loops.printer import print_expr

    f = _lowered(LINEAR, Options())
    # the dot tile: transposed panels' run-time alternative for few rows
    (dot,) = [s.then for s in _find(f.body, L.If) if "B - 0 < 64" in print_expr(s.cond)]
    loops = [lp for lp in _find(dot, L.For) if lp.var in ("o_t", "b_t")]
    # both orders (`cpu.alternatives.SwapCheck` picks one at run time): the blocks of the
    # inner jammed loop run serially, the rows inside them are the parallel loop
    assert sorted(lp.var for lp in loops) == ["b_t", "o_t"]
    for block in loops:
        assert block.kind is L.LoopKind.SERIAL
        inner = _find(block.body, L.For)
        rows = "o" if block.var == "b_t" else "b"
        assert inner[0].kind is L.LoopKind.PARALLEL and inner[0].var == rows
        first = f"{DOT_COLUMNS} * {block.var}"
        assert any(lp.var == block.var[0] and print_expr(lp.lo) == first for lp in inner)


def test_attention_scores_are_dot_tiled_and_correct() -> None:
    rng = np.random.default_rng(5)
    q = rng.standard_normal((2, 7, 33)).astype(np.float32)
    k = rng.standard_normal((2, 5, 33)).astype(np.float32)
    _check(SCORES, [q, k], Options())
    f = _lowered(SCORES, Options())
    assert len(_find(f.body, L.Local)) >= 8  # 2 x 4 accumulators in the full tile
    assert not _find(_lowered(SCORES, Options(register_tile=1)).body, L.Local)[1:]


def test_long_dot_products_are_summed_in_blocks() -> None:
    n = 200_003
    x = np.full((3, n), 0.1, np.float32)
    w = np.ones((5, n), np.float32)
    (y,) = compiler.define(LINEAR, target="llvm", cache=None)(x, w)
    exact = n * float(np.float32(0.1))
    # the bound of a blocked sum whose blocks are not split into vector lanes
    # (measured: 3.5e-5 relative in the 2 x 4 tile, 5.8e-7 in the remainder; one
    # running sum: about 1e-3)
    bound = (SUM_BLOCK + 2) * float(np.finfo(np.float32).eps) / 2
    assert np.all(np.abs(y - exact) <= bound * exact)


def test_lane_loops_are_left_to_slp() -> None:
    from compiler.cpu import build_module

    f = _lowered(conv_source(2, 1), Options(register_tile=16))
    text = str(build_module(f))
    assert "llvm.loop.vectorize.width" in text
    assert ".partial" not in text  # lane loops are short: never split into sum blocks


def _reduction_orders(s: L.Node) -> set[tuple[str, ...]]:
    """Per tile loop `w` in `s`, the reduction loops inside it, outermost first."""
    tiles = [lp for lp in _find(s, L.For) if lp.var == "w" and lp.step > 1]
    return {
        tuple(lp.var for lp in _find(t.body, L.For) if lp.var in ("c", "kh", "kw")) for t in tiles
    }


def test_the_channel_loop_runs_innermost_with_the_literal_order_as_alternative() -> None:
    from compiler.loops.printer import print_expr

    f = _lowered(conv_source(1, 1), Options())
    # the run-time test on the planes (`cpu.aliasing`): a test on the sizes that picks
    # one of two tiled nests
    (version,) = [
        s
        for s in _find(f.body, L.If)
        if s.otherwise is not None and _find(s.then, L.Local) and "floormod" in print_expr(s.cond)
    ]
    assert _reduction_orders(version.then) == {("c", "kh", "kw")}  # when the planes alias
    assert _reduction_orders(version.otherwise) == {("kh", "kw", "c")}


@pytest.mark.parametrize(
    ("h", "k", "dtype"),
    [
        (16, 3, np.float32),  # 16 * 16 * 4 bytes: aliasing planes, the literal order runs
        (16, 1, np.float32),  # one window point: the channel loop innermost
        (17, 3, np.float32),  # planes not 1 KiB multiples: the channel loop innermost
        (16, 3, np.float64),  # 2 KiB planes
        (11, 2, np.float64),
    ],
)
def test_both_reduction_orders_match_the_reference(h: int, k: int, dtype: type) -> None:
    rng = np.random.default_rng(h * 10 + k)
    text = (
        conv_source(1, 1).replace("float(", "double(") if dtype is np.float64 else conv_source(1, 1)
    )
    arrays = [
        rng.standard_normal((2, 5, h, h)).astype(dtype),
        rng.standard_normal((7, 5, k, k)).astype(dtype),
    ]
    _check(text, arrays, Options())


@pytest.mark.parametrize("out_w", [17, 28, 33])
def test_the_clamped_last_tile_gives_the_bits_of_a_full_tile(out_w: int) -> None:
    """The last partial tile is the tile loop's last iteration, its start clamped to
    `hi - width` (one copy of the tile's code): its lanes recompute, from the identity
    and in the same order, values already stored. So the outputs of the first 16
    columns equal, bit for bit, those of an input cropped to one full tile, in the
    forward and in the gradient (whose input gradient is tiled too)."""
    rng = np.random.default_rng(out_w)
    text = conv_source(1, 1)
    wide = [
        rng.standard_normal((2, 3, 3, out_w + 2)).astype(np.float32),
        rng.standard_normal((5, 3, 3, 3)).astype(np.float32),
    ]
    narrow = [np.ascontiguousarray(wide[0][..., :18]), wide[1]]
    k = compiler.define(text, options=Options(register_tile=16), cache=False)
    (o_wide,), (o_narrow,) = k(*wide), k(*narrow)
    np.testing.assert_array_equal(o_wide[..., :16], o_narrow)
    g_wide = np.zeros_like(o_wide)
    g_wide[..., :16] = rng.standard_normal(o_narrow.shape).astype(np.float32)
    grads_wide = k.vjp(*wide, grad_outputs=(g_wide,))
    grads_narrow = k.vjp(*narrow, grad_outputs=(np.ascontiguousarray(g_wide[..., :16]),))
    # columns 0..15 of I's gradient read only O_grad columns 0..15 (others are zero)
    np.testing.assert_array_equal(grads_wide[0][..., :16], grads_narrow[0][..., :16])
    lowered = _lowered(text, Options(register_tile=16))
    tiles = [lp for lp in _find(lowered.body, L.For) if lp.var == "w" and lp.step == 16]
    assert tiles and all(isinstance(t.body, L.Let) for t in tiles)  # the clamped start
    assert not [s for s in _find(lowered.body, L.Let) if s.var == "w"]  # no second copy


MATMUL_ACC = "def mma(float(M, K) A, float(K, N) B) -> (C) { C(m, n) += A(m, k) * B(k, n) }"


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    m=st.sampled_from([1, 2, 5, 7]),
    k=st.sampled_from([1, 3, 19]),
    n=st.integers(1, 70),
    lanes=st.sampled_from([8, 16, 32]),
    block=st.sampled_from([None, 1, 3]),
    accumulate=st.booleans(),
    dtype=st.sampled_from([np.float32, np.float64]),
    seed=st.integers(0, 2**16),
)
def test_remainder_columns_in_narrower_tiles_match_the_reference(
    m: int, k: int, n: int, lanes: int, block: int | None, accumulate: bool, dtype: type,
    seed: int,
) -> None:  # fmt: skip
    # cache tiles of the reduction (`tile`) keep the memory form's remainder: the
    # columns after the full tiles run in tiles of lanes / 2, lanes / 4, ... down to
    # `regtile.MIN_LANES`, then one at a time
    rng = np.random.default_rng(seed)
    text = MATMUL_ACC if accumulate else MATMUL_ACC.replace("+=", "+=!")
    if dtype == np.float64:
        text = text.replace("float(", "double(")
    arrays = [rng.standard_normal((m, k)).astype(dtype), rng.standard_normal((k, n)).astype(dtype)]
    out = rng.standard_normal((m, n)).astype(dtype) if accumulate else None
    options = Options(threads=2, register_tile=lanes, block=block, tile=(4, 2))
    e, g = reference_and_llvm(text, arrays, options, out)
    tol = 1e-12 if dtype == np.float64 else 2e-5
    np.testing.assert_allclose(g, e, rtol=tol, atol=tol * max(1.0, float(np.abs(e).max(initial=0))))


def test_the_remainder_columns_of_a_row_block_run_in_narrower_tiles() -> None:
    from compiler.cpu import regtile

    f = _lowered(MATMUL_ACC, Options(register_tile=16, block=3, tile=(4, 2)))
    steps = {lp.step for lp in _find(f.body, L.For) if lp.var == "n"}
    # (the full tiles of 16 are a packed nest's (row tile, column) pairs: `cpu.pack`)
    assert {1, *(w for w in (8, 4) if w >= regtile.MIN_LANES)} <= steps
    # the narrower tiles hold the 3 rows' accumulators in registers
    narrow = [lp for lp in _find(f.body, L.For) if lp.var == "n" and lp.step == 8]
    locals_ = {x.var for lp in narrow for x in _find(lp, L.Local)}
    assert len(locals_) == 3 * 8
