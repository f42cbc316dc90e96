"""Names in a TC def: the signature's tensors and sizes, and each statement's variables.

TC has no declarations for index variables: a name that is not a tensor, a size or a
let is an index variable. Those of the left-hand side are the statement's *index
variables*; the others are *reduction variables*. This module sorts the names of a
def into these roles (`read_signature`, `classify_vars`) and reports the name
errors that do not need types:

- a parameter, output or size defined twice, or a builtin's name redefined;
- a name used both as a size and as a tensor;
- a let that redefines a tensor, a size, an index variable or another let;
- (tcc, stricter than TC) an identifier that never appears in a tensor subscript or
  a where clause: no range could ever be inferred for it, so it is almost always a
  misspelled size, as in `N * H * w` for `N * H * W`.

Example: in `def f(float(M, K) A, float(K, N) B) -> (C) { C(m, n) +=! A(m, k) * B(k, n) }`
the sizes are M, K, N, the index variables of the statement are m, n and its
reduction variable is k.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

from compiler.diagnostics import Diagnostic, Severity, did_you_mean
from compiler.frontend.ast import (
    Access,
    Binary,
    Call,
    Const,
    Def,
    Exists,
    Expr,
    Let,
    Param,
    RangeConstraint,
    ScalarType,
    Stmt,
    Unary,
    UnaryOp,
    Var,
)
from compiler.frontend.builtins import ARITY
from compiler.frontend.checked import Role, TensorInfo
from compiler.frontend.source import Span
from compiler.frontend.visit import children as children  # re-exported: the one
from compiler.frontend.visit import walk as walk  # AST traversal lives in visit.py
from compiler.names import NameSupply


@dataclass
class Reporter:
    """Collects the diagnostics of one def, errors and warnings alike."""

    diagnostics: list[Diagnostic] = field(default_factory=list)

    def error(self, message: str, span: Span, hint: str | None = None) -> None:
        self.diagnostics.append(Diagnostic(Severity.ERROR, message, span, hint))

    def warning(self, message: str, span: Span, hint: str | None = None) -> None:
        self.diagnostics.append(Diagnostic(Severity.WARNING, message, span, hint))

    @property
    def errors(self) -> list[Diagnostic]:
        return [d for d in self.diagnostics if d.severity is Severity.ERROR]

    @property
    def warnings(self) -> list[Diagnostic]:
        return [d for d in self.diagnostics if d.severity is Severity.WARNING]


def name_span(span: Span, name: str, *, last: bool = False, skip: int = 0) -> Span:
    """The span of `name` inside `span` (a node's span starts, or ends, with its name;
    `skip` characters of a leading keyword are passed over)."""
    text = span.text
    if span.source is None or name not in text[skip:]:
        return span
    offset = text.rfind(name) if last else text.find(name, skip)
    return Span(span.source, span.start + offset, span.start + offset + len(name))


def suggest(name: str, candidates: Iterable[str]) -> str | None:
    """A did-you-mean hint; a name differing only in case (`w` for `W`) comes first."""
    names = sorted(set(candidates) - {name})
    same_case = [c for c in names if c.lower() == name.lower()]
    return f"did you mean '{same_case[0]}'?" if same_case else did_you_mean(name, names)


def var_uses(exprs: tuple[Expr, ...]) -> Iterator[Var]:
    for e in exprs:
        yield from (x for x in walk(e) if isinstance(x, Var))


def _subscript_vars(exprs: tuple[Expr, ...]) -> Iterator[str]:
    """Names used inside any tensor subscript of `exprs`."""
    for e in exprs:
        for node in walk(e):
            if isinstance(node, Access):
                yield from (v.name for v in var_uses(node.args))


def stmt_names(stmt: Stmt) -> set[str]:
    """Every variable and let name statement `stmt` uses (its local names)."""
    roots = (*stmt.lhs.args, stmt.rhs, *where_exprs(stmt))
    names = {v.name for v in var_uses(roots)}
    return names | {c.name for c in stmt.where if isinstance(c, Let)}


def name_supply(d: Def) -> NameSupply:
    """A `compiler.names.NameSupply` that knows every name of `d`: its own name, its
    tensors, sizes and the builtins (global), every statement's variables (local)."""
    dims = tuple(dim for p in (*d.params, *d.outputs) for dim in p.dims or ())
    sizes = {e.name for dim in dims for e in walk(dim) if isinstance(e, Var)}
    tensors = {p.name for p in (*d.params, *d.outputs)}
    local: set[str] = set()
    for stmt in d.stmts:
        local |= stmt_names(stmt)
        tensors.add(stmt.lhs.name)
    return NameSupply({d.name, *tensors, *sizes, *ARITY}, local)


