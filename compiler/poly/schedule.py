"""Scheduling: the order of statement instances, as a sequence of loop nests.

Requires: a `RangedDef` (every variable has a `where` range); `Options`.
Ensures:  `schedule(ranged, options) -> Schedule`, a poly-internal object: one `Nest`
per loop nest, in execution order, each with its isl domain and two bands:

- statements run in textual order, one nest each;
- an `op!` statement gets an `Init` nest before it over the output's whole box (the
  operator's identity), unless the statement itself covers the whole box with a
  register accumulator that starts at the identity and does not read its output;
- a statement's outer band is its left-hand-side variables, its inner band the
  reduction variables. When the left-hand side is injective in its variables (isl
  decides: true for plain distinct variables), every output element is owned by one
  outer iteration: the outer band is parallel and a reduction accumulates in a
  register. An affine scatter (`I_grad(n, 2 * h + kh) += ...`) runs in parallel over
  its plain left-hand-side variables (`n`), every other loop sequential inside,
  accumulating in memory (`compiler/poly/partial.py` gives the order); one without
  plain variables runs serially (`compiler/poly/gather.py` turns most scatters into
  gathers first);
- a data-dependent scatter (`E_grad(idx(b), d) +=! ...`, `PolyStmt.nonaffine_write`)
  runs serially, after an `Init` nest over the whole box when it is `op!`; its store
  indices are checked at run time (`write_checks`), as are the reads in its subscripts;
- a statement that reads its own output elsewhere than the element it writes reads
  a snapshot taken before it starts (`snapshot`), as TC's semantics require; such a
  statement runs serially (the copy is made inside its nest);
- a statement in memory form (an innermost band) may be cache-tiled: `Nest.tiles`
  (`compiler/cpu/tiling.py` chooses them and builds the tile band);
- a register-tiled statement whose reduction runs its long variable innermost carries
  its literal-order twin as `Nest.alternative`, lowered too and run instead when the
  run-time test `Nest.alias` holds (`compiler/cpu/aliasing.py`);
- the target's `Model` decides what is not semantics: `rewrite` may schedule another
  def in place of the given one (the CPU's, `cpu.model`: zero-padded copies of
  clamped reads, `cpu.pad`; a scatter's contraction into a scratch tensor,
  `cpu.factor`; merged whole-dimension loops, `cpu.merge`; parity classes of a
  strided scatter, `cpu.parity`), whose extra tensors are `Schedule.scratch`
  (temporaries of the loops, never outputs of the def the caller sees); `order` and
  `tiles` each statement's loop order and cache tiles; `alternatives` the versions a
  run-time test chooses between. `LITERAL`, the default (the GPU's), adds nothing;
- with `Options.fuse`, a pointwise statement that a later memory-form reduction over
  the same domain can host runs inside that nest (`Nest.companions`, `poly.companions`).

`context` holds what the sizes are known to satisfy when the code runs: every size
>= 1, and every output extent >= 0 (a negative extent is a ShapeError at call time).
The AST builder uses it to drop useless guards; a nest whose domain is empty under it
is dropped (`A_grad(y, z) += O1_grad(i) where ..., N - 1 in 0:1` when an input's
extent `N - 3` says N >= 4).

Worked example, `C(m, n) +=! A(m, k) * B(k, n)` with ranges `0:M, 0:N, 0:K`:
one Nest `S0[m, n, k]`, outer band `(m, n)` parallel, inner band `(k,)`,
accumulate=True, no Init (the statement covers C's box and starts from 0).
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Protocol

import islpy as isl

from compiler import loops as L
from compiler.diagnostics import OptionsError
from compiler.frontend.ast import Access, Const, Expr, Var
from compiler.frontend.checked import RangedDef, StmtFacts
from compiler.frontend.printer import print_stmt
from compiler.loops.jam import unroll_and_jam
from compiler.options import Options
from compiler.poly.build import PolyStmt, build_statements, tensor_extents
from compiler.poly.failures import isl_failures
from compiler.poly.gather import WriteKind, write_kind
from compiler.poly.isl_bridge import NotAffine, StmtSpace, expr_to_aff, params_space
from compiler.poly.order import LoopOrder, literal_order
from compiler.poly.partial import plain_vars
from compiler.poly.proofs import same_element, self_reads_of, unproven_reads, unproven_writes


class NestKind(enum.Enum):
    INIT = "init"
    STMT = "stmt"


class RunTimeCheck(Protocol):
    """What picks a nest's `alternative` when the code runs (`Nest.alias`, `Nest.larger`,
    `Nest.rows`; the CPU's are in `cpu.alternatives`): `poly.astgen` lowers the nest as
    `if (condition) alternative else nest`."""

    def condition(self, buffers: Mapping[str, L.Buffer]) -> L.Expr: ...


class NestVersions(Protocol):
    """Versions of a nest chosen by the sizes (`Nest.few_rows`, `cpu.rows.FewRows`):
    `lowered(nest, lower)` lowers each version with `lower` under its test."""

    def lowered(self, nest: Nest, lower: Callable[[Nest], L.Stmt]) -> L.Stmt: ...


@dataclass(frozen=True)
class TileBand:
    """The band above the point loops: its schedule and loop names, and which point
    loop (if any) moved whole into it."""

    schedule: isl.MultiUnionPwAff
    names: tuple[str, ...]
    hoisted: str | None  # the untiled first output loop, now a tile-band dimension
    parallel: str  # the tile band's first loop: the one a runtime splits


@dataclass(frozen=True)
class Views:
    """How the merged def's tensors map onto the buffers the caller passes."""

    # tensor -> (its extents in the def before merging, dims of it per view dim)
    tensors: tuple[tuple[str, tuple[Expr, ...], tuple[int, ...]], ...] = ()
    products: tuple[tuple[str, Expr], ...] = ()  # a made size -> its product of sizes
    # a merged view's own name -> the scratch tensor it views (the module doc's Scratch)
    aliases: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class Nest:
    """One loop nest. `outer` and `inner` name the band dimensions (loop variables);
    for an INIT nest, `outer` names the output's dimensions and `inner` is empty."""

    kind: NestKind
    index: int  # the statement's position in the def
    facts: StmtFacts  # the ranged statement (with its where clauses)
    domain: isl.Set  # tuple named S<k> (statement) or I<k> (init)
    outer: tuple[str, ...]
    inner: tuple[str, ...]
    parallel: bool = False
    accumulate: bool = False
    snapshot: bool = False
    unproven: frozenset[tuple[Access, int]] = frozenset()  # (read, dim) to check at run time
    write_checks: tuple[int, ...] = ()  # dims of the left-hand side to check at run time
    innermost: tuple[str, ...] = ()  # a band below `inner` (memory accumulation)
    jams: tuple[tuple[str, int], ...] = ()  # unroll-and-jam (loop variable, factor)
    tiles: tuple[int, ...] = ()  # one tile size per loop of `bands` (cpu.tiling), or ()
    lanes: int = 1  # register tile width along `innermost` (cpu.regtile), 1: none
    # the same statement in its literal reduction order, run instead when `alias` holds
    # at run time (cpu.aliasing)
    alternative: Nest | None = None
    alias: RunTimeCheck | None = None
    # or, for a dot tile, its two jammed output loops swapped (`LoopOrder.swap`), run
    # instead when `larger` holds at run time
    larger: RunTimeCheck | None = None
    # or, for transposed panels, the dot tile, run instead when `rows` holds
    rows: RunTimeCheck | None = None
    # pointwise statements over the same domain, computed at each instance of this one
    # (`poly.companions`)
    companions: tuple[Nest, ...] = ()
    # versions for fewer rows than the register tile's row block (`cpu.rows`)
    few_rows: NestVersions | None = None

    @property
    def dims(self) -> tuple[str, ...]:
        """The domain's dimensions, in the order isl's user nodes pass them."""
        n = self.domain.dim(isl.dim_type.set)
        return tuple(self.domain.get_dim_name(isl.dim_type.set, k) for k in range(n))

    @property
    def bands(self) -> tuple[str, ...]:
        return self.outer + self.inner + self.innermost

    @property
    def target(self) -> str:
        return self.facts.stmt.lhs.name


