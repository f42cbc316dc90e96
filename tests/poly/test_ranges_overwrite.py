"""Range inference after a partial overwrite (issue 14).

A statement that reads exactly the element it writes (`B(x) = B(x) * 2`) reads inside
the output's final shape, even where earlier statements wrote less: it is not "out of
bounds for every size". Results are compared with NumPy on every target.
"""

from __future__ import annotations

import numpy as np
import pytest

import compiler
from compiler.diagnostics import RangeError

PARTIAL = (
    "def f(float(N) I) -> (B) {\n"
    "    B(x) = I(x + 1) where x in 0:N - 1\n"
    "    B(x) = B(x) * 2 where x in N - 1:N\n"
    "}\n"
)
PIECES = (
    "def f(float(N) I) -> (B) {\n"
    "    B(x) = I(x + 1) where x in 0:N - 1\n"
    "    B(x) = I(0) where x in N - 1:N\n"
    "    B(x) = B(x) * 2 where x in 0:N\n"
    "}\n"
)


@pytest.mark.parametrize("target", ["interp", "llvm"])
@pytest.mark.parametrize("n", [1, 2, 7])
def test_partial_overwrite(target: str, n: int) -> None:
    a = np.arange(1, n + 1, dtype=np.float32)
    (got,) = compiler.define(PARTIAL, target=target, cache=False)(a)
    np.testing.assert_array_equal(got, np.append(a[1:], 0.0))  # B(N - 1) was never written
    (got,) = compiler.define(PIECES, target=target, cache=False)(a)
    np.testing.assert_array_equal(got, 2 * np.append(a[1:], a[0]))


def test_shapes_are_the_hull_of_the_writes() -> None:
    assert compiler.infer_shapes(PIECES, "f", {"I": (5,)}) == {"B": (5,)}


def test_a_different_element_is_still_checked() -> None:
    src = PARTIAL.replace("B(x) = B(x) * 2", "B(x) = B(x + 1) * 2")
    with pytest.raises(RangeError, match="out of bounds for every size"):
        compiler.define(src, target="interp")
