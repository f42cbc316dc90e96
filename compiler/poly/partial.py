"""Partial scatters: an affine scatter run in parallel over its plain variables.

Requires: a ranged statement's `StmtFacts` (every variable has a `where` range) and
the def's size parameters.
Ensures:  `plain_vars(facts)` are the left-hand-side variables that appear alone as
a whole subscript and in no other subscript; distinct values of them write distinct
elements, so a scatter is race-free when run in parallel over them, every other loop
sequential inside each parallel iteration, accumulating into the output in memory
(no atomics, no gather). `strided(facts, params)`: some subscript has a variable with
a coefficient other than 0 and +-1 (a stride or a dilation: `2 * h + kh`,
`h + 2 * kh`) or a floor division / modulo, so its gather has floor-divided windows.
`needs_divisibility(facts, params)`: its gather would need a divisibility constraint
(a subscript without a unit-coefficient variable of its own, `O(2 * i + 3 * k)`, or
not affine; `poly.invert.unit_inner`). `keep_partial(facts, params)` is the cost rule
of the gather pass (`poly.gather.scatter_to_gather(..., mode="auto")`,
`Options.gather`): a reduction (`+=`, `*=`, `min=`, `max=`, with or without `!`) with
plain variables that is `strided` stays a partial scatter -- the CPU's schedule
choice; in the def as printed (`printed=True`) only one whose gather
`needs_divisibility` does.

Why (measured, tracker issues 11 and 47, `examples/strided_conv.tc`'s gradient): the
exact gather of `I_grad(n, c, 2 * h + kh, 2 * w + kw) += ...` has floor-divided ranges
(`h in max(0, (y - KH) / 2 + 1):min(..., y / 2 + 1)`) that the CPU schedule
splits into cases, with the window loop `x in 2 * w:2 * w + KW` innermost: the
gradient kernel of `tools/bench`'s stride-2 case took 7.3 ms (2 threads) against 3.2
as the partial scatter, whose domain is a box. (The gather itself compiles in a
fraction of a second: `unit_inner`.)

The loop order the CPU gives a partial scatter is `cpu.scatter_order.partial_order`.
"""

from __future__ import annotations

import islpy as isl

from compiler.frontend.ast import Access, AssignOp, Expr, Let, Var
from compiler.frontend.checked import StmtFacts
from compiler.frontend.scopes import walk
from compiler.options import GATHER_MODES
from compiler.poly.invert import unit_inner
from compiler.poly.isl_bridge import NotAffine, StmtSpace, expr_to_aff

MODES = GATHER_MODES  # keep_partial's modes: Options.gather's values


def plain_vars(facts: StmtFacts) -> tuple[str, ...]:
    """The left-hand-side variables that are a whole subscript and occur in no other
    subscript, in left-hand-side order."""
    args = facts.stmt.lhs.args
    lets = _lets(facts)
    found: list[str] = []
    for k, arg in enumerate(args):
        if not (isinstance(arg, Var) and arg.name in facts.index_vars):
            continue
        name = arg.name
        if any(_mentions(a, name, lets) for j, a in enumerate(args) if j != k):
            continue
        found.append(name)
    return tuple(found)


def subscript_rows(facts: StmtFacts, params: tuple[str, ...]) -> tuple[tuple[int, ...], ...] | None:
    """The integer coefficients of every variable (`facts.all_vars` order) in each
    left-hand-side subscript, or None when some subscript is not affine (a floor
    division or modulo, a read)."""
    space = StmtSpace(facts.all_vars, params)
    lets = _lets(facts)
    rows = []
    for arg in facts.stmt.lhs.args:
        row = coefficients(arg, space, lets)
        if row is None:
            return None
        rows.append(row)
    return tuple(rows)


def coefficients(e: Expr, space: StmtSpace, lets: dict[str, Expr]) -> tuple[int, ...] | None:
    """The integer coefficient of each variable of `space` (in its order) in `e`, or
    None when `e` is not one affine function (`single_affine`)."""
    aff = single_affine(e, space, lets)
    if aff is None:
        return None
    return tuple(
        int(aff.get_coefficient_val(isl.dim_type.in_, pos).to_python())
        for pos in range(len(space.vars))
    )


def needs_divisibility(facts: StmtFacts, params: tuple[str, ...]) -> bool:
    """Whether the gather of this scatter would need a divisibility constraint: some
    subscript is not affine, or no choice of one unit-coefficient variable per
    subscript can be eliminated (`poly.invert.unit_inner`: `O(2 * i + 3 * k)`)."""
    rows = subscript_rows(facts, params)
    if rows is None:
        return True
    return unit_inner(rows, range(len(facts.all_vars))) is None


def strided(facts: StmtFacts, params: tuple[str, ...]) -> bool:
    """Whether some subscript that is not a plain variable is not affine with unit
    coefficients (a stride or a dilation: `2 * h + kh`, `h + 2 * kh`; a floor
    division): its gather has floor-divided window bounds, or needs divisibility."""
    rows = subscript_rows(facts, params)
    if rows is None:
        return True
    return any(c not in (0, 1, -1) for row in rows for c in row)


def keep_partial(
    facts: StmtFacts, params: tuple[str, ...], mode: str = "auto", *, printed: bool = False
) -> bool:
    """The gather pass's cost rule (module doc): keep this scatter as a partial
    scatter. `mode` "full": never (gather it); "partial": whenever it is an affine
    reduction with plain variables; "auto": when, besides, it is `strided` (the CPU's
    schedule choice: measured faster than the gather) -- or, with `printed` (the def
    as printed), only when its gather `needs_divisibility`."""
    if mode not in MODES:
        raise ValueError(f"gather mode {mode!r} is not one of {MODES}")
    stmt = facts.stmt
    if mode == "full":
        return False
    if stmt.op is AssignOp.ASSIGN or not stmt.op.is_reduction:
        return False
    if any(isinstance(n, Access) for a in stmt.lhs.args for n in walk(a)):
        return False  # data-dependent: not this rule's business
    if not plain_vars(facts):
        return False
    if mode == "partial":
        return True
    return needs_divisibility(facts, params) if printed else strided(facts, params)


def single_affine(e: Expr, space: StmtSpace, lets: dict[str, Expr]) -> isl.Aff | None:
    """`e` as one affine function without floor divisions, or None."""
    try:
        pw = expr_to_aff(e, space, lets)
    except NotAffine:
        return None
    affs: list[isl.Aff] = []
    pw.foreach_piece(lambda _set, aff: affs.append(aff))
    if len(affs) != 1 or affs[0].dim(isl.dim_type.div) > 0:
        return None
    return affs[0]


def _lets(facts: StmtFacts) -> dict[str, Expr]:
    return {c.name: c.value for c in facts.stmt.where if isinstance(c, Let)}


def _mentions(e: Expr, v: str, lets: dict[str, Expr]) -> bool:
    for node in walk(e):
        if isinstance(node, Var):
            if node.name == v:
                return True
            if node.name in lets and _mentions(lets[node.name], v, lets):
                return True
    return False


__all__ = [
    "MODES",
    "keep_partial",
    "needs_divisibility",
    "plain_vars",
    "single_affine",
    "strided",
    "subscript_rows",
]
