"""Scatter -> gather: restate every affine scatter so that each output element is
written by exactly one outer iteration.

Requires: a `RangedDef` (every variable of every statement has a `where` range).
Ensures:  `scatter_to_gather` returns a `RangedDef` (checked again; its printed text
          also passes range inference, which tests confirm) in which
          every statement's left-hand side is distinct plain index variables, except
          data-dependent scatters (`E_grad(idx(i), d) += ...`) and, unless
          `mode="full"` (the default), the partial scatters it keeps (below), which
          stay as they are: `remaining_scatters` lists them; a backend runs them with
          atomics, serially, or (partial ones) in parallel over their plain variables. A def with nothing to rewrite is returned as is (the
          same object). The pass is pure.

Worked example (conv input gradient)::

    I_grad(n, c, h + kh, w + kw) +=! O_grad(n, m, h, w) * W(m, c, kh, kw)
        where n in 0:N, m in 0:M, h in 0:H - KH + 1, w in 0:W - KW + 1, c in 0:C,
              kh in 0:KH, kw in 0:KW
  ==>
    I_grad(n, c, y, x) +=! O_grad(n, m, y - kh, x - kw) * W(m, c, kh, kw)
        where n in 0:N, c in 0:C, y in 0:H, x in 0:W, m in 0:M,
              kh in max(0, y + KH - H):min(KH, y + 1), kw in max(0, x + KW - W):min(KW, x + 1)

(`+=!` stays: y and x cover the whole of I_grad, so each element is initialised by
its own outer iteration; tests/golden/gather/ has the other shapes.)

How (`poly.invert` does the isl work): the statement is rescheduled with its written
indices outermost (`[n, c, h + kh, w + kw]`), followed by inner variables that make the
schedule injective. When every subscript has a variable of its own with coefficient
+-1 (`poly.invert.unit_inner`), that variable is eliminated and the others are inner:
`2 * h + kh = y` gives `kh = y - 2 * h`, `h` inside with a floor-divided range, and no
divisibility constraint (and no isl search: it compiles in a fraction of a second);
otherwise `choose_inner` searches (reduction variables first, then small ranges,
avoiding strides that would need a divisibility guard). The outer indices get fresh
names (a plain index variable keeps its own), the other variables become functions of
the new ones, and every range is exact, non-rectangular where needed, from isl. What a
range cannot say becomes a quasi-affine where-constraint (`A_grad(3 * i) += B(i)` ==>
`A_grad(y) += B(y / 3) where y in 0:3 * N - 2, y % 3 in 0:1`): only where some
subscript has no unit-coefficient variable (`O(2 * i + 3 * k)`). A domain that is not
convex in the new coordinates becomes one statement per convex piece.

Worked example (strided conv input gradient, tests/golden/gather/strided_conv_grad.txt)::

    I_grad(n, c, 2 * h + kh, 2 * w + kw) +=! O_grad(n, m, h, w) * W1(m, c, kh, kw)
  ==>
    I_grad(n, c, y, x) += O_grad(n, m, h, w) * W1(m, c, y - 2 * h, x - 2 * w)
        where ..., m in 0:M, h in max(0, (y - KH) / 2 + 1):min(HO, y / 2 + 1), ...

(after an `I_grad(n, c, y, x) = 0` over the whole output when the windows miss its
last row or column).

Operators: `+=`, `*=`, `min=`, `max=` keep their meaning exactly (the gather combines
the same contributions). `op!` initialises the whole output: the gather keeps `op!`
when its outer iterations cover the whole output (every element is written by its own
outer iteration); otherwise an explicit `X(y...) = identity` over the whole output
comes first and the gather accumulates with `op` (for `+` and `*`; `min=!` / `max=!`
keep `op!` on the first piece, which by TC's definition initialises the whole output).
A plain `=` whose left-hand side writes an element twice is an error (TC leaves it
undefined).

Budget: isl's work on one statement is capped (`max_operations`, isl's
`isl_ctx_set_max_operations`; default `MAX_OPERATIONS`). Past it the statement is kept
as the scatter it was -- scheduled in parallel over its plain left-hand-side variables
only (`poly.partial`), or serially, still correct -- with a `GatherBudgetWarning` that
says so; a few pathological strided subscripts (`2 * h + 3 * w + kh`) would otherwise
keep isl busy for minutes (with `mode="auto"`, the CPU default, such a scatter is not
even tried: it is a partial scatter).

Partial scatters (`mode`, `Options.gather`; `compiler/poly/partial.py`): with
`mode="auto"` a reduction scatter whose left-hand side has plain variables (`n`, `c`
of `I_grad(n, c, 2 * h + kh, 2 * w + kw)`) and a stride, a dilation or a floor
division in another subscript (`partial.strided`) is left as it is; the schedule runs
it in parallel over the plain variables. That is the CPU's schedule choice, measured
(2 threads, `tools/bench`'s stride-2 case): the gradient kernel takes 3.2 ms as the
partial scatter against 7.3 as the gather, whose floor-divided windows defeat the
CPU model's vectorisation; a stride-2 transposed convolution's forward 2.3 against
6.1. The def as printed (`printed_form`: `tcc compile --grad`, `compiler.grad`,
`Kernel.grad_source`) is the gather all the same; only a scatter whose gather would
need divisibility (`partial.needs_divisibility`) stays a scatter there. The GPU
lowering always asks for the full gather (one thread per output element).
"""

