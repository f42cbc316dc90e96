"""The polyhedral statement model: each statement of a ranged def as isl objects.

Requires: a `RangedDef` (every index and reduction variable has a `where` range).
Ensures:  `build_statements` returns one `PolyStmt` per statement, in order:

    domain   S<k>[vars] : the where clauses (ranges and [tcc] affine filters), with the
             size parameters (all >= 1) as isl parameters
    write    S<k>[vars] -> O[subscripts]
    reads    S<k>[vars] -> T[subscripts], quasi-affine (`/`, `%` by constants, min, max)
    nonaffine_reads   reads with a subscript isl cannot express (`A(B(i))`, `A(i * j)`),
             kept apart and explicit: `may_read` constrains only their affine dimensions
    nonaffine_write   [tcc] a left-hand side with such a subscript (a data-dependent
             scatter, `E_grad(idx(b), d) += ...`), or None. Then `write` is its
             `may_write`: every element of the output's box in the non-affine
             dimensions, exact in the others. Never an exact write: it is not injective,
             and does not cover the box (so `op!` initialises the box first)

Worked example: statement 0 of matmul `C(m, n) +=! A(m, k) * B(k, n)` gives
domain `[M, N, K] -> { S0[m, n, k] : 0 <= m < M and 0 <= n < N and 0 <= k < K }`,
write `S0[m, n, k] -> C[m, n]`, reads `S0[m, n, k] -> A[m, k]` and `-> B[k, n]`.
A reduction of an output written by an earlier statement also reads its left-hand
side (`implicit=True`). These objects are consumed by later poly passes only.
"""

from __future__ import annotations

from dataclasses import dataclass

import islpy as isl

from compiler.frontend.ast import Access, Expr, RangeConstraint, Stmt
from compiler.frontend.checked import RangedDef, StmtFacts
from compiler.names import NameSupply
from compiler.poly.accesses import lets_of, reads_of
from compiler.poly.failures import isl_failures
from compiler.poly.isl_bridge import NotAffine, StmtSpace, condition_of, expr_to_aff


@dataclass(frozen=True)
class PolyRead:
    tensor: str
    relation: isl.Map
    access: Access
    implicit: bool = False


@dataclass(frozen=True)
class NonAffineRead:
    """A read with data-dependent or non-affine subscripts, never treated as affine.
    `dims`: the subscript positions isl cannot express; `may_read` relates each
    instance to every element it may read (exact in the other dimensions)."""

    tensor: str
    access: Access
    dims: tuple[int, ...]
    may_read: isl.Map


@dataclass(frozen=True)
class NonAffineWrite:
    """A left-hand side with data-dependent or non-affine subscripts at `dims`;
    `may_write` relates each instance to every element of the output's box it may
    write (exact in the other dimensions)."""

    tensor: str
    access: Access
    dims: tuple[int, ...]
    may_write: isl.Map


@dataclass(frozen=True)
class PolyStmt:
    name: str
    index: int
    stmt: Stmt
    index_vars: tuple[str, ...]
    reduction_vars: tuple[str, ...]
    domain: isl.Set
    write: isl.Map
    reads: tuple[PolyRead, ...]
    nonaffine_reads: tuple[NonAffineRead, ...]
    nonaffine_write: NonAffineWrite | None = None

    @property
    def vars(self) -> tuple[str, ...]:
        return self.index_vars + self.reduction_vars

    def lhs_injective(self) -> bool:
        """True when distinct values of the left-hand-side variables write distinct
        elements (an affine write only: see `nonaffine_write`)."""
        n_idx, n_red = len(self.index_vars), len(self.reduction_vars)
        write = self.write.project_out(isl.dim_type.in_, n_idx, n_red)
        return bool(write.is_injective())

    def lhs_domain(self) -> isl.Set:
        """The values of the left-hand-side variables for which some instance runs
        (the domain with the reduction variables projected out)."""
        n_idx, n_red = len(self.index_vars), len(self.reduction_vars)
        return self.domain.project_out(isl.dim_type.set, n_idx, n_red).set_tuple_name(self.name)


def domain_of(stmt: Stmt, space: StmtSpace, name: str, *, coalesce: bool = True) -> isl.Set:
    """The iteration domain of `stmt`: its where ranges and filters, sizes >= 1;
    coalesced (fewer disjuncts, simpler bounds to print) unless asked not to: a caller
    that only tests emptiness skips it (a gather piece's `min`/`max` bounds make
    disjuncts that took isl 140 ms to coalesce)."""
    lets = lets_of(stmt)
    domain = space.context
    for clause in stmt.where:
        if isinstance(clause, RangeConstraint):
            domain = domain & condition_of(clause.expr, clause.lo, clause.hi, space, lets)
    return (domain.coalesce() if coalesce else domain).set_tuple_name(name)


