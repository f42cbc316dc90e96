"""Simplification of a derived def: the gradient a person would write.

Requires: a def from `reverse.grad_def` or `forward.jvp_def` (statements in execution
          order, explicit `where` ranges).
Ensures:  `simplify(d)` returns a def that computes the same values (up to rounding:
          no rewrite here changes a value by more than regrouping a sum does):
          1. every subscript, left-hand side and range bound has its integer affine
             arithmetic folded (`H + (y - H)` -> `y`; `normal.fold_index`: `/` and `%`
             stay floor division and remainder);
          2. every right-hand side has its signs pulled out and its like terms
             collected, zero terms dropped (`normal.tidy`: `-(-(a / b) * e)` ->
             `a / b * e`, `e + e` -> `2 * e`);
          3. a contribution `T(a) += e2 where W` is merged into the statement that
             first writes `T(a) +=! e1` over the same domain (up to the names of the
             left-hand side's variables, `T(i0, i1)` against `T(n, d)`), as
             `T(a) +=! e1 + e2`: at the earlier statement's place when no statement
             between writes what the later one reads, else at the later's place when
             none between writes what the earlier one reads (`merge.py` only moves
             the later statement up, with the same names);
          4. a subexpression with a call in it (`exp(-G(3, b, h))`) that occurs more
             than once in a right-hand side (outside subscripts and comparisons) is
             computed once, as a `let` of the statement's `where` clause
             (`where t0 = exp(-G(3, b, h))`), innermost lets first.
          `d` is not modified; a def nothing applies to is returned as it is.

Worked example (softmax with the loss `Y` alone: `rowsum`'s contribution
`shifted_grad_acc(n, d) += rowsum_grad_acc(n)` reads an accumulator computed after the
first write of `shifted_grad_acc`, so the first write moves down to it)::

    shifted_grad_acc(n, d) +=! Y_grad(n, d) / rowsum(n) where n in 0:N, d in 0:D
    rowsum_grad_acc(n) +=! -(Y_grad(n, d) * shifted(n, d) / ...) where n in 0:N, d in 0:D
    shifted_grad_acc(n, d) += rowsum_grad_acc(n) where n in 0:N, d in 0:D
  ==>
    rowsum_grad_acc(n) +=! -(Y_grad(n, d) * shifted(n, d) / ...) where n in 0:N, d in 0:D
    shifted_grad_acc(n, d) +=! Y_grad(n, d) / rowsum(n) + rowsum_grad_acc(n) where ...
"""

from __future__ import annotations

import dataclasses

from compiler.autodiff.normal import TypeOf, fold_index, tidy
from compiler.diagnostics import InternalError
from compiler.frontend.ast import (
    Access,
    AssignOp,
    Binary,
    BinOp,
    Call,
    Compare,
    Def,
    Expr,
    Let,
    RangeConstraint,
    ScalarType,
    Stmt,
    Var,
    WhereClause,
)
from compiler.frontend.scopes import where_exprs
from compiler.frontend.types import INDEX_TYPE, expr_type
from compiler.frontend.visit import children, substitute, walk, with_children

_FIRST_WRITES = (AssignOp.ASSIGN, AssignOp.PLUS_INIT, AssignOp.PLUS)


def simplify(d: Def) -> Def:
    """`d` simplified (see the module doc); `d` itself when nothing applies."""
    types = {p.name: p.dtype for p in (*d.params, *d.outputs) if p.dtype is not None}
    exact = _compared(d.stmts)
    stmts = [_normalise(s, types, s.lhs.name in exact) for s in d.stmts]
    stmts = _merge(stmts, types, exact)
    taken = _names(d)
    stmts = [_share(s, taken) for s in stmts]
    if all(a is b for a, b in zip(stmts, d.stmts, strict=False)) and len(stmts) == len(d.stmts):
        return d
    return dataclasses.replace(d, stmts=tuple(stmts))


# ------------------------------------------------------------ one statement


def _normalise(s: Stmt, types: dict[str, ScalarType], exact: bool) -> Stmt:
    """Steps 1 and 2 on one statement (step 2 only where it keeps every bit with
    `exact`: see `_compared`)."""
    lhs = with_children(s.lhs, tuple(fold_index(a) for a in s.lhs.args))
    where = tuple(_fold_clause(c) for c in s.where)
    rhs = tidy(s.rhs, _typer(s, types), exact)
    if lhs is s.lhs and rhs is s.rhs and all(a is b for a, b in zip(where, s.where, strict=True)):
        return s
    assert isinstance(lhs, Access)
    return dataclasses.replace(s, lhs=lhs, rhs=rhs, where=where)


