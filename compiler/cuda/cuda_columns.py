"""Column sums in a row group (`cuda.cuda_rows`): the form, and the block's sweeps.

Requires: a phase of `cuda.gpu_lower`; for the sweeps, the row group's variables
(`Names`: a block of `ROW_WARPS` warps, a row a warp) and the group's row guard.
Ensures:  `column_of(k, phase, sizes, error)` is the phase as a `Column` (a column sum
`for d (PARALLEL) { local acc = init { for r { acc = acc op e } rest } }`, `e` and
`rest` without loops, bounds of the sizes only, steps 1, float32 or float64), or
None. `sweeps(columns, names, blocks, in_rows, taken)` is, for the fused kernel:

- its statements after the rows' sections: a sweep over the columns 32 at a time
  (those of column sums over the same columns share one), uniform in the block:

      for d0 in lo:hi step 32 {
        sh[tid] = <the row's term of column d0 + lane, or the identity>  (a sh a sum)
        __syncthreads()
        if (warp == 0) { P[b * outputs + d - lo] = sh[0 * 32 + lane] op .. op sh[15 * 32 + lane] }
        __syncthreads() }

- the `__shared__` arrays `sh` (one a column sum, `ROW_WARPS * 32` values);
- a `ColumnPass` a column sum: its temporary `P` (blocks x columns partials) and its
  second pass (`cuda_split.second_pass`), which combines the blocks' partials in
  block order, so the sum is deterministic.

`accesses(phase, error)` is the buffers a phase reads and writes (the error record's
stores not counted), for the row group's independence rules.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from compiler import loops as L
from compiler.cuda.cuda_nodes import BlockSync
from compiler.cuda.cuda_split import second_pass
from compiler.cuda.cuda_tile import extent, fresh
from compiler.cuda.cuda_warp import LANES, combine, identity, reduction_op
from compiler.loops.ir import var_names, walk
from compiler.loops.jam import rename_locals

I64 = L.DType.INT64
ROW_WARPS = 16  # a block's warps, a row each, in a row group with column sums
COLUMN_DTYPES = (L.DType.FLOAT32, L.DType.FLOAT64)


@dataclass(frozen=True)
class Column:
    """A column sum (module doc): phase `index`, its band, accumulator and nest."""

    index: int
    band: L.For
    local: L.Local
    nest: L.For  # the reduction over the rows
    rest: tuple[L.Stmt, ...]
    op: str
    reads: frozenset[str]
    writes: frozenset[str]


@dataclass(frozen=True)
class ColumnPass:
    """The second pass of a column sum fused into a row group: `second` (a PARALLEL
    band over the columns) combines the blocks' partials in `temp`, in a fixed order."""

    phase: int
    temp: L.Buffer
    second: L.Stmt


@dataclass(frozen=True)
class Names:
    """The variables of a row group with column sums: the row, the block of rows, the
    thread in the block, its warp and lane."""

    row: str
    block: str
    tid: str
    warp: str
    lane: str


def column_of(k: int, phase: L.Stmt, sizes: set[str], error: str | None) -> Column | None:
    """The phase as a column sum (module doc), or None."""
    if not (isinstance(phase, L.For) and phase.kind is L.LoopKind.PARALLEL and phase.step == 1):
        return None
    local = phase.body
    if not var_names(phase.lo, phase.hi) <= sizes or not isinstance(local, L.Local):
        return None
    if local.dtype not in COLUMN_DTYPES:
        return None
    stmts = local.body.stmts if isinstance(local.body, L.Block) else (local.body,)
    if not stmts or not isinstance(stmts[0], L.For):
        return None
    nest, rest = stmts[0], stmts[1:]
    if nest.step != 1 or not var_names(nest.lo, nest.hi) <= sizes:
        return None
    if any(isinstance(n, L.For) for s in (nest.body, *rest) for n in walk(s)):
        return None
    op = reduction_op(nest, local.var, error)
    if op is None:
        return None
    reads, writes = accesses(phase, error)
    return Column(k, phase, local, nest, rest, op, frozenset(reads), frozenset(writes))


def accesses(phase: L.Stmt, error: str | None) -> tuple[set[str], set[str]]:
    reads, writes = set(), set()
    for n in walk(phase):
        if isinstance(n, L.Load):
            reads.add(n.buffer.name)
        elif isinstance(n, L.Store) and n.buffer.name != error:
            writes.add(n.buffer.name)
        elif isinstance(n, L.Alloc):
            writes.add(n.buffer.name)
    return reads, writes


