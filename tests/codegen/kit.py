"""Terse constructors for hand-built loop-IR Functions, and a runner that executes one
both in the loop-IR interpreter and as compiled LLVM code on copies of the same arrays;
`EVERY_TARGET`, the (target, options) pairs a TC-level test compares with NumPy."""

from __future__ import annotations

import shutil
from collections.abc import Mapping

import numpy as np
import pytest

from compiler.cpu import compile_function
from compiler.loops import (
    Bin,
    BinOp,
    Block,
    Buffer,
    Const,
    DType,
    Expr,
    For,
    Function,
    Load,
    LoopKind,
    Role,
    Stmt,
    Store,
    VarRef,
    run_function,
)
from compiler.options import Options

I32, I64, F32, F64, BOOL = DType.INT32, DType.INT64, DType.FLOAT32, DType.FLOAT64, DType.BOOL
ExprLike = Expr | int | str


def ex(x: ExprLike) -> Expr:
    """An int is an int64 constant, a str an int64 variable, an Expr itself."""
    if isinstance(x, Expr):
        return x
    return VarRef(x) if isinstance(x, str) else Const(x, I64)


def c(value: bool | int | float, dtype: DType = I64) -> Const:
    return Const(value, dtype)


def v(name: str, dtype: DType = I64) -> VarRef:
    return VarRef(name, dtype)


def bin_(op: BinOp, a: ExprLike, b: ExprLike) -> Bin:
    return Bin(op, ex(a), ex(b))


def add(a: ExprLike, b: ExprLike) -> Bin:
    return bin_(BinOp.ADD, a, b)


def sub(a: ExprLike, b: ExprLike) -> Bin:
    return bin_(BinOp.SUB, a, b)


def mul(a: ExprLike, b: ExprLike) -> Bin:
    return bin_(BinOp.MUL, a, b)


def buf(name: str, dtype: DType, *shape: ExprLike, role: Role = Role.IN) -> Buffer:
    return Buffer(name, dtype, tuple(ex(d) for d in shape), role)


def out(name: str, dtype: DType, *shape: ExprLike) -> Buffer:
    return buf(name, dtype, *shape, role=Role.OUT)


def load(b: Buffer, *index: ExprLike) -> Load:
    return Load(b, tuple(ex(i) for i in index))


def store(b: Buffer, index: tuple[ExprLike, ...], value: Expr) -> Store:
    return Store(b, tuple(ex(i) for i in index), value)


def loop(
    var: str,
    lo: ExprLike,
    hi: ExprLike,
    *body: Stmt,
    kind: LoopKind = LoopKind.SERIAL,
    step: int = 1,
) -> For:
    inner = body[0] if len(body) == 1 else Block(body)
    return For(var, ex(lo), ex(hi), step, inner, kind)


def pfor(var: str, lo: ExprLike, hi: ExprLike, *body: Stmt, step: int = 1) -> For:
    return loop(var, lo, hi, *body, kind=LoopKind.PARALLEL, step=step)


def func(name: str, buffers: list[Buffer], sizes: str, *body: Stmt) -> Function:
    return Function(
        name, tuple(buffers), tuple(sizes.split()), body[0] if len(body) == 1 else Block(body)
    )


def run_both(
    f: Function, arrays: Mapping[str, np.ndarray], sizes: Mapping[str, int], threads: int = 2
) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    """(interpreter results, compiled results), each on its own copy of `arrays`."""
    mine = {k: a.copy() for k, a in arrays.items()}
    theirs = {k: a.copy() for k, a in arrays.items()}
    run_function(f, mine, sizes)
    compile_function(f)(theirs, sizes, threads=threads)
    return mine, theirs


def reference_and_llvm(
    text: str,
    arrays: list[np.ndarray],
    options: object,
    out: np.ndarray | None = None,
    cache: object = None,
) -> tuple[np.ndarray, np.ndarray]:
    """The first output of def `text` on `arrays` from the reference evaluator and from
    the LLVM target with `options` (each given its own copy of `out` when not None),
    compiled through `cache` (None: the process's memory cache; a test that patches
    the lowering's constants passes a CompileCache of its own, whose entries the
    unpatched compiles never share)."""
    import compiler

    want = compiler.define(text, target="interp")
    got = compiler.define(text, target="llvm", options=options, cache=cache)  # type: ignore[arg-type]
    if out is None:
        (e,), (g,) = want(*arrays), got(*arrays)
    else:
        (e,), (g,) = want(*arrays, out=(out.copy(),)), got(*arrays, out=(out.copy(),))
    return e, g


def find(node: object, kind: type) -> list:
    """Every node of type `kind` in a loop-IR tree, in pre-order."""
    from compiler import loops as L

    found: list = []

    class _V(L.Visitor):
        def generic_visit(self, n: L.Node) -> None:
            if isinstance(n, kind):
                found.append(n)
            super().generic_visit(n)

    _V().visit(node)  # type: ignore[arg-type]
    return found


# interp, llvm with 1 and 2 threads, and cuda-emulated where g++ is present
EVERY_TARGET = [
    ("interp", None),
    ("llvm", Options(threads=1)),
    ("llvm", Options(threads=2)),
    pytest.param(
        "cuda-emulated",
        None,
        marks=pytest.mark.skipif(shutil.which("g++") is None, reason="needs g++"),
    ),
]
