"""Split reductions: a reduction to few outputs (a scalar, a column sum) over many threads.

Requires: a piece of a phase (`codegen.cuda_map`): a chain of PARALLEL loops (the band,
possibly empty; step 1, bounds of the sizes only) over a register reduction, as
`poly.gpu_lower` emits it:

    local acc = init { for r1 { .. for rn { acc = acc op e } .. }  <statements using acc> }

with `op` one of `+`, `*`, `max`, `min` in every update (`cuda_warp.reduction_op`) and
`acc` a float or an integer (not an integer product).
Ensures:  `split_reduction(band, sizes, error, taken)` is None, or a `SplitReduction`:
two passes and the temporary between them, which compute the same outputs:

- pass 1: `parts` partial results per output, each in a thread of its own. Partial `p`
  takes the iterations `r1 = lo + p, lo + p + parts, ...` of the outermost reduction
  loop (all of the inner ones), starting from the identity of `op`, and stores its
  result in `P[p * outputs + o]` (`o`: the output's position in the band, so a warp's
  stores are neighbouring). Where the band is empty and the innermost reduction loop
  reads operands along their last subscript (a scalar sum of a matrix), a second
  split gives that loop to 32 lanes, 32 apart (coalesced): then `parts = 32 * outer`;
- pass 2: the band again (one iteration when it is empty), computing
  `init op P[0 * outputs + o] op ... op P[(parts - 1) * outputs + o]` in the fixed
  order of `p`, then the statements after the loops. Its body is a reduction again,
  so a warp reduction (`cuda_warp`) combines it where it applies.

`parts = max(1, min(ceil(TARGET_THREADS / outputs), ceil(extent(r1) / MIN_TERMS)))`
(an expression of the sizes); the host runs the split when `parts >= MIN_PARTS`
(`SplitReduction.when`), the one-pass kernel otherwise.

Float sums are *deterministic*: the partials and their combination have a fixed order
for given sizes (no atomics), so a call gives the same bits every time, though not the
serial loop's (the sum is reassociated, within the usual float tolerance); max and min
are exact.

Worked example, `s +=! A(i, k)` (band empty):

    pass 1: for po in 0:parts / 32 { for lane in 0:32 {
              local part = 0 { for q in 0:ceil((N - po) / (parts / 32)) { let i = po + q * (parts / 32)
                for k in lane:K step 32 { part = part + A[i, k] } }
                P[po * 32 + lane] = part } } }
    pass 2: for one in 0:1 { local acc = 0 { for p in 0:parts { acc = acc + P[p] }  s[0] = acc } }
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np

from compiler import loops as L
from compiler.codegen.cuda_tile import extent, fresh, iterations
from compiler.codegen.cuda_warp import LANES, MIN_LANES_USED, combine, identity, reduction_op
from compiler.loops.ir import var_names, walk
from compiler.loops.jam import rename_locals

I64 = L.DType.INT64
TARGET_THREADS = 65536  # pass 1's threads: about 4 warps on each of an H100's 4 x 132 SM quarters
MIN_TERMS = 8  # the outermost reduction loop's iterations a partial takes, at least
MIN_PARTS = 4  # fewer partials than this: the one-pass kernel runs


@dataclass(frozen=True)
class SplitReduction:
    """The two passes of a split reduction, the temporary between them, and when."""

    first: L.Stmt  # pass 1: a PARALLEL chain of `first_depth` loops
    first_depth: int
    second: L.Stmt  # pass 2: a PARALLEL chain of `second_depth` loops
    second_depth: int
    temp: L.Buffer  # the partial results, `parts * outputs` of acc's dtype
    when: L.Expr  # > 0: enough partials to split (int64, sizes only)


def split_of(
    band: list[L.For], body: L.Stmt, sizes: set[str], error: str | None, taken: set[str]
) -> SplitReduction | None:
    """The split form of the reduction `body` under the PARALLEL chain `band` (module
    doc), or None where it does not apply."""
    if not _rectangular(band, sizes) or not isinstance(body, L.Local):
        return None
    stmts = body.body.stmts if isinstance(body.body, L.Block) else (body.body,)
    if not stmts or not isinstance(stmts[0], L.For):
        return None
    nest, rest = stmts[0], stmts[1:]
    op = reduction_op(nest, body.var, error)
    start = _identity(op, body.dtype) if op is not None else None
    if op is None or start is None or var_names(nest.lo, nest.hi) - sizes - _vars(band):
        return None
    outputs = L.Max(iterations(band), _c(1)) if band else _c(1)
    lanes = not band and _lane_split(nest, sizes)
    per_output = _c(TARGET_THREADS // LANES) if lanes else _ceil(_c(TARGET_THREADS), outputs)
    count = L.Max(_c(1), L.Min(per_output, _ceil(extent(nest), _c(MIN_TERMS))))
    parts = L.Bin(L.BinOp.MUL, count, _c(LANES)) if lanes else count
    temp_name = fresh(f"{body.var}_parts", taken)
    temp = L.Buffer(temp_name, body.dtype, (L.Bin(L.BinOp.MUL, parts, outputs),), L.Role.TEMP)
    first = _first_pass(band, body, nest, start, count, lanes, outputs, temp, taken)
    second = _second_pass(band, body, rest, op, parts, outputs, temp, taken)
    when: L.Expr = L.Bin(L.BinOp.SUB, count, _c(MIN_PARTS - 1))
    if lanes:
        long = L.Bin(L.BinOp.SUB, extent(_innermost(nest)), _c(MIN_LANES_USED - 1))
        when = L.Max(when, long)  # many rows, or long rows: either split pays
    first_depth = len(band) + (2 if lanes else 1)
    return SplitReduction(first, first_depth, second, max(len(band), 1), temp, when)


def serial_reason(stmt: L.Stmt, error: str | None) -> str:
    """Why `stmt`, a piece with no parallel band, runs on one thread (for `--emit cuda`'s
    launch comment); where `split_of` applies, why the one-pass kernel may still run."""
    if not any(isinstance(n, L.For) for n in walk(stmt)):
        return "no loop: a single element"
    if isinstance(stmt, L.Local):
        stmts = stmt.body.stmts if isinstance(stmt.body, L.Block) else (stmt.body,)
        nest = stmts[0] if stmts and isinstance(stmts[0], L.For) else None
        op = None if nest is None else reduction_op(nest, stmt.var, error)
        if op is None:
            return (
                "not one associative-commutative reduction (an argmin-like update, or "
                "several values updated together): sequential"
            )
        if _identity(op, stmt.dtype) is None:
            return f"an integer {op} reduction: not split yet"
        return "a short reduction: too few iterations to split across blocks"
    return "no parallel loop: an iteration depends on an earlier one (a sequential recurrence)"


def inner_reason(body: L.Stmt, error: str | None) -> str:
    """Why each thread of a parallel band over `body` runs its reduction alone, where
    the reduction is not one associative-commutative update (argmin-like); else ""."""
    if not isinstance(body, L.Local):
        return ""
    stmts = body.body.stmts if isinstance(body.body, L.Block) else (body.body,)
    if not stmts or not isinstance(stmts[0], L.For):
        return ""
    if reduction_op(stmts[0], body.var, error) is not None:
        return ""
    return "each output's reduction is not one associative-commutative update: sequential"


def _first_pass(
    band: list[L.For],
    body: L.Local,
    nest: L.For,
    start: L.Const,
    count: L.Expr,
    lanes: bool,
    outputs: L.Expr,
    temp: L.Buffer,
    taken: set[str],
) -> L.Stmt:
    """`for po in 0:count { [for lane in 0:32] { band { local part = start { the nest,
    split; P[p * outputs + o] = part } } } }` (module doc)."""
    po, part = fresh("tcc_part", taken), fresh(f"{body.var}_part", taken)
    p: L.Expr = L.VarRef(po, I64)
    lane = fresh("tcc_lane", taken) if lanes else None
    split = _split_outer(nest, L.VarRef(po, I64), count, taken)
    if lane is not None:
        split = _split_inner(split, L.VarRef(lane, I64))
        p = L.Bin(L.BinOp.ADD, L.Bin(L.BinOp.MUL, p, _c(LANES)), L.VarRef(lane, I64))
    reduced = rename_locals(split, {body.var: part})
    index = _index(p, outputs, band)
    store = L.Store(temp, (index,), L.VarRef(part, body.dtype))
    stmt: L.Stmt = L.Local(part, body.dtype, start, L.Block((reduced, store)))
    for loop in reversed(band):
        stmt = dataclasses.replace(loop, body=stmt)
    if lane is not None:
        stmt = L.For(lane, _c(0), _c(LANES), 1, stmt, L.LoopKind.PARALLEL)
    return L.For(po, _c(0), count, 1, stmt, L.LoopKind.PARALLEL)


def _second_pass(
    band: list[L.For],
    body: L.Local,
    rest: tuple[L.Stmt, ...],
    op: str,
    parts: L.Expr,
    outputs: L.Expr,
    temp: L.Buffer,
    taken: set[str],
) -> L.Stmt:
    """`band { local acc = init { for p in 0:parts { acc = acc op P[p * outputs + o] }
    <rest> } }`, the band one iteration when empty."""
    p = fresh("tcc_p", taken)
    index = _index(L.VarRef(p, I64), outputs, band)
    acc = L.VarRef(body.var, body.dtype)
    update = L.Assign(body.var, combine(op, acc, L.Load(temp, (index,))))
    loop = L.For(p, _c(0), parts, 1, update)
    stmt: L.Stmt = dataclasses.replace(body, body=L.Block((loop, *rest)))
    if not band:
        one = fresh("tcc_one", taken)
        return L.For(one, _c(0), _c(1), 1, stmt, L.LoopKind.PARALLEL)
    for b in reversed(band):
        stmt = dataclasses.replace(b, body=stmt)
    return stmt


def _split_outer(nest: L.For, p: L.Expr, count: L.Expr, taken: set[str]) -> L.For:
    """`nest`'s iterations `lo + (p + q * count) * step` for q = 0, 1, ...: the share of
    partial `p` of `count` (the loop variable bound by a Let)."""
    q = fresh("tcc_q", taken)
    remaining = L.Bin(L.BinOp.SUB, extent(nest), p)
    trips = L.Max(_c(0), _ceil(remaining, count))
    k = L.Bin(L.BinOp.ADD, p, L.Bin(L.BinOp.MUL, L.VarRef(q, I64), count))
    value: L.Expr = k if nest.step == 1 else L.Bin(L.BinOp.MUL, k, _c(nest.step))
    if not (isinstance(nest.lo, L.Const) and nest.lo.value == 0):
        value = L.Bin(L.BinOp.ADD, nest.lo, value)
    return L.For(q, _c(0), trips, 1, L.Let(nest.var, value, nest.body))


def _split_inner(split: L.For, lane: L.Expr) -> L.For:
    """`split` with its innermost loop `r` taking `lo + lane, lo + lane + 32, ...`."""
    inner = _innermost(split)
    lo = L.Bin(
        L.BinOp.ADD, inner.lo, lane if inner.step == 1 else L.Bin(L.BinOp.MUL, lane, _c(inner.step))
    )
    return _replace(split, inner, dataclasses.replace(inner, lo=lo, step=inner.step * LANES))


def _lane_split(nest: L.For, sizes: set[str]) -> bool:
    """True when `nest` has an inner loop `r` (perfectly nested, the innermost, bounds of
    the sizes only) that some read uses in its last subscript and none in another only
    (lanes would be coalesced)."""
    inner = nest.body
    while isinstance(inner, L.Let):
        inner = inner.body
    if not isinstance(inner, L.For):
        return False
    r = _innermost(nest)
    if var_names(r.lo, r.hi) - sizes or any(isinstance(n, L.For) for n in walk(r.body)):
        return False
    loads = [n for n in walk(r.body) if isinstance(n, L.Load) and n.index]
    last = [ld for ld in loads if r.var in var_names(ld.index[-1])]
    other = [
        ld
        for ld in loads
        if r.var not in var_names(ld.index[-1]) and r.var in var_names(*ld.index[:-1])
    ]
    return bool(last) and not other


def _innermost(stmt: L.Stmt) -> L.For:
    """The innermost loop of the chain of loops (and Lets) at `stmt`'s root."""
    found = None
    while isinstance(stmt, (L.For, L.Let)):
        if isinstance(stmt, L.For):
            found = stmt
        stmt = stmt.body
    assert found is not None
    return found


