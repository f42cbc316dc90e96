"""Range inference on the classic cases, compared semantically.

Each expected range is written as an isl set over the size parameters and compared
with `is_equal` against the set the inferred bound expressions describe (under the
context "every size >= 1"), so isl's choice of formula (`(W + KW) / 2 - KW` for
`(W - KW) / 2`) does not matter.
"""

from __future__ import annotations

import islpy as isl
import pytest

from compiler.diagnostics import RangeError, Severity
from compiler.frontend.ast import Var
from compiler.frontend.check import check_def
from compiler.frontend.checked import RangedDef
from compiler.frontend.parser import parse
from compiler.frontend.printer import print_def
from compiler.poly.isl_bridge import StmtSpace, condition_of
from compiler.poly.ranges import infer_ranges


def ranged(src: str) -> RangedDef:
    return infer_ranges(check_def(parse(src).get()))


def var_range(r: RangedDef, stmt: int, var: str) -> tuple:
    clauses = [
        c
        for c in r.checked.definition.stmts[stmt].where
        if getattr(c, "expr", None) == Var(var) and hasattr(c, "lo")
    ]
    assert len(clauses) == 1, f"expected one range for {var}, got {clauses}"
    return clauses[0].lo, clauses[0].hi


def assert_range(r: RangedDef, stmt: int, var: str, expected: str) -> None:
    """`expected` is isl syntax for the set of values of `var`, e.g. `0 <= v < N - K + 1`."""
    params = r.checked.size_params
    space = StmtSpace(("v",), params)
    lo, hi = var_range(r, stmt, var)
    got = condition_of(Var("v"), lo, hi, space) & space.context
    want = isl.Set(f"[{', '.join(params)}] -> {{ [v] : {expected} }}") & space.context
    assert got.is_equal(want), f"{var}: got {got}, want {want}"


def assert_output(r: RangedDef, output: str, dim: int, expected: str) -> None:
    params = r.checked.size_params
    space = StmtSpace(("v",), params)
    b = r.bounds_of(output)[dim]
    got = condition_of(Var("v"), b.lo, b.hi, space) & space.context
    want = isl.Set(f"[{', '.join(params)}] -> {{ [v] : {expected} }}") & space.context
    assert got.is_equal(want), f"{output}[{dim}]: got {got}, want {want}"


def test_matmul() -> None:
    r = ranged("def mm(float(M, K) A, float(K, N) B) -> (C) { C(m, n) +=! A(m, k) * B(k, n) }")
    assert_range(r, 0, "m", "0 <= v < M")
    assert_range(r, 0, "n", "0 <= v < N")
    assert_range(r, 0, "k", "0 <= v < K")
    assert_output(r, "C", 1, "0 <= v < N")
    assert r.warnings == ()


def test_conv_solves_in_two_rounds() -> None:
    r = ranged(
        "def conv(float(N, C, H, W) I, float(M, C, KH, KW) Wt) -> (O) {"
        " O(n, m, h, w) +=! I(n, c, h + kh, w + kw) * Wt(m, c, kh, kw) }"
    )
    assert_range(r, 0, "h", "0 <= v <= H - KH")
    assert_range(r, 0, "w", "0 <= v <= W - KW")
    assert_range(r, 0, "kh", "0 <= v < KH")
    assert_output(r, "O", 2, "0 <= v <= H - KH")


def test_strided() -> None:
    r = ranged("def s(float(N) I, float(K) Wt) -> (O) { O(i) +=! I(2 * i + k) * Wt(k) }")
    assert_range(r, 0, "i", "0 <= 2v <= N - K")


def test_scale_uses_floor_division() -> None:
    r = ranged("def s(float(N) I) -> (O) { O(i) = I(123 * i) }")
    assert_range(r, 0, "i", "0 <= 123v < N")


