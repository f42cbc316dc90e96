"""Packing of register tiles: a tile's strided read is copied once into a contiguous
panel that every row block of the tile loop then reads. A pure `Stmt -> Stmt` transform.

Requires: the lowered loops of one register-tiled statement (`cpu.regtile`) whose
reduction is one loop `k`: serial loops over the block variable `m` (unroll-and-jam's
row blocks, a remainder loop of single rows beside them), each with a body that starts
with the full-tile loop over `j` (step `width`, bounds not depending on `m`), whose body
is the tile's locals around the `k` loop of lane updates (`acc = acc + e`) and the
stores. A read `X[r, j + c]` of the lane updates is packed when its other subscripts
`r` use `k` and no variable bound inside the row loops but `k`, and `j` only in its
last subscript, with coefficient 1 (matmul's `B[k, n + c]`).
Ensures:  `pack_tiles(stmt, m, j, k, width)` computes the same values in the same
order per output element (only where reads come from changes), with the tile loop
moved above the row loops:

    for m in blocks:                           alloc X.pack[k_hi - k_lo, width]
      for j in tiles step width:                 for j in tiles step width
        <tile: for k / lanes read X[r, j + c]>     for k / for l: X.pack[k - k_lo, l] = X[r, j + c0 + l]
      <remainder of j>                 ==>         for m in blocks
    for m in rows                                    <tile: lanes read X.pack[k - k_lo, c - c0]>
      ...                                          for m in rows
                                                     <tile ...>
                                                 for m in blocks
                                                   <remainder of j>
                                                 for m in rows ...

When the row loops are cache tiles under a parallel tile loop `p` with the reduction's
tile loop `k_t` inside (`cpu.tiling`), the panels are shared by the threads:

    parallel for p                             alloc X.pack
      alloc X.pack                               for k_t
        for k_t                        ==>         parallel for k: <copy of the panel>
          <copy of the panel>                      parallel for p
          <row tiles of p>                           <row tiles of p>

Each panel is then copied once (its rows split across the threads) instead of once per
row tile, and every row tile reads it (measured, 2 threads, AVX-512, float32 matmul
1024^3 against NumPy, medians: 1.41x -> 1.18x with 8-row tiles; each thread copied the whole
panel for each of its 128-row tiles before). The threads then split the pairs (row
tile, panel column), not the row tiles alone (`_spread`): `parallel for t: let p = t /
tiles, j = lo + (t % tiles) * width: <row blocks>`, the remainder columns in a second
parallel loop over `p`. A matrix of 128 rows or fewer is one row tile, which one
thread ran while the other waited (measured, 2 threads, same process, medians, float32
A B: 128x512x256 0.52 -> 0.33 ms, 64x256x1024 0.41 -> 0.30; 512^3 and 1024^3 within
noise). Legal: each element still receives its
contributions in `k_t, k` order, and a panel is complete before any thread reads it
(the parallel copy loop ends before the row tiles start).

Transposed panels: a read that uses `j` as `j + c` in another subscript than the last,
and only `k` besides (`B[n + c, k]` of `C(m, n) +=! A(m, k) * B(n, k)`: every linear
layer's forward, matmul's `A_grad`; `cpu_model.transposed_panels` picks this order), is
packed the same way, its copy run `for tile / for k / vector for lane`, gathering a
column of `B` into each panel row, vectorised (`_Packer._copy`; `cpu.transpose` leaves
such reads to this pass instead of copying all of `B` first). Measured, 1 thread, same
process, medians, float32 `A B^T` (M x K x N), dot tile / transposed panels / NumPy:
512^3 3.37 / 2.05 / 1.86 ms; 1024^3 27.9 / 17.5 / 14.8; 128x512x256 0.50 / 0.41 /
0.40; but 64x256x1024 0.65 / 0.85 / 0.63, 32x512x512 0.21 / 0.35 / 0.31: with few rows
each copied element is read too few times, so the dot tile runs below 256 rows or
64 columns (`cpu.alternatives.RowsCheck`, with its measurements; with 2 threads, 128x512x256
ran 0.29 ms as a dot tile and 0.33 in panels, whose copies add parallel regions). A
batched product (`K[b, j + c, e]`) is packed the same way, inside its batch loop.

Row panels (`_row_panels`): in the row blocks (step `rows`), a read that uses the block
variable as `m + c` in one subscript and `k` in another but not the last (`A[k, m + c]`
of `C(m, n) +=! A(k, m) * B(k, n)`, every weight gradient `W_grad(o, i) +=! Y_grad(n,
o) * X(n, i)`) lies a row of `X` apart for every `k`: 256 steps, 256 cache lines, at a
power-of-two row length all in one L1 set. Each thread copies its row tile's values
once per reduction tile into `X.rows[b, k - k_lo, c]` (block `b`, contiguous along
`k`), allocated inside its parallel iteration; the single remainder rows read `X`.

Why: without packing each lane vector of `X` read along `k` lies a row of `X` apart
(4 KiB for a 1024-wide float32 matrix), so the tile's `k` steps map to the same few L1
sets and miss; packed, the panel is `width` floats per `k`, contiguous, stays in L1
across every row block of the tile (BLIS's packed micro-panel; Goto and van de Geijn,
"Anatomy of high-performance matrix multiplication", 2008), and is copied once per row
tile instead of read strided once per row block. Legal: every row loop and tile loop
iteration writes its own output elements and reads only inputs (memory form), so the
loops may be interchanged and split; each element's `k` order is unchanged.
Anything that does not match is returned unchanged.
"""

