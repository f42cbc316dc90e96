"""Register tiling of a memory-form reduction nest: a pure `Stmt -> Stmt` transform.

Requires: the lowered loops of one statement in memory form (`cpu.cpu_model`): the
innermost loop `j` below the reduction loops, accumulating into the output in memory
(`O[.., j] = O[.., j] + e`), usually after unroll-and-jam (`loops.jam`); the name of the
first reduction loop. What `cpu_model` checked for memory form makes this legal:
distinct `j` write distinct elements, and each element's contributions keep their order.
Ensures:  `register_tile(stmt, j, first_reduction, width)` runs the same instances with
the same per-element order, so results equal the memory form's exactly. Each loop over
the first reduction variable whose `j` loops all have the same bounds (not depending
on the reduction loops) and only such accumulating stores becomes

    for j in lo : lo + (extent // width) * width step width     (full tiles, no guard)
      local acc_t_0 = O[t, j] ... local acc_t_{width-1} = O[t, j + width - 1]
        <the reduction loops, each `j` loop replaced by its body for the lanes
         j, j + 1, ..., j + width - 1, accumulating into the locals>
        O[t, j + l] = acc_t_l   for every target t and lane l
    <the reduction loops again, their `j` loops over the remainder only>

The remainder is tiled again, `width / 2` lanes, then `width / 4`, ... down to
`MIN_LANES` (each such loop runs at most once), and the last columns are tiles of one
lane each (a column's rows accumulate in registers over the whole reduction; in memory
form each step loaded and stored them: measured, 2 threads, same process, medians of
blocks, float32 matmul M x K x N, memory form / one-lane tiles: 300x300x7 0.274 /
0.216 ms, 129x257x65 0.167 / 0.142, 500x500x40 0.386 / 0.332, 300^3 0.694 / 0.657;
512^3 and 1000^3 unchanged); only in a nest of several targets (the jammed row
blocks: a single row's remainder is a small share of the work, and each tile is more
code to compile).
Measured, AVX2 (Zen 3), 2 threads, same process, medians of blocks, float32 1x1
convolution `O(n, m, h, w) +=! I(n, c, h, w) * W1(m, c)` against torch, memory-form
remainder / tiles down to 8 / down to 4 lanes: N8 C64 28^2 M128 1.54x / 0.71x / 0.37x
(16 + 12 columns a row); N8 C64 14^2 M256 9.5x / 4.6x / 2.9x; N8 C32 56^2 M64 0.66x /
0.33x / 0.34x. Optimised LLVM IR of examples/matmul.tc, 1603 -> 2100 lines, of its
gradient 9527 -> 10477 (cold compile, medians of 5, process CPU time: 0.43 -> 0.58 s,
the gradient 2.70 -> 3.15 s); examples/conv2d.tc's code is unchanged.

With `identity` (an `op!` statement whose output holds the identity before the nest,
and no cache tile splits the reduction), the locals start at the identity instead of
loading the output, and the remainder is one more full tile ending at the last
element when the extent is at least `width` (its first lanes recompute, from the
identity and in the same order, values already stored): the tile loop runs
`ceil(extent / width)` times, its start clamped (`let j' = min(j, hi - width)`), so
there is one copy of the tile and no guard inside it; an extent below `width` runs
in memory form: narrower clamped tiles there (8, then 4 lanes) ran convolutions with
output rows of 14, 7 and 4 2-3x faster (Zen 3, 2 threads, float32 3x3 with bias
against torch: N8 C128 16^2 M128 7.5x -> 4.2x, N8 C256 9^2 M256 11.9x -> 4.2x, N8
C512 6^2 M512 10.6x -> 3.5x) but doubled the cold compile of every convolution
(examples/conv2d.tc, medians of 5, process CPU time: 0.64 -> 1.30 s, its gradient 1.47
-> 2.49 s), so they are not kept. The innermost reduction loops (the parents of the
lanes) become `LoopKind.UNROLL`.

so a tile of `targets x width` output elements stays in registers for the whole
reduction (LLVM's SLP vectoriser turns the lanes into vector registers: the
vectorised dimension is explicit). Reads may use `j` in any affine way (a strided
`I[2 * j + k]` reads lanes 2 apart). Anything else is left unchanged.

Worked example (conv, `m` jammed by 2, width 2), the reduction `c, kw`:

    for c / for kw / for w in 0:W'                   for w in 0:(W' // 2) * 2 step 2
      O[m, w] = O[m, w] + I[c, w+kw] * K[m, c, kw]     local a00 = O[m, w], a01 = O[m, w+1],
      O[m+1, w] = O[m+1, w] + I[c, w+kw]*K[m+1,..]           a10 = O[m+1, w], a11 = ...
                                              ==>        for c / for kw
                                                           a00 = a00 + I[c, w+kw] * K[m, c, kw]
                                                           a01 = a01 + I[c, w+1+kw] * K[m, c, kw]
                                                           a10 = ...; a11 = ...
                                                         O[m, w] = a00; ...
                                                     for c / for kw / for w in (W' // 2) * 2:W'
                                                       ... the original body
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from compiler import loops as L
from compiler.poly.lower_expr import I64, const

MIN_LANES = 4  # the narrowest tile of a remainder's columns (module doc)


def register_tile(
    stmt: L.Stmt, j: str, first_reduction: str, width: int, identity: L.Const | None = None
) -> L.Stmt:
    """`stmt` with every qualifying reduction nest register-tiled (module doc).
    `identity`: the value every output element holds before the nest (an `op!`
    statement after its Init nest), or None when unknown."""
    if width <= 1:
        return stmt
    if identity is not None and _split_reduction(stmt, first_reduction):
        identity = None  # each loop over `first` holds a part of every element's sum
    return _Tiler(j, first_reduction, width, identity).mutate(stmt)


@dataclasses.dataclass(frozen=True)
class _Target:
    buffer: L.Buffer
    index: tuple[L.Expr, ...]  # with `j` free


class _Tiler(L.Mutator):
    def generic_mutate(self, node: L.Node) -> L.Node:
        # it rewrites loops: expressions stay as they are (most of the tree's nodes)
        return node if isinstance(node, L.Expr) else super().generic_mutate(node)

    def __init__(self, j: str, first_reduction: str, width: int, identity: L.Const | None) -> None:
        self.j = j
        self.first = first_reduction
        self.width = width
        self.identity = identity
        self.count = 0

    def mutate_For(self, node: L.For) -> L.Stmt:
        if node.var != self.first:
            return self.generic_mutate(node)
        return self._tile(node, self.width)

    def _tile(self, node: L.For, width: int) -> L.Stmt:
        """The reduction loop `node` as tiles of `width` lanes and its remainder (in
        narrower tiles down to `MIN_LANES`, then in memory form)."""
        found = _Inner(self.j)
        if not found.scan(node, set()) or not found.loops:
            return node
        lo, hi = found.bounds  # type: ignore[misc]
        extent = L.Max(L.Bin(L.BinOp.SUB, hi, lo), const(0, I64))
        whole = L.Bin(L.BinOp.MUL, L.FloorDiv(extent, const(width, I64)), const(width, I64))
        split = L.Bin(L.BinOp.ADD, lo, whole)
        self.count += 1
        names = {t: f"acc{self.count}_{k}" for k, t in enumerate(found.targets)}
        lanes = range(width)
        # the lanes are offsets from `base`: `j` itself, or, for an `op!` nest, the
        # clamped start of its tile (a Let below), named in the lanes as they are built
        base = self.j if self.identity is None else _fresh(f"{self.j}_tile", node)
        body: L.Stmt = _Lanes(self.j, width, names, base).mutate(node)
        # (target, its lane's local, the element it holds) in store order; a target is
        # hashed once (its buffer's shape and index are whole expression trees)
        slots = [
            (t, _lane(name, lane), _at(t.index, self.j, lane, base))
            for t, name in names.items()
            for lane in lanes
        ]
        stores = [L.Store(t.buffer, at, L.VarRef(acc, t.buffer.dtype)) for t, acc, at in slots]
        body = L.Block((body, *stores))
        for t, acc, at in reversed(slots):
            init: L.Expr = L.Load(t.buffer, at)
            if self.identity is not None:
                init = L.Const(self.identity.value, t.buffer.dtype)
            body = L.Local(acc, t.buffer.dtype, init, body)
        if self.identity is None:
            if width == 1:  # every column left, each a tile of one lane (module doc)
                return L.For(self.j, lo, hi, 1, body)
            main = L.For(self.j, lo, split, width, body)
            rest = _Restrict(self.j, split).mutate(node)
            if len(found.targets) > 1:
                # at most one tile of each narrower width, then columns of one lane
                # each (module doc)
                narrower = width // 2 if width // 2 >= MIN_LANES else 1
                rest = self._tile(rest, narrower)  # type: ignore[arg-type]
            return L.Block((main, rest))
        # Every element starts at the identity: the last partial tile is a full tile
        # ending at `hi`, whose lanes before `split` recompute (from the identity, in
        # the same order) the values already stored there. It is the tile loop's last
        # iteration, its start clamped (`min(j, hi - width)`): one copy of the tile's
        # code, not two (half the LLVM IR, and compile time, of a tiled nest).
        short = L.Bin(L.BinOp.LT, extent, const(width, I64))
        tiles = L.FloorDiv(L.Bin(L.BinOp.ADD, extent, const(width - 1, I64)), const(width, I64))
        end = L.Bin(L.BinOp.ADD, lo, L.Bin(L.BinOp.MUL, tiles, const(width, I64)))
        clamped = L.Min(L.VarRef(self.j), L.Bin(L.BinOp.SUB, hi, const(width, I64)))
        tile = L.Let(base, clamped, body)
        return L.If(short, node, L.For(self.j, lo, end, width, tile))


def _split_reduction(stmt: L.Stmt, first: str) -> bool:
    """Whether one instance of the loops above the reduction runs more than one loop
    over `first` (an unroll-and-jam of `first` leaves a remainder loop; isl may split
    a domain into pieces): each such loop then adds only part of an element's sum."""

    def reached(s: L.Stmt) -> int:
        # loops over `first` one instance of the enclosing loops runs, at most
        if isinstance(s, L.For):
            return 1 if s.var == first else 0
        if isinstance(s, L.Block):
            return sum(reached(c) for c in s.stmts)
        if isinstance(s, L.If):
            return max(reached(s.then), 0 if s.otherwise is None else reached(s.otherwise))
        if isinstance(s, (L.Let, L.Local, L.Alloc)):
            return reached(s.body)
        return 0

    def split(s: L.Stmt) -> bool:
        if reached(s) > 1:
            return True
        if isinstance(s, L.For):
            return s.var != first and split(s.body)
        if isinstance(s, L.Block):
            return any(split(c) for c in s.stmts)
        if isinstance(s, L.If):
            return split(s.then) or (s.otherwise is not None and split(s.otherwise))
        if isinstance(s, (L.Let, L.Local, L.Alloc)):
            return split(s.body)
        return False

    return split(stmt)


