"""autodiff.simplify and autodiff.normal: the simplified expression equals the original
(integers exactly, with floor division and remainder; floats up to rounding), and the
statement-level rewrites (merged contributions, shared subexpressions) keep the def's
values."""

from __future__ import annotations

import math
import operator

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

import compiler
from compiler.autodiff.normal import fold_index, tidy
from compiler.autodiff.simplify import simplify
from compiler.frontend.ast import Binary, BinOp, Call, Const, Expr, ScalarType, Unary, UnaryOp, Var
from compiler.frontend.parser import parse
from compiler.frontend.printer import print_def, print_expr
from compiler.frontend.types import INDEX_TYPE, expr_type
from compiler.frontend.visit import walk
from tests.autodiff.kit import reparse

NAMES = ("i", "j", "H", "K")


def _rhs(text: str) -> Expr:
    return parse(f"def f(float(N) A) -> (O) {{ O(i) = {text} }}").get().stmts[0].rhs


def _eval(e: Expr, env: dict[str, float], integer: bool) -> float:
    """The value of `e` at `env`: TC's integer semantics (floor division and remainder)
    when `integer`, else float64."""
    if isinstance(e, Const):
        return e.value
    if isinstance(e, Var):
        return env[e.name]
    if isinstance(e, Unary):
        return -_eval(e.operand, env, integer)
    if isinstance(e, Call):
        args = [_eval(a, env, integer) for a in e.args]
        return {"exp": math.exp, "tanh": math.tanh, "min": min, "max": max}[e.fn](*args)
    assert isinstance(e, Binary)
    a, b = _eval(e.lhs, env, integer), _eval(e.rhs, env, integer)
    ops = {BinOp.ADD: operator.add, BinOp.SUB: operator.sub, BinOp.MUL: operator.mul}
    if e.op in ops:
        return ops[e.op](a, b)
    if e.op is BinOp.DIV:
        return a // b if integer else a / b
    return a % b


def _index_exprs() -> st.SearchStrategy[Expr]:
    leaf = st.one_of(
        st.sampled_from(NAMES).map(Var),
        st.integers(-3, 3).map(lambda v: Const(v, ScalarType.INT32)),
    )

    def grow(inner: st.SearchStrategy[Expr]) -> st.SearchStrategy[Expr]:
        sums = st.tuples(st.sampled_from([BinOp.ADD, BinOp.SUB]), inner, inner).map(
            lambda t: Binary(t[0], t[1], t[2])
        )
        scaled = st.tuples(st.integers(-3, 3), inner).map(
            lambda t: Binary(BinOp.MUL, Const(t[0], ScalarType.INT32), t[1])
        )
        floor = st.tuples(st.sampled_from([BinOp.DIV, BinOp.MOD]), inner, st.integers(1, 4)).map(
            lambda t: Binary(t[0], t[1], Const(t[2], ScalarType.INT32))
        )
        neg = inner.map(lambda e: Unary(UnaryOp.NEG, e))
        return st.one_of(sums, scaled, floor, neg)

    return st.recursive(leaf, grow, max_leaves=10)


@settings(max_examples=300, deadline=None)
@given(_index_exprs(), st.lists(st.integers(-20, 20), min_size=4, max_size=4))
def test_folded_index_equals_the_original_on_integers(e: Expr, point: list[int]) -> None:
    env = dict(zip(NAMES, point, strict=True))
    folded = fold_index(e)
    assert _eval(folded, env, integer=True) == _eval(e, env, integer=True)
    assert sum(1 for _ in walk(folded)) <= sum(1 for _ in walk(e))


