"""Factoring a scatter: its contraction into a dense scratch tensor, then a plain scatter.

Requires: a `RangedDef` after the gather pass (`poly.gather`), before `cpu.merge`.
Ensures:  `factor_scatters(ranged) -> Factored`: the def the CPU schedule lowers
(`Factored.ranged`), computing the same outputs, where each `+=` / `+=!` statement
whose left-hand side is an affine scatter that is not injective in its variables and
that has reduction variables of its own (`c`, which no left-hand-side subscript uses)
becomes two statements: the contraction over those variables into a scratch tensor
indexed by the left-hand side's variables, and the scatter of that tensor, which has
no reduction left:

    O(n, m, 2 * h + kh, 2 * w + kw) +=! I(n, c, h, w) * W1(c, m, kh, kw)
  ==>
    O_part(n, m, kh, kw, h, w) +=! I(n, c, h, w) * W1(c, m, kh, kw)
    O(n, m, 2 * h + kh, 2 * w + kw) +=! O_part(n, m, kh, kw, h, w)

The contraction's left-hand side is injective (plain distinct variables), so the CPU
model register-tiles it like a matmul, and `cpu.merge` makes its loops long (`m, kh,
kw` -> one loop, `h, w` -> one loop: a 13x13 map is a 169-wide row). The scratch
tensor's dimensions are the left-hand side's plain variables (`poly.partial.
plain_vars`, the parallel band of the scatter) in left-hand-side order, then the
others grouped by the read they are a plain subscript of, the last read's group
first (`m, kh, kw` of `W1`, then `h, w` of `I`), each group in that read's order:
adjacent in both the read and the scratch tensor, so the pairs merge.

This is the CPU target's schedule, not mathematics: `cpu.model.schedule(...,
pad=True)` (the CPU model's `rewrite`) calls this pass (with `Options.factor`, default True); in
`Factored.ranged` the scratch tensor is an output declared with its shape, and
`Factored.scratch` names it: the lowering makes it a temporary of the loop function
(`loops.Alloc`), never a parameter. The def `--grad` prints and the CUDA target never
see it.

When: the statement is `+=` or `+=!` (a sum splits into partial sums: `sum over (v, c)
= sum over v of (sum over c)`); the left-hand side's subscripts are affine and not
injective; it has at least one reduction variable; every left-hand-side variable `v`
has one range `v in lo:hi` with bounds of the sizes only; the right-hand side does
not read the output and has the output's type (the partial sums are the output's
type); there is no `exists` clause; and isl proves that the scatter's
domain (the left-hand side's ranges and the conditions that use only its variables)
is exactly the original domain with the reduction variables projected out, so the
scatter writes the same elements the statement did. Anything else is left as it is.

Why (measured, `tools/bench`, 2 threads, float32, median of blocks, with torch in the
same run): a transposed convolution written as a scatter (`tools/bench_shapes`'s
conv_t2 rows) ran as a partial scatter with its channel sum innermost and its stores
two apart, 2.5x torch's `conv_transpose2d`; factored, the contraction is a matmul at
register-tile speed and the scatter moves `KH * KW` times the map, once. torch's
`conv_transpose2d` does the same (a GEMM, then col2im). The strided convolution's
input gradient is the same statement.
"""

from __future__ import annotations

import dataclasses

from compiler.cpu.scratch import rechecked
from compiler.frontend.ast import (
    Access,
    AssignOp,
    Binary,
    BinOp,
    Const,
    Exists,
    Expr,
    Let,
    Param,
    RangeConstraint,
    ScalarType,
    Var,
)
from compiler.frontend.checked import Bound, CheckedDef, RangedDef, StmtFacts
from compiler.frontend.scopes import name_supply, var_uses
from compiler.frontend.types import expr_type, stmt_env
from compiler.frontend.visit import walk
from compiler.poly.build import PolyStmt, build_statements, domain_of
from compiler.poly.failures import isl_failures
from compiler.poly.isl_bridge import NotAffine, StmtSpace
from compiler.poly.partial import plain_vars

SCRATCH_SUFFIX = "_part"


@dataclasses.dataclass(frozen=True)
class Factored:
    """What the CPU schedule lowers: `ranged`, the def with its factored scatters;
    `scratch`, the contractions' tensors (outputs of `ranged` only, temporaries of the
    loops); `origins`, for each statement of `ranged`, the position of the statement
    of the input def it comes from."""

    ranged: RangedDef
    scratch: tuple[str, ...] = ()
    origins: tuple[int, ...] = ()