class _Inner:
    """Checks the nest below a reduction loop and collects its `j` loops' targets."""

    def __init__(self, j: str) -> None:
        self.j = j
        self.loops = 0
        self.bounds: tuple[L.Expr, L.Expr] | None = None
        self.targets: list[_Target] = []

    def scan(self, s: L.Stmt, bound: set[str]) -> bool:
        if isinstance(s, L.Block):
            return all(self.scan(c, bound) for c in s.stmts)
        if not isinstance(s, L.For):
            return False
        if s.var != self.j:
            if L.var_names(s.lo, s.hi) & {self.j}:
                return False
            return self.scan(s.body, bound | {s.var})
        if s.step != 1 or L.var_names(s.lo, s.hi) & bound:
            return False
        if self.bounds is None:
            self.bounds = (s.lo, s.hi)
        elif self.bounds != (s.lo, s.hi):
            return False
        self.loops += 1
        stores = s.body.stmts if isinstance(s.body, L.Block) else (s.body,)
        return all(self._store(st) for st in stores)

    def _store(self, s: L.Stmt) -> bool:
        if not isinstance(s, L.Store) or not s.index:
            return False
        at = [k for k, e in enumerate(s.index) if self.j in L.var_names(e)]
        if len(at) != 1 or s.index[at[0]] != L.VarRef(self.j):
            return False  # one subscript is `j` (its lanes are stored once, at the end)
        loads = _loads_of(s.value, s.buffer.name)
        if loads != [s.index]:
            return False  # exactly one read of the output: the element written
        target = _Target(s.buffer, s.index)
        if target not in self.targets:
            self.targets.append(target)
        return True


