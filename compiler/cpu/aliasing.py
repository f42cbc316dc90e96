"""L1 set aliasing of a register tile's reduction: when to run the literal order instead.

Requires: a statement's `StmtFacts`, the `LoopOrder` the CPU model chose for it, and
every tensor's extents (TC expressions of the sizes).
Ensures:  `alias_check(facts, order, extents) -> AliasCheck | None`: for a register tile
whose reduction runs its long variable innermost (`cpu_model.long_innermost`, order
`kh, kw, c`), what decides at run time that the literal order (`c, kh, kw`) is the
better one; None when the order is the literal one or nothing can alias.

Why: in the order `kh, kw, c` one window point `(kh, kw)` reads, for every channel
`c`, a few cache lines of the tile's vector read (`I(n, c, h + kh, w + kw)`), channels
`stride = H * W` elements apart; the next window point reads the same lines again. An
L1 cache of 64-byte lines in 64 sets (32 KiB, 8-way: every x86 core of the last decade)
maps addresses 4 KiB apart to one set, so when `stride` in bytes is a multiple of
1 KiB the `C` channels' lines fall into at most 4 groups of sets and evict each other
before the next window point reuses them (measured, 1 thread: conv 3x3 N8 C16 32^2 M16
(4 KiB planes) 27 GFLOP/s in that order against 45 in the literal order, while 28^2
planes run 63 against 41). With one window point (`KH * KW == 1`, a pointwise
convolution) nothing is reused and the order `c`-innermost always wins. So the
statement is lowered both ways (`Nest.alternative`) and the literal order runs when

    product of the window extents > 1  and  stride * itemsize % ALIAS_BYTES == 0

Worked example, `O(n, m, h, w) +=! I(n, c, h + kh, w + kw) * W1(m, c, kh, kw)`:
windows `(KH, KW)`, the read `I`, `c` in its dimension 1, stride `H * W`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from compiler import loops as L
from compiler.cpu.cpu_model import mentions, short, stmt_reads
from compiler.frontend.ast import Binary, BinOp, Const, Expr, Let, RangeConstraint, Var
from compiler.frontend.checked import StmtFacts
from compiler.frontend.types import ScalarType
from compiler.poly.lower_expr import I64, bound_to_loops, const
from compiler.poly.order import LoopOrder

ALIAS_BYTES = 1024  # a stride multiple of this many bytes maps to at most 4 set groups


@dataclass(frozen=True)
class AliasCheck:
    windows: tuple[Expr, ...]  # the extents of the short reduction variables
    tensor: str  # the vector read whose lines may alias
    stride: Expr  # elements between consecutive values of the innermost reduction variable

    def condition(self, buffers: Mapping[str, L.Buffer]) -> L.Expr:
        """The run-time test of the module doc: the literal order runs where it holds."""
        windows: L.Expr = const(1, I64)
        for w in self.windows:
            windows = L.Bin(L.BinOp.MUL, windows, bound_to_loops(w))
        size = const(buffers[self.tensor].dtype.np.itemsize, I64)
        stride = L.Bin(L.BinOp.MUL, bound_to_loops(self.stride), size)
        aliases = L.Bin(L.BinOp.EQ, L.Mod(stride, const(ALIAS_BYTES, I64)), const(0, I64))
        return L.Bin(L.BinOp.AND, L.Bin(L.BinOp.GT, windows, const(1, I64)), aliases)


def alias_check(
    facts: StmtFacts, order: LoopOrder, extents: dict[str, tuple[Expr, ...]]
) -> AliasCheck | None:
    """The run-time test that picks the literal order (module doc), or None."""
    if order.lanes <= 1 or not order.innermost or order.inner == facts.reduction_vars:
        return None
    c, j = order.inner[-1], order.innermost[0]
    windows = tuple(_extent(facts, v) for v in order.inner if short(facts, v))
    if not windows or any(w is None for w in windows):
        return None
    lets = {w.name: w.value for w in facts.stmt.where if isinstance(w, Let)}
    for read in stmt_reads(facts):
        if not any(mentions(a, j, lets) for a in read.args):
            continue
        dims = [k for k, a in enumerate(read.args) if mentions(a, c, lets)]
        if len(dims) != 1 or not isinstance(read.args[dims[0]], Var):
            continue
        later = extents[read.name][dims[0] + 1 :]
        stride: Expr = Const(1, ScalarType.INT32)
        for e in later:
            stride = Binary(BinOp.MUL, stride, e)
        return AliasCheck(windows, read.name, stride)  # type: ignore[arg-type]
    return None


def _extent(facts: StmtFacts, v: str) -> Expr | None:
    """`v`'s extent as an expression of the sizes alone (the test runs before any loop),
    or None: a range relative to another variable (`y in z:z + KH`) has none written."""
    for c in facts.stmt.where:
        if isinstance(c, RangeConstraint) and isinstance(c.expr, Var) and c.expr.name == v:
            if any(mentions(b, u, {}) for b in (c.lo, c.hi) for u in facts.all_vars):
                return None
            return Binary(BinOp.SUB, c.hi, c.lo)
    return None


__all__ = ["ALIAS_BYTES", "AliasCheck", "alias_check"]
