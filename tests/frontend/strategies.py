"""Hypothesis strategies for random TC ASTs that the parser can produce.

Every tree drawn here is one that some TC text parses to: identifiers are never
keywords, type names or builtin names; constants are non-negative INT32 or FLOAT32
(the parser reads `-1` as a negation); a `Call` names a builtin with its arity from
`builtins.ARITY`; tensor reads are `Access`es of any arity (0 included); statement
left-hand sides index with variables, sometimes with affine expressions (tcc's
dialect); spans stay at their default, which equality ignores. Depth is bounded by
`max_leaves`, so every drawn expression prints to one short line.

Usage::

    @given(exprs())
    def test_roundtrip(e): assert parse_expr(print_expr(e)) == e
"""

from __future__ import annotations

from hypothesis import strategies as st

from compiler.frontend.ast import (
    TYPE_NAMES,
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
    Module,
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
from compiler.frontend.builtins import ARITY

RESERVED = frozenset(
    {"def", "where", "in", "exists", "min", "max", "true", "false"} | set(TYPE_NAMES) | set(ARITY)
)


def _usable(name: str) -> bool:
    # TC's lexer (strtod) reads `inf...`/`nan...` as numbers; keep names portable to TC.
    low = name.lower()
    return name not in RESERVED and not low.startswith(("inf", "nan"))


# Short names collide often, which exercises the same name used as Var and Access.
identifiers: st.SearchStrategy[str] = st.from_regex(
    r"[A-Za-z_][A-Za-z0-9_]{0,4}", fullmatch=True
).filter(_usable)

int_consts: st.SearchStrategy[Const] = st.integers(0, 2**31 - 1).map(
    lambda v: Const(v, ScalarType.INT32)
)
float_consts: st.SearchStrategy[Const] = st.floats(
    min_value=0.0, allow_nan=False, allow_infinity=False
).map(lambda v: Const(v, ScalarType.FLOAT32))
consts: st.SearchStrategy[Const] = st.one_of(int_consts, float_consts)
variables: st.SearchStrategy[Var] = identifiers.map(Var)
scalar_types: st.SearchStrategy[ScalarType] = st.sampled_from(list(ScalarType))


def _extend(children: st.SearchStrategy[Expr]) -> st.SearchStrategy[Expr]:
    """One more level of operators over `children`."""
    arg_lists = st.lists(children, max_size=3).map(tuple)
    calls = st.sampled_from(sorted(ARITY)).flatmap(
        lambda fn: st.tuples(*[children] * ARITY[fn]).map(lambda args: Call(fn, args))
    )
    return st.one_of(
        st.builds(Binary, st.sampled_from(list(BinOp)), children, children),
        st.builds(Compare, st.sampled_from(list(CmpOp)), children, children),
        st.builds(Logical, st.sampled_from(list(LogicOp)), children, children),
        st.builds(Unary, st.sampled_from(list(UnaryOp)), children),
        st.builds(Select, children, children, children),
        st.builds(Cast, scalar_types, children),
        st.builds(Access, identifiers, arg_lists),
        calls,
    )


def exprs(max_leaves: int = 12) -> st.SearchStrategy[Expr]:
    """Random expressions of every kind, with at most `max_leaves` leaves."""
    leaves = st.one_of(consts, variables, identifiers.map(lambda n: Access(n, ())))
    return st.recursive(leaves, _extend, max_leaves=max_leaves)


def _mentions_var(e: Expr) -> bool:
    if isinstance(e, Var):
        return True
    return isinstance(e, Binary) and (_mentions_var(e.lhs) or _mentions_var(e.rhs))


def affine_exprs() -> st.SearchStrategy[Expr]:
    """Affine index expressions that mention a variable, as a left-hand side index
    must: `i`, `h + kh`, `2 * i - 1`, `i - (j + k)`."""
    leaves = st.one_of(variables, int_consts.map(lambda c: Const(c.value % 8, c.dtype)))

    def extend(children: st.SearchStrategy[Expr]) -> st.SearchStrategy[Expr]:
        scaled = st.builds(
            Binary,
            st.just(BinOp.MUL),
            st.integers(1, 4).map(lambda v: Const(v, ScalarType.INT32)),
            children,
        )
        sums = st.builds(Binary, st.sampled_from([BinOp.ADD, BinOp.SUB]), children, children)
        return st.one_of(sums, scaled)

    return st.recursive(leaves, extend, max_leaves=4).filter(_mentions_var)


def accesses(args: st.SearchStrategy[Expr]) -> st.SearchStrategy[Access]:
    return st.builds(Access, identifiers, st.lists(args, max_size=3).map(tuple))


def where_clauses(max_leaves: int = 6) -> st.SearchStrategy[WhereClause]:
    """Range constraints (on variables or affine expressions), lets and exists."""
    bounds = exprs(max_leaves)
    return st.one_of(
        st.builds(RangeConstraint, st.one_of(variables, affine_exprs()), bounds, bounds),
        st.builds(Let, identifiers, bounds),
        st.builds(Exists, bounds),
    )


# `<=>` may name its operation with a keyword or type name: `<=> max(i)`, `<=> float(i)`.
_keyword_equivalents = st.builds(
    Access,
    st.sampled_from(["min", "max", "float", "int32"]),
    st.lists(variables, max_size=2).map(tuple),
)


def stmts(max_leaves: int = 10) -> st.SearchStrategy[Stmt]:
    """Statements with every assignment operator, optional `<=>` and where clauses."""
    lhs_index = st.one_of(variables, variables, affine_exprs())
    return st.builds(
        Stmt,
        accesses(lhs_index),
        st.sampled_from(list(AssignOp)),
        exprs(max_leaves),
        st.lists(where_clauses(), max_size=3).map(tuple),
        st.one_of(st.none(), accesses(variables), _keyword_equivalents),
    )


_dims = st.lists(st.one_of(variables, int_consts), max_size=3).map(tuple)


def params() -> st.SearchStrategy[Param]:
    """Input parameters: always typed; `dims == ()` is a 0-d tensor."""
    return st.builds(Param, identifiers, scalar_types, _dims)


def outputs() -> st.SearchStrategy[Param]:
    """Outputs: typed like inputs, or a bare name whose type and shape are inferred."""
    return st.one_of(params(), identifiers.map(lambda n: Param(n, None, None)))


def defs() -> st.SearchStrategy[Def]:
    return st.builds(
        Def,
        identifiers,
        st.lists(params(), max_size=3).map(tuple),
        st.lists(outputs(), max_size=3).map(tuple),
        st.lists(stmts(), max_size=3).map(tuple),
        # the def's where clause: any expression parses there (check restricts it)
        st.lists(exprs(max_leaves=6), max_size=2).map(tuple),
    )


def modules() -> st.SearchStrategy[Module]:
    return st.builds(Module, st.lists(defs(), max_size=3).map(tuple))