class _Lanes(L.StmtMutator):
    """Each `j` loop becomes its body for every lane, accumulating into the locals."""

    def __init__(self, j: str, width: int, names: dict[_Target, str], base: str) -> None:
        self.j = j
        self.width = width
        self.names = names
        self.base = base  # lane `l` reads `base + l` where the loop read `j`

    def mutate_For(self, node: L.For) -> L.Stmt:
        if node.var != self.j:
            new = self.generic_mutate(node)
            inner = node.body.stmts if isinstance(node.body, L.Block) else (node.body,)
            if any(isinstance(c, L.For) and c.var == self.j for c in inner):
                # its body is now lanes: back ends vectorise across them, not the loop
                return dataclasses.replace(new, kind=L.LoopKind.UNROLL)
            return new
        stores = node.body.stmts if isinstance(node.body, L.Block) else (node.body,)
        out: list[L.Stmt] = []
        for st in stores:
            assert isinstance(st, L.Store)
            name = self.names[_Target(st.buffer, st.index)]
            # the nodes a lane rewrites: those above a read of `j` or of the output
            out_name = st.buffer.name
            touched = _above(st.value, lambda n, b=out_name: _reads(n, self.j, b))
            for lane in range(self.width):
                acc = L.VarRef(_lane(name, lane), st.buffer.dtype)
                at = _lane_at(self.base, lane)
                value = _LaneOf(touched, self.j, at, st.buffer.name, acc).mutate(st.value)
                out.append(L.Assign(acc.name, value))
        return L.Block(tuple(out))