# ------------------------------------------------------------------ signature


@dataclass
class Signature:
    """The tensors (inputs, then outputs) and size parameters of a def."""

    tensors: dict[str, TensorInfo]
    sizes: tuple[str, ...]
    declared: dict[str, Param]  # name -> its declaration, for spans

    def is_tensor(self, name: str) -> bool:
        return name in self.tensors


def read_signature(d: Def, report: Reporter) -> Signature:
    """Collect the inputs, outputs and sizes of `d`, reporting redefinitions."""
    tensors: dict[str, TensorInfo] = {}
    declared: dict[str, Param] = {}
    sizes: list[str] = []
    size_spans: dict[str, Span] = {}
    for role, params in ((Role.INPUT, d.params), (Role.OUTPUT, d.outputs)):
        for p in params:
            for dim in p.dims or ():
                if isinstance(dim, Var) and dim.name not in size_spans:
                    size_spans[dim.name] = dim.span
                    sizes.append(dim.name)
            _declare_tensor(p, role, tensors, declared, report)
    for p in (*d.params, *d.outputs):
        for dim in p.dims or ():
            _check_dim_expr(dim, p.name, set(sizes), report)
    for name in sizes:
        if name in ARITY:
            report.error(
                f"'{name}' is a built-in function and cannot be used as a size",
                size_spans[name],
            )
        if name in tensors:
            span = name_span(declared[name].span, name, last=True)
            report.error(
                f"'{name}' is used both as a size and as a tensor",
                span,
                f"'{name}' is a size of another tensor's shape; rename the tensor",
            )
    return Signature(tensors, tuple(sizes), declared)


def _check_dim_expr(dim: Expr, tensor: str, sizes: set[str], report: Reporter) -> None:
    """A dimension that is not a plain size or integer (`H - KH + 1`) may only combine
    sizes that some plain dimension binds, integers, `+ - * / %`, unary `-`, `min`, `max`:
    its value is computed from the bound sizes and checked at call time."""
    if isinstance(dim, (Var, Const)):
        if isinstance(dim, Const) and not (dim.dtype.is_integral and isinstance(dim.value, int)):
            report.error(f"a dimension of '{tensor}' must be an integer", dim.span)
        return
    for e in walk(dim):
        if isinstance(e, Var) and e.name not in sizes:
            report.error(
                f"the dimension `{_text(dim)}` of '{tensor}' uses '{e.name}', which is not "
                "a size: a size must appear alone as a dimension of some tensor",
                e.span,
                f"declare a tensor with '{e.name}' as one of its dimensions",
            )
        elif (problem := _dim_node_problem(e)) is not None:
            report.error(f"a dimension of '{tensor}' {problem}", e.span)


def is_dimension(dim: Expr) -> bool:
    """`dim` may be a tensor's dimension, its names aside (`_check_dim_expr`): what a
    compiler-made shape (`cpu.pad`'s padded copy) must be."""
    return all(_dim_node_problem(e) is None for e in walk(dim))


def _dim_node_problem(e: Expr) -> str | None:
    """Why the node `e` of a dimension cannot be there (None: it can)."""
    if isinstance(e, Const) and not (e.dtype.is_integral and isinstance(e.value, int)):
        return "must be an integer expression"
    if isinstance(e, Call) and e.fn not in ("min", "max"):
        return "may call only min and max"
    if not isinstance(e, (Var, Const, Binary, Unary, Call)) or (
        isinstance(e, Unary) and e.op is not UnaryOp.NEG
    ):
        return "must be an integer expression of sizes"
    return None


def _text(e: Expr) -> str:
    from compiler.frontend.printer import print_expr

    return print_expr(e)


def _declare_tensor(
    p: Param,
    role: Role,
    tensors: dict[str, TensorInfo],
    declared: dict[str, Param],
    report: Reporter,
) -> None:
    span = name_span(p.span, p.name, last=True)
    if p.name in ARITY:
        report.error(f"'{p.name}' is a built-in function and cannot be redefined", span)
    if p.name in tensors:
        earlier = tensors[p.name].role.value
        report.error(
            f"'{p.name}' is already defined as an {earlier}",
            span,
            f"an {role.value} needs a name of its own",
        )
        return
    dims = p.dims
    rank = len(dims) if dims is not None else -1  # -1: inferred from the first write
    dtype = p.dtype if p.dtype is not None else ScalarType.FLOAT32
    tensors[p.name] = TensorInfo(p.name, role, dtype, rank, dims, p.span)
    declared[p.name] = p


