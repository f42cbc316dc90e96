"""Padding a gather's clamped read: constant reduction bounds for transposed convolutions.

Requires: a `RangedDef` after the gather pass (`poly.gather`).
Ensures:  `pad_gathers(ranged) -> Padded`: the def the CPU schedule lowers
(`Padded.ranged`), computing the same outputs, where each `+=` / `+=!` statement whose
reduction ranges are clamped only to keep one read in bounds reads a zero-padded copy
of that tensor instead, over the unclamped ranges:

    I_grad(n, c, y, x) +=! O_grad(n, m, y - kh, x - kw) * W1(m, c, kh, kw)
        where kh in max(0, y + KH - H):min(KH, y + 1), kw in ...
  ==>
    O_grad_pad(n, m, y, x) +=! O_grad(n, m, y - (KH - 1), x - (KW - 1))
        where y in KH - 1:H, x in KW - 1:W          (the rest of the box stays 0)
    I_grad(n, c, y, x) +=! O_grad_pad(n, m, y - kh + (KH - 1), x - kw + (KW - 1)) * W1(m, c, kh, kw)
        where kh in 0:KH, kw in 0:KW

This is the CPU target's schedule, not mathematics: the def the user, `--grad` and
autodiff see never has a pad. `cpu.model.schedule(..., pad=True)` (the CPU model's `rewrite`) calls this pass
when it builds the nests; in `Padded.ranged` the pad is an output declared with its
shape (so the isl passes see one more tensor), and `Padded.scratch` names it: the
lowering (`poly.astgen`) makes it a zero-filled temporary of the loop function
(`loops.Alloc`, around the nests that write and read it), never a parameter of the
kernel. `--emit loops` shows the Alloc, its copy and the versions.
Why: the clamped bounds depend on the output variables (`y`, `x`), so the CPU model
cannot register-tile the nest (its lanes need bounds independent of the reduction),
and a transposed convolution ran 4-6x slower than the forward one at the same FLOPs;
with constant window bounds it is a forward convolution (a flipped kernel) and gets
the forward's register tiles and channel order. The GPU mapping does not pad
(`cuda.gpu_lower`): it gathers one thread per output element, where the clamps only
shorten a thread's loop, and no GPU was at hand to show that a padded copy pays there.

When: the statement's right-hand side is a product with the read as a factor (so a
padded zero contributes nothing), every clamped reduction variable appears in that
read only, in one subscript `v - r` or `v + r` (`v` an output variable), and isl
proves that the statement's domain is exactly the unclamped domain intersected with
"the read is in bounds" (so the clamps come from that read and from nothing else),
and that the pads are non-negative. Anything else is left as it is.

Whether it pays: the padded statement runs each clamped variable over its whole range,
the clamped one over at most the read's extent in that subscript. Where the sizes may
make the padded box the larger (a correlation-shaped gather, `_choice`), the copy and
the padded statement are guarded by the sizes for which it pays and the clamped
statement follows, `+=` and guarded by the others: the loops keep both versions and
the sizes of the call pick one.
"""

from __future__ import annotations

import dataclasses

import islpy as isl

from compiler.cpu.scratch import rechecked
from compiler.frontend.ast import (
    Access,
    AssignOp,
    Binary,
    BinOp,
    Call,
    Const,
    Expr,
    Let,
    Param,
    RangeConstraint,
    ScalarType,
    Stmt,
    Unary,
    UnaryOp,
    Var,
)
from compiler.frontend.checked import Bound, RangedDef, StmtFacts
from compiler.frontend.scopes import is_dimension
from compiler.frontend.visit import walk
from compiler.poly.failures import isl_failures
from compiler.poly.isl_bridge import (
    NotAffine,
    StmtSpace,
    expr_to_aff,
    pwaff_to_expr,
)


@dataclasses.dataclass(frozen=True)
class Padded:
    """What the CPU schedule lowers: `ranged`, the def with its clamped gathers reading
    padded copies; `scratch`, the pads (outputs of `ranged` only, temporaries of the
    loops: no caller sees them); `origins`, for each statement of `ranged`, the
    position of the statement of the input def it comes from."""

    ranged: RangedDef
    scratch: tuple[str, ...] = ()
    origins: tuple[int, ...] = ()


