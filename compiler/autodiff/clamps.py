"""Reads through clamped subscripts, split into affine pieces before AD.

    split_clamps(ranged) -> Split(ranged, reads_before)

Requires: a `RangedDef` (every variable has an explicit `where` range).
Ensures:  no read in a statement's right-hand side has a subscript whose value is a
          `min`/`max` of two affine expressions of index variables; each such
          statement is replaced by pieces, one per choice of each clamp, whose
          domains partition the statement's (a condition `e in lo:e + 1` states
          `e >= lo`: bounds may use index variables in tcc's dialect), so every read
          is affine and its gradient a scatter the gather pass inverts exactly.

Worked example (the natural TC spelling of a clamped boundary):

    O(x) +=! I(min(x + r, N - 1)) * W(r) where x in 0:N, r in 0:R
    ==>
    O(x) +=! I(x + r) * W(r) where x in 0:N, r in 0:R, N - 1 - (x + r) in 0:N - 1 - (x + r) + 1
    O(x) += I(N - 1) * W(r) where x in 0:N, r in 0:R, x + r - (N - 1) in 1:x + r - (N - 1) + 1

The first piece keeps the statement's operator (`+=!` initialises once), the others
use its accumulating form; an `=` statement has no reduction variables, so its pieces
write disjoint elements. A piece whose domain is empty for every size (the clamp
never takes that argument: `A(min(i, N - 1)) where i in 0:N`, or takes it only where
a read is out of bounds, which range inference would also cut) is dropped, and the
kept one needs no condition (`compiler.autodiff.emptiness` decides, without isl).
A statement with lets is split with its lets inlined (AD inlines them anyway);
clamps of non-affine operands are left as they are (AD then says the read is not
affine).

The pieces of one statement are still one statement: its reads see the tensors as
they were before it (`O(i) += O(0) * A(min(k + 1, N - 1))`: the second piece reads
the `O(0)` the first one read, not the first one's result). `Split.reads_before`
gives, per statement of the result, the statement whose previous state its reads
see, for `compiler.autodiff.versions`.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from compiler.autodiff.emptiness import runs_never
from compiler.autodiff.rewrite import inline_lets
from compiler.frontend.ast import (
    Access,
    Binary,
    BinOp,
    Call,
    CmpOp,
    Compare,
    Const,
    Expr,
    Let,
    Logical,
    LogicOp,
    RangeConstraint,
    ScalarType,
    Stmt,
    Unary,
    UnaryOp,
    Var,
)
from compiler.frontend.check import check_def
from compiler.frontend.checked import RangedDef
from compiler.frontend.scopes import walk

MAX_PIECES = 16  # 4 clamps in one statement; more is left to AD's error


@dataclasses.dataclass(frozen=True)
class Split:
    """The def with its clamps split, and per statement of it the index of the
    statement whose previous state its reads see (the first piece of its group), and
    the statement it is a piece of (itself where nothing was split)."""

    ranged: RangedDef
    reads_before: tuple[int, ...]
    originals: tuple[Stmt, ...]


def split_clamps(ranged: RangedDef) -> Split:
    """`ranged` with every clamped read split into affine pieces (see the module doc)."""
    definition = ranged.checked.definition
    stmts: list[Stmt] = []
    reads_before: list[int] = []
    originals: list[Stmt] = []
    changed = False
    for stmt in definition.stmts:
        pieces = _split(stmt, ranged)
        changed = changed or pieces != [stmt]
        reads_before.extend([len(stmts)] * len(pieces))
        originals.extend([stmt] * len(pieces))
        stmts.extend(pieces)
    if not changed:
        return Split(ranged, tuple(range(len(stmts))), tuple(originals))
    rechecked = check_def(dataclasses.replace(definition, stmts=tuple(stmts)))
    kept = RangedDef(rechecked, ranged.output_bounds, ranged.warnings, ranged.preconditions)
    return Split(kept, tuple(reads_before), tuple(originals))


def _split(stmt: Stmt, ranged: RangedDef) -> list[Stmt]:
    flat = inline_lets(stmt) if any(isinstance(c, Let) for c in stmt.where) else stmt
    if not _clamps(flat, ranged):
        return [stmt]  # nothing to split: the lets stay
    done: list[Stmt] = []
    todo = [flat]
    while todo:
        piece = todo.pop(0)
        clamp = next(iter(_clamps(piece, ranged)), None)
        if clamp is None:
            done.append(piece)
        else:
            todo[:0] = _choices(piece, clamp, ranged)
        if len(done) + len(todo) > MAX_PIECES:
            return [stmt]
    # a piece kept while other clamps were still in its reads is checked once more now
    # that its reads are affine (their bounds then decide more: `_in_bounds`)
    done = [p for p in done if not _empty(p.where, p.rhs, ranged)]
    if not done:
        return [stmt]  # the statement itself never runs: range inference said so already
    return [done[0]] + [_accumulating(p) for p in done[1:]]


def _clamps(stmt: Stmt, ranged: RangedDef) -> list[Call]:
    """The innermost clamps in the subscripts of the right-hand side's reads."""
    sizes = set(ranged.checked.size_params)
    found = []
    for e in walk(stmt.rhs):
        if isinstance(e, Access):
            for arg in e.args:
                found.extend(c for c in walk(arg) if _is_clamp(c, sizes) and _innermost(c))
    return found