def factor_scatters(ranged: RangedDef) -> Factored:
    """`ranged` with every scatter that qualifies factored (the module doc); `ranged`
    itself, no scratch, when none does."""
    checked = ranged.checked
    params = checked.size_params
    stmts = [
        dataclasses.replace(f, stmt=s)
        for f, s in zip(checked.stmts, checked.definition.stmts, strict=True)
    ]
    candidates = {k: c for k, f in enumerate(stmts) if (c := _candidate(checked, f)) is not None}
    if not candidates:  # most defs: no isl work at all
        return Factored(ranged, (), tuple(range(len(stmts))))
    polys = build_statements(ranged)
    supply = name_supply(checked.definition)
    dtypes = {t.name: t.dtype for t in checked.tensors}
    made, origins, outputs = [], [], []
    bounds = list(ranged.output_bounds)
    for k, facts in enumerate(stmts):
        stmt = facts.stmt
        if k not in candidates or not _proved(facts, polys[k], params, candidates[k][1]):
            made.append(stmt)
            origins.append(k)
            continue
        ranges, shared, reads = candidates[k]
        name = supply.fresh(stmt.lhs.name + SCRATCH_SUFFIX)
        order = _order(facts, reads)
        dims = tuple(_sub(hi, lo) for lo, hi in (ranges[v] for v in order))
        index = tuple(_sub(Var(v), ranges[v][0]) for v in order)
        contraction = dataclasses.replace(
            stmt, lhs=Access(name, index), op=AssignOp.PLUS_INIT, equivalent=None
        )
        made += [contraction, dataclasses.replace(stmt, rhs=Access(name, index), where=shared)]
        origins += [k, k]
        outputs.append(Param(name, dtypes[stmt.lhs.name], dims))
        zero = Const(0, ScalarType.INT32)
        bounds.append((name, tuple(Bound(zero, d) for d in dims)))
    if not outputs:
        return Factored(ranged, (), tuple(origins))
    factored = rechecked(ranged, made, outputs, bounds, "factored scatter")
    return Factored(factored, tuple(p.name for p in outputs), tuple(origins))


def _candidate(
    checked: CheckedDef, facts: StmtFacts
) -> tuple[dict[str, tuple[Expr, Expr]], tuple, list[Access]] | None:
    """What the text of the statement says (no isl): each left-hand-side variable's
    range, the where clauses the scatter keeps, and the reads; None when the statement
    does not qualify (the module doc's conditions, all but isl's proofs)."""
    stmt, sizes = facts.stmt, set(checked.size_params)
    if stmt.op not in (AssignOp.PLUS, AssignOp.PLUS_INIT) or stmt.equivalent is not None:
        return None
    if not facts.reduction_vars or not facts.index_vars:
        return None
    if any(isinstance(n, Access) for a in stmt.lhs.args for n in walk(a)):
        return None
    reads = [n for n in walk(stmt.rhs) if isinstance(n, Access)]
    if any(r.name == stmt.lhs.name for r in reads):
        return None
    if any(isinstance(c, Exists) for c in stmt.where):
        return None
    output = next(t.dtype for t in checked.tensors if t.name == stmt.lhs.name)
    if expr_type(stmt.rhs, stmt_env(checked, facts)) != output:
        return None  # the sum would change type: a float64 sum into a float32 output
    index = set(facts.index_vars)
    lets = {c.name for c in stmt.where if isinstance(c, Let)}
    ranges: dict[str, tuple[Expr, Expr]] = {}
    shared = []
    for c in stmt.where:
        if not isinstance(c, RangeConstraint):
            continue
        bounds = _names(c.lo) | _names(c.hi)
        if isinstance(c.expr, Var) and c.expr.name in index:
            if c.expr.name in ranges or not bounds <= sizes:
                return None
            ranges[c.expr.name] = (c.lo, c.hi)
            shared.append(c)
        elif (names := _names(c.expr) | bounds) <= index | sizes and not names & lets:
            shared.append(c)  # a condition of the left-hand side's variables only
    if set(ranges) != index:
        return None
    return ranges, tuple(shared), reads


def _proved(facts: StmtFacts, poly: PolyStmt, params: tuple[str, ...], shared: tuple) -> bool:
    """isl's part: the write is affine and not injective, and the scatter's domain
    (`shared`) is the statement's domain with the reduction variables projected out."""
    if poly.nonaffine_write is not None:
        return False
    with isl_failures(facts.stmt):
        try:
            if poly.lhs_injective():
                return False
            scatter = dataclasses.replace(facts.stmt, where=shared)
            space = StmtSpace(facts.index_vars, params)
            return bool(domain_of(scatter, space, poly.name).is_equal(poly.lhs_domain()))
        except NotAffine:
            return False


def _order(facts: StmtFacts, reads: list[Access]) -> tuple[str, ...]:
    """The scratch tensor's variables: the plain ones first, then the rest grouped by
    the read each is a plain subscript of, the last read's group first (module doc)."""
    plain = plain_vars(facts)
    rest = [v for v in facts.index_vars if v not in plain]
    key: dict[str, tuple[int, int]] = {}
    for v in rest:
        key[v] = (-len(reads) - 1, facts.index_vars.index(v))
        for r, read in enumerate(reads):
            if Var(v) in read.args:
                key[v] = (-r, read.args.index(Var(v)))
                break
    return (*plain, *sorted(rest, key=lambda v: key[v]))


def _names(e: Expr) -> set[str]:
    return {v.name for v in var_uses((e,))}


def _sub(a: Expr, b: Expr) -> Expr:
    if isinstance(b, Const) and b.value == 0:
        return a
    return Binary(BinOp.SUB, a, b)


__all__ = ["SCRATCH_SUFFIX", "Factored", "factor_scatters"]