def pad_gathers(ranged: RangedDef, always: frozenset[int] = frozenset()) -> Padded:
    """`ranged` with every clamped gather that qualifies reading a padded copy (the
    module doc); `ranged` itself, no scratch, when none does. The statements in
    `always` (positions) are padded for every size when they qualify, without the
    size test of `_choice` and without the clamped version: the parity classes of
    `cpu.parity`, whose windows are a kernel's extent over the stride."""
    checked = ranged.checked
    taken = {t.name for t in checked.tensors} | set(checked.size_params)
    stmts: list[Stmt] = []
    origins: list[int] = []
    outputs: list[Param] = []
    bounds = list(ranged.output_bounds)
    for k, (stmt, facts) in enumerate(zip(checked.definition.stmts, checked.stmts, strict=True)):
        with isl_failures(stmt):
            found = _padding(dataclasses.replace(facts, stmt=stmt), ranged, k in always)
        made = (stmt,)
        if found is not None:
            name = _fresh(f"{found.read.name}_pad", taken)
            taken.add(name)
            copy, rewritten, param = found.rewrite(name)
            made = found.versions(copy, rewritten)
            outputs.append(param)
            bounds.append(
                (name, tuple(Bound(Const(0, ScalarType.INT32), d) for d in param.dims or ()))
            )
        stmts += made
        origins += [k] * len(made)
    if not outputs:
        return Padded(ranged, (), tuple(range(len(stmts))))
    padded = rechecked(ranged, stmts, outputs, bounds, "padded gather")
    return Padded(padded, tuple(p.name for p in outputs), tuple(origins))


@dataclasses.dataclass(frozen=True)
class _Padding:
    stmt: Stmt
    read: Access
    dtype: ScalarType
    extents: tuple[Expr, ...]  # the read tensor's shape
    pads: dict[int, tuple[Expr, Expr, Expr]]  # subscript -> (before, before + extent, padded)
    natural: dict[str, tuple[Expr, Expr]]  # clamped variable -> its unclamped range
    # `(padded, exact)`: size-only guards choosing the padded statement or the clamped
    # one (`_choice`); None: the padded one for every size
    guards: tuple[RangeConstraint, RangeConstraint] | None

    def versions(self, copy: Stmt, padded: Stmt) -> tuple[Stmt, ...]:
        """The copy and the padded statement, alone or both guarded by the sizes that
        make padding pay and followed by the clamped statement, `+=`, for the other
        sizes (module doc)."""
        if self.guards is None:
            return copy, padded
        pays, not_pays = self.guards
        exact = dataclasses.replace(self.stmt, op=AssignOp.PLUS, where=(*self.stmt.where, not_pays))
        guarded = tuple(dataclasses.replace(s, where=(*s.where, pays)) for s in (copy, padded))
        return (*guarded, exact)

    def rewrite(self, name: str) -> tuple[Stmt, Stmt, Param]:
        dims = tuple(self.pads[d][2] if d in self.pads else e for d, e in enumerate(self.extents))
        names = [f"i{d}" for d in range(len(self.extents))]
        index = tuple(
            _sub(Var(n), self.pads[d][0]) if d in self.pads else Var(n) for d, n in enumerate(names)
        )
        where = tuple(
            RangeConstraint(Var(n), self.pads[d][0], self.pads[d][1])
            if d in self.pads
            else RangeConstraint(Var(n), Const(0, ScalarType.INT32), self.extents[d])
            for d, n in enumerate(names)
        )
        lhs = Access(name, tuple(Var(n) for n in names))
        copy = Stmt(lhs, AssignOp.PLUS_INIT, Access(self.read.name, index), where)
        padded_read = Access(
            name,
            tuple(
                _add(a, self.pads[d][0]) if d in self.pads else a
                for d, a in enumerate(self.read.args)
            ),
        )
        rhs = _replace(self.stmt.rhs, self.read, padded_read)
        where2 = tuple(
            RangeConstraint(c.expr, *self.natural[c.expr.name])
            if isinstance(c, RangeConstraint)
            and isinstance(c.expr, Var)
            and c.expr.name in self.natural
            else c
            for c in self.stmt.where
        )
        stmt = dataclasses.replace(self.stmt, rhs=rhs, where=where2)
        return copy, stmt, Param(name, self.dtype, dims)


