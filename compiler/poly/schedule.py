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
- with `pad=True` (the CPU target), a clamped gather reads a zero-padded copy of
  its input first (`cpu.pad`): the schedule then holds the def that pass made, with
  the pads as `Schedule.scratch` (temporaries of the loops, never outputs of the def
  the caller sees) and, where the sizes decide whether padding pays, both versions;
- with `pad=True` and `Options.factor`, a scatter that is not injective and has
  reduction variables of its own sums them into a scratch tensor first, which the
  scatter then adds (`cpu.factor`: the contraction is register-tiled like a matmul);
- with `pad=True` and `Options.merge`, adjacent loops that walk whole dimensions in
  every access become one loop first (`cpu.merge`: `h, w` -> `hw`; `Schedule.views`
  says how the lowered loops see the caller's buffers again);
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

import dataclasses
import enum
from collections.abc import Iterator
from dataclasses import dataclass

import islpy as isl

from compiler.cpu.aliasing import AliasCheck, alias_check
from compiler.cpu.cpu_model import LoopOrder, choose_order, literal_order
from compiler.cpu.cpu_registers import panel_rows
from compiler.cpu.factor import factor_scatters
from compiler.cpu.merge import Views, merge_loops
from compiler.cpu.pad import pad_gathers
from compiler.cpu.parity import split_parities
from compiler.cpu.rows import FewRows, few_rows
from compiler.cpu.tiling import choose_tiles
from compiler.diagnostics import InternalError, OptionsError
from compiler.frontend.ast import Access, Binary, BinOp, Const, Expr, Let, RangeConstraint, Var
from compiler.frontend.checked import RangedDef, StmtFacts
from compiler.frontend.printer import print_stmt
from compiler.frontend.scopes import children
from compiler.frontend.visit import walk
from compiler.options import Options
from compiler.poly.build import PolyStmt, build_statements, tensor_extents
from compiler.poly.failures import isl_failures
from compiler.poly.gather import WriteKind, write_kind
from compiler.poly.isl_bridge import NotAffine, StmtSpace, expr_to_aff, params_space
from compiler.poly.lower_expr import bound_to_loops
from compiler.poly.partial import partial_order, plain_vars


class NestKind(enum.Enum):
    INIT = "init"
    STMT = "stmt"


@dataclass(frozen=True)
class SwapCheck:
    """When a dot tile runs with its two jammed output loops `p, q` swapped (`q`
    outside): `q`'s extent is larger than `p`'s and the operand read with `q` (about
    `streamed` elements: `q`'s extent times the reduction's) exceeds `STREAMED`. In the
    literal order that operand is read again for every block of `p`; swapped, the
    smaller one is, and it stays in L2 (measured, 2 threads, float32, Y(n, o) +=!
    X(n, i) * W(o, i): 256x1024 -> 1024 5.2 -> 3.9 ms, torch 2.1; 64x256 -> 1024, where
    both fit in L2, 0.26 -> 0.30 ms swapped, hence the size test)."""

    first: Expr  # q's extent
    second: Expr  # p's extent
    streamed: Expr  # q's extent times the reduction loops' extents


STREAMED = 1 << 18  # elements (1 MiB of float32): more does not stay in L2 beside the rest


@dataclass(frozen=True)
class RowsCheck:
    """When a statement in transposed panels (`cpu_model.transposed_panels`) runs as
    its dot tile instead: its rows (the extent of the row-blocked loop) are fewer than
    `min_rows` (`cpu_registers.panel_rows`: 256 with AVX-512, 64 with AVX2), or its lanes
    (the extent of the panels' columns) fewer than `cpu_model.PANEL_LANES`. With few rows each copied element is read too few times
    for the copy and its extra parallel regions to pay; with few lanes most columns
    fall outside the 32-lane tiles. Measured, 2 threads, float32 `A B^T` (M x N x K),
    dot tile / panels, ms, AVX-512: 512x512x64 0.39 / 0.30, 512x512x256 0.96 / 0.72,
    256x256x64 0.16 / 0.13, 1024x64x64 0.16 / 0.12; but 128x1024x1024 2.23 / 2.45,
    160x256x256 0.25 / 0.33, 1024x16x64 0.06 / 0.45, 512x40x100 0.09 / 0.23. (The rule
    before, rows under 128 or a source of fewer than 2^18 elements, took the dot tile
    for 512x512x256 and the panels for 128x1024x1024.)"""

    rows: Expr
    lanes: Expr
    min_rows: int


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
    alias: AliasCheck | None = None
    # or, for a dot tile, its two jammed output loops swapped (`LoopOrder.swap`), run
    # instead when `SwapCheck` holds at run time
    larger: SwapCheck | None = None
    # or, for transposed panels, the dot tile, run instead when `RowsCheck` holds
    rows: RowsCheck | None = None
    # pointwise statements over the same domain, computed at each instance of this one
    # (`poly.companions`)
    companions: tuple[Nest, ...] = ()
    # versions for fewer rows than the register tile's row block (`cpu.rows`)
    few_rows: FewRows | None = None

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
class Schedule:
    """The nests of `ranged` (with `pad`, the def `cpu.pad` made: it may hold more
    statements and, as outputs, the `scratch` tensors the loops allocate themselves)."""

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

    def extent(self, tensor: str) -> tuple[Expr, ...]:
        return dict(self.extents)[tensor]

    def origin(self, stmt: int) -> int:
        """The position, in the def that was scheduled, of statement `stmt` of `ranged`."""
        return stmt if self.origins is None else self.origins[stmt]


def schedule(ranged: RangedDef, options: Options | None = None, *, pad: bool = False) -> Schedule:
    """The nests of `ranged`, in execution order (see the module doc). `pad` (the CPU
    target): clamped gathers read zero-padded scratch copies first (`cpu.pad`)."""
    options = options or Options()
    _check_statements(options, len(ranged.checked.stmts))
    scratch: tuple[str, ...] = ()
    origins = None
    views = Views()
    strided: frozenset[int] = frozenset()
    if pad:
        split = split_parities(ranged) if options.gather == "auto" else None
        padded = pad_gathers(*((ranged,) if split is None else (split.ranged, split.classes)))
        ranged, scratch, origins = padded.ranged, padded.scratch, padded.origins
        if split is not None:  # the pads' origins are statements of the split def
            strided = frozenset(k for k, o in enumerate(origins) if o in split.classes)
            origins = tuple(split.origins[k] for k in origins)
        if options.factor:  # a scatter's contraction into a scratch tensor (cpu.factor)
            factored = factor_scatters(ranged)
            if factored.scratch:
                ranged, scratch = factored.ranged, scratch + factored.scratch
                strided = frozenset(k for k, o in enumerate(factored.origins) if o in strided)
                origins = tuple(origins[o] for o in factored.origins)
        if options.merge:  # the CPU target: merged loops see tensors as views (cpu.merge)
            merged = merge_loops(ranged, scratch)
            ranged, views = merged.ranged, merged.views
    params = ranged.checked.size_params
    extents = tensor_extents(ranged)
    context = size_context(ranged)
    nests: list[Nest] = []
    stmts = zip(build_statements(ranged), _ranged_facts(ranged), strict=True)
    for k, (poly, facts) in enumerate(stmts):
        own = options.for_statement(k if origins is None else origins[k])  # per_statement
        with isl_failures(facts.stmt):
            made = _nests_of(poly, facts, extents, params, context, own)
        # a nest that runs at no size a call may have gets no loops (isl builds no AST
        # for an empty domain): a gradient's piece for sizes its inputs' shapes exclude
        nests.extend(n for n in made if not n.domain.intersect_params(context).is_empty())
    if options.fuse:
        from compiler.poly.companions import with_companions  # it reads this module's Nest

        nests = with_companions(nests, context)
    return Schedule(
        ranged, tuple(nests), context, tuple(extents.items()), scratch, origins, views, strided
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
) -> list[Nest]:
    stmt = facts.stmt
    extent = extents[stmt.lhs.name]
    # A data-dependent scatter may write one element from several instances, in an
    # order only the data decides: it runs serially (never parallel, never in a register).
    injective = poly.nonaffine_write is None and poly.lhs_injective()
    self_reads = list(_self_reads(facts))
    # an affine scatter runs in parallel over its plain variables (poly.partial)
    partial = not injective and poly.nonaffine_write is None and bool(plain_vars(facts))
    if partial:
        order = partial_order(facts, params)
        tiles: tuple[int, ...] = ()
    else:
        order = choose_order(
            facts, params, options, injective=injective, self_reads=bool(self_reads)
        )
        tiles = choose_tiles(facts, order, options)
    if order.innermost and not order.outer and not tiles:
        order = literal_order(facts)  # an untiled column reduction would run serially
    accumulate = injective and stmt.op.is_reduction and order.register
    snapshot = bool(self_reads) and not (
        (accumulate or (injective and not facts.reduction_vars))
        and all(_same_element(poly, facts, r, params) for r in self_reads)
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
    check = alias_check(facts, order, extents)
    if check is not None and not (main.unproven or main.write_checks):
        reduction = order.inner[-1]
        jams = tuple((facts.reduction_vars[-1] if v == reduction else v, k) for v, k in order.jams)
        literal = dataclasses.replace(main, inner=facts.reduction_vars, jams=jams)
        main = dataclasses.replace(main, alternative=literal, alias=check)
    swapped = _swapped(main, order, facts, params)
    if swapped is not None:
        main = swapped
    if order.fallback is not None and main.alternative is None:
        main = _with_fallback(main, order, facts, params, options)
    main = few_rows(main, facts, params)  # versions for fewer rows than the block
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


def _self_reads(facts: StmtFacts) -> Iterator[Access]:
    """The reads of the statement's own output in its right-hand side and lets."""
    return _reads(facts, facts.stmt.lhs.name)


def _swapped(
    main: Nest, order: LoopOrder, facts: StmtFacts, params: tuple[str, ...]
) -> Nest | None:
    """`main` with its dot tile's loops swapped as its run-time alternative, or None
    (no swap, or an extent that is not an expression of the sizes alone)."""
    if order.swap is None or main.alternative is not None or main.unproven or main.write_checks:
        return None
    p, q = order.swap
    extents = _size_extents(facts, params, (p, q, *facts.reduction_vars))
    if extents is None:
        return None
    streamed = extents[q]
    for v in facts.reduction_vars:
        streamed = Binary(BinOp.MUL, streamed, extents[v])
    outer = tuple(q if v == p else p if v == q else v for v in main.outer)
    alternative = dataclasses.replace(main, outer=outer)
    check = SwapCheck(extents[q], extents[p], streamed)
    return dataclasses.replace(main, alternative=alternative, larger=check)


def _with_fallback(
    main: Nest, order: LoopOrder, facts: StmtFacts, params: tuple[str, ...], options: Options
) -> Nest:
    """`main` (transposed panels) with its dot tile as the run-time alternative for
    few rows (`RowsCheck`); `main` alone when the rows' extent is not an expression
    of the sizes, or the nest has run-time read or write checks."""
    dot = order.fallback
    if dot is None or main.unproven or main.write_checks:
        return main
    extents = _size_extents(facts, params, (order.outer[-1], *order.innermost, *order.inner))
    if extents is None:
        return main
    fallback = dataclasses.replace(
        main,
        outer=dot.outer,
        inner=dot.inner,
        innermost=dot.innermost,
        jams=dot.jams,
        tiles=choose_tiles(facts, dot, options),
        lanes=dot.lanes,
        accumulate=facts.stmt.op.is_reduction and dot.register,
    )
    fallback = _swapped(fallback, dot, facts, params) or fallback
    rows = extents[order.outer[-1]]
    check = RowsCheck(rows, extents[order.innermost[0]], panel_rows(options))
    return dataclasses.replace(main, alternative=fallback, rows=check)


def _size_extents(
    facts: StmtFacts, params: tuple[str, ...], wanted: tuple[str, ...]
) -> dict[str, Expr] | None:
    """`hi - lo` of the ranges `v in lo:hi` of the variables `wanted`, or None when one
    has no such range or its extent is not an expression of the sizes alone (a range
    that depends on another loop: a second derivative's), so no run-time test on the
    sizes can use it."""
    extents = {}
    for c in facts.stmt.where:
        if isinstance(c, RangeConstraint) and isinstance(c.expr, Var):
            extents[c.expr.name] = Binary(BinOp.SUB, c.hi, c.lo)
    if any(v not in extents for v in wanted):
        return None
    for v in wanted:
        if not {n.name for n in walk(extents[v]) if isinstance(n, Var)} <= set(params):
            return None
        try:
            bound_to_loops(extents[v])
        except InternalError:
            return None
    return extents


def _same_element(poly: PolyStmt, facts: StmtFacts, read: Access, params: tuple[str, ...]) -> bool:
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


__all__ = [
    "Nest",
    "NestKind",
    "Schedule",
    "init_domain",
    "scatter_notes",
    "schedule",
    "size_context",
    "tensor_extents",
    "unproven_reads",
    "unproven_writes",
]
