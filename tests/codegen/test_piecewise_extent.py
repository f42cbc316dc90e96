"""An output whose extent is piecewise in the sizes: `O(i) = A(i) + B(i)` then
`O(i) = 1.0 where i in 0:5` makes `O` `max(min(N, M), 5)` long, which isl writes as a
case split (`N >= 6 && M >= N + 1 ? N : M >= 6 && N >= M ? M : 5`). Lowering such a
shape (`poly.lower_expr.bound_to_loops`) and evaluating it for a call
(`loops.arguments.eval_size_expr`) once raised InternalError; on every target, for
sizes on each side of each case, against NumPy."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest

from compiler.kernel import define
from compiler.loops import BinOp, Select, UnaryOp
from compiler.loops.arguments import eval_size_expr
from compiler.loops.ir import Bin, Const, DType, Unary, VarRef
from compiler.options import Options
from tests.codegen.kit import EVERY_TARGET

SIZES = [(3, 4), (7, 9), (9, 7), (6, 6), (8, 3), (5, 5), (2, 10), (70, 90)]


def _o(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    m = min(len(a), len(b))
    o = np.zeros(max(m, 5))
    o[:m] = a[:m] + b[:m]
    o[:5] = 1.0
    return o


PIECEWISE = "def f(float(N) A, float(M) B) -> (O{outs}) {{ O(i) = A(i) + B(i)\nO(i) = 1.0 where i in 0:5{more} }}"
CASES: list[tuple[str, str, Callable[..., tuple[np.ndarray, ...]]]] = [
    ("alone", PIECEWISE.format(outs="", more=""), lambda a, b: (_o(a, b),)),
    ("summed", PIECEWISE.format(outs=", S", more="\nS +=! O(i) * O(i)"),
     lambda a, b: (_o(a, b), np.sum(_o(a, b) ** 2))),
    ("outer", PIECEWISE.format(outs=", P", more="\nP(i, j) = O(i) * O(j)"),
     lambda a, b: (_o(a, b), np.outer(_o(a, b), _o(a, b)))),
]  # fmt: skip

TARGETS = EVERY_TARGET


@pytest.mark.parametrize(("target", "options"), TARGETS)
@pytest.mark.parametrize(("src", "ref"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_piecewise_output_extent(
    src: str,
    ref: Callable[..., tuple[np.ndarray, ...]],
    target: str,
    options: Options | None,
) -> None:
    kernel = define(src, target=target, options=options)
    rng = np.random.default_rng(0)
    for n, m in SIZES:
        a = rng.standard_normal(n).astype(np.float32)
        b = rng.standard_normal(m).astype(np.float32)
        got = kernel(a, b)
        for g, w in zip(got, ref(a, b), strict=True):
            assert np.shape(g) == np.shape(w), (n, m)
            np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5)


def test_eval_size_expr_of_a_case_split() -> None:
    n, m = VarRef("N"), VarRef("M")
    six = Const(6, DType.INT64)
    cond = Bin(BinOp.AND, Bin(BinOp.GE, n, six), Unary(UnaryOp.NOT, Bin(BinOp.LT, m, n)))
    e = Select(cond, n, Select(Bin(BinOp.OR, Bin(BinOp.EQ, m, six), Bin(BinOp.GT, m, six)), m, six))
    for nv, mv in [(7, 9), (7, 6), (3, 9), (3, 4), (9, 7)]:
        want = nv if nv >= 6 and mv >= nv else (mv if mv >= 6 else 6)
        assert eval_size_expr(e, {"N": nv, "M": mv}) == want
