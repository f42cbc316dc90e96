"""Gradients of programs the differential random-program tester (tools/fuzz.py) found
wrong or rejected, in float64 against central differences of the interp target's
forward, on every CPU target:

- a clamp piece whose condition has `min`/`max` bounds (`i in 0:max(N, 2) - 1`), or
  that is taken only where a read is out of bounds, is empty and dropped (F2).
"""

from __future__ import annotations

import numpy as np
import pytest

import compiler
from compiler import Options
from compiler.autodiff.emptiness import runs_never
from compiler.frontend.parser import parse

TARGETS = {
    "interp": {"target": "interp"},
    "llvm-1": {"target": "llvm", "options": Options(threads=1)},
    "llvm-2": {"target": "llvm", "options": Options(threads=2)},
    "cuda-emulated": {"target": "cuda-emulated"},
}

# name -> (source, input shapes)
VJP = {
    "clamp with piecewise extent": (
        """def f(double(N) A) -> (O) {
            O(i3) = A(min(i3, N - 1)) where i3 in 0:max(min(N, N), 2) - 1
        }""",
        [(1,)],
    ),
    "clamp with piecewise extent, N = 4": (
        """def f(double(N) A) -> (O) {
            O(i3) = A(min(i3, N - 1)) where i3 in 0:max(min(N, N), 2) - 1
        }""",
        [(4,)],
    ),
    "clamp piece out of bounds": (
        """def f(double(N) A, double(N) B) -> (O, P) {
            O(i1, i2) +=! A(k3) where i1 in 0:2 * N - 2, i2 in 0:1
            P(i5) +=! B(i5) >= 2.0 ? 1.0 : O(min(i5, 2 * N - 2 - 1), k6)
                where i5 in 0:N, k6 in 0:min(1, N)
        }""",
        [(3,), (3,)],
    ),
}


def _central(source: str, arrays: list[np.ndarray], cotangents, eps: float = 1e-6):
    """<c, d forward / d a> by central differences of the interp target's forward."""
    ref = compiler.define(source, target="interp", cache=False)
    grads = []
    for n, a in enumerate(arrays):
        g = np.zeros_like(a)
        for idx in np.ndindex(a.shape):
            hi = [x.copy() for x in arrays]
            lo = [x.copy() for x in arrays]
            hi[n][idx] += eps
            lo[n][idx] -= eps
            pairs = zip(ref(*hi), ref(*lo), cotangents, strict=True)
            g[idx] = sum(float(np.vdot(h - m, c)) for h, m, c in pairs) / (2 * eps)
        grads.append(g)
    return grads


@pytest.mark.parametrize("target", sorted(TARGETS))
@pytest.mark.parametrize("case", sorted(VJP))
def test_vjp_matches_central_differences(case: str, target: str) -> None:
    source, shapes = VJP[case]
    rng = np.random.default_rng(7)
    arrays = [rng.standard_normal(s) for s in shapes]
    k = compiler.define(source, cache=False, **TARGETS[target])
    outputs = k(*arrays)
    cotangents = [rng.standard_normal(o.shape) for o in outputs]
    got = k.vjp(*arrays, grad_outputs=tuple(cotangents))
    for g, w in zip(got, _central(source, arrays, cotangents), strict=True):
        np.testing.assert_allclose(g, w, rtol=1e-6, atol=1e-7)


def test_min_max_bounds_are_split_into_cases() -> None:
    """i >= N and i in 0:max(N, 2) - 1 is empty (N >= 2: i <= N - 2; N = 1: i <= 0);
    i >= N - 1 is not (N = 1, i = 0)."""
    stmt = (
        parse(
            "def f(double(N) A) -> (O) { O(i) = A(i) where i in 0:max(min(N, N), 2) - 1, "
            "i - N in 0:i - N + 1 }"
        )
        .get()
        .stmts[0]
    )
    assert runs_never(stmt.where, ("N",))
    stmt = (
        parse(
            "def f(double(N) A) -> (O) { O(i) = A(i) where i in 0:max(min(N, N), 2) - 1, "
            "i - N + 1 in 0:i - N + 2 }"
        )
        .get()
        .stmts[0]
    )
    assert not runs_never(stmt.where, ("N",))