def _float_exprs() -> st.SearchStrategy[Expr]:
    leaf = st.one_of(
        st.sampled_from(("a", "b", "c")).map(Var),
        st.sampled_from([0, 1, 2]).map(lambda v: Const(v, ScalarType.INT32)),
        st.sampled_from([0.0, 1.0, 0.5]).map(lambda v: Const(v, ScalarType.FLOAT32)),
    )

    def grow(inner: st.SearchStrategy[Expr]) -> st.SearchStrategy[Expr]:
        ops = st.sampled_from([BinOp.ADD, BinOp.SUB, BinOp.MUL, BinOp.DIV])
        binary = st.tuples(ops, inner, inner).map(lambda t: Binary(t[0], t[1], t[2]))
        neg = inner.map(lambda e: Unary(UnaryOp.NEG, e))
        call = inner.map(lambda e: Call("tanh", (e,)))
        return st.one_of(binary, neg, call)

    return st.recursive(leaf, grow, max_leaves=12)


@settings(max_examples=300, deadline=None)
@given(_float_exprs(), st.lists(st.floats(-2, 2), min_size=3, max_size=3))
def test_tidied_float_expression_equals_the_original(e: Expr, point: list[float]) -> None:
    env = dict(zip(("a", "b", "c"), (p + 3.0 for p in point), strict=True))  # no 0 divisor
    try:
        want = _eval(e, env, integer=False)
    except ZeroDivisionError:
        return
    got = _eval(tidy(e, lambda _: ScalarType.FLOAT64), env, integer=False)
    assert math.isclose(got, want, rel_tol=1e-9, abs_tol=1e-9)


def test_index_arithmetic_folds() -> None:
    assert print_expr(fold_index(_rhs("H + (y - H)"))) == "y"
    assert print_expr(fold_index(_rhs("y - 2 * kh + kh + 1 - 1"))) == "y - kh"
    assert print_expr(fold_index(_rhs("(h + kh - kh) / 2"))) == "h / 2"
    assert print_expr(fold_index(_rhs("2 * N - 3"))) == "2 * N - 3"  # already folded


def test_signs_like_terms_and_zeros() -> None:
    def tidied(text: str) -> str:
        return print_expr(tidy(_rhs(text), lambda _: ScalarType.FLOAT64))

    assert tidied("a * b + a * b") == "2 * (a * b)"
    assert tidied("-(-(x / (b * b)) * e)") == "x / (b * b) * e"
    assert tidied("a + -b") == "a - b"
    assert tidied("a * b - a * b + c") == "c"
    assert tidied("2 * x + x") == "3 * x"


def test_integer_division_keeps_its_sign_and_float_units_their_type() -> None:
    integer = lambda _: INDEX_TYPE  # noqa: E731
    assert print_expr(tidy(_rhs("(-i) / 2"), integer)) == "-i / 2"
    assert print_expr(tidy(_rhs("i * 1.0"), integer)) == "i * 1.0"
    assert print_expr(tidy(_rhs("i * 1"), integer)) == "i"


def test_a_cancelled_double_term_keeps_its_type() -> None:
    """`A(i) - A(i)` of a double `A` is `double(0)`: as the int32 literal `0` it made
    `rsqrt(0 * 0 + 0.5)` a float32 and the jvp's outputs float32 (fuzz seed 61157)."""
    env = {"A": ScalarType.FLOAT64, "i": INDEX_TYPE}
    tidied = tidy(_rhs("(A(i) - A(i)) * (A(i) - A(i)) + 0.5"), lambda e: expr_type(e, env))
    assert print_expr(tidied) == "double(0) * double(0) + 0.5"
    src = """def f(double(N) A) -> (O) {
        O(i) = rsqrt((A(i) - A(i)) * (A(i) - A(i)) + 0.5)
        O(i) += A(k) where k in 0:i + 1
    }"""
    a = np.linspace(-1.0, 1.0, 7)
    t = np.linspace(0.5, -0.25, 7)
    k = compiler.define(src, "f", target="interp", cache=None)
    (o,), (o_dot,) = k.jvp(a, tangents=(t,))
    assert o.dtype == np.float64 and o_dot.dtype == np.float64
    np.testing.assert_allclose(o, 1 / np.sqrt(0.5) + np.cumsum(a), rtol=1e-15)
    np.testing.assert_allclose(o_dot, np.cumsum(t), rtol=1e-15, atol=1e-15)


