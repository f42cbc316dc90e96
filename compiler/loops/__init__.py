"""The loop IR (`compiler.loops`): grammar and nodes in `ir`, plus printing, checking,
argument binding and a reference interpreter. Every backend consumes this package."""

from __future__ import annotations

from compiler.loops.arguments import check_arguments, eval_size_expr
from compiler.loops.interp import eval_expr, run_function
from compiler.loops.ir import (
    MATH_ARITY,
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
    Mutator,
    Node,
    Role,
    Select,
    Stmt,
    StmtMutator,
    Store,
    Unary,
    UnaryOp,
    VarRef,
    Visitor,
    children,
    var_names,
    walk,
)
from compiler.loops.printer import print_expr, print_function, print_stmt
from compiler.loops.verify import verify

__all__ = [
    "MATH_ARITY", "Alloc", "Assign", "Bin", "BinOp", "Block", "Buffer", "Call", "Cast",
    "Const", "DType", "Expr", "FloorDiv", "For", "Function", "If", "Let", "Load", "Local",
    "LoopKind", "Max", "Min", "Mod", "Mutator", "Node", "Role", "Select", "Stmt", "StmtMutator", "Store",
    "Unary", "UnaryOp", "VarRef", "Visitor", "check_arguments", "children", "var_names", "walk",
    "eval_expr", "eval_size_expr", "print_expr", "print_function", "print_stmt",
    "run_function", "verify",
]  # fmt: skip
