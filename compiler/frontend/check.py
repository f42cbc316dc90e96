"""Semantic checks: a parsed def -> a `CheckedDef`, or every error it contains.

Requires: a `Def` from `frontend.parse` (any def the AST can express).
Ensures:  `check_def` returns a `CheckedDef` whose `definition` is the def normalised
          (every name of a 0-d tensor is an `Access(name, ())`), with each tensor's
          dtype and rank, the size parameters, and every statement's index, reduction
          and let variables; warnings ride along in `CheckedDef.warnings`. Otherwise
          it raises one `SemanticError` carrying every error of the def, sorted by
          position. It never stops at the first error.

What is checked, as TC's sema does (plus the tcc improvements marked [tcc]):
names (scopes.py), expression types (exprcheck.py), and per statement here:
- the left-hand side writes an output: an input is immutable, and an unlisted name
  would be a temporary, which TC does not have;
- its subscripts are index variables or [tcc] quasi-affine expressions of them
  (`I_grad(n, c, h + kh)`, `A_grad(i / 2)`: `/` and `%` by a positive integer
  literal), never tensor reads or products of variables;
- [tcc] a `+=` / `+=!` may also scatter through integer tensor reads
  (`E_grad(idx(i), d) += ...`, the gradient of an indirect read);
- its rank matches the declaration, and every earlier write of the same output;
- a statement with reduction variables uses a reduction operator (`+=`, `+=!`, ...);
- [tcc] an `op!` statement does not read its own output (the `!` resets it first);
- a declared output's dtype is not narrowed without a cast (`promote(rhs, T) == T`);
- a where clause constrains an index variable, and its bounds read no tensor;
- every output is written; an accumulating first write (`+=` without `!`) is a
  warning, since it adds to whatever the caller passed in;
- [tcc] the def's where clause compares integer affine expressions of the sizes
  (size_conditions.py).

Worked example::

    def f(float(N) A, float b) -> (O) { O(i) +=! A(i + k) * b where k in 0:2 }

checks to index_vars ('i',), reduction_vars ('k',), size_params ('N',), O: float32
of rank 1, and the rhs `A(i + k) * b()` (b is a 0-d tensor).
"""

from __future__ import annotations

import dataclasses

from compiler.diagnostics import Diagnostic, SemanticError, Severity
from compiler.frontend import ast
from compiler.frontend.ast import (
    Access,
    AssignOp,
    Binary,
    BinOp,
    Const,
    Exists,
    Expr,
    Let,
    RangeConstraint,
    ScalarType,
    Stmt,
    Unary,
    UnaryOp,
    Var,
)
from compiler.frontend.checked import CheckedDef, Role, StmtFacts, TensorInfo
from compiler.frontend.exprcheck import DefState, ExprChecker, plural
from compiler.frontend.normalise import normalise_def
from compiler.frontend.printer import print_expr
from compiler.frontend.scopes import (
    Reporter,
    StmtScope,
    classify_vars,
    is_constant,
    name_span,
    read_signature,
    suggest,
    var_uses,
    walk,
    where_exprs,
)
from compiler.frontend.size_conditions import check_size_conditions
from compiler.frontend.types import is_narrowing


def check_module(m: ast.Module) -> tuple[CheckedDef, ...]:
    """Check every def of `m`; raise one SemanticError with the errors of all defs."""
    checked: list[CheckedDef] = []
    errors: list[Diagnostic] = []
    seen: set[str] = set()
    for d in m.defs:
        if d.name in seen:
            span = name_span(d.span, d.name, skip=len("def"))
            errors.append(Diagnostic(Severity.ERROR, f"def '{d.name}' is defined twice", span))
        seen.add(d.name)
        try:
            checked.append(check_def(d))
        except SemanticError as e:
            errors += e.diagnostics
    if errors:
        raise SemanticError(_sorted(errors))
    return tuple(checked)


def check_def(d: ast.Def) -> CheckedDef:
    """Check one def; see the module docstring for what is checked."""
    report = Reporter()
    sig = read_signature(d, report)
    check_size_conditions(d.where, sig, report)
    state = DefState(sig)
    facts = tuple(_check_stmt(stmt, state, report) for stmt in d.stmts)
    tensors = _final_tensors(d, state, report)
    if report.errors:
        raise SemanticError(_sorted(report.errors))
    zero_d = {t.name for t in tensors if t.rank == 0}
    definition = normalise_def(d, zero_d)
    facts = tuple(
        dataclasses.replace(f, stmt=s) for f, s in zip(facts, definition.stmts, strict=True)
    )
    return CheckedDef(definition, tensors, sig.sizes, facts, tuple(_sorted(report.warnings)))


