"""A reduction's register accumulator is stored at the element its outer loops fix.

isl's AST specialises a statement under a branch of the inner band (`if (y == 0)
S(0, l, i)`); the accumulator's store sits after the whole inner band, so its index
comes from the mark (`ast_tree.Mark.values`), never from the first statement below it.
Floor-divided reads with constant ranges give such branches in their gradient's
gather (`A_grad(y) +=! O_grad(i) where ..., i in max(0, 2 * y - l):(l + 1 == y ? ...)`).
Oracle: the cotangent scattered by hand with NumPy, or central differences in float64.
"""

from __future__ import annotations

import numpy as np
import pytest

import compiler
from compiler import Options
from compiler.cpu.model import schedule
from compiler.poly import ast_tree, astgen

TARGETS = ("interp", "llvm", "cuda-emulated")

SUM = "def f(float(3) A) -> (O) { O(i) +=! A((i + l) / 2) where i in 0:4, l in 0:2 }"
PAIRS = "def f(float(3) A) -> (O) { O(i, l) = A((i + l) / 2) where i in 0:4, l in 0:2 }"


def _scatter(grad_out: np.ndarray, n: int) -> np.ndarray:
    """A_grad of `O(i, l) = A((i + l) / 2)` (or its sum over l) by brute force."""
    out = np.zeros(n)
    for i in range(4):
        for ll in range(2):
            out[(i + ll) // 2] += grad_out[i] if grad_out.ndim == 1 else grad_out[i, ll]
    return out


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("gather", ("auto", "full", "partial"))
def test_floor_div_gather_with_constant_ranges(target: str, gather: str) -> None:
    options = Options(gather=gather) if target == "llvm" else None
    k = compiler.define(SUM, target=target, options=options)
    c = np.array([1, 10, 100, 1000], np.float32)
    (got,) = k.vjp(np.ones(3, np.float32), grad_outputs=(c,))
    np.testing.assert_array_equal(got, _scatter(c, 3))
    np.testing.assert_array_equal(got, [12, 1210, 1000])


@pytest.mark.parametrize("target", TARGETS)
def test_floor_div_pointwise_with_constant_ranges(target: str) -> None:
    k = compiler.define(PAIRS, target=target)
    c = np.arange(1, 9, dtype=np.float32).reshape(4, 2)
    (got,) = k.vjp(np.ones(3, np.float32), grad_outputs=(c,))
    np.testing.assert_array_equal(got, _scatter(c, 3))


REDUCED = """def f(double(N) A) -> (O1, O3, O2) {
    O1(i) +=! A(i) where i in 0:N, j in 0:5
    O2(i) +=! (A((i + j) / 2) + (A(i) * 4.0)) where j in 0:N - 1
    O3(i) = (double((O1(i) + A((i) / 2))) + cbrt(((O2(i) * O2(i)) + 1.0)))
}"""


@pytest.mark.parametrize("threads", (1, 2))
def test_floor_div_inside_a_reduction_gradchecks(threads: int) -> None:
    a = np.random.default_rng(0).standard_normal(17)
    compiler.gradcheck(compiler.define(REDUCED, options=Options(threads=threads)), a)


def test_the_mark_holds_the_outer_values(monkeypatch: pytest.MonkeyPatch) -> None:
    """isl's AST of the gather with its default loops (astgen separates them over
    pieces with floors now, where none is specialised): a branch specialises `y` to 0
    below the mark, the mark's own value of `y` is the loop variable, and the lowered
    gradient is right."""
    monkeypatch.setattr(astgen, "_pieces_or_floors", lambda domain: False)
    gradient = compiler.pipeline.run(SUM, grad=True, upto="gather")
    sched = schedule(gradient, Options(innermost=None, tile=()))
    (nest,) = sched.nests
    assert nest.accumulate and nest.outer == ("y",)
    node = ast_tree.from_isl(astgen.build_ast(nest, sched.context, None))
    assert isinstance(node, ast_tree.For) and isinstance(node.body, ast_tree.Mark)
    assert dict(node.body.values)["y"] == compiler.loops.VarRef("y")
    first = ast_tree.first_user(node.body.child)
    assert first is not None and first.args[0] != compiler.loops.VarRef("y")
    k = compiler.define(SUM, options=Options(gather="full"))
    c = np.array([1, 10, 100, 1000], np.float32)
    (got,) = k.vjp(np.ones(3, np.float32), grad_outputs=(c,))
    np.testing.assert_array_equal(got, [12, 1210, 1000])
