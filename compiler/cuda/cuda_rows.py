"""Row fusion: consecutive phases over the same rows run as one kernel, a warp a row.

Requires: the phases of `cuda.gpu_lower` (top-level nests in execution order; the
chain of PARALLEL loops at a phase's root is its band, whose iterations are
independent) and the sizes' names.
Ensures:  `plan_rows(phases, sizes, error, taken)` lists the phases' indices in a
valid execution order, with `RowGroup`s in place of the runs of phases it fuses.
A group's `body` is a mapped kernel body (GPU_BLOCK row loop, GPU_THREAD lane loop
of `LANES` iterations, one warp a block) that runs every phase of the group for each
row, phase after phase, the phases' *sections* separated by `WarpSync`
(`__syncwarp()`), so that all of a warp's lanes see what the section before wrote:

    for n in rows (gpu_block y) { for lane in 0:32 (gpu_thread x) {
      <section of phase 0>  __syncwarp()  <section of phase 1>  ...  } }

A phase joins a group when its band's first loop (the *row* loop) has the group's
bounds (sizes only), and every access, in any phase of the group, to a buffer that a
phase of the group writes has the row variable as its first subscript: rows are then
independent, so running the phases row by row (rows in any order) computes what
running them one after the other does. Its section, for the row `n` (the phase's row
variable bound to the group's):

- a band of more loops than the row over a body without loops (elementwise; a
  contraction's band is left to its own kernels, thread tiles and warp reductions,
  `cuda.cuda_map`): their iterations spread over the lanes (lane
  `l` runs iterations `l, l + 32, ...` of the inner band, collapsed into one index
  when its loops' bounds do not depend on each other), neighbouring lanes writing
  neighbouring elements;
- a row reduction (the band is the row alone, over a reduction nest
  `cuda.cuda_warp` can split): the warp reduction's lanes (each lane a strided part,
  `WarpReduce` combining them in lane 0), lane 0 then storing the result;
- a row's scalar statements (no loop below the row): lane 0 only.

A *column sum* (`for d { local acc = init { for r { acc = acc op e } rest } }`, `r`
over the group's rows, `e` without loops, float) that is independent of the group's
phases (it touches nothing they write, they touch nothing it writes) and reads
something they read is fused too, just before the group or among its phases (a
layer-norm gradient's `gamma_grad`, `beta_grad`): it saves a second pass over the
rows' data. The kernel is then a block of `ROW_WARPS` warps, warp `w` of block `b`
owning row `lo + b * ROW_WARPS + w` (its sections under `row < hi`), and after the
sections each column sum sweeps its columns 32 at a time in shared memory, a partial a
block, which a second pass per sum adds in block order (`cuda.cuda_columns`). In the
emulation such a kernel runs on fibers (`cuda.cuda_fibers`), as on a GPU.

Any other phase that cannot join a group but touches nothing the group's phases write
and writes nothing they access is moved before the group; any other phase ends the
group.

The host runs the fused kernel only where rows give enough warps for the work
(`RowGroup.when`: `32 * rows >= min(rows * work_per_row / LANE_WORK, FILL_THREADS)`)
and the phases' own kernels elsewhere (few long rows: split reductions pay there).
In the CUDA emulation a warp's lanes run section by section (`cuda.cuda` emits the
lane loop as one loop per section there, lanes 31 down to 0, as the warp reduction's
emulation needs).

Worked example, softmax (4 phases over `n`): one kernel, `grid = (1, N, 1)`, 32 threads:

    for n { for lane in 0:32 {
      local part = -inf { for d in lane:D step 32 { part = max(part, X[n, d]) }
        part = warp_max(part); if (lane == 0) { rowmax[n] = max(-inf, part) } }
      __syncwarp()
      for d in lane:D step 32 { shifted[n, d] = exp(X[n, d] - rowmax[n]) }
      __syncwarp()
      ... rowsum[n] (a warp sum) ...  __syncwarp()
      for d in lane:D step 32 { Y[n, d] = shifted[n, d] / rowsum[n] } } }
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from compiler import loops as L
from compiler.cuda.cuda_columns import (
    ROW_WARPS,
    Column,
    ColumnPass,
    Names,
    accesses,
    column_of,
    sweeps,
)
from compiler.cuda.cuda_nodes import PosDiv, PosMod, SharedArray
from compiler.cuda.cuda_tile import extent, fresh
from compiler.cuda.cuda_warp import LANES, warp_reduce
from compiler.loops.ir import var_names, walk

I64 = L.DType.INT64
LANE_WORK = 64  # iterations of a row's phase a lane may run before the rows are too few
FILL_THREADS = 65536  # threads enough to fill the GPU (H200: 132 SMs x 512)


@dataclass(frozen=True, slots=True)
class WarpSync(L.Stmt):
    """`__syncwarp()`: a warp's lanes wait for each other; their writes before it are
    visible to each other after it."""


@dataclass(frozen=True)
class RowGroup:
    phases: tuple[int, ...]  # the fused phases, in execution order
    body: L.Stmt  # the fused kernel's body (module doc)
    row: str  # the GPU_BLOCK loop's variable (grid y): the row, or the block of rows
    rows: L.Expr  # that loop's extent (sizes only)
    when: L.Expr  # > 0: run the fused kernel (sizes only)
    columns: tuple[ColumnPass, ...] = ()  # fused column sums (their second passes)
    block: int = LANES  # the fused kernel's threads a block


@dataclass(frozen=True)
class _Phase:
    index: int
    loop: L.For  # the row loop
    reads: frozenset[str]
    writes: frozenset[str]
    work: L.Expr  # iterations per row (sizes only)


def plan_rows(
    phases: tuple[L.Stmt, ...], sizes: set[str], error: str | None, taken: set[str]
) -> list[int | RowGroup]:
    """The phases in execution order, runs of fusable phases as `RowGroup`s."""
    plan: list[int | RowGroup] = []
    group: list[_Phase] = []
    hoisted: list[int] = []  # phases moved before the current group
    columns: list[Column] = []  # column sums met inside the group, to fuse
    waiting: list[Column] = []  # column sums just before the group (fused if apart)

    def flush() -> None:
        fused = [c for c in waiting if group and _fits(group, c)]
        plan.extend(c.index for c in waiting if c not in fused)  # they ran first
        plan.extend(hoisted)
        fused += columns
        if group and fused:
            plan.append(_fuse_columns(group, fused, error, taken))
        elif len(group) > 1:
            plan.append(_fuse(group, phases, error, taken))
        else:
            plan.extend(p.index for p in group)
        for found in (group, hoisted, columns, waiting):
            found.clear()

    for k, phase in enumerate(phases):
        info = _row_phase(k, phase, sizes, error)
        column = column_of(k, phase, sizes, error)
        if group:
            others: list[Column | _Phase] = [*columns, *waiting]
            if info is not None and _joins(group, info, phases, error) and _apart(info, columns):
                group.append(info)
                continue
            if column is not None and _fits(group, column) and _apart(column, others):
                columns.append(column)
                continue
            if _independent(group, phase, error) and _apart(_as_phase(phase, error), others):
                hoisted.append(k)
                continue
            flush()
        if info is not None and _section(info.loop, info.loop.var, "l", error, set(taken)):
            group.append(info)
        elif column is not None:
            waiting.append(column)
        else:
            plan.extend(c.index for c in waiting)
            waiting.clear()
            plan.append(k)
    flush()
    return plan


def _fits(group: list[_Phase], column: Column) -> bool:
    """True when `column` sums over the group's rows, reads something the group reads
    (fusing it saves that traffic) and is independent of every phase of the group."""
    first = group[0].loop
    nest = column.nest
    if (nest.lo, nest.hi) != (first.lo, first.hi) or first.step != 1:
        return False
    if not column.reads & set().union(*(p.reads for p in group)):
        return False
    return _apart(column, group)


def _apart(a: Column | _Phase, others: list[Column] | list[_Phase] | list[Column | _Phase]) -> bool:
    """True when `a` and each of `others` touch no buffer that the other writes."""
    return all(not (a.writes & (b.reads | b.writes)) and not (a.reads & b.writes) for b in others)


def _as_phase(phase: L.Stmt, error: str | None) -> _Phase:
    """Any phase's accesses, for `_apart`."""
    reads, writes = accesses(phase, error)
    dummy = L.For("", L.Const(0, I64), L.Const(0, I64), 1, L.Block(()))
    return _Phase(-1, dummy, frozenset(reads), frozenset(writes), _ONE)


