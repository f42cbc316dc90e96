"""[ext] The def's where clause: relations of the sizes that every call must satisfy.

    def gru(float(N, G) gates, float(N, H) h) -> (O) where G >= 4 * H { ... }

Requires: a parsed `Def` and its `scopes.Signature` (the size names).
Ensures:  `check_size_conditions` reports, through the def's `Reporter`, every condition
          that is not a comparison (`==`, `!=`, `<`, `<=`, `>`, `>=`) of two integer
          affine expressions of the sizes and integer literals: `+`, `-`, multiplication
          by a constant, `/` and `%` by a positive integer literal. Each error points at
          the offending part (an index variable, a tensor read, a float, a product of
          sizes, a chained comparison, ...). It does not decide whether the conditions
          can hold together: that needs isl, and `poly.ranges` reports it.

What the conditions mean is `poly.ranges`' (they are the context of the sizes, so reads
in bounds under them need no warning and no run-time check) and `shapes.bind_sizes`'
(each call checks them, a ShapeError pointing at the condition).
"""

from __future__ import annotations

from compiler.frontend.ast import (
    Access,
    Binary,
    BinOp,
    Compare,
    Const,
    Expr,
    Logical,
    LogicOp,
    Unary,
    UnaryOp,
    Var,
)
from compiler.frontend.printer import print_expr
from compiler.frontend.scopes import Reporter, Signature, is_constant, suggest, walk

_WHAT = "the def's where clause compares integer affine expressions of the sizes"


def check_size_conditions(where: tuple[Expr, ...], sig: Signature, report: Reporter) -> None:
    """Report every condition of the def's where clause that is not a comparison of
    integer affine expressions of `sig`'s sizes (see the module doc)."""
    for cond in where:
        if not isinstance(cond, Compare):
            _report_not_comparison(cond, report)
            continue
        errors_before = len(report.errors)
        for side in (cond.lhs, cond.rhs):
            problem = _non_affine(side, sig)
            if problem is not None:
                node, what, hint = problem
                report.error(f"{_WHAT}, found {what}", node.span, hint)
        if len(report.errors) == errors_before and not _mentions_size(cond, sig):
            report.error(
                f"the condition `{print_expr(cond)}` of the def's where clause relates no size",
                cond.span,
                f"a condition relates the sizes ({_sizes(sig)}), e.g. `where G >= 4 * H`",
            )


def _report_not_comparison(cond: Expr, report: Reporter) -> None:
    if isinstance(cond, Logical) and cond.op is LogicOp.AND:
        hint = "separate the conditions with ',' (`where A >= B, B > 1`)"
    elif isinstance(cond, Logical):
        hint = (
            "a def's where clause holds only conditions that all must hold; `||` is not supported"
        )
    else:
        hint = "write a comparison, e.g. `where G >= 4 * H`"
    report.error(f"{_WHAT}, found `{print_expr(cond)}`, which is not a comparison", cond.span, hint)


def _non_affine(expr: Expr, sig: Signature) -> tuple[Expr, str, str | None] | None:
    """The first part of `expr` that is not an integer affine expression of the sizes:
    (that node, what it is, a hint), or None when `expr` is one."""
    if isinstance(expr, Const):
        if isinstance(expr.value, int) and expr.dtype.is_integral:
            return None
        return expr, f"the {expr.dtype.value} constant {print_expr(expr)}", None
    if isinstance(expr, Var):
        return _name_problem(expr, sig)
    if isinstance(expr, Access):
        return expr, f"a read of tensor '{expr.name}'", "sizes are the names in the tensors' shapes"
    if isinstance(expr, Unary) and expr.op is UnaryOp.NEG:
        return _non_affine(expr.operand, sig)
    if isinstance(expr, Binary):
        return _binary_problem(expr, sig)
    if isinstance(expr, Compare):
        hint = "write one comparison per condition: `where A < B, B < C`"
        return expr, f"the comparison `{print_expr(expr)}` inside a comparison", hint
    return expr, f"`{print_expr(expr)}`", "use +, -, * by a constant, / and % by a constant"


def _binary_problem(expr: Binary, sig: Signature) -> tuple[Expr, str, str | None] | None:
    if expr.op in (BinOp.ADD, BinOp.SUB):
        return _non_affine(expr.lhs, sig) or _non_affine(expr.rhs, sig)
    if expr.op is BinOp.MUL:
        if not (is_constant(expr.lhs) or is_constant(expr.rhs)):
            return (
                expr,
                f"the product of sizes `{print_expr(expr)}`",
                "isl decides only affine relations",
            )
        return _non_affine(expr.lhs, sig) or _non_affine(expr.rhs, sig)
    divisor = expr.rhs
    if isinstance(divisor, Const) and divisor.dtype.is_integral and divisor.value > 0:
        return _non_affine(expr.lhs, sig)
    return expr, f"`{print_expr(expr)}`", "`/` and `%` take a positive integer literal here"


def _name_problem(var: Var, sig: Signature) -> tuple[Expr, str, str | None] | None:
    if var.name in sig.sizes:
        return None
    if sig.is_tensor(var.name):
        return var, f"the tensor '{var.name}'", "sizes are the names in the tensors' shapes"
    hint = suggest(var.name, sig.sizes) or (
        f"the sizes of this def are {_sizes(sig)}; an index variable's range goes in a "
        f"statement's where clause (`where {var.name} in 0:...`)"
    )
    return var, f"'{var.name}', which is not a size of this def", hint


def _mentions_size(cond: Expr, sig: Signature) -> bool:
    return any(isinstance(e, Var) and e.name in sig.sizes for e in walk(cond))


def _sizes(sig: Signature) -> str:
    return ", ".join(sig.sizes) or "none"
