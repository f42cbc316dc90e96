"""Call-time shapes: binding sizes from inputs, output shapes, bound evaluation."""

from __future__ import annotations

import pytest

from compiler.diagnostics import ShapeError
from compiler.frontend.ast import Binary, BinOp, Const, ScalarType, Unary, UnaryOp, Var
from compiler.frontend.check import check_def
from compiler.frontend.parser import parse
from compiler.poly.ranges import infer_ranges
from compiler.shapes import bind_sizes, eval_bound_expr, infer_shapes, output_shapes

CONV = (
    "def conv(float(N, C, H, W) I, float(M, C, KH, KW) Wt) -> (O) {"
    " O(n, m, h, w) +=! I(n, c, h + kh, w + kw) * Wt(m, c, kh, kw) }"
)


def ranged(src: str):
    return infer_ranges(check_def(parse(src).get()))


def test_infer_shapes_conv() -> None:
    shapes = infer_shapes(CONV, None, {"I": (2, 3, 10, 12), "Wt": (4, 3, 3, 3)})
    assert shapes == {"O": (2, 4, 8, 10)}


def test_infer_shapes_matmul_and_shift() -> None:
    mm = "def mm(float(M, K) A, float(K, N) B) -> (C) { C(m, n) +=! A(m, k) * B(k, n) }"
    assert infer_shapes(mm, "mm", {"A": [3, 5], "B": [5, 7]}) == {"C": (3, 7)}
    # tcc stores O(i) at index i: i in 1:N + 1 gives shape N + 1 (TC: extent N)
    shift = "def s(float(N) I) -> (O) { O(i) = I(i - 1) }"
    assert infer_shapes(shift, None, {"I": [10]}) == {"O": (11,)}


def test_bind_sizes() -> None:
    r = ranged(CONV)
    sizes = bind_sizes(r, {"I": (2, 3, 10, 12), "Wt": (4, 3, 3, 3)})
    assert sizes == {"N": 2, "C": 3, "H": 10, "W": 12, "M": 4, "KH": 3, "KW": 3}
    assert output_shapes(r, sizes) == {"O": (2, 4, 8, 10)}


@pytest.mark.parametrize(
    ("shapes", "message"),
    [
        ({"I": (2, 3, 10, 12)}, "no shape given for input 'Wt' of def 'conv'"),
        ({"I": (2, 3, 10), "Wt": (4, 3, 3, 3)}, "'I' has rank 4 but a shape of rank 3"),
        (
            {"I": (2, 3, 10, 12), "Wt": (4, 5, 3, 3)},
            "size 'C' is 3 from dimension 1 of 'I' but 5 from dimension 1 of 'Wt'",
        ),
        ({"I": (2, 0, 10, 12), "Wt": (4, 3, 3, 3)}, "dimension 1 of 'I' has size 0"),
        ({"I": (2, 3, 10, 12), "Wt": (4, 3, 3, 3), "X": (1,)}, "'X' is not an input"),
    ],
)
def test_bind_sizes_errors(shapes, message) -> None:
    with pytest.raises(ShapeError) as e:
        bind_sizes(ranged(CONV), shapes)
    assert message in e.value.message


def test_constant_dimension_mismatch() -> None:
    r = ranged("def f(float(10, N) A) -> (O) { O(i, j) = A(i, j) }")
    with pytest.raises(ShapeError) as e:
        bind_sizes(r, {"A": (9, 4)})
    assert e.value.message == "dimension 0 of 'A' is declared 10 but has size 9"
    assert e.value.span.text == "float(10, N) A"


def test_kernel_larger_than_image_is_a_shape_error() -> None:
    with pytest.raises(ShapeError) as e:
        infer_shapes(CONV, None, {"I": (1, 1, 2, 2), "Wt": (1, 1, 4, 4)})
    assert "dimension 2 of output 'O' would have negative size -1" in e.value.message


def test_negative_output_index_at_call_time() -> None:
    src = "def reverted(float(I) B) -> (A) { A(i) = B(10 - i) }"
    assert infer_shapes(src, None, {"B": [11]}) == {"A": (11,)}
    with pytest.raises(ShapeError) as e:
        infer_shapes(src, None, {"B": [12]})
    assert "written at negative index -1" in e.value.message


def test_eval_bound_expr_floor_division_and_modulo() -> None:
    def c(v: int) -> Const:
        return Const(v, ScalarType.INT32)

    e = Binary(BinOp.DIV, Binary(BinOp.SUB, Var("N"), c(7)), c(2))
    assert eval_bound_expr(e, {"N": 4}) == -2  # floor(-3 / 2), as TC (Halide) computes
    assert eval_bound_expr(Binary(BinOp.MOD, Unary(UnaryOp.NEG, Var("N")), c(4)), {"N": 3}) == 1
    assert eval_bound_expr(Binary(BinOp.ADD, Var("i"), c(1)), {}, {"i": 5}) == 6