def _row_phase(k: int, phase: L.Stmt, sizes: set[str], error: str | None) -> _Phase | None:
    """The phase's row loop and accesses, where its root is a PARALLEL loop over a
    sizes-only range with a section form."""
    if not (isinstance(phase, L.For) and phase.kind is L.LoopKind.PARALLEL):
        return None
    if not var_names(phase.lo, phase.hi) <= sizes:
        return None
    work = _work(phase.body)
    if work is None or not var_names(work) <= sizes:
        return None
    reads, writes = accesses(phase, error)
    return _Phase(k, phase, frozenset(reads), frozenset(writes), work)


def _joins(
    group: list[_Phase], info: _Phase, phases: tuple[L.Stmt, ...], error: str | None
) -> bool:
    """Same row bounds, and every access to a buffer the group writes is by the row."""
    first = group[0].loop
    if (info.loop.lo, info.loop.hi, info.loop.step) != (first.lo, first.hi, first.step):
        return False
    if _section(info.loop, info.loop.var, "l", error, set()) is None:
        return False
    members = [*group, info]
    written = set().union(*(p.writes for p in members))
    return all(_by_row(phases[p.index], p.loop.var, written, error) for p in members)


def _by_row(phase: L.Stmt, row: str, buffers: set[str], error: str | None) -> bool:
    """True when every load and store of `buffers` in `phase` has `row` first."""
    for n in walk(phase):
        if isinstance(n, (L.Load, L.Store)) and n.buffer.name in buffers:
            if n.buffer.name == error:
                continue
            if not n.index or n.index[0] != L.VarRef(row, I64):
                return False
        if isinstance(n, (L.Let, L.Local, L.For)) and n.var == row and n is not phase:
            return False  # the row variable rebound below: its first subscripts differ
    return True


