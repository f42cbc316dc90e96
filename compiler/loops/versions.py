"""Versions of a Function selected by its sizes: which a call takes, and the Function
holding only some of them.

    points = choice_points(f)                # the If statements that pick a version
    taken = branches(f, sizes)               # the branches these sizes run
    g = restrict(f, taken | earlier)         # f without the branches no call took

A choice point is an `If` reached from the body through blocks, allocations and other
choice points only (outside every loop and binding), whose condition reads size
parameters and constants alone: the lowering emits one for each version of a statement
whose best form depends on the sizes (padded or clamped gathers, L1-aliasing loop
orders: `poly.pad`, `poly.aliasing`). A branch is `(point, side)`: `point` the choice
point's number in a pre-order walk of `f` (then before otherwise), `side` True for
`then`. `branches(f, sizes)` are the branches a run with `sizes` executes; a branch
with no statement (an If without `otherwise`) is never one.

`restrict(f, kept)` is `f` with every branch not in `kept` emptied: on any sizes whose
`branches` lie in `kept` it runs exactly what `f` runs, and its code is smaller, so a
target compiles a version only once a call's sizes first select it
(`runtime.native`). Anything else makes it compute nothing where `f` would: callers
must route each call by its sizes.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Mapping
from typing import TypeAlias

import numpy as np

from compiler.loops.interp import eval_expr
from compiler.loops.ir import Alloc, Block, Function, If, Load, Node, Stmt, VarRef, walk

Branch: TypeAlias = tuple[int, bool]


def _is_choice(s: If, sizes: frozenset[str]) -> bool:
    for n in walk(s.cond):
        if isinstance(n, Load) or (isinstance(n, VarRef) and n.name not in sizes):
            return False
    return True


def _points(s: Stmt, sizes: frozenset[str]) -> Iterator[If]:
    if isinstance(s, Block):
        for t in s.stmts:
            yield from _points(t, sizes)
    elif isinstance(s, Alloc):
        yield from _points(s.body, sizes)
    elif isinstance(s, If) and _is_choice(s, sizes):
        yield s
        yield from _points(s.then, sizes)
        if s.otherwise is not None:
            yield from _points(s.otherwise, sizes)


def choice_points(f: Function) -> tuple[If, ...]:
    """The choice points of `f` in pre-order (see the module doc)."""
    return tuple(_points(f.body, frozenset(f.size_params)))


def _numbers(f: Function) -> dict[int, int]:
    return {id(p): k for k, p in enumerate(choice_points(f))}


def branches(f: Function, sizes: Mapping[str, int]) -> frozenset[Branch]:
    """The branches that a run of `f` with `sizes` (every size parameter) executes."""
    numbers = _numbers(f)
    env = {n: np.int64(sizes[n]) for n in f.size_params}
    taken: set[Branch] = set()

    def visit(s: Stmt) -> None:
        if isinstance(s, Block):
            for t in s.stmts:
                visit(t)
        elif isinstance(s, Alloc):
            visit(s.body)
        elif isinstance(s, If) and id(s) in numbers:
            side = bool(eval_expr(s.cond, env))
            body = s.then if side else s.otherwise
            if body is not None:
                taken.add((numbers[id(s)], side))
                visit(body)

    visit(f.body)
    return frozenset(taken)


def every_branch(f: Function) -> frozenset[Branch]:
    """Every branch of `f` (restricting to it changes nothing)."""
    found: set[Branch] = set()
    for k, p in enumerate(choice_points(f)):
        found.add((k, True))
        if p.otherwise is not None:
            found.add((k, False))
    return frozenset(found)


def restrict(f: Function, kept: frozenset[Branch]) -> Function:
    """`f` with every branch not in `kept` emptied (see the module doc)."""
    numbers = _numbers(f)

    def keep(s: Stmt) -> Stmt:
        if isinstance(s, Block):
            stmts = tuple(keep(t) for t in s.stmts)
            changed = any(a is not b for a, b in zip(stmts, s.stmts, strict=True))
            return Block(stmts) if changed else s
        if isinstance(s, Alloc):
            body = keep(s.body)
            return s if body is s.body else Alloc(s.buffer, body)
        if isinstance(s, If) and id(s) in numbers:
            k = numbers[id(s)]
            then = keep(s.then) if (k, True) in kept else Block(())
            otherwise = s.otherwise
            if otherwise is not None:
                otherwise = keep(otherwise) if (k, False) in kept else None
            if then is s.then and otherwise is s.otherwise:
                return s
            return If(s.cond, then, otherwise)
        return s

    body = keep(f.body)
    if body is f.body:
        return f
    return dataclasses.replace(f, body=body)


def describe(kept: frozenset[Branch]) -> str:
    """`kept` as short stable text (`0t.1f`): part of a compile cache key."""
    return ".".join(f"{k}{'t' if side else 'f'}" for k, side in sorted(kept)) or "-"


def nodes(f: Node) -> int:
    """How many nodes `f` holds (what a restriction saves, in tests and notes)."""
    return sum(1 for _ in walk(f))


__all__ = [
    "Branch",
    "branches",
    "choice_points",
    "describe",
    "every_branch",
    "restrict",
]