def test_transpose_and_diagonal() -> None:
    r = ranged("def t(float(M, N) I) -> (O) { O(i, j) = I(j, i) }")
    assert_range(r, 0, "i", "0 <= v < N")
    assert_range(r, 0, "j", "0 <= v < M")
    r = ranged("def d(float(N, N) I) -> (O) { O(i) = I(i, i) }")
    assert_range(r, 0, "i", "0 <= v < N")
    r = ranged("def d(float(A0, A1, A2) I) -> (O) { O(i) +=! I(j, i + j, k) }")
    assert_range(r, 0, "i", "0 <= v <= A1 - A0")


def test_shift_minus_gives_shape_n_plus_one() -> None:
    r = ranged("def s(float(N) I) -> (O) { O(i) = I(i - 1) }")
    assert_range(r, 0, "i", "1 <= v <= N")
    assert_output(r, "O", 0, "1 <= v <= N")


def test_shift_plus_is_a_negative_output_index() -> None:
    with pytest.raises(RangeError) as e:
        ranged("def s(float(N) I) -> (O) { O(i) = I(i + 5) }")
    assert "negative for every size" in e.value.message
    assert e.value.span.text == "i"


def test_intersection_of_reads_is_min() -> None:
    r = ranged(
        "def f(float(A0, A1, A2) A, float(B0, B1, B2) B, float(C0, C1, C2) C) -> (O2, O3) {"
        " O2(j, k, l) +=! B(j, k, l) + A(i, j, k)\n"
        " O3(k, l, m) +=! C(k, l, m) + O2(j, k, l) }"
    )
    assert_range(r, 0, "j", "0 <= v < B0 and v < A1")
    assert_range(r, 1, "k", "0 <= v < C0 and v < B1 and v < A2")
    assert_output(r, "O3", 1, "0 <= v < C1 and v < B2")


def test_where_fixes_a_range_and_is_kept() -> None:
    r = ranged("def f(float(N, M) I) -> (O) { O(i, j) = I(i, j) where i in 3:N - 1 }")
    assert_range(r, 0, "i", "3 <= v < N - 1")
    assert_range(r, 0, "j", "0 <= v < M")
    assert "where i in 3:N - 1, j in 0:M" in print_def(r.checked.definition)


def test_empty_where_range_is_an_error() -> None:
    with pytest.raises(RangeError) as e:
        ranged("def f() -> (O) { O(i, j) = 3 where i in 8:4, j in 3:20 }")
    assert e.value.message == "empty range: `i in 8:4` contains no value for any sizes"
    assert e.value.span.text == "i in 8:4"


def test_padded_strided_conv_reads_earlier_output_bounds() -> None:
    r = ranged(
        "def c(float(N, C, H, W) I, float(M, C, KH, KW) W1) -> (pad, tmp) {\n"
        "  pad(n, c, h, w) = I(n, c, h - 2 - 3, w - 3 - 4)\n"
        "  tmp(n, m, h, w) +=! pad(n, c, 2 * h + kh, 3 * w + kw) * W1(m, c, kh, kw)\n}"
    )
    assert_output(r, "pad", 2, "5 <= v < H + 5")
    # TC: min 3, extent (H - KH + 1) / 2
    assert_range(r, 1, "h", "3 <= v and 2v <= H - KH + 5")
    assert_range(r, 1, "w", "3 <= v and 3v <= W - KW + 7")


def test_weird_conv_couples_h_and_w() -> None:
    r = ranged(
        "def f(float(B, IP, H, W) input, float(OP, IP, KH, KW) weight) -> (output) {"
        " output(b, op, h, w) +=! input(b, ip, 2 * h + 3 * w + kh, 2 * w + kw)"
        " * weight(op, ip, kh, kw) }"
    )
    assert_range(r, 0, "w", "0 <= 2v <= W - KW")
    # TC: extent ((H - KH) - ((W - KW) / 2) * 3) / 2 + 1
    assert_range(r, 0, "h", "0 <= v and exists (q: 2q <= W - KW < 2q + 2 and 2v + 3q <= H - KH)")