from __future__ import annotations

import dataclasses

from compiler import loops as L
from compiler.loops.ir import walk, walk_stmts
from compiler.poly.lower_expr import I64, const


def pack_tiles(
    stmt: L.Stmt,
    m: str,
    j: str,
    k: str,
    width: int,
    sizes: frozenset[str],
    rows: int | None = None,
) -> L.Stmt:
    """`stmt` with its register tiles' strided reads packed (module doc). `sizes`: the
    size parameters; `rows`: the cache tile of `k` (at most that many `k` per panel),
    None when `k` is not tiled."""
    packer = _Packer(m, j, k, width, sizes, rows)
    out = packer.mutate(stmt)
    return _hoist(out, packer.hoisted) if packer.hoisted else out


def _share(stmt: L.Stmt, buffers: list[L.Buffer]) -> L.Stmt | None:
    """`parallel for p: for k_t: {copies; rest}` as `alloc panels: for k_t: {parallel
    copies; parallel for p: rest}` (module doc), or None when `stmt` has another shape,
    or the copies or `k_t`'s bounds use `p`."""
    if not (isinstance(stmt, L.For) and stmt.kind is L.LoopKind.PARALLEL):
        return None
    outer = stmt.body
    if not (isinstance(outer, L.For) and outer.kind is L.LoopKind.SERIAL):
        return None
    if stmt.var in L.var_names(outer.lo, outer.hi) or not isinstance(outer.body, L.Block):
        return None
    names = {b.name for b in buffers}
    flat = _flatten(outer.body)
    copies = [s for s in flat if _stores_to(s, names)]
    rest = [s for s in flat if not _stores_to(s, names)]
    if not copies or any(stmt.var in _used(c) for c in copies):
        return None
    # a copy's outer loop (over `k`) writes its own panel rows: the threads share it
    copies = [
        dataclasses.replace(c, kind=L.LoopKind.PARALLEL) if isinstance(c, L.For) else c
        for c in copies
    ]
    rows = _spread(dataclasses.replace(stmt, body=L.Block(tuple(rest))))
    return _allocs(dataclasses.replace(outer, body=L.Block((*copies, *rows))), buffers)


