"""Companions: a pointwise statement computed inside a later reduction's nest.

Requires: the nests of `poly.schedule`, in execution order, and the sizes' context.
Ensures:  `with_companions(nests, context)`: the same computation, with some pointwise
statements moved into the `companions` of a later nest over the same domain (lowered by
`poly.astgen` at each instance of that nest, before its own statement).

Why: a gradient often has both, reading the same costly terms: for `C(i) +=!
exp(A(i, j)) * b(j)`, `A_grad(i, j) +=! C_grad(i) * b(j) * exp(A(i, j))` and
`b_grad(j) +=! C_grad(i) * exp(A(i, j))`. Apart, `A` is read and `exp` computed
twice; in one nest LLVM computes the shared terms once.

The pointwise statement P: `=` or `+=!`, no reduction variables, its left-hand side
its domain's variables, one nest (no `Init`), every access proven in bounds. The
host R: a later memory-form reduction (not in a register, no register tile, no
alternative, no snapshot, every access proven; parallel if P's nest is) whose domain
equals P's (isl, the
variables matched by name). P moves from its place to R's: no nest from P's place
to R (R included) may read or write P's output, or write what P reads. Each domain
point runs once in R's nest, so P's stores stay those of its own nest; the value
is P's expression, `0 + x` for `+=!` as in its own nest.

The fused nest runs only where its first parallel loop has `COMPANION_MIN_TRIPS`
iterations or more; otherwise the statements run apart, as without companions
(`companion_versions`: both are lowered, under a run-time test of the sizes). A column
sum's parallel loop is its strips of 1024 columns: a bias gradient with 256 columns
has one strip, and its companion, alone a parallel nest over rows, would run on one
thread inside it. On a host with more cores than strips the fused nest still uses
one thread a strip.

Worked example: the gradient of `C(i) +=! exp(A(i, j)) * b(j)` read `A` twice and
computed `exp` twice; with `A_grad` a companion of the column sum `b_grad`, each strip
of 1024 columns computes both, and its `vjp` at 4096^2 (float32, 2 threads, Zen 3)
went 24.3-24.6 -> 19.3-19.8 ms.
"""

from __future__ import annotations

import dataclasses

import islpy as isl

from compiler import loops as L
from compiler.frontend.ast import Access, AssignOp, Exists, Expr, Let, RangeConstraint, Var
from compiler.frontend.checked import StmtFacts
from compiler.frontend.visit import walk
from compiler.loops.ir import walk_stmts
from compiler.poly.lower_expr import I64, const
from compiler.poly.schedule import Nest, NestKind


def with_companions(nests: list[Nest], context: isl.Set) -> list[Nest]:
    """`nests` with each pointwise statement that a later reduction can host moved
    into that reduction's `Nest.companions` (see the module doc)."""

    out = list(nests)
    k = 0
    while k < len(out):
        host = _host_of(out, k, context) if _pointwise(out, k) else None
        if host is None:
            k += 1
            continue
        h = out[host]
        out[host] = dataclasses.replace(h, companions=(*h.companions, out[k]))
        del out[k]
    return out


def _pointwise(nests: list[Nest], k: int) -> bool:
    p = nests[k]
    lhs = p.facts.stmt.lhs.args
    return (
        p.kind is NestKind.STMT
        and not p.facts.reduction_vars
        and p.facts.stmt.op in (AssignOp.ASSIGN, AssignOp.PLUS_INIT)
        and _plain_nest(p)
        and not p.companions
        and all(isinstance(a, Var) for a in lhs)
        and sorted(a.name for a in lhs if isinstance(a, Var)) == sorted(p.dims)
        and sum(n.index == p.index for n in nests) == 1
    )


def _plain_nest(n: Nest) -> bool:
    return not (n.snapshot or n.unproven or n.write_checks or n.alternative is not None)


