"""Loop merging: adjacent loops that walk whole, contiguous dimensions become one loop.

Requires: a `RangedDef` (every variable has a `where` range), before the CPU model
chooses any order, tile or lanes (`poly.schedule` calls it after `cpu.pad`).
Ensures:  `merge_loops(ranged) -> Merged`: `Merged.ranged` computes the same values in
the same order of each element's contributions, where in every statement that
qualifies a pair of variables `a, b` is one variable `ab` over `0 : Ea * Eb`, and
every tensor those statements access through them is seen through a *view* whose
dimensions `k, k + 1` are one dimension of `Ea * Eb` elements. `Merged.views` says
how to undo the views on the loops (`unmerge`): a view's access `X[..., ab, ...]`
is the buffer's `X[..., 0, ab, ...]`, the same element (row-major: the flat offset
of `[..., 0, a * Eb + b]` is that of `[..., a, b]`, `cpu.llvm_emit._address`), and
a size made for a product of two sizes (`H_W`) is that product.

    O(n, m, h, w) +=! I(n, c, h, w) * W1(m, c)    where h in 0:H, w in 0:W, ...
  ==>
    O(n, m, hw) +=! I(n, c, hw) * W1(m, c)        where hw in 0:H_W, ...
    (O and I seen as float(N, M, H_W) and float(N, C, H_W); H_W = H * W)

When: `a` and `b` are both output variables or both reduction variables, each
ranges over `0 : E` with `E` an expression of the sizes; every access that uses
either (the left-hand side, the reads, in lets too) has them as two adjacent plain
subscripts `..., a, b, ...` where its tensor's extents are `Ea, Eb` (the whole
dimensions); they appear nowhere else (not in a value, a condition, another
subscript); and every access of each such tensor in the whole def is merged at the
same position (one view per tensor). A tensor read with a data-dependent subscript
is never merged. Pairs are merged innermost first and again until none is left, so
three such loops become one.

Scratch: a scratch tensor of the schedule (`cpu.factor`'s contraction) may be merged
in the statements that access it through the pair and accessed whole in the others
(the scatter that reads it): those statements then access it under a name of its own,
a view (`O_part_view`, an output of the merged def with the tensor's shape), and
`Views.aliases` maps the view to the tensor, so the lowered loops of both index one
buffer. When statements would merge it at different positions, the writer's wins.

Why: a short row defeats the vector and register tiles that the model lays along
the last output dimension: a 1x1 convolution over a 14x14 map tiled 16 lanes wide
along `w` ran every column in the remainder path (2.8x torch); merged, its 196-wide
`hw` takes the packed panels of a matmul. (`loops.collapse` does the same for plain
serial loop pairs after lowering, too late for the schedule's tiles.)
`Options(merge=False)` turns it off.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator

from compiler import loops as L
from compiler.frontend.ast import (
    Access,
    Binary,
    BinOp,
    Const,
    Expr,
    Let,
    RangeConstraint,
    ScalarType,
    Stmt,
    Var,
)
from compiler.frontend.checked import Bound, RangedDef, StmtFacts
from compiler.frontend.printer import print_expr
from compiler.frontend.scopes import name_supply
from compiler.frontend.visit import Mutator, walk
from compiler.poly.build import tensor_extents
from compiler.poly.isl_bridge import NotAffine, expr_to_aff, params_space
from compiler.poly.lower_expr import bound_to_loops
from compiler.poly.schedule import Views


@dataclasses.dataclass(frozen=True)
class Merged:
    ranged: RangedDef
    views: Views


def merge_loops(ranged: RangedDef, scratch: tuple[str, ...] = ()) -> Merged:
    """`ranged` with every qualifying pair of loops merged (the module doc); a
    `scratch` tensor may be seen merged by some statements and whole by others."""
    views: dict[str, tuple[tuple[Expr, ...], list[int]]] = {}
    products: dict[str, Expr] = {}
    aliases: dict[str, str] = {}
    while True:
        plan, torn = _plan(ranged, frozenset(scratch))
        if not plan:
            break
        if torn:
            ranged, plan = _alias(ranged, plan, torn, aliases)
        ranged = _apply(ranged, plan, views, products)
    merged = Views(
        tuple((t, ext, tuple(groups)) for t, (ext, groups) in views.items()),
        tuple(products.items()),
        tuple(aliases.items()),
    )
    return Merged(ranged, merged)


# ------------------------------------------------------------------ which pairs


def _accesses(stmt: Stmt) -> Iterator[Access]:
    """The left-hand side and every read (in the right-hand side and the lets)."""
    yield stmt.lhs
    exprs: list[Expr] = [stmt.rhs, *stmt.lhs.args]
    exprs += [c.value for c in stmt.where if isinstance(c, Let)]
    for e in exprs:
        for n in walk(e):
            if isinstance(n, Access):
                yield n


def _ranges(stmt: Stmt) -> dict[str, list[RangeConstraint]]:
    out: dict[str, list[RangeConstraint]] = {}
    for c in stmt.where:
        if isinstance(c, RangeConstraint) and isinstance(c.expr, Var):
            out.setdefault(c.expr.name, []).append(c)
    return out


def _names(e: Expr) -> set[str]:
    return {n.name for n in walk(e) if isinstance(n, Var)}


def _plan(
    ranged: RangedDef, scratch: frozenset[str] = frozenset()
) -> tuple[dict[int, tuple[str, str, dict[str, int]]], dict[str, set[int]]]:
    """Per statement, one pair `(a, b)` to merge and the position it takes in each
    tensor it accesses; consistent across the def (one view per tensor), except that
    a `scratch` tensor that every merging statement merges at one position may be
    accessed whole elsewhere: the second result, such a tensor -> the statements
    that merge it (they get a view of their own, `_alias`)."""
    checked = ranged.checked
    extents = tensor_extents(ranged)
    sizes = set(checked.size_params)
    blocked = _indirect_tensors(checked.definition.stmts)
    plan: dict[int, tuple[str, str, dict[str, int]]] = {}
    for s, facts in enumerate(checked.stmts):
        for a, b in _pairs(facts.stmt):
            where = _legal(facts, a, b, extents, sizes, blocked)
            if where is not None:
                plan[s] = (a, b, where)
                break
    while True:  # every access of a tensor merged at one position, or none
        wanted: dict[str, set[int | None]] = {}
        for s, facts in enumerate(checked.stmts):
            chosen = plan.get(s)
            for acc in _accesses(facts.stmt):
                k = None if chosen is None else chosen[2].get(acc.name)
                if k is not None and tuple(acc.args[k : k + 2]) != (Var(chosen[0]), Var(chosen[1])):
                    k = None  # another access of the tensor, not through the pair
                wanted.setdefault(acc.name, set()).add(k)
        torn = {t for t, ks in wanted.items() if len(ks) > 1}
        viewed = {t for t in torn & scratch if len(wanted[t] - {None}) == 1}
        dropped = [s for s, (_, _, where) in plan.items() if set(where) & (torn - viewed)]
        for t in torn & scratch - viewed:  # the writer's view first: drop the others'
            at = {
                plan[s][2][t]
                for s in plan
                if checked.stmts[s].stmt.lhs.name == t and t in plan[s][2]
            }
            if at:
                dropped = [s for s in dropped if plan[s][2].get(t) not in at]
        if not dropped:
            users = {t: {s for s, (_, _, where) in plan.items() if t in where} for t in viewed}
            return plan, users
        for s in dropped:
            del plan[s]


def _indirect_tensors(stmts: tuple[Stmt, ...]) -> set[str]:
    """Tensors accessed anywhere with a data-dependent subscript."""
    return {
        acc.name
        for stmt in stmts
        for acc in _accesses(stmt)
        if any(isinstance(n, Access) for arg in acc.args for n in walk(arg))
    }


def _pairs(stmt: Stmt) -> Iterator[tuple[str, str]]:
    """Adjacent plain-variable subscripts of the statement's accesses, innermost first."""
    seen: set[tuple[str, str]] = set()
    found: list[tuple[int, tuple[str, str]]] = []
    for acc in _accesses(stmt):
        n = len(acc.args)
        for k in range(n - 1):
            x, y = acc.args[k], acc.args[k + 1]
            if isinstance(x, Var) and isinstance(y, Var) and (x.name, y.name) not in seen:
                seen.add((x.name, y.name))
                found.append((n - k, (x.name, y.name)))
    for _, pair in sorted(found, key=lambda f: f[0]):
        yield pair