def _spread(loop: L.For) -> tuple[L.Stmt, ...]:
    """`parallel for p: {for j (step w): tile; rest}` as `parallel for t: tile` over
    the pairs `(p, j)` followed by `parallel for p: rest` when `j`'s bounds do not use
    `p` (module doc); else `(loop,)`."""
    stmts = _flatten(loop.body)
    tiles = stmts[0] if stmts else None
    if loop.step != 1 or not (isinstance(tiles, L.For) and tiles.kind is L.LoopKind.SERIAL):
        return (loop,)
    if loop.var in L.var_names(tiles.lo, tiles.hi):
        return (loop,)
    width = const(tiles.step, I64)
    span = L.Bin(L.BinOp.SUB, tiles.hi, tiles.lo)
    rounded = L.Bin(L.BinOp.ADD, span, const(tiles.step - 1, I64))
    trips = L.Max(const(0, I64), L.FloorDiv(rounded, width))
    pairs = L.Bin(L.BinOp.MUL, L.Bin(L.BinOp.SUB, loop.hi, loop.lo), trips)
    t = _fresh("pair", loop)
    at = L.VarRef(t)
    first = L.Bin(L.BinOp.ADD, loop.lo, L.FloorDiv(at, trips))
    column = L.Bin(L.BinOp.ADD, tiles.lo, L.Bin(L.BinOp.MUL, L.Mod(at, trips), width))
    body = L.Let(loop.var, first, L.Let(tiles.var, column, tiles.body))
    spread = L.For(t, const(0, I64), pairs, 1, body, L.LoopKind.PARALLEL)
    if len(stmts) == 1:
        return (spread,)
    return (spread, dataclasses.replace(loop, body=L.Block(tuple(stmts[1:]))))


def _flatten(s: L.Stmt) -> list[L.Stmt]:
    return [t for c in s.stmts for t in _flatten(c)] if isinstance(s, L.Block) else [s]


def _stores_to(s: L.Stmt, names: set[str]) -> bool:
    return any(isinstance(n, L.Store) and n.buffer.name in names for n in walk_stmts(s))


def _used(s: L.Stmt) -> set[str]:
    return {n.name for n in walk(s) if isinstance(n, L.VarRef)}


@dataclasses.dataclass(frozen=True)
class _Panel:
    source: L.Buffer
    position: int  # the subscript `j + c` (the last, or another: a transposed panel)
    row: tuple[L.Expr, ...]  # the other subscripts, with `k` free
    base: int  # the smallest lane offset `c0` of the reads
    buffer: L.Buffer


