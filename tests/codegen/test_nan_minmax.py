"""NaN in min/max: `max=!`/`min=!` reductions and the `max()`/`min()` builtins
propagate NaN like NumPy's maximum/minimum (and PyTorch's max/amax) on every target;
`fmax`/`fmin` keep C's meaning and ignore a NaN operand."""

from __future__ import annotations

import numpy as np
import pytest

import compiler
from compiler.loops import Max, Min
from compiler.options import Options
from tests.codegen.kit import F32, buf, func, load, out, pfor, run_both, store

SOURCE = """def minmax(float(N, D) A) -> (O, P, Q, R, S, T) {
    O(n) max=! A(n, d)
    P(n) min=! A(n, d)
    Q(n, d) = max(A(n, d), 0.5)
    R(n, d) = min(0.5, A(n, d))
    S(n, d) = fmax(A(n, d), 0.5)
    T(n, d) = fmin(0.5, A(n, d))
}"""


def expected(a: np.ndarray) -> list[np.ndarray]:
    half = a.dtype.type(0.5)
    return [
        np.max(a, axis=1, initial=-np.inf),
        np.min(a, axis=1, initial=np.inf),
        np.maximum(a, half),
        np.minimum(half, a),
        np.fmax(a, half),
        np.fmin(half, a),
    ]


def matrix(rows: int, width: int, dtype: type, seed: int) -> np.ndarray:
    """Rows with NaN nowhere, first, last, in the middle, everywhere, and at random."""
    rng = np.random.default_rng(seed)
    a = rng.standard_normal((rows, width)).astype(dtype)
    if width:
        patterns = [[], [0], [width - 1], [width // 2], list(range(width))]
        for r in range(rows):
            cols = patterns[r] if r < len(patterns) else rng.choice(width, 1 + r % 3)
            a[r, cols] = np.nan
    return a


@pytest.mark.parametrize("target", ["llvm", "interp", "cuda-emulated"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=["f32", "f64"])
@pytest.mark.parametrize("width", [1, 3, 17, 64, 131])
def test_nan_propagates_like_numpy(target: str, dtype: type, width: int) -> None:
    text = SOURCE if dtype is np.float32 else SOURCE.replace("float(N, D)", "double(N, D)")
    options = None if target.startswith("cuda") else Options(threads=2)
    k = compiler.define(text, target=target, options=options, cache=False)
    a = matrix(9, width, dtype, width)
    for got, want in zip(k(a), expected(a), strict=True):
        np.testing.assert_array_equal(got, want)


def test_the_issue_rows() -> None:
    k = compiler.define("def m(float(N, D) A) -> (O) { O(n) max=! A(n, d) }", target="llvm")
    (got,) = k(np.array([[1, np.nan, 3], [np.nan, np.nan, np.nan]], np.float32))
    assert np.isnan(got).all()


@pytest.mark.parametrize("node", [Min, Max])
def test_loop_ir_min_max_propagate_nan_in_interp_and_llvm(node: type) -> None:
    a, b, c = buf("A", F32, "N"), buf("B", F32, "N"), out("C", F32, "N")
    f = func(f"nan_{node.__name__}", [a, b, c], "N",
             pfor("i", 0, "N", store(c, ("i",), node(load(a, "i"), load(b, "i")))))  # fmt: skip
    x = np.array([1, np.nan, 3, np.nan, -0.0, 2], np.float32)
    y = np.array([np.nan, 2, 1, np.nan, 0.0, 5], np.float32)
    arrays = {"A": x, "B": y, "C": np.zeros(6, np.float32)}
    mine, theirs = run_both(f, arrays, {"N": 6})
    want = np.minimum(x, y) if node is Min else np.maximum(x, y)
    np.testing.assert_array_equal(mine["C"], want)
    np.testing.assert_array_equal(theirs["C"], want)