def _independent(group: list[_Phase], phase: L.Stmt, error: str | None) -> bool:
    """True when `phase` and the group's phases touch no buffer one of them writes."""
    reads, writes = accesses(phase, error)
    touched = set().union(*(p.reads | p.writes for p in group))
    written = set().union(*(p.writes for p in group))
    return not (writes & touched) and not ((reads | writes) & written)


def _work(stmt: L.Stmt) -> L.Expr | None:
    """The iterations of `stmt`'s loops (the longest path: the row's work)."""
    if isinstance(stmt, L.For):
        inner = _work(stmt.body)
        if inner is None:
            return None
        return extent(stmt) if inner == _ONE else L.Bin(L.BinOp.MUL, extent(stmt), inner)
    if isinstance(stmt, L.Block):
        found = [_work(s) for s in stmt.stmts]
        if any(w is None for w in found):
            return None
        return _most(found)  # type: ignore[arg-type]
    if isinstance(stmt, L.If):
        then = _work(stmt.then)
        other = L.Const(1, I64) if stmt.otherwise is None else _work(stmt.otherwise)
        return None if then is None or other is None else _most([then, other])
    if isinstance(stmt, (L.Local, L.Let, L.Alloc)):
        return _work(stmt.body)
    return _ONE


_ONE = L.Const(1, I64)


def _most(values: list[L.Expr]) -> L.Expr:
    """The largest of `values` (1 for none; ones dropped)."""
    kept = list(dict.fromkeys(v for v in values if v != _ONE))
    if not kept:
        return _ONE
    total = kept[0]
    for v in kept[1:]:
        total = L.Max(total, v)
    return total


# ------------------------------------------------------------ the fused kernel


def _fuse(
    group: list[_Phase], phases: tuple[L.Stmt, ...], error: str | None, taken: set[str]
) -> RowGroup:
    first = group[0].loop
    row = first.var
    lane = fresh("tcc_lane", taken)
    stmts = _sections(group, row, lane, error, taken)
    lanes = L.For(lane, L.Const(0, I64), L.Const(LANES, I64), 1, L.Block(stmts),
                  L.LoopKind.GPU_THREAD)  # fmt: skip
    body = dataclasses.replace(first, body=lanes, kind=L.LoopKind.GPU_BLOCK)
    rows = extent(first)
    when = _when(rows, _most([p.work for p in group]))
    return RowGroup(tuple(p.index for p in group), body, row, rows, when)