@dataclass(frozen=True)
class Rewritten:
    """The def a model schedules in place of the one it was given (`Model.rewrite`)."""

    ranged: RangedDef
    scratch: tuple[str, ...] = ()  # its outputs that are the loops' temporaries
    origins: tuple[int, ...] | None = None  # per statement, its statement in the given def
    views: Views = Views()  # merged loops' views of the caller's buffers (`cpu.merge`)
    strided: frozenset[int] = frozenset()  # parity classes of a strided scatter (`cpu.parity`)


class Model(Protocol):
    """A target's schedule decisions. `schedule` asks the first four per def and per
    statement; `poly.astgen.lower_schedule` asks the last three per nest. `LITERAL`
    (below) is the literal order with nothing added: the GPU's (`cuda.gpu_lower`,
    whose mapping makes its own decisions on the lowered loops). The CPU's
    (`cpu.model.CpuModel`) is its cost model (`cpu.cpu_model`) and loop passes."""

    def rewrite(self, ranged: RangedDef, options: Options) -> Rewritten:
        """The def to schedule: `ranged`, or one with scratch tensors (pads, the parts
        of a scatter, merged loops) that the lowering allocates."""
        ...

    def order(
        self,
        facts: StmtFacts,
        params: tuple[str, ...],
        options: Options,
        *,
        injective: bool,
        self_reads: bool,
        partial: bool,
    ) -> LoopOrder:
        """One statement's loop order. `partial`: an affine scatter that runs in
        parallel over its plain variables (`poly.partial.plain_vars`), which must be
        the outer band, every other variable in the inner band."""
        ...

    def tiles(self, facts: StmtFacts, order: LoopOrder, options: Options) -> tuple[int, ...]:
        """One cache tile size per loop of `order` (`Nest.tiles`), or ()."""
        ...

    def alternatives(
        self,
        main: Nest,
        order: LoopOrder,
        facts: StmtFacts,
        extents: dict[str, tuple[Expr, ...]],
        params: tuple[str, ...],
        options: Options,
    ) -> Nest:
        """`main` with the versions that run-time tests choose between
        (`Nest.alternative`, `Nest.few_rows`), or `main` itself."""
        ...

    def tile_band(self, nest: Nest) -> TileBand | None:
        """The tile band of a nest with `tiles`, None when it has none."""
        ...

    def loop_passes(
        self,
        body: L.Stmt,
        nest: Nest,
        target: L.Buffer,
        sizes: frozenset[str],
        band: TileBand | None,
    ) -> L.Stmt:
        """The nest's lowered loops after the target's loop-level passes (its jams,
        register tiles, packing). Not called for a nest with run-time checks: a jam
        would change which failed check comes first."""
        ...

    def finish(self, function: L.Function, views: Views) -> L.Function:
        """The lowered function on the caller's buffers (`cpu.merge.unmerge`)."""
        ...