def _legal(
    facts: StmtFacts,
    a: str,
    b: str,
    extents: dict[str, tuple[Expr, ...]],
    sizes: set[str],
    blocked: set[str],
) -> dict[str, int] | None:
    """The position of the pair in each tensor the statement accesses through it, or
    None when merging `a, b` does not qualify (the module doc's conditions)."""
    stmt = facts.stmt
    if a == b or a in facts.lets or b in facts.lets:
        return None
    kinds = [(v in facts.index_vars, v in facts.reduction_vars) for v in (a, b)]
    if kinds[0] != kinds[1] or not any(kinds[0]):
        return None
    ranges = _ranges(stmt)
    bounds = []
    for v in (a, b):
        mine = ranges.get(v, [])
        if len(mine) != 1:
            return None
        lo, hi = mine[0].lo, mine[0].hi
        if not (isinstance(lo, Const) and lo.value == 0) or not _names(hi) <= sizes:
            return None
        bounds.append(hi)
    where: dict[str, int] = {}
    for acc in _accesses(stmt):
        uses = [k for k, arg in enumerate(acc.args) if _names(arg) & {a, b}]
        if not uses:
            continue
        if acc.name in blocked or len(uses) != 2 or uses[1] != uses[0] + 1:
            return None
        k = uses[0]
        if acc.args[k] != Var(a) or acc.args[k + 1] != Var(b):
            return None
        if where.get(acc.name, k) != k:
            return None
        ext = extents[acc.name]
        if not (_equal(ext[k], bounds[0], sizes) and _equal(ext[k + 1], bounds[1], sizes)):
            return None
        where[acc.name] = k
    if not where:
        return None
    # nowhere else: not in a value, a condition, a let (beyond the accesses above)
    stripped = _Pair(a, b, Const(0, ScalarType.INT32)).stmt(stmt)
    if _mentions_elsewhere(stripped, a, b):
        return None
    return where