from __future__ import annotations

import contextvars
import dataclasses
import enum
import threading
import warnings
from collections.abc import Callable, Sequence

import islpy as isl

from compiler.diagnostics import InternalError, RangeError, TCError
from compiler.frontend.ast import (
    Access,
    AssignOp,
    Cast,
    Const,
    Exists,
    Expr,
    Let,
    RangeConstraint,
    ScalarType,
    Stmt,
    Var,
    WhereClause,
)
from compiler.frontend.builtins import ARITY
from compiler.frontend.check import check_def
from compiler.frontend.checked import Bound, RangedDef, StmtFacts
from compiler.frontend.printer import print_def, print_expr
from compiler.frontend.scopes import walk
from compiler.frontend.visit import substitute
from compiler.names import NameSupply
from compiler.poly.accesses import lets_of
from compiler.poly.build import domain_of, reads_in_bounds
from compiler.poly.failures import isl_failures
from compiler.poly.invert import (
    Inexpressible,
    Piece,
    choose_inner,
    invert,
    schedule_of,
    unit_inner,
)
from compiler.poly.isl_bridge import StmtSpace, condition_of, expr_to_aff
from compiler.poly.partial import keep_partial, subscript_rows

# isl operations allowed per statement: the gathers of the test suite and the corpus
# need well under a tenth of it (tests/poly/test_gather_budget.py).
MAX_OPERATIONS = 3_000_000
# The give-up messages of the derivation running in this context, when one collects
# them (`pipeline.gradient` warns them again whenever it gives a remembered gradient).
GAVE_UP: contextvars.ContextVar[list[str] | None] = contextvars.ContextVar("gave_up", default=None)
_BUDGET_LOCK = threading.Lock()


class GatherBudgetWarning(UserWarning):
    """The gather pass gave up on a statement within its isl budget: it stays a scatter."""


class _OutOfBudget(Exception):
    pass


class WriteKind(enum.Enum):
    """How a statement writes its output."""

    GATHER = "gather"  # distinct plain index variables: one writer per element
    SCATTER = "scatter"  # quasi-affine subscripts: `scatter_to_gather` rewrites it
    DATA_DEPENDENT = "data-dependent scatter"  # a subscript reads a tensor


def write_kind(facts: StmtFacts) -> WriteKind:
    args = facts.stmt.lhs.args
    if any(isinstance(n, Access) for a in args for n in walk(a)):
        return WriteKind.DATA_DEPENDENT
    names = [a.name for a in args if isinstance(a, Var) and a.name in facts.index_vars]
    if len(names) == len(args) and len(set(names)) == len(names):
        return WriteKind.GATHER
    return WriteKind.SCATTER