def _sorted(diags: list[Diagnostic]) -> list[Diagnostic]:
    return sorted(diags, key=lambda d: (d.span.filename, d.span.start))


def _final_tensors(d: ast.Def, state: DefState, report: Reporter) -> tuple[TensorInfo, ...]:
    """Inputs, then outputs with their inferred rank and dtype; unwritten outputs are errors."""
    out: list[TensorInfo] = []
    for info in state.sig.tensors.values():
        if info.role is Role.OUTPUT and info.name not in state.written:
            report.error(
                f"output '{info.name}' is never written",
                name_span(info.span, info.name, last=True),
                f"add a statement `{info.name}(...) = ...`, or remove it from the outputs",
            )
        out.append(state.written.get(info.name, info))
    return tuple(out)


# ------------------------------------------------------------------ statements


def _check_stmt(stmt: Stmt, state: DefState, report: Reporter) -> StmtFacts:
    target = _check_target(stmt, state, report)
    scope = classify_vars(stmt, state.sig, state.tensor_names() | {stmt.lhs.name}, report)
    _check_lhs_indices(stmt, state, scope, report)
    checker = ExprChecker(state, scope, report)
    _check_where(stmt, checker, scope, report)
    rhs_type = checker.check(stmt.rhs)
    for arg in stmt.lhs.args:
        if _indirect_scatter_add(stmt, arg, state, scope):
            checker.expect_integral(arg, checker.check(arg), "a left-hand side index")
    if stmt.equivalent is not None:
        for arg in stmt.equivalent.args:
            checker.check(arg)
    _check_reduction(stmt, scope, report)
    _check_reset_self_read(stmt, report)
    _check_narrowing(stmt, target, rhs_type, state, report)
    _record_write(stmt, target, rhs_type, state, report)
    return StmtFacts(stmt, scope.index_vars, scope.reduction_vars, tuple(scope.lets))


def _check_target(stmt: Stmt, state: DefState, report: Reporter) -> TensorInfo:
    """The tensor a statement writes; inputs and unlisted names are errors."""
    lhs = stmt.lhs
    span = name_span(lhs.span, lhs.name)
    info = state.tensor(lhs.name)
    if info is not None and info.role is Role.INPUT:
        report.error(
            f"'{lhs.name}' is an input and TC inputs are immutable",
            span,
            "write the result to an output instead",
        )
    elif info is None:
        report.error(
            f"'{lhs.name}' is not listed as an input or output of this def"
            " (temporary tensors must be listed as outputs)",
            span,
            _temporary_hint(lhs.name, state),
        )
        info = TensorInfo(lhs.name, Role.OUTPUT, ScalarType.FLOAT32, -1, None, lhs.span)
    if info.rank >= 0 and info.rank != len(lhs.args):
        where = "is declared" if lhs.name not in state.written else "was written earlier"
        report.error(
            f"'{lhs.name}' {where} with {plural(info.rank, 'dimension')} but written"
            f" here with {len(lhs.args)}",
            lhs.span,
        )
    return info


def _temporary_hint(name: str, state: DefState) -> str:
    outputs = [t.name for t in state.sig.tensors.values() if t.role is Role.OUTPUT]
    guess = suggest(name, outputs)
    add = f"add '{name}' to the outputs of the def"
    return f"{guess} Otherwise {add}" if guess else add


def _check_lhs_indices(stmt: Stmt, state: DefState, scope: StmtScope, report: Reporter) -> None:
    """LHS subscripts: index variables, sizes and integers, combined affinely."""
    for arg in stmt.lhs.args:
        if _indirect_scatter_add(stmt, arg, state, scope):
            continue
        problem = _non_affine(arg, state, scope)
        if problem is not None:
            node, what = problem
            report.error(
                f"left-hand side index must be an affine expression of index variables,"
                f" found {what}",
                node.span,
                "move the computation to the right-hand side, or bind a new index variable"
                " with a where clause",
            )


