"""Dot-product tiles in the LLVM emitter: a loop that only adds terms to many float
Locals is vectorised along the loop here, its partial sums reduced by one transposed
tree, instead of by LLVM's vectoriser with one horizontal reduction per Local.

Requires: a `cpu.llvm_emit.FunctionEmitter` at a `For` whose updates `sum_terms`
found (`acc_k = acc_k + term_k`, every statement of the body one of them), a short
loop (`SUM_BLOCK` iterations or fewer: no compensated blocks).
Ensures: each `acc_k` gains the sum of its terms over the loop, added in another order
(the reduction's fast-math flags allow it, as they allow LLVM's vectoriser).

A *dot loop* has at least `MIN_SUMS` Locals of one float dtype, unit step, and terms
that are lane-isomorphic (`cpu.llvm_lanes`) when the loop variable `i` reads as
`i + l` in lane `l`: reads contiguous along their last subscript (`X[n, i]`: one vector
load) or not moving with `i` (a broadcast), float `+ - * /`, negation, min and max. The
dot tiles of a matrix product (`acc_o_n += X[n, i] * W[o, i]`, 4 x 4 Locals) are the
case in point. It is emitted as

    if hi - lo >= w:                         -- w lanes: one 512-bit register
        p_k = 0 (vectors);  for i in [lo, lo + (hi - lo) // w * w) step w: p_k += term_k(i + lanes)
        acc_k += lane of the tree's result;  for the last (hi - lo) % w iterations: acc_k += term_k
    else: the scalar loop

The tree: pairs of vectors (a, b) become one vector `shuffle(a, b, low halves) +
shuffle(a, b, high halves)` holding both sums in half as many lanes each; after log2(w)
levels every lane holds one whole sum. For 16 Locals of float32: 45 vector operations,
where one horizontal reduction per Local took 16 x (4 shuffles + 4 adds + 1 extract),
which for a short loop (attention's `Q K^T` over E = 64: 4 vector steps) cost more than
the loop itself.
"""

from __future__ import annotations

from typing import Any

from llvmlite import ir

from compiler.cpu.llvm_lanes import REGISTER_BITS, _isomorphic
from compiler.cpu.llvm_sums import REDUCTION_FLAGS, flat_body
from compiler.cpu.llvm_types import ir_type
from compiler.loops import Bin, BinOp, Const, DType, Expr, For, Mutator, VarRef

I32, I64 = ir.IntType(32), ir.IntType(64)
MIN_SUMS = 8  # fewer Locals: LLVM's vectoriser interleaves them to hide the add latency
_DTYPES = (DType.FLOAT32, DType.FLOAT64)


def dot_plan(em: Any, s: For, sums: list[tuple[str, Expr]]) -> list[list[Expr]] | None:
    """Each sum's term, lane by lane (`i` read as `i + l`), when `s` is a dot loop
    (module doc); None otherwise."""
    if s.step != 1 or len(sums) < MIN_SUMS or len(sums) != len(flat_body(s)):
        return None
    dtypes = {em.slots[acc][1] for acc, _ in sums}
    if len(dtypes) != 1 or next(iter(dtypes)) not in _DTYPES:
        return None
    if any(acc in em.lanes.of for acc, _ in sums):
        return None
    w = REGISTER_BITS // next(iter(dtypes)).bits
    plan = []
    moves = False
    for _, term in sums:
        if term.dtype not in dtypes:
            return None
        lanes = [_Shift(s.var, k).mutate(term) for k in range(w)]
        if not _isomorphic(lanes, {}):
            return None
        moves = moves or lanes[1] != lanes[0]
        plan.append(lanes)
    return plan if moves else None


def emit_dots(
    em: Any,
    s: For,
    lo: ir.Value,
    hi: ir.Value,
    sums: list[tuple[str, Expr]],
    plan: list[list[Expr]],
) -> None:
    """The dot loop `s` over [lo, hi) (module doc)."""
    b = em.builder
    w = len(plan[0])
    dtype = em.slots[sums[0][0]][1]
    vty = ir.VectorType(ir_type(dtype), w)
    span = b.sub(hi, lo)
    with b.if_else(b.icmp_signed(">=", span, ir.Constant(I64, w))) as (wide, narrow):
        with wide:
            end = b.add(lo, b.mul(b.sdiv(span, ir.Constant(I64, w)), ir.Constant(I64, w)))
            parts = []
            for acc, _ in sums:
                with b.goto_block(em.entry):
                    b.position_at_start(em.entry)
                    parts.append(b.alloca(vty, name=f"{acc}.dot"))
                b.store(ir.Constant(vty, None), parts[-1])

            def step() -> None:
                for part, lanes in zip(parts, plan, strict=True):
                    value = em.lanes.sum_terms(lanes)
                    b.store(b.fadd(b.load(part, typ=vty), value, flags=REDUCTION_FLAGS), part)

            em._loop(s.var, lo, end, w, step, True)
            totals = _tree(b, [b.load(p, typ=vty) for p in parts], w)
            for vector, owners in totals:
                for lane, k in enumerate(owners):
                    if k is None:
                        continue
                    slot = em.slots[sums[k][0]][0]
                    x = b.extract_element(vector, ir.Constant(I32, lane))
                    total = b.fadd(b.load(slot, typ=x.type), x, flags=REDUCTION_FLAGS)
                    b.store(total, slot)
            em._loop(s.var, end, hi, 1, lambda: em.stmt(s.body), True)
        with narrow:
            em._loop(s.var, lo, hi, 1, lambda: em.stmt(s.body))


def _tree(
    b: ir.IRBuilder, vectors: list[ir.Value], w: int
) -> list[tuple[ir.Value, list[int | None]]]:
    """`vectors` (sum k spread over the w lanes of `vectors[k]`) reduced to vectors whose
    lane j holds the whole sum `owners[j]` (None: a padding lane)."""
    items: list[tuple[ir.Value, list[int | None]]] = [(v, [k]) for k, v in enumerate(vectors)]
    zero = ir.Constant(vectors[0].type, None)
    size = w  # lanes per sum
    while size > 1:
        half = size // 2
        if len(items) % 2:
            items.append((zero, [None] * len(items[0][1])))
        low: list[int] = []
        high: list[int] = []
        for j in range(w // size):
            at = j * size
            low += [at + t for t in range(half)] + [w + at + t for t in range(half)]
            high += [at + half + t for t in range(half)] + [w + at + half + t for t in range(half)]
        masks = [ir.Constant(ir.VectorType(I32, w), m) for m in (low, high)]
        pairs = []
        for (x, xo), (y, yo) in zip(items[0::2], items[1::2], strict=True):
            a, c = b.shuffle_vector(x, y, masks[0]), b.shuffle_vector(x, y, masks[1])
            owners = [o for j in range(len(xo)) for o in (xo[j], yo[j])]
            pairs.append((b.fadd(a, c, flags=REDUCTION_FLAGS), owners))
        items = pairs
        size = half
    return items


class _Shift(Mutator):
    """An expression with `var` read as `var + offset`."""

    def __init__(self, var: str, offset: int) -> None:
        self.var = var
        self.offset = offset

    def mutate_VarRef(self, node: VarRef) -> Expr:
        if node.name != self.var or self.offset == 0:
            return node
        return Bin(BinOp.ADD, node, Const(self.offset, node.dtype))


__all__ = ["MIN_SUMS", "dot_plan", "emit_dots"]