def _mentions_elsewhere(stmt: Stmt, a: str, b: str) -> bool:
    """Whether `a` or `b` appears in `stmt` other than as their own ranges' variable."""
    exprs: list[Expr] = [stmt.lhs, stmt.rhs]
    if stmt.equivalent is not None:
        exprs.append(stmt.equivalent)
    for c in stmt.where:
        if isinstance(c, RangeConstraint):
            own = c.expr in (Var(a), Var(b))
            exprs += [c.lo, c.hi] if own else [c.expr, c.lo, c.hi]
        elif isinstance(c, Let):
            exprs.append(c.value)
        else:
            exprs.append(c.expr)
    return any(_names(e) & {a, b} for e in exprs)


def _equal(x: Expr, y: Expr, sizes: set[str]) -> bool:
    if x == y:
        return True
    space = params_space(sorted(sizes | _names(x) | _names(y)))
    try:
        return bool(expr_to_aff(x, space).is_equal(expr_to_aff(y, space)))
    except NotAffine:
        return False


class _Pair(Mutator):
    """Each access's adjacent subscripts `a, b` replaced by `merged`."""

    def __init__(self, a: str, b: str, merged: Expr) -> None:
        self.key = (Var(a), Var(b))
        self.merged = merged

    def mutate_Access(self, e: Access) -> Expr:
        e = self.generic(e)  # type: ignore[assignment]
        args, out, k = e.args, [], 0
        while k < len(args):
            if tuple(args[k : k + 2]) == self.key:
                out.append(self.merged)
                k += 2
            else:
                out.append(args[k])
                k += 1
        return e if len(out) == len(args) else dataclasses.replace(e, args=tuple(out))


# ------------------------------------------------------------------ the rewrite


