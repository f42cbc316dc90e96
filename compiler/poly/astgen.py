"""Lowering: a ranged TC def -> one loop-IR Function, through isl's AST builder.

Requires: a `poly.schedule.Schedule` (its nests and the target's `Model`).
Ensures:  `lower_schedule(sched) -> Lowered`: a `loops.Function` that `loops.verify`
accepts and that computes what `compiler.interp.evaluate` computes, and the run-time
bounds checks (`Lowered.checks`). The CPU's `cpu.model.lower(ranged, options)` is
this with its schedule.

Each nest of `poly.schedule` becomes a schedule tree (domain, outer band, a `reduce`
mark when it accumulates in a register, inner band), which isl's AST builder turns
into loops with exact bounds under the size context; the isl AST is converted once.
Statement arguments are read from each user node's call arguments (isl may rescale
strided loops), never from loop iterators. The outermost loop of a parallel band is
`LoopKind.PARALLEL`; a runtime may split it across threads. The model's loop passes
(`Model.loop_passes`: the CPU's jams, register tiles, packing) run on each nest's
loops, its run-time versions become `if` statements over them
(`poly.schedule.RunTimeCheck`), and `Model.finish` ends the function.

Buffers: the inputs (role in), then the outputs (role out), shaped by expressions of
the sizes; the schedule's scratch tensors (a padded gather's copy, `cpu.pad`) are no
parameters: each is an `Alloc` (zero-filled) around the nests that write and read it,
and its `+=!` gets no fill nest of its own. When some read cannot be proven in bounds,
a last `int64[2]` buffer named `ERROR_BUFFER` (role out, zeroed by the caller)
receives the first failed check: `[check id + 1, index value]` (`Lowered.checks[id]`
names the read and dimension), while the read itself yields 0. The caller turns it into a ShapeError.

Worked example, matmul `C(m, n) +=! A(m, k) * B(k, n)`:

    for m in 0:M parallel
      for n in 0:N
        local acc: float32 = 0.0f
          for k in 0:K
            acc = acc + A[m, k] * B[k, n]
          C[m, n] = acc
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from dataclasses import dataclass, field

import islpy as isl
import numpy as np

from compiler import loops as L
from compiler.diagnostics import InternalError
from compiler.frontend.ast import AssignOp, Let
from compiler.frontend.types import stmt_env
from compiler.names import NameSupply
from compiler.poly import ast_tree as tree
from compiler.poly.companions import companion_versions
from compiler.poly.failures import isl_failures
from compiler.poly.lower_expr import (
    I64,
    ExprLowering,
    ReadCheck,
    bound_to_loops,
    cast,
    const,
    copy_nest,
    dtype_of,
)
from compiler.poly.schedule import Nest, NestKind, Schedule, TileBand

ERROR_BUFFER = "tcc.error"


@dataclass(frozen=True)
class Lowered:
    function: L.Function
    checks: tuple[ReadCheck, ...]
    notes: tuple[str, ...] = ()  # what a reader of the loops should know (serial scatters)


def lower_schedule(sched: Schedule) -> Lowered:
    """The Function of `sched`: its parameters the inputs and outputs, each scratch
    tensor (`Schedule.scratch`) a zero-filled `Alloc` around the nests that use it."""
    checked = sched.ranged.checked
    params = checked.size_params
    buffers: dict[str, L.Buffer] = {}
    views = dict(sched.views.aliases)  # a merged view -> the scratch tensor it views
    for t in checked.tensors:
        shape = tuple(bound_to_loops(e) for e in sched.extent(t.name))
        role = L.Role.IN if t.role.value == "input" else L.Role.OUT
        if t.name in sched.scratch or t.name in views:
            role = L.Role.TEMP
        buffers[t.name] = L.Buffer(t.name, dtype_of(t.dtype), shape, role)
    error = L.Buffer(ERROR_BUFFER, I64, (const(2, I64),), L.Role.OUT)
    state = _State(buffers, frozenset(params), error)
    # a scratch tensor starts as Alloc's zeros: its `+=!` needs no fill of its own
    nests = [
        _lower_nest(sched, nest, state)
        for nest in sched.nests
        if not (nest.kind is NestKind.INIT and _zero_start(nest, sched.scratch))
    ]
    nests = _with_scratch(nests, [buffers[name] for name in sched.scratch], views)
    kept = tuple(b for b in buffers.values() if b.role is not L.Role.TEMP)
    all_buffers = kept + ((error,) if state.checks else ())
    body = nests[0] if len(nests) == 1 else L.Block(tuple(nests))
    function = sched.model.finish(L.Function(checked.name, all_buffers, params, body), sched.views)
    return Lowered(function, tuple(state.checks))


def _zero_start(init: Nest, scratch: tuple[str, ...]) -> bool:
    """Whether INIT nest `init` fills a scratch tensor with zeros (`+=!`'s identity)."""
    return init.target in scratch and init.facts.stmt.op is AssignOp.PLUS_INIT


def _with_scratch(
    nests: list[L.Stmt], scratch: list[L.Buffer], views: dict[str, str]
) -> list[L.Stmt]:
    """`nests` with each scratch buffer allocated (zero-filled, `L.Alloc`) around the
    nests from the first that uses it, or a merged view of it (`views`: view ->
    buffer, `cpu.merge`), to the last; buffers whose spans overlap share one span. A
    buffer no nest uses (its nests ran at no size) is not allocated."""
    spans: list[tuple[int, int, list[L.Buffer]]] = []
    for b in scratch:
        names = {b.name} | {v for v, t in views.items() if t == b.name}
        used = [k for k, n in enumerate(nests) if any(_uses(n, name) for name in names)]
        if used:
            spans.append((used[0], used[-1], [b]))
    spans.sort(key=lambda span: span[0])
    merged: list[tuple[int, int, list[L.Buffer]]] = []
    for lo, hi, bs in spans:
        if merged and lo <= merged[-1][1]:
            first, last, held = merged[-1]
            merged[-1] = (first, max(last, hi), held + bs)
        else:
            merged.append((lo, hi, bs))
    out = list(nests)
    for lo, hi, bs in reversed(merged):
        body: L.Stmt = out[lo] if lo == hi else L.Block(tuple(out[lo : hi + 1]))
        for b in reversed(bs):
            body = L.Alloc(b, body)
        out[lo : hi + 1] = [body]
    return out


def _uses(stmt: L.Stmt, name: str) -> bool:
    """Whether `stmt` loads or stores buffer `name`."""
    return any(isinstance(n, (L.Load, L.Store)) and n.buffer.name == name for n in L.walk(stmt))


def _lower_nest(sched: Schedule, nest: Nest, state: _State) -> L.Stmt:
    """One nest's loops; with an alternative, both under the run-time alias test."""
    with isl_failures(nest.facts.stmt):
        return _lower_versions(sched, nest, state)


def _lower_versions(sched: Schedule, nest: Nest, state: _State) -> L.Stmt:
    if nest.few_rows is not None:  # versions by the sizes (cpu.rows)
        return nest.few_rows.lowered(nest, lambda n: _lower_nest(sched, n, state))
    body = _NestLowering(sched, nest, state).run()
    if nest.companions:  # and the nests apart, for too few parallel iterations
        apart = [_lower_nest(sched, c, state) for c in nest.companions]
        plain = _lower_nest(sched, dataclasses.replace(nest, companions=()), state)
        return companion_versions(body, L.Block((*apart, plain)), state.sizes)
    # the run-time test that picks the alternative (`poly.schedule.RunTimeCheck`)
    check = nest.rows or nest.larger or nest.alias
    if nest.alternative is None or check is None:
        return body
    alternative = _lower_nest(sched, nest.alternative, state)  # with its own versions
    return L.If(check.condition(state.buffers), alternative, body)


@dataclass
class _State:
    buffers: dict[str, L.Buffer]
    sizes: frozenset[str]
    error: L.Buffer
    checks: list[ReadCheck] = field(default_factory=list)

    def register(self, check: ReadCheck) -> int:
        self.checks.append(check)
        return len(self.checks) - 1


# ------------------------------------------------------------------ isl side


def build_ast(
    nest: Nest, context: isl.Set, tiled: TileBand | None, *, exploit: bool | None = None
) -> isl.AstNode:
    """isl's AST for one nest: bands from the schedule, iterators named after them
    (a tiled nest gets its tile band `tiled` first, `Model.tile_band`).

    The context's constraints on the sizes (`StmtSpace.context`) stay out of the
    build: with them in its sets isl took 2-3x as long (conv2d's gradient, when the
    context also bounded sizes by 2**63: 145 -> 59 ms for its eight nests, the same
    ASTs), and the code runs only for sizes in the context, where the domain without
    them (`gist_params`) is the domain. `exploit`: isl's `exploit_nested_bounds`;
    by default off for a nest with loops inside its `reduce` mark (below)."""
    domain_set = nest.domain.gist_params(context)
    positive = _positive_sizes(context)
    domain = isl.UnionSet.from_set(domain_set)
    sched = isl.Schedule.from_domain(domain)
    node = sched.get_root().child(0)
    names: tuple[str, ...] = ()
    outer = nest.outer
    if tiled is not None:
        node = node.insert_partial_schedule(tiled.schedule.gist_params(context)).child(0)
        names = tiled.names
        outer = tuple(v for v in outer if v != tiled.hoisted)
    separate = _pieces_or_floors(domain_set)
    if outer:
        node = _insert_band(node, _band(domain_set, outer), separate).child(0)
    if nest.accumulate:
        node = node.insert_mark(isl.Id("reduce")).child(0)
    if nest.inner:
        node = _insert_band(node, _band(domain_set, nest.inner), separate).child(0)
    if nest.innermost:
        node = _insert_band(node, _band(domain_set, nest.innermost), separate)
    build = isl.AstBuild.from_context(positive)
    names += outer + nest.inner + nest.innermost
    if names:
        ids = isl.IdList.alloc(isl.DEFAULT_CONTEXT, len(names))
        for name in names:
            ids = ids.add(isl.Id(name))
        build = build.set_iterators(ids)
    build, handle = tree.annotate_marks(build)
    ctx = domain_set.get_ctx()
    before = ctx.get_ast_build_exploit_nested_bounds()
    if exploit is None:
        exploit = not (nest.accumulate and (nest.inner or nest.innermost))
    if not exploit:
        # the accumulator's load and store run in every iteration of the loops outside
        # the mark: what isl knows there, which the guard at the mark leaves out
        # (`ast_tree._annotated`), must be enforced around the mark, not left to loops
        # inside it (isl's `exploit_nested_bounds` drops from an outer guard what an
        # inner loop's having an iteration implies)
        ctx.set_ast_build_exploit_nested_bounds(0)
    try:
        ast = build.node_from_schedule(node.get_schedule())
    finally:
        ctx.set_ast_build_exploit_nested_bounds(before)
    del handle  # the callback lives until the AST is built
    return ast


def nest_tree(nest: Nest, context: isl.Set, tiled: TileBand | None) -> tree.Tree:
    """The Tree of one nest: built directly for a box (`poly.ast_tree.box_tree`), else
    converted from isl's AST (`build_ast`)."""
    made: tree.Tree | None = None
    positive = _positive_sizes(context)
    if tiled is None:
        order = nest.outer + nest.inner + nest.innermost
        mark = len(nest.outer) if nest.accumulate else None
        made = tree.box_tree(nest.domain, context, positive, order, mark)
    if made is None:
        made = tree.from_isl(build_ast(nest, context, tiled))
    if nest.accumulate:  # the accumulator's loads and stores run outside isl's statements
        made = tree.nonempty_guard(made, nest.domain, context, positive)
    return made


def _positive_sizes(context: isl.Set) -> isl.Set:
    """The parameter space of `context` with every size >= 1 and nothing else."""
    result = isl.Set.universe(context.get_space())
    one = isl.Val.int_from_si(result.get_ctx(), 1)
    for k in range(context.dim(isl.dim_type.param)):
        result = result.lower_bound_val(isl.dim_type.param, k, one)
    return result


def _pieces_or_floors(domain: isl.Set) -> bool:
    """Whether `domain` has several pieces or existential variables (floors)."""
    pieces = domain.get_basic_sets()
    return len(pieces) > 1 or any(b.dim(isl.dim_type.div) for b in pieces)


def _insert_band(
    node: isl.ScheduleNode, band: isl.MultiUnionPwAff, separate: bool
) -> isl.ScheduleNode:
    """`band` inserted at `node`; `separate`: each of its loops isl's `separate` kind.

    Why: over a domain of pieces with floors isl's default loop kind may leave out a
    piece (the gather of a floor-divided read's gradient with a piece that holds at
    one size only, `N = 5`: isl's AST skipped its points, a wrong gradient). Separated
    loops cover every point and are no larger there (strided conv2d's gradient, full
    gather: 828 loop-IR lines against 867; `atomic` covers them too, but over the hull
    with a guard inside). Tests: tests/poly/test_separate_loops.py."""
    node = node.insert_partial_schedule(band)
    if separate:
        for k in range(node.band_n_member()):
            node = node.band_member_set_ast_loop_type(k, isl.ast_loop_type.separate)
    return node


def _band(domain: isl.Set, names: tuple[str, ...]) -> isl.MultiUnionPwAff:
    """The schedule `S[vars] -> [names...]` (domain dimensions, in the given order)."""
    space = domain.get_space()
    identity = isl.MultiAff.identity(space.map_from_set())
    affs = [identity.get_at(domain.find_dim_by_name(isl.dim_type.set, n)) for n in names]
    target = isl.Space.set_alloc(space.get_ctx(), 0, len(names)).align_params(space)
    band = isl.MultiAff.from_aff_list(space.map_from_domain_and_range(target), _aff_list(affs))
    band_map = isl.Map.from_multi_aff(band).intersect_domain(domain)
    return isl.MultiUnionPwAff.from_union_map(isl.UnionMap.from_map(band_map))


def _aff_list(affs: list[isl.Aff]) -> isl.AffList:
    result = isl.AffList.alloc(isl.DEFAULT_CONTEXT, len(affs))
    for a in affs:
        result = result.add(a)
    return result


# ------------------------------------------------------------------ one nest


class _NestLowering:
    """Converts the isl AST of one nest to loop IR, once."""

    def __init__(self, sched: Schedule, nest: Nest, state: _State) -> None:
        self.sched = sched
        self.nest = nest
        self.state = state
        self.facts = nest.facts
        self.target = state.buffers[nest.target]
        self.acc: str | None = None  # the register accumulator inside a `reduce` mark
        self.buffers: Mapping[str, L.Buffer] = state.buffers
        self.band = sched.model.tile_band(nest)
        # the loops a parallel nest may split: its outer band, or its tile band's first
        self.parallel_vars = set(nest.outer) if self.band is None else {self.band.parallel}
        if nest.snapshot:
            old = L.Buffer(f"{nest.target}.old", self.target.dtype, self.target.shape, L.Role.TEMP)
            self.buffers = {**state.buffers, nest.target: old}

    def run(self) -> L.Stmt:
        body = self._node(nest_tree(self.nest, self.sched.context, self.band), False)
        # jams would change which failed check comes first
        if not (self.nest.unproven or self.nest.write_checks):
            model = self.sched.model
            body = model.loop_passes(body, self.nest, self.target, self.state.sizes, self.band)
        if not self.nest.snapshot:
            return body
        old = self.buffers[self.nest.target]
        return L.Alloc(old, L.Block((copy_nest(self.target, old), body)))

    def _node(self, node: tree.Tree, in_parallel: bool) -> L.Stmt:
        if isinstance(node, tree.For):
            parallel = self.nest.parallel and not in_parallel and node.var in self.parallel_vars
            body = self._node(node.body, in_parallel or parallel)
            kind = L.LoopKind.PARALLEL if parallel else L.LoopKind.SERIAL
            return L.For(node.var, node.lo, node.hi, node.step, body, kind)
        if isinstance(node, tree.If):
            then = self._node(node.then, in_parallel)
            otherwise = None if node.otherwise is None else self._node(node.otherwise, in_parallel)
            return L.If(node.cond, then, otherwise)
        if isinstance(node, tree.Block):
            return L.Block(tuple(self._node(c, in_parallel) for c in node.children))
        if isinstance(node, tree.Mark):
            return self._reduce(node, in_parallel)
        return self._instance(list(node.args))

    # ------------------------------------------------------------ statements

    def _values(self, args: list[L.Expr]) -> dict[str, L.Expr]:
        names = self.nest.dims
        if len(args) != len(names):
            raise InternalError(f"user node with {len(args)} arguments for {names}")
        return dict(zip(names, args, strict=True))

    def _lowering(self, values: Mapping[str, L.Expr]) -> ExprLowering:
        env = stmt_env(self.sched.ranged.checked, self.facts)
        return ExprLowering(
            values,
            env,
            self.buffers,
            self.state.sizes,
            frozenset(self.facts.lets),
            self.nest.unproven,
            self.state.register,
        )

    def _instance(self, args: list[L.Expr]) -> L.Stmt:
        values = self._values(args)
        if self.nest.kind is NestKind.INIT:
            index = tuple(values[n] for n in self.nest.outer)
            return L.Store(self.target, index, identity(self.facts.stmt.op, self.target.dtype))
        own = self._statement(values)
        if not self.nest.companions:  # pointwise statements of the domain (poly.companions)
            return own
        others = [_NestLowering(self.sched, c, self.state) for c in self.nest.companions]
        return L.Block((*(c._statement(values, fresh=True) for c in others), own))

    def _statement(self, values: Mapping[str, L.Expr], *, fresh: bool = False) -> L.Stmt:
        """This nest's statement at the instance `values` (its loop variables); `fresh`:
        a companion's, whose `op!` starts from the identity here, not from memory."""
        low = self._lowering(values)
        stmt = self.facts.stmt
        lets = [(c.name, low.value(c.value)) for c in stmt.where if isinstance(c, Let)]
        value = cast(low.value(stmt.rhs), self.target.dtype)
        index, inside = low.store_index(stmt.lhs, self.nest.write_checks)
        if self.acc is not None:
            effect: L.Stmt = L.Assign(
                self.acc, combine(stmt.op, L.VarRef(self.acc, value.dtype), value)
            )
        elif stmt.op is AssignOp.ASSIGN:
            effect = L.Store(self.target, index, value)
        elif fresh and stmt.op.init:
            start = identity(stmt.op, self.target.dtype)
            effect = L.Store(self.target, index, combine(stmt.op, start, value))
        else:
            effect = L.Store(
                self.target, index, combine(stmt.op, L.Load(self.target, index), value)
            )
        if inside is not None:  # a data-dependent store out of bounds never happens
            effect = L.If(inside, effect)
        body = _with_checks(low.checks, effect, self.state.error)
        for name, v in reversed(lets):
            body = L.Let(name, v, body)
        return body

    def _reduce(self, mark: tree.Mark, in_parallel: bool) -> L.Stmt:
        """A register accumulator around the reduction loops, stored once, at the
        output element the mark's enclosing loops fix (`Mark.values`: a statement below
        it may be specialised to a branch, `if (y == 0) S(0, l, i)`)."""
        child = mark.child
        user = tree.first_user(child)
        if user is None:
            raise InternalError("a reduce mark without a statement")
        values = {**self._values(list(user.args)), **dict(mark.values)}
        inner = set(self.nest.inner)
        for v in self.nest.outer:
            if v not in dict(mark.values) or L.var_names(values[v]) & inner:
                raise InternalError(f"output index {v} is not fixed by the outer loops")
        index = tuple(self._lowering(values).index(a) for a in self.facts.stmt.lhs.args)
        acc = NameSupply(self._taken()).fresh("acc")
        dtype = self.target.dtype
        op = self.facts.stmt.op
        init = identity(op, dtype) if op.init else L.Load(self.target, index)
        self.acc = acc
        try:
            body = self._node(child, in_parallel)
        finally:
            self.acc = None
        store = L.Store(self.target, index, L.VarRef(acc, dtype))
        return L.Local(acc, dtype, init, L.Block((body, store)))

    def _taken(self) -> set[str]:
        return set(self.facts.all_vars) | set(self.facts.lets) | set(self.state.sizes)


def _with_checks(
    checks: list[tuple[L.Expr, int, L.Expr]], effect: L.Stmt, error: L.Buffer
) -> L.Stmt:
    """The error records of failed bounds checks (the first one wins), then `effect`."""
    if not checks:
        return effect
    records: list[L.Stmt] = []
    zero = const(0, I64)
    for cond, check_id, index in checks:
        first = L.Bin(L.BinOp.EQ, L.Load(error, (zero,)), zero)
        record = L.Block(
            (
                L.Store(error, (zero,), const(check_id + 1, I64)),
                L.Store(error, (const(1, I64),), index),
            )
        )
        records.append(L.If(L.Bin(L.BinOp.AND, cond, first), record))
    return L.Block((*records, effect))


def combine(op: AssignOp, current: L.Expr, value: L.Expr) -> L.Expr:
    """`current op value` for a reduction operator."""
    base = op.base
    if base is AssignOp.PLUS:
        return L.Bin(L.BinOp.ADD, current, value)
    if base is AssignOp.TIMES:
        return L.Bin(L.BinOp.MUL, current, value)
    if base is AssignOp.MIN:
        return L.Min(current, value)
    if base is AssignOp.MAX:
        return L.Max(current, value)
    raise InternalError(f"not a reduction: {op}")


def identity(op: AssignOp, dtype: L.DType) -> L.Const:
    """The identity of reduction `op` in `dtype` (as `compiler.interp.identity`)."""
    base = op.base
    if base in (AssignOp.PLUS, AssignOp.TIMES):
        one = base is AssignOp.TIMES
        if dtype.is_float:
            return const(float(one), dtype)
        return const(one if dtype is L.DType.BOOL else int(one), dtype)
    if dtype.is_float:
        return const(math.inf if base is AssignOp.MIN else -math.inf, dtype)
    if dtype is L.DType.BOOL:
        return const(base is AssignOp.MIN, dtype)
    info = np.iinfo(dtype.np)
    return const(int(info.max if base is AssignOp.MIN else info.min), dtype)


__all__ = [
    "ERROR_BUFFER",
    "Lowered",
    "build_ast",
    "lower_schedule",
    "nest_tree",
]
