"""isl's default loops over a domain of pieces with floors may leave out a piece; the
lowering asks for separated loops there (`astgen._insert_band`).

The gradient's gather of this floor-divided read has a piece that holds at N = 5
only (`S1[y = 0, x, j = 0, i] : N = 5 and 6x >= 5 ...`): isl's default AST skipped
it, so A_grad[0, 1] stayed 0 on the CPU and CUDA targets (found by
tests/properties/test_floordiv_gradients.py). Oracle: the cotangent scattered by hand."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

import compiler
from compiler import Options

SRC = """def f(double(N) B,
    double((2 * (4 - 1) + 2 * ((N + 1) / 2 - 1) + 0) / 2 + 1,
           (1 * (N - 2 - 1) + 1 * ((N + 1) / 2 - 1) + 1) / 3 + 1) A) -> (O) {
    O(j) +=! A((2 * j + 2 * k + 0) / 2, (-1 * i + -1 * k + 1 * (N - 2 - 1) + 1 * ((N + 1) / 2 - 1) + 1) / 3)
        where i in 0:N - 2, j in 0:4, k in 0:(N + 1) / 2
}"""


def _scattered(n: int, cot: np.ndarray) -> np.ndarray:
    half = (n + 1) // 2
    out = np.zeros((3 + half, (n - 3 + half) // 3 + 1))
    for i, j, k in itertools.product(range(n - 2), range(4), range(half)):
        out[(2 * j + 2 * k) // 2, (-i - k + n - 3 + half) // 3] += cot[j]
    return out


@pytest.mark.parametrize("target", ("llvm", "cuda-emulated"))
def test_every_piece_is_visited(target: str) -> None:
    options = Options(gather="full") if target == "llvm" else None
    k = compiler.define(SRC, target=target, options=options)
    for n in (3, 4, 5, 6, 7, 8):
        rng = np.random.default_rng(n)
        half = (n + 1) // 2
        b, a = rng.standard_normal(n), rng.standard_normal((3 + half, (n - 3 + half) // 3 + 1))
        cot = rng.standard_normal(4)
        _, got = k.vjp(b, a, grad_outputs=(cot,))
        np.testing.assert_allclose(got, _scattered(n, cot), rtol=1e-12, atol=1e-12, err_msg=n)
