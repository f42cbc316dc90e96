"""AST -> canonical TC text, with minimal parentheses; `parse(print(ast)) == ast`.

Layout of the canonical text::

    def name(float(N, C) I, int32 k) -> (O, int32(M, N) O1) where M >= N {
        O(n, c) +=! I(n, c) * float(k) <=> O2(n, c) where n in 0:N, x = A(n), exists B(n)
    }

One statement per line, indented four spaces; defs separated by one blank line;
spaces around binary operators and after commas; the def's where clause [ext], if any,
between the outputs and `{`. The `<=>` annotation comes before
`where`, in the order TC's parser (`parseStmt`) reads them.

Precedence, lowest first, as TC's lexer lists it::

    ?:  (right-assoc)  <  ||  <  &&  <  == != < <= > >=  <  + -  <  * / %  <  unary - !

Binary levels are left-associative, so a right operand at the same level keeps its
parentheses (`a - (b - c)`) and a left one does not (`a - b - c`). A ternary's
condition is parenthesised when it is itself a ternary; its branches never are.

Types print by the spelling C programmers know where TC has one (FLOAT32 as `float`,
FLOAT64 as `double`) and by their canonical name otherwise (`int32`, `float16`, ...);
the parser maps every spelling back to the same ScalarType.

Constants print so they re-lex to the same value and type: INT32 as digits (INT64 too
when beyond int32, since such literals lex as INT64), FLOAT32 as
Python's `repr` (always with `.` or `e`; an exponent has no `+`). Constants of another
type, which only later passes build, print as a cast (`int64(3)`, `double(0.5)`);
negative ones print in parentheses (`(-1)`) and re-parse as a negation; non-finite
floats print as divisions by zero (`(1.0 / 0.0)`). An AST that no TC text can spell
(a keyword as a name, an `Access` named like a builtin, a `Call` of a non-builtin)
raises InternalError rather than printing text that would parse differently.
"""

from __future__ import annotations

import enum
import math
import re

from compiler.diagnostics import InternalError
from compiler.frontend.ast import (
    TYPE_NAMES,
    Access,
    Binary,
    BinOp,
    Call,
    Cast,
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
    Var,
    WhereClause,
)
from compiler.frontend.builtins import ARITY

INDENT = "    "

_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
# Words the lexer turns into tokens, so they can never name anything.
KEYWORDS = frozenset({"def", "where", "in", "exists", "min", "max"} | set(TYPE_NAMES))


class Prec(enum.IntEnum):
    """Binding strength of an expression's outermost operator (higher binds tighter)."""

    SELECT = 1
    OR = 2
    AND = 3
    CMP = 4
    ADD = 5
    MUL = 6
    UNARY = 7
    ATOM = 8


_BINOP_PREC = {
    BinOp.ADD: Prec.ADD,
    BinOp.SUB: Prec.ADD,
    BinOp.MUL: Prec.MUL,
    BinOp.DIV: Prec.MUL,
    BinOp.MOD: Prec.MUL,
}
_LOGIC_PREC = {LogicOp.OR: Prec.OR, LogicOp.AND: Prec.AND}

_TYPE_SPELLING = {t: t.value for t in ScalarType} | {
    ScalarType.FLOAT32: "float",
    ScalarType.FLOAT64: "double",
}


def type_name(dtype: ScalarType) -> str:
    """The spelling the printer uses for `dtype` (`float`, `double`, `int32`, ...)."""
    return _TYPE_SPELLING[dtype]


# ---------------------------------------------------------------- public entry points


def print_module(m: Module) -> str:
    """The whole module: defs separated by one blank line, ending with a newline."""
    if not m.defs:
        return ""
    return "\n\n".join(print_def(d) for d in m.defs) + "\n"


def print_def(d: Def) -> str:
    """One def: signature line, one indented statement per line, closing brace."""
    params = ", ".join(_param(p, output=False) for p in d.params)
    outputs = ", ".join(_param(p, output=True) for p in d.outputs)
    where = " where " + ", ".join(print_expr(c) for c in d.where) if d.where else ""
    lines = [f"def {_name(d.name)}({params}) -> ({outputs}){where} {{"]
    lines.extend(INDENT + print_stmt(s) for s in d.stmts)
    lines.append("}")
    return "\n".join(lines)


def print_stmt(s: Stmt) -> str:
    """`O(i, j) +=! rhs <=> E(i, j) where c1, c2` on one line."""
    lhs = _name(s.lhs.name)
    if s.lhs.args:
        lhs += f"({_args(s.lhs.args)})"
    text = f"{lhs} {s.op.value} {print_expr(s.rhs)}"
    if s.equivalent is not None:
        text += f" <=> {_equivalent_name(s.equivalent.name)}({_args(s.equivalent.args)})"
    if s.where:
        text += " where " + ", ".join(print_where(c) for c in s.where)
    return text


def print_where(clause: WhereClause) -> str:
    """One where clause: `i in 0:N`, `x = A(i)` or `exists B(i)`."""
    if isinstance(clause, RangeConstraint):
        # A ternary bound would read ambiguously next to the range's `:`; parenthesise it.
        parts = (_expr(e, Prec.OR) for e in (clause.expr, clause.lo, clause.hi))
        expr, lo, hi = parts
        return f"{expr} in {lo}:{hi}"
    if isinstance(clause, Let):
        return f"{_name(clause.name)} = {print_expr(clause.value)}"
    if isinstance(clause, Exists):
        return f"exists {print_expr(clause.expr)}"
    raise InternalError(f"print_where: not a where clause: {clause!r}")


