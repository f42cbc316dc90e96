"""`compiler.loops.collapse`: loop pairs over whole planes become one loop (the loops
printed), only where every use of the pair is a whole-plane access, and the collapsed
code computes what the reference evaluator does (odd and degenerate plane sizes)."""

from __future__ import annotations

import numpy as np
import pytest

import compiler
from compiler import loops as L
from compiler import pipeline
from compiler.options import Options
from tests.codegen.kit import reference_and_llvm

GAP = "def gap(float(N, C, H, W) I) -> (O) { O(n, c) +=! I(n, c, h, w) / (H * W) }"
STATS = "def stats(float(N, C, H, W) X) -> (sq) { sq(c) +=! X(n, c, h, w) * X(n, c, h, w) }"


def _loops(text: str) -> list[L.For]:
    # without the schedule's loop merging (cpu.merge), which would merge the pairs first
    f = pipeline.run(text, upto="lower", options=Options(merge=False)).function
    return [n for n in L.ir.walk(f.body) if isinstance(n, L.For)]


def test_a_whole_plane_reduction_runs_one_loop() -> None:
    loops = _loops(GAP)
    assert [lp.var for lp in loops] == ["n", "c", "h_w"]
    assert loops[-1].hi == L.Bin(L.BinOp.MUL, L.VarRef("H"), L.VarRef("W"))


@pytest.mark.parametrize(
    "text",
    [
        # w is offset: not the whole plane
        "def f(float(N, H, W) I) -> (O) { O(n) +=! I(n, h, w + 1) where w in 0:W - 1 }",
        # h is also an earlier subscript of a read
        "def f(float(N, H, W) I, float(H, H, W) J) -> (O) { O(n) +=! I(n, h, w) * J(h, h, w) }",
        # h is used in the value too
        "def f(float(N, H, W) I) -> (O) { O(n) +=! I(n, h, w) * h }",
        # one read walks the plane transposed
        "def f(float(N, H, W) I, float(N, W, H) J) -> (O) { O(n) +=! I(n, h, w) * J(n, w, h) }",
    ],
)
def test_other_uses_keep_both_loops(text: str) -> None:
    assert {"h", "w"} <= {lp.var for lp in _loops(text)}


@pytest.mark.parametrize("shape", [(2, 3, 1, 1), (3, 2, 14, 14), (1, 5, 7, 3), (2, 1, 13, 61)])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_collapsed_reductions_match_the_reference(shape: tuple[int, ...], dtype: type) -> None:
    rng = np.random.default_rng(sum(shape))
    x = rng.standard_normal(shape).astype(dtype)
    for text in (GAP, STATS):
        src = text.replace("float(", "double(") if dtype is np.float64 else text
        e, g = reference_and_llvm(src, [x], Options(threads=2))
        tol = 1e-12 if dtype is np.float64 else 2e-5
        np.testing.assert_allclose(g, e, rtol=tol, atol=tol * np.sqrt(x.size))


def test_collapsed_loops_have_exact_gradients() -> None:
    rng = np.random.default_rng(0)
    x = rng.standard_normal((2, 3, 5, 7))
    g = rng.standard_normal((2, 3))
    src = GAP.replace("float(", "double(")
    (got,) = compiler.define(src).vjp(x, grad_outputs=(g,))
    np.testing.assert_allclose(got, np.broadcast_to(g[:, :, None, None] / 35, x.shape), rtol=1e-12)