def _non_affine(expr: Expr, state: DefState, scope: StmtScope) -> tuple[Expr, str] | None:
    """The first part of an LHS subscript that is not affine, with a description."""
    if isinstance(expr, Const):
        return (
            (expr, f"the {expr.dtype.value} constant {expr.value}") if expr.dtype.is_float else None
        )
    if isinstance(expr, Var):
        if state.tensor(expr.name) is not None:
            return expr, f"a read of tensor '{expr.name}'"
        if expr.name in scope.lets:
            return expr, f"the let '{expr.name}'"
        return None
    if isinstance(expr, Access):
        return expr, f"a read of tensor '{expr.name}'"
    if isinstance(expr, Unary) and expr.op is UnaryOp.NEG:
        return _non_affine(expr.operand, state, scope)
    if isinstance(expr, Binary) and expr.op in (BinOp.ADD, BinOp.SUB, BinOp.MUL):
        if expr.op is BinOp.MUL and not (is_constant(expr.lhs) or is_constant(expr.rhs)):
            return expr, "a product of variables"
        return _non_affine(expr.lhs, state, scope) or _non_affine(expr.rhs, state, scope)
    if isinstance(expr, Binary) and expr.op in (BinOp.DIV, BinOp.MOD) and _positive_int(expr.rhs):
        # [tcc] quasi-affine: floor division and modulo by a constant (isl's floor, mod)
        return _non_affine(expr.lhs, state, scope)
    return expr, "a non-affine expression"


def _indirect_scatter_add(stmt: Stmt, arg: Expr, state: DefState, scope: StmtScope) -> bool:
    """[tcc] A `+=` / `+=!` may scatter through tensor reads (`E_grad(idx(i), d) += ...`,
    what the gradient of an indirect read is): a subscript that is affine once each
    tensor read is taken as an opaque term. The reads are type-checked with the rhs."""
    if stmt.op.base is not AssignOp.PLUS or not any(isinstance(e, Access) for e in walk(arg)):
        return False
    return _non_affine(_reads_as_vars(arg), state, scope) is None


def _reads_as_vars(expr: Expr) -> Expr:
    """Each maximal non-affine part that reads a tensor (`idx(i)`, `int32(A(i))`)
    becomes one opaque variable."""
    affine_node = isinstance(expr, (Unary, Binary)) and not isinstance(expr, Access)
    if not affine_node and any(isinstance(e, Access) for e in walk(expr)):
        return Var("__read__", span=expr.span)
    if isinstance(expr, Unary):
        return dataclasses.replace(expr, operand=_reads_as_vars(expr.operand))
    if isinstance(expr, Binary):
        return dataclasses.replace(expr, lhs=_reads_as_vars(expr.lhs), rhs=_reads_as_vars(expr.rhs))
    return expr


def _positive_int(expr: Expr) -> bool:
    return isinstance(expr, Const) and expr.dtype.is_integral and expr.value > 0


def _check_where(stmt: Stmt, checker: ExprChecker, scope: StmtScope, report: Reporter) -> None:
    for clause in stmt.where:
        if isinstance(clause, Let):
            if scope.lets.get(clause.name) is clause:
                checker.let_types[clause.name] = checker.check(clause.value)
            else:
                checker.check(clause.value)
        elif isinstance(clause, Exists):
            checker.check(clause.expr)
        elif isinstance(clause, RangeConstraint):
            _check_range(clause, checker, scope, report)


def _check_range(
    clause: RangeConstraint, checker: ExprChecker, scope: StmtScope, report: Reporter
) -> None:
    """`e in lo:hi`: `e` is an index variable or [tcc] an affine expression of index
    variables; the bounds are integral and read no tensor."""
    _check_constrained(clause.expr, checker.state, scope, report)
    checker.allow_access, checker.context = False, "range bounds"
    for bound in (clause.lo, clause.hi):
        errors_before = len(report.errors)
        bound_type = checker.check(bound)
        if len(report.errors) == errors_before:  # a forbidden read says enough
            checker.expect_integral(bound, bound_type, "a range bound")
    checker.allow_access, checker.context = True, ""


def _check_constrained(expr: Expr, state: DefState, scope: StmtScope, report: Reporter) -> None:
    if isinstance(expr, Var):
        name = expr.name
        if scope.is_index(name) or name in scope.unknown:
            return
        kind = "let" if name in scope.lets else "size" if name in state.sig.sizes else "tensor"
        report.error(
            f"a range constraint must name an index variable, but '{name}' is a {kind}",
            expr.span,
            "constrain the index variables the value depends on instead" if kind == "let" else None,
        )
        return
    # [tcc] An affine expression of sizes only is a guard on the sizes (the statement
    # runs for the sizes that satisfy it): the gather pass and AD emit such guards.
    problem = _non_affine(expr, state, scope)
    if problem is not None:
        node, what = problem
        report.error(
            "a range constraint must be on an index variable or an affine expression of"
            f" index variables, found {what}",
            node.span,
        )