def print_expr(e: Expr) -> str:
    """An expression with the fewest parentheses that re-parse to the same tree."""
    return _expr(e, Prec.SELECT)


# ---------------------------------------------------------------- signatures


def _param(p: Param, *, output: bool) -> str:
    if p.dtype is None:
        if p.dims is not None or not output:
            raise InternalError(
                f"parameter '{p.name}' has dims but no type, or is an input without a type"
            )
        return _name(p.name)
    text = type_name(p.dtype)
    if p.dims:
        text += "(" + ", ".join(_dim(d) for d in p.dims) + ")"
    return f"{text} {_name(p.name)}"


def _dim(d: Expr) -> str:
    if not isinstance(d, (Var, Const)):
        return _expr(d, Prec.SELECT)
    if isinstance(d, Var):
        return _name(d.name)
    if (
        d.dtype in (ScalarType.INT32, ScalarType.INT64)
        and isinstance(d.value, int)
        and d.value >= 0
    ):
        return str(d.value)
    raise InternalError(f"a dimension must be a size name or a non-negative int32: {d!r}")


def _name(name: str) -> str:
    if not _IDENT.match(name) or name in KEYWORDS:
        raise InternalError(f"'{name}' cannot be printed as a TC identifier")
    return name


def _equivalent_name(name: str) -> str:
    # TC names the equivalent operation freely: `<=> max(...)`, `<=> float(...)` parse too.
    if name in ("min", "max") or name in TYPE_NAMES:
        return name
    return _name(name)


# ---------------------------------------------------------------- expressions


def _args(args: tuple[Expr, ...]) -> str:
    # A loop, not a generator: three Python frames per nesting level (_expr,
    # _unparenthesised, _args), so the deepest tree the parser accepts prints.
    parts = []
    for a in args:
        parts.append(_expr(a, Prec.SELECT))
    return ", ".join(parts)


def _expr(e: Expr, min_prec: Prec) -> str:
    """`e` as text, parenthesised if its operator binds looser than `min_prec`."""
    text, prec = _unparenthesised(e)
    return f"({text})" if prec < min_prec else text


def _unparenthesised(e: Expr) -> tuple[str, Prec]:
    """`e` as text without outer parentheses, and the precedence of its top operator."""
    if isinstance(e, (Binary, Compare, Logical)):
        prec = _binary_prec(e)
        # Left-associative: the right operand needs one level more to stay on the right.
        lhs, rhs = _expr(e.lhs, prec), _expr(e.rhs, Prec(prec + 1))
        return f"{lhs} {e.op.value} {rhs}", prec
    if isinstance(e, Unary):
        operand = _expr(e.operand, Prec.UNARY)
        sep = " " if operand.startswith("-") else ""  # `- -a`, never `--a`
        return f"{e.op.value}{sep}{operand}", Prec.UNARY
    if isinstance(e, Select):
        cond = _expr(e.cond, Prec.OR)
        then, otherwise = _expr(e.then, Prec.SELECT), _expr(e.otherwise, Prec.SELECT)
        return f"{cond} ? {then} : {otherwise}", Prec.SELECT
    if isinstance(e, Access) and e.name not in ARITY:
        return f"{_name(e.name)}({_args(e.args)})", Prec.ATOM
    if isinstance(e, Call) and e.fn in ARITY:
        return f"{e.fn}({_args(e.args)})", Prec.ATOM
    if isinstance(e, Cast):
        return f"{type_name(e.dtype)}({_expr(e.operand, Prec.SELECT)})", Prec.ATOM
    return _atom(e), Prec.ATOM


def _binary_prec(e: Binary | Compare | Logical) -> Prec:
    if isinstance(e, Binary):
        return _BINOP_PREC[e.op]
    if isinstance(e, Logical):
        return _LOGIC_PREC[e.op]
    return Prec.CMP


def _atom(e: Expr) -> str:
    if isinstance(e, Const):
        return _const(e)
    if isinstance(e, Var):
        return _name(e.name)
    if isinstance(e, Access):
        if e.name in ARITY:
            raise InternalError(
                f"tensor '{e.name}' is named like a builtin; it would parse as a call"
            )
        return f"{_name(e.name)}({_args(e.args)})"
    if isinstance(e, Call):
        if e.fn not in ARITY:
            raise InternalError(f"'{e.fn}' is not a builtin; it would parse as a tensor access")
        return f"{e.fn}({_args(e.args)})"
    if isinstance(e, Cast):
        return f"{type_name(e.dtype)}({print_expr(e.operand)})"
    raise InternalError(f"print_expr: not an expression: {e!r}")


def _const(c: Const) -> str:
    """A literal that re-lexes to the same value; typed by cast when not INT32/FLOAT32."""
    if c.dtype.is_float:
        text = _float_literal(float(c.value))
        default = ScalarType.FLOAT32
    else:
        if not float(c.value).is_integer():
            raise InternalError(f"{c.dtype.value} constant with a fractional value: {c!r}")
        text = str(int(c.value))
        # a literal beyond int32 lexes as an int64 (see the parser's `number`)
        default = ScalarType.INT32 if -(2**31) <= int(c.value) < 2**31 else ScalarType.INT64
    if c.dtype is not default:
        inner = text[1:-1] if text.startswith("(") else text
        return f"{type_name(c.dtype)}({inner})"
    return f"({text})" if text.startswith("-") else text


def _float_literal(value: float) -> str:
    if math.isnan(value):
        return "(0.0 / 0.0)"
    if math.isinf(value):
        return "(1.0 / 0.0)" if value > 0 else "(-1.0 / 0.0)"
    text = repr(value).replace("e+", "e")
    return text if ("." in text or "e" in text) else text + ".0"
