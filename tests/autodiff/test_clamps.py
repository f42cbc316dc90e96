"""Gradients of reads through clamped subscripts (issue 14).

`I(min(x + r, N - 1))`, `I(max(x - r, 0))` and both together are split into affine
pieces before AD (`compiler.autodiff.clamps`); the gradients are checked against
finite differences in float64 on the reference evaluator and LLVM, at sizes where
the clamp is active and where it is not (N = 1, 2, prime), and the forward results
against NumPy's `clip`.
"""

from __future__ import annotations

import numpy as np
import pytest

import compiler

CLAMPED = {
    "min": "def f(float(N) I, float(R) W) -> (O) { O(x) +=! I(min(x + r, N - 1)) * W(r) where x in 0:N }",
    "max": "def f(float(N) I, float(R) W) -> (O) { O(x) +=! I(max(x - r, 0)) * W(r) where x in 0:N }",
    "both": (
        "def f(float(N) I, float(R) W) -> (O) {\n"
        "    O(x) +=! I(min(max(x + r - 1, 0), N - 1)) * W(r) where x in 0:N\n}"
    ),
    "assign": (
        "def f(float(N) I, float(R) W) -> (O) { O(x) = I(min(x + 1, N - 1)) * W(0) where x in 0:N }"
    ),
    "2-d": (
        "def f(float(H, V) I, float(R) W) -> (O) {\n"
        "    O(h, v) +=! I(min(h + r, H - 1), max(v - r, 0)) * W(r) where h in 0:H, v in 0:V\n}"
    ),
}


def _reference(case: str, i: np.ndarray, w: np.ndarray) -> np.ndarray:
    n, r = i.shape[0], np.arange(w.shape[0])
    if case == "2-d":
        hs, vs = np.arange(i.shape[0]), np.arange(i.shape[1])
        rows = np.clip(hs[:, None] + r[None, :], 0, n - 1)  # [h, r]
        cols = np.clip(vs[:, None] - r[None, :], 0, i.shape[1] - 1)  # [v, r]
        return np.einsum("hvr,r->hv", i[rows[:, None, :], cols[None, :, :]], w)
    x = np.arange(n)
    if case == "assign":
        return i[np.minimum(x + 1, n - 1)] * w[0]
    sub = {"min": x[:, None] + r, "max": x[:, None] - r, "both": x[:, None] + r - 1}[case]
    return (i[np.clip(sub, 0, n - 1)] * w).sum(axis=1)


def _inputs(case: str, n: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    shape = (n, n + 2) if case == "2-d" else (n,)
    return rng.standard_normal(shape), rng.standard_normal(3)


@pytest.mark.parametrize("target", ["interp", "llvm"])
@pytest.mark.parametrize("case", sorted(CLAMPED))
def test_forward_matches_numpy_and_gradient_matches_finite_differences(
    case: str, target: str
) -> None:
    rng = np.random.default_rng(7)
    k = compiler.define(CLAMPED[case], target=target, cache=False)
    for n in (1, 2, 5):
        i, w = _inputs(case, n, rng)
        (got,) = k(i.astype(np.float32), w.astype(np.float32))
        np.testing.assert_allclose(got, _reference(case, i, w), rtol=1e-4, atol=1e-4)
        compiler.gradcheck(k, i, w)


def test_the_gradient_has_no_clamp_and_no_scatter() -> None:
    text = compiler.grad(CLAMPED["both"])
    assert "min(max(" not in text
    ranged = compiler.define(text, target="interp").ranged
    from compiler.poly.gather import remaining_scatters

    assert remaining_scatters(ranged) == ()