def _padding(facts: StmtFacts, ranged: RangedDef, always: bool = False) -> _Padding | None:
    stmt = facts.stmt
    if stmt.op not in (AssignOp.PLUS, AssignOp.PLUS_INIT) or stmt.equivalent is not None:
        return None
    ranges = {
        c.expr.name: (c.lo, c.hi)
        for c in stmt.where
        if isinstance(c, RangeConstraint) and isinstance(c.expr, Var)
    }
    index_vars = set(facts.index_vars)
    clamped: dict[str, tuple[Expr, Expr]] = {}
    for r in facts.reduction_vars:
        lo, hi = ranges.get(r, (None, None))
        if lo is None or hi is None:
            return None
        if not (_mentions_any(lo, index_vars) or _mentions_any(hi, index_vars)):
            continue
        natural = (_unclamped(lo, "max", index_vars), _unclamped(hi, "min", index_vars))
        if natural[0] is None or natural[1] is None:
            return None
        clamped[r] = natural  # type: ignore[assignment]
    if not clamped:
        return None
    factors = _factors(stmt.rhs)
    if factors is None:
        return None
    reads = _accesses(stmt.rhs)
    holders = {id(a) for a in reads for r in clamped if _uses_compound(a, r, index_vars)}
    candidates = [a for a in reads if id(a) in holders]
    if len(candidates) != 1 or not any(f is candidates[0] for f in factors):
        return None
    read = candidates[0]
    if not _finite_elsewhere(stmt, factors, read, set(clamped)):
        return None
    others = [a for a in reads if a is not read and any(_mentions(a, r) for r in clamped)]
    checked = ranged.checked
    tensor = next((t for t in checked.tensors if t.name == read.name), None)
    if tensor is None or read.name == stmt.lhs.name:
        return None
    extents = _extents(ranged, read.name)
    if extents is None:
        return None
    dims: dict[int, str] = {}
    for d, arg in enumerate(read.args):
        used = [r for r in clamped if _mentions(arg, r)]
        if not used:
            continue
        if len(used) != 1 or not _v_plus_minus_r(arg, used[0], index_vars):
            return None
        dims[d] = used[0]
    if set(dims.values()) != set(clamped):
        return None
    other_extents = [_extents(ranged, a.name) for a in others]
    if any(e is None for e in other_extents):
        return None
    try:
        domains = _Domains.of(facts, ranges, clamped, extents, checked.size_params)
        pads = _pads(domains, read, dims, extents)
        if pads is None or not _in_bounds(domains, others, other_extents):
            return None
        choice = True if always else _choice(domains, clamped, [extents[d] for d in dims])
    except NotAffine:
        return None
    if choice is False:
        return None
    guards = None if choice is True else choice
    return _Padding(stmt, read, tensor.dtype, extents, pads, clamped, guards)


def _choice(
    domains: _Domains, natural: dict[str, tuple[Expr, Expr]], extents: list[Expr]
) -> bool | tuple[RangeConstraint, RangeConstraint]:
    """Whether padding pays: True for every size, False for none, else the guards
    `(pays, does not)`. The padded nest runs each clamped variable over its whole
    range (sum of extents X); the clamped one over at most the read's extents in its
    subscripts (sum D). Padding pays while X <= 2 D: a convolution's input gradient
    (X = KH + KW against the output's extents). A correlation-shaped gradient (the
    weight gradient `WG(kh) += G(h) * I(h + kh)` differentiated) has the roles
    reversed: X is the image's extent, D the window's, and padding did 18x the
    work. Which holds depends on the sizes, so both statements are kept."""
    x = _sum([_sub(hi, lo) for lo, hi in natural.values()])
    d = _sum(extents)
    zero, one = Const(0, ScalarType.INT32), Const(1, ScalarType.INT32)
    twice = Binary(BinOp.MUL, Const(2, ScalarType.INT32), d)
    slack = Binary(BinOp.SUB, twice, x)  # 2 D - X (never a bare size: a range needs a variable)
    space, context = domains.space, domains.context
    pays_set = expr_to_aff(slack, space).ge_set(space.const(0))
    if context.is_subset(pays_set):
        return True
    if (context & pays_set).is_empty():
        return False
    # pays: 0 <= 2 D - X <= 2 D (X >= 0 wherever the statement runs); not: X - 2 D >= 1
    excess = Binary(BinOp.SUB, x, twice)
    return (
        RangeConstraint(slack, zero, Binary(BinOp.ADD, twice, one)),
        RangeConstraint(excess, one, Binary(BinOp.ADD, x, one)),
    )


