"""A statement's loop order: the bands of its nest and the steps applied to them.

Requires: nothing (plain data); `literal_order` a statement's `StmtFacts`.
Ensures:  `LoopOrder` is what a target's schedule model (`poly.schedule.Model`; the
CPU's is `cpu.model`, whose decisions `cpu.cpu_model` makes) answers for one
statement, and `literal_order(facts)` the order every target may fall back to: the
left-hand-side variables outermost, the reduction variables inside them, in
textual order, the reduction accumulated in a register.
"""

from __future__ import annotations

from dataclasses import dataclass

from compiler.frontend.checked import StmtFacts


@dataclass(frozen=True)
class LoopOrder:
    outer: tuple[str, ...]
    inner: tuple[str, ...]
    innermost: tuple[str, ...] = ()
    register: bool = True  # accumulate in a register (only for reductions)
    jams: tuple[tuple[str, int], ...] = ()  # (loop variable, factor), outermost first
    lanes: int = 1  # register tile width along the innermost loop (1: none)
    # a dot tile's two jammed output loops (outer first): the nest also runs with them
    # swapped, chosen at run time by their extents (`cpu.alternatives`, `Nest.larger`)
    swap: tuple[str, str] | None = None
    # transposed panels (`cpu_model.transposed_panels`): the dot tile that runs instead
    # for few rows (`outer[-1]`) or few columns (`cpu.alternatives.RowsCheck`, `Nest.rows`)
    fallback: LoopOrder | None = None


def literal_order(facts: StmtFacts) -> LoopOrder:
    """The left-hand-side variables, then the reduction variables (module doc)."""
    return LoopOrder(facts.index_vars, facts.reduction_vars)


__all__ = ["LoopOrder", "literal_order"]