def _compared(stmts: tuple[Stmt, ...]) -> frozenset[str]:
    """The tensors written in the def whose bits a comparison reads: those read in a
    comparison's operands (a `max=` group's tie test `P_v1(i) == O_v1(i, k)`), and what
    the statements writing them read, transitively. Their statements are neither
    regrouped nor merged, so a recomputed result keeps the forward's bits."""
    written = {s.lhs.name for s in stmts}
    want: set[str] = set()
    for s in stmts:
        lets = {c.name: c.value for c in s.where if isinstance(c, Let)}
        for root in (s.rhs, *where_exprs(s)):
            for e in walk(root):
                if isinstance(e, Compare):
                    want |= _accesses(e, lets)
    todo = list(want & written)
    while todo:
        name = todo.pop()
        for s in stmts:
            if s.lhs.name == name:
                for read in _reads(s) - want:
                    want.add(read)
                    todo.append(read)
    return frozenset(want & written)


def _accesses(e: Expr, lets: dict[str, Expr]) -> set[str]:
    """The tensors `e` reads, through the lets it names."""
    found: set[str] = set()
    seen: set[str] = set()
    todo = [e]
    while todo:
        for x in walk(todo.pop()):
            if isinstance(x, Access):
                found.add(x.name)
            elif isinstance(x, Var) and x.name in lets and x.name not in seen:
                seen.add(x.name)
                todo.append(lets[x.name])
    return found


def _fold_clause(c: WhereClause) -> WhereClause:
    if not isinstance(c, RangeConstraint):
        return c
    lo, hi = fold_index(c.lo), fold_index(c.hi)
    return c if lo is c.lo and hi is c.hi else dataclasses.replace(c, lo=lo, hi=hi)


def _typer(s: Stmt, types: dict[str, ScalarType]) -> TypeOf:
    """The type of an expression of `s`: tensors by their declared types, lets by their
    values', every other name an index. An expression whose type cannot be told counts
    as an index (the float-only rewrites then do not apply)."""
    env = dict(types)
    for clause in s.where:
        if isinstance(clause, Let):
            env[clause.name] = _type_or_index(clause.value, env)
    for root in (s.rhs, *where_exprs(s)):
        for e in walk(root):
            if isinstance(e, Var) and e.name not in env:
                env[e.name] = INDEX_TYPE

    def type_of(e: Expr) -> ScalarType:
        return _type_or_index(e, env)

    return type_of


def _type_or_index(e: Expr, env: dict[str, ScalarType]) -> ScalarType:
    try:
        return expr_type(e, env)
    except InternalError:
        return INDEX_TYPE


# ------------------------------------------------------------ merging statements


def _merge(stmts: list[Stmt], types: dict[str, ScalarType], exact: frozenset[str]) -> list[Stmt]:
    """Step 3: contributions merged into the first write of their element (not into a
    tensor of `exact`: merging regroups its sum)."""
    j = 1
    while j < len(stmts):
        found = _partner(stmts, j) if stmts[j].lhs.name not in exact else None
        if found is None:
            j += 1
            continue
        i, rhs, at = found
        first = stmts[i]
        merged = _normalise(
            dataclasses.replace(first, rhs=Binary(BinOp.ADD, first.rhs, rhs)), types, False
        )
        del stmts[j]
        del stmts[i]
        stmts.insert(i if at == "first" else j - 1, merged)
        j = i + 1 if at == "first" else j
    return stmts


def _partner(stmts: list[Stmt], j: int) -> tuple[int, Expr, str] | None:
    """(i, the later right-hand side in statement i's names, where the merged statement
    goes) for the statement i that statement `j` merges into, or None."""
    later = stmts[j]
    target = later.lhs.name
    if later.op is not AssignOp.PLUS or target in _reads(later):
        return None
    for i in range(j - 1, -1, -1):
        first = stmts[i]
        if first.lhs.name != target:
            if target in _reads(first):
                return None
            continue
        if first.op not in _FIRST_WRITES or target in _reads(first):
            return None
        rhs = _renamed(later, first)
        if rhs is None:
            return None
        between = stmts[i + 1 : j]
        written = {s.lhs.name for s in between}
        if not written & _reads(later):
            return i, rhs, "first"
        if not written & _reads(first):
            return i, rhs, "later"
        return None
    return None


def _renamed(later: Stmt, first: Stmt) -> Expr | None:
    """`later`'s right-hand side in `first`'s variable names, when the two statements
    write the same elements over the same domain; else None."""
    if later.lhs == first.lhs and later.where == first.where:
        return later.rhs
    pairs = list(zip(later.lhs.args, first.lhs.args, strict=False))
    if len(later.lhs.args) != len(first.lhs.args) or not all(
        isinstance(a, Var) and isinstance(b, Var) for a, b in pairs
    ):
        return None
    names = {a.name: Var(b.name) for a, b in pairs}  # type: ignore[union-attr]
    ranged = [c for c in later.where if isinstance(c, RangeConstraint)]
    if len(names) != len(pairs) or len(ranged) != len(later.where):
        return None
    if len({b.name for _, b in pairs}) != len(pairs):  # type: ignore[union-attr]
        # `T(i6, i6)` is a diagonal, not `T(i0, i1)`'s box renamed (fuzz seed 50674)
        return None
    if {c.expr.name for c in ranged if isinstance(c.expr, Var)} != set(names):
        return None  # a reduction variable or a let: not renamed here
    where = {dataclasses.replace(c, expr=substitute(c.expr, names)) for c in ranged}
    if where != set(first.where) or len(where) != len(first.where):
        return None
    return substitute(later.rhs, names)


