"""Stable, indented text dumps of ASTs and token lists (golden files, `tcc` debugging).

One node per line, children indented by two spaces, each line ending with the node's
span as `@line:col-line:col` (end exclusive) when the node has one. Field labels
(`lhs:`, `where:`, ...) introduce the children of statements and where clauses. Example::

    dump(parse_expr("a + 2"))
    Binary + @1:1-1:6
      Var a @1:1-1:2
      Const 2 int32 @1:5-1:6

The format is part of the golden tests: change it only together with them.
"""

from __future__ import annotations

from compiler.frontend import ast
from compiler.frontend.lexer import Token
from compiler.frontend.printer import print_expr
from compiler.frontend.source import Span

_INDENT = "  "


def dump(node: ast.Node, spans: bool = True) -> str:
    """An indented tree of `node`, one line per node, ending with a newline."""
    lines: list[str] = []
    _dump(node, 0, lines, spans)
    return "\n".join(lines) + "\n"


def dump_tokens(tokens: list[Token]) -> str:
    """One line per token: `line:col  KIND  'text'`."""
    lines = []
    for token in tokens:
        line, col = token.span.line, token.span.col
        lines.append(f"{line}:{col}".ljust(8) + token.kind.name.ljust(12) + repr(token.text))
    return "\n".join(lines) + "\n"


def _where(span: Span) -> str:
    if span.source is None:
        return ""
    end_line, end_col = span.source.line_col(span.end)
    return f" @{span.line}:{span.col}-{end_line}:{end_col}"


_Children = list[tuple[str, list[ast.Node]]]
"""Groups of children; a group with a label is printed under `label:`."""


def _dump(node: ast.Node, depth: int, lines: list[str], spans: bool) -> None:
    head, groups = _describe(node)
    lines.append(_INDENT * depth + head + (_where(node.span) if spans else ""))
    for label, children in groups:
        child_depth = depth + 1
        if label:
            lines.append(_INDENT * child_depth + label + ":" + ("" if children else " none"))
            child_depth += 1
        for child in children:
            _dump(child, child_depth, lines, spans)


def _describe(node: ast.Node) -> tuple[str, _Children]:
    """The node's header line and its groups of children."""
    if isinstance(node, ast.Module):
        return "Module", [("", list(node.defs))]
    if isinstance(node, ast.Def):
        where = [("where", list(node.where))] if node.where else []
        return f"Def {node.name}", [
            ("params", list(node.params)),
            ("outputs", list(node.outputs)),
            *where,
            ("", list(node.stmts)),
        ]
    if isinstance(node, ast.Param):
        return _param_line(node), []
    if isinstance(node, ast.Stmt):
        groups: _Children = [("lhs", [node.lhs]), ("rhs", [node.rhs])]
        if node.equivalent is not None:
            groups.append(("equivalent", [node.equivalent]))
        if node.where:
            groups.append(("where", list(node.where)))
        return f"Stmt {node.op.value}", groups
    if isinstance(node, ast.RangeConstraint):
        return "RangeConstraint", [("expr", [node.expr]), ("lo", [node.lo]), ("hi", [node.hi])]
    if isinstance(node, ast.Let):
        return f"Let {node.name}", [("", [node.value])]
    if isinstance(node, ast.Exists):
        return "Exists", [("", [node.expr])]
    return _describe_expr(node)


def _param_line(node: ast.Param) -> str:
    dtype = node.dtype.value if node.dtype else "<inferred type>"
    if node.dims is None:
        shape = "<inferred shape>"
    else:
        shape = "(" + ", ".join(_dim_text(d) for d in node.dims) + ")"
    return f"Param {node.name} {dtype} {shape}"


def _dim_text(dim: ast.Expr) -> str:
    if isinstance(dim, ast.Var):
        return dim.name
    if isinstance(dim, ast.Const):
        return str(dim.value)
    return print_expr(dim)


def _describe_expr(node: ast.Expr) -> tuple[str, _Children]:
    if isinstance(node, ast.Const):
        return f"Const {node.value!r} {node.dtype.value}", []
    if isinstance(node, ast.Var):
        return f"Var {node.name}", []
    if isinstance(node, ast.Access):
        return f"Access {node.name}", [("", list(node.args))]
    if isinstance(node, ast.Call):
        return f"Call {node.fn}", [("", list(node.args))]
    if isinstance(node, ast.Unary):
        return f"Unary {node.op.value}", [("", [node.operand])]
    if isinstance(node, (ast.Binary, ast.Compare, ast.Logical)):
        return f"{type(node).__name__} {node.op.value}", [("", [node.lhs, node.rhs])]
    if isinstance(node, ast.Select):
        return "Select", [("", [node.cond, node.then, node.otherwise])]
    if isinstance(node, ast.Cast):
        return f"Cast {node.dtype.value}", [("", [node.operand])]
    raise TypeError(f"dump: not an AST node: {type(node).__name__}")
