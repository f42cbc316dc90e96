"""Integer literals and constants at the edges of int32 and int64 (issue 14).

Literals beyond int32 are int64 (values, not wrapped); literals beyond int64, of any
length, are a ParseError with a position; constants isl derives beyond int64 are a
RangeError; a statement whose ranges are empty for every size is a RangeError. None
of these may end in an InternalError or a Python exception.
"""

from __future__ import annotations

import numpy as np
import pytest

import compiler
from compiler.diagnostics import InternalError, ParseError, RangeError, ShapeError, TCError
from compiler.frontend.ast import ScalarType
from compiler.frontend.parser import parse_expr
from compiler.frontend.printer import print_expr

M = 9223372036854775807


@pytest.mark.parametrize("digits", [20, 4301, 10_000])
def test_huge_literals_are_parse_errors(digits: int) -> None:
    src = "def f(float(N) A) -> (B) { B(i) = A(i) + " + "9" * digits + " }"
    with pytest.raises(ParseError, match=f"{digits} digits.*does not fit in 64 bits") as err:
        compiler.define(src, target="interp")
    assert err.value.span.start == src.index("99")


@pytest.mark.parametrize("text", ["2147483648", str(M), "3000000000"])
def test_int64_literals_round_trip(text: str) -> None:
    e = parse_expr(text)
    assert e.dtype is ScalarType.INT64 and print_expr(e) == text and parse_expr(print_expr(e)) == e


@pytest.mark.parametrize("target", ["interp", "llvm"])
def test_an_int64_literal_is_not_wrapped(target: str) -> None:
    src = "def f(int32(N) A) -> (B) { B(i) = A(i) + 2147483648 }"
    a = np.array([0, 1, -5, 2**31 - 1], np.int32)
    (got,) = compiler.define(src, target=target, cache=False)(a)
    assert got.dtype == np.int64
    np.testing.assert_array_equal(got, a.astype(np.int64) + 2**31)


NEAR_INT64 = {
    # B's size is N + M: it compiles (the gradient's B_grad has that known shape), and
    # a call says the output cannot be allocated (test_an_output_past_int64_...)
    "read minus max": (f"def f(float(N) A) -> (B) {{ B(i) = A(i - {M}) }}", None),
    "stride max": (f"def f(float(N) A) -> (B) {{ B(i) = A({M} * i) }}", None),
    "divide by max": (f"def f(float(N) A) -> (B) {{ B(i) = A(i) + A(i / {M}) }}", None),
    "range to max": (f"def f(float(N) A) -> (B) {{ B(i) = A(i) where i in 0:{M} }}", None),
    "write at max": (f"def f(float(N) A) -> (B) {{ B(i + {M}) = A(i) }}", None),
    "read plus max": (f"def f(float(N) A) -> (B) {{ B(i) = A(i + {M}) }}", RangeError),
    "guard beyond sizes": (
        f"def f(float(N) A) -> (B) {{ B(i) = A(i) where i in 0:N, {M} in 0:N }}",
        RangeError,
    ),
    "empty for every size": (
        "def f(float(N) A) -> (B) { B(i) = A(i) where i in 0:N, i + 5 in 0:5 }",
        RangeError,
    ),
    "bound beyond int64": (
        f"def f(float(N) A) -> (B) {{ B(i) +=! A(j) where j in 0:N, i in 0:{M} * {M} }}",
        RangeError,
    ),
}


@pytest.mark.parametrize("case", sorted(NEAR_INT64))
def test_near_int64_constants_compile_or_raise_a_user_error(case: str) -> None:
    src, error = NEAR_INT64[case]
    try:
        for form in ("scatter", "gather"):
            compiler.grad(src, form=form)
        compiler.define(src, target="llvm", cache=False)
    except InternalError:
        raise
    except TCError as e:
        assert error is not None and isinstance(e, error), e
        return
    assert error is None, f"{case}: no {error}"


@pytest.mark.parametrize("case", ["read minus max", "write at max"])
@pytest.mark.parametrize("target", ["llvm", "interp"])
def test_an_output_past_int64_is_a_shape_error_at_the_call(case: str, target: str) -> None:
    kernel = compiler.define(NEAR_INT64[case][0], target=target, cache=False)
    with pytest.raises(ShapeError, match="more than any process can allocate"):
        kernel(np.ones(3, np.float32))


def test_empty_for_every_size_points_at_the_statement() -> None:
    src = NEAR_INT64["empty for every size"][0]
    with pytest.raises(RangeError, match="runs for no sizes") as err:
        compiler.define(src, target="interp")
    assert err.value.span.start == src.index("B(i) =")
