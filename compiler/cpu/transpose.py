"""Transposed copies of a register tile's strided reads: a pure `Stmt -> Stmt` transform.

Requires: the lowered loops of one memory-form statement whose register tile's lanes
run along `j` (`cpu.cpu_model.transposed_lanes`), before `cpu.regtile`; the nest
writes only its output, and reads it only at the element it writes (memory form).
Ensures:  `transpose_reads(stmt, j, zero)` computes the same values in the same order.
Each buffer the nest reads or writes with `j` in one subscript `p`, not the last, and
nowhere else (`X[a0, .., j + e, .., an]`) is accessed as `X.t<p>[a0, .., an, j + e]`
instead: a copy of `X` with dimension `p` moved last, filled before the nest (unless it
is the output `zero`, whose init nest left zeros: Alloc's zeros stand for them) and,
when the nest writes it, copied back after it, each by a loop nest over `X.t<p>` in its
memory order whose outermost loop is parallel:

    for n / h / w / m:                              alloc G.t1[N, H', W', M]
      WG[m, c, kh, kw] += G[n, m, h, w] * I[..]  ==>  parallel for n / h / w / m: G.t1[n, h, w, m] = G[n, m, h, w]
                                                      for n / h / w / m:
                                                        WG.t0[c, kh, kw, m] += G.t1[n, h, w, m] * I[..]
                                                      parallel for ..: WG[m, c, kh, kw] = WG.t0[c, kh, kw, m]

Why: a register tile keeps one vector of lanes `j .. j + width - 1` per row; read
from `G[n, m, h, w]` those lanes lie a plane apart (a gather of 16 loads a vector),
from the copy they are one vector load; stored to `WG[m, ..]` they are 16 scalar
stores, from which LLVM's SLP vectoriser (it starts at consecutive stores) did not
vectorise the tile at all (a weight gradient: 7.4 ms, 0.90 ms with the output's
copy). The copy reads each element once, and the tile reads it once for each row
block of the whole reduction (a weight gradient's channels `c / rows` x `KH * KW`
times): BLIS's packing, done for a whole operand because the tile's reduction (`n,
h, w`) spans all of it.
"""

from __future__ import annotations

from compiler import loops as L
from compiler.loops.ir import walk
from compiler.names import NameSupply
from compiler.poly.lower_expr import I64, const


def transpose_reads(
    stmt: L.Stmt, j: str, zero: str | None = None, panels: frozenset[str] | None = None
) -> L.Stmt:
    """`stmt` reading transposed copies of its reads strided along `j` (module doc).
    `zero`: an output that holds zeros before the nest (a `+=!` statement's, after its
    init nest): its copy starts as Alloc's zeros instead of being copied in. `panels`
    (a packed one-loop contraction: its reduction variable and the sizes): a read
    whose other subscripts name nothing else is left to `cpu.pack`, which copies it
    transposed one panel at a time (`cpu_model.transposed_panels`)."""
    found: dict[str, set[int]] = {}  # buffer -> the subscripts that use `j`
    buffers: dict[str, L.Buffer] = {}
    inner: set[str] = set()  # allocated inside the nest
    written: set[str] = set()
    taken: set[str] = set()  # the names the copies' loops must not reuse
    for node in walk(stmt):
        if isinstance(node, L.VarRef):
            taken.add(node.name)
        elif isinstance(node, (L.For, L.Let, L.Local)):
            taken.add(node.var)
        elif isinstance(node, L.Alloc):
            inner.add(node.buffer.name)
        if isinstance(node, L.Store):
            written.add(node.buffer.name)
        if isinstance(node, (L.Load, L.Store)) and node.index:
            uses = [k for k, e in enumerate(node.index) if j in L.var_names(e)]
            position = uses[0] if len(uses) == 1 else -1
            found.setdefault(node.buffer.name, set()).add(position)
            buffers[node.buffer.name] = node.buffer
    copies: dict[str, tuple[L.Buffer, int]] = {}
    for name, positions in found.items():
        source = buffers[name]
        if len(positions) != 1 or name in inner:
            continue
        (p,) = positions
        if p < 0 or p == len(source.shape) - 1:
            continue
        if panels is not None and name not in written and _panel_only(stmt, name, p, panels):
            continue
        shape = (*source.shape[:p], *source.shape[p + 1 :], source.shape[p])
        copies[name] = (L.Buffer(f"{name}.t{p}", source.dtype, shape, L.Role.TEMP), p)
    if not copies:
        return stmt
    body = _Access(copies).mutate(stmt)
    before = [_copy(buffers[n], t, p, taken, True) for n, (t, p) in copies.items() if n != zero]
    after = [_copy(buffers[n], t, p, taken, False) for n, (t, p) in copies.items() if n in written]
    out: L.Stmt = L.Block((*before, body, *after))
    for t, _ in reversed(list(copies.values())):
        out = L.Alloc(t, out)
    return out


class _Access(L.Mutator):
    def __init__(self, copies: dict[str, tuple[L.Buffer, int]]) -> None:
        self.copies = copies

    def _moved(self, node: L.Load | L.Store) -> tuple[L.Buffer, tuple[L.Expr, ...]] | None:
        hit = self.copies.get(node.buffer.name)
        if hit is None:
            return None
        t, p = hit
        return t, _moved(tuple(self.mutate(e) for e in node.index), p)

    def mutate_Load(self, node: L.Load) -> L.Expr:
        moved = self._moved(node)
        return self.generic_mutate(node) if moved is None else L.Load(*moved)

    def mutate_Store(self, node: L.Store) -> L.Stmt:
        moved = self._moved(node)
        if moved is None:
            return self.generic_mutate(node)
        return L.Store(*moved, self.mutate(node.value))


def _moved(index: tuple[L.Expr, ...], p: int) -> tuple[L.Expr, ...]:
    return (*index[:p], *index[p + 1 :], index[p])


def _copy(source: L.Buffer, t: L.Buffer, p: int, taken: set[str], into: bool) -> L.Stmt:
    """`t[.., s_p] = source[.., s_p, ..]` (`into`), or back, over `t`'s memory order,
    the outermost loop parallel; its loop names avoid `taken` and the shape's sizes."""
    supply = NameSupply(taken | L.var_names(*source.shape))
    names = [supply.fresh(f"t{k}") for k in range(len(source.shape))]
    index = tuple(L.VarRef(n) for n in names)
    order = [*range(p), *range(p + 1, len(names)), p]
    at = _moved(index, p)
    body: L.Stmt = (
        L.Store(t, at, L.Load(source, index)) if into else L.Store(source, index, L.Load(t, at))
    )
    for depth, k in reversed(list(enumerate(order))):
        kind = L.LoopKind.PARALLEL if depth == 0 else L.LoopKind.SERIAL
        body = L.For(names[k], const(0, I64), source.shape[k], 1, body, kind)
    return body


def _panel_only(stmt: L.Stmt, name: str, p: int, allowed: frozenset[str]) -> bool:
    """Every access of `name` names only `allowed` variables outside its subscript `p`."""
    for node in walk(stmt):
        if isinstance(node, (L.Load, L.Store)) and node.buffer.name == name:
            rest = node.index[:p] + node.index[p + 1 :]
            if L.var_names(*rest) - allowed:
                return False
    return True


__all__ = ["transpose_reads"]
