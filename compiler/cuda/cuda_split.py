"""Split reductions: a reduction to few outputs (a scalar, a column sum) over many threads.

Requires: a piece of a phase (`cuda.cuda_map`): a chain of PARALLEL loops (the band,
possibly empty; step 1, bounds of the sizes only) over a register reduction, as
`cuda.gpu_lower` emits it:

    local acc = init { for r1 { .. for rn { acc = acc op e } .. }  <statements using acc> }

with `op` one of `+`, `*`, `max`, `min` in every update (`cuda_warp.reduction_op`) and
`acc` a float or an integer (not an integer product).
Ensures:  `split_of(band, body, sizes, error, taken)` is None, or a `SplitReduction`:
two passes and the temporary between them, which compute the same outputs:

- pass 1: `parts` partial results per output, each in a thread of its own. The outer
  reduction loops with bounds of the sizes only are shared out: loop `r_k` gets `c_k`
  partials, partial `p_k` taking `r_k = lo + p_k, lo + p_k + c_k, ...` (all of the loops
  inside). Where the innermost loop reads operands along their last subscript and the
  band does not (a scalar sum of a matrix, a bias gradient over `n, h, w`), 32 lanes
  take it, 32 apart (coalesced), and `parts = 32 * c_1 * .. * c_j`. A partial starts
  from the identity of `op` and stores its result in `P[p * outputs + o]` (`o`: the
  output's position in the band). The partial loops are outermost (the band's inner
  loop coalesces), or innermost where the one reduction loop is contiguous in memory;
- pass 2: the band again (one iteration when it is empty), computing
  `init op P[0 * outputs + o] op ... op P[(parts - 1) * outputs + o]` in the fixed
  order of `p`, then the statements after the loops. Its body is a reduction again,
  so a warp reduction (`cuda_warp`) combines it where it applies.

The counts are expressions of the sizes (`_counts`): the outer loops take as many
partials as `TARGET_THREADS` threads over the outputs (and the lanes) allow, up to
their extent, the last at least `MIN_TERMS` iterations a partial. The host runs the
split when `c_1 * .. * c_j >= MIN_PARTS` (`SplitReduction.when`; for a float band over
one contiguous loop, at least 64: below that the warp form's 32 lanes do as well in one
pass), the warp or one-pass kernel otherwise.

Float sums are *deterministic*: the partials and their combination have a fixed order
for given sizes (no atomics), so a call gives the same bits every time, though not the
serial loop's (the sum is reassociated, within the usual float tolerance); max and min
are exact.

Worked example, `s +=! A(i, k)` (band empty; c = the count of i):

    pass 1: for p in 0:c { for lane in 0:32 {
              local part = 0 { for q in 0:ceil((N - p) / c) { let i = p + q * c
                for k in lane:K step 32 { part = part + A[i, k] } }
                P[p * 32 + lane] = part } } }
    pass 2: for one in 0:1 { local acc = 0 { for p in 0:32 c { acc = acc + P[p] }  s[0] = acc } }
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np

from compiler import loops as L
from compiler.cuda.cuda_tile import extent, fresh, iterations, scaled
from compiler.cuda.cuda_warp import LANES, MIN_LANES_USED, combine, identity, reduction_op
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
    if op is None or start is None:
        return None
    loops = _chain(nest)
    along = _lane_split(loops, sizes) and not (band and _coalesced(band[-1].var, loops[-1]))
    lanes = along and len(loops) > 1  # else the one loop's partials are neighbours (`along`)
    split = []
    for loop in loops[:-1] if lanes else loops:
        if var_names(loop.lo, loop.hi) - sizes:
            break
        split.append(loop)
    if not split:
        return None
    outputs = L.Max(iterations(band), _c(1)) if band else _c(1)
    counts = _counts(split, outputs, lanes)
    outer = counts[0]
    for c in counts[1:]:
        outer = L.Bin(L.BinOp.MUL, outer, c)
    parts = L.Bin(L.BinOp.MUL, outer, _c(LANES)) if lanes else outer
    temp_name = fresh(f"{body.var}_parts", taken)
    temp = L.Buffer(temp_name, body.dtype, (L.Bin(L.BinOp.MUL, parts, outputs),), L.Role.TEMP)
    shares = list(zip(split, counts, strict=True))
    first = _first_pass(band, body, nest, start, shares, lanes, along, outputs, temp, taken)
    second = second_pass(band, body, rest, op, parts, outputs, temp, taken)
    when: L.Expr = L.Bin(L.BinOp.SUB, outer, _c(MIN_PARTS - 1))
    if lanes and not band:  # many rows, or long rows: either split pays
        when = L.Max(when, L.Bin(L.BinOp.SUB, extent(loops[-1]), _c(MIN_LANES_USED - 1)))
    elif along and band and not lanes and body.dtype.is_float:
        # the warp form (32 coalesced lanes, one pass) does as well below 64 partials
        when = L.Bin(L.BinOp.SUB, outer, _c(2 * LANES - 1))
    first_depth = len(split) + len(band) + (1 if lanes else 0)
    return SplitReduction(first, first_depth, second, max(len(band), 1), temp, when)


def _counts(split: list[L.For], outputs: L.Expr, lanes: bool) -> list[L.Expr]:
    """The partial count of each loop of `split`: outer loops take as many as the thread
    budget (`TARGET_THREADS` over the outputs, and the lanes) allows, up to their extent;
    the last at least `MIN_TERMS` iterations a partial."""
    budget: L.Expr = _ceil(_c(TARGET_THREADS // LANES if lanes else TARGET_THREADS), outputs)
    counts: list[L.Expr] = []
    for k, loop in enumerate(split):
        last = k == len(split) - 1
        cap = _ceil(extent(loop), _c(MIN_TERMS)) if last else extent(loop)
        count = L.Max(_c(1), L.Min(budget, cap))
        counts.append(count)
        budget = L.Max(_c(1), _ceil(budget, count))
    return counts


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
    split: list[tuple[L.For, L.Expr]],
    lanes: bool,
    along: bool,
    outputs: L.Expr,
    temp: L.Buffer,
    taken: set[str],
) -> L.Stmt:
    """`for p1 in 0:c1 { .. band { [for lane in 0:32] { local part = start { the nest,
    split; P[p * outputs + o] = part } } } .. }` (module doc)."""
    part = fresh(f"{body.var}_part", taken)
    shares = {loop.var: (fresh("tcc_part", taken), count) for loop, count in split}
    lane = fresh("tcc_lane", taken) if lanes else None
    reduced = rename_locals(_split_chain(nest, shares, lane, taken), {body.var: part})
    p: L.Expr | None = None
    for name, count in shares.values():
        ref = L.VarRef(name, I64)
        p = ref if p is None else L.Bin(L.BinOp.ADD, L.Bin(L.BinOp.MUL, p, count), ref)
    assert p is not None
    if lane is not None:
        p = L.Bin(L.BinOp.ADD, L.Bin(L.BinOp.MUL, p, _c(LANES)), L.VarRef(lane, I64))
    store = L.Store(temp, (_index(p, outputs, band),), L.VarRef(part, body.dtype))
    stmt: L.Stmt = L.Local(part, body.dtype, start, L.Block((reduced, store)))
    if lane is not None:
        stmt = L.For(lane, _c(0), _c(LANES), 1, stmt, L.LoopKind.PARALLEL)
    partials = [L.For(name, _c(0), count, 1, L.Block(()), L.LoopKind.PARALLEL)
                for name, count in shares.values()]  # fmt: skip
    # the partials innermost where they are neighbouring elements of one loop (`along`)
    order = band + partials if along and not lanes else partials + band
    for loop in reversed(order):
        stmt = dataclasses.replace(loop, body=stmt)
    return stmt


def _split_chain(
    stmt: L.Stmt, shares: dict[str, tuple[str, L.Expr]], lane: str | None, taken: set[str]
) -> L.Stmt:
    """The reduction chain `stmt` with each loop in `shares` taking partial `p`'s share
    (`lo + (p + q * count) * step`, q = 0, 1, ..) and, with `lane`, the innermost loop
    the lane's (`lo + lane`, 32 apart)."""
    if not isinstance(stmt, L.For):
        return stmt
    body = _split_chain(stmt.body, shares, lane, taken)
    if stmt.var in shares:
        p, count = shares[stmt.var]
        return _share(dataclasses.replace(stmt, body=body), L.VarRef(p, I64), count, taken)
    if lane is not None and not isinstance(stmt.body, L.For):
        shift = scaled(L.VarRef(lane, I64), stmt.step)
        lo = L.Bin(L.BinOp.ADD, stmt.lo, shift)
        return dataclasses.replace(stmt, lo=lo, step=stmt.step * LANES, body=body)
    return dataclasses.replace(stmt, body=body)