@dataclasses.dataclass(frozen=True)
class _Domains:
    """A statement's isl space, the sizes' context (with the padded read's extents
    >= 0), its domain, and its domain with the clamped ranges unclamped."""

    space: StmtSpace
    context: isl.Set
    domain: isl.Set
    relaxed: isl.Set

    @staticmethod
    def of(
        facts: StmtFacts,
        ranges: dict[str, tuple[Expr, Expr]],
        clamped: dict[str, tuple[Expr, Expr]],
        extents: tuple[Expr, ...],
        params: tuple[str, ...],
    ) -> _Domains:
        space = StmtSpace(facts.all_vars, params)
        ctx = space.context
        for e in extents:  # every extent of the read is >= 0 where the def runs
            ctx = ctx & expr_to_aff(e, space).ge_set(space.const(0))
        domain = relaxed = ctx
        for v in facts.all_vars:
            domain = domain & _range_set(space, v, ranges[v])
            relaxed = relaxed & _range_set(space, v, clamped.get(v, ranges[v]))
        return _Domains(space, ctx, domain, relaxed)


def _range_set(space: StmtSpace, v: str, bounds: tuple[Expr, Expr]) -> isl.Set:
    lo, hi = bounds
    var = space.var(v)
    return expr_to_aff(lo, space).le_set(var) & var.lt_set(expr_to_aff(hi, space))


def _pads(
    domains: _Domains, read: Access, dims: dict[int, str], extents: tuple[Expr, ...]
) -> dict[int, tuple[Expr, Expr, Expr]] | None:
    """The pads before and after each padded subscript, when isl proves the clamps
    are exactly the read's bounds and the pads are non-negative (module doc)."""
    space, relaxed = domains.space, domains.relaxed
    inside = relaxed
    for d in dims:
        sub = expr_to_aff(read.args[d], space)
        inside = inside & space.const(0).le_set(sub) & sub.lt_set(expr_to_aff(extents[d], space))
    if not inside.is_equal(domains.domain):
        return None
    params, context = space.params, domains.context.params()
    pads: dict[int, tuple[Expr, Expr, Expr]] = {}
    for d in dims:
        sub = expr_to_aff(read.args[d], space)
        values = isl.Map.from_pw_aff(sub).intersect_domain(relaxed).range()
        if values.is_empty():
            return None
        # the extent (sizes only) as a PwAff on the same space as dim_max's
        # (for every size: the copy runs even where the statement's domain is empty)
        image = isl.Map.from_pw_aff(expr_to_aff(extents[d], space)).intersect_domain(space.context)
        extent = image.range().dim_max(0)
        before = values.dim_min(0).neg()
        after = values.dim_max(0) - extent + 1
        if not (_nonneg(before, context) and _nonneg(after, context)):
            return None
        if context.is_subset(values.params().align_params(context.get_space())):
            pads[d] = (
                pwaff_to_expr(before, params, context),
                pwaff_to_expr(before + extent, params, context),  # the copy's end
                pwaff_to_expr(before + extent + after, params, context),  # padded extent
            )
            continue
        # sizes at which the statement runs nowhere (a parity class whose residue has
        # no window element, `cpu.parity`): the formulas may be negative there, and
        # the copy, which runs at every size, would write out of bounds
        lo = Call("max", (_int(0), pwaff_to_expr(before, params, context)))
        hi = Call("max", (_int(0), pwaff_to_expr(after, params, context)))
        end = _add(lo, extents[d])
        pads[d] = (lo, end, _add(end, hi))
    if not all(is_dimension(e) for pad in pads.values() for e in pad):
        return None  # a pad piecewise in the sizes (`N == 1 ? 0 : 1`, fuzz seed 26009)
    return pads


def _in_bounds(
    domains: _Domains, reads: list[Access], extents: list[tuple[Expr, ...] | None]
) -> bool:
    """Whether `reads` stay in bounds over the unclamped domain."""
    space = domains.space
    for read, shape in zip(reads, extents, strict=True):
        for arg, hi in zip(read.args, shape or (), strict=True):
            sub = expr_to_aff(arg, space)
            bad = sub.lt_set(space.const(0)) | sub.ge_set(expr_to_aff(hi, space))
            if not (bad & domains.relaxed).is_empty():
                return False
    return True


def _nonneg(pw: isl.PwAff, context: isl.Set) -> bool:
    """Whether a parameter-only PwAff is >= 0 wherever the sizes satisfy `context`."""
    negative = pw.lt_set(pw - pw)
    return bool((negative & context.align_params(negative.get_space())).is_empty())


def _extents(ranged: RangedDef, name: str) -> tuple[Expr, ...] | None:
    """The declared shape of an input, or of an output that declares one (a
    gradient's `<x>_grad_acc`)."""
    definition = ranged.checked.definition
    for p in (*definition.params, *definition.outputs):
        if p.name == name:
            return p.dims
    return None


