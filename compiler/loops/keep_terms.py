"""Keeping a costly reduction term in the output that recomputes it, on the loop IR.

Requires: a verified `Function` (run after `loops.fuse`).
Ensures:  `keep_terms(f)` computes what `f` computes, bit for bit, with fewer
evaluations of math calls. Two adjacent statements of a block

    Local acc = i { for v in lo:hi step s { acc = acc op E } ; P }
    for w in lo:hi step s { Y[idx] = V }            -- V contains E (w for v)

become

    Local acc = i { for v in lo:hi step s { Y[idx] = E ; acc = acc op Y[idx] } ; P }
    for w in lo:hi step s { Y[idx] = V[E := Y[idx]] }

when `E` holds a math call (`exp`, `log`, `tanh`, ...), `Y` has `E`'s type (the value
kept is the value computed), `idx` has a dimension indexed by exactly the loop
variable (each iteration keeps its own element, which the second loop reads and then
overwrites, unconditionally), nothing in the first statement touches `Y` and the
second loop reads `Y` nowhere else, and no buffer `E` reads is stored by the first
statement (`E` has the same value in both loops). Softmax's
`s(n) +=! exp(X(n, d) - mx(n))` then `Y(n, d) = exp(X(n, d) - mx(n)) / s(n)` computes
each `exp` once, as PyTorch does (its output holds the exponentials until the sum is
known). The sum's loop keeps its blocked, compensated form (`Y[idx] = E` is another
statement of the loop body; `cpu.llvm_emit` redirects only the update).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator

from compiler.loops.ir import (
    Assign,
    Bin,
    Block,
    Call,
    Expr,
    For,
    Function,
    Let,
    Load,
    Local,
    Max,
    Min,
    Mutator,
    Node,
    Stmt,
    StmtMutator,
    Store,
    VarRef,
    children,
)


def keep_terms(f: Function) -> Function:
    """`f` with costly reduction terms kept in the outputs that recompute them."""
    body = _Keeper().mutate(f.body)
    return f if body is f.body else dataclasses.replace(f, body=body)


class _Keeper(StmtMutator):
    def mutate_Block(self, node: Block) -> Stmt:
        node = self.generic_mutate(node)
        items = list(node.stmts)
        changed = False
        for k in range(len(items) - 1):
            pair = _keep(items[k], items[k + 1])
            if pair is not None:
                items[k], items[k + 1] = pair
                changed = True
        return Block(tuple(items)) if changed else node


def _keep(s1: Stmt, s2: Stmt) -> tuple[Stmt, Stmt] | None:
    if not (isinstance(s1, Local) and isinstance(s2, For)):
        return None
    inner = s1.body
    post: tuple[Stmt, ...] = ()
    if isinstance(inner, Block) and inner.stmts and isinstance(inner.stmts[0], For):
        inner, post = inner.stmts[0], inner.stmts[1:]
    if not isinstance(inner, For):
        return None
    loop1, loop2 = inner, s2
    if (loop1.lo, loop1.hi, loop1.step) != (loop2.lo, loop2.hi, loop2.step):
        return None
    update = loop1.body
    if not (isinstance(update, Assign) and update.var == s1.var):
        return None
    value = update.value
    if not isinstance(value, (Bin, Min, Max)):
        return None
    me = VarRef(s1.var, s1.dtype)
    if value.a == me:
        term = value.b
    elif value.b == me:
        term = value.a
    else:
        return None
    store = loop2.body
    if not isinstance(store, Store) or not _has_call(term) or _mentions_var(term, s1.var):
        return None
    y = store.buffer
    if y.dtype is not term.dtype:
        return None
    renamed = _Rename(loop2.var, loop1.var).mutate(store) if loop2.var != loop1.var else store
    if loop2.var != loop1.var and _mentions_var(store, loop1.var):
        return None
    ref = VarRef(loop1.var)
    if not any(i == ref for i in renamed.index):
        return None
    if y.name in _buffers(s1, loads=True) | _buffers(s1, loads=False):
        return None
    if y.name in _buffers(renamed.value, loads=True) or y.name in _buffers(renamed.index, True):
        return None
    if _buffers(term, loads=True) & _buffers(s1, loads=False):
        return None
    kept = Load(y, renamed.index)
    replaced = _Replace(term, kept).mutate(renamed.value)
    if replaced is renamed.value:
        return None  # E does not occur in V
    new_update = dataclasses.replace(update, value=_Replace(term, kept).mutate(value))
    body1 = Block((Store(y, renamed.index, term), new_update))
    loop1 = dataclasses.replace(loop1, body=body1)
    first = dataclasses.replace(s1, body=Block((loop1, *post)) if post else loop1)
    loop2 = dataclasses.replace(
        loop2, var=loop1.var, body=dataclasses.replace(renamed, value=replaced)
    )
    return first, loop2


def _has_call(e: Node) -> bool:
    return any(isinstance(n, Call) for n in _walk(e))


def _mentions_var(node: Node, name: str) -> bool:
    for n in _walk(node):
        if isinstance(n, VarRef) and n.name == name:
            return True
        if isinstance(n, (For, Let, Local, Assign)) and n.var == name:
            return True
    return False


def _buffers(node: object, loads: bool) -> set[str]:
    """Names of the buffers `node` loads (or, with loads=False, stores)."""
    roots = list(node) if isinstance(node, tuple) else [node]
    found: set[str] = set()
    for root in roots:
        for n in _walk(root):
            if loads and isinstance(n, Load):
                found.add(n.buffer.name)
            elif not loads and isinstance(n, Store):
                found.add(n.buffer.name)
    return found


def _walk(node: Node) -> Iterator[Node]:
    stack = [node]
    while stack:
        n = stack.pop()
        yield n
        stack.extend(children(n))


class _Rename(Mutator):
    def __init__(self, old: str, new: str) -> None:
        self.old, self.new = old, new

    def mutate_VarRef(self, node: VarRef) -> VarRef:
        return dataclasses.replace(node, name=self.new) if node.name == self.old else node


class _Replace(Mutator):
    """Every occurrence of expression `old` becomes `new`."""

    def __init__(self, old: Expr, new: Expr) -> None:
        self.old, self.new = old, new

    def mutate(self, node: object) -> object:
        if isinstance(node, Expr) and node == self.old:
            return self.new
        return super().mutate(node)


__all__ = ["keep_terms"]