def remaining_scatters(ranged: RangedDef) -> tuple[int, ...]:
    """Indices of the statements that are still scatters: after `scatter_to_gather`,
    only data-dependent ones, which need atomic updates or a serial loop (and, with
    `mode="auto"` or `"partial"`, the partial scatters, which run parallel over their plain
    variables: `poly.partial`)."""
    return tuple(
        k for k, f in enumerate(ranged.checked.stmts) if write_kind(f) is not WriteKind.GATHER
    )


def scatter_to_gather(
    ranged: RangedDef,
    max_operations: int | None = None,
    *,
    mode: str = "full",
    printed: bool = False,
) -> RangedDef:
    """Rewrite every affine scatter of `ranged` as a gather (see the module doc); a
    statement that needs more than `max_operations` isl operations (default
    `MAX_OPERATIONS`; 0: no limit) stays a scatter, with a `GatherBudgetWarning`.
    `mode` (`Options.gather` of the CPU target): "full" gathers every affine scatter;
    "auto" keeps as a scatter each one that `poly.partial.keep_partial` picks (plain
    variables, and a gather that would need divisibility: strides, dilations);
    "partial" keeps every reduction scatter with plain variables. The schedule runs a
    kept scatter in parallel over its plain variables. `printed`: "auto" keeps only
    the scatters whose gather would need divisibility (`printed_form`)."""
    budget = MAX_OPERATIONS if max_operations is None else max_operations
    checked = ranged.checked
    params = checked.size_params
    kept = {
        k
        for k, f in enumerate(checked.stmts)
        if write_kind(f) is WriteKind.SCATTER and keep_partial(f, params, mode, printed=printed)
    }
    if all(
        write_kind(f) is not WriteKind.SCATTER or k in kept for k, f in enumerate(checked.stmts)
    ):
        return ranged
    stmts: list[Stmt] = []
    initialised: set[str] = set()  # outputs that got an explicit initialisation
    for k, (stmt, facts) in enumerate(zip(checked.definition.stmts, checked.stmts, strict=True)):
        if write_kind(facts) is WriteKind.SCATTER and k not in kept:
            try:
                with isl_failures(stmt):
                    new = _budgeted(_gather, budget, dataclasses.replace(facts, stmt=stmt), ranged)
            except _OutOfBudget:
                message = (
                    f"the scatter -> gather pass gave up on `{print_expr(stmt.lhs)} "
                    f"{stmt.op.value} ...` "
                    f"after {budget} isl operations: it stays a scatter, which runs "
                    "serially, or in parallel over its plain variables only (correct, "
                    "but less parallel)"
                )
                warnings.warn(message, GatherBudgetWarning, stacklevel=2)
                gave_up = GAVE_UP.get()
                if gave_up is not None:
                    gave_up.append(message)
                new = [stmt]
            if len(new) > 1 and new[0].op is AssignOp.ASSIGN and stmt.op.init:
                initialised.add(stmt.lhs.name)
            stmts.extend(new)
        else:
            stmts.append(stmt)
    definition = dataclasses.replace(checked.definition, stmts=tuple(stmts))
    try:
        rechecked = check_def(definition)
    except TCError as e:
        raise InternalError(f"the gather form does not check:\n{print_def(definition)}\n{e}") from e
    # Every variable already has its exact range, and each output's written elements
    # are the same set as before, so range inference would only confirm them (at a
    # cost: seconds for strided bounds); outputs that got an explicit initialisation
    # are now written from index 0.
    bounds = tuple(
        (name, tuple(_from_zero(b) for b in dims) if name in initialised else dims)
        for name, dims in ranged.output_bounds
    )
    return RangedDef(rechecked, bounds, ranged.warnings, ranged.preconditions)


