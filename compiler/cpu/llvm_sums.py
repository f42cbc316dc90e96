"""Accurate float sums in the LLVM emitter: a loop whose body adds terms to float Locals
is, when longer than `SUM_BLOCK` iterations, summed in blocks with Kahan's compensation
across blocks.

Requires: a `cpu.llvm_emit.FunctionEmitter` inside a function body; the Locals it
declared carry a compensation slot (`em.compensation`). Ensures: `sum_terms(em, s)`
names the updates of loop `s` that can be blocked; `blocked_sum(...)` emits the blocked
loop, each block's partial sum vectorised in lanes (fast-math flags) and added to the
Local with Kahan's compensated summation.
"""

from __future__ import annotations

from typing import Any

from llvmlite import ir

from compiler.loops import Assign, Bin, BinOp, Block, Expr, For, Stmt, VarRef, Visitor

I64 = ir.IntType(64)
REDUCTION_FLAGS = ("reassoc", "contract")
# A float sum over a loop longer than this many iterations is summed in blocks of this
# many (each block's partial sum vectorised in lanes), the blocks added with Kahan's
# compensated summation (`blocked_sum`).
SUM_BLOCK = 2048


def sum_terms(em: Any, s: For) -> list[tuple[str, Expr]]:
    """[(accumulator, term)] for the statements of `s`'s body that are
    `acc = acc + term` on a float Local declared outside the loop (several: a
    dot-product tile, or statements fused by `loops.fuse`), when no other statement
    of the body and no term mentions those accumulators; [] otherwise (or when
    there is no such update). The other statements run as they are, in order."""
    body = flat_body(s)
    found: list[tuple[str, Expr]] = []
    others: list[Stmt] = []
    for a in body:
        term = _sum_update(em, a)
        if term is None:
            others.append(a)
        else:
            found.append((a.var, term))  # type: ignore[union-attr]
    accs = {acc for acc, _ in found}
    if len(accs) != len(found) or any(_mentions(t, a) for _, t in found for a in accs):
        return []
    if any(_mentions(o, a) for o in others for a in accs):
        return []
    return found


def flat_body(s: For) -> tuple[Stmt, ...]:
    """The statements of `s`'s body, nested Blocks flattened (an unroll-and-jam nests
    one Block per jammed row)."""
    out: list[Stmt] = []
    stack: list[Stmt] = [s.body]
    while stack:
        x = stack.pop()
        if isinstance(x, Block):
            stack.extend(reversed(x.stmts))
        else:
            out.append(x)
    return tuple(out)


def _sum_update(em: Any, a: Stmt) -> Expr | None:
    """`term` when `a` is `acc = acc + term` on a float Local of the enclosing scope."""
    if not isinstance(a, Assign) or a.var not in em.compensation:
        return None
    e, me = a.value, VarRef(a.var, em.slots[a.var][1])
    if not (isinstance(e, Bin) and e.op is BinOp.ADD and me in (e.a, e.b)):
        return None
    return e.b if e.a == me else e.a


def blocked_sum(
    em: Any,
    var: str,
    lo: ir.Value,
    hi: ir.Value,
    step: int,
    sums: list[tuple[str, Expr]],
    body: tuple[Stmt, ...],
) -> None:
    """`acc += x` (for each pair of `sums`) over [lo, hi): blocks of SUM_BLOCK iterations
    each summed into a fresh partial (fast-math flags: the vectoriser keeps lanes of
    partial sums), the partials added to `acc` with Kahan's compensation. The error of
    the whole sum is at most about (SUM_BLOCK / lanes + log2(lanes) + 2) * eps * sum(|x|)
    (lanes: the vectoriser's partial sums, 32-64 for float32; 1 if it does not
    vectorise), against (n / lanes) * eps * sum(|x|) for one running sum."""
    b = em.builder
    # one partial per scalar accumulator, one vector partial per group of lanes
    # (`cpu.llvm_lanes`: every update of a group is a run of its lanes)
    units: list[tuple[str, ir.Value, ir.Value, ir.Type]] = []  # (acc, slot, comp, type)
    for acc, _ in sums:
        group = em.lanes.of.get(acc)
        if group is not None and group[1] != 0:
            continue
        slot, comp = em.slots[acc][0], em.compensation[acc]
        units.append((acc, slot, comp, slot.allocated_type))
    partials = []
    for acc, _, _, ty in units:
        with b.goto_block(em.entry):
            b.position_at_start(em.entry)
            partials.append(b.alloca(ty, name=f"{acc}.partial"))
    span = ir.Constant(I64, SUM_BLOCK * step)

    def block() -> None:
        start = em.values[f"{var}.block"]
        end = b.add(start, span)
        end = b.select(b.icmp_signed("<", end, hi), end, hi)
        for partial, (_, _, _, ty) in zip(partials, units, strict=True):
            b.store(ir.Constant(ty, None), partial)

        by_acc = {u[0]: (p, u[3]) for u, p in zip(units, partials, strict=True)}

        def add() -> None:  # the body, each sum update redirected to its partial
            i = 0
            while i < len(body):
                a = body[i]
                term = _sum_update(em, a)
                if term is None:
                    em.stmt(a)
                    i += 1
                    continue
                group = em.lanes.of.get(a.var)  # type: ignore[union-attr]
                if group is not None:
                    g = group[0]
                    em.lanes.sum_update(g, body[i : i + g.width], by_acc[g.names[0]][0])
                    i += g.width
                    continue
                partial, ty = by_acc[a.var]  # type: ignore[union-attr]
                value = b.fadd(b.load(partial, typ=ty), em.sum_term(term), flags=REDUCTION_FLAGS)
                b.store(value, partial)
                i += 1

        em._loop(var, start, end, step, add)
        for partial, (_, slot, comp_slot, ty) in zip(partials, units, strict=True):
            total, comp = b.load(slot, typ=ty), b.load(comp_slot, typ=ty)
            y = b.fsub(b.load(partial, typ=ty), comp)
            t = b.fadd(total, y)
            b.store(b.fsub(b.fsub(t, total), y), comp_slot)
            b.store(t, slot)

    em._loop(f"{var}.block", lo, hi, SUM_BLOCK * step, block)


def _mentions(e: Expr | Stmt, var: str) -> bool:
    """True when `e` reads or assigns the variable `var`."""
    found: list[Expr | Stmt] = []

    class _Refs(Visitor):
        def visit_VarRef(self, node: VarRef) -> None:
            if node.name == var:
                found.append(node)

        def visit_Assign(self, node: Assign) -> None:
            if node.var == var:
                found.append(node)
            self.generic_visit(node)

    _Refs().visit(e)
    return bool(found)


__all__ = ["REDUCTION_FLAGS", "SUM_BLOCK", "blocked_sum", "flat_body", "sum_terms"]