MERGE_DOWN = """
def g(double(N, D) S, double(N) Q) -> (double(N, D) R, double(N) T) {
    R(n, d) +=! S(n, d) * 2.0 where n in 0:N, d in 0:D
    T(n) +=! S(n, d) where n in 0:N, d in 0:D
    R(i0, i1) += T(i0) + Q(i0) where i0 in 0:N, i1 in 0:D
}
"""


def test_a_first_write_moves_down_to_the_contribution_that_reads_a_later_value() -> None:
    d = parse(MERGE_DOWN).get()
    text = print_def(simplify(d))
    assert text.count("R(") == 1, text
    assert "R(n, d) +=! S(n, d) * 2.0 + (T(n) + Q(n)) where n in 0:N, d in 0:D" in text
    assert text.index("T(n) +=!") < text.index("R(n, d) +=!")
    s, q = np.random.default_rng(0).standard_normal((2, 3)), np.arange(2.0)
    before = compiler.define(MERGE_DOWN, target="interp")(s, q)
    after = compiler.define(text, target="interp")(s, q)
    for a, b in zip(before, after, strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-12)


def test_no_merge_when_both_moves_cross_a_write() -> None:
    text = """
def g(float(N) S) -> (float(N) R, float(N) T) {
    R(i) +=! T(i) where i in 0:N
    T(i) = S(i) where i in 0:N
    R(i) += T(i) where i in 0:N
}
"""
    d = parse(text).get()
    assert simplify(d) is d


def test_a_repeated_call_is_a_let_computed_once() -> None:
    text = """
def g(double(N) X, double(N) O_grad) -> (double(N) X_grad) {
    X_grad(i) +=! O_grad(i) * exp(-X(i)) / ((1 + exp(-X(i))) * (1 + exp(-X(i)))) where i in 0:N
}
"""
    out = print_def(simplify(parse(text).get()))
    assert "O_grad(i) * t0 / (t1 * t1) where i in 0:N, t0 = exp(-X(i)), t1 = 1 + t0" in out
    x, g = np.random.default_rng(1).standard_normal((2, 5))
    before = compiler.define(text, target="interp")(x, g)
    after = compiler.define(out, target="interp")(x, g)
    np.testing.assert_allclose(after, before, rtol=1e-12)
    reparse(out)


def test_a_def_nothing_applies_to_is_returned_as_it_is() -> None:
    d = parse("def f(float(N) A) -> (B) { B(i) = exp(A(i)) + A(i) where i in 0:N }").get()
    assert simplify(d) is d


def test_gru_sigmoid_exp_is_computed_once_per_statement() -> None:
    from pathlib import Path

    corpus = Path("/work/shared/corpus/tc/synthetic_gru_cell.tc")
    if not corpus.exists():
        import pytest

        pytest.skip("the TC corpus is not on this machine")
    text = compiler.grad(corpus.read_text(), outputs="Hnext", form="scatter")
    for line in text.splitlines()[1:-1]:
        rhs = line.split(" where ")[0]
        assert rhs.count("exp(-(GX(1, b, h) + GH(1, b, h)))") <= 1, line


def test_a_comparison_operand_is_never_a_let() -> None:
    """`max=`'s winner test compares the recomputed candidate with the forward result:
    computed as in the forward def, never through a let (whose call the CPU may
    vectorise with a variant that differs in the last bit, losing winners)."""
    text = """
def g(float(N, K) A, float(N) O, float(N) O_grad) -> (float(N, K) A_grad) {
    A_grad(i, k) +=! O_grad(i) * (tanh(A(i, k)) == O(i) ? 1 : 0) * (1.0 - tanh(A(i, k)) * tanh(A(i, k))) where i in 0:N, k in 0:K
}
"""
    out = print_def(simplify(parse(text).get()))
    assert "(tanh(A(i, k)) == O(i) ? 1 : 0) * (1.0 - t0 * t0)" in out
    assert "t0 = tanh(A(i, k))" in out