class LiteralModel:
    """The literal order of every statement (`order.literal_order`), a partial
    scatter's plain variables outermost; no rewrite, tiles or versions; the only loop
    pass the order's jams (none here)."""

    def rewrite(self, ranged: RangedDef, options: Options) -> Rewritten:
        return Rewritten(ranged)

    def order(
        self,
        facts: StmtFacts,
        params: tuple[str, ...],
        options: Options,
        *,
        injective: bool,
        self_reads: bool,
        partial: bool,
    ) -> LoopOrder:
        if not partial:
            return literal_order(facts)
        plain = plain_vars(facts)
        rest = tuple(v for v in facts.all_vars if v not in plain)
        return LoopOrder(plain, rest, register=False)

    def tiles(self, facts: StmtFacts, order: LoopOrder, options: Options) -> tuple[int, ...]:
        return ()

    def alternatives(
        self,
        main: Nest,
        order: LoopOrder,
        facts: StmtFacts,
        extents: dict[str, tuple[Expr, ...]],
        params: tuple[str, ...],
        options: Options,
    ) -> Nest:
        return main

    def tile_band(self, nest: Nest) -> TileBand | None:
        return None

    def loop_passes(
        self,
        body: L.Stmt,
        nest: Nest,
        target: L.Buffer,
        sizes: frozenset[str],
        band: TileBand | None,
    ) -> L.Stmt:
        for var, factor in nest.jams:
            body = unroll_and_jam(body, var, factor)
        return body

    def finish(self, function: L.Function, views: Views) -> L.Function:
        return function


LITERAL = LiteralModel()


@dataclass(frozen=True)
class Schedule:
    """The nests of `ranged` (the def the model's `rewrite` made, `cpu.pad` and the
    others on the CPU: it may hold more statements and, as outputs, the `scratch`
    tensors the loops allocate themselves)."""

    ranged: RangedDef
    nests: tuple[Nest, ...]
    context: isl.Set  # parameter set: what the sizes satisfy at run time
    extents: tuple[tuple[str, tuple[Expr, ...]], ...]  # every tensor's shape, TC exprs
    scratch: tuple[str, ...] = ()  # outputs of `ranged` that are the loops' temporaries
    # per statement of `ranged`, its position in the def that was scheduled (the user's)
    origins: tuple[int, ...] | None = None
    # the merged loops' tensor views, undone on the lowered loops (`cpu.merge.unmerge`)
    views: Views = Views()
    # statements of `ranged` that are parity classes of a strided scatter (cpu.parity)
    strided: frozenset[int] = frozenset()
    model: Model = LITERAL  # the target's decisions, which the lowering asks too

    def extent(self, tensor: str) -> tuple[Expr, ...]:
        return dict(self.extents)[tensor]

    def origin(self, stmt: int) -> int:
        """The position, in the def that was scheduled, of statement `stmt` of `ranged`."""
        return stmt if self.origins is None else self.origins[stmt]