def _reads(s: Stmt) -> set[str]:
    roots = (s.rhs, *s.lhs.args, *where_exprs(s))
    return {e.name for root in roots for e in walk(root) if isinstance(e, Access)}


# ------------------------------------------------------------ shared subexpressions


def _share(s: Stmt, taken: set[str]) -> Stmt:
    """Step 4 on one statement: each repeated subexpression with a call, once."""
    lets: list[Let] = []
    rhs = s.rhs
    k = 0
    while (repeated := _largest_repeat(rhs, lets)) is not None:
        while f"t{k}" in taken:
            k += 1
        name = f"t{k}"
        k += 1
        rhs = _replace(rhs, repeated, Var(name))
        lets = [dataclasses.replace(x, value=_replace(x.value, repeated, Var(name))) for x in lets]
        lets.insert(0, Let(name, repeated, span=s.span))
    if not lets:
        return s
    lets = _ordered(lets)
    names = (
        {x.name: Var(f"t{j}") for j, x in enumerate(lets)}
        if not taken & {f"t{j}" for j in range(len(lets))}
        else {}
    )
    lets = [
        Let(names.get(x.name, Var(x.name)).name, substitute(x.value, names), span=x.span)
        for x in lets
    ]
    return dataclasses.replace(s, rhs=substitute(rhs, names), where=(*s.where, *lets))


def _largest_repeat(rhs: Expr, lets: list[Let]) -> Expr | None:
    """The largest subexpression with a call that occurs twice or more in `rhs` and
    the lets' values (outside subscripts), or None. Subexpressions are numbered
    bottom-up (equal ones get one number), so counting them costs one visit each."""
    numbers: dict[tuple[object, ...], int] = {}
    found: dict[int, tuple[Expr, int, int]] = {}  # number -> (expr, size, count)
    for root in (rhs, *(x.value for x in lets)):
        _number(root, numbers, found)
    repeated = [(size, e) for e, size, count in found.values() if count > 1]
    return max(repeated, key=lambda t: t[0])[1] if repeated else None


def _number(
    e: Expr, numbers: dict[tuple[object, ...], int], found: dict[int, tuple[Expr, int, int]]
) -> tuple[int, int, bool]:
    """(number, size, has a call) of `e`; counts `e` in `found` when worth sharing."""
    if isinstance(e, (Access, Compare)):  # never shared, never entered (see _replace)
        key: tuple[object, ...] = ("opaque", e)
        return numbers.setdefault(key, len(numbers)), 1, False
    parts = [_number(c, numbers, found) for c in children(e)]
    key = (type(e), _label(e), *(p[0] for p in parts))
    number = numbers.setdefault(key, len(numbers))
    size = 1 + sum(p[1] for p in parts)
    calls = any(p[2] for p in parts) or (isinstance(e, Call) and e.fn not in ("min", "max"))
    if calls and not isinstance(e, Var):
        _, _, count = found.get(number, (e, size, 0))
        found[number] = (e, size, count + 1)
    return number, size, calls


def _label(e: Expr) -> object:
    """What tells `e` from another node of its class with the same children."""
    for attr in ("op", "fn", "name", "dtype"):
        if hasattr(e, attr):
            return (getattr(e, attr), getattr(e, "value", None))
    return None


def _replace(e: Expr, old: Expr, new: Expr) -> Expr:
    """`e` with `old` replaced by `new`, except in subscripts and in comparisons: a
    comparison's operands (a `max=` candidate against its result) are computed as in
    the forward def, with the same math calls, so equal values compare equal (a let
    could be computed by a vector variant of the call that differs in the last bit)."""
    if e == old:
        return new
    if isinstance(e, (Access, Compare)) or not children(e):
        return e
    return with_children(e, tuple(_replace(c, old, new) for c in children(e)))


def _ordered(lets: list[Let]) -> list[Let]:
    """The lets with each after the lets its value uses."""
    done: list[Let] = []
    pending = list(lets)
    while pending:
        defined = {x.name for x in done}
        pending_names = {x.name for x in pending}
        for x in pending:
            uses = {v.name for v in walk(x.value) if isinstance(v, Var)} & pending_names
            if uses <= defined:
                done.append(x)
                pending.remove(x)
                break
        else:
            raise InternalError("cyclic lets in a simplified statement")
    return done


def _size(e: Expr) -> int:
    return sum(1 for _ in walk(e))


def _names(d: Def) -> set[str]:
    """Every name `d` uses (tensors, sizes, variables, lets)."""
    names = {p.name for p in (*d.params, *d.outputs)}
    for p in (*d.params, *d.outputs):
        for dim in p.dims or ():
            names |= {e.name for e in walk(dim) if isinstance(e, Var)}
    for s in d.stmts:
        for root in (s.lhs, s.rhs, *where_exprs(s)):
            names |= {e.name for e in walk(root) if isinstance(e, (Var, Access))}
        names |= {c.name for c in s.where if isinstance(c, Let)}
    return names


__all__ = ["simplify"]
