"""Type checking of TC expressions: names, tensor reads, builtins, operand types.

`ExprChecker.check(expr)` returns the expression's scalar type under TC's rules
(`compiler.frontend.types`) and reports, without stopping at the first one:

- a read of an unknown tensor or function (with a did-you-mean hint), a size or an
  index variable used as a tensor, a tensor of rank > 0 used without subscripts;
- a wrong number of subscripts (`A(i)` for a 2-d `A`) or of builtin arguments;
- a non-integral subscript (`a(i + .5)`: "expected integral type but found float32");
- a non-bool operand of `&&`, `||`, `!` or a non-bool ternary condition;
- a tensor read where none is allowed (range bounds: `where j in 0:a` with `float a`);
- a read of an output that no earlier statement wrote.

Example: with `float(M, N) A`, checking `A(i) + 1` reports "'A' has 2 dimensions but
is read with 1 subscript" and returns float32.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from compiler.diagnostics import InternalError
from compiler.frontend.ast import (
    Access,
    Binary,
    Call,
    Cast,
    Compare,
    Const,
    Expr,
    Logical,
    ScalarType,
    Select,
    Unary,
    UnaryOp,
    Var,
)
from compiler.frontend.builtins import ARITY, unknown_function_hint
from compiler.frontend.checked import Role, TensorInfo
from compiler.frontend.scopes import Reporter, Signature, StmtScope, name_span, suggest
from compiler.frontend.source import Span
from compiler.frontend.types import INDEX_TYPE, call_type, promote, unary_type


@dataclass
class DefState:
    """What the statements checked so far have established."""

    sig: Signature
    written: dict[str, TensorInfo] = field(default_factory=dict)  # outputs and temporaries

    def tensor(self, name: str) -> TensorInfo | None:
        """A tensor visible by `name`: written ones carry their inferred rank/dtype."""
        return self.written.get(name) or self.sig.tensors.get(name)

    def tensor_names(self) -> set[str]:
        return set(self.sig.tensors) | set(self.written)


def plural(n: int, word: str) -> str:
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


@dataclass
class ExprChecker:
    """Types the expressions of one statement and reports what is wrong with them."""

    state: DefState
    scope: StmtScope
    report: Reporter
    let_types: dict[str, ScalarType] = field(default_factory=dict)
    allow_access: bool = True
    context: str = ""  # where tensor reads are forbidden, for the message

    def check(self, expr: Expr) -> ScalarType:
        if isinstance(expr, Const):
            return expr.dtype
        if isinstance(expr, Var):
            return self._var(expr)
        if isinstance(expr, Access):
            return self._access(expr)
        if isinstance(expr, Call):
            return self._call(expr)
        if isinstance(expr, Binary):
            return promote(self.check(expr.lhs), self.check(expr.rhs))
        if isinstance(expr, Unary):
            operand = self.check(expr.operand)
            if expr.op is UnaryOp.NOT:
                self.expect_bool(expr.operand, operand, "the operand of '!'")
            return unary_type(expr.op, operand)
        if isinstance(expr, Compare):
            promote(self.check(expr.lhs), self.check(expr.rhs))
            return ScalarType.BOOL
        if isinstance(expr, Logical):
            for side in (expr.lhs, expr.rhs):
                self.expect_bool(side, self.check(side), f"an operand of '{expr.op.value}'")
            return ScalarType.BOOL
        if isinstance(expr, Select):
            self.expect_bool(expr.cond, self.check(expr.cond), "the condition of '?:'")
            return promote(self.check(expr.then), self.check(expr.otherwise))
        if isinstance(expr, Cast):
            self.check(expr.operand)
            return expr.dtype
        raise InternalError(f"unknown expression {expr!r}")

    def expect_bool(self, expr: Expr, found: ScalarType, what: str) -> None:
        if found is not ScalarType.BOOL:
            self.report.error(
                f"expected bool for {what} but found {found.value}",
                expr.span,
                "compare it with something, e.g. `x != 0`",
            )

    def expect_integral(self, expr: Expr, found: ScalarType, what: str) -> None:
        if found.is_float:
            self.report.error(
                f"expected integral type but found {found.value}",
                expr.span,
                f"{what} must be an integer; wrap it in int32(...) to truncate",
            )

    def _var(self, var: Var) -> ScalarType:
        name = var.name
        if name in self.scope.lets:
            if name not in self.let_types:
                self.report.error(f"let '{name}' is used before its definition", var.span)
                return INDEX_TYPE
            return self.let_types[name]
        tensor = self.state.tensor(name)
        if tensor is not None:
            if tensor.rank > 0:
                self.report.error(
                    f"expected a scalar but found the {tensor.rank}-d tensor '{name}'",
                    var.span,
                    f"read one element: {name}({', '.join('...' for _ in range(tensor.rank))})",
                )
                return tensor.dtype
            return self._tensor_read(tensor, var.span)
        return INDEX_TYPE  # a size or an index variable (unknown names are reported)

    def _tensor_read(self, tensor: TensorInfo, span: Span) -> ScalarType:
        if not self.allow_access:
            self.report.error(
                "tensor accesses cannot be used in this context",
                span,
                f"{self.context} may use only sizes, constants and index variables",
            )
        elif tensor.role is Role.OUTPUT and tensor.name not in self.state.written:
            self.report.error(
                f"'{tensor.name}' is read before any statement writes it",
                span,
                f"write '{tensor.name}' in an earlier statement, or pass the data as an input",
            )
        return tensor.dtype

    def _access(self, access: Access) -> ScalarType:
        span = name_span(access.span, access.name)
        tensor = self.state.tensor(access.name)
        arg_types = [self.check(a) for a in access.args]
        if tensor is None:  # perhaps a misspelled function: its arguments need not be ints
            self._not_a_tensor(access, span)
            return ScalarType.FLOAT32
        for arg, t in zip(access.args, arg_types, strict=True):
            self.expect_integral(arg, t, "a subscript")
        if tensor.rank >= 0 and tensor.rank != len(access.args):
            self.report.error(
                f"'{access.name}' has {plural(tensor.rank, 'dimension')} but is read with"
                f" {plural(len(access.args), 'subscript')}",
                access.span,
                f"'{access.name}' is declared as `{tensor.span.text}`"
                if tensor.span.text
                else None,
            )
        return self._tensor_read(tensor, span)

    def _not_a_tensor(self, access: Access, span: Span) -> None:
        name = access.name
        if name in self.state.sig.sizes or name in self.scope.lets or self.scope.is_index(name):
            kind = (
                "a size"
                if name in self.state.sig.sizes
                else "a let"
                if name in self.scope.lets
                else "an index variable"
            )
            self.report.error(f"'{name}' is {kind}, not a tensor: it cannot be indexed", span)
            return
        tensors = tuple(self.state.tensor_names())
        self.report.error(
            f"unknown tensor or function '{name}'",
            span,
            suggest(name, tensors)
            or unknown_function_hint(name)
            or "tensors must be declared as inputs or outputs of the def",
        )

    def _call(self, call: Call) -> ScalarType:
        arg_types = [self.check(a) for a in call.args]
        expected = ARITY.get(call.fn)
        if expected is None:
            raise InternalError(f"the parser produced a call of non-builtin '{call.fn}'")
        if expected != len(call.args):
            self.report.error(
                f"'{call.fn}' takes {plural(expected, 'argument')} but"
                f" {len(call.args)} {'was' if len(call.args) == 1 else 'were'} given",
                call.span,
            )
        return call_type(call.fn, arg_types)