def _unclamped(e: Expr, fn: str, index_vars: set[str]) -> Expr | None:
    """The argument of a `max` (`min`) bound that does not mention output variables."""
    if not _mentions_any(e, index_vars):
        return e
    if isinstance(e, Call) and e.fn == fn and len(e.args) == 2:
        free = [a for a in e.args if not _mentions_any(a, index_vars)]
        if len(free) == 1:
            return free[0]
    return None


def _finite_elsewhere(stmt: Stmt, factors: list[Expr], read: Access, clamped: set[str]) -> bool:
    """Whether every factor but `read` that depends on a clamped variable is a plain
    tensor read (checked in bounds by the caller): over the unclamped ranges the padded
    read is 0, which zeroes the term only if the other factors stay finite there (a
    `let` or an expression of a clamped variable, `t0 = logb(A(k / 2))` or
    `1.0 / float(k - 2)`, may be infinite or read out of bounds where the clamp kept
    the statement from evaluating it)."""
    lets = {c.name: c.value for c in stmt.where if isinstance(c, Let)}
    dependent = set(clamped)
    changed = True
    while changed:  # lets that read a clamped variable, directly or through other lets
        changed = False
        for name, value in lets.items():
            if name not in dependent and _mentions_any(value, dependent):
                dependent.add(name)
                changed = True
    for f in factors:
        if f is read or not _mentions_any(f, dependent):
            continue
        if not isinstance(f, Access) or any(_mentions_any(a, dependent - clamped) for a in f.args):
            return False
    return True


def _factors(e: Expr) -> list[Expr] | None:
    """The factors of a product (through negations), or None for anything else."""
    if isinstance(e, Binary) and e.op is BinOp.MUL:
        a, b = _factors(e.lhs), _factors(e.rhs)
        return None if a is None or b is None else a + b
    if isinstance(e, Unary) and e.op is UnaryOp.NEG:
        return _factors(e.operand)
    return [e]


def _v_plus_minus_r(arg: Expr, r: str, index_vars: set[str]) -> bool:
    if not isinstance(arg, Binary) or arg.op not in (BinOp.ADD, BinOp.SUB):
        return False
    a, b = arg.lhs, arg.rhs
    if b == Var(r) or (arg.op is BinOp.ADD and a == Var(r)):
        other = a if b == Var(r) else b
        return isinstance(other, Var) and other.name in index_vars
    return False


def _uses_compound(a: Access, r: str, index_vars: set[str]) -> bool:
    """Whether a subscript of `a` combines `r` with an output variable (`y - r`): the
    read that clamps `r`. A subscript of `r` and constants only (a parity class's
    `W1(m, c, 2 * t + 1)`, `cpu.parity`) is one of the other reads, which must stay in
    bounds over `r`'s unclamped range."""
    return any(_mentions(x, r) and _mentions_any(x, index_vars) for x in a.args)


def _accesses(e: Expr) -> list[Access]:
    return [x for x in walk(e) if isinstance(x, Access)]


def _mentions(e: Expr, v: str) -> bool:
    return _mentions_any(e, {v})


def _mentions_any(e: Expr, names: set[str]) -> bool:
    return any(isinstance(x, Var) and x.name in names for x in walk(e))


def _replace(e: Expr, old: Access, new: Access) -> Expr:
    if e is old:
        return new
    if isinstance(e, Binary):
        return dataclasses.replace(e, lhs=_replace(e.lhs, old, new), rhs=_replace(e.rhs, old, new))
    if isinstance(e, Unary):
        return dataclasses.replace(e, operand=_replace(e.operand, old, new))
    return e


def _add(a: Expr, b: Expr) -> Expr:
    if isinstance(b, Const) and b.value == 0:
        return a
    return Binary(BinOp.ADD, a, b)


def _sub(a: Expr, b: Expr) -> Expr:
    if isinstance(b, Const) and b.value == 0:
        return a
    return Binary(BinOp.SUB, a, b)


def _int(v: int) -> Const:
    return Const(v, ScalarType.INT32)


def _sum(terms: list[Expr]) -> Expr:
    total = terms[0]
    for t in terms[1:]:
        total = _add(total, t)
    return total


def _fresh(base: str, taken: set[str]) -> str:
    name = base
    while name in taken:
        name += "_"
    return name


__all__ = ["Padded", "pad_gathers"]