class _Packer(L.StmtMutator):
    def __init__(
        self, m: str, j: str, k: str, width: int, sizes: frozenset[str], rows: int | None
    ) -> None:
        self.m, self.j, self.k, self.width, self.rows = m, j, k, width, rows
        self.sizes = sizes
        self.buffers: dict[str, L.Buffer] = {}  # the packed reads' sources, by name
        self.hoisted: list[L.Buffer] = []  # panels whose shape needs no loop variable
        self.count = 0

    def mutate_Block(self, node: L.Block) -> L.Stmt:
        stmts = tuple(self.mutate(s) for s in node.stmts)
        rows = [i for i, s in enumerate(stmts) if self._row_loop(s)]
        if not rows or rows != list(range(rows[0], rows[-1] + 1)):
            return L.Block(stmts)
        group = [stmts[i] for i in rows]
        packed = self._pack(group)  # type: ignore[arg-type]
        if packed is None:
            return L.Block(stmts)
        return L.Block((*stmts[: rows[0]], packed, *stmts[rows[-1] + 1 :]))

    def mutate_For(self, node: L.For) -> L.Stmt:
        body = self.mutate(node.body)
        if self._row_loop(body):
            packed = self._pack([body])  # type: ignore[list-item]
            body = body if packed is None else packed
        return dataclasses.replace(node, body=body)

    def _row_loop(self, s: L.Stmt) -> bool:
        if not (isinstance(s, L.For) and s.var == self.m and s.kind is L.LoopKind.SERIAL):
            return False
        first = s.body.stmts[0] if isinstance(s.body, L.Block) else s.body
        return isinstance(first, L.For) and first.var == self.j and first.step == self.width

    def _pack(self, group: list[L.For]) -> L.Stmt | None:
        tiles: list[L.For] = [_first(r.body) for r in group]  # type: ignore[misc]
        bounds = {(t.lo, t.hi) for t in tiles}
        if len(bounds) != 1 or L.var_names(*next(iter(bounds))) & {self.m}:
            return None
        spans = set()
        found: dict[tuple[str, int, tuple[L.Expr, ...]], list[int]] = {}
        for t in tiles:
            reads = self._tile_reads(t.body)
            if reads is None:
                return None
            spans.add(reads[0])
            for key, offsets in reads[1].items():
                found.setdefault(key, []).extend(offsets)
        if len(spans) != 1:
            return None
        ((lo, hi),) = spans
        tile_lo, tile_hi = tiles[0].lo, tiles[0].hi
        count = L.FloorDiv(L.Bin(L.BinOp.SUB, tile_hi, tile_lo), const(self.width, I64))
        depth: L.Expr = L.Bin(L.BinOp.SUB, hi, lo)
        if self.rows is not None:
            depth = const(self.rows, I64)
        panels: list[_Panel] = []
        for (name, position, row), offsets in found.items():
            base = min(offsets)
            if max(offsets) - base >= self.width:
                continue
            source = self.buffers[name]
            self.count += 1
            shape = (count, depth, const(self.width, I64))
            buffer = L.Buffer(f"{name}.pack{self.count}", source.dtype, shape, L.Role.TEMP)
            panels.append(_Panel(source, position, row, base, buffer))
        if not panels:
            return None
        lane = _fresh(f"{self.j}_lane", tiles[0])
        tile = _fresh(f"{self.j}_tile", tiles[0])
        copies = [self._copy(p, lo, hi, tile_lo, count, tile, lane) for p in panels]
        at_tile = L.FloorDiv(L.Bin(L.BinOp.SUB, L.VarRef(self.j), tile_lo), const(self.width, I64))
        reads = _Reads(panels, self.j, self.k, lo, at_tile)
        rows = [
            dataclasses.replace(r, body=reads.mutate(t.body))
            for r, t in zip(group, tiles, strict=True)
        ]
        packed: L.Stmt = dataclasses.replace(tiles[0], body=L.Block(tuple(rows)))
        packed = self._row_panels(packed, rows[0], lo, hi, depth)
        rests = []
        for r in group:
            rest = r.body.stmts[1:] if isinstance(r.body, L.Block) else ()
            if rest:
                rests.append(dataclasses.replace(r, body=L.Block(tuple(rest))))
        out: L.Stmt = L.Block((*copies, packed, *rests))
        for p in reversed(panels):
            if L.var_names(*p.buffer.shape) - self.sizes:
                out = L.Alloc(p.buffer, out)  # its shape needs the loops around it
            else:
                self.hoisted.append(p.buffer)
        return out

    def _row_panels(
        self, tiles: L.For, blocks: L.For, lo: L.Expr, hi: L.Expr, depth: L.Expr
    ) -> L.Stmt:
        """`tiles` with the reads of the row blocks `blocks` that lie a row apart for
        every `k` (`X[k, m + c]`: `k` not in the last subscript, `m` in one with an
        offset `c` below the block) read from a row panel `X.rows[b, k - lo, c]` that
        the thread copies once per tile, before the tiles (module doc)."""
        if blocks.step <= 1:
            return tiles
        found: dict[tuple[str, int, tuple[L.Expr, ...]], list[int]] = {}
        # each distinct read once, in order (a tile repeats its reads across lanes)
        loads = dict.fromkeys(n for n in walk(blocks.body) if isinstance(n, L.Load))
        for load in loads:
            at = [p for p, e in enumerate(load.index) if self.m in L.var_names(e)]
            if len(at) != 1:
                continue
            p = at[0]
            others = load.index[:p] + load.index[p + 1 :]
            used = L.var_names(*others)
            offset = _lane_offset(load.index[p], self.m)
            if offset is None or self.k not in used or used - {self.k} - self.sizes:
                continue
            if self.k in L.var_names(load.index[-1]) or self.j in used:
                continue  # contiguous along k already, or moving with the lanes
            self.buffers[load.buffer.name] = load.buffer
            found.setdefault((load.buffer.name, p, others), []).append(offset)
        count = L.FloorDiv(L.Bin(L.BinOp.SUB, blocks.hi, blocks.lo), const(blocks.step, I64))
        block = _fresh(f"{self.m}_block", tiles)
        lane = _fresh(f"{self.m}_lane", tiles)
        panels: dict[tuple[str, int, tuple[L.Expr, ...]], L.Buffer] = {}
        fills: list[L.Stmt] = []
        for (name, p, others), offsets in found.items():
            if min(offsets) < 0 or max(offsets) >= blocks.step:
                continue
            self.count += 1
            source = self.buffers[name]
            shape = (count, depth, const(blocks.step, I64))
            buffer = L.Buffer(f"{name}.rows{self.count}", source.dtype, shape, L.Role.TEMP)
            panels[(name, p, others)] = buffer
            start = L.Bin(L.BinOp.MUL, L.VarRef(block), const(blocks.step, I64))
            row = L.Bin(L.BinOp.ADD, L.Bin(L.BinOp.ADD, blocks.lo, start), L.VarRef(lane))
            value = L.Load(source, (*others[:p], row, *others[p:]))
            at = (L.VarRef(block), L.Bin(L.BinOp.SUB, L.VarRef(self.k), lo), L.VarRef(lane))
            # the source's rows in order: `k` outside when `m` is its last subscript
            loops = [(self.k, lo, hi), (block, const(0, I64), count)]
            loops.append((lane, const(0, I64), const(blocks.step, I64)))
            if p != len(source.shape) - 1:
                loops = [loops[1], loops[2], loops[0]]
            fill: L.Stmt = L.Store(buffer, at, value)
            for var, a, b in reversed(loops):
                fill = L.For(var, a, b, 1, fill)
            fills.append(fill)
        if not panels:
            return tiles
        body: L.Stmt = L.Block(
            (*fills, _RowReads(panels, self.m, blocks, self.k, lo).mutate(tiles))
        )
        for buffer in reversed(panels.values()):
            body = L.Alloc(buffer, body)
        return body

    def _tile_reads(
        self, body: L.Stmt
    ) -> tuple[tuple[L.Expr, L.Expr], dict[tuple[str, int, tuple[L.Expr, ...]], list[int]]] | None:
        """The `k` loop's bounds and the packable reads of a tile's body (its locals
        around `Block(for k {assigns}, stores)`), or None when it has another shape."""
        inner: set[str] = set()
        while isinstance(body, L.Local):
            inner.add(body.var)
            body = body.body
        if not inner or not isinstance(body, L.Block) or not body.stmts:
            return None
        loop = body.stmts[0]
        if not (isinstance(loop, L.For) and loop.var == self.k and loop.step == 1):
            return None
        if any(not isinstance(s, L.Store) for s in body.stmts[1:]):
            return None
        updates = loop.body.stmts if isinstance(loop.body, L.Block) else (loop.body,)
        if any(not isinstance(s, L.Assign) for s in updates):
            return None
        if L.var_names(loop.lo, loop.hi) & {self.m, self.j}:
            return None
        reads: dict[tuple[str, int, tuple[L.Expr, ...]], list[int]] = {}
        loads = dict.fromkeys(x for s in updates for x in _loads(s.value))  # type: ignore[attr-defined]
        for load in loads:
            key = _lane_key(load, self.j)
            if key is None:
                continue
            _, p, row = key
            used = L.var_names(*row)
            if self.k not in used or used & {self.m, self.j} or used & inner:
                continue
            offset = _lane_offset(load.index[p], self.j)
            if offset is None:
                continue
            self.buffers[load.buffer.name] = load.buffer
            reads.setdefault(key, []).append(offset)
        return (loop.lo, loop.hi), reads

    def _copy(
        self,
        p: _Panel,
        lo: L.Expr,
        hi: L.Expr,
        tile_lo: L.Expr,
        count: L.Expr,
        tile: str,
        lane: str,
    ) -> L.Stmt:
        """`for k / for tile / for lane: X.pack[tile, k - lo, lane] = X[r, j + c0 + lane]`
        with `j` the tile's first column: each row of `X` is read in order. A transposed
        panel (`X[j + c0 + lane, r]`) is copied `for tile / for k / vector for lane`:
        each `k` gathers a column of `width` rows into one contiguous panel row, and the
        lane loop's VECTOR kind has the copy's part compiled at O3 like a computation
        (`llvm_parallel.moves_only`). Before, it ran `for tile / for lane / for k` at O1
        (each row read in order, each element stored a panel row apart). The copy is
        still the dearest part of matmul's `A_grad` after its tiles: perf, 2 threads,
        512^3, share of the kernel's CPU time 13.0-13.5% before, 11.4% after (blocking
        the old order by 16 or 32 columns: 11.2%, 9.9%); wall-time ratios to torch moved
        within the machine's noise (paired rounds: 1.27 -> 1.16, 1.24 -> 1.20, 1.27 ->
        1.26). A register transpose (16x16 blocks of shuffles) would be the next step."""
        first = L.Bin(L.BinOp.MUL, L.VarRef(tile), const(self.width, I64))
        column = L.Bin(L.BinOp.ADD, L.Bin(L.BinOp.ADD, tile_lo, first), const(p.base, I64))
        index = (*p.row[: p.position], L.Bin(L.BinOp.ADD, column, L.VarRef(lane)))
        value = L.Load(p.source, (*index, *p.row[p.position :]))
        at = (L.VarRef(tile), L.Bin(L.BinOp.SUB, L.VarRef(self.k), lo), L.VarRef(lane))
        store = L.Store(p.buffer, at, value)
        width = const(self.width, I64)
        serial = L.LoopKind.SERIAL
        loops = [
            (self.k, lo, hi, serial),
            (tile, const(0, I64), count, serial),
            (lane, const(0, I64), width, serial),
        ]
        if p.position != len(p.source.shape) - 1:  # transposed
            loops = [loops[1], loops[0], (lane, const(0, I64), width, L.LoopKind.VECTOR)]
        out: L.Stmt = store
        for var, a, b, kind in reversed(loops):
            out = L.For(var, a, b, 1, out, kind)
        return out