def _alias(
    ranged: RangedDef,
    plan: dict[int, tuple[str, str, dict[str, int]]],
    torn: dict[str, set[int]],
    aliases: dict[str, str],
) -> tuple[RangedDef, dict[int, tuple[str, str, dict[str, int]]]]:
    """`ranged` where each statement that merges a torn scratch tensor accesses it
    under a name of its own (an output declared with the tensor's shape), and `plan`
    in those names; `aliases` records each name -> the tensor it views."""
    checked = ranged.checked
    supply = name_supply(checked.definition)
    infos = {t.name: t for t in checked.tensors}
    params = {p.name: p for p in checked.definition.outputs}
    renames: dict[int, dict[str, str]] = {}
    outputs, tensors, bounds = [], [], []
    for t, users in torn.items():
        name = supply.fresh(t + "_view")
        aliases[name] = aliases.get(t, t)
        outputs.append(dataclasses.replace(params[t], name=name))
        tensors.append(dataclasses.replace(infos[t], name=name))
        bounds.append((name, ranged.bounds_of(t)))
        for s in users:
            renames.setdefault(s, {})[t] = name
    stmts = list(checked.stmts)
    for s, names in renames.items():
        stmts[s] = dataclasses.replace(stmts[s], stmt=_Rename(names).stmt(stmts[s].stmt))
        a, b, where = plan[s]
        plan[s] = (a, b, {names.get(t, t): k for t, k in where.items()})
    definition = dataclasses.replace(
        checked.definition,
        outputs=checked.definition.outputs + tuple(outputs),
        stmts=tuple(f.stmt for f in stmts),
    )
    new = dataclasses.replace(
        checked, definition=definition, tensors=checked.tensors + tuple(tensors), stmts=tuple(stmts)
    )
    return dataclasses.replace(
        ranged, checked=new, output_bounds=ranged.output_bounds + tuple(bounds)
    ), plan


class _Rename(Mutator):
    """Accesses of the tensors in `names` under their new names."""

    def __init__(self, names: dict[str, str]) -> None:
        self.names = names

    def mutate_Access(self, e: Access) -> Expr:
        e = self.generic(e)  # type: ignore[assignment]
        name = self.names.get(e.name)
        return e if name is None else dataclasses.replace(e, name=name)


def _apply(
    ranged: RangedDef,
    plan: dict[int, tuple[str, str, dict[str, int]]],
    views: dict[str, tuple[tuple[Expr, ...], list[int]]],
    products: dict[str, Expr],
) -> RangedDef:
    checked = ranged.checked
    extents = tensor_extents(ranged)
    taken = set(checked.size_params) | {t.name for t in checked.tensors} | set(products)
    sizes = list(checked.size_params)
    merged_dims: dict[str, tuple[int, Expr]] = {}  # tensor -> (k, extent of the view dim)
    stmts: list[StmtFacts] = []
    for s, facts in enumerate(checked.stmts):
        if s not in plan:
            stmts.append(facts)
            continue
        a, b, where = plan[s]
        ranges = _ranges(facts.stmt)
        ea, eb = ranges[a][0].hi, ranges[b][0].hi
        size = _product(ea, eb, products, taken, sizes)
        for t, k in where.items():
            merged_dims[t] = (k, size)
        stmts.append(_merge_stmt(facts, a, b, size))
    for t, (k, _) in merged_dims.items():
        ext, groups = views.setdefault(t, (extents[t], [1] * len(extents[t])))
        groups[k : k + 2] = [groups[k] + groups[k + 1]]
    params = []
    for p in checked.definition.params + checked.definition.outputs:
        if p.name in merged_dims and p.dims is not None:
            p = dataclasses.replace(p, dims=_merge_dims(p.dims, *merged_dims[p.name]))
        params.append(p)
    n_in = len(checked.definition.params)
    definition = dataclasses.replace(
        checked.definition,
        params=tuple(params[:n_in]),
        outputs=tuple(params[n_in:]),
        stmts=tuple(f.stmt for f in stmts),
    )
    tensors = []
    for t in checked.tensors:
        if t.name in merged_dims:
            dims = None if t.dims is None else _merge_dims(t.dims, *merged_dims[t.name])
            t = dataclasses.replace(t, rank=t.rank - 1, dims=dims)
        tensors.append(t)
    bounds = []
    for name, bs in ranged.output_bounds:
        if name in merged_dims:
            k, size = merged_dims[name]
            bs = (*bs[:k], Bound(Const(0, ScalarType.INT32), size), *bs[k + 2 :])
        bounds.append((name, bs))
    new = dataclasses.replace(
        checked,
        definition=definition,
        tensors=tuple(tensors),
        size_params=tuple(sizes),
        stmts=tuple(stmts),
    )
    return dataclasses.replace(ranged, checked=new, output_bounds=tuple(bounds))


def _merge_dims(dims: tuple[Expr, ...], k: int, size: Expr) -> tuple[Expr, ...]:
    return (*dims[:k], size, *dims[k + 2 :])