def schedule(
    ranged: RangedDef, options: Options | None = None, *, model: Model | None = None
) -> Schedule:
    """The nests of `ranged`, in execution order (see the module doc), with the
    decisions of the target's `model` (default `LITERAL`; the CPU's is `cpu.model`)."""
    options = options or Options()
    model = model or LITERAL
    _check_statements(options, len(ranged.checked.stmts))
    rewritten = model.rewrite(ranged, options)
    ranged, origins = rewritten.ranged, rewritten.origins
    params = ranged.checked.size_params
    extents = tensor_extents(ranged)
    context = size_context(ranged)
    nests: list[Nest] = []
    stmts = zip(build_statements(ranged), _ranged_facts(ranged), strict=True)
    for k, (poly, facts) in enumerate(stmts):
        own = options.for_statement(k if origins is None else origins[k])  # per_statement
        with isl_failures(facts.stmt):
            made = _nests_of(poly, facts, extents, params, context, own, model)
        # a nest that runs at no size a call may have gets no loops (isl builds no AST
        # for an empty domain): a gradient's piece for sizes its inputs' shapes exclude
        nests.extend(n for n in made if not n.domain.intersect_params(context).is_empty())
    if options.fuse:
        from compiler.poly.companions import with_companions  # it reads this module's Nest

        nests = with_companions(nests, context)
    return Schedule(
        ranged,
        tuple(nests),
        context,
        tuple(extents.items()),
        rewritten.scratch,
        origins,
        rewritten.views,
        rewritten.strided,
        model,
    )


def _check_statements(options: Options, count: int) -> None:
    """`Options.per_statement` names statements of this def only."""
    beyond = [k for k, _ in options.per_statement if k >= count]
    if beyond:
        raise OptionsError(
            f"Options.per_statement names statement {beyond[0]}, but the def has {count}",
            hint="statements count from 0, in textual order",
        )


def _ranged_facts(ranged: RangedDef) -> Iterator[StmtFacts]:
    for stmt, facts in zip(ranged.checked.definition.stmts, ranged.checked.stmts, strict=True):
        yield StmtFacts(stmt, facts.index_vars, facts.reduction_vars, facts.lets)


def size_context(ranged: RangedDef) -> isl.Set:
    """Sizes >= 1, every inferred output extent >= 0, and every input dimension declared
    as an expression of sizes >= 1: a gradient's `float(B, min(G - 3 * H, H)) Hn_grad`
    (the forward output's shape) gives `G >= 3 * H + 1`, as the forward's output extent
    does, so the gradient's reads that the forward's proved in bounds are proved here
    too (an LSTM cell's gradient checked `Gt(b, H + h)` at every element, and its loops
    did not vectorise). The calls check both: `shapes.bind_sizes` refuses an input
    dimension that is not its expression's value or is below 1, and `output_shapes` a
    negative output extent."""
    space = params_space(ranged.checked.size_params)
    context = space.context
    for t in ranged.checked.outputs:
        for bound in ranged.bounds_of(t.name):
            try:
                context = context & expr_to_aff(bound.hi, space).ge_set(space.const(0))
            except NotAffine:
                continue
    for t in ranged.checked.inputs:
        for dim in t.dims or ():
            if isinstance(dim, (Var, Const)):
                continue
            try:
                context = context & expr_to_aff(dim, space).ge_set(space.const(1))
            except NotAffine:
                continue
    return context.params()