def _hoist(stmt: L.Stmt, buffers: list[L.Buffer]) -> L.Stmt:
    """`stmt` with `buffers` allocated once: shared by the threads around a parallel
    loop's reduction tiles (`_share`), else in the body of each parallel loop (one per
    thread's iteration), or around the whole nest when it runs serially."""
    if isinstance(stmt, L.For) and stmt.kind is L.LoopKind.PARALLEL:
        shared = _share(stmt, buffers)
        return shared or dataclasses.replace(stmt, body=_allocs(stmt.body, buffers))
    if isinstance(stmt, L.Alloc) and _parallel(stmt.body):  # cpu.transpose's copies
        return dataclasses.replace(stmt, body=_hoist(stmt.body, buffers))
    if isinstance(stmt, L.Block) and any(_parallel(s) for s in stmt.stmts):
        return L.Block(tuple(_hoist(s, buffers) if _uses(s, buffers) else s for s in stmt.stmts))
    return _allocs(stmt, buffers)


def _allocs(stmt: L.Stmt, buffers: list[L.Buffer]) -> L.Stmt:
    for b in reversed(buffers):
        stmt = L.Alloc(b, stmt)
    return stmt


def _parallel(s: L.Stmt) -> bool:
    return any(isinstance(n, L.For) and n.kind is L.LoopKind.PARALLEL for n in walk_stmts(s))


