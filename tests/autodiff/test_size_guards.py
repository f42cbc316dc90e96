"""Range constraints on sizes only (`where N - H - 1 in 0:...`): guards on the sizes.

The gather pass and AD emit them (issue 14: "the gather form does not check", and
`I_grad(N - 1) += ... where N - 1 in 0:N` rejected by tcc's own checker); the
checker accepts them and every target runs the statement only for the sizes that
satisfy the guard. Gradients are checked against finite differences in float64
through the reference evaluator and LLVM, for sizes on both sides of each guard.
"""

from __future__ import annotations

import numpy as np
import pytest

import compiler

GUARDED_READS = {
    "diagonal": "def g(float(N, H) D) -> (O) { O(kh) +=! D(h, h - kh) * D(n, h) }",
    "repeated index": "def g(float(N, M, K) I) -> (O) { O(i) +=! I(j, i + j, j) }",
    "constant subscript in ternary": (
        "def f(float(N) I) -> (B) {\n"
        "    B(x) = I(x) + (x + 1 < N ? I(x + 1) : I(N - 1)) where x in 0:N\n}"
    ),
}
SHAPES = {
    "diagonal": [((5, 3),), ((3, 3),), ((4, 1),)],
    "repeated index": [((2, 5, 3),), ((3, 5, 2),), ((3, 4, 3),)],
    "constant subscript in ternary": [((1,),), ((2,),), ((7,),)],
}


@pytest.mark.parametrize("case", sorted(GUARDED_READS))
def test_the_gradient_checks_and_reparses(case: str) -> None:
    src = GUARDED_READS[case]
    for form in ("scatter", "gather"):
        text = compiler.grad(src, form=form)
        compiler.define(text, target="interp")  # tcc's own output is valid TC


@pytest.mark.parametrize("target", ["interp", "llvm"])
@pytest.mark.parametrize("case", sorted(GUARDED_READS))
def test_gradcheck(case: str, target: str) -> None:
    rng = np.random.default_rng(3)
    k = compiler.define(GUARDED_READS[case], target=target, cache=False)
    for shapes in SHAPES[case]:
        compiler.gradcheck(k, *(rng.standard_normal(s) for s in shapes))


def test_a_guard_on_sizes_runs_the_statement_only_where_it_holds() -> None:
    src = (
        "def f(float(N) A) -> (B) {\n"
        "    B(x) = A(x) where x in 0:N\n"
        "    B(x) += 10.0 where x in 0:N, N - 3 in 0:N\n"
        "}\n"
    )
    for n in (1, 2, 3, 4, 7):
        a = np.arange(n, dtype=np.float32)
        want = a + (10.0 if n >= 3 else 0.0)
        for target in ("interp", "llvm"):
            (got,) = compiler.define(src, target=target, cache=False)(a)
            np.testing.assert_array_equal(got, want)
