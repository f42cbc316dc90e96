"""Gradients through clamped reads whose split needs care (issues 43, 50, 51), checked
in float64 against central differences on every CPU target.

- a clamp argument that is never taken gives an empty piece, which is dropped
  (`A(min(i, N - 1)) where i in 0:N`), not a statement that "runs for no sizes";
- the pieces of a statement that reads its own output read it as it was before the
  statement, as the forward does (`O(i) += O(0) * A(min(k + 1, N - 1))`);
- a statement with lets is split like one without;
- a piece is dropped when one of its reads alone bounds it empty;
- the last piece of a `max=` / `min=` passes the adjoint on to the elements it does
  not write (its condition makes it partial).
"""

from __future__ import annotations

import numpy as np
import pytest

import compiler
from compiler import Options
from compiler.autodiff.emptiness import runs_never
from compiler.frontend.ast import Binary, BinOp, Const, Expr, RangeConstraint, ScalarType, Var

TARGETS = {
    "interp": {"target": "interp"},
    "llvm-1": {"target": "llvm", "options": Options(threads=1)},
    "llvm-2": {"target": "llvm", "options": Options(threads=2)},
    "cuda-emulated": {"target": "cuda-emulated"},
}

DEFS = {
    "min never clamps": (
        "def f(double(N) A) -> (O) { O(i) = A(min(i, N - 1)) where i in 0:N }",
        (5,),
    ),
    "max never clamps": (
        "def f(double(M) D) -> (O1) {\n"
        "    O1(i) +=! D(max(i - k, 0)) where i in 0:M, k in 0:3, i - k in 0:M\n}",
        (6,),
    ),
    "both sides, one never": (
        "def f(double(N) A) -> (O) { O(i) = A(max(min(i, N - 1), i - 2)) where i in 0:N }",
        (4,),
    ),
    "reads its own output": (
        "def f(double(N) A) -> (O) {\n"
        "    O(i) = A(i)\n"
        "    O(i) += O(0) * A(min(k + 1, N - 1)) where k in 0:N\n}",
        (3,),
    ),
    "reads its own output, both sides": (
        "def f(double(N) A) -> (O) {\n"
        "    O(i) = A(i)\n"
        "    O(i) += O(N - 1) * A(max(min(k + i - 1, N - 1), 0)) where k in 0:3\n}",
        (4,),
    ),
    "min= pieces read their own output": (
        "def f(double(N) A) -> (O) {\n"
        "    O(i) = A(i)\n"
        "    O(i) min= A(max(i - 1, 0)) * O(0) where i in 0:N\n}",
        (5,),
    ),
    "max= pieces": (
        "def f(double(N) A) -> (O) {\n"
        "    O(i) = A(i)\n"
        "    O(i) max= O(N - 1) * A(min(i + 1, N - 1)) where i in 0:N\n}",
        (4,),
    ),
    "let": (
        "def f(double(N) A) -> (O) { O(i) = A(min(i, N - 1)) + t where i in 0:3, t = 0.5 }",
        (2,),
    ),
    # a piece whose reads keep it empty (k5 >= N against i3 + 2 * k5 < N), which
    # Fourier-Motzkin could not decide over all reads at once (fuzz seed 62358)
    "empty through one of many reads": (
        "def f(double(N, N, M) A) -> (P) {\n"
        "    P(i3, i4) +=! t0 + tanh(A(i3 / 2, i4 / 2, min(max(i3 - 1, 0), M - 1)))"
        " / (A(i3 + 2 * k5, i4, min(i3, M - 1)) * A(i3 + 2 * k5, i4, min(i3, M - 1)) + 1.0)"
        " where i3 in 0:N - 2, k5 in 0:M, i4 in 0:i3 + 1,"
        " t0 = A(min(i4, N - 1), min(k5, N - 1), M - 1 - k5)\n}",
        (3, 3, 2),
    ),
    "let read through": (
        "def f(double(N) A) -> (O) {\n"
        "    O(i) +=! t * t where i in 0:N, k in 0:3, t = A(min(i + k, N - 1))\n}",
        (4,),
    ),
}


@pytest.mark.parametrize("target", sorted(TARGETS))
@pytest.mark.parametrize("case", sorted(DEFS))
def test_gradient_matches_finite_differences(case: str, target: str) -> None:
    source, shape = DEFS[case]
    k = compiler.define(source, cache=False, **TARGETS[target])
    compiler.gradcheck(k, np.random.default_rng(50).standard_normal(shape))


def test_reads_of_its_own_output_by_hand() -> None:
    """O = A + O(0) * sum_k A(min(k + 1, N - 1)): the example of issue 50 (N = 3)."""
    k = compiler.define(DEFS["reads its own output"][0], target="interp", cache=False)
    a = np.array([0.5, -1.5, 2.0])
    g = np.array([1.0, 10.0, 100.0])
    (got,) = k.vjp(a, grad_outputs=(g,))
    s = a[1] + 2 * a[2]  # k = 0, 1, 2 read A(1), A(2), A(2)
    want = g.copy()
    want[0] += g.sum() * s
    want[1] += g.sum() * a[0]
    want[2] += g.sum() * a[0] * 2
    np.testing.assert_allclose(got, want)


def test_an_empty_piece_leaves_no_statement() -> None:
    text = compiler.grad(DEFS["min never clamps"][0], form="scatter")
    assert "A_grad(N - 1)" not in text


def _in(e: Expr, lo: Expr, hi: Expr) -> RangeConstraint:
    return RangeConstraint(e, lo, hi)


def test_emptiness_is_decided_over_integers_and_every_size() -> None:
    i, n = Var("i"), Var("N")
    one = Const(1, ScalarType.INT32)
    below = _in(i, Const(0, ScalarType.INT32), n)
    past = Binary(BinOp.SUB, i, Binary(BinOp.SUB, n, one))  # i - (N - 1) >= 1
    assert not runs_never((below,), ("N",))
    assert runs_never((below, _in(past, one, Binary(BinOp.ADD, past, one))), ("N",))
    # 2 * i in 1:2 has a rational point (i = 1/2), no integer one
    twice = Binary(BinOp.MUL, Const(2, ScalarType.INT32), i)
    assert runs_never((_in(twice, one, Const(2, ScalarType.INT32)),), ())
    # N in 0:1 is empty only because every size is at least 1
    assert runs_never((_in(n, Const(0, ScalarType.INT32), one),), ("N",))
    assert not runs_never((_in(n, Const(0, ScalarType.INT32), one),), ())


# the forward needs `M <= 2` (checked at every call) to keep `A(2 * i + 2 * k)` in
# bounds; the clamp's piece `k in 2:M` is empty under it (fuzz seed 71149, reduced)
PRECONDITION = """def f(double(N) A, double(M) B) -> (O) {
    O(i) +=! A(2 * i + 2 * k) * B(max(k - 2, 0)) where i in 0:(N - 3) / 2 + 1, k in 0:M
}"""


@pytest.mark.parametrize("target", sorted(TARGETS))
@pytest.mark.parametrize("sizes", [(7, 2), (6, 2), (5, 1)])
def test_a_piece_empty_under_the_preconditions_is_dropped(sizes: tuple, target: str) -> None:
    assert "B(k - 2)" not in compiler.grad(PRECONDITION, form="scatter")
    k = compiler.define(PRECONDITION, cache=False, **TARGETS[target])
    rng = np.random.default_rng(71149)
    compiler.gradcheck(k, rng.standard_normal(sizes[0]), rng.standard_normal(sizes[1]))
