"""Statement-level forward-mode AD: a ranged TC def -> its tangent def, TC to TC.

Requires: a `RangedDef` (every statement carries its ranges), as `reverse`.
Ensures:  `jvp_def(ranged, wrt=None)` returns a new `Def` named `<name>_jvp`:
          - params: the forward inputs, then one tangent `<in>_dot` per input in
            `wrt` (default: every float input; the others' tangents are symbolic
            zeros and generate nothing);
          - outputs: the forward outputs, then one tangent `<T>_dot` per tensor the
            def writes whose value depends on a tangent input: a statement writing it
            has a right-hand side whose tangent is not a symbolic zero (an output that
            has none, `P(i) += floor(O(i))`, has a zero tangent and no `_dot` tensor;
            `Kernel.jvp` returns zeros for it);
          - statements: the forward statements, each preceded by its tangent
            statement (same left-hand side, ranges and reduction, tangent tensors in
            place of values): the tangent reads the values the forward statement
            reads, before it overwrites them. Every name comes from the
            compilation's `NameSupply`, so tangents nest with gradients.

The derivatives come from `rules.jvp`, i.e. from the same table as reverse mode
(`rules.vjp` with the tangent in place of the adjoint), so `<jvp(t), c> == <t, vjp(c)>`.

Reductions: `+=`/`=`: the tangent statement has the forward's operator.
`max=!`/`min=!`: `O_dot(i) +=! (X(i, j) == O(i) ? X_dot(i, j) : 0)` after the forward
statement: the tangents of every element equal to the result, summed, reverse mode's
tie rule where two terms can be equal only at a tie of distinct values
(`products.distinct_terms`: each tied element receives the full adjoint); elsewhere
(a clamped read's edge, the previous value) their mean, as reverse mode splits the
adjoint (`pass_through._tie_count`), over a count of the candidates. `*=!`: the sum
over the terms of each term's tangent times the product of
the others, exact with zeros (auxiliary reductions count the zeros and multiply the
non-zero terms, outputs of the tangent def); `*=` into previous contents: the product
rule with the previous value and tangent. `max=`/`min=` without `!`: the mean of the
previous value's tangent where it is still the result and the tied terms' (the
previous value kept in an auxiliary output). A `max=`/`min=` whose right-hand side
reads its own left-hand side, and `*=` without `!` as a first write raise a TCError
(not supported in forward mode, nor in reverse mode); `max=`/`min=` as a first write
update the initial zeros, a constant with a zero tangent, as in reverse mode.

A left-hand side that may name one element at several points (`O(i + k)`, not one to
one: `products.injective`) makes a reduction even when every variable is on the left:
a `*=!` tangent is then a `+=!` of each point's term; a `max=` / `min=` tangent keeps
the previous tangent over the output's whole box where the value is unchanged, then
adds every tied point's (`_colliding_extremum`); `*=` without `!` into such a
left-hand side raises a TCError.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Iterable

from compiler.autodiff import algebra as al
from compiler.autodiff.algebra import MaybeExpr
from compiler.autodiff.products import (
    at_least_one,
    distinct_terms,
    exact_partial,
    exact_product,
    first_write,
    independent,
    injective,
    lhs_where,
    terms,
)
from compiler.autodiff.reverse import wrt_inputs
from compiler.autodiff.rewrite import inline_lets, locate
from compiler.autodiff.rules import NO_RULE, UNSUPPORTED, jvp
from compiler.autodiff.versions import writes_box
from compiler.diagnostics import InternalError, TCError
from compiler.frontend.ast import (
    Access,
    AssignOp,
    Binary,
    Call,
    Cast,
    Const,
    Def,
    Expr,
    Let,
    Param,
    RangeConstraint,
    ScalarType,
    Select,
    Stmt,
    Unary,
    Var,
)
from compiler.frontend.checked import RangedDef
from compiler.frontend.scopes import name_supply, walk
from compiler.frontend.types import INDEX_TYPE, expr_type
from compiler.names import NameSupply


@dataclasses.dataclass(frozen=True, slots=True)
class TangentDef:
    """A tangent def and, per forward tensor with a tangent, its tangent's name."""

    definition: Def
    tangents: tuple[tuple[str, str], ...]

    def tangent_of(self, tensor: str) -> str | None:
        return dict(self.tangents).get(tensor)


