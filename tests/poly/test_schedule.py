"""poly.schedule: nests in textual order, init nests, parallel marks, register
accumulation, snapshots and the reads left to run-time checks."""

from __future__ import annotations

import islpy as isl
import pytest

from compiler.cpu.model import schedule
from compiler.frontend.check import check_def
from compiler.frontend.parser import parse
from compiler.options import Options
from compiler.poly.ranges import infer_ranges
from compiler.poly.schedule import NestKind, Schedule

MATMUL = "def mm(float(M,K) A, float(K,N) B) -> (C) { C(m,n) +=! A(m,k) * B(k,n) }"
CONV = (
    "def conv(float(N,C,H,W) I, float(M,C,KH,KW) W1) -> (O) "
    "{ O(n,m,h,w) +=! I(n,c,h + kh,w + kw) * W1(m,c,kh,kw) }"
)


def _schedule(src: str, options: Options | None = None) -> Schedule:
    return schedule(infer_ranges(check_def(parse(src).get())), options or Options())


def test_matmul_is_one_parallel_accumulating_nest_without_init() -> None:
    s = _schedule(MATMUL, Options(innermost=None))
    (nest,) = s.nests
    assert (nest.kind, nest.outer, nest.inner) == (NestKind.STMT, ("m", "n"), ("k",))
    assert nest.parallel and nest.accumulate and not nest.snapshot
    assert nest.unproven == frozenset()


def test_init_nest_when_the_statement_does_not_cover_the_output() -> None:
    s = _schedule("def f(float(N) A) -> (O) { O(i) +=! A(i - 1) }")
    assert [n.kind for n in s.nests] == [NestKind.INIT, NestKind.STMT]
    init, stmt = s.nests
    assert init.domain.get_tuple_name() == "I0" and init.outer == ("i",) and init.parallel
    box = isl.Set("[N] -> { I0[i] : 0 <= i <= N }")
    assert init.domain.intersect_params(s.context).is_equal(box.intersect_params(s.context))
    assert stmt.accumulate


def test_textual_order_and_inplace_update() -> None:
    s = _schedule("def f(float(N,K) A, float(N) B) -> (O) { O(i) +=! A(i,k)  O(i) = O(i) + B(i) }")
    assert [(n.kind, n.index) for n in s.nests] == [(NestKind.STMT, 0), (NestKind.STMT, 1)]
    assert s.nests[1].parallel and not s.nests[1].snapshot


def test_scatter_is_serial_with_an_init() -> None:
    s = _schedule("def f(float(N) A, float(K) W) -> (O) { O(i + k) +=! A(i) * W(k) }")
    init, stmt = s.nests
    assert init.kind is NestKind.INIT and init.outer == ("d0",)
    assert not stmt.parallel and not stmt.accumulate


def test_reading_another_element_of_the_output_takes_a_snapshot() -> None:
    s = _schedule(
        "def f(float(N) A) -> (O) { O(i) = A(i)  O(i) = O(i) + O(N - 1 - i) where i in 0:N }"
    )
    assert s.nests[1].snapshot and not s.nests[1].parallel


def test_indirect_reads_are_left_to_run_time_checks() -> None:
    s = _schedule("def f(float(V) E, int32(N) idx) -> (O) { O(n) = E(idx(n)) }")
    (nest,) = s.nests
    assert {(a.name, dim) for a, dim in nest.unproven} == {("E", 0)}


def test_context_has_sizes_at_least_one_and_nonnegative_extents() -> None:
    s = _schedule("def f(float(H) I, float(K) W) -> (O) { O(h) +=! I(h + k) * W(k) }")
    expected = isl.Set(
        "[H, K] -> { : H >= 1 and K >= 1 and H - K + 1 >= 0 }"
    )  # sizes are positive; no int64 upper bound (StmtSpace)
    assert s.context.is_equal(expected)