def _fuse_columns(
    group: list[_Phase], columns: list[Column], error: str | None, taken: set[str]
) -> RowGroup:
    """The row group with column sums (module doc): a block of `ROW_WARPS` warps, warp
    `w` of block `b` running row `lo + b * ROW_WARPS + w`'s sections, then the column
    sums' sweeps (`cuda_columns.sweeps`); their second passes (`RowGroup.columns`)
    combine the blocks' partials."""
    first = group[0].loop
    c = lambda v: L.Const(v, I64)  # noqa: E731
    ref = lambda name: L.VarRef(name, I64)  # noqa: E731
    block, tid, warp, lane = (
        fresh(n, taken) for n in ("tcc_rb", "tcc_tid", "tcc_warp", "tcc_lane")
    )
    names = Names(first.var, block, tid, warp, lane)
    rows = extent(first)
    blocks = L.FloorDiv(L.Bin(L.BinOp.ADD, rows, c(ROW_WARPS - 1)), c(ROW_WARPS))
    in_rows = L.Bin(L.BinOp.LT, ref(first.var), first.hi)
    row_part = L.If(in_rows, L.Block(_sections(group, first.var, lane, error, taken)), None)
    swept, shared, passes = sweeps(columns, names, blocks, in_rows, taken)
    value = L.Bin(L.BinOp.ADD, L.Bin(L.BinOp.MUL, ref(block), c(ROW_WARPS)), ref(warp))
    if not (isinstance(first.lo, L.Const) and first.lo.value == 0):
        value = L.Bin(L.BinOp.ADD, first.lo, value)
    body: L.Stmt = L.Let(first.var, value, L.Block((row_part, *swept)))
    body = L.Let(lane, PosMod(ref(tid), c(LANES)), body)
    body = L.Let(warp, PosDiv(ref(tid), c(LANES)), body)
    for sh in reversed(shared):
        body = SharedArray(sh, body)
    threads = L.For(tid, c(0), c(ROW_WARPS * LANES), 1, body, L.LoopKind.GPU_THREAD)
    kernel = L.For(block, c(0), blocks, 1, threads, L.LoopKind.GPU_BLOCK)
    when = _when(rows, _most([p.work for p in group] + [extent(col.band) for col in columns]))
    order = (*(col.index for col in columns), *(p.index for p in group))
    return RowGroup(order, kernel, block, blocks, when, passes, ROW_WARPS * LANES)


def _sections(
    group: list[_Phase], row: str, lane: str, error: str | None, taken: set[str]
) -> tuple[L.Stmt, ...]:
    """The group's sections for row `row` and lane `lane`, `WarpSync` between them."""
    stmts: list[L.Stmt] = []
    for p in group:
        section = _section(p.loop, row, lane, error, taken)
        assert section is not None
        if stmts:
            stmts.append(WarpSync())
        stmts.append(section)
    return tuple(stmts)


def _when(rows: L.Expr, work: L.Expr) -> L.Expr:
    """> 0 where `rows` give enough warps for `work` iterations a row (module doc)."""
    c = lambda v: L.Const(v, I64)  # noqa: E731
    need = L.FloorDiv(L.Bin(L.BinOp.ADD, L.Bin(L.BinOp.MUL, rows, work), c(LANE_WORK - 1)),
                      c(LANE_WORK))  # fmt: skip
    have = L.Bin(L.BinOp.MUL, rows, c(LANES))
    return L.Bin(L.BinOp.ADD, L.Bin(L.BinOp.SUB, have, L.Min(need, c(FILL_THREADS))), c(1))