def jvp_def(
    ranged: RangedDef, *, wrt: Iterable[str] | None = None, names: NameSupply | None = None
) -> TangentDef:
    """The tangent def of `ranged` (see the module docstring)."""
    supply = names if names is not None else name_supply(ranged.checked.definition)
    return _Forward(ranged, wrt, supply).run()


class _Forward:
    def __init__(self, ranged: RangedDef, wrt: Iterable[str] | None, names: NameSupply) -> None:
        self.ranged = ranged
        self.checked = ranged.checked
        self.definition = ranged.checked.definition
        self.names = names
        self.wrt = wrt_inputs(ranged, wrt, "take a tangent of")
        self.types: dict[str, ScalarType] = {t.name: t.dtype for t in self.checked.tensors}
        self.types |= dict.fromkeys(self.checked.size_params, INDEX_TYPE)
        self.def_name = names.fresh(f"{ranged.name}_jvp")
        self.extra: list[Param] = []  # auxiliary reductions of products (`_product`)
        self.written: set[str] = set()
        self.before: list[Stmt] = []  # to run before the current forward statement
        self.dot: dict[str, str] = {}
        for tensor in self.wrt:
            self._activate(tensor)
        self._find_active()

    def _activate(self, tensor: str) -> None:
        self.dot[tensor] = dot = self.names.fresh(f"{tensor}_dot")
        self.types[dot] = self.types[tensor]

    def _find_active(self) -> None:
        """Give a tangent to every written float tensor whose value depends on a
        tangent input: some statement writing it has a right-hand side whose tangent is
        not a symbolic zero (`P(i) += floor(O(i))` has none: P's tangent is zero and P
        gets no `_dot` tensor), to a fixed point, in the order they are found."""
        changed = True
        while changed:
            changed = False
            for stmt in self.definition.stmts:
                target = stmt.lhs.name
                if target in self.dot or not self.types[target].is_float:
                    continue
                if self._tangent(inline_lets(stmt).rhs) is not None:  # a let's reads count
                    self._activate(target)
                    changed = True
        order = [*self.wrt, *dict.fromkeys(s.lhs.name for s in self.definition.stmts)]
        self.dot = {t: self.dot[t] for t in dict.fromkeys(order) if t in self.dot}

    def run(self) -> TangentDef:
        stmts: list[Stmt] = []
        for stmt in self.definition.stmts:
            tangent = self._statement(stmt)
            if stmt.op.base in (AssignOp.MAX, AssignOp.MIN):
                stmts.extend(self.before)  # the previous value, kept (`_extremum`)
                self.before.clear()
                stmts.append(stmt)
                stmts.extend(tangent)
            else:
                stmts.extend(tangent)
                stmts.append(stmt)
            self.written.add(stmt.lhs.name)
        d = self.definition
        infos = {t.name: t for t in self.checked.inputs}
        params = tuple(
            Param(self.dot[n], infos[n].dtype, tuple(infos[n].dims or ()), span=infos[n].span)
            for n in self.wrt
        )
        declared = {p.name: p for p in d.outputs}
        outputs = []
        for tensor, dot in self.dot.items():
            if tensor in self.wrt:
                continue
            p = declared[tensor]
            dtype, dims = (p.dtype, p.dims) if p.dims is not None else (None, None)
            outputs.append(Param(dot, dtype, dims, span=p.span))
        outputs += self.extra
        inputs, outs = (*d.params, *params), (*d.outputs, *outputs)
        tangent = Def(self.def_name, inputs, outs, tuple(stmts), d.where, span=d.span)
        return TangentDef(tangent, tuple(self.dot.items()))

    def _statement(self, stmt: Stmt) -> list[Stmt]:
        target = stmt.lhs.name
        dot = self.dot.get(target)
        if dot is None:
            return []
        flat = inline_lets(stmt)
        where = tuple(c for c in flat.where if not isinstance(c, Let))
        value = self._tangent(flat.rhs)
        ties: list[Stmt] = []  # a tie count (`max=!` / `min=!`)
        op = stmt.op
        base = op.base
        if base in (AssignOp.MAX, AssignOp.MIN):
            if any(isinstance(e, Access) and e.name == target for e in walk(flat.rhs)):
                raise TCError(
                    f"cannot differentiate a `{op.value}` whose right-hand side reads "
                    f"'{target}' in forward mode: not supported",
                    stmt.span,
                )
            hit = al.eq(flat.rhs, Access(target, stmt.lhs.args))
            value = al.select(hit, value, None)
            if not op.init:
                return self._extremum(stmt, value, where, dot, al.indicator(hit))
            op = AssignOp.PLUS_INIT
            if value is not None and not distinct_terms(flat, *self._independent):
                # the tied terms' mean (reverse mode's split, `pass_through._tie_count`)
                count = self._tmp(ties, stmt, op, al.indicator(hit), where, ScalarType.INT32)
                value = al.div(value, at_least_one(count))
        elif base is AssignOp.TIMES:
            return self._product(stmt, flat.rhs, where, value, dot)
        if value is None:
            if op is AssignOp.PLUS and not self._covers(stmt):
                return []
            value = al.const(0)  # a `+=` over the whole output: the tangent covers it too
        dtype = self.types[target]
        if expr_type(value, _Env(self.types)) is not dtype:
            value = Cast(dtype, value)
        lhs = dataclasses.replace(stmt.lhs, name=dot)
        tangent = Stmt(lhs, op, value, where, span=stmt.span)
        return [*ties, locate(tangent, stmt.span)]

    def _covers(self, stmt: Stmt) -> bool:
        """Whether a zero tangent of the `+=` `stmt` must still be written: its output's
        shape is inferred from its writes (so is its tangent's: `P(i) += floor(A(i))
        where i in 0:N` then `P(i) += A(i) where i in 0:N - 1` leaves P_dot N elements),
        or `stmt` writes all of its declared output (range inference bounds later
        reads of the tangent by what its statements write: a gradient's
        `X_grad_acc(i) += X_grad(i)` over the whole shape after a partial sum)."""
        info = self.checked.tensor(stmt.lhs.name)
        return info.dims is None or writes_box(stmt, tuple(info.dims))

    def _product(
        self, stmt: Stmt, rhs: Expr, where: tuple, value: MaybeExpr, dot: str
    ) -> list[Stmt]:
        """The tangent of `O *=! prod_r e_r` is `sum_r e_r' * prod_(s != r) e_s` (exact
        with zeros: auxiliary reductions count the zero terms and multiply the others,
        as reverse mode's `_product_seed`); of `O *= prod_r e_r` (into the previous
        contents), `O' * prod_r e_r + O * (that sum)`, read before the statement
        multiplies `O`."""
        target, lhs = stmt.lhs.name, stmt.lhs.args
        if not stmt.op.init and target not in self.written:
            raise first_write(stmt, target)
        outer = lhs_where(stmt, where, self.ranged.bounds_of(stmt.lhs.name))
        one_to_one = injective(stmt, self.checked.size_params)
        if not stmt.op.init and not one_to_one:
            raise self._colliding(stmt)
        reduced = len(outer) != len(where) or not one_to_one
        stmts: list[Stmt] = []
        if reduced:
            counted, factor, _ = terms(rhs)
            count = self._tmp(stmts, stmt, AssignOp.PLUS_INIT, counted, where, ScalarType.INT32)
            nonzero = self._tmp(stmts, stmt, AssignOp.TIMES_INIT, factor, where)
            product = exact_product(count, nonzero)
            if value is not None:
                value = al.mul(value, exact_partial(rhs, count, nonzero))
            if not one_to_one:  # every point of an element adds its term's tangent
                value = self._typed(value if value is not None else al.const(0), target)
                dot_lhs = dataclasses.replace(stmt.lhs, name=dot)
                tangent = Stmt(dot_lhs, AssignOp.PLUS_INIT, value, where)
                return [*stmts, locate(tangent, stmt.span)]
            if value is not None:
                value = self._tmp(stmts, stmt, AssignOp.PLUS_INIT, value, where)
        else:
            product = rhs
        if not stmt.op.init:  # into the previous contents: the product rule
            value = al.add(
                al.mul(Access(dot, lhs), product),
                None if value is None else al.mul(Access(target, lhs), value),
            )
        value = self._typed(value if value is not None else al.const(0), target)
        tangent = Stmt(dataclasses.replace(stmt.lhs, name=dot), AssignOp.ASSIGN, value, outer)
        return [*stmts, locate(tangent, stmt.span)]

    def _extremum(
        self, stmt: Stmt, value: MaybeExpr, where: tuple, dot: str, hit: Expr
    ) -> list[Stmt]:
        """`max=`/`min=` without '!' (after the forward statement): the mean of the
        tangents of the candidates equal to the result (`value`: the terms'), the
        previous value among them after an earlier write (`_shares`)."""
        target, lhs = stmt.lhs.name, stmt.lhs.args
        dot_lhs = dataclasses.replace(stmt.lhs, name=dot)
        if not injective(stmt, self.checked.size_params):
            return self._colliding_extremum(stmt, value, where, dot, hit)
        outer = lhs_where(stmt, where, self.ranged.bounds_of(stmt.lhs.name))
        out: list[Stmt] = []
        if target not in self.written:  # the initial zeros: a constant, as reverse mode
            kept: Expr = al.const(0)
            name = self._shares(out, stmt, where, hit, None)
        else:
            saved = self._tmp(self.before, stmt, AssignOp.ASSIGN, Access(target, lhs), outer)
            same = al.eq(saved, Access(target, lhs))
            kept = Select(same, Access(dot, lhs), al.const(0))
            name = self._shares(out, stmt, where, hit, (lhs, al.indicator(same), outer))
        count = None if name is None else at_least_one(Access(name, lhs))
        if count is not None:
            kept = al.div(kept, count) or al.const(0)
        out.append(Stmt(dot_lhs, AssignOp.ASSIGN, self._typed(kept, target), outer))
        if value is not None:
            tied = value if count is None else al.div(value, count)
            out.append(Stmt(dot_lhs, AssignOp.PLUS, self._typed(tied, target), where))
        return [locate(s, stmt.span) for s in out]

    def _colliding_extremum(
        self, stmt: Stmt, value: MaybeExpr, where: tuple, dot: str, hit: Expr
    ) -> list[Stmt]:
        """`_extremum` where the left-hand side may name one element at several points
        (`O(i + k) max= A(i, k)`): over the output's whole box, the previous tangent
        where the value is unchanged, else 0 (an element the statement does not write
        is unchanged); then every tied point's tangent, `+=`; each divided by the
        number of candidates equal to the result. As a first write the previous
        value is the initial zeros, a constant: a `+=!` of the tied points' tangents."""
        dot_lhs = dataclasses.replace(stmt.lhs, name=dot)
        out: list[Stmt] = []
        if stmt.lhs.name not in self.written:
            name = self._shares(out, stmt, where, hit, None)
            count = None if name is None else at_least_one(Access(name, stmt.lhs.args))
            tied = value if value is None or count is None else al.div(value, count)
            tied = self._typed(tied if tied is not None else al.const(0), stmt.lhs.name)
            out.append(Stmt(dot_lhs, AssignOp.PLUS_INIT, tied, where))
            return [locate(s, stmt.span) for s in out]
        idx, box = self._box(stmt)
        whole = Access(stmt.lhs.name, idx)
        over = dataclasses.replace(stmt, lhs=whole)
        saved = self._tmp(self.before, over, AssignOp.ASSIGN, whole, box)
        same = al.eq(saved, whole)
        name = self._shares(out, stmt, where, hit, (idx, al.indicator(same), box))
        assert name is not None  # the previous value is a candidate
        count = at_least_one(Access(name, stmt.lhs.args))
        kept = Select(same, Access(dot, idx), al.const(0))
        kept = al.div(kept, at_least_one(Access(name, idx))) or al.const(0)
        out.append(Stmt(Access(dot, idx), AssignOp.ASSIGN, self._typed(kept, stmt.lhs.name), box))
        if value is not None:
            tied = self._typed(al.div(value, count) or al.const(0), stmt.lhs.name)
            out.append(Stmt(dot_lhs, AssignOp.PLUS, tied, where))
        return [locate(s, stmt.span) for s in out]

    def _shares(
        self,
        out: list[Stmt],
        stmt: Stmt,
        where: tuple,
        hit: Expr,
        previous: tuple[tuple[Expr, ...], Expr, tuple] | None,
    ) -> str | None:
        """The int32 output that counts the candidates equal to an extremum's result, per
        element (reverse mode's split, `pass_through._tie_count`): the previous value
        (`previous = (subscripts, indicator, where)`) then the terms, counted into an
        int32 output; None where only a tie of distinct values can make two (no
        previous value, `products.distinct_terms`)."""
        if previous is None and distinct_terms(stmt, *self._independent):
            return None
        target = stmt.lhs.name
        name = self.names.fresh(f"{target}_tmp")
        self.types[name] = ScalarType.INT32
        self.extra.append(Param(name, None, None, span=stmt.span))
        count = Access(name, stmt.lhs.args)
        if previous is None:
            out.append(Stmt(count, AssignOp.PLUS_INIT, hit, where))
        else:
            idx, kept, over = previous
            out.append(Stmt(Access(name, idx), AssignOp.ASSIGN, kept, over))
            out.append(Stmt(count, AssignOp.PLUS, hit, where))
        return name

    @functools.cached_property
    def _independent(self) -> tuple[tuple[str, ...], frozenset[str]]:
        """The sizes and `products.independent`, for `products.distinct_terms`."""
        return self.checked.size_params, independent(self.checked)

    def _box(self, stmt: Stmt) -> tuple[tuple[Var, ...], tuple[RangeConstraint, ...]]:
        """Index variables over the whole shape of `stmt`'s output (its declared dims,
        or the upper ends of its inferred ranges), with their ranges `0:dim`."""
        target = stmt.lhs.name
        dims = self.checked.tensor(target).dims
        if dims is None:
            dims = [b.hi for b in self.ranged.bounds_of(target)]
        names = self.names.scope().numbered("i", len(dims))
        zero = Const(0, ScalarType.INT32)
        where = tuple(RangeConstraint(Var(n), zero, d) for n, d in zip(names, dims, strict=True))
        return tuple(Var(n) for n in names), where

    def _colliding(self, stmt: Stmt) -> TCError:
        op = stmt.op.value
        return TCError(
            f"cannot differentiate `{op}` in forward mode where its left-hand side "
            f"'{stmt.lhs.name}' may name one element at several points: not supported",
            stmt.span,
            hint=f"use `{op}!`, or a left-hand side with one subscript per variable",
        )

    def _tmp(
        self,
        stmts: list[Stmt],
        stmt: Stmt,
        op: AssignOp,
        rhs: Expr,
        where: tuple,
        dtype: ScalarType | None = None,
    ) -> Access:
        """An auxiliary reduction over `stmt`'s left-hand side (an output of the def,
        of `dtype`, default the left-hand side's)."""
        target = stmt.lhs.name
        name = self.names.fresh(f"{target}_tmp")
        self.types[name] = dtype or self.types[target]
        self.extra.append(Param(name, None, None, span=stmt.span))
        access = Access(name, stmt.lhs.args)
        stmts.append(locate(Stmt(access, op, self._typed(rhs, name), where), stmt.span))
        return access

    def _typed(self, value: Expr, tensor: str) -> Expr:
        dtype = self.types[tensor]
        return value if expr_type(value, _Env(self.types)) is dtype else Cast(dtype, value)

    def _tangent(self, expr: Expr) -> MaybeExpr:
        if not expr_type(expr, _Env(self.types)).is_float:
            return None
        if isinstance(expr, Access):
            dot = self.dot.get(expr.name)
            return None if dot is None else Access(dot, expr.args, span=expr.span)
        if isinstance(expr, (Const, Var)):
            return None
        if isinstance(expr, Select):
            return al.select(expr.cond, self._tangent(expr.then), self._tangent(expr.otherwise))
        if isinstance(expr, Cast):
            inner = self._tangent(expr.operand)
            return None if inner is None else Cast(expr.dtype, inner)
        op, args = _operator(expr)
        tangents = tuple(self._tangent(a) for a in args)
        if all(t is None for t in tangents):
            return None
        if isinstance(op, str) and op in UNSUPPORTED:
            raise TCError(f"cannot differentiate '{op}': {UNSUPPORTED[op]}", expr.span)
        value = jvp(op, args, tangents)
        if value is NO_RULE:
            raise TCError(f"no derivative rule for builtin '{op}'", expr.span)
        return value


def _operator(expr: Expr) -> tuple[object, tuple[Expr, ...]]:
    if isinstance(expr, Binary):
        return expr.op, (expr.lhs, expr.rhs)
    if isinstance(expr, Unary):
        return expr.op, (expr.operand,)
    if isinstance(expr, Call):
        return expr.fn, expr.args
    raise InternalError(f"forward autodiff: no rule for a float {type(expr).__name__}")


class _Env(dict):
    """Tensor and size types; unknown names are index variables (int32)."""

    def __missing__(self, key: str) -> ScalarType:
        return INDEX_TYPE

    def __contains__(self, key: object) -> bool:
        return True


__all__ = ["TangentDef", "jvp_def"]