def test_model_puts_the_unit_stride_output_variable_below_the_reduction() -> None:
    init, nest = _schedule(MATMUL).nests
    assert init.kind is NestKind.INIT and init.parallel
    assert (nest.outer, nest.inner, nest.innermost) == (("m",), ("k",), ("n",))
    assert nest.parallel and not nest.accumulate
    # rows of m blocked by 6 (12 of AVX2's 16 vector registers), n in register tiles
    # of 16 lanes whose panel of B is packed (cpu.pack): the lanes replace k's unroll
    assert nest.jams == (("m", 6),) and nest.lanes == 16
    assert nest.tiles == (48, 384, 1)  # cpu_registers.packed_cache_tile with AVX2 (conftest)


@pytest.mark.parametrize(
    ("bits", "conv", "matmul", "dot"),
    [
        (128, (("m", 4),), (("m", 4),), (("j", 4), ("i", 2))),
        (256, (("m", 4),), (("m", 6),), (("j", 4), ("i", 2))),
        (512, (("m", 8),), (("m", 4),), (("j", 4), ("i", 4))),
    ],
)
def test_register_tiles_follow_the_vector_width(bits, conv, matmul, dot) -> None:  # noqa: ANN001
    """8 vector accumulators a tile: 4 rows of 16 lanes (two 256-bit vectors each), 8
    rows of one 512-bit vector for a convolution; for a packed matmul panel 12 of
    AVX2's 16 registers (6 rows of two 256-bit vectors) and 16 of AVX-512's 32: 4 rows
    of four (64 lanes, `cpu_registers.packed_lanes`);
    16 outputs in a dot-product tile with AVX-512's 32 registers, 8 otherwise."""
    opts = Options(vector_bits=bits)
    _, c = _schedule(CONV, opts).nests
    assert c.jams == conv and c.lanes == 16
    _, m = _schedule(MATMUL, opts).nests
    assert m.jams == matmul and m.lanes == (64 if bits == 512 else 16)
    dot_src = "def f(float(I, E) A, float(J, E) B) -> (S) { S(i, j) +=! A(i, e) * B(j, e) }"
    # (the model's own order is transposed panels: cpu.pack copies B(j, e) per panel;
    # the dot tile is its run-time alternative for few rows)
    _, panels = _schedule(dot_src, opts).nests
    assert panels.jams == (("i", matmul[0][1]),) and panels.lanes == m.lanes
    assert panels.rows is not None
    d = panels.alternative
    assert d is not None and d.jams == dot and d.lanes == 1
    # a weight gradient: lanes along m (cpu.transpose), as many rows of c as a conv
    wgrad = (
        "def f(float(N, C, H, W) I, float(N, M, HO, WO) G) -> (WG) "
        "{ WG(m, c, kh, kw) +=! G(n, m, h, w) * I(n, c, h + kh, w + kw) "
        "where kh in 0:3, kw in 0:3, h in 0:H - 2, w in 0:W - 2 }"
    )
    (g,) = [n for n in _schedule(wgrad, opts).nests if n.inner]
    assert (g.innermost, g.lanes) == (("m",), 16)
    assert g.jams == (("c", conv[0][1]),) and g.outer[0] == "c"


def test_a_dot_tile_also_runs_with_its_loops_swapped() -> None:
    from compiler.cpu.alternatives import SwapCheck

    src = "def lin(float(B, I) X, float(O, I) W) -> (Y) { Y(b, o) +=! X(b, i) * W(o, i) }"
    # the dot tile of transposed panels (its alternative for few rows), as here without
    # them: `Options(block=...)` keeps the model from packing
    _, panels = _schedule(src).nests
    assert panels.alternative is not None and panels.alternative.alternative is not None
    (nest,) = _schedule(src, Options(block=1)).nests
    assert nest.outer == ("b", "o") and nest.alternative is not None
    assert nest.alternative.outer == ("o", "b") and nest.alternative.jams == nest.jams
    assert isinstance(nest.larger, SwapCheck)
    from compiler.frontend.printer import print_expr

    assert (print_expr(nest.larger.first), print_expr(nest.larger.second)) == ("O - 0", "B - 0")


