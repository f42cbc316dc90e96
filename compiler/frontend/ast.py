"""The TC abstract syntax tree: frozen dataclasses, one per construct.

Grammar (TC as Tensor Comprehensions defined it, plus tcc's dialect marked [ext])::

    module     := def*
    def        := 'def' IDENT '(' params? ')' '->' '(' outputs? ')'
                  ('where' expr (',' expr)*)? '{' stmt* '}'
                  # [ext] the def's where clause: comparisons of the sizes
    params     := param (',' param)*
    param      := TYPE ('(' dim (',' dim)* ')')? IDENT        # `float a` is a 0-d tensor
    outputs    := output (',' output)*
    output     := (TYPE ('(' dim (',' dim)* ')')?)? IDENT
    dim        := IDENT | INT
    stmt       := IDENT ('(' (expr (',' expr)*)? ')')? ASSIGN expr
                  ('<=>' IDENT '(' args ')')? ('where' clause (',' clause)*)?
                  # TC allows only IDENTs as LHS indices; [ext] affine exprs
    ASSIGN     := '=' | '+=' | '*=' | 'min=' | 'max=' | '+=!' | '*=!' | 'min=!' | 'max=!'
    clause     := expr 'in' expr ':' expr     # TC: IDENT in lo:hi; [ext] affine lhs,
                                              # bounds may use outer index variables
                | IDENT '=' expr              # let binding
                | 'exists' expr
    expr       := or ('?' expr ':' expr)?
    or         := and ('||' and)*
    and        := cmp ('&&' cmp)*
    cmp        := add (('=='|'!='|'<'|'<='|'>'|'>=') add)*
    add        := mul (('+'|'-') mul)*
    mul        := unary (('*'|'/'|'%') unary)*
    unary      := ('-' | '!') unary | primary
    primary    := NUMBER | IDENT | IDENT '(' args? ')' | TYPE '(' expr ')'
                | ('min' | 'max') '(' expr ',' expr ')' | '(' expr ')'
    TYPE       := bool | int8 | int16 | int32 | int64 | uint8 | uint16 | uint32 | uint64
                | float16 | float32 | float64 | float | double | half

Node classes::

    Module(defs)
    Def(name, params, outputs, stmts, where)   where: the def's size conditions [ext]
    Param(name, dtype, dims)             dims None: output whose shape is inferred
    Stmt(lhs: Access, op: AssignOp, rhs, where, equivalent: Access | None)
    where clauses: RangeConstraint(expr, lo, hi) | Let(name, value) | Exists(expr)
    expressions:   Const(value, dtype) | Var(name) | Access(name, args)
                   | Call(fn, args) | Unary(op, operand) | Binary(op, lhs, rhs)
                   | Compare(op, lhs, rhs) | Logical(op, lhs, rhs)
                   | Select(cond, then, otherwise) | Cast(dtype, operand)

Every node has a `span` (last field, keyword default) that equality and hashing
ignore, so `parse(print(ast)) == ast` compares structure only. `Call.fn` names a
builtin of `compiler.frontend.builtins` (min and max included); a name followed by
`(` that is not a builtin is an `Access`.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

from compiler.frontend.source import NO_SPAN, Span


def _span() -> Span:
    return field(default=NO_SPAN, compare=False, repr=False, kw_only=True)  # type: ignore[return-value]


class ScalarType(enum.Enum):
    """TC's scalar types. `float` is FLOAT32 and `double` FLOAT64, as in TC."""

    BOOL = "bool"
    INT8 = "int8"
    INT16 = "int16"
    INT32 = "int32"
    INT64 = "int64"
    UINT8 = "uint8"
    UINT16 = "uint16"
    UINT32 = "uint32"
    UINT64 = "uint64"
    FLOAT16 = "float16"
    FLOAT32 = "float32"
    FLOAT64 = "float64"

    @property
    def is_float(self) -> bool:
        return self in (ScalarType.FLOAT16, ScalarType.FLOAT32, ScalarType.FLOAT64)

    @property
    def is_integral(self) -> bool:
        return not self.is_float and self is not ScalarType.BOOL

    @property
    def is_signed(self) -> bool:
        return self.is_float or self.name.startswith("INT")

    @property
    def bits(self) -> int:
        if self is ScalarType.BOOL:
            return 1
        return int("".join(ch for ch in self.value if ch.isdigit()))


# Spellings the lexer accepts for each type (aliases map to the canonical type).
TYPE_NAMES: dict[str, ScalarType] = {t.value: t for t in ScalarType} | {
    "float": ScalarType.FLOAT32,
    "double": ScalarType.FLOAT64,
    "half": ScalarType.FLOAT16,
}


class AssignOp(enum.Enum):
    """Statement operators. `reduction` is the combining operator (None for `=`),
    `init` says whether the `!` form first sets the output to the identity."""

    ASSIGN = "="
    PLUS = "+="
    TIMES = "*="
    MIN = "min="
    MAX = "max="
    PLUS_INIT = "+=!"
    TIMES_INIT = "*=!"
    MIN_INIT = "min=!"
    MAX_INIT = "max=!"

    @property
    def is_reduction(self) -> bool:
        return self is not AssignOp.ASSIGN

    @property
    def init(self) -> bool:
        return self.value.endswith("!")

    @property
    def base(self) -> AssignOp:
        """The operator without `!` (`+=!` -> `+=`)."""
        return AssignOp(self.value.rstrip("!"))

    @property
    def with_init(self) -> AssignOp:
        """The reduction's `!` form (`max=` -> `max=!`)."""
        return AssignOp(self.base.value + "!")


class UnaryOp(enum.Enum):
    NEG = "-"
    NOT = "!"


class BinOp(enum.Enum):
    ADD = "+"
    SUB = "-"
    MUL = "*"
    DIV = "/"
    MOD = "%"