def sweeps(
    columns: list[Column], names: Names, blocks: L.Expr, in_rows: L.Expr, taken: set[str]
) -> tuple[tuple[L.Stmt, ...], tuple[L.Buffer, ...], tuple[ColumnPass, ...]]:
    """The sweeps of `columns`, their shared arrays and their second passes (module
    doc); `blocks` the blocks of rows, `in_rows` the row's guard."""
    c = lambda v: L.Const(v, I64)  # noqa: E731
    shared: list[L.Buffer] = []
    passes: list[ColumnPass] = []
    steps: dict[tuple[L.Expr, L.Expr], tuple[str, list[tuple[L.Stmt, L.Stmt]]]] = {}
    for col in columns:
        outputs = extent(col.band)
        temp_name = fresh(f"{col.local.var}_parts", taken)
        temp = L.Buffer(temp_name, col.local.dtype, (L.Bin(L.BinOp.MUL, blocks, outputs),),
                        L.Role.TEMP)  # fmt: skip
        sh = L.Buffer(fresh("tcc_sh", taken), col.local.dtype, (c(ROW_WARPS * LANES),), L.Role.TEMP)
        shared.append(sh)
        key = (col.band.lo, col.band.hi)
        if key not in steps:
            steps[key] = (fresh("tcc_d0", taken), [])
        d0, pieces = steps[key]
        pieces.append(_step(col, sh, temp, outputs, names, d0, in_rows, taken))
        band = dataclasses.replace(col.band, body=L.Block(()))
        second = second_pass([band], col.local, col.rest, col.op, blocks, outputs, temp, taken)
        passes.append(ColumnPass(col.index, temp, second))
    swept = []
    for (lo, hi), (d0, pieces) in steps.items():
        warp0 = L.Bin(L.BinOp.EQ, L.VarRef(names.warp, I64), c(0))
        first_warp = L.If(warp0, L.Block(tuple(p[1] for p in pieces)), None)
        step = L.Block((*(p[0] for p in pieces), BlockSync(), first_warp, BlockSync()))
        swept.append(L.For(d0, lo, hi, LANES, step, L.LoopKind.SERIAL))
    return tuple(swept), tuple(shared), tuple(passes)


def _step(
    col: Column,
    sh: L.Buffer,
    temp: L.Buffer,
    outputs: L.Expr,
    n: Names,
    d0: str,
    in_rows: L.Expr,
    taken: set[str],
) -> tuple[L.Stmt, L.Stmt]:
    """One step of a sweep over 32 columns `d0 .. d0 + 31` for column sum `col`: (each
    lane's term of its row and column `d0 + lane` into `sh`; warp 0's combination of
    the block's rows, in order, into `temp[block * outputs + d - lo]`). The sweep puts
    the block's barriers between them and after them."""
    c = lambda v: L.Const(v, I64)  # noqa: E731
    ref = lambda name: L.VarRef(name, I64)  # noqa: E731
    dtype = col.local.dtype
    start = identity(col.op, dtype)
    d, lo, hi = col.band.var, col.band.lo, col.band.hi
    part, total, w = (
        fresh(x, taken) for x in (f"{col.local.var}_part", f"{col.local.var}_block", "tcc_w")
    )
    column = L.Bin(L.BinOp.ADD, ref(d0), ref(n.lane))
    in_cols = L.Bin(L.BinOp.LT, ref(d), hi)
    term: L.Stmt = rename_locals(col.nest.body, {col.local.var: part})  # no loops
    if col.nest.var != n.row:
        term = L.Let(col.nest.var, ref(n.row), term)
    guarded = L.If(L.Bin(L.BinOp.AND, in_rows, in_cols), term, None)
    mine = L.Store(sh, (ref(n.tid),), L.VarRef(part, dtype))
    own = L.Let(d, column, L.Local(part, dtype, start, L.Block((guarded, mine))))
    slot = L.Bin(L.BinOp.ADD, L.Bin(L.BinOp.MUL, ref(w), c(LANES)), ref(n.lane))
    # a value of its own: the race check's shared elements are proxies (`cuda_fibers`)
    value = fresh("tcc_v", taken)
    add = L.Let(value, L.Load(sh, (slot,)),
                L.Assign(total, combine(col.op, L.VarRef(total, dtype), L.VarRef(value, dtype))))  # fmt: skip
    at = L.Bin(
        L.BinOp.ADD, L.Bin(L.BinOp.MUL, ref(n.block), outputs), L.Bin(L.BinOp.SUB, ref(d), lo)
    )
    store = L.If(in_cols, L.Store(temp, (at,), L.VarRef(total, dtype)), None)
    rows = L.For(w, c(0), c(ROW_WARPS), 1, add)
    combined = L.Let(d, column, L.Local(total, dtype, start, L.Block((rows, store))))
    return own, combined


__all__ = [
    "COLUMN_DTYPES",
    "ROW_WARPS",
    "Column",
    "ColumnPass",
    "Names",
    "accesses",
    "column_of",
    "sweeps",
]
