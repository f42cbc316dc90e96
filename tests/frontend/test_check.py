"""Tests of frontend.check: one golden diagnostic per user error, and the facts of
accepted defs (index/reduction variables, sizes, dtypes, normalisation, warnings)."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from compiler.diagnostics import SemanticError, Severity
from compiler.frontend.ast import (
    Access,
    AssignOp,
    Binary,
    BinOp,
    Call,
    Cast,
    CmpOp,
    Compare,
    Const,
    Def,
    Exists,
    Expr,
    Let,
    Logical,
    LogicOp,
    Param,
    RangeConstraint,
    ScalarType,
    Select,
    Stmt,
    Unary,
    UnaryOp,
    Var,
    WhereClause,
)
from compiler.frontend.check import check_def, check_module
from compiler.frontend.checked import CheckedDef, Role
from compiler.frontend.parser import parse
from compiler.frontend.scopes import var_uses, walk, where_exprs
from compiler.frontend.types import expr_type, stmt_env

ERRORS_DIR = Path(__file__).parent / "errors"
ERROR_FILES = sorted(ERRORS_DIR.glob("*.tc"))


def check(text: str) -> CheckedDef:
    return check_def(parse(text, "test.tc").get())


def errors_of(text: str) -> list[str]:
    with pytest.raises(SemanticError) as info:
        check_module(parse(text, "test.tc"))
    return [d.message for d in info.value.diagnostics]


# --------------------------------------------------------------- golden errors


def test_error_files_exist() -> None:
    assert len(ERROR_FILES) >= 30


@pytest.mark.parametrize("path", ERROR_FILES, ids=lambda p: p.stem)
def test_error_golden(path: Path, golden) -> None:  # type: ignore[no-untyped-def]
    module = parse(path.read_text(), f"{path.parent.name}/{path.name}")
    with pytest.raises(SemanticError) as info:
        check_module(module)
    diags = info.value.diagnostics
    assert all(d.severity is Severity.ERROR for d in diags)
    assert [d.span.start for d in diags] == sorted(d.span.start for d in diags)
    golden.check(f"frontend/errors/{path.stem}.txt", info.value.render() + "\n")


def test_several_errors_in_one_def_are_all_reported() -> None:
    messages = errors_of((ERRORS_DIR / "several_errors.tc").read_text())
    assert len(messages) == 7
    assert "'A' is an input and TC inputs are immutable" in messages
    assert any("'exp' takes 1 argument but 2 were given" in m for m in messages)
    assert any(m.startswith("unknown tensor or function 'undefined'") for m in messages)


def test_errors_of_all_defs_are_reported() -> None:
    text = """
    def f(float(N) A) -> (O) { O(i) = B(i) }
    def g(float(N) A) -> (O) { O(i) +=! A(i, j) }
    """
    messages = errors_of(text)
    assert len(messages) == 2
    assert messages[0].startswith("unknown tensor or function 'B'")
    assert messages[1].startswith("'A' has 1 dimension but is read with 2 subscripts")


def test_misspelled_size_hint_ignores_case() -> None:
    with pytest.raises(SemanticError) as info:
        check("def f(float(N, W) X) -> (O) { O(n) +=! X(n, x) / w }")
    (diag,) = info.value.diagnostics
    assert diag.message.startswith("'w' is not a size, tensor or index variable")
    assert diag.hint == "did you mean 'W'?"
    assert diag.span.text == "w"


# -------------------------------------------------------------------- facts


MATMUL = """
def matmul(float(M, K) A, float(K, N) B) -> (C) {
    C(m, n) +=! A(m, k) * B(k, n)
}
"""


def test_matmul_facts() -> None:
    c = check(MATMUL)
    assert c.size_params == ("M", "K", "N")
    (facts,) = c.stmts
    assert facts.index_vars == ("m", "n")
    assert facts.reduction_vars == ("k",)
    assert facts.lets == ()
    out = c.tensor("C")
    assert (out.role, out.dtype, out.rank, out.dims) == (Role.OUTPUT, ScalarType.FLOAT32, 2, None)
    assert [t.name for t in c.inputs] == ["A", "B"]
    assert c.warnings == ()


def test_affine_lhs_index_vars_in_order() -> None:
    c = check(
        """
        def conv_grad(float(N, C, H) I, float(M, C, KH) W, float(N, M, HO) O_grad)
            -> (I_grad) {
            I_grad(n, c, h + kh) +=! O_grad(n, m, h) * W(m, c, kh)
        }
        """
    )
    (facts,) = c.stmts
    assert facts.index_vars == ("n", "c", "h", "kh")
    assert facts.reduction_vars == ("m",)
    assert c.size_params == ("N", "C", "H", "M", "KH", "HO")


def test_reduction_vars_rhs_first_then_where() -> None:
    c = check(
        """
        def f(float(N, N) A) -> (O) {
            O(i) +=! A(i, j) where k in 0:N, j in 0:N, x = A(k, j)
        }
        """
    )
    (facts,) = c.stmts
    assert facts.reduction_vars == ("j", "k")
    assert facts.lets == ("x",)


def test_zero_d_tensors_are_normalised_to_accesses() -> None:
    text = """
    def f(float(N) A, float b) -> (s, O) {
        s +=! A(i)
        O(i) = A(i) * b / s
    }
    """
    c = check(text)
    rhs = c.definition.stmts[1].rhs
    accesses = [n for n in walk(rhs) if isinstance(n, Access)]
    assert [(a.name, a.args) for a in accesses] == [("A", (Var("i"),)), ("b", ()), ("s", ())]
    b = accesses[1]
    assert b.span.text == "b"
    assert not any(isinstance(n, Var) and n.name in ("b", "s") for n in walk(rhs))
    assert c.stmts[1].stmt == c.definition.stmts[1]
    assert c.tensor("s").rank == 0
    assert c.tensor("b").rank == 0


def test_def_without_zero_d_tensors_is_returned_unchanged() -> None:
    d = parse(MATMUL).get()
    assert check_def(d).definition is d


def test_inferred_output_dtypes() -> None:
    c = check(
        """
        def f(int32(N) I, double(N) D, float(N) F) -> (a, b, c, d, float(N) e) {
            a(i) = I(i) + 1
            b(i) = D(i) * F(i)
            c(i) = exp(I(i))
            d(i) = I(i) > 0 ? 1 : 0
            e(i) = I(i)
        }
        """
    )
    dtypes = {t.name: t.dtype.value for t in c.outputs}
    assert dtypes == {"a": "int32", "b": "float64", "c": "float32", "d": "int32", "e": "float32"}


def test_output_dtype_comes_from_first_write() -> None:
    c = check(
        """
        def f(int32(N) I, float(N) F) -> (O) {
            O(i) = I(i)
            O(i) = O(i) + F(i)
        }
        """
    )
    assert c.tensor("O").dtype is ScalarType.INT32


@pytest.mark.parametrize(
    ("declared", "rhs", "ok"),
    [
        ("float", "I(i)", True),  # int -> float widens
        ("int32", "U(i)", True),  # uint8 -> int32
        ("int32", "I(i) * 2", True),
        ("int32", "int32(F(i))", True),
        ("int32", "F(i)", False),
        ("uint8", "I(i)", False),  # int32 into uint8
        ("float", "D(i)", False),  # float64 into float32
        ("double", "F(i)", True),
    ],
)
def test_narrowing_rule(declared: str, rhs: str, ok: bool) -> None:
    text = f"""
    def f(int32(N) I, uint8(N) U, float(N) F, double(N) D) -> ({declared}(N) O) {{
        O(i) = {rhs}
    }}
    """
    if ok:
        check(text)
    else:
        (message,) = errors_of(text)
        assert "without an explicit cast" in message


def test_accumulating_first_write_warns() -> None:
    c = check("def f(float(M, N) A) -> (O) { O(i) += A(i, j) }")
    (warning,) = c.warnings
    assert warning.severity is Severity.WARNING
    assert warning.message.startswith("reduction without initialization: 'O'")
    assert warning.hint is not None and "'+=!'" in warning.hint
    assert warning.span.text == "O"


@pytest.mark.parametrize(
    "body",
    [
        "O(i) +=! A(i, j)",
        "O(i) = 0.0 where i in 0:M\n O(i) += A(i, j)",
        "O(i) max=! A(i, j)",
    ],
)
def test_initialized_reductions_do_not_warn(body: str) -> None:
    assert check(f"def f(float(M, N) A) -> (O) {{ {body} }}").warnings == ()


def test_info_is_an_ordinary_identifier() -> None:
    c = check("def f(float(N) info) -> (O) { O(i) = info(i) + i }")
    assert c.inputs[0].name == "info"


def test_indirect_integral_subscript_is_fine() -> None:
    c = check("def gather(float(N) A, int32(M) idx) -> (O) { O(i) = A(idx(i)) }")
    assert c.stmts[0].index_vars == ("i",)
    assert c.stmts[0].reduction_vars == ()


def test_lets_and_outer_index_in_range_bound() -> None:
    c = check(
        """
        def tri(float(N, N) A) -> (O) {
            O(i) +=! x where j in 0:i + 1, x = A(i, j) * 2
        }
        """
    )
    (facts,) = c.stmts
    assert (facts.index_vars, facts.reduction_vars, facts.lets) == (("i",), ("j",), ("x",))


def test_size_on_lhs_is_a_size_not_an_index() -> None:
    c = check(
        """
        def concat(float(M) A, float(N) B) -> (O) {
            O(i) = A(i)
            O(i + M) = B(i)
        }
        """
    )
    assert c.stmts[1].index_vars == ("i",)


def test_check_module_returns_every_def() -> None:
    defs = check_module(parse(MATMUL + "def g(float(N) A) -> (O) { O(i) = A(i) }"))
    assert [d.name for d in defs] == ["matmul", "g"]


def test_const_dtype_is_kept() -> None:
    c = check("def f(float(N) A) -> (O) { O(i) = A(i) + 1 }")
    rhs = c.definition.stmts[0].rhs
    consts = [n for n in walk(rhs) if isinstance(n, Const)]
    assert consts == [Const(1, ScalarType.INT32)]


# ------------------------------------------------------ robustness (hypothesis)

_VARS = ("i", "j", "k", "N", "M", "s", "A", "x", "w")
_TENSORS = ("A", "B", "O", "P", "s", "Q", "N", "i")


def _exprs() -> st.SearchStrategy[Expr]:
    leaves = st.one_of(
        st.sampled_from(_VARS).map(Var),
        st.integers(0, 3).map(lambda v: Const(v, ScalarType.INT32)),
        st.just(Const(0.5, ScalarType.FLOAT32)),
    )

    def extend(sub: st.SearchStrategy[Expr]) -> st.SearchStrategy[Expr]:
        args = st.lists(sub, max_size=3).map(tuple)
        return st.one_of(
            st.builds(Access, st.sampled_from(_TENSORS), args),
            st.builds(Call, st.sampled_from(("exp", "min", "fmax")), args),
            st.builds(Binary, st.sampled_from(BinOp), sub, sub),
            st.builds(Unary, st.sampled_from(UnaryOp), sub),
            st.builds(Compare, st.sampled_from(CmpOp), sub, sub),
            st.builds(Logical, st.sampled_from(LogicOp), sub, sub),
            st.builds(Select, sub, sub, sub),
            st.builds(Cast, st.sampled_from((ScalarType.INT32, ScalarType.FLOAT32)), sub),
        )

    return st.recursive(leaves, extend, max_leaves=8)


def _clauses() -> st.SearchStrategy[WhereClause]:
    return st.one_of(
        st.builds(RangeConstraint, _exprs(), _exprs(), _exprs()),
        st.builds(Let, st.sampled_from(("x", "y", "N")), _exprs()),
        st.builds(Exists, _exprs()),
    )


def _stmts() -> st.SearchStrategy[Stmt]:
    lhs_args = st.lists(_exprs(), max_size=3).map(tuple)
    return st.builds(
        Stmt,
        st.builds(Access, st.sampled_from(("O", "P", "A", "Q")), lhs_args),
        st.sampled_from(AssignOp),
        _exprs(),
        st.lists(_clauses(), max_size=2).map(tuple),
    )


_SIGNATURE = (
    Param("A", ScalarType.FLOAT32, (Var("N"), Var("M"))),
    Param("B", ScalarType.INT32, (Var("N"),)),
    Param("s", ScalarType.FLOAT32, ()),
)


@given(
    st.lists(_stmts(), min_size=1, max_size=3),
    st.sampled_from(((Param("O", None, None),), (Param("O", ScalarType.INT32, (Var("N"),)),))),
)
def test_check_never_crashes_and_accepted_defs_type(stmts: list[Stmt], outs: tuple) -> None:  # type: ignore[type-arg]
    d = Def("f", _SIGNATURE, outs, tuple(stmts))
    try:
        c = check_def(d)
    except SemanticError as e:
        assert e.diagnostics and all(d.severity is Severity.ERROR for d in e.diagnostics)
        assert e.render()
        return
    zero_d = {t.name for t in c.tensors if t.rank == 0}
    for facts, stmt in zip(c.stmts, c.definition.stmts, strict=True):
        assert not set(facts.index_vars) & set(facts.reduction_vars)
        exprs = (stmt.rhs, *where_exprs(stmt))
        assert not any(isinstance(n, Var) and n.name in zero_d for n in var_uses(exprs))
        expr_type(stmt.rhs, stmt_env(c, facts))  # every name of an accepted rhs has a type


def test_reduction_var_only_in_equivalent_is_reported_there() -> None:
    # As in TC, the accesses after `<=>` introduce index variables too.
    with pytest.raises(SemanticError) as info:
        check("def f(float(N) X) -> (O) { O(n) = exp(X(n)) <=> softmax(X(mm)) }")
    (diag,) = info.value.diagnostics
    assert "reduction variable 'mm'" in diag.message
    assert diag.span.text == "mm"