# ------------------------------------------------------------------ statements


@dataclass(frozen=True)
class StmtScope:
    """The variables of one statement, sorted by role."""

    index_vars: tuple[str, ...]
    reduction_vars: tuple[str, ...]
    lets: dict[str, Let]
    unknown: frozenset[str]  # identifiers reported as not a size/tensor/index variable

    def is_index(self, name: str) -> bool:
        return name in self.index_vars or name in self.reduction_vars


def where_exprs(stmt: Stmt) -> tuple[Expr, ...]:
    """Every expression in the where clauses, in source order."""
    out: list[Expr] = []
    for clause in stmt.where:
        if isinstance(clause, RangeConstraint):
            out += [clause.expr, clause.lo, clause.hi]
        elif isinstance(clause, Let):
            out.append(clause.value)
        elif isinstance(clause, Exists):
            out.append(clause.expr)
    return tuple(out)


def classify_vars(stmt: Stmt, sig: Signature, tensors: set[str], report: Reporter) -> StmtScope:
    """Sort the identifiers of `stmt` into index variables, reduction variables and
    lets. `tensors` is every tensor name visible here (temporaries included)."""
    lets = _collect_lets(stmt, sig, tensors, report)
    taken = set(sig.sizes) | tensors | set(lets)
    index_vars = _unique(v.name for v in var_uses(stmt.lhs.args) if v.name not in taken)
    for name in index_vars:
        if name in ARITY:
            span = next(v.span for v in var_uses(stmt.lhs.args) if v.name == name)
            report.error(f"'{name}' is a built-in function and cannot be an index variable", span)
    others = stmt.rhs, *where_exprs(stmt), *(stmt.equivalent.args if stmt.equivalent else ())
    anchored = set(_subscript_vars((stmt.lhs, *others)))
    anchored |= {
        v.name for c in stmt.where if isinstance(c, RangeConstraint) for v in var_uses((c.expr,))
    }
    reduction: list[str] = []
    unknown: set[str] = set()
    for var in var_uses(tuple(others)):
        name = var.name
        if name in taken or name in index_vars or name in reduction or name in unknown:
            continue
        if name in anchored:
            reduction.append(name)
            continue
        unknown.add(name)
        candidates = (*sig.sizes, *tensors, *lets, *index_vars, *reduction)
        report.error(
            f"'{name}' is not a size, tensor or index variable: it appears in no tensor"
            " subscript and no where clause, so no range can be found for it",
            var.span,
            suggest(name, candidates)
            or f"declare a scalar parameter as an input (`float {name}`), or give an index"
            f" variable a range (`where {name} in 0:...`)",
        )
    return StmtScope(index_vars, tuple(reduction), lets, frozenset(unknown))


def _collect_lets(
    stmt: Stmt, sig: Signature, tensors: set[str], report: Reporter
) -> dict[str, Let]:
    lets: dict[str, Let] = {}
    lhs_vars = {v.name for v in var_uses(stmt.lhs.args)}
    for clause in stmt.where:
        if not isinstance(clause, Let):
            continue
        span = name_span(clause.span, clause.name)
        what = _existing_kind(clause.name, sig, tensors, lets, lhs_vars)
        if what is not None:
            report.error(
                f"let '{clause.name}' redefines the {what} '{clause.name}'",
                span,
                "give the let a name of its own",
            )
            continue
        lets[clause.name] = clause
    return lets


def _existing_kind(
    name: str, sig: Signature, tensors: set[str], lets: dict[str, Let], lhs_vars: set[str]
) -> str | None:
    if name in ARITY:
        return "built-in function"
    if name in tensors:
        return "tensor"
    if name in sig.sizes:
        return "size"
    if name in lets:
        return "let"
    if name in lhs_vars:
        return "index variable"
    return None


def _unique(names: Iterator[str]) -> tuple[str, ...]:
    return tuple(dict.fromkeys(names))


def is_constant(expr: Expr) -> bool:
    """True for an expression built from literals only (`2`, `-(3 * 4)`)."""
    return all(isinstance(n, (Const, Unary, Binary)) for n in walk(expr))
