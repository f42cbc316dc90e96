"""Which accesses of a statement isl proves in bounds over its domain, and which the
generated code must check at run time; whether a read is the element the statement
writes.

Requires: a statement's `PolyStmt` and facts, the tensors' extents, the sizes' context.
Ensures:  `unproven_reads` / `unproven_writes`: the (access, dimension) pairs and the
left-hand-side dimensions not proven in bounds at every point of the domain (the
schedule's `Nest.unproven` and `Nest.write_checks`); `self_reads_of`: the reads of the
statement's own output; `same_element`: a read of exactly the element written.
"""

from __future__ import annotations

from collections.abc import Iterator

import islpy as isl

from compiler.frontend.ast import Access, Expr, Let
from compiler.frontend.checked import StmtFacts
from compiler.frontend.scopes import children
from compiler.poly.build import PolyStmt
from compiler.poly.isl_bridge import NotAffine, StmtSpace, expr_to_aff


def unproven_reads(
    poly: PolyStmt,
    facts: StmtFacts,
    extents: dict[str, tuple[Expr, ...]],
    params: tuple[str, ...],
    context: isl.Set,
) -> frozenset[tuple[Access, int]]:
    """(read, dimension) pairs of the right-hand side, lets and left-hand-side
    subscripts that isl cannot prove in
    bounds at every point of the domain (data-dependent subscripts, reads that a
    ternary guards, preconditions range inference could only warn about)."""
    space = StmtSpace(facts.all_vars, params)
    lets = {c.name: c.value for c in facts.stmt.where if isinstance(c, Let)}
    domain = poly.domain.reset_tuple_id().intersect_params(context)
    found: set[tuple[Access, int]] = set()
    for access in (*_reads(facts), *_lhs_reads(facts)):
        for dim, (arg, hi) in enumerate(zip(access.args, extents[access.name], strict=True)):
            if not _in_bounds(arg, hi, space, lets, domain):
                found.add((access, dim))
    return frozenset(found)


def unproven_writes(
    poly: PolyStmt,
    facts: StmtFacts,
    extents: dict[str, tuple[Expr, ...]],
    params: tuple[str, ...],
    context: isl.Set,
) -> tuple[int, ...]:
    """The dimensions of a data-dependent left-hand side that isl cannot prove in
    bounds (every non-affine one): the store is checked at run time, as interp does."""
    if poly.nonaffine_write is None:
        return ()
    space = StmtSpace(facts.all_vars, params)
    lets = {c.name: c.value for c in facts.stmt.where if isinstance(c, Let)}
    domain = poly.domain.reset_tuple_id().intersect_params(context)
    lhs = facts.stmt.lhs
    return tuple(
        dim
        for dim, (arg, hi) in enumerate(zip(lhs.args, extents[lhs.name], strict=True))
        if not _in_bounds(arg, hi, space, lets, domain)
    )


def _lhs_reads(facts: StmtFacts) -> Iterator[Access]:
    """The reads inside the left-hand side's subscripts (`idx(b)` of `E_grad(idx(b), d)`)."""
    stack: list[Expr] = list(facts.stmt.lhs.args)
    while stack:
        e = stack.pop()
        if isinstance(e, Access):
            yield e
        stack.extend(children(e))


def _in_bounds(arg: Expr, hi: Expr, space: StmtSpace, lets: dict, domain: isl.Set) -> bool:
    try:
        value = expr_to_aff(arg, space, lets)
        bad = value.lt_set(space.const(0)) | value.ge_set(expr_to_aff(hi, space))
    except NotAffine:
        return False
    return bool((bad & domain).is_empty())


def _reads(facts: StmtFacts, name: str | None = None) -> Iterator[Access]:
    """The reads in the right-hand side and lets (of tensor `name` only, if given)."""
    exprs: list[Expr] = [facts.stmt.rhs]
    exprs += [c.value for c in facts.stmt.where if isinstance(c, Let)]
    stack = list(exprs)
    while stack:
        e = stack.pop()
        if isinstance(e, Access) and name in (None, e.name):
            yield e
        stack.extend(children(e))


def self_reads_of(facts: StmtFacts) -> Iterator[Access]:
    """The reads of the statement's own output in its right-hand side and lets."""
    return _reads(facts, facts.stmt.lhs.name)


def same_element(poly: PolyStmt, facts: StmtFacts, read: Access, params: tuple[str, ...]) -> bool:
    """True when `read` reads exactly the element the statement writes."""
    space = StmtSpace(facts.all_vars, params)
    lets = {c.name: c.value for c in facts.stmt.where if isinstance(c, Let)}
    relation = isl.Map.from_domain(space.universe)
    try:
        for arg in read.args:
            relation = relation.flat_range_product(
                isl.Map.from_pw_aff(expr_to_aff(arg, space, lets))
            )
    except NotAffine:
        return False
    relation = relation.set_tuple_name(isl.dim_type.in_, poly.domain.get_tuple_name())
    relation = relation.set_tuple_name(isl.dim_type.out, read.name)
    return bool(relation.intersect_domain(poly.domain).is_equal(poly.write))


__all__ = ["same_element", "self_reads_of", "unproven_reads", "unproven_writes"]