def printed_form(ranged: RangedDef, mode: str = "auto") -> RangedDef:
    """`ranged` (the gather pass's result under `mode`) as a gradient def is printed
    (`tcc compile --grad`, `compiler.grad`, `Kernel.grad_source`): with "auto", the
    strided scatters the CPU keeps as partial scatters (its schedule choice: they run
    faster than their gathers) are gathered, by unit-coefficient elimination; a
    scatter whose gather would need divisibility stays. The same object when nothing
    changes."""
    return scatter_to_gather(ranged, mode=mode, printed=True)


def _budgeted(fn: Callable[..., list[Stmt]], budget: int, *args: object) -> list[Stmt]:
    """`fn(*args)` with isl's operation counter capped at `budget`; `_OutOfBudget` when
    isl stopped at the cap (a failed call returns NULL, which surfaces as isl.Error or,
    inside islpy's conversions, as another exception)."""
    ctx = isl.DEFAULT_CONTEXT
    with _BUDGET_LOCK:
        previous = ctx.get_max_operations()
        ctx.set_max_operations(budget)
        ctx.reset_operations()
        try:
            return fn(*args)
        except Exception as e:
            if budget and (_quota_message(e) or _exhausted(ctx)):
                raise _OutOfBudget from e
            raise
        finally:
            ctx.set_max_operations(previous)
            ctx.reset_operations()


def _quota_message(e: Exception) -> bool:
    return isinstance(e, isl.Error) and "number of operations exceeded" in str(e)


def _exhausted(ctx: isl.Context) -> bool:
    """Whether the counter is past the cap: then even a trivial isl query fails."""
    try:  # a valid set that isl must parse and solve afresh (results are cached)
        isl.Set("[N] -> { [i] : 0 <= i < N and 2 <= i <= 3 }", context=ctx).lexmin()
    except isl.Error:
        return True
    return False


def _from_zero(bound: Bound) -> Bound:
    return Bound(Const(0, ScalarType.INT32), bound.hi)


def check_assignments(ranged: RangedDef) -> None:
    """Raise, for an `=` scatter of `ranged` that writes some element at more than one
    point, the RangeError the gather pass raises. The defs AD generates go through it
    on every target: the interp target would keep one of the values (TC leaves it
    undefined), so an AD bug (`O_dot(i + k) = ...`) would be a silent wrong result."""
    params = ranged.checked.size_params
    for stmt, facts in zip(ranged.checked.definition.stmts, ranged.checked.stmts, strict=True):
        if stmt.op is not AssignOp.ASSIGN or write_kind(facts) is not WriteKind.SCATTER:
            continue
        facts = dataclasses.replace(facts, stmt=stmt)
        with isl_failures(stmt):
            space = StmtSpace(facts.all_vars, params)
            domain = domain_of(stmt, space, "S")
            if choose_inner(domain, _write_map(stmt, space, domain), _candidates(facts)):
                raise _written_twice(stmt)


def _written_twice(stmt: Stmt) -> RangeError:
    return RangeError(
        f"`{print_expr(stmt.lhs)} = ...` writes some elements of '{stmt.lhs.name}' more "
        "than once, and which value is kept is undefined",
        stmt.lhs.span,
        "use a reduction (`+=`, `max=`, ...) to combine the values",
    )


# ------------------------------------------------------------ one statement


