"""The code a call runs, decided by its sizes alone: which branches a call takes, and
the Function holding only some of them.

    points = choice_points(f)                # statements the sizes alone decide
    taken = branches(f, sizes)               # the branches these sizes run
    g = restrict(f, taken)                   # f without the others

A choice point is a statement whose condition reads size parameters and constants
alone, so that one call evaluates it the same way wherever it runs, inside loops too:
- an `If` (the lowering's versions of a statement whose best form depends on the
  sizes -- padded or clamped gathers, L1-aliasing loop orders: `cpu.pad`,
  `cpu.aliasing` -- and a register tile's fallback for rows narrower than its
  lanes: `cpu.regtile`);
- a `For` whose bounds may leave it empty (a tile's remainder, `c in 8 (C / 8):C`):
  every For of size-only bounds but those from 0 (or less) to a size, or between
  constants that it runs at least once (empty at most for a zero size, such loops
  are kept as they are).
A name bound by an enclosing loop, `Let` or `Local` is not a size there. A branch is
`(point, side)`: `point` the choice point's position in a pre-order walk of `f` (a
statement held at two places is two points, decided alike), `side`
True for an If's `then` and a loop's body, False for an If's `otherwise`; a branch
with no statement (an If without `otherwise`, an empty loop) is never one.

`branches(f, sizes)` are the branches that a run with `sizes` takes (of the points
it reaches). `restrict(f, kept)` empties every branch not in `kept`: on
any sizes whose `branches` lie in `kept` it runs exactly what `f` runs, with less
code, so a target compiles what a call's sizes select (`runtime.native`). On other
sizes it computes nothing where `f` would: callers route each call by its sizes.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import TypeAlias

import numpy as np

from compiler.loops.interp import eval_expr
from compiler.loops.ir import (
    Block,
    Const,
    Expr,
    For,
    Function,
    If,
    Let,
    Load,
    Local,
    Node,
    Stmt,
    VarRef,
    child_fields,
    children,
    walk,
)

Branch: TypeAlias = tuple[int, bool]
Point: TypeAlias = If | For


def _reads_sizes_only(e: Expr, sizes: frozenset[str]) -> bool:
    for n in walk(e):
        if isinstance(n, Load) or (isinstance(n, VarRef) and n.name not in sizes):
            return False
    return True


def _never_empty(s: For, sizes: frozenset[str]) -> bool:
    """Whether `s` runs at least once for all sizes but zero ones."""
    if not isinstance(s.lo, Const):
        return False
    hi = s.hi
    if isinstance(hi, VarRef):
        return hi.name in sizes and int(s.lo.value) <= 0
    return isinstance(hi, Const) and int(hi.value) > int(s.lo.value)


def _is_point(s: Stmt, sizes: frozenset[str]) -> bool:
    if isinstance(s, If):
        return _reads_sizes_only(s.cond, sizes)
    return (
        isinstance(s, For)
        and _reads_sizes_only(s.lo, sizes)
        and _reads_sizes_only(s.hi, sizes)
        and not _never_empty(s, sizes)
    )


def _inner(s: Stmt, sizes: frozenset[str]) -> frozenset[str]:
    """The size names not bound inside `s`'s body."""
    return sizes - {s.var} if isinstance(s, (For, Let, Local)) else sizes


def choice_points(f: Function) -> tuple[Point, ...]:
    """The choice points of `f` in pre-order (see the module doc). A statement the
    tree holds at two places is a point at each: numbers are positions, the same
    however equal subtrees are shared (a Function loaded from the compile cache)."""
    return Choices(f).points