def _relation(
    access: Access, space: StmtSpace, domain: isl.Set, lets: dict
) -> tuple[isl.Map, tuple[int, ...]]:
    """`S[vars] -> T[args]` and the positions of the subscripts that are not affine."""
    relation = isl.Map.from_domain(space.universe)
    bad: list[int] = []
    for k, arg in enumerate(access.args):
        try:
            dim = isl.Map.from_pw_aff(expr_to_aff(arg, space, lets))
        except NotAffine:
            bad.append(k)
            dim = isl.Map.from_domain_and_range(space.universe, isl.Set("{ [t] }"))
            dim = dim.align_params(space.universe.get_space())
        relation = relation.flat_range_product(dim)
    relation = relation.set_tuple_name(isl.dim_type.in_, domain.get_tuple_name())
    relation = relation.set_tuple_name(isl.dim_type.out, access.name)
    return relation.intersect_domain(domain), tuple(bad)


def tensor_extents(ranged: RangedDef) -> dict[str, tuple[Expr, ...]]:
    """Every tensor's shape as TC expressions of the sizes (outputs: declared, or the
    upper ends of their index ranges)."""
    result: dict[str, tuple[Expr, ...]] = {}
    for t in ranged.checked.tensors:
        if t.dims is not None:
            result[t.name] = tuple(t.dims)
        else:
            result[t.name] = tuple(b.hi for b in ranged.bounds_of(t.name))
    return result


def _box(ranged: RangedDef, tensor: str, params: tuple[str, ...]) -> isl.Set:
    """`T[d...] : 0 <= d_j < extent_j`, the whole of `tensor` (a data-dependent
    left-hand side's output always has a declared shape: range inference requires it)."""
    extent = tensor_extents(ranged)[tensor]
    names = NameSupply(params).numbered("d", len(extent))
    space = StmtSpace(names, params)
    box = space.context
    for name, hi in zip(names, extent, strict=True):
        d = space.var(name)
        try:
            box = box & space.const(0).le_set(d) & d.lt_set(expr_to_aff(hi, space))
        except NotAffine:
            box = box & space.const(0).le_set(d)
    return box.set_tuple_name(tensor)


def reads_in_bounds(ranged: RangedDef, stmt: Stmt, space: StmtSpace, domain: isl.Set) -> isl.Set:
    """The points of `domain` where every affine read of an input (a tensor of declared
    shape) is inside that input. For a call whose reads are all in bounds this is
    `domain` itself; the gather pass uses it so that a piece that runs only for sizes
    where a read is out of bounds (a forward def valid for some sizes only) is empty."""
    params = ranged.checked.size_params
    inputs = {t.name for t in ranged.checked.inputs if t.dims is not None}
    lets = lets_of(stmt)
    result = domain
    for read in reads_of(stmt, set()):
        if read.access.name not in inputs:
            continue
        relation, bad = _relation(read.access, space, domain, lets)
        if bad:
            continue
        box = _box(ranged, read.access.name, params)
        result = result & relation.intersect_range(box).domain()
    return result


def build_statements(ranged: RangedDef) -> tuple[PolyStmt, ...]:
    """One `PolyStmt` per statement of `ranged`, in textual order."""
    result: list[PolyStmt] = []
    written: set[str] = set()
    for k, facts in enumerate(ranged.checked.stmts):
        with isl_failures(facts.stmt):
            result.append(_poly_stmt(ranged, k, facts, written))
        written.add(facts.stmt.lhs.name)
    return tuple(result)


def _poly_stmt(ranged: RangedDef, k: int, facts: StmtFacts, written: set[str]) -> PolyStmt:
    """Statement `k`; `written`: the tensors earlier statements write."""
    params = ranged.checked.size_params
    stmt, name = facts.stmt, f"S{k}"
    space = StmtSpace(facts.all_vars, params)
    domain = domain_of(stmt, space, name)
    lets = lets_of(stmt)
    write, bad = _relation(stmt.lhs, space, domain, lets)
    scatter = None
    if bad:
        write = write.intersect_range(_box(ranged, stmt.lhs.name, params))
        scatter = NonAffineWrite(stmt.lhs.name, stmt.lhs, bad, write)
    reads: list[PolyRead] = []
    nonaffine: list[NonAffineRead] = []
    for read in reads_of(stmt, written):
        relation, bad = _relation(read.access, space, domain, lets)
        if bad:
            nonaffine.append(NonAffineRead(read.access.name, read.access, bad, relation))
        else:
            reads.append(PolyRead(read.access.name, relation, read.access, read.implicit))
    return PolyStmt(
        name,
        k,
        stmt,
        facts.index_vars,
        facts.reduction_vars,
        domain,
        write,
        tuple(reads),
        tuple(nonaffine),
        scatter,
    )