def _gather(facts: StmtFacts, ranged: RangedDef) -> list[Stmt]:
    stmt = facts.stmt
    params = ranged.checked.size_params
    space = StmtSpace(facts.all_vars, params)
    domain = domain_of(stmt, space, "S")
    write = _write_map(stmt, space, domain)
    inner = _inner_vars(facts, params, domain, write)
    if stmt.op is AssignOp.ASSIGN and inner:
        raise _written_twice(stmt)
    outer = _outer_names(stmt, facts, ranged)
    try:
        pieces = _invert(facts, write, domain, outer, inner, params)
    except Inexpressible:
        # the image has existential variables TC cannot name: keep every variable as
        # an inner loop, so the domain is the graph of the write map (equalities)
        every = tuple(inner) + tuple(p for p in _candidates(facts) if p not in inner)
        pieces = _invert(facts, write, domain, outer, every, params)
    hi = tuple(b.hi for b in ranged.bounds_of(stmt.lhs.name))
    op, init = stmt.op, None
    if op.init and not (len(pieces) == 1 and _covers(write, domain, outer, hi, params)):
        if op.base in (AssignOp.PLUS, AssignOp.TIMES):
            init = _init_stmt(stmt, ranged, outer, hi)
            op = op.base
    result = [] if init is None else [init]
    made = [_piece_stmt(stmt, piece, outer, op.base) for piece in pieces]
    kept = [s for s in made if not _never_in_bounds(s, ranged)] or made
    for k, piece_stmt in enumerate(kept):
        result.append(dataclasses.replace(piece_stmt, op=op) if k == 0 else piece_stmt)
    return result


def _inner_vars(
    facts: StmtFacts, params: Sequence[str], domain: isl.Set, write: isl.Map
) -> tuple[int, ...]:
    """The inner variables: for a reduction whose every subscript can be solved for a
    unit-coefficient variable of its own, the others (`poly.invert.unit_inner`: no
    divisibility, and no isl search); otherwise `choose_inner`'s. An `=` always asks
    `choose_inner`, which keeps no variable that the subscripts determine (an inner
    variable there means an element written twice)."""
    candidates = _candidates(facts)
    if facts.stmt.op is not AssignOp.ASSIGN:
        rows = subscript_rows(facts, tuple(params))
        inner = None if rows is None else unit_inner(rows, candidates)
        if inner is not None:
            return inner
    return choose_inner(domain, write, candidates)


def _never_in_bounds(stmt: Stmt, ranged: RangedDef) -> bool:
    """Whether a piece reads an input out of bounds at every size for which it runs:
    sizes at which the forward def fails (its output index is negative, say), which
    range inference would reject in the gradient ("out of bounds for every size").
    Such a piece is dropped: for the sizes a valid call may have it is empty."""
    # a guard may constrain a variable alone (`j in 0:j + 1`: j >= 0), after its range
    names = tuple(
        dict.fromkeys(
            c.expr.name
            for c in stmt.where
            if isinstance(c, RangeConstraint) and isinstance(c.expr, Var)
        )
    )
    space = StmtSpace(names, ranged.checked.size_params)
    domain = domain_of(stmt, space, "S", coalesce=False)  # emptiness tests only
    if domain.is_empty():
        return False
    bad = domain - reads_in_bounds(ranged, stmt, space, domain)
    return (domain.params() - bad.params()).is_empty()


def _invert(
    facts: StmtFacts,
    write: isl.Map,
    domain: isl.Set,
    outer: tuple[str, ...],
    inner: Sequence[int],
    params: Sequence[str],
) -> tuple[Piece, ...]:
    names = outer + tuple(facts.all_vars[p] for p in inner)
    return invert(schedule_of(write, domain, inner), facts.all_vars, names, params)


def _write_map(stmt: Stmt, space: StmtSpace, domain: isl.Set) -> isl.Map:
    """`S[vars] -> [subscripts]` on `domain` (anonymous range)."""
    lets = lets_of(stmt)
    write = isl.Map.from_domain(space.universe)
    for arg in stmt.lhs.args:
        write = write.flat_range_product(isl.Map.from_pw_aff(expr_to_aff(arg, space, lets)))
    return write.set_tuple_name(isl.dim_type.in_, "S").intersect_domain(domain)


def _extent_class(stmt: Stmt, var: str) -> tuple[int, int]:
    """Smaller first: a constant extent (by value), then `0:SIZE`, then the rest."""
    for c in stmt.where:
        if isinstance(c, RangeConstraint) and c.expr == Var(var):
            if isinstance(c.lo, Const) and isinstance(c.hi, Const):
                return 0, int(c.hi.value) - int(c.lo.value)
            if c.lo == Const(0, ScalarType.INT32) and isinstance(c.hi, Var):
                return 1, 0
            break
    return 2, 0


