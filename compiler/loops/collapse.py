"""Collapsing two loops that walk the last two dimensions of their buffers whole.

Requires: a Function.
Ensures:  `collapse(f)` runs the same statement instances in the same order, with each
pair of serial loops `for h in 0:H { for w in 0:W { body } }` (nothing else in the
outer loop's body) replaced by one loop `for hw in 0:H * W { body' }` when every use of
`h` and `w` in `body` is an access `X[..., h, w]` (those two as the last two subscripts,
nowhere else) of a buffer whose last two dimensions are `H` and `W`; `body'` accesses
`X[..., 0, hw]`, the same element: a buffer is row-major, so the flat offset of
`[..., 0, h * W + w]` is that of `[..., h, w]` (`cpu.llvm_emit._address`). Applied
from the innermost pair outwards, so three such loops become one.

Why: a reduction over whole planes (global average pooling `O(n, c) +=! I(n, c, h, w)`,
a batch norm's statistics) has a short innermost loop (`W` = 14): the vectoriser's
loop ran one or no vector step and a scalar remainder per row, and reduced its vector
of partial sums every row; collapsed, one loop of `H * W` steps vectorises like a row of
a matrix.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator

from compiler import loops as L
from compiler.loops.ir import walk, walk_stmts


def collapse(f: L.Function) -> L.Function:
    """`f` with its whole-plane loop pairs collapsed (module doc)."""
    buffers = [*f.buffers, *(n.buffer for n in walk_stmts(f.body) if isinstance(n, L.Alloc))]
    planes = {b.shape[-2:] for b in buffers if len(b.shape) >= 2}
    return _Collapse(planes).mutate(f)


class _Collapse(L.Mutator):
    def __init__(self, planes: set[tuple[L.Expr, ...]]) -> None:
        # the last two dimensions of every buffer: a pair of loops over anything else
        # collapses nothing (tested first, as walking the body for each pair was slow)
        self.planes = planes

    def generic_mutate(self, node: L.Node) -> L.Node:
        # loops are statements: expressions stay as they are (most of the tree's nodes)
        return node if isinstance(node, L.Expr) else super().generic_mutate(node)

    def mutate_For(self, node: L.For) -> L.Stmt:
        body = self.mutate(node.body)
        if body is not node.body:
            node = dataclasses.replace(node, body=body)
        inner = node.body
        if not (_plain(node) and isinstance(inner, L.For) and _plain(inner)):
            return node
        if (node.hi, inner.hi) not in self.planes:
            return node
        h, w = node.var, inner.var
        found = False
        for a in _accesses(inner.body, h, w):  # (lazily: the first other access ends it)
            if not _whole_plane(a, h, w, node.hi, inner.hi):
                return node
            found = True
        if not found:
            return node
        if _uses_elsewhere(inner.body, h, w):
            return node
        hw = f"{h}_{w}"
        if any(isinstance(n, L.VarRef) and n.name == hw for n in walk(inner.body)):
            return node
        flat = L.Bin(L.BinOp.MUL, node.hi, inner.hi)
        body = _Reindex(h, w, L.VarRef(hw)).mutate(inner.body)
        return L.For(hw, L.Const(0, L.DType.INT64), flat, 1, body, L.LoopKind.SERIAL)


def _plain(loop: L.For) -> bool:
    return (
        loop.kind is L.LoopKind.SERIAL
        and loop.step == 1
        and isinstance(loop.lo, L.Const)
        and loop.lo.value == 0
    )


def _accesses(body: L.Stmt, h: str, w: str) -> Iterator[L.Load | L.Store]:
    return (
        n
        for n in walk(body)
        if isinstance(n, (L.Load, L.Store))
        and any(_mentions(i, h) or _mentions(i, w) for i in n.index)
    )


def _whole_plane(a: L.Load | L.Store, h: str, w: str, hi_h: L.Expr, hi_w: L.Expr) -> bool:
    index, shape = a.index, a.buffer.shape
    if len(index) < 2 or len(shape) != len(index):
        return False
    last = index[-2:]
    # (other uses of h and w, in earlier subscripts too: `_uses_elsewhere`)
    return last == (L.VarRef(h), L.VarRef(w)) and shape[-2:] == (hi_h, hi_w)


def _uses_elsewhere(body: L.Stmt, h: str, w: str) -> bool:
    """Whether `h` or `w` appears other than as the last two subscripts of an access
    (in a value, a bound, a condition, a local's initial value)."""
    stripped = _Reindex(h, w, L.Const(0, L.DType.INT64)).mutate(body)
    return any(isinstance(n, L.VarRef) and n.name in (h, w) for n in walk(stripped))


def _mentions(e: L.Expr, v: str) -> bool:
    return any(isinstance(n, L.VarRef) and n.name == v for n in walk(e))


class _Reindex(L.Mutator):
    """Accesses `X[..., h, w]` as `X[..., 0, flat]`."""

    def __init__(self, h: str, w: str, flat: L.Expr) -> None:
        self.key = (L.VarRef(h), L.VarRef(w))
        self.flat = flat

    def _index(self, index: tuple[L.Expr, ...]) -> tuple[L.Expr, ...]:
        if len(index) >= 2 and index[-2:] == self.key:
            return (*index[:-2], L.Const(0, L.DType.INT64), self.flat)
        return index

    def mutate_Load(self, node: L.Load) -> L.Expr:
        index = self._index(node.index)
        return node if index is node.index else L.Load(node.buffer, index)

    def mutate_Store(self, node: L.Store) -> L.Stmt:
        index, value = self._index(node.index), self.mutate(node.value)
        if index is node.index and value is node.value:
            return node
        return L.Store(node.buffer, index, value)


__all__ = ["collapse"]
