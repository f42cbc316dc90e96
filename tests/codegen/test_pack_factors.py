"""A packable contraction (`cpu.pack`'s panels of `W(k, j)`) with another factor: a 0-d
read (`* B`, once an IndexError in `cpu_model._packable`), a 1-d broadcast along either
output dimension or along the reduction, a constant subscript; on every target, against
NumPy. The sizes give whole panels and tiles and remainders of both."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest

from compiler.kernel import define
from compiler.options import Options
from tests.codegen.kit import EVERY_TARGET

N, K, M = 21, 150, 141
HEAD = "def f(float(N, K) A, float(K, M) W"

# (id, the rest of the signature and the body, the extra input's shape, NumPy reference)
CASES = [
    ("scalar_last", ", float B) -> (O) { O(i, j) +=! A(i, k) * W(k, j) * B }", (),
     lambda a, w, b: (a @ w) * b),
    ("scalar_first", ", float B) -> (O) { O(i, j) +=! B * A(i, k) * W(k, j) }", (),
     lambda a, w, b: (a @ w) * b),
    ("broadcast_j", ", float(M) B) -> (O) { O(i, j) +=! A(i, k) * W(k, j) * B(j) }", (M,),
     lambda a, w, b: (a @ w) * b),
    ("broadcast_i", ", float(N) B) -> (O) { O(i, j) +=! A(i, k) * W(k, j) * B(i) }", (N,),
     lambda a, w, b: (a @ w) * b[:, None]),
    ("broadcast_k", ", float(K) B) -> (O) { O(i, j) +=! A(i, k) * W(k, j) * B(k) }", (K,),
     lambda a, w, b: (a * b) @ w),
    ("constant_row", ") -> (O) { O(i, j) +=! A(i, k) * W(0, j) }", None,
     lambda a, w: a.sum(1)[:, None] * w[0]),
    ("constant_row_factor", ") -> (O) { O(i, j) +=! A(i, k) * W(k, j) * W(0, j) }", None,
     lambda a, w: (a @ w) * w[0]),
    ("constant_column_factor", ") -> (O) { O(i, j) +=! A(i, 0) * W(k, j) * A(i, k) }", None,
     lambda a, w: a[:, :1] * (a @ w)),
]  # fmt: skip

TARGETS = EVERY_TARGET


@pytest.mark.parametrize(("target", "options"), TARGETS)
@pytest.mark.parametrize(
    ("body", "extra", "ref"), [c[1:] for c in CASES], ids=[c[0] for c in CASES]
)
def test_packed_product_with_another_factor(
    body: str,
    extra: tuple[int, ...] | None,
    ref: Callable[..., np.ndarray],
    target: str,
    options: Options | None,
) -> None:
    rng = np.random.default_rng(1)
    a = rng.standard_normal((N, K)).astype(np.float32)
    w = rng.standard_normal((K, M)).astype(np.float32)
    inputs = [a, w] if extra is None else [a, w, rng.standard_normal(extra).astype(np.float32)]
    want = ref(*(x.astype(np.float64) for x in inputs))
    (got,) = define(HEAD + body, target=target, options=options)(*inputs)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
