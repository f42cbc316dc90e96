"""The run-time alternatives of a CPU nest: versions the sizes choose between when it runs.

Requires: a statement's main `Nest` (`poly.schedule`), the `LoopOrder` the CPU model
chose for it (`cpu_model.choose_order`), its `StmtFacts`, every tensor's extents and
`Options`.
Ensures:  `alternatives(main, order, facts, extents, params, options) -> Nest`: `main`
with the versions below as `Nest.alternative` and the run-time test that picks it
(`Nest.alias`, `Nest.larger`, `Nest.rows`; each has `condition(buffers) -> L.Expr`,
which `poly.astgen` lowers as `if (condition) alternative else main`), then with
`few_rows` versions (`cpu.rows`):

- a register tile whose reduction runs its long variable innermost: its literal order,
  when the lines it reuses may alias in L1 (`cpu.aliasing`, `AliasCheck`);
- a dot tile: its two jammed output loops swapped, when the larger extent is the
  outer one and streams past L2 (`SwapCheck`);
- transposed panels: the dot tile, for few rows or few columns (`RowsCheck`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass

from compiler import loops as L
from compiler.cpu.aliasing import alias_check
from compiler.cpu.cpu_model import PANEL_LANES
from compiler.cpu.cpu_registers import panel_rows
from compiler.cpu.rows import few_rows
from compiler.cpu.tiling import choose_tiles
from compiler.diagnostics import InternalError
from compiler.frontend.ast import Binary, BinOp, Expr, RangeConstraint, Var
from compiler.frontend.checked import StmtFacts
from compiler.frontend.visit import walk
from compiler.options import Options
from compiler.poly.lower_expr import I64, bound_to_loops, const
from compiler.poly.order import LoopOrder
from compiler.poly.schedule import Nest


def alternatives(
    main: Nest,
    order: LoopOrder,
    facts: StmtFacts,
    extents: dict[str, tuple[Expr, ...]],
    params: tuple[str, ...],
    options: Options,
) -> Nest:
    """`main` with its run-time alternative and its few-rows versions (module doc)."""
    check = alias_check(facts, order, extents)
    if check is not None and not (main.unproven or main.write_checks):
        reduction = order.inner[-1]
        jams = tuple((facts.reduction_vars[-1] if v == reduction else v, k) for v, k in order.jams)
        literal = dataclasses.replace(main, inner=facts.reduction_vars, jams=jams)
        main = dataclasses.replace(main, alternative=literal, alias=check)
    main = swapped(main, order, facts, params) or main
    if order.fallback is not None and main.alternative is None:
        main = with_fallback(main, order, facts, params, options)
    return few_rows(main, facts, params)  # versions for fewer rows than the block


@dataclass(frozen=True)
class SwapCheck:
    """When a dot tile runs with its two jammed output loops `p, q` swapped (`q`
    outside): `q`'s extent is larger than `p`'s and the operand read with `q` (about
    `streamed` elements: `q`'s extent times the reduction's) exceeds `STREAMED`. In the
    literal order that operand is read again for every block of `p`; swapped, the
    smaller one is, and it stays in L2 (measured, 2 threads, float32, Y(n, o) +=!
    X(n, i) * W(o, i): 256x1024 -> 1024 5.2 -> 3.9 ms, torch 2.1; 64x256 -> 1024, where
    both fit in L2, 0.26 -> 0.30 ms swapped, hence the size test)."""

    first: Expr  # q's extent
    second: Expr  # p's extent
    streamed: Expr  # q's extent times the reduction loops' extents

    def condition(self, buffers: Mapping[str, L.Buffer]) -> L.Expr:
        """The run-time test: the swapped loops run where it holds."""
        first, second = bound_to_loops(self.first), bound_to_loops(self.second)
        streamed = L.Bin(L.BinOp.GT, bound_to_loops(self.streamed), const(STREAMED, I64))
        return L.Bin(L.BinOp.AND, L.Bin(L.BinOp.GT, first, second), streamed)


STREAMED = 1 << 18  # elements (1 MiB of float32): more does not stay in L2 beside the rest


@dataclass(frozen=True)
class RowsCheck:
    """When a statement in transposed panels (`cpu_model.transposed_panels`) runs as
    its dot tile instead: its rows (the extent of the row-blocked loop) are fewer than
    `min_rows` (`cpu_registers.panel_rows`: 256 with AVX-512, 64 with AVX2), or its lanes
    (the extent of the panels' columns) fewer than `cpu_model.PANEL_LANES`. With few rows each copied element is read too few times
    for the copy and its extra parallel regions to pay; with few lanes most columns
    fall outside the 32-lane tiles. Measured, 2 threads, float32 `A B^T` (M x N x K),
    dot tile / panels, ms, AVX-512: 512x512x64 0.39 / 0.30, 512x512x256 0.96 / 0.72,
    256x256x64 0.16 / 0.13, 1024x64x64 0.16 / 0.12; but 128x1024x1024 2.23 / 2.45,
    160x256x256 0.25 / 0.33, 1024x16x64 0.06 / 0.45, 512x40x100 0.09 / 0.23. (The rule
    before, rows under 128 or a source of fewer than 2^18 elements, took the dot tile
    for 512x512x256 and the panels for 128x1024x1024.)"""

    rows: Expr
    lanes: Expr
    min_rows: int

    def condition(self, buffers: Mapping[str, L.Buffer]) -> L.Expr:
        """The run-time test: the dot tile runs where it holds."""
        few = L.Bin(L.BinOp.LT, bound_to_loops(self.rows), const(self.min_rows, I64))
        narrow = L.Bin(L.BinOp.LT, bound_to_loops(self.lanes), const(PANEL_LANES, I64))
        return L.Bin(L.BinOp.OR, few, narrow)


def swapped(main: Nest, order: LoopOrder, facts: StmtFacts, params: tuple[str, ...]) -> Nest | None:
    """`main` with its dot tile's loops swapped as its run-time alternative, or None
    (no swap, or an extent that is not an expression of the sizes alone)."""
    if order.swap is None or main.alternative is not None or main.unproven or main.write_checks:
        return None
    p, q = order.swap
    extents = _size_extents(facts, params, (p, q, *facts.reduction_vars))
    if extents is None:
        return None
    streamed = extents[q]
    for v in facts.reduction_vars:
        streamed = Binary(BinOp.MUL, streamed, extents[v])
    outer = tuple(q if v == p else p if v == q else v for v in main.outer)
    alternative = dataclasses.replace(main, outer=outer)
    check = SwapCheck(extents[q], extents[p], streamed)
    return dataclasses.replace(main, alternative=alternative, larger=check)


def with_fallback(
    main: Nest, order: LoopOrder, facts: StmtFacts, params: tuple[str, ...], options: Options
) -> Nest:
    """`main` (transposed panels) with its dot tile as the run-time alternative for
    few rows (`RowsCheck`); `main` alone when the rows' extent is not an expression
    of the sizes, or the nest has run-time read or write checks."""
    dot = order.fallback
    if dot is None or main.unproven or main.write_checks:
        return main
    extents = _size_extents(facts, params, (order.outer[-1], *order.innermost, *order.inner))
    if extents is None:
        return main
    fallback = dataclasses.replace(
        main,
        outer=dot.outer,
        inner=dot.inner,
        innermost=dot.innermost,
        jams=dot.jams,
        tiles=choose_tiles(facts, dot, options),
        lanes=dot.lanes,
        accumulate=facts.stmt.op.is_reduction and dot.register,
    )
    fallback = swapped(fallback, dot, facts, params) or fallback
    rows = extents[order.outer[-1]]
    check = RowsCheck(rows, extents[order.innermost[0]], panel_rows(options))
    return dataclasses.replace(main, alternative=fallback, rows=check)


def _size_extents(
    facts: StmtFacts, params: tuple[str, ...], wanted: tuple[str, ...]
) -> dict[str, Expr] | None:
    """`hi - lo` of the ranges `v in lo:hi` of the variables `wanted`, or None when one
    has no such range or its extent is not an expression of the sizes alone (a range
    that depends on another loop: a second derivative's), so no run-time test on the
    sizes can use it."""
    extents = {}
    for c in facts.stmt.where:
        if isinstance(c, RangeConstraint) and isinstance(c.expr, Var):
            extents[c.expr.name] = Binary(BinOp.SUB, c.hi, c.lo)
    if any(v not in extents for v in wanted):
        return None
    for v in wanted:
        if not {n.name for n in walk(extents[v]) if isinstance(n, Var)} <= set(params):
            return None
        try:
            bound_to_loops(extents[v])
        except InternalError:
            return None
    return extents


__all__ = ["STREAMED", "RowsCheck", "SwapCheck", "alternatives", "swapped", "with_fallback"]
