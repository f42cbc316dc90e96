"""Few rows: versions of a register tile for row counts below its row block.

Requires: a statement's main `Nest` (`poly.schedule`) and its `StmtFacts`.
Ensures:  `few_rows(nest, facts, params)` is `nest` with `Nest.few_rows` set when the
nest is register-tiled (`lanes > 1`) with a jammed row block of `B > 2` rows
(`cpu_model`'s block variable, an output variable) whose extent `R` is an expression
of the sizes alone: versions of the nest with the row block `2`, `3`, ... up to
`FEW_ROWS` (each below `B`), the last one also for `R` up to `B - 1`.
`few_rows_lowered` lowers them under one run-time test of `R` each (`if (R == 2)
... else if (R == 3) ... else if (R < B) ... else <the nest>`); the tests read sizes
alone, so a call's sizes select one version and only it is compiled
(`loops.versions`).

Why: with fewer rows than the block, every row took the tile's remainder, one row at
a time, whose tile has one vector of partial sums: one FMA chain, latency-bound. A
first-layer convolution's gradients have `C` = 3 rows (`W1_grad(m, c, kh, kw)` rows
`c`, `I_grad(n, c, y, x)` rows `c`); with a block of 3 the tile has 3 chains and no
remainder (measured, 2 threads, float32, the weight gradient of N4 C3 64^2 M32 5x5 on
a loaded machine: 8.0 -> 4.0 ms, medians of blocks). Legal for any block: jamming an
output loop keeps the order of every element's contributions (`cpu_model`).

Worked example: `W1_grad(m, c, kh, kw) +=! O_grad(n, m, h, w) * I(n, c, h + kh, w + kw)`
(lanes along `m`, rows `c` blocked by 8): versions with `c` jammed by 2, 3 and 4, run
for `C` = 2, `C` = 3 and 4 <= `C` < 8; the block of 8 for `C` >= 8.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from compiler import loops as L
from compiler.frontend.ast import Binary, BinOp, Expr, RangeConstraint, Var
from compiler.frontend.checked import StmtFacts
from compiler.frontend.visit import walk
from compiler.poly.lower_expr import I64, bound_to_loops, const
from compiler.poly.schedule import Nest

FEW_ROWS = 4  # versions for row blocks 2 .. FEW_ROWS (the last also for more rows below B)


@dataclasses.dataclass(frozen=True)
class FewRows:
    rows: Expr  # the row block variable's extent (sizes only)
    block: int  # the nest's own row block
    versions: tuple[tuple[int, Nest], ...]  # (row block, Nest), ascending

    def lowered(self, nest: Nest, lower: Callable[[Nest], L.Stmt]) -> L.Stmt:
        """`nest`'s loops with these versions (`few_rows_lowered`)."""
        return few_rows_lowered(nest, lower)


def few_rows(nest: Nest, facts: StmtFacts, params: tuple[str, ...]) -> Nest:
    """`nest` with `few_rows` versions (the module doc), or `nest` itself."""
    if nest.lanes <= 1 or nest.unproven or nest.write_checks or not nest.jams:
        return nest
    row, block = next(((v, f) for v, f in nest.jams if v in facts.index_vars), (None, 0))
    if row is None or block <= 2:
        return nest
    extent = _extent(facts, row, params)
    if extent is None:
        return nest
    versions = tuple((b, _with_block(nest, row, b)) for b in range(2, min(FEW_ROWS, block - 1) + 1))
    return dataclasses.replace(nest, few_rows=FewRows(extent, block, versions))


def _with_block(nest: Nest, row: str, block: int) -> Nest:
    jams = tuple((v, block if v == row else f) for v, f in nest.jams)
    alternative = nest.alternative
    if alternative is not None:
        alternative = _with_block(alternative, row, block)
    return dataclasses.replace(nest, jams=jams, alternative=alternative, few_rows=None)


def _extent(facts: StmtFacts, v: str, params: tuple[str, ...]) -> Expr | None:
    """`hi - lo` of `v`'s range when both ends are expressions of the sizes."""
    for c in facts.stmt.where:
        if isinstance(c, RangeConstraint) and c.expr == Var(v):
            extent = Binary(BinOp.SUB, c.hi, c.lo)
            names = {n.name for n in walk(extent) if isinstance(n, Var)}
            return extent if names <= set(params) else None
    return None


def few_rows_lowered(nest: Nest, lower: Callable[[Nest], L.Stmt]) -> L.Stmt:
    """The versions of `nest.few_rows` and `nest` itself under tests of the rows."""
    few: FewRows = nest.few_rows
    rows = bound_to_loops(few.rows)
    body = lower(dataclasses.replace(nest, few_rows=None))
    last = few.versions[-1][0] if few.versions else None
    for b, version in reversed(few.versions):
        if b == last:  # b <= R < block
            cond = L.Bin(
                L.BinOp.AND,
                L.Bin(L.BinOp.GE, rows, const(b, I64)),
                L.Bin(L.BinOp.LT, rows, const(few.block, I64)),
            )
        else:
            cond = L.Bin(L.BinOp.EQ, rows, const(b, I64))
        # the companions `poly.companions` gave the nest after the versions were made
        body = L.If(cond, lower(dataclasses.replace(version, companions=nest.companions)), body)
    return body


__all__ = ["FEW_ROWS", "FewRows", "few_rows", "few_rows_lowered"]