def test_a_forced_register_tile_keeps_at_most_256_accumulators() -> None:
    # 16 rows of 32 lanes would be 512 nested locals: the rows drop to 8
    _, m = _schedule(MATMUL, Options(block=16, register_tile=32)).nests
    assert m.jams == (("m", 8),) and m.lanes == 32


@pytest.mark.host_vectors
def test_the_host_vector_width_is_read_once() -> None:
    from compiler.cpu.cpu_registers import host_vector_bits, vector_bits

    assert host_vector_bits() in (128, 256, 512)
    assert vector_bits(Options()) == host_vector_bits()
    assert vector_bits(Options(vector_bits=128)) == 128


def test_model_blocks_the_output_channel_of_a_convolution() -> None:
    _, nest = _schedule(CONV).nests
    assert (nest.outer, nest.inner, nest.innermost) == (("n", "h", "m"), ("kh", "kw", "c"), ("w",))
    assert nest.jams == (("m", 4),) and nest.lanes == 16  # c: the lanes replace its unroll
    # the literal reduction order, for when the planes of I alias in L1 (cpu.aliasing)
    assert nest.alternative is not None and nest.alternative.inner == ("c", "kh", "kw")
    assert nest.alias is not None and nest.alias.tensor == "I"


def test_model_keeps_a_long_unit_stride_reduction_in_a_register() -> None:
    weight_grad = (
        "def f(float(N,C,H,W) I, float(N,M,HO,WO) G) -> (WG) "
        "{ WG(m,c,kh,kw) +=! G(n,m,h,w) * I(n,c,h + kh,w + kw) "
        "where kh in 0:3, kw in 0:3, h in 0:H - 2, w in 0:W - 2 }"
    )
    rows = "def f(float(N,D) X) -> (s) { s(n) +=! X(n,d) }"
    nest = _schedule(rows).nests[-1]
    assert nest.accumulate and nest.innermost == () and nest.jams == ()
    # a weight gradient reduces over n, h, w: lanes along m from a transposed copy of G
    # (cpu.transpose), not dot products reduced every row of w
    nest = _schedule(weight_grad).nests[-1]
    assert not nest.accumulate and nest.innermost == ("m",)
    plain = _schedule(weight_grad, Options(register_tile=1)).nests[-1]
    assert plain.accumulate and plain.jams == ()


def test_a_strided_convolution_takes_its_lanes_along_the_output_channels() -> None:
    strided = CONV.replace("h + kh,w + kw", "2 * h + kh,2 * w + kw")
    _, nest = _schedule(strided).nests
    # W1(m, c, kh, kw) is read transposed (cpu.transpose); rows of w, parallel over n
    assert (nest.innermost, nest.lanes, nest.outer[0]) == (("m",), 16, "n")
    assert nest.jams == (("w", 4),)
    _, plain = _schedule(CONV).nests
    assert plain.innermost == ("w",)
    # no lanes along a variable that every read uses: nothing would be shared by them
    attention = (
        "def f(float(B,T,E) G, float(B,T,T) P, float(B,T,E) V) -> (l) "
        "{ l(b,i) +=! G(b,i,e) * P(b,i,j) * V(b,j,e) }"
    )
    (nest,) = [n for n in _schedule(attention).nests if n.inner]
    assert nest.innermost == ()


def test_explicit_options_override_the_model() -> None:
    _, nest = _schedule(MATMUL, Options(innermost="n", unroll=1, block=2)).nests
    assert nest.innermost == ("n",) and nest.jams == (("m", 2),)
    (nest,) = _schedule(MATMUL, Options(innermost="zz")).nests
    assert nest.accumulate and nest.innermost == ()


def test_self_reads_keep_the_register_form() -> None:
    src = "def f(float(N,K) A) -> (O) { O(i,j) = A(i,j)  O(i,j) += O(i,j) * A(i,k) }"
    nest = _schedule(src).nests[-1]
    assert nest.innermost == ()
