"""Warp reductions: a warp, not a thread, computes one output of a long reduction.

Requires: a parallel band (`cuda_map`'s chain of PARALLEL loops, independent
iterations) whose body is a float register reduction, as `cuda.gpu_lower` emits it:

    local acc = init { for a { .. for r { acc = acc op e } .. }  <statements using acc> }

with `op` one of `+`, `*`, `max`, `min` in every update, no other write in the loops
(but the error record's), and a reduction nest that is perfectly nested.
Ensures:  `warp_reduce(chain, error, max_outputs, taken)` is None, or a phase (and its
band depth) that computes the same outputs, each by the 32 lanes of a warp: lane `l`
adds up the iterations `r = lo + l, lo + l + 32, ...` of the innermost reduction loop
(for every iteration of the outer ones) in a register of its own, the warp combines
the 32 partial results (`WarpReduce`: `__shfl_down_sync` halving, 5 steps), and lane 0
computes `init op total` and runs the statements after the loops:

    for n ... { for tcc_lane in 0:32 {                 (the band, and 32 lanes an output)
      local acc_part = 0 { for r in lo + tcc_lane:hi step 32 { acc_part = acc_part + e }
        acc_part = warp_sum(acc_part)                  (the total, in lane 0)
        if (tcc_lane == 0) { local acc = init + acc_part { <statements> } } } } }

The lane loop is the band's innermost, so a warp's 32 threads are one output's lanes
(a block must be a multiple of 32 threads) and read 32 neighbouring elements of every
operand whose last subscript uses `r` (coalesced). A reduction whose operands vary
with `r` in another subscript only (a column sum) is not transformed: its lanes would
read 32 rows apart. The sum's order differs from the serial loop's (like any blocked
sum), within the usual float tolerance.

It pays when the band has few outputs and each a long reduction (one thread an output
leaves most of the GPU idle: `sum_j exp(A(i, j)) * b(j)` has 4096 outputs of 4096
terms): the host runs this phase instead of the one-thread-an-output one when the band
has at most `max_outputs` iterations and the innermost reduction loop at least
`MIN_LANES_USED` (`WarpBand.when`).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from compiler import loops as L
from compiler.cuda.cuda_tile import extent, fresh, iterations, scaled
from compiler.loops.ir import var_names, walk
from compiler.loops.jam import rename_locals

I64 = L.DType.INT64
LANES = 32
MIN_LANES_USED = 16  # the innermost reduction loop's extent at least this
OPS = ("+", "*", "max", "min")


@dataclass(frozen=True, slots=True)
class WarpReduce(L.Expr):
    """The `op`-combination of `value` over the 32 lanes of a warp, valid in lane 0."""

    op: str  # one of OPS
    value: L.Expr

    @property
    def dtype(self) -> L.DType:
        return self.value.dtype


@dataclass(frozen=True)
class WarpBand:
    phase: L.Stmt  # the band's loops, the lane loop innermost
    depth: int  # its band depth (the band's, plus the lane loop)
    when: L.Expr  # > 0: the band is small and the reduction long enough (sizes only)


def warp_reduce(
    chain: list[L.For], error: str | None, max_outputs: int, taken: set[str]
) -> WarpBand | None:
    """The warp form of the band `chain` (module doc), or None where it does not apply."""
    body = chain[-1].body
    if max_outputs < 1 or not isinstance(body, L.Local) or not body.dtype.is_float:
        return None
    stmts = body.body.stmts if isinstance(body.body, L.Block) else (body.body,)
    if not stmts or not isinstance(stmts[0], L.For):
        return None
    nest, rest = stmts[0], stmts[1:]
    loops = [nest]
    while isinstance(loops[-1].body, L.For):
        loops.append(loops[-1].body)
    inner = loops[-1]
    if any(isinstance(n, L.For) for n in walk(inner.body)):
        return None
    op = reduction_op(nest, body.var, error)
    if op is None or _strided(nest, inner.var):
        return None
    lane = fresh("tcc_lane", taken)
    part = fresh(f"{body.var}_part", taken)
    split = dataclasses.replace(
        inner,
        lo=L.Bin(L.BinOp.ADD, inner.lo, scaled(L.VarRef(lane, I64), inner.step)),
        step=inner.step * LANES,
    )
    reduced = rename_locals(_replace_innermost(nest, len(loops) - 1, split), {body.var: part})
    total = L.VarRef(part, body.dtype)
    tail = L.If(
        L.Bin(L.BinOp.EQ, L.VarRef(lane, I64), L.Const(0, I64)),
        L.Local(body.var, body.dtype, combine(op, body.init, total), _block(rest)),
        None,
    )
    lanes = L.Local(
        part,
        body.dtype,
        identity(op, body.dtype),
        L.Block((reduced, L.Assign(part, WarpReduce(op, total)), tail)),
    )
    lane_loop = dataclasses.replace(chain[-1], var=lane, lo=L.Const(0, I64),
                                    hi=L.Const(LANES, I64), step=1, body=lanes)  # fmt: skip
    phase: L.Stmt = lane_loop
    for loop in reversed(chain):
        phase = dataclasses.replace(loop, body=phase)
    small = L.Bin(L.BinOp.SUB, L.Const(max_outputs + 1, I64), iterations(chain))
    long = L.Bin(L.BinOp.SUB, extent(inner), L.Const(MIN_LANES_USED - 1, I64))
    return WarpBand(phase, len(chain) + 1, L.Min(small, long))


def reduction_op(nest: L.For, acc: str, error: str | None) -> str | None:
    """The op of every `acc = acc op e` in `nest` when those are its only writes of
    `acc` (and `acc` is read nowhere else), else None."""
    ops: set[str] = set()
    updates = 0
    for n in walk(nest):
        if isinstance(n, (L.Local, L.Alloc, L.Let)):
            return None
        if isinstance(n, L.Store) and n.buffer.name != error:
            return None
        if isinstance(n, L.Assign):
            found = _update(n, acc)
            if found is None:
                return None
            ops.add(found)
            updates += 1
    reads = sum(1 for n in walk(nest) if isinstance(n, L.VarRef) and n.name == acc)
    if len(ops) != 1 or reads != updates:
        return None
    return ops.pop()


def _update(s: L.Assign, acc: str) -> str | None:
    """`op` where `s` is `acc = acc op e` (e not reading acc)."""
    v = s.value
    if s.var != acc:
        return None
    if isinstance(v, L.Bin) and v.op in (L.BinOp.ADD, L.BinOp.MUL):
        a, e, op = v.a, v.b, v.op.value
    elif isinstance(v, (L.Max, L.Min)):
        a, e, op = v.a, v.b, "max" if isinstance(v, L.Max) else "min"
    else:
        return None
    if not (isinstance(a, L.VarRef) and a.name == acc) or acc in var_names(e):
        return None
    return op


def _strided(nest: L.For, r: str) -> bool:
    """True when some read uses `r` but not in its last subscript (lanes 32 rows apart)."""
    for n in walk(nest):
        if isinstance(n, L.Load) and n.index:
            if r not in var_names(n.index[-1]) and r in var_names(*n.index[:-1]):
                return True
    return False


def identity(op: str, dtype: L.DType) -> L.Const:
    value = {"+": 0.0, "*": 1.0, "max": float("-inf"), "min": float("inf")}[op]
    return L.Const(value, dtype)


def combine(op: str, a: L.Expr, b: L.Expr) -> L.Expr:
    if op == "max":
        return L.Max(a, b)
    if op == "min":
        return L.Min(a, b)
    return L.Bin(L.BinOp.ADD if op == "+" else L.BinOp.MUL, a, b)


def _replace_innermost(nest: L.For, depth: int, loop: L.For) -> L.For:
    if depth == 0:
        return loop
    assert isinstance(nest.body, L.For)
    return dataclasses.replace(nest, body=_replace_innermost(nest.body, depth - 1, loop))


def _block(stmts: tuple[L.Stmt, ...]) -> L.Stmt:
    return stmts[0] if len(stmts) == 1 else L.Block(stmts)


__all__ = [
    "LANES",
    "MIN_LANES_USED",
    "WarpBand",
    "WarpReduce",
    "combine",
    "identity",
    "reduction_op",
    "warp_reduce",
]
