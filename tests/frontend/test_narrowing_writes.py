"""An output typed by its first write, then written wider values (issue 14).

`Fd(x, y) = 0` makes `Fd` int32; a later float write into it is truncated. The
checker keeps TC's rule (the first write decides) and warns at the narrowing write,
with the fix; the truncation itself is what both targets compute.
"""

from __future__ import annotations

import numpy as np
import pytest

import compiler
from compiler.frontend.check import check_def
from compiler.frontend.parser import parse

TRUNCATING = (
    "def f(float(N, M) A) -> (Fd) {\n"
    "    Fd(x, y) = 0 where x in 0:N, y in 0:M\n"
    "    Fd(x, y) += A(x, y) * 0.5\n"
    "}\n"
)


def _warnings(src: str) -> list[str]:
    return [w.render() for w in check_def(parse(src, "t.tc").get()).warnings]


def test_the_narrowing_write_warns_with_the_fix() -> None:
    (warning,) = _warnings(TRUNCATING)
    assert "t.tc:3:17: warning: 'Fd' is int32, typed by its first write" in warning
    assert "float32 value is converted to int32 (truncated)" in warning
    assert "`float(0)`" in warning


@pytest.mark.parametrize(
    "src",
    [
        TRUNCATING.replace("= 0 where", "= float(0) where"),
        TRUNCATING.replace("-> (Fd)", "-> (int32(N, M) Fd)").replace(
            "A(x, y) * 0.5", "int32(A(x, y))"
        ),
        TRUNCATING.replace("A(x, y) * 0.5", "1"),
    ],
    ids=["float first write", "declared int output, int write", "int writes"],
)
def test_no_warning_without_narrowing(src: str) -> None:
    assert _warnings(src) == []


@pytest.mark.parametrize("target", ["interp", "llvm"])
def test_what_runs_is_what_the_warning_says(target: str) -> None:
    a = np.array([[1.0, 3.0, -3.0]], np.float32)
    (got,) = compiler.define(TRUNCATING, target=target, cache=False)(a)
    assert got.dtype == np.int32
    np.testing.assert_array_equal(got, np.trunc(a * 0.5).astype(np.int32))
    fixed = TRUNCATING.replace("= 0 where", "= float(0) where")
    (got,) = compiler.define(fixed, target=target, cache=False)(a)
    np.testing.assert_array_equal(got, a * 0.5)