class CmpOp(enum.Enum):
    EQ = "=="
    NE = "!="
    LT = "<"
    LE = "<="
    GT = ">"
    GE = ">="


class LogicOp(enum.Enum):
    AND = "&&"
    OR = "||"


# ---------------------------------------------------------------- expressions


@dataclass(frozen=True, slots=True)
class Const:
    """A numeric literal. Integer literals are INT32, others FLOAT32, unless a later
    pass builds constants of another type (e.g. BOOL for `true`-like results)."""

    value: int | float
    dtype: ScalarType
    span: Span = _span()

    def __post_init__(self) -> None:
        if isinstance(self.value, bool) or not isinstance(self.value, (int, float)):
            raise TypeError(f"Const value must be int or float, got {self.value!r}")


@dataclass(frozen=True, slots=True)
class Var:
    """A name: index variable, size parameter, let binding, or 0-d tensor."""

    name: str
    span: Span = _span()


@dataclass(frozen=True, slots=True)
class Access:
    """A tensor element `A(i, j + 1)`; `A()` reads a 0-d tensor."""

    name: str
    args: tuple[Expr, ...]
    span: Span = _span()


@dataclass(frozen=True, slots=True)
class Call:
    """A builtin function call: `exp(x)`, `fmax(a, b)`, `min(a, b)`."""

    fn: str
    args: tuple[Expr, ...]
    span: Span = _span()


@dataclass(frozen=True, slots=True)
class Unary:
    op: UnaryOp
    operand: Expr
    span: Span = _span()


@dataclass(frozen=True, slots=True)
class Binary:
    op: BinOp
    lhs: Expr
    rhs: Expr
    span: Span = _span()


@dataclass(frozen=True, slots=True)
class Compare:
    op: CmpOp
    lhs: Expr
    rhs: Expr
    span: Span = _span()


@dataclass(frozen=True, slots=True)
class Logical:
    op: LogicOp
    lhs: Expr
    rhs: Expr
    span: Span = _span()


@dataclass(frozen=True, slots=True)
class Select:
    """`cond ? then : otherwise`; only the chosen branch is evaluated."""

    cond: Expr
    then: Expr
    otherwise: Expr
    span: Span = _span()


@dataclass(frozen=True, slots=True)
class Cast:
    """`float(x)`, `int32(x)`, ..."""

    dtype: ScalarType
    operand: Expr
    span: Span = _span()


Expr = Const | Var | Access | Call | Unary | Binary | Compare | Logical | Select | Cast
EXPR_TYPES = (Const, Var, Access, Call, Unary, Binary, Compare, Logical, Select, Cast)


# -------------------------------------------------------------- where clauses


@dataclass(frozen=True, slots=True)
class RangeConstraint:
    """`expr in lo:hi` (hi exclusive). TC requires `expr` to be an index variable;
    tcc also accepts an affine expression of index variables."""

    expr: Expr
    lo: Expr
    hi: Expr
    span: Span = _span()


@dataclass(frozen=True, slots=True)
class Let:
    """`name = value`: a scalar binding usable in the statement's right-hand side."""

    name: str
    value: Expr
    span: Span = _span()


@dataclass(frozen=True, slots=True)
class Exists:
    """`exists expr`: the reads in `expr` constrain ranges; nothing is computed."""

    expr: Expr
    span: Span = _span()


WhereClause = RangeConstraint | Let | Exists


# ------------------------------------------------------------ defs and module


@dataclass(frozen=True, slots=True)
class Stmt:
    lhs: Access
    op: AssignOp
    rhs: Expr
    where: tuple[WhereClause, ...] = ()
    equivalent: Access | None = None
    span: Span = _span()


@dataclass(frozen=True, slots=True)
class Param:
    """A parameter or output. `dims` holds `Var` (size names), `Const` (ints), or
    integer expressions of sizes (`H - KH + 1`: the shape of a gradient's `<out>_grad`);
    it is () for a 0-d tensor. Outputs may leave `dtype` and `dims` as None."""

    name: str
    dtype: ScalarType | None
    dims: tuple[Expr, ...] | None
    span: Span = _span()


@dataclass(frozen=True, slots=True)
class Def:
    """A def. [ext] `where` holds the conditions of its where clause (`-> (O) where
    G >= 4 * H {`): `Compare`s of integer affine expressions of the sizes (what
    `frontend.check` accepts), which every call checks and range inference assumes."""

    name: str
    params: tuple[Param, ...]
    outputs: tuple[Param, ...]
    stmts: tuple[Stmt, ...]
    where: tuple[Expr, ...] = ()
    span: Span = _span()


@dataclass(frozen=True, slots=True)
class Module:
    defs: tuple[Def, ...]
    span: Span = _span()

    def get(self, name: str | None = None) -> Def:
        """The def called `name`, or the only def when `name` is None."""
        from compiler.diagnostics import TCError, did_you_mean

        if name is None:
            if len(self.defs) == 1:
                return self.defs[0]
            names = ", ".join(d.name for d in self.defs) or "none"
            if not self.defs:
                raise TCError("the source has no defs", hint="write `def NAME(...) -> (...) {...}`")
            first = self.defs[0].name
            raise TCError(
                f"the source has {len(self.defs)} defs ({names}); name the entry point",
                hint=f"on the command line pass --entry NAME (e.g. --entry {first}); "
                f"in Python, the name argument (define(source, '{first}'))",
            )
        for d in self.defs:
            if d.name == name:
                return d
        raise TCError(
            f"no def named '{name}' in the source",
            hint=did_you_mean(name, (d.name for d in self.defs)),
        )


Node = Module | Def | Param | Stmt | RangeConstraint | Let | Exists | Expr
