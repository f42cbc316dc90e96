"""The adjoint of an output's previous version: what a statement that updates part of
an output, or combines with its previous contents, passes back (`autodiff.reverse`).

Requires: the `_Reverse` derivation this mixes into (its versions `v`, `products` of
          the `*=` seeds, and `_emit`, `_need`, `_need_reads`, `_tmp`, `_grad_tensor`).
Ensures:  `_pass_through(index, stmt, target, k, adjoint)` emits the contributions of
          version k's adjoint to version k - 1's, for the elements statement `index`
          keeps (`=` over part of the output), multiplies (`*=`), takes the extremum
          with (`max=`, `min=`) or adds to (`+=`).

Worked example: `O(i) = A(i) where i in 2:N` after `O(i) = B(i)` keeps O_v1 at i < 2:
`O_v1_grad(i) +=! 2 <= i && i < N ? 0 : O_grad(i) where i in 0:N`.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import TYPE_CHECKING

from compiler.autodiff import algebra as al
from compiler.autodiff.emptiness import runs_never
from compiler.autodiff.products import (
    at_least_one,
    distinct_terms,
    exact_product,
    independent,
    lhs_where,
    reduced,
)
from compiler.autodiff.rewrite import inline_lets, locate
from compiler.autodiff.versions import Versions, full_box, plain_vars
from compiler.diagnostics import TCError
from compiler.frontend.ast import (
    Access,
    AssignOp,
    Binary,
    BinOp,
    CmpOp,
    Compare,
    Const,
    Expr,
    Logical,
    LogicOp,
    RangeConstraint,
    ScalarType,
    Span,
    Stmt,
    Var,
)
from compiler.frontend.scopes import walk
from compiler.frontend.visit import substitute


class PassThrough:
    """The previous version's adjoint, mixed into `reverse._Reverse`."""

    v: Versions
    products: dict[tuple[str, int], tuple[Access, Access, Access]]
    ties: dict[int, str]  # a clamp group's first piece -> its tie count (`_tie_count`)
    results: dict[int, str]  # ... -> the name its result is compared from (`_result`)
    originals: tuple[Stmt, ...]  # per statement, the statement it is a piece of
    stmts: list[Stmt]
    span: Span

    if TYPE_CHECKING:

        def _emit(self, lhs: Access, value: Expr, where: tuple) -> None: ...
        def _need(self, tensor: str, version: int) -> None: ...
        def _need_reads(self, expr: Expr, index: int) -> None: ...
        def _grad_tensor(self, tensor: str, version: int) -> str | None: ...
        def _origin(self, name: str, index: int) -> tuple[str, int]: ...
        def _fresh_tmp(self, target: str) -> str: ...
        def _tmp(
            self,
            target: str,
            stmt: Stmt,
            op: AssignOp,
            rhs: Expr,
            count: bool = False,
            start: tuple[tuple[Expr, ...], Expr, tuple] | None = None,
        ) -> Access: ...

    def _pass_through(self, index: int, stmt: Stmt, target: str, k: int, adjoint: str) -> None:
        """The adjoint of the previous version, for the elements this statement keeps."""
        if self.v.covers(index):
            return
        grad = self._grad_tensor(target, k - 1)
        if grad is None:
            return
        if stmt.op is AssignOp.ASSIGN:
            self._masked_pass_through(stmt, target, adjoint, grad)
            return
        if stmt.op is AssignOp.TIMES:  # `*=`: times the product (`_times_seed`)
            self._times_pass_through(index, stmt, target, k, adjoint, grad)
            return
        if stmt.op.base in (AssignOp.MAX, AssignOp.MIN):
            self._extremum_pass_through(index, stmt, target, k, adjoint, grad)
            return
        idx, where = full_box(self.v, target)
        self._emit(Access(grad, idx), Access(adjoint, idx), where)

    def _extremum_pass_through(
        self, index: int, stmt: Stmt, target: str, k: int, adjoint: str, grad: str
    ) -> None:
        """`max=` / `min=` into the previous version: where the statement writes, the
        previous value keeps the adjoint if it is still the extremum; elsewhere it is
        the value. The previous version is read only where the statement writes (an
        earlier write may cover only that part: `O(i) = A(i) where i in 2:N`).

        Without a reduction the test compares the previous value with the right-hand
        side (`prev <= rhs` for `min=`), both computed here: the previous version may be
        recomputed in another order than the forward's (a clamp's pieces of a sum), so
        its bits need not equal the forward's result. A reduction compares with its
        terms' extremum, an auxiliary reduction here (fuzz seed 23479: a recomputed
        sum then `max= D(k)`); a scatter's left-hand side with the result."""
        idx, where, same = self._keeps_previous(index, stmt, target, k)
        value = al.mul(Access(adjoint, idx), al.indicator(same)) or Access(adjoint, idx)
        value = self._divided_by_ties(index, stmt, idx, value)
        self._emit(Access(grad, idx), value, where)
        inside = dataclasses.replace(stmt, where=where)
        # a condition on the written elements (a clamp's piece: `1 - i in 1:...`) is partial
        if plain_vars(stmt.lhs) is not None and not self.v.covers_box(inside, reducing=False):
            self._masked_pass_through(inside, target, adjoint, grad)

    def _divided_by_ties(self, index: int, stmt: Stmt, idx: tuple[Expr, ...], value: Expr) -> Expr:
        """`value` (the adjoint into the previous value) divided by the tie count of the
        statement's clamp group, on the elements where this piece is the group's first
        to write (`_tie_count`): along a chain of pieces that write one element, exactly
        one pass-through divides. Pieces split over a summed variable all write every
        element, so the first piece divides alone; pieces split over a written index
        (`O(i, j) max= A(min(j, 1), k)`: `j in 0:2` and `j in 2:N`) write apart, and each
        divides on its own elements (fuzz seed 61545: the second piece's previous value
        kept the whole adjoint at a tie with its terms, 1.5 times the gradient)."""
        first = self._first_piece(index)
        ties = self.ties.get(first)
        if ties is None:
            return value
        divided = al.div(value, at_least_one(Access(ties, idx)))
        if index == first:
            return divided
        plain = plain_vars(stmt.lhs)
        if plain is None:  # a scatter's pieces: the first piece divides
            return value
        earlier: Expr | None = None
        for j in range(first, index):
            if self._first_piece(j) != first:
                continue
            written = self._written_by(j, idx)
            if written is None:  # piece j writes every element this one does
                return value
            earlier = written if earlier is None else Logical(LogicOp.OR, earlier, written)
        return divided if earlier is None else al.select(earlier, value, divided)

    def _written_by(self, j: int, idx: tuple[Expr, ...]) -> Expr | None:
        """The condition, at the elements `idx`, that piece `j` writes them (its clauses
        over its left-hand side's variables), or None when it writes every element of
        the output's box that a piece of its group can (no such clause)."""
        piece = self.v.stmts[j]
        names = [a.name for a in piece.lhs.args if isinstance(a, Var)]
        if len(names) != len(piece.lhs.args) or len(set(names)) != len(names):
            return None
        bounds = self.v.ranged.bounds_of(piece.lhs.name)
        where = lhs_where(piece, piece.where, bounds)
        # a clause over a whole dimension of the output holds at every element
        whole = {(Var(n), b.lo, b.hi) for n, b in zip(names, bounds, strict=True)}
        where = tuple(
            c
            for c in where
            if not (isinstance(c, RangeConstraint) and (c.expr, c.lo, c.hi) in whole)
        )
        rename = dict(zip(names, idx, strict=True))
        return _inside(where, rename)

    def _keeps_previous(
        self, index: int, stmt: Stmt, target: str, k: int
    ) -> tuple[tuple[Expr, ...], tuple, Expr]:
        """(subscripts, where, test): where the previous version of a `max=` / `min=`
        is still the extremum, over the elements the statement writes."""
        self._need(target, k - 1)
        plain = plain_vars(stmt.lhs)
        if plain is None:
            idx, where = full_box(self.v, target)
        else:
            idx, where = stmt.lhs.args, lhs_where(stmt, stmt.where, self.v.ranged.bounds_of(target))
        previous = Access(self.v.name(target, k - 1), idx)
        if plain is None:
            # the group's last piece compares with its result as its candidates are
            # compared (`_result`): the forward's `P` may differ in its last bits
            # from a recomputed previous version (fuzz seed 71290)
            last = index == self._group(index)[-1]
            result = self._result(index, target) if last else self.v.name(target, k)
            if result == self.v.name(target, k):
                self._need(target, k)
            return tuple(idx), where, al.eq(previous, Access(result, idx))
        op = CmpOp.LE if stmt.op.base is AssignOp.MIN else CmpOp.GE
        rhs = stmt.rhs
        if reduced(stmt):
            # The comparison runs over `where`, the written elements' clauses. A clause
            # that also bounds a summed variable (a clamp's piece: `k - (N - 1) in
            # 1:...`) may leave some of them with no term (fuzz seed 40260): there the
            # extremum starts from the previous value, and since `prev <= min(prev, m)`
            # exactly when `prev <= m`, the test is unchanged where terms exist and
            # keeps the adjoint where none do.
            full = self._every_element_has_terms(stmt, where)
            start = None if full else (idx, previous, where)
            rhs = self._tmp(target, stmt, stmt.op.with_init, rhs, start=start)
        self._need_reads(stmt.rhs, index)
        return tuple(idx), where, Compare(op, previous, rhs)

    def _tie_count(self, index: int, stmt: Stmt, target: str) -> Expr | None:
        """`max(count, 1)` of the candidates equal to a `max=` / `min=`'s result, per
        element, or None where two can be equal only at a tie of distinct values.

        The adjoint is split equally among those candidates: a value that is several
        candidates at once (`A(min(i + k, N - 1))` at the edge, a term that does not
        depend on the summed variable, the previous value) is differentiable there,
        and its shares add up to the adjoint; at a tie of distinct values the shares
        are a convex combination (a subgradient). The candidates are those of the
        statement as written: the previous value after an earlier write (not the
        initial zeros) and the terms of all its clamp pieces, each compared with the
        last piece's result; forward mode counts the same on the unsplit statement
        (`forward._extremum`), so the two stay adjoint. Only the pieces' terms and the
        first piece's pass-through into the previous value divide by the count: the
        pieces' pass-throughs to each other carry the adjoint whole."""
        first = self._first_piece(index)
        if first in self.ties:
            return at_least_one(Access(self.ties[first], stmt.lhs.args))
        k_first = self.v.written(first)
        previous = self._starts_from_previous(first)
        original = inline_lets(self.originals[index]) if self.originals else stmt
        sizes = self.v.ranged.checked.size_params
        if not previous and distinct_terms(original, sizes, self._independent):
            return None
        idx, box = full_box(self.v, target)
        final = self._result(index, target)
        start: Expr = Const(0, ScalarType.INT32)
        if previous:
            self._need(target, k_first - 1)
            before = Access(self.v.name(target, k_first - 1), idx)
            start = al.indicator(al.eq(before, Access(final, idx)))
        count: Access | None = None
        for i in self._group(index):
            piece = self.v.versioned_reads(self.v.stmts[i], i)
            hit = al.indicator(al.eq(piece.rhs, Access(final, piece.lhs.args)))
            self._need_reads(piece.rhs, i)
            if count is None:
                count = self._tmp(
                    target, piece, AssignOp.PLUS, hit, count=True, start=(idx, start, box)
                )
            else:
                self.stmts.append(
                    locate(
                        Stmt(Access(count.name, piece.lhs.args), AssignOp.PLUS, hit, piece.where),
                        self.span,
                    )
                )
        assert count is not None
        self.ties[first] = count.name
        return at_least_one(Access(count.name, stmt.lhs.args))

    def _result(self, index: int, target: str) -> str:
        """The name the candidates of statement `index`'s clamp group are compared
        with: the output after the group's last piece, or that result recomputed here
        where a candidate reads a version whose recomputation may round apart from the
        forward's (`Versions.rounds_apart`). A term of the gradient's recomputed sum
        then never equals the forward's result, and the tie count compared with one
        while the pieces compared with the other (fuzz seed 61890: N equal terms each
        kept the whole adjoint, 4.7 times the gradient). Recomputed, every comparison
        reads the same bits: a copy of the previous version where the group starts
        from it, then the pieces with their own operators."""
        first = self._first_piece(index)
        if first in self.results:
            return self.results[first]
        group = self._group(index)
        k_first, k_last = self.v.written(first), self.v.written(group[-1])
        previous = self._starts_from_previous(first)
        pieces = [self.v.versioned_reads(self.v.stmts[i], i) for i in group]
        reads = [
            self._origin(e.name, i)
            for p, i in zip(pieces, group, strict=True)
            for e in walk(p.rhs)
            if isinstance(e, Access)
        ]
        if previous:
            reads.append((target, k_first - 1))
        name = self.v.name(target, k_last)
        if any(self.v.rounds_apart(t, k) for t, k in reads):
            name = self._fresh_tmp(target)
            if previous:
                self._need(target, k_first - 1)
                idx, box = full_box(self.v, target)
                before = Access(self.v.name(target, k_first - 1), idx)
                self.stmts.append(
                    locate(Stmt(Access(name, idx), AssignOp.ASSIGN, before, box), self.span)
                )
            for piece, i in zip(pieces, group, strict=True):
                self._need_reads(piece.rhs, i)
                lhs = dataclasses.replace(piece.lhs, name=name)
                self.stmts.append(locate(dataclasses.replace(piece, lhs=lhs), self.span))
        self.results[first] = name
        return name

    def _starts_from_previous(self, first: int) -> bool:
        """Whether the clamp group starting at `first` extends an earlier write (its
        previous value is a candidate), rather than starting with `op!`."""
        return self.v.written(first) > 1 and not self.v.stmts[first].op.init

    def _group(self, index: int) -> list[int]:
        """The statements of `index`'s clamp group (itself where nothing was split)."""
        first = self._first_piece(index)
        return [i for i in range(len(self.v.stmts)) if self._first_piece(i) == first]

    @functools.cached_property
    def _independent(self) -> frozenset[str]:
        return independent(self.v.ranged.checked)

    def _first_piece(self, index: int) -> int:
        return self.v.reads_before[index] if self.v.reads_before else index

    def _every_element_has_terms(self, stmt: Stmt, where: tuple) -> bool:
        """Whether each element `where` allows has a term: the clauses `where` left
        out each range a distinct summed variable (`k in lo:hi`, bounds free of the
        other summed variables) over an interval that is never empty under `where`."""
        dropped = [c for c in stmt.where if c not in where]
        lhs = {e.name for a in stmt.lhs.args for e in walk(a) if isinstance(e, Var)}
        if not all(isinstance(c, RangeConstraint) and isinstance(c.expr, Var) for c in dropped):
            return False
        summed = [c.expr.name for c in dropped]
        if len(set(summed)) != len(summed) or set(summed) & lhs:
            return False
        sizes = self.v.ranged.checked.size_params
        for c in dropped:
            used = {e.name for part in (c.lo, c.hi) for e in walk(part) if isinstance(e, Var)}
            if used & set(summed):
                return False
            gap = Binary(BinOp.SUB, c.lo, c.hi)  # lo - hi >= 0: the interval is empty
            empty = RangeConstraint(gap, al.const(0), Binary(BinOp.ADD, gap, al.const(1)))
            if not runs_never((*where, empty), sizes):
                return False
        return True

    def _times_pass_through(
        self, index: int, stmt: Stmt, target: str, k: int, adjoint: str, grad: str
    ) -> None:
        """`O_(k-1)_grad += O_k_grad * prod_r x_r` over the output (`_times_seed`): when
        the statement reduces, the product from the seed's reductions."""
        factor: Expr = stmt.rhs
        where = stmt.where
        if reduced(stmt):
            factor = exact_product(*self.products[(target, k)])
            where = lhs_where(stmt, stmt.where, self.v.ranged.bounds_of(target))
        value = al.mul(Access(adjoint, stmt.lhs.args), factor) or Access(adjoint, stmt.lhs.args)
        self._need_reads(value, index)
        self._emit(Access(grad, stmt.lhs.args), value, where)
        # a condition on the written elements (a clamp's piece: `0 - (i - 1) in 1:...`):
        # elements the statement does not multiply keep the adjoint, as for max= / min=
        inside = dataclasses.replace(stmt, where=where)
        if plain_vars(stmt.lhs) is not None and not self.v.covers_box(inside, reducing=False):
            self._masked_pass_through(inside, target, adjoint, grad)

    def _masked_pass_through(self, stmt: Stmt, target: str, adjoint: str, grad: str) -> None:
        names = [a.name for a in stmt.lhs.args if isinstance(a, Var)]
        if len(names) != len(stmt.lhs.args) or len(set(names)) != len(names):
            raise TCError(
                f"cannot differentiate a partial overwrite of '{target}' whose left-hand "
                "side is not plain index variables: not supported yet",
                stmt.span,
            )
        written = _inside(stmt.where)
        idx = tuple(Var(n) for n in names)
        where = tuple(
            RangeConstraint(v, Const(0, ScalarType.INT32), d)
            for v, d in zip(idx, self.v.dims(target), strict=True)
        )
        kept = al.select(written, None, Access(adjoint, idx)) if written else Access(adjoint, idx)
        self._emit(Access(grad, idx), kept or Access(adjoint, idx), where)


def _inside(where: tuple, rename: dict[str, Expr] | None = None) -> Expr | None:
    """`lo <= e && e < hi` of every range clause `e in lo:hi` of `where` (its variables
    renamed by `rename`), or None when it has none."""
    written: Expr | None = None
    for clause in where:
        if isinstance(clause, RangeConstraint):
            e, lo, hi = (substitute(x, rename or {}) for x in (clause.expr, clause.lo, clause.hi))
            written = al.conj(written, al.conj(Compare(CmpOp.LE, lo, e), Compare(CmpOp.LT, e, hi)))
    return written


__all__ = ["PassThrough"]
