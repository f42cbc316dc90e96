"""A declared output whose writes lie inside its shape, though a variable's range does
not (fuzz seeds 22920, 22988).

A statement's variable range is a hull: `where y in 0:N + 5, k in 0:N - y` writes
`O(y)` only for y < N, since the reduction over `k` is empty above. Range inference
bounds the output by the variable's range; a declared shape that holds every write,
for every size, is then the output's bound, not a ShapeError at the call. The
gradient's clamp pieces and gathers produce such hulls (`O_v1(y) max= ... where y in
1:M + 1, ..., N - 2 in 0:N - 1` inside a declared `N + M - 1`). A write that does leave
the declared shape is still an error.
"""

from __future__ import annotations

import numpy as np
import pytest

import compiler
from compiler.diagnostics import ShapeError

HULL = "def f(float(N) A) -> (float(N) O) { O(y) +=! A(k) where y in 0:N + 5, k in 0:N - y }"
UPDATE = (
    "def f(float(N) A, float(M) B) -> (float(N + M - 1) O) {\n"
    "    O(i) = A(i) where i in 0:N\n"
    "    O(y) max= B(y - i) where y in 1:M + 1, i in 1:2, N - 2 in 0:N - 1\n"
    "}\n"
)
BEYOND = "def f(float(N) A) -> (float(N) O) { O(y) +=! A(k) where y in 0:N + 1, k in 0:N }"


def _update(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    out = np.zeros(len(a) + len(b) - 1, np.float32)
    out[: len(a)] = a
    if len(a) >= 2:
        for y in range(1, len(b) + 1):
            out[y] = max(out[y], b[y - 1])
    return out


@pytest.mark.parametrize("target", ["interp", "llvm"])
@pytest.mark.parametrize("n", [1, 2, 7])
def test_writes_inside_the_declared_shape(target: str, n: int) -> None:
    a = np.arange(1, n + 1, dtype=np.float32)
    (got,) = compiler.define(HULL, target=target, cache=False)(a)
    np.testing.assert_array_equal(got, np.cumsum(a)[::-1])  # O(y): A(0) + ... + A(N - 1 - y)
    for m in (1, 3):
        b = np.linspace(-2.0, 5.0, m).astype(np.float32)
        (got,) = compiler.define(UPDATE, target=target, cache=False)(a, b)
        np.testing.assert_array_equal(got, _update(a, b))


@pytest.mark.parametrize("target", ["interp", "llvm"])
def test_writes_beyond_the_declared_shape_are_an_error(target: str) -> None:
    with pytest.raises(ShapeError, match="declared 4 but the statements write indices up to 4"):
        compiler.define(BEYOND, target=target, cache=False)(np.ones(4, np.float32))