class _Restrict(L.StmtMutator):
    """Every `j` loop starts at `lo` (the remainder after the full tiles)."""

    def __init__(self, j: str, lo: L.Expr) -> None:
        self.j = j
        self.lo = lo

    def mutate_For(self, node: L.For) -> L.Stmt:
        if node.var == self.j:
            return dataclasses.replace(node, lo=self.lo)
        return self.generic_mutate(node)


def _fresh(base: str, node: L.Node) -> str:
    """`base`, or `base` with a number, unused in `node` (which reads every variable
    bound around it that could clash)."""
    taken: set[str] = set()
    for n in L.walk(node):
        if isinstance(n, L.VarRef):
            taken.add(n.name)
        elif isinstance(n, (L.For, L.Let, L.Local, L.Assign)):
            taken.add(n.var)
    name, k = base, 1
    while name in taken:
        name, k = f"{base}{k}", k + 1
    return name


def _reads(node: L.Node, var: str, buffer: str) -> bool:
    return (isinstance(node, L.VarRef) and node.name == var) or (
        isinstance(node, L.Load) and node.buffer.name == buffer
    )


def _above(root: L.Expr, hit: Callable[[L.Node], bool]) -> set[int]:
    """The ids of the nodes of `root` that are, or hold below them, a node `hit` accepts."""
    found: set[int] = set()

    def visit(node: L.Node) -> bool:
        below = [visit(c) for c in L.children(node)]
        if hit(node) or any(below):
            found.add(id(node))
            return True
        return False

    visit(root)
    return found


class _LaneOf(L.Mutator):
    """One lane of a tile's statement: `var` read as `at`, the output's read as `acc`,
    descending only into the `touched` nodes (the others are the lane's as they are)."""

    def __init__(self, touched: set[int], var: str, at: L.Expr, buffer: str, acc: L.VarRef):
        self.touched = touched
        self.var = var
        self.at = at
        self.buffer = buffer
        self.acc = acc

    def mutate(self, node: Any) -> Any:
        return super().mutate(node) if id(node) in self.touched else node

    def mutate_VarRef(self, node: L.VarRef) -> L.Expr:
        return self.at if node.name == self.var else node

    def mutate_Load(self, node: L.Load) -> L.Expr:
        return self.acc if node.buffer.name == self.buffer else self.generic_mutate(node)


def _lane(name: str, lane: int) -> str:
    return f"{name}_{lane}"


def _at(index: tuple[L.Expr, ...], j: str, lane: int, base: str) -> tuple[L.Expr, ...]:
    return tuple(_shift(e, j, lane, base) for e in index)


def _shift(e: L.Expr, var: str, offset: int, base: str) -> L.Expr:
    """`e` with `var` read as `base + offset`."""
    if offset == 0 and base == var:
        return e
    return _Shift(var, _lane_at(base, offset)).mutate(e)


def _lane_at(base: str, lane: int) -> L.Expr:
    """Where lane `lane` reads the tile variable: `base + lane`."""
    at = L.VarRef(base)
    return L.Bin(L.BinOp.ADD, at, const(lane, I64)) if lane else at


class _Shift(L.Mutator):
    def __init__(self, var: str, shifted: L.Expr) -> None:
        self.var = var
        self.shifted = shifted

    def mutate_VarRef(self, node: L.VarRef) -> L.Expr:
        return self.shifted if node.name == self.var else node


def _loads_of(e: L.Expr, buffer: str) -> list[tuple[L.Expr, ...]]:
    return [n.index for n in L.walk(e) if isinstance(n, L.Load) and n.buffer.name == buffer]


__all__ = ["register_tile"]