def _innermost(clamp: Expr) -> bool:
    """No clamp inside: split first, so every condition written is affine."""
    inner = (x for a in clamp.args for x in walk(a))  # type: ignore[attr-defined]
    return not any(isinstance(x, Call) and x.fn in ("min", "max") for x in inner)


def _is_clamp(e: Expr, sizes: set[str]) -> bool:
    return (
        isinstance(e, Call)
        and e.fn in ("min", "max")
        and len(e.args) == 2
        and all(_affine(a, sizes) for a in e.args)
    )


def _affine(e: Expr, sizes: set[str]) -> bool:
    if isinstance(e, Var):
        return True  # an index variable or a size (the checker typed it integral)
    if isinstance(e, Const):
        return not e.dtype.is_float
    if isinstance(e, Unary) and e.op is UnaryOp.NEG:
        return _affine(e.operand, sizes)
    if isinstance(e, Binary) and e.op in (BinOp.ADD, BinOp.SUB):
        return _affine(e.lhs, sizes) and _affine(e.rhs, sizes)
    if isinstance(e, Binary) and e.op is BinOp.MUL:
        return (isinstance(e.lhs, Const) and _affine(e.rhs, sizes)) or (
            isinstance(e.rhs, Const) and _affine(e.lhs, sizes)
        )
    return isinstance(e, Call) and _is_clamp(e, sizes)


def _choices(stmt: Stmt, clamp: Call, ranged: RangedDef) -> list[Stmt]:
    a, b = clamp.args
    # min(a, b) is a where b - a >= 0, else b (a - b >= 1); max mirrors it
    first, second = (b, a) if clamp.fn == "min" else (a, b)
    sizes = set(ranged.checked.size_params)
    if _always_at_least(Binary(BinOp.SUB, first, second), 0, sizes):  # min(0, N - 1)
        return [dataclasses.replace(stmt, rhs=_replace(stmt.rhs, clamp, a))]
    if _always_at_least(Binary(BinOp.SUB, second, first), 1, sizes):
        return [dataclasses.replace(stmt, rhs=_replace(stmt.rhs, clamp, b))]
    take_a = _at_least(Binary(BinOp.SUB, first, second), 0)
    take_b = _at_least(Binary(BinOp.SUB, second, first), 1)
    pieces = [(a, take_a), (b, take_b)]
    kept = [
        (v, c)
        for v, c in pieces
        if not _empty((*stmt.where, c), _replace(stmt.rhs, clamp, v), ranged)
    ]
    if len(kept) == 1:  # the other argument is never taken: every point takes this one
        return [dataclasses.replace(stmt, rhs=_replace(stmt.rhs, clamp, kept[0][0]))]
    return [_with(stmt, clamp, v, c) for v, c in kept]


def _empty(where: tuple, rhs: Expr, ranged: RangedDef) -> bool:
    """Whether a piece never runs: by its where clauses alone, with one read's bounds
    or with every read's, under each case of the def's preconditions (the relations of
    the sizes every call checks: fuzz seed 71149's `M <= 2`, without which a piece
    with `k13 in 2:M` reads out of bounds for every size). Each smaller system decides
    alone when it is empty (the domain only shrinks as bounds are added), and
    `runs_never` gives up on a larger system that Fourier-Motzkin blows up (fuzz seed
    62358: twelve reads, two of them floor-divided, hid `i3 + 2 * k5 in 0:N` against
    `k5 >= N`)."""
    sizes = ranged.checked.size_params
    reads = _in_bounds(rhs, ranged)
    for case in _size_cases(ranged):
        domain = (*where, *case)
        if runs_never(domain, sizes) or any(runs_never((*domain, *r), sizes) for r in reads):
            continue
        if not runs_never((*domain, *(c for read in reads for c in read)), sizes):
            return False
    return True


_MAX_CASES = 8


def _size_cases(ranged: RangedDef) -> list[tuple[RangeConstraint, ...]]:
    """The def's preconditions as a disjunction of conjunctions of range constraints
    (`a <= b` as `a in a:b + 1`); a condition that is not a comparison, `!=`, or a
    disjunction past `_MAX_CASES` cases is left out (the domain only grows)."""
    cases: list[tuple[RangeConstraint, ...]] = [()]
    for pre in ranged.preconditions:
        alternatives = _cases(pre.cond)
        if alternatives is None or len(cases) * len(alternatives) > _MAX_CASES:
            continue
        cases = [(*case, *alt) for case in cases for alt in alternatives]
    return cases