class Choices:
    """`f`'s choice points, found once: `branches` and `restrict` for many sizes."""

    def __init__(self, f: Function) -> None:
        self.function = f
        self._holds: set[int] = set()  # ids of the statements with a point in them
        points: list[Point] = []
        self._find(f.body, frozenset(f.size_params), points)
        self.points = tuple(points)
        every: set[Branch] = set()
        for k, p in enumerate(self.points):
            every.add((k, True))
            if isinstance(p, If) and p.otherwise is not None:
                every.add((k, False))
        self.every = frozenset(every)

    def _find(self, s: Stmt, sizes: frozenset[str], points: list[Point]) -> bool:
        """Append the points in `s` to `points`, pre-order (`sizes`: the size names not
        bound here); whether there are any."""
        count = len(points)
        if _is_point(s, sizes):
            points.append(s)  # type: ignore[arg-type]
        inner = _inner(s, sizes)
        for child in children(s):
            if isinstance(child, Stmt):
                self._find(child, inner, points)
        if len(points) > count:
            self._holds.add(id(s))
            return True
        return False

    def branches(self, sizes: Mapping[str, int]) -> frozenset[Branch]:
        """The branches a run with `sizes` (every size parameter) takes."""
        env = {n: np.int64(sizes[n]) for n in self.function.size_params}
        taken: set[Branch] = set()
        number = iter(range(len(self.points)))
        holds = self._holds

        def visit(s: Stmt, scope: frozenset[str], reached: bool) -> None:
            if id(s) not in holds:
                return
            if _is_point(s, scope):
                k = next(number)
                if isinstance(s, If):
                    side = reached and bool(eval_expr(s.cond, env))
                    if reached and (side or s.otherwise is not None):
                        taken.add((k, side))
                    visit(s.then, scope, side)
                    if s.otherwise is not None:
                        visit(s.otherwise, scope, reached and not side)
                    return
                assert isinstance(s, For)
                runs = reached and int(eval_expr(s.hi, env)) > int(eval_expr(s.lo, env))
                if runs:
                    taken.add((k, True))
                visit(s.body, scope - {s.var}, runs)
                return
            inner = _inner(s, scope)
            for child in children(s):
                if isinstance(child, Stmt):
                    visit(child, inner, reached)

        visit(self.function.body, frozenset(self.function.size_params), True)
        return frozenset(taken)

    def restrict(self, kept: frozenset[Branch]) -> Function:
        """`function` with every branch not in `kept` emptied."""
        if kept >= self.every:
            return self.function
        number = iter(range(len(self.points)))
        holds = self._holds

        def keep(s: Stmt, scope: frozenset[str]) -> Stmt:
            if id(s) not in holds:
                return s
            k = next(number) if _is_point(s, scope) else None
            inner = _inner(s, scope)
            changes = {}
            for name in child_fields(s):
                value = getattr(s, name)
                if isinstance(value, Stmt):
                    new = keep(value, inner)
                    if new is not value:
                        changes[name] = new
                elif isinstance(value, tuple) and value and isinstance(value[0], Stmt):
                    stmts = tuple(keep(t, inner) for t in value)
                    if any(a is not b for a, b in zip(stmts, value, strict=True)):
                        changes[name] = stmts
            if k is not None:
                if isinstance(s, If):
                    if (k, True) not in kept:
                        changes["then"] = Block(())
                    if s.otherwise is not None and (k, False) not in kept:
                        changes["otherwise"] = None
                elif (k, True) not in kept:
                    return Block(())  # a loop that these sizes leave empty
            return dataclasses.replace(s, **changes) if changes else s

        body = keep(self.function.body, frozenset(self.function.size_params))
        return dataclasses.replace(self.function, body=body)


def branches(f: Function, sizes: Mapping[str, int]) -> frozenset[Branch]:
    """The branches that a run of `f` with `sizes` (every size parameter) takes."""
    return Choices(f).branches(sizes)


def every_branch(f: Function) -> frozenset[Branch]:
    """Every branch of `f` (restricting to it changes nothing)."""
    return Choices(f).every


def restrict(f: Function, kept: frozenset[Branch]) -> Function:
    """`f` with every branch not in `kept` emptied (see the module doc)."""
    return Choices(f).restrict(kept)


def describe(kept: frozenset[Branch]) -> str:
    """`kept` as short stable text (`0t.1f`): part of a compile cache key."""
    return ".".join(f"{k}{'t' if side else 'f'}" for k, side in sorted(kept)) or "-"


def nodes(f: Node) -> int:
    """How many nodes `f` holds (what a restriction saves, in tests and notes)."""
    return sum(1 for _ in walk(f))


__all__ = [
    "Branch",
    "Choices",
    "branches",
    "choice_points",
    "describe",
    "every_branch",
    "nodes",
    "restrict",
]