def _host_of(nests: list[Nest], k: int, context: isl.Set) -> int | None:
    """The nest that can host `nests[k]` (see `with_companions`), or None."""
    p = nests[k]
    reads = _tensors_read(p.facts)
    for m in range(k + 1, len(nests)):
        n = nests[m]
        for s in (n, *n.companions):  # a companion runs where its host does
            if p.target in _tensors_read(s.facts) or s.target in (p.target, *reads):
                return None
        host = (
            n.kind is NestKind.STMT
            and n.facts.stmt.op.is_reduction
            and bool(n.facts.reduction_vars)
            and not n.accumulate
            and n.lanes <= 1
            and (n.parallel or not p.parallel)
            and _plain_nest(n)
        )
        if host and _same_domain(p.domain, n.domain, context):
            return m
    return None


def _tensors_read(facts: StmtFacts) -> set[str]:
    """Every tensor the statement names: its reads on the right, in its where clauses
    and in its left-hand side's subscripts (`E(B(i, 0)) +=! ...` reads `B`), and its
    output (a superset of its reads, which is all the moves need)."""
    stmt = facts.stmt
    exprs: list[Expr] = [stmt.lhs, stmt.rhs]
    for c in stmt.where:
        exprs += [c.value] if isinstance(c, Let) else [c.expr, *_bounds(c)]
    return {n.name for e in exprs for n in walk(e) if isinstance(n, Access)}


def _bounds(c: RangeConstraint | Exists) -> list[Expr]:
    return [c.lo, c.hi] if isinstance(c, RangeConstraint) else []


def _same_domain(a: isl.Set, b: isl.Set, context: isl.Set) -> bool:
    """Whether `a` and `b` hold the same points, their dimensions matched by name."""
    names_a = [a.get_dim_name(isl.dim_type.set, k) for k in range(a.dim(isl.dim_type.set))]
    names_b = [b.get_dim_name(isl.dim_type.set, k) for k in range(b.dim(isl.dim_type.set))]
    if sorted(names_a) != sorted(names_b) or len(set(names_a)) != len(names_a):
        return False
    return _canonical(a, context).is_equal(_canonical(b, context))


def _canonical(s: isl.Set, context: isl.Set) -> isl.Set:
    """`s` in the sizes' context, its dimensions in sorted name order, tuple unnamed."""
    names = [s.get_dim_name(isl.dim_type.set, k) for k in range(s.dim(isl.dim_type.set))]
    params = [s.get_dim_name(isl.dim_type.param, k) for k in range(s.dim(isl.dim_type.param))]
    text = (
        f"[{', '.join(params)}] -> {{ {s.get_tuple_name()}[{', '.join(names)}] -> "
        f"[{', '.join(sorted(names))}] }}"
    )
    moved = s.apply(isl.Map(text).align_params(s.get_space()))
    return moved.intersect_params(context.align_params(moved.get_space()))


COMPANION_MIN_TRIPS = 2  # parallel iterations the fused nest needs, else the nests apart


def companion_versions(fused: L.Stmt, apart: L.Stmt, sizes: frozenset[str]) -> L.Stmt:
    """`fused` (a host with its companions) when its first parallel loop has at least
    COMPANION_MIN_TRIPS iterations, else `apart` (the same statements, a nest each).
    A column sum's strips are its parallel loop: with 1024 columns or fewer it has one
    strip and would run its companions on one thread. Just `apart` when that loop's
    bounds are not sizes alone."""
    loop = next((n for n in walk_stmts(fused) if _parallel(n)), None)
    if loop is None or not L.var_names(loop.lo, loop.hi) <= sizes:
        return apart
    span = L.Bin(L.BinOp.SUB, loop.hi, loop.lo)
    enough = L.Bin(L.BinOp.GE, span, const(loop.step * (COMPANION_MIN_TRIPS - 1) + 1, I64))
    return L.If(enough, fused, apart)


def _parallel(n: L.Node) -> bool:
    return isinstance(n, L.For) and n.kind is L.LoopKind.PARALLEL


__all__ = ["COMPANION_MIN_TRIPS", "companion_versions", "with_companions"]