def _cases(e: Expr) -> list[tuple[RangeConstraint, ...]] | None:
    if isinstance(e, Logical):
        lhs, rhs = _cases(e.lhs), _cases(e.rhs)
        if e.op is LogicOp.OR:
            return None if lhs is None or rhs is None else lhs + rhs
        lhs, rhs = lhs or [()], rhs or [()]
        return [(*a, *b) for a in lhs for b in rhs]
    if not isinstance(e, Compare) or e.op is CmpOp.NE:
        return None
    one = Const(1, ScalarType.INT32)
    a, b = e.lhs, e.rhs
    if e.op in (CmpOp.GT, CmpOp.GE):
        a, b = b, a
    if e.op is CmpOp.EQ:
        return [(RangeConstraint(a, b, Binary(BinOp.ADD, b, one)),)]
    hi = b if e.op in (CmpOp.LT, CmpOp.GT) else Binary(BinOp.ADD, b, one)
    return [(RangeConstraint(a, a, hi),)]


def _in_bounds(rhs: Expr, ranged: RangedDef) -> list[tuple[RangeConstraint, ...]]:
    """Per distinct read in `rhs`, `e in 0:extent` for each of its subscripts whose
    tensor's extent is a combination of sizes: range inference bounds the variables by
    every read (a guarded one too), so a piece can be empty only through its reads
    (`O(2 * N - 3)` of an `O` with 2 * N - 2 rows, where `i <= N - 1` takes it only
    for N = 1). An output's extent is the one after its last write, at least the one
    a read sees."""
    sizes = set(ranged.checked.size_params)
    out: dict[Access, tuple[RangeConstraint, ...]] = {}
    for e in walk(rhs):
        if not isinstance(e, Access) or e in out:
            continue
        extents = _extents(e.name, ranged)
        out[e] = tuple(
            RangeConstraint(arg, Const(0, ScalarType.INT32), extent)
            for arg, extent in zip(e.args, extents or (), strict=False)
            if extent is not None and _sizes_only(extent, sizes)
        )
    return [read for read in out.values() if read]


def _extents(name: str, ranged: RangedDef) -> tuple[Expr | None, ...] | None:
    for tensor in ranged.checked.tensors:
        if tensor.name == name and tensor.dims is not None:
            return tuple(tensor.dims)
    for output, bounds in ranged.output_bounds:
        if output == name:
            return tuple(b.hi for b in bounds)
    return None


def _sizes_only(e: Expr, sizes: set[str]) -> bool:
    return all(not isinstance(x, Var) or x.name in sizes for x in walk(e))


def _always_at_least(e: Expr, lo: int, sizes: set[str]) -> bool:
    """Whether `e`, a combination of sizes (each >= 1) and constants, is >= `lo` for
    every size: true when no size has a negative coefficient and its value with
    every size 1 is >= lo. False when unsure (index variables, other forms)."""
    terms = _linear(e, sizes)
    if terms is None:
        return False
    const = terms.pop("", 0)
    return all(c >= 0 for c in terms.values()) and const + sum(terms.values()) >= lo


def _linear(e: Expr, sizes: set[str]) -> dict[str, int] | None:
    if isinstance(e, Const) and isinstance(e.value, int):
        return {"": e.value}
    if isinstance(e, Var) and e.name in sizes:
        return {e.name: 1}
    if isinstance(e, Unary) and e.op is UnaryOp.NEG:
        inner = _linear(e.operand, sizes)
        return None if inner is None else {k: -v for k, v in inner.items()}
    if isinstance(e, Binary) and e.op in (BinOp.ADD, BinOp.SUB):
        lhs, rhs = _linear(e.lhs, sizes), _linear(e.rhs, sizes)
        if lhs is None or rhs is None:
            return None
        sign = 1 if e.op is BinOp.ADD else -1
        for k, v in rhs.items():
            lhs[k] = lhs.get(k, 0) + sign * v
        return lhs
    return None


def _at_least(e: Expr, lo: int) -> RangeConstraint:
    one = Const(1, ScalarType.INT32)
    return RangeConstraint(e, Const(lo, ScalarType.INT32), Binary(BinOp.ADD, e, one))


def _with(stmt: Stmt, clamp: Call, value: Expr, cond: RangeConstraint) -> Stmt:
    rhs = _replace(stmt.rhs, clamp, value)
    return dataclasses.replace(stmt, rhs=rhs, where=(*stmt.where, cond))


def _accumulating(stmt: Stmt) -> Stmt:
    return dataclasses.replace(stmt, op=stmt.op.base) if stmt.op.init else stmt


def _replace(e: Any, old: Expr, new: Expr) -> Any:
    if e == old:
        return new
    if isinstance(e, tuple):
        return tuple(_replace(x, old, new) for x in e)
    if not dataclasses.is_dataclass(e) or isinstance(e, type):
        return e
    changes = {
        f.name: _replace(getattr(e, f.name), old, new)
        for f in dataclasses.fields(e)
        if f.name != "span"
    }
    return dataclasses.replace(e, **changes)


__all__ = ["MAX_PIECES", "Split", "split_clamps"]