def _candidates(facts: StmtFacts) -> list[int]:
    """Variable positions in order of preference as inner variables."""
    order = facts.all_vars

    def key(v: str) -> tuple[int, int, int, int]:
        return (v not in facts.reduction_vars, *_extent_class(facts.stmt, v), order.index(v))

    return [order.index(v) for v in sorted(order, key=key)]


_POOL = ("y", "x", "z", "u", "t", "s", "r", "q", "p")


def _outer_names(stmt: Stmt, facts: StmtFacts, ranged: RangedDef) -> tuple[str, ...]:
    """One name per output dimension: a plain index variable keeps its name (once);
    other dimensions get fresh names that clash with nothing in the def."""
    def_names = set(ARITY) | set(ranged.checked.size_params)
    def_names |= {t.name for t in ranged.checked.tensors}
    supply = NameSupply(def_names, set(facts.all_vars) | set(lets_of(stmt)))
    names: list[str] = []
    for arg in stmt.lhs.args:
        if isinstance(arg, Var) and arg.name in facts.all_vars and arg.name not in names:
            names.append(arg.name)
        else:
            names.append(supply.first_free(_POOL, "y"))
    return tuple(names)


def _covers(
    write: isl.Map, domain: isl.Set, outer: Sequence[str], hi: Sequence[Expr], params: Sequence[str]
) -> bool:
    """Whether the written elements are every element of the output `0:hi` box."""
    space = StmtSpace(outer, params)
    box = space.context
    for name, end in zip(outer, hi, strict=True):
        box = box & condition_of(Var(name), Const(0, ScalarType.INT32), end, space)
    image = write.intersect_domain(domain).range().reset_tuple_id()
    for k, name in enumerate(outer):
        image = image.set_dim_name(isl.dim_type.set, k, name)
    # only sizes for which the statement runs count (elsewhere the output is the
    # identity everywhere, whatever the form)
    runs = domain.params()
    image = image.align_params(box.get_space()).intersect_params(runs)
    return bool(image.is_equal(box.align_params(image.get_space()).intersect_params(runs)))


def _init_stmt(stmt: Stmt, ranged: RangedDef, outer: Sequence[str], hi: Sequence[Expr]) -> Stmt:
    """`X(y...) = identity where y in 0:hi...`, in the output's own type."""
    dtype = ranged.checked.tensor(stmt.lhs.name).dtype
    value = 0 if stmt.op.base is AssignOp.PLUS else 1
    where = tuple(
        RangeConstraint(Var(n), Const(0, ScalarType.INT32), h)
        for n, h in zip(outer, hi, strict=True)
    )
    lhs = Access(stmt.lhs.name, tuple(Var(n) for n in outer))
    value_expr = Cast(dtype, Const(value, ScalarType.INT32))
    return Stmt(lhs, AssignOp.ASSIGN, value_expr, where, span=stmt.span)


def _piece_stmt(stmt: Stmt, piece: Piece, outer: Sequence[str], op: AssignOp) -> Stmt:
    values = dict(piece.values)
    clauses: list[WhereClause] = [
        RangeConstraint(r.expr, r.lo, r.hi) for r in (*piece.ranges, *piece.guards)
    ]
    for c in stmt.where:
        if isinstance(c, Let):
            clauses.append(Let(c.name, substitute(c.value, values)))
        elif isinstance(c, Exists):
            clauses.append(Exists(substitute(c.expr, values)))
    equivalent = stmt.equivalent
    if equivalent is not None:
        equivalent = Access(equivalent.name, tuple(substitute(a, values) for a in equivalent.args))
    return dataclasses.replace(
        stmt,
        lhs=Access(stmt.lhs.name, tuple(Var(n) for n in outer), span=stmt.lhs.span),
        op=op,
        rhs=substitute(stmt.rhs, values),
        where=tuple(clauses),
        equivalent=equivalent,
    )
