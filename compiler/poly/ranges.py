"""Range inference: TC's semantics, computed with isl.

Requires: a `CheckedDef` (names resolved, 0-d tensors as `Access`, index and reduction
          variables of every statement known).
Ensures:  a `RangedDef` whose statements carry one `where v in lo:hi` per index and
          reduction variable (user clauses kept as written; inferred ones appended in
          variable order), and `output_bounds`: per output and dimension, the range of
          indices written. Bounds are TC expressions of the size parameters.

The rules are Tensor Comprehensions' (tc2halide's forward bounds inference), statement
by statement in textual order:

1. Every read constrains its subscripts: `0 <= s < D` for an input of extent `D`, and
   `lo <= s < hi` for an output written by *earlier* statements: its extent so far,
   per dimension the hull of every earlier write (`output_bounds.record_output`), not
   only the latest write, which may update part of it (`B(x) += I(x) where x in
   N - 1:N` after `B(x) = I(x)` leaves B's extent 0:N; an element inside the hull
   that no statement wrote holds the initial value, as in the final shape). A
   reduction (`+=`, `+=!`, ...) of an output written earlier also reads its own
   left-hand side. Each side of each dimension is one constraint. A read that the
   ranges keep in bounds only for some sizes is a warning and, where the sizes alone
   decide it, a `Precondition` every call checks (`shapes.check_preconditions`).
2. `where i in lo:hi` fixes `i`; reads then only check it. [tcc] A clause on an affine
   expression (`where h - kh in 0:HO`) is a filter on the iteration domain.
3. Rounds: every variable that is the only unsolved variable of some constraints gets
   the largest interval satisfying them *for all* values of the variables solved in
   earlier rounds (`O(i) = I(i + k) * W(k)`: k in 0:K first, then i in 0:N - K + 1).
   isl does the "for all" exactly: the complement of the projection of the violating
   points. A round that solves nothing is an error.
4. Constraints whose variables are all solved become preconditions: checked on the
   final domain; one that cannot be proven is a warning (checked at run time), one
   violated for every size is an error.
5. [tcc] The def's where clause (`-> (O) where G >= 4 * H {`) narrows the sizes
   everything above considers (`poly.stated`): "every size" means every size that
   satisfies it, and the call checks it first. Its warnings suggest stating the
   relation a read needs there.

Output shapes (what each write gives its output: `poly.output_bounds`), a deliberate
difference from TC: tcc indexes an output by the index
value itself, so its shape is `hi` of each dimension. `O(i) = I(i - 1)` infers
i in 1:N + 1 and O gets shape N + 1 with O(0) left at its initial value, where TC
allocated `extent = N` elements and wrote O(N) out of bounds. A lower bound that is
negative (`O(i) = I(i + 5)`: i in -5:N - 5) cannot be stored: an error when it is
negative for every size, a warning (and a ShapeError at call time) when only for some.

Also stricter than TC: an empty `where` range (`where i in 8:4`) and an inferred range
empty for every size are errors (TC silently gave a negative extent).

Worked example::

    def conv(float(N, C, H, W) I, float(M, C, KH, KW) Wt) -> (O) {
        O(n, m, h, w) +=! I(n, c, h + kh, w + kw) * Wt(m, c, kh, kw)
    }

round 1 solves n, c, m, kh, kw (single-variable subscripts); round 2 solves
h in 0:H - KH + 1 and w in 0:W - KW + 1; O's shape is (N, M, H - KH + 1, W - KW + 1).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import islpy as isl

from compiler.diagnostics import Diagnostic, RangeError, Severity
from compiler.frontend.ast import (
    Access,
    Const,
    Expr,
    RangeConstraint,
    ScalarType,
    Stmt,
    Var,
)
from compiler.frontend.checked import (
    Bound,
    CheckedDef,
    Precondition,
    RangedDef,
    Role,
    StmtFacts,
    TensorInfo,
)
from compiler.frontend.printer import print_expr
from compiler.frontend.scopes import walk
from compiler.frontend.source import NO_SPAN, Span
from compiler.poly.accesses import Read, lets_of, reads_of
from compiler.poly.failures import isl_failures
from compiler.poly.isl_bridge import (
    NotAffine,
    StmtSpace,
    condition_of,
    condition_to_set,
    expr_to_aff,
    forall,
    forall_linear,
    interval_of,
    involves,
    only_dim,
    plus,
    pwaff_to_expr,
    set_to_expr,
)
from compiler.poly.output_bounds import record_output, within_declared
from compiler.poly.stated import clause_hint, stated_context, stated_preconditions


@dataclasses.dataclass(frozen=True)
class _Constraint:
    """One side of one dimension of one read: the points where it is in bounds."""

    aff: isl.PwAff  # in bounds where aff >= 0
    access: Access
    dim: int
    guard: isl.Set  # where the read is evaluated (its `?:`, `&&` and `||` conditions)
    exact: bool  # every guard is affine (a data-dependent one is assumed to hold anywhere)
    # in bounds where check >= 0, if not `aff`: an output's lower side, and the upper
    # side of one with a declared shape. Inference bounds a free variable by what was
    # written (`lo:hi`); a read over a range the def states may also touch the elements
    # below `lo` (or up to the declared shape), which hold the initial value
    check: isl.PwAff | None = None

    @property
    def cond(self) -> isl.Set:
        return _as_set(self.aff if self.check is None else self.check)


@dataclasses.dataclass
class _DefState:
    """What earlier statements established: bounds of written outputs, their images."""

    checked: CheckedDef
    params: tuple[str, ...]
    stated: isl.Set  # the sizes the def's where clause allows (`poly.stated`)
    known: dict[str, tuple[Bound, ...]] = dataclasses.field(default_factory=dict)
    images: dict[str, list[tuple[isl.Set, ...]]] = dataclasses.field(default_factory=dict)
    warnings: list[Diagnostic] = dataclasses.field(default_factory=list)
    preconditions: list[Precondition] = dataclasses.field(default_factory=list)
    by_name: dict[str, TensorInfo] = dataclasses.field(default_factory=dict)

    def __post_init__(self) -> None:
        self.by_name = {t.name: t for t in self.checked.tensors}  # O(1) per read


def infer_ranges(checked: CheckedDef) -> RangedDef:
    """Infer every variable's range and every output's bounds (see the module doc)."""
    state = _DefState(checked, tuple(checked.size_params), stated_context(checked))
    state.preconditions.extend(stated_preconditions(checked))
    stmts: list[Stmt] = []
    for facts in checked.stmts:
        with isl_failures(facts.stmt):
            stmts.append(_StmtInference(facts, state).run())
    definition = dataclasses.replace(checked.definition, stmts=tuple(stmts))
    facts = tuple(dataclasses.replace(f, stmt=s) for f, s in zip(checked.stmts, stmts, strict=True))
    bounds = tuple((t.name, _output_bounds(state, t.name)) for t in checked.outputs)
    return RangedDef(
        dataclasses.replace(checked, definition=definition, stmts=facts),
        bounds,
        tuple(state.warnings),
        tuple(state.preconditions),
    )


def _output_bounds(state: _DefState, name: str) -> tuple[Bound, ...]:
    """Per dimension, the hull of what every statement writing `name` writes (the
    extent after its last write: `output_bounds.record_output`), within its declared
    shape where the writes provably are (`output_bounds.within_declared`)."""
    bounds, dims = state.known.get(name, ()), state.by_name[name].dims
    return within_declared(bounds, state.images.get(name, []), dims, state.params, state.stated)


class _StmtInference:
    """Range inference of one statement (TC's rounds), then its preconditions."""

    def __init__(self, facts: StmtFacts, state: _DefState) -> None:
        self.facts = facts
        self.stmt = facts.stmt
        self.state = state
        self.space = StmtSpace(facts.all_vars, state.params)
        if state.checked.definition.where:  # the def's where clause narrows the sizes
            self.space.context = self.space.context.intersect_params(state.stated)
        self.lets = lets_of(self.stmt)
        self.ranges: dict[str, isl.Set] = {}  # solved variable -> its range
        self.bounds: dict[str, Bound] = {}  # inferred variable -> its bound expressions
        # variable position -> (first, last) value, for variables with an interval range
        self.extremes: dict[int, tuple[isl.PwAff, isl.PwAff]] = {}
        self.filters = self.space.context

    # ------------------------------------------------------------- driver

    def run(self) -> Stmt:
        self._fix_where_ranges()
        reads = reads_of(self.stmt, self.state.known)
        constraints = [c for r in reads for c in self._constraints_of(r)]
        self._solve(constraints)
        self._warn_guarded_bounds(constraints)
        domain = self._domain()
        if domain.is_empty():
            raise self.error(
                "this statement runs for no sizes at all: its ranges are empty for every size",
                self.stmt.span,
                "check the where clauses; a guarded read (`c ? A(i + 1) : 0`) still bounds "
                "the index variables in it (see docs/language.md, range inference)",
            )
        self._check_preconditions(constraints, domain)
        record_output(self, domain)
        generated = tuple(
            RangeConstraint(Var(v), self.bounds[v].lo, self.bounds[v].hi, span=self._var_span(v))
            for v in self.facts.all_vars
            if v in self.bounds
        )
        return dataclasses.replace(self.stmt, where=self.stmt.where + generated)

    def error(self, message: str, span: Span, hint: str | None = None) -> RangeError:
        return RangeError(message, span if span is not NO_SPAN else self.stmt.span, hint)

    def warn(self, message: str, span: Span, hint: str | None = None) -> None:
        span = span if span is not NO_SPAN else self.stmt.span
        self.state.warnings.append(Diagnostic(Severity.WARNING, message, span, hint))

    def aff(self, expr: Expr, what: str) -> isl.PwAff:
        try:
            return expr_to_aff(expr, self.space, self.lets)
        except NotAffine as e:
            raise self.error(
                f"{what} `{print_expr(expr)}` is not affine in the sizes and index variables",
                expr.span,
                "write it with +, -, multiplication by a constant, / and % by a positive "
                "constant, min and max",
            ) from e

    # ------------------------------------------------------------- where clauses

    def _fix_where_ranges(self) -> None:
        for clause in self.stmt.where:
            if not isinstance(clause, RangeConstraint):
                continue
            e = self.aff(clause.expr, "the constrained expression")
            lo, hi = self.aff(clause.lo, "the bound"), self.aff(clause.hi, "the bound")
            cond = lo.le_set(e) & e.lt_set(hi)
            if (cond & self.space.context).is_empty():
                raise self.error(
                    f"empty range: `{print_expr(clause.expr)} in {print_expr(clause.lo)}:"
                    f"{print_expr(clause.hi)}` contains no value for any sizes",
                    clause.span,
                    "ranges are half-open `lo:hi` with lo < hi; did you swap the bounds?",
                )
            if isinstance(clause.expr, Var) and clause.expr.name in self.space.vars:
                name = clause.expr.name
                pos = self.space.pos(name)
                bounded_by_vars = any(
                    involves(b, k) for b in (lo, hi) for k in range(len(self.space.vars))
                )
                if name in self.ranges or bounded_by_vars:
                    self.extremes.pop(pos, None)
                else:
                    self.extremes[pos] = (lo, hi - 1)
                self.ranges[name] = self.ranges.get(name, self.space.universe) & cond
            else:
                self.filters = self.filters & cond

    # ------------------------------------------------------------- reads

    def _extents(self, access: Access) -> tuple[tuple[Expr, Expr], ...] | None:
        """(lo, hi) per dimension of the tensor read, or None if nothing is known."""
        info = self.state.by_name.get(access.name)
        if info is None or info.rank != len(access.args) or info.rank == 0:
            return None
        if info.role is Role.INPUT and info.dims is not None:
            return tuple((Const(0, ScalarType.INT32), d) for d in info.dims)
        if self.stmt.op.is_reduction and access == self.stmt.lhs and info.dims is not None:
            # [tcc] a reduction into an output with a declared shape reads its own element
            # anywhere in that shape (what earlier statements did not write is zero), not
            # only where the latest statement wrote (gradient defs accumulate that way)
            return tuple((Const(0, ScalarType.INT32), d) for d in info.dims)
        known = self.state.known.get(access.name)
        return tuple((b.lo, b.hi) for b in known) if known is not None else None

    def _is_output(self, access: Access) -> bool:
        info = self.state.by_name.get(access.name)
        return info is not None and info.role is Role.OUTPUT

    def _constraints_of(self, read: Read) -> list[_Constraint]:
        extents = self._extents(read.access)
        if extents is None:
            return []
        found = []
        guard, exact = self._guard_of(read)
        for dim, (arg, (lo, hi)) in enumerate(zip(read.access.args, extents, strict=True)):
            try:
                s = expr_to_aff(arg, self.space, self.lets)
            except NotAffine:
                self.warn(
                    f"subscript `{print_expr(arg)}` of `{print_expr(read.access)}` is not "
                    "affine: it cannot be proven in bounds and is checked at run time",
                    arg.span,
                )
                continue
            lo_aff = expr_to_aff(lo, self.space)
            hi_aff = expr_to_aff(hi, self.space)
            check = s if self._is_output(read.access) else None
            found.append(_Constraint(s - lo_aff, read.access, dim, guard, exact, check))
            upper = None  # a declared output holds its whole shape (`_declared_output`)
            if self._declared_output(read.access):
                upper = expr_to_aff(self.state.by_name[read.access.name].dims[dim], self.space)
                upper = upper - 1 - s
            found.append(_Constraint(hi_aff - 1 - s, read.access, dim, guard, exact, upper))
        return found

    def _guard_of(self, read: Read) -> tuple[isl.Set, bool]:
        """Where the read is evaluated, and whether that set is exact."""
        guard, exact = self.space.universe, True
        for cond, value in read.guards:
            try:
                where = condition_to_set(cond, self.space, self.lets)
            except NotAffine:
                exact = False  # a data-dependent guard: assume the read may happen anywhere
                continue
            guard = guard & (where if value else where.complement())
        return guard, exact

    # ------------------------------------------------------------- TC's rounds

    def _involved(self, s: isl.Set | isl.PwAff, names: Sequence[str]) -> set[str]:
        return {v for v in names if involves(s, self.space.pos(v))}

    def _solved_domain(self) -> isl.Set:
        dom = self.filters
        for r in self.ranges.values():
            dom = dom & r
        return dom

    def _eliminate(self, active: list[_Active]) -> list[_Active]:
        """Remove the solved variables from each constraint, for all their values;
        drop constraints left without unsolved variables (they become preconditions).

        An affine constraint over interval ranges takes TC's substitution of the
        interval ends (`forall_linear`); anything else (strided subscripts, ranges
        bounded by other variables, filter clauses) the general set projection."""
        dom = self._solved_domain()
        solved = [self.space.pos(v) for v in self.ranges]
        unsolved = [v for v in self.space.vars if v not in self.ranges]
        linear_ok = self.filters.is_equal(self.space.context)
        result: list[_Active] = []
        for s in active:
            involved = self._involved(s, self.ranges)
            if not involved:
                result.append(s)
                continue
            out: _Active | None = None
            if isinstance(s, isl.PwAff) and linear_ok:
                positions = [self.space.pos(v) for v in involved]
                if all(p in self.extremes for p in positions):
                    out = forall_linear(s, {p: self.extremes[p] for p in positions})
            if out is None:
                out = forall(_as_set(s), dom, solved).coalesce()
            if self._involved(out, unsolved):
                result.append(out)
        return result

    def _solve(self, constraints: list[_Constraint]) -> None:
        unsolved = [v for v in self.space.vars if v not in self.ranges]
        active = self._eliminate([c.aff for c in constraints])
        while unsolved:
            new: dict[str, isl.Set] = {}
            for v in unsolved:
                single = [s for s in active if self._involved(s, unsolved) == {v}]
                if single:
                    solved = self._solve_one(v, single, constraints)
                    if solved is not None:
                        new[v] = solved
            if not new:
                raise self._unsolved_error(unsolved, active, constraints)
            self.ranges.update(new)
            active = [s for s in active if not (self._involved(s, unsolved) <= set(new))]
            active = self._eliminate(active)
            unsolved = [v for v in unsolved if v not in new]

    def _solve_one(
        self, v: str, single: list[_Active], constraints: list[_Constraint]
    ) -> isl.Set | None:
        """The largest interval of `v` satisfying `single`, or None if unbounded.

        Only sizes for which the variables solved so far have non-empty ranges count:
        for the others the statement runs no iteration, and "for all" is vacuous.
        """
        live = self._solved_domain().params()
        allowed = self.space.universe.intersect_params(live)
        for s in single:
            allowed = allowed & _as_set(s)
        line = only_dim(allowed, self.space.pos(v))
        if not line.is_bounded():
            return None
        if line.is_empty():
            raise self.error(
                f"inferred an empty range for '{v}': no value keeps every read in bounds",
                self._var_span(v),
                self._reads_hint(v, constraints),
            )
        first, end = line.dim_min(0), plus(line.dim_max(0), 1)
        simple = interval_of(line.gist_params(live), self.state.params)
        if simple is not None:
            lo, hi = simple
            box = condition_of(Var(v), lo, hi, self.space)
        if simple is None or not box.intersect_params(live).is_equal(allowed):
            lo, hi, box = self._box(v, first, end, live)
        if not box.intersect_params(live).is_equal(allowed):
            # isl's formula may give a non-empty range where the true one is empty:
            # make both ends total, with the empty range 0:0 wherever no value fits.
            outside = live - first.domain()
            zero = isl.PwAff.zero_on_domain(isl.LocalSpace.from_space(outside.get_space()))
            zero = zero.intersect_domain(outside)
            lo, hi, box = self._box(v, first.union_add(zero), end.union_add(zero), live)
        if not box.intersect_params(live).is_equal(allowed):
            raise self.error(
                f"the values of '{v}' that keep the reads in bounds do not form one interval",
                self._var_span(v),
                f"add a where clause, e.g. `where {v} in {print_expr(lo)}:{print_expr(hi)}`",
            )
        self.bounds[v] = Bound(lo, hi)
        first = expr_to_aff(lo, self.space)
        self.extremes[self.space.pos(v)] = (first, expr_to_aff(hi, self.space) - 1)
        return box

    def _box(
        self, v: str, first: isl.PwAff, end: isl.PwAff, live: isl.Set
    ) -> tuple[Expr, Expr, isl.Set]:
        lo = pwaff_to_expr(first, self.state.params, live)
        hi = pwaff_to_expr(end, self.state.params, live)
        return lo, hi, condition_of(Var(v), lo, hi, self.space)

    def _unsolved_error(
        self, unsolved: list[str], active: list[_Active], constraints: list[_Constraint]
    ) -> RangeError:
        coupled = [v for v in unsolved if any(involves(s, self.space.pos(v)) for s in active)]
        names = ", ".join(f"'{v}'" for v in (coupled or unsolved))
        v = (coupled or unsolved)[0]
        hint = f"add a where clause, e.g. `where {v} in 0:{self._extent_guess(v, constraints)}`"
        if coupled:
            return self.error(
                f"could not infer a range for {names} in this statement: every read that "
                "uses them couples them with another unsolved variable",
                self._var_span(v),
                hint,
            )
        if v in self.facts.index_vars:
            return self.error(
                f"could not infer a range for index {names} of "
                f"`{print_expr(self.stmt.lhs)}`: no read on the right-hand side uses it",
                self._var_span(v),
                hint,
            )
        return self.error(
            f"reduction variable {names} is unconstrained: no tensor subscript bounds it",
            self._var_span(v),
            hint,
        )

    # ------------------------------------------------------------- results

    def _domain(self) -> isl.Set:
        return self._solved_domain().coalesce()

    def _check_preconditions(self, constraints: list[_Constraint], domain: isl.Set) -> None:
        """Reads that the ranges do not keep in bounds: an error when they are out of
        bounds for every size, else a warning and, where the sizes alone decide it (every
        guard affine, a read the statement evaluates), a `Precondition` every call checks.
        A read under a data-dependent guard is checked read by read at run time instead,
        against the tensor's shape."""
        bad_by_access: dict[Access, tuple[isl.Set, bool]] = {}
        for c in constraints:
            if self._reads_what_it_writes(c.access):
                continue
            bad = domain & c.guard & c.cond.complement()
            if bad.is_empty():
                continue
            prev = bad_by_access.get(c.access)
            if prev is not None:
                bad, exact = prev[0] | bad, prev[1] and c.exact
            else:
                exact = c.exact
            bad_by_access[c.access] = (bad, exact)
        runs = domain.params()
        evaluated = self._evaluated_reads()
        for access, (bad, exact) in bad_by_access.items():
            bad_params = bad.params()
            if (runs - bad_params).is_empty():
                raise self.error(
                    f"`{print_expr(access)}` reads out of bounds for every size",
                    access.span,
                    "check the subscripts against the tensor's declared sizes and the where "
                    "clauses of this statement",
                )
            ok = set_to_expr(runs - bad_params, runs, self.state.params)
            checked = exact and access in evaluated and not self._declared_output(access)
            if checked:
                sizes = self.space.context.params()
                cond = set_to_expr(sizes - bad_params, sizes, self.state.params)
                self.state.preconditions.append(Precondition(cond, access))
            self.warn(
                f"cannot prove that `{print_expr(access)}` stays in bounds: it needs "
                f"`{print_expr(ok)}`{self._how_checked(access, checked, evaluated)}",
                access.span,
                clause_hint(ok),
            )

    def _evaluated_reads(self) -> set[Access]:
        """The reads the statement evaluates: its right-hand side's and lets' (an
        `exists` clause only constrains inference)."""
        roots = [self.stmt.rhs, *self.lets.values()]
        return {n for root in roots for n in walk(root) if isinstance(n, Access)}

    def _declared_output(self, access: Access) -> bool:
        """An output with a declared shape holds all of it from the start (what no
        statement wrote is the initial value: a gradient's padded copy reads its zero
        border), so each read is checked against that shape at run time."""
        info = self.state.by_name.get(access.name)
        return info is not None and info.role is Role.OUTPUT and info.dims is not None

    def _how_checked(self, access: Access, checked: bool, evaluated: set[Access]) -> str:
        if access not in evaluated:
            return (
                ", which nothing checks at run time: the def never evaluates a read in an"
                " `exists` clause"
            )
        info = self.state.by_name.get(access.name)
        if checked or info is None or info.role is Role.INPUT or info.dims is not None:
            return ", which is checked at run time"
        return (
            f", which is checked at run time only against the shape of '{access.name}' (the"
            " read is under a data-dependent condition): it may be larger than what earlier"
            " statements wrote"
        )

    def _warn_guarded_bounds(self, constraints: list[_Constraint]) -> None:
        """TC's rule, kept: a read inside a `?:` branch bounds the inferred ranges like
        any other, even when its condition is the bounds check (`h - kh >= 0 &&
        h - kh < H ? G(h - kh) : 0`). Say so where that condition involves the variable,
        since the range then is narrower than the condition suggests."""
        inferred = [v for v in self.facts.all_vars if v in self.bounds]
        warned: set[Access] = set()
        for c in constraints:
            if c.access in warned or c.guard.plain_is_universe():
                continue
            names = self._involved(c.aff, inferred) & self._involved(c.guard, inferred)
            if not names:
                continue
            warned.add(c.access)
            shown = ", ".join(f"`{v}`" for v in sorted(names))
            self.warn(
                f"the range of {shown} is inferred from `{print_expr(c.access)}`, a read under"
                " a condition: the condition does not widen the range (TC's rule)",
                c.access.span,
                "if the condition is meant to handle the boundary, give the range in a "
                "where clause (e.g. `where h in 0:H`)",
            )

    def _reads_what_it_writes(self, access: Access) -> bool:
        """`B(x) = B(x) * 2 where x in N - 1:N` after `B(x) = ... where x in 0:N - 1`:
        the element read is the one this statement writes, so it lies in the output's
        final shape (the hull of every write), though outside what earlier statements
        wrote; the earlier extent still bounds variables left to inference."""
        info = self.state.by_name.get(access.name)
        return info is not None and info.role is not Role.INPUT and access == self.stmt.lhs

    # ------------------------------------------------------------- messages

    def _var_span(self, v: str) -> Span:
        for e in (*self.stmt.lhs.args, self.stmt.rhs):
            for node in walk(e):
                if isinstance(node, Var) and node.name == v:
                    return node.span
        return self.stmt.span

    def _extent_guess(self, v: str, constraints: list[_Constraint]) -> str:
        for c in constraints:
            if any(isinstance(n, Var) and n.name == v for n in walk(c.access.args[c.dim])):
                extents = self._extents(c.access)
                if extents is not None:
                    return print_expr(extents[c.dim][1])
        return self.state.params[0] if self.state.params else "10"

    def _reads_hint(self, v: str, constraints: list[_Constraint]) -> str:
        reads = []
        for c in constraints:
            text = print_expr(c.access)
            if involves(c.cond, self.space.pos(v)) and text not in reads:
                reads.append(text)
        return f"the reads {', '.join(reads)} leave no value for '{v}'; check their subscripts"


_Active = isl.PwAff | isl.Set  # a constraint `aff >= 0`, or the set where it holds


def _as_set(s: _Active) -> isl.Set:
    if isinstance(s, isl.Set):
        return s
    zero = isl.PwAff.zero_on_domain(isl.LocalSpace.from_space(s.get_domain_space()))
    return s.ge_set(zero)
