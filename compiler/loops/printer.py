"""Printing the loop IR as a readable C-like loop nest (for `--emit loops` and golden files).

    func matmul(in float32 A[M, K], in float32 B[K, N], out float32 C[M, N]) sizes(M, N, K) {
      parallel for (i = 0; i < M; i += 1) {
        for (j = 0; j < N; j += 1) {
          local float32 acc = 0.0f {
            for (k = 0; k < K; k += 1) {
              acc = acc + A[i, k] * B[k, j];
            }
            C[i, j] = acc;
          }
        }
      }
    }

Scoped statements (`let`, `local`, `alloc`) open a brace block; binary operators use C
precedence with the fewest parentheses; `min max floordiv floormod` print as calls.
"""

from __future__ import annotations

from compiler.diagnostics import InternalError
from compiler.loops.ir import (
    Alloc,
    Assign,
    Bin,
    BinOp,
    Block,
    Buffer,
    Call,
    Cast,
    Const,
    DType,
    Expr,
    FloorDiv,
    For,
    Function,
    If,
    Let,
    Load,
    Local,
    LoopKind,
    Max,
    Min,
    Mod,
    Select,
    Stmt,
    Store,
    Unary,
    VarRef,
)

_PREC = {
    BinOp.OR: 1, BinOp.AND: 2, BinOp.EQ: 3, BinOp.NE: 3,
    BinOp.LT: 4, BinOp.LE: 4, BinOp.GT: 4, BinOp.GE: 4,
    BinOp.ADD: 5, BinOp.SUB: 5, BinOp.MUL: 6, BinOp.DIV: 6, BinOp.MOD: 6,
}  # fmt: skip
_UNARY_PREC = 7
_ATOM_PREC = 8
_SELECT_PREC = 0


def print_function(f: Function) -> str:
    """The whole function as text, ending in a newline."""
    params = ", ".join(_buffer_decl(b) for b in f.buffers)
    lines = [f"func {f.name}({params}) sizes({', '.join(f.size_params)}) {{"]
    _stmt(f.body, 1, lines)
    lines.append("}")
    return "\n".join(lines) + "\n"


def print_stmt(s: Stmt) -> str:
    lines: list[str] = []
    _stmt(s, 0, lines)
    return "\n".join(lines) + "\n"


def print_expr(e: Expr) -> str:
    return _expr(e)[0]


def _buffer_decl(b: Buffer) -> str:
    dims = ", ".join(print_expr(d) for d in b.shape)
    return f"{b.role.value} {b.dtype.value} {b.name}[{dims}]"


def _stmt(s: Stmt, depth: int, out: list[str]) -> None:
    pad = "  " * depth
    if isinstance(s, Block):
        for child in s.stmts:
            _stmt(child, depth, out)
    elif isinstance(s, For):
        kind = "" if s.kind is LoopKind.SERIAL else f"{s.kind.value} "
        lo, hi = print_expr(s.lo), print_expr(s.hi)
        out.append(f"{pad}{kind}for ({s.var} = {lo}; {s.var} < {hi}; {s.var} += {s.step}) {{")
        _stmt(s.body, depth + 1, out)
        out.append(pad + "}")
    elif isinstance(s, If):
        out.append(f"{pad}if ({print_expr(s.cond)}) {{")
        _stmt(s.then, depth + 1, out)
        if s.otherwise is not None:
            out.append(pad + "} else {")
            _stmt(s.otherwise, depth + 1, out)
        out.append(pad + "}")
    elif isinstance(s, Store):
        out.append(f"{pad}{_access(s.buffer.name, s.index)} = {print_expr(s.value)};")
    elif isinstance(s, Assign):
        out.append(f"{pad}{s.var} = {print_expr(s.value)};")
    elif isinstance(s, (Let, Local, Alloc)):
        out.append(pad + _scope_header(s) + " {")
        _stmt(s.body, depth + 1, out)
        out.append(pad + "}")
    else:
        raise InternalError(f"print_function: unknown statement {type(s).__name__}")


def _scope_header(s: Let | Local | Alloc) -> str:
    if isinstance(s, Let):
        return f"let {s.value.dtype.value} {s.var} = {print_expr(s.value)}"
    if isinstance(s, Local):
        return f"local {s.dtype.value} {s.var} = {print_expr(s.init)}"
    return f"alloc {_buffer_decl(s.buffer)}"


def _access(name: str, index: tuple[Expr, ...]) -> str:
    return f"{name}[{', '.join(print_expr(i) for i in index)}]"


def _call(name: str, args: tuple[Expr, ...]) -> tuple[str, int]:
    return f"{name}({', '.join(print_expr(a) for a in args)})", _ATOM_PREC


def _expr(e: Expr) -> tuple[str, int]:
    """The text of `e` and its precedence (higher binds tighter)."""
    if isinstance(e, Const):
        return _const(e)
    if isinstance(e, VarRef):
        return e.name, _ATOM_PREC
    if isinstance(e, Load):
        return _access(e.buffer.name, e.index), _ATOM_PREC
    if isinstance(e, Bin):
        prec = _PREC[e.op]
        left = _paren(e.a, prec)
        right = _paren(e.b, prec + 1)
        return f"{left} {e.op.value} {right}", prec
    if isinstance(e, Unary):
        return f"{e.op.value}{_paren(e.x, _UNARY_PREC)}", _UNARY_PREC
    if isinstance(e, Select):
        text = f"{_paren(e.cond, 1)} ? {_paren(e.a, 1)} : {_paren(e.b, _SELECT_PREC)}"
        return text, _SELECT_PREC
    if isinstance(e, Cast):
        return _call(e.dtype.value, (e.x,))
    if isinstance(e, Call):
        return _call(e.fn, e.args)
    named = {Min: "min", Max: "max", FloorDiv: "floordiv", Mod: "floormod"}
    if type(e) in named:
        return _call(named[type(e)], (e.a, e.b))  # type: ignore[attr-defined]
    raise InternalError(f"print_function: unknown expression {type(e).__name__}")


def _paren(e: Expr, need: int) -> str:
    text, prec = _expr(e)
    return f"({text})" if prec < need else text


def _const(c: Const) -> tuple[str, int]:
    if c.dtype is DType.BOOL:
        return ("true" if c.value else "false"), _ATOM_PREC
    if c.dtype.is_float:
        text = repr(float(c.value))
        if c.dtype is DType.FLOAT32:
            text += "f"
        elif c.dtype is DType.FLOAT16:
            return f"float16({text})", _ATOM_PREC
    elif c.dtype is DType.INT64:
        text = str(int(c.value))
    else:
        return f"{c.dtype.value}({int(c.value)})", _ATOM_PREC
    return text, (_UNARY_PREC if text.startswith("-") else _ATOM_PREC)