def _section(loop: L.For, row: str, lane: str, error: str | None, taken: set[str]) -> L.Stmt | None:
    """The statements one row's lanes run for the phase of row loop `loop` (module
    doc), its row variable bound to `row`; None where the phase has no section form."""
    lane_ref = L.VarRef(lane, I64)
    inner: list[L.For] = []
    body = loop.body
    while isinstance(body, L.For) and body.kind is L.LoopKind.PARALLEL:
        inner.append(body)
        body = body.body
    loops = any(isinstance(n, L.For) for n in walk(body))
    if inner and loops:
        return None  # a contraction's band: its thread tiles and warp variants pay more
    if inner:
        section = _spread(inner, _serial(body), lane_ref, taken)
    elif not loops:
        section = L.If(L.Bin(L.BinOp.EQ, lane_ref, L.Const(0, I64)), _serial(body), None)
    else:
        warp = warp_reduce([loop], error, 2**62, taken)
        if warp is None:
            return None
        lanes = warp.phase.body  # the band's one loop over the lane loop
        assert isinstance(lanes, L.For)
        section = L.Let(lanes.var, lane_ref, _serial(lanes.body))
    if loop.var != row:
        section = L.Let(loop.var, L.VarRef(row, I64), section)
    return section


def _spread(inner: list[L.For], body: L.Stmt, lane: L.Expr, taken: set[str]) -> L.Stmt:
    """The loops `inner` over `body` with lane `lane` running every 32nd iteration:
    collapsed into one index where their bounds do not read each other's variables,
    else the first loop spread and the others serial inside."""
    names = {loop.var for loop in inner}
    if len(inner) > 1 and not any(var_names(p.lo, p.hi) & names for p in inner):
        return _collapsed(inner, body, lane, taken)
    for loop in reversed(inner[1:]):
        body = dataclasses.replace(loop, body=body, kind=L.LoopKind.SERIAL)
    first = inner[0]
    lo = L.Bin(L.BinOp.ADD, first.lo, _scaled(lane, first.step))
    return dataclasses.replace(first, lo=lo, step=first.step * LANES, body=body,
                               kind=L.LoopKind.SERIAL)  # fmt: skip


def _collapsed(inner: list[L.For], body: L.Stmt, lane: L.Expr, taken: set[str]) -> L.Stmt:
    """`for t in lane:prod(extents) step 32`, each loop variable bound from t."""

    t = fresh("tcc_t", taken)
    exts = [fresh(f"tcc_e{k}", taken) for k in range(len(inner))]
    stride: L.Expr | None = None
    for k in reversed(range(len(inner))):
        loop = inner[k]
        q: L.Expr = L.VarRef(t, I64) if stride is None else PosDiv(L.VarRef(t, I64), stride)
        if k > 0:
            q = PosMod(q, L.VarRef(exts[k], I64))
        body = L.Let(loop.var, L.Bin(L.BinOp.ADD, loop.lo, _scaled(q, loop.step)), body)
        size = L.VarRef(exts[k], I64)
        stride = size if stride is None else L.Bin(L.BinOp.MUL, size, stride)
    assert stride is not None
    out: L.Stmt = L.For(t, lane, stride, LANES, body, L.LoopKind.SERIAL)
    for k in reversed(range(len(inner))):
        out = L.Let(exts[k], extent(inner[k]), out)
    return out


def _scaled(e: L.Expr, k: int) -> L.Expr:
    return e if k == 1 else L.Bin(L.BinOp.MUL, e, L.Const(k, I64))


class _SerialLoops(L.Mutator):
    def mutate_For(self, node: L.For) -> L.For:
        new = self.generic_mutate(node)
        if new.kind is L.LoopKind.PARALLEL:
            return dataclasses.replace(new, kind=L.LoopKind.SERIAL)
        return new


def _serial(stmt: L.Stmt) -> L.Stmt:
    return _SerialLoops().mutate(stmt)


def is_lane_loop(loop: L.For) -> bool:
    """True for a fused kernel's lane loop: its body's sections are separated by
    `WarpSync` (what the emulation runs section by section)."""
    body = loop.body
    return (
        loop.kind is L.LoopKind.GPU_THREAD
        and isinstance(body, L.Block)
        and any(isinstance(s, WarpSync) for s in body.stmts)
    )


def sections(loop: L.For) -> list[L.Stmt]:
    """The sections of a lane loop (`is_lane_loop`), in order."""
    assert isinstance(loop.body, L.Block)
    return [s for s in loop.body.stmts if not isinstance(s, WarpSync)]


__all__ = [
    "FILL_THREADS",
    "LANE_WORK",
    "RowGroup",
    "WarpSync",
    "is_lane_loop",
    "plan_rows",
    "sections",
]