def second_pass(
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


def _share(nest: L.For, p: L.Expr, count: L.Expr, taken: set[str]) -> L.For:
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


def _chain(nest: L.For) -> list[L.For]:
    """The perfectly nested loops of the reduction `nest`."""
    loops = [nest]
    while isinstance(loops[-1].body, L.For):
        loops.append(loops[-1].body)
    return loops


def _lane_split(loops: list[L.For], sizes: set[str]) -> bool:
    """True when the innermost loop `r` of the reduction chain `loops` (bounds of the
    sizes only, no loop in its body) is read along operands' last subscript and never in
    another only (32 lanes 1 apart would be coalesced)."""
    r = loops[-1]
    if var_names(r.lo, r.hi) - sizes or any(isinstance(n, L.For) for n in walk(r.body)):
        return False
    return _coalesced(r.var, r)


def _coalesced(var: str, loop: L.For) -> bool:
    """True when some read in `loop` uses `var` in its last subscript and none uses it in
    another subscript only."""
    loads = [n for n in walk(loop.body) if isinstance(n, L.Load) and n.index]
    last = [ld for ld in loads if var in var_names(ld.index[-1])]
    other = [
        ld for ld in loads
        if var not in var_names(ld.index[-1]) and var in var_names(*ld.index[:-1])
    ]  # fmt: skip
    return bool(last) and not other


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
    "second_pass",
    "serial_reason",
    "split_of",
]