def _nests_of(
    poly: PolyStmt,
    facts: StmtFacts,
    extents: dict[str, tuple[Expr, ...]],
    params: tuple[str, ...],
    context: isl.Set,
    options: Options,
    model: Model,
) -> list[Nest]:
    stmt = facts.stmt
    extent = extents[stmt.lhs.name]
    # A data-dependent scatter may write one element from several instances, in an
    # order only the data decides: it runs serially (never parallel, never in a register).
    injective = poly.nonaffine_write is None and poly.lhs_injective()
    self_reads = list(self_reads_of(facts))
    # an affine scatter runs in parallel over its plain variables (poly.partial)
    partial = not injective and poly.nonaffine_write is None and bool(plain_vars(facts))
    order = model.order(
        facts, params, options, injective=injective, self_reads=bool(self_reads), partial=partial
    )
    tiles = () if partial else model.tiles(facts, order, options)
    if order.innermost and not order.outer and not tiles:
        order = literal_order(facts)  # an untiled column reduction would run serially
    accumulate = injective and stmt.op.is_reduction and order.register
    snapshot = bool(self_reads) and not (
        (accumulate or (injective and not facts.reduction_vars))
        and all(same_element(poly, facts, r, params) for r in self_reads)
    )
    main = Nest(
        NestKind.STMT,
        poly.index,
        facts,
        poly.domain,
        order.outer,
        order.inner,
        # A snapshot is taken inside the nest, so each thread would copy an output
        # that other threads may already be writing: such a statement runs serially.
        parallel=(injective or partial) and bool(order.outer or tiles) and not snapshot,
        accumulate=accumulate,
        snapshot=snapshot,
        unproven=unproven_reads(poly, facts, extents, params, context),
        write_checks=unproven_writes(poly, facts, extents, params, context),
        innermost=order.innermost,
        jams=order.jams,
        tiles=tiles,
        lanes=order.lanes,
    )
    main = model.alternatives(main, order, facts, extents, params, options)
    if not stmt.op.init:
        return [main]
    box = init_domain(poly.index, _init_names(facts, params), extent, params)
    written = poly.write.range().intersect_params(context)
    covered = written.is_equal(box.set_tuple_name(stmt.lhs.name).intersect_params(context))
    if accumulate and not self_reads and covered and poly.nonaffine_write is None:
        return [main]
    init = Nest(
        NestKind.INIT, poly.index, facts, box, _init_names(facts, params), (), parallel=True
    )
    return [init, main]


def scatter_notes(sched: Schedule) -> tuple[str, ...]:
    """One line per statement that is still a scatter after the gather pass, saying
    how it runs: in parallel over its plain variables (a partial scatter), or serially
    (a data-dependent scatter; an affine one without plain variables)."""
    stmts = sched.ranged.checked.definition.stmts
    parallel = {n.index: n.outer for n in sched.nests if n.kind is NestKind.STMT and n.parallel}
    notes = []
    for k, facts in enumerate(sched.ranged.checked.stmts):
        kind = write_kind(facts)
        if kind is WriteKind.GATHER:
            continue
        if k in parallel and k in sched.strided:
            how = f"strided gather (cpu.parity): parallel over {', '.join(parallel[k])}"
        elif k in parallel:
            how = f"partial scatter: parallel over {', '.join(parallel[k])} only"
        elif kind is WriteKind.DATA_DEPENDENT:
            how = "serial: data-dependent scatter"
        else:
            how = "serial: affine scatter"
        notes.append(f"statement {sched.origin(k)} ({print_stmt(stmts[k]).strip()}): {how}")
    return tuple(notes)


def _init_names(facts: StmtFacts, params: tuple[str, ...]) -> tuple[str, ...]:
    """The init nest's loop variables: the left-hand side's when they are plain
    distinct variables, else fresh `d0, d1, ...`."""
    args = facts.stmt.lhs.args
    names = [a.name for a in args if isinstance(a, Var)]
    if len(names) == len(args) and len(set(names)) == len(names):
        return tuple(names)
    taken = set(params) | set(facts.all_vars) | set(facts.lets)
    result = []
    for k in range(len(args)):
        name = f"d{k}"
        while name in taken:
            name += "_"
        result.append(name)
    return tuple(result)


def init_domain(
    index: int, names: tuple[str, ...], extent: tuple[Expr, ...], params: tuple[str, ...]
) -> isl.Set:
    """`I<index>[d...] : 0 <= d_j < extent_j` (the output's whole box)."""
    space = StmtSpace(names, params)
    domain = space.context
    for name, hi in zip(names, extent, strict=True):
        d = space.var(name)
        domain = domain & space.const(0).le_set(d) & d.lt_set(expr_to_aff(hi, space))
    return domain.coalesce().set_tuple_name(f"I{index}")


__all__ = [
    "LITERAL",
    "LiteralModel",
    "LoopOrder",
    "Model",
    "Nest",
    "NestKind",
    "NestVersions",
    "Rewritten",
    "RunTimeCheck",
    "Schedule",
    "TileBand",
    "Views",
    "init_domain",
    "scatter_notes",
    "schedule",
    "size_context",
    "tensor_extents",
]