def _product(
    ea: Expr, eb: Expr, products: dict[str, Expr], taken: set[str], sizes: list[str]
) -> Expr:
    """`ea * eb` as a TC expression isl can read: the product itself when one factor
    is a constant, else a size made for it (`H_W`), recorded in `products` in terms
    of the def's own sizes."""
    if isinstance(ea, Const) or isinstance(eb, Const):
        return Binary(BinOp.MUL, ea, eb)
    value = Binary(BinOp.MUL, _expand(ea, products), _expand(eb, products))
    for name, known in products.items():
        if known == value:
            return Var(name)
    base = "_".join(_ident(print_expr(e)) for e in (ea, eb))
    name = base
    while name in taken:
        name += "_"
    taken.add(name)
    products[name] = value
    sizes.append(name)
    return Var(name)


def _ident(text: str) -> str:
    return "".join(c if c.isalnum() else "_" for c in text).strip("_") or "E"


def _expand(e: Expr, products: dict[str, Expr]) -> Expr:
    if isinstance(e, Var) and e.name in products:
        return products[e.name]
    return e


def _merge_stmt(facts: StmtFacts, a: str, b: str, size: Expr) -> StmtFacts:
    stmt = facts.stmt
    taken = set(facts.all_vars) | set(facts.lets)
    ab = a + b
    while ab in taken:
        ab += "_"
    v = Var(ab)
    pair = _Pair(a, b, v).stmt(stmt)
    where = []
    for c in pair.where:
        if isinstance(c, RangeConstraint) and c.expr == Var(b):
            continue
        if isinstance(c, RangeConstraint) and c.expr == Var(a):
            c = dataclasses.replace(c, expr=v, lo=Const(0, ScalarType.INT32), hi=size)
        where.append(c)
    new = dataclasses.replace(pair, where=tuple(where))

    def rename(names: tuple[str, ...]) -> tuple[str, ...]:
        return tuple(ab if x == a else x for x in names if x != b)

    return dataclasses.replace(
        facts,
        stmt=new,
        index_vars=rename(facts.index_vars),
        reduction_vars=rename(facts.reduction_vars),
    )


# ------------------------------------------------------------------ undoing the views


def unmerge(f: L.Function, views: Views) -> L.Function:
    """`f` (lowered from a merged def) on the buffers its caller passes: each view's
    access `X[..., ab, ...]` as `X[..., 0, ab, ...]`, each made size as its product."""
    if not views.tensors and not views.products:
        return f
    # a view of a scratch tensor (`Views.aliases`) is that tensor's buffer
    sizes = {name: bound_to_loops(e) for name, e in views.products}
    return _Unmerge(views, sizes).mutate(
        dataclasses.replace(f, size_params=tuple(p for p in f.size_params if p not in sizes))
    )


class _Unmerge(L.Mutator):
    def __init__(self, views: Views, sizes: dict[str, L.Expr]) -> None:
        self.sizes = sizes
        self.groups = {t: groups for t, _, groups in views.tensors}
        self.originals = {t: ext for t, ext, _ in views.tensors}
        self.aliases = dict(views.aliases)
        self.buffers: dict[int, L.Buffer] = {}

    def mutate_VarRef(self, node: L.VarRef) -> L.Expr:
        return self.sizes.get(node.name, node)

    def mutate_Buffer(self, node: L.Buffer) -> L.Buffer:
        key = id(node)
        if key not in self.buffers:
            if node.name in self.groups:
                shape = tuple(bound_to_loops(e) for e in self.originals[node.name])
                name = self.aliases.get(node.name, node.name)
                self.buffers[key] = L.Buffer(name, node.dtype, shape, node.role)
            else:  # a temporary (a packed panel) sized by a made size
                self.buffers[key] = self.generic_mutate(node)
        return self.buffers[key]

    def _index(self, name: str, index: tuple[L.Expr, ...]) -> tuple[L.Expr, ...]:
        index = tuple(self.mutate(i) for i in index)
        groups = self.groups.get(name)
        if groups is None:
            return index
        zero = L.Const(0, L.DType.INT64)
        out: list[L.Expr] = []
        for i, g in zip(index, groups, strict=True):
            out += [zero] * (g - 1) + [i]
        return tuple(out)

    def mutate_Load(self, node: L.Load) -> L.Expr:
        return L.Load(self.mutate(node.buffer), self._index(node.buffer.name, node.index))

    def mutate_Store(self, node: L.Store) -> L.Stmt:
        return L.Store(
            self.mutate(node.buffer),
            self._index(node.buffer.name, node.index),
            self.mutate(node.value),
        )


__all__ = ["Merged", "merge_loops", "unmerge"]