def _replace(stmt: L.Stmt, old: L.For, new: L.For) -> L.Stmt:
    if stmt is old:
        return new
    assert isinstance(stmt, (L.For, L.Let))
    return dataclasses.replace(stmt, body=_replace(stmt.body, old, new))


def _index(p: L.Expr, outputs: L.Expr, band: list[L.For]) -> L.Expr:
    """`p * outputs + o`: partial `p` of the band's iteration `o` in the temporary."""
    if not band:
        return p
    return L.Bin(L.BinOp.ADD, L.Bin(L.BinOp.MUL, p, outputs), _position(band))


def _position(band: list[L.For]) -> L.Expr:
    """The row-major position of the band's iteration among its iterations."""
    pos: L.Expr | None = None
    for loop in band:
        offset: L.Expr = L.VarRef(loop.var, I64)
        if not (isinstance(loop.lo, L.Const) and loop.lo.value == 0):
            offset = L.Bin(L.BinOp.SUB, offset, loop.lo)
        pos = (
            offset
            if pos is None
            else L.Bin(L.BinOp.ADD, L.Bin(L.BinOp.MUL, pos, extent(loop)), offset)
        )
    return _c(0) if pos is None else pos


def _rectangular(band: list[L.For], sizes: set[str]) -> bool:
    return all(loop.step == 1 and var_names(loop.lo, loop.hi) <= sizes for loop in band)


def _vars(band: list[L.For]) -> set[str]:
    return {loop.var for loop in band}


def _identity(op: str, dtype: L.DType) -> L.Const | None:
    """The identity of `op` in `dtype`, or None (an integer product: not split)."""
    if dtype.is_float:
        return identity(op, dtype)
    if op == "*" or dtype is L.DType.BOOL:
        return None
    limits = np.iinfo(dtype.np)
    return L.Const({"+": 0, "min": int(limits.max), "max": int(limits.min)}[op], dtype)


def _ceil(a: L.Expr, b: L.Expr) -> L.Expr:
    return L.FloorDiv(L.Bin(L.BinOp.ADD, a, L.Bin(L.BinOp.SUB, b, _c(1))), b)


def _c(value: int) -> L.Const:
    return L.Const(value, I64)


__all__ = [
    "MIN_PARTS",
    "SplitReduction",
    "TARGET_THREADS",
    "inner_reason",
    "serial_reason",
    "split_of",
]