def _uses(s: L.Stmt, buffers: list[L.Buffer]) -> bool:
    names = {b.name for b in buffers}
    return any(isinstance(n, (L.Load, L.Store)) and n.buffer.name in names for n in walk(s))


def _first(s: L.Stmt) -> L.Stmt:
    return s.stmts[0] if isinstance(s, L.Block) else s


class _Reads(L.Mutator):
    """Packed reads `X[r, j + c]` become `X.pack[tile, k - lo, c - c0]`."""

    def __init__(self, panels: list[_Panel], j: str, k: str, lo: L.Expr, tile: L.Expr) -> None:
        self.panels = {(p.source.name, p.position, p.row): p for p in panels}
        self.j, self.k, self.lo, self.tile = j, k, lo, tile

    def mutate_Load(self, node: L.Load) -> L.Expr:
        key = _lane_key(node, self.j)
        p = self.panels.get(key) if key is not None else None
        offset = None if p is None else _lane_offset(node.index[p.position], self.j)
        if p is None or offset is None:
            return self.generic_mutate(node)
        step = L.Bin(L.BinOp.SUB, L.VarRef(self.k), self.lo)
        return L.Load(p.buffer, (self.tile, step, const(offset - p.base, I64)))


class _RowReads(L.Mutator):
    """In the row blocks `blocks` only: `X[.., m + c, ..]` (the `m` subscript at `p`,
    the others `others`, a key of `panels`) becomes `X.rows[(m - lo_m) / step, k - lo, c]`."""

    def __init__(
        self,
        panels: dict[tuple[str, int, tuple[L.Expr, ...]], L.Buffer],
        m: str,
        blocks: L.For,
        k: str,
        lo: L.Expr,
    ) -> None:
        self.panels = panels
        self.m, self.blocks, self.k, self.lo = m, blocks, k, lo
        self.positions = {p for _, p, _ in panels}
        self.inside = False

    def mutate_For(self, node: L.For) -> L.Stmt:
        if node is not self.blocks:
            return self.generic_mutate(node)
        self.inside = True
        try:
            return self.generic_mutate(node)
        finally:
            self.inside = False

    def mutate_Load(self, node: L.Load) -> L.Expr:
        if self.inside:
            index = node.index
            for p in self.positions:
                offset = _lane_offset(index[p], self.m) if p < len(index) else None
                buffer = self.panels.get((node.buffer.name, p, index[:p] + index[p + 1 :]))
                if offset is not None and buffer is not None:
                    step = const(self.blocks.step, I64)
                    block = L.FloorDiv(L.Bin(L.BinOp.SUB, L.VarRef(self.m), self.blocks.lo), step)
                    at = (block, L.Bin(L.BinOp.SUB, L.VarRef(self.k), self.lo), const(offset, I64))
                    return L.Load(buffer, at)
        return self.generic_mutate(node)