def test_a_diagonal_write_is_not_merged_with_the_whole_box() -> None:
    """Fuzz seed 50674, reduced: `O_grad_acc(i6, i6) +=! P_grad(i6)` then the caller's
    `O_grad_acc(i0, i1) += O_grad(i0, i1)` over the whole box; renaming i0 and i1 to
    i6 made the two look alike, and the merged statement kept O's cotangent on the
    diagonal only."""
    import warnings

    import numpy as np

    src = """def f(double(N) A) -> (O, P) {
        O(i3, i4) += A(k5) where i3 in 0:N, i4 in 0:N, k5 in 0:N
        P(i6) +=! O(i6, i6) where i6 in 0:N
    }"""
    kernel = compiler.define(src, target="interp")
    a = np.arange(1.0, 4.0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # O accumulates into zeros
        (g,) = kernel.vjp(a, grad_outputs=(np.ones((3, 3)), np.ones(3)))
    np.testing.assert_array_equal(g, [12.0, 12.0, 12.0])  # 9 from O, 3 from P


def test_a_comparison_keeps_the_order_of_its_operands_sums() -> None:
    """Fuzz seed 71118: `(a - b) + a` compared with a result computed in that order
    must not become `2 * a - b`, which rounds differently (the tie is then missed)."""
    double = lambda _: ScalarType.FLOAT64  # noqa: E731
    assert print_expr(tidy(_rhs("a - b + a == c ? 1 : 0"), double)) == "a - b + a == c ? 1 : 0"
    assert print_expr(tidy(_rhs("a - b + a"), double)) == "2 * a - b"
    assert print_expr(tidy(_rhs("a - b + a"), double, exact=True)) == "a - b + a"
    assert print_expr(tidy(_rhs("-(-a) + x * 1 == c"), double)) == "a + x == c"  # exact rewrites


def test_a_recomputed_value_that_is_compared_keeps_its_bits() -> None:
    """A tensor read inside a comparison, and what its statement reads, is computed as
    written: not regrouped, not merged; a derivative statement beside it still is."""
    text = """
def g(double(N, K) A, double(N) O) -> (double(N) P, double(N) Q, double(N, K) D) {
    P(i) +=! A(i, k) - A(i, 0) + A(i, k) where i in 0:N, k in 0:K
    Q(i) +=! A(i, k) - A(i, 0) + A(i, k) == P(i) ? 1 : 0 where i in 0:N, k in 0:K
    D(i, k) +=! A(i, k) - A(i, 0) + A(i, k) where i in 0:N, k in 0:K
}
"""
    lines = print_def(simplify(parse(text).get())).splitlines()
    assert "P(i) +=! A(i, k) - A(i, 0) + A(i, k) where" in lines[1]
    assert "A(i, k) - A(i, 0) + A(i, k) == P(i)" in lines[2]
    assert "D(i, k) +=! 2 * A(i, k) - A(i, 0) where" in lines[3]


def test_the_tangent_of_a_max_over_a_regrouped_candidate_finds_its_winner() -> None:
    """Fuzz seed 71118: jvp and vjp of `O(i) max=! t0 + A(i, i)`, `t0 = A(i, i) - A(i, j)`
    agree (the dot-product test), with data whose sums round differently regrouped."""
    src = """def f(double(N, M) A) -> (O) {
        O(i) max=! t0 + A(i, min(i, M - 1)) where k in 0:2 * M - 2, l in 0:2,
            t0 = A(i, min(i, M - 1)) - A(i, (k + l) / 2)
    }"""
    rng = np.random.default_rng(71118)
    a = rng.normal(size=(3, 5))
    da, w = rng.normal(size=a.shape), rng.normal(size=3)
    for target in ("interp", "llvm"):
        kernel = compiler.define(src, target=target)
        _, (tangent,) = kernel.jvp(a, tangents=(da,))
        (g,) = kernel.vjp(a, grad_outputs=(w,))
        assert abs(float(w @ tangent) - float(np.sum(g * da))) < 1e-12, target
        assert np.any(tangent != 0), target