def _check_reduction(stmt: Stmt, scope: StmtScope, report: Reporter) -> None:
    if stmt.op is not AssignOp.ASSIGN or not scope.reduction_vars:
        return
    name = scope.reduction_vars[0]
    span = next(v.span for v in _stmt_var_uses(stmt) if v.name == name)
    report.error(
        f"this statement includes reduction variable '{name}' but does not specify a"
        " reduction (use +=, +=!, ...)",
        span,
        f"write `{stmt.lhs.name}(...) +=! ...` to sum over '{name}', or index"
        f" '{stmt.lhs.name}' by '{name}' too",
    )


def _check_reset_self_read(stmt: Stmt, report: Reporter) -> None:
    """[tcc] `O +=! O * B(i)`: the `!` sets all of `O` to the identity before the
    statement accumulates, so a read of `O` in it sees a partial result whose value
    depends on the order of the loops (TC leaves it undefined). No element is complete
    while the statement runs, so every read of its own output is an error."""
    if not stmt.op.init:
        return
    name = stmt.lhs.name
    args = ", ".join(print_expr(a) for a in stmt.lhs.args)
    copy = f"{name}_prev({args}) = {name}({args})" if args else f"{name}_prev = {name}"
    for root in (stmt.rhs, *where_exprs(stmt)):
        for node in walk(root):
            if isinstance(node, (Access, Var)) and node.name == name:
                report.error(
                    f"`{stmt.op.value}` reads '{name}', the output it accumulates into: the"
                    f" `!` first resets all of '{name}', so the read would see a partial"
                    " result that depends on the order of the loops",
                    node.span,
                    f"to use what earlier statements wrote, copy it first into another output"
                    f" (`{copy}`) and read that, or drop the `!` to"
                    f" accumulate into the earlier value (`{stmt.op.base.value}`)",
                )
                return


def _stmt_var_uses(stmt: Stmt) -> list[Var]:
    equivalent = stmt.equivalent.args if stmt.equivalent is not None else ()
    return list(var_uses((stmt.rhs, *where_exprs(stmt), *equivalent)))


def _check_narrowing(
    stmt: Stmt, target: TensorInfo, rhs_type: ScalarType, state: DefState, report: Reporter
) -> None:
    if _declared_dtype(target, state) and is_narrowing(rhs_type, target.dtype):
        report.error(
            f"cannot assign a {rhs_type.value} value to '{target.name}', declared"
            f" {target.dtype.value}, without an explicit cast",
            stmt.rhs.span,
            f"wrap the right-hand side in {target.dtype.value}(...)",
        )
        return
    first = state.written.get(target.name)
    if first is not None and not _declared_dtype(target, state):
        if is_narrowing(rhs_type, first.dtype):  # `Fd(x) = 0` then `Fd(x) += 0.5 * ...`
            report.warning(
                f"'{target.name}' is {first.dtype.value}, typed by its first write, so this"
                f" {rhs_type.value} value is converted to {first.dtype.value}"
                f"{'' if first.dtype.is_float else ' (truncated)'}",
                stmt.rhs.span,
                f"make the first write {rhs_type.value}, e.g. `{_type_word(rhs_type)}(0)` for"
                f" `0`, or declare the output's type in the signature",
            )


def _type_word(t: ScalarType) -> str:
    return {ScalarType.FLOAT32: "float", ScalarType.FLOAT64: "double"}.get(t, t.value)


def _declared_dtype(info: TensorInfo, state: DefState) -> bool:
    """Whether an output's dtype was written in the signature (not inferred)."""
    param = state.sig.declared.get(info.name)
    return info.role is Role.OUTPUT and param is not None and param.dtype is not None


def _record_write(
    stmt: Stmt, target: TensorInfo, rhs_type: ScalarType, state: DefState, report: Reporter
) -> None:
    name = stmt.lhs.name
    if name in state.written:
        return
    if stmt.op.is_reduction and not stmt.op.init and target.role is Role.OUTPUT:
        report.warning(
            f"reduction without initialization: '{name}' accumulates into the data the"
            " caller passes in",
            name_span(stmt.lhs.span, name),
            f"if '{name}' is not pre-initialized before the call, use"
            f" '{stmt.op.value}!' instead of '{stmt.op.value}'",
        )
    dtype = target.dtype if _declared_dtype(target, state) else rhs_type
    state.written[name] = dataclasses.replace(target, dtype=dtype, rank=len(stmt.lhs.args))