def _lane_key(load: L.Load, j: str) -> tuple[str, int, tuple[L.Expr, ...]] | None:
    """`(buffer, position, other subscripts)` of a read that uses `j` in exactly one
    subscript (at `position`), None otherwise: how panels are keyed."""
    at = [p for p, e in enumerate(load.index) if j in L.var_names(e)]
    if len(at) != 1:
        return None
    p = at[0]
    return load.buffer.name, p, load.index[:p] + load.index[p + 1 :]


def _lane_offset(e: L.Expr, j: str) -> int | None:
    """`c` when `e` is `j + c` for an integer constant `c` (in any nesting of + and -)."""
    if L.var_names(e) != {j}:
        return None
    at0, at1 = _fold(e, j, 0), _fold(e, j, 1)
    if at0 is None or at1 is None or at1 - at0 != 1:
        return None
    return at0


def _fold(e: L.Expr, j: str, value: int) -> int | None:
    if isinstance(e, L.VarRef):
        return value if e.name == j else None
    if isinstance(e, L.Const) and isinstance(e.value, int) and not isinstance(e.value, bool):
        return e.value
    if isinstance(e, L.Bin) and e.op in (L.BinOp.ADD, L.BinOp.SUB, L.BinOp.MUL):
        a, b = _fold(e.a, j, value), _fold(e.b, j, value)
        if a is None or b is None:
            return None
        return a + b if e.op is L.BinOp.ADD else a - b if e.op is L.BinOp.SUB else a * b
    return None


def _loads(e: L.Expr) -> list[L.Load]:
    return [n for n in walk(e) if isinstance(n, L.Load)]


def _fresh(base: str, scope: L.Stmt) -> str:
    taken = {n.var for n in walk_stmts(scope) if isinstance(n, (L.For, L.Let, L.Local))}
    name, k = base, 0
    while name in taken:
        k += 1
        name = f"{base}{k}"
    return name


__all__ = ["pack_tiles"]