def test_unambiguous_rotate_takes_intersection() -> None:
    r = ranged("def f(float(N, M) I) -> (O) { O(i, j) = I(10 + i - j, i + j) where i in 0:10 }")
    assert_range(r, 0, "j", "v >= 0 and v >= 20 - N and v <= 10 and v <= M - 10")


def test_padded_conv_with_filter_clause() -> None:
    """[tcc] an affine where clause filters the domain; reads are checked on it."""
    r = ranged(
        "def g(float(N, HO) dO, float(K) Wt) -> (dI) {"
        " dI(n, h) +=! dO(n, h - k) * Wt(k) where h in 0:HO + K - 1, h - k in 0:HO }"
    )
    assert_range(r, 0, "k", "0 <= v < K")
    assert_output(r, "dI", 1, "0 <= v < HO + K - 1")
    assert r.warnings == ()


def test_unprovable_precondition_is_a_warning() -> None:
    r = ranged("def f(float(N, NM, M) I) -> (O) { O(i, j) = I(i, i + j, j) }")
    (w,) = r.warnings
    assert w.severity is Severity.WARNING
    assert "NM + 1 >= N + M" in w.message
    assert w.span.text == "I(i, i + j, j)"
    assert ranged("def f(float(10, 19, 10) I) -> (O) { O(i, j) = I(i, i + j, j) }").warnings == ()


def test_indirect_read_is_a_warning() -> None:
    r = ranged("def f(float(N) A, int32(M) Ix) -> (O) { O(i) = A(Ix(i)) }")
    assert_range(r, 0, "i", "0 <= v < M")
    (w,) = r.warnings
    assert "`Ix(i)` of `A(Ix(i))` is not affine" in w.message


def test_guarded_read_is_not_reported() -> None:
    r = ranged(
        "def f(float(N) A, float(D) Dil) -> (O) {"
        " O(i) = (i - D >= 0) ? A(i - D) : 0.0 where i in 0:N }"
    )
    assert r.warnings == ()


def test_always_out_of_bounds_read_is_an_error() -> None:
    with pytest.raises(RangeError) as e:
        ranged("def f(float(N) A) -> (O) { O(i) = A(i) where i in 0:N + 1 }")
    assert e.value.message == "`A(i)` reads out of bounds for every size"


def test_unsolvable_coupling() -> None:
    with pytest.raises(RangeError) as e:
        ranged("def f(float(I0, I1, I2) A) -> (O) { O(i) +=! A(i + j, i + j, i + j) }")
    assert e.value.message.startswith("could not infer a range for 'i', 'j' in this statement")
    assert e.value.diagnostics[0].hint == "add a where clause, e.g. `where i in 0:I0`"


def test_lhs_variable_never_read() -> None:
    with pytest.raises(RangeError) as e:
        ranged("def f(float(N) I) -> (O) { O(i, j) = I(i) }")
    assert e.value.message == (
        "could not infer a range for index 'j' of `O(i, j)`: no read on the right-hand side uses it"
    )
    assert e.value.span.text == "j"


def test_inferred_range_empty_for_every_size() -> None:
    with pytest.raises(RangeError) as e:
        ranged("def f(float(5) A, float(3) B) -> (O) { O(i) = A(i) + B(i + 10) }")
    assert e.value.message.startswith("inferred an empty range for 'i'")


def test_reduction_of_earlier_output_reads_its_lhs() -> None:
    r = ranged(
        "def f(float(N, M) A) -> (O) {\n  O(i) = 0.0 where i in 0:N - 1\n  O(i) += A(i, j)\n}"
    )
    assert_range(r, 1, "i", "0 <= v < N - 1")


def test_rendered_error_message() -> None:
    with pytest.raises(RangeError) as e:
        infer_ranges(check_def(parse("def f() -> (O) {\n  O(i) = 3\n}", "f.tc").get()))
    assert e.value.render() == (
        "f.tc:2:5: error: could not infer a range for index 'i' of `O(i)`: no read on the "
        "right-hand side uses it\n"
        "      O(i) = 3\n"
        "        ^\n"
        "hint: add a where clause, e.g. `where i in 0:10`"
    )
