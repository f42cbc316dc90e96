"""Minimising a failing program on the generator's representation.

    small = reduce(p, still_fails)        # still_fails(Program) -> bool

Greedy, to a fixed point: drop a statement (with the outputs only it wrote), drop an
output nobody reads, replace a subexpression by one of its children or a constant,
drop a `where` clause range inference certainly recovers, shrink a size. A candidate
the oracle cannot model (`Invalid`) is skipped; one is kept only while `still_fails`
(the same failure signature) holds.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Iterator

from tools.fuzz_ir import (
    Bin,
    Call,
    Cast,
    Cond,
    Invalid,
    Num,
    Program,
    Read,
    Size,
    Stmt,
    Un,
    Var,
    output_shapes,
)

SMALLER = (1, 2, 3, 5, 7, 13, 17, 33)


def _children(n: object) -> list:
    if isinstance(n, Bin):
        return [n.a, n.b]
    if isinstance(n, (Un, Cast)):
        return [n.a]
    if isinstance(n, Cond):
        return [n.c, n.a, n.b]
    if isinstance(n, Call):
        return list(n.args)
    return []


def _rebuild(n: object, kids: list) -> object:
    if isinstance(n, Bin):
        return dataclasses.replace(n, a=kids[0], b=kids[1])
    if isinstance(n, (Un, Cast)):
        return dataclasses.replace(n, a=kids[0])
    if isinstance(n, Cond):
        return Cond(*kids)
    if isinstance(n, Call):
        return Call(n.fn, tuple(kids))
    return n


def _simpler(n: object) -> Iterator[object]:
    """Every expression with one subexpression of `n` replaced by something smaller."""
    kids = _children(n)
    for k in kids:
        if not isinstance(k, Bin) or k.op not in ("<", "<=", ">", ">=", "==", "!=", "&&", "||"):
            yield k
    if not isinstance(n, Num) and not isinstance(n, Read):
        yield Num(1.0)
    for i, k in enumerate(kids):
        for s in _simpler(k):
            yield _rebuild(n, [*kids[:i], s, *kids[i + 1 :]])


def _inline_let(s: Stmt, j: int) -> Stmt:
    """`s` without its let `j`, its value substituted where the statement uses it (a
    let dropped while the right-hand side still names it is no program)."""
    name, value = s.lets[j]

    def sub(n: object) -> object:
        if isinstance(n, Var) and n.name == name:
            return value
        return _rebuild(n, [sub(k) for k in _children(n)])

    lets = tuple((m, sub(e)) for m, e in s.lets[:j] + s.lets[j + 1 :])
    return dataclasses.replace(s, rhs=sub(s.rhs), lets=lets)


def _reads_tensor(n: object, name: str) -> bool:
    if isinstance(n, Read):
        return n.tensor == name or any(_reads_tensor(s, name) for s in n.subs)
    return any(_reads_tensor(k, name) for k in _children(n))


def _used_vars(s: Stmt) -> set:
    out: set = set()

    def walk(n: object) -> None:
        if isinstance(n, (Var, Size)):
            out.add(n.name)
        for k in _children(n):
            walk(k)
        if isinstance(n, Read):
            for x in n.subs:
                walk(x)

    for x in (s.rhs, *s.subs, *(e for _, e in s.lets), *(b for r in s.ranges for b in r[1:3])):
        walk(x)
    return out


def _prune(p: Program) -> Program:
    """Drop index variables, inputs and sizes nothing uses any more (Invalid when a
    size some range uses is bound by no input left)."""
    stmts = []
    for s in p.stmts:
        used = _used_vars(dataclasses.replace(s, ranges=()))
        for _, lo, hi, _ in s.ranges:
            used |= _used_vars(Stmt("", (lo, hi), "=", Num(0), ()))
        stmts.append(dataclasses.replace(s, ranges=tuple(r for r in s.ranges if r[0] in used)))
    exprs = [x for s in stmts for x in (s.rhs, *(e for _, e in s.lets))]
    inputs = tuple(t for t in p.inputs if any(_reads_tensor(x, t.name) for x in exprs))
    bound = {d.name for t in inputs for d in t.dims if isinstance(d, Size)}
    needed = set()
    for s in stmts:
        needed |= {n for n, _ in p.sizes if n in _used_vars(s)}
    for _, b in p.bounds:
        needed |= {n for n, _ in p.sizes if n in _used_vars(Stmt("", (b,), "=", Num(0), ()))}
    if needed - bound:
        raise Invalid(f"sizes {sorted(needed - bound)} are bound by no input")
    sizes = tuple((n, v) for n, v in p.sizes if n in bound)
    bounds = tuple((n, b) for n, b in p.bounds if any(t.name == n for t in inputs))
    return dataclasses.replace(p, stmts=tuple(stmts), inputs=inputs, sizes=sizes, bounds=bounds)


def candidates(p: Program) -> Iterator[Program]:
    for k in range(len(p.stmts)):
        stmts = p.stmts[:k] + p.stmts[k + 1 :]
        outs = tuple(o for o in p.outputs if any(s.lhs == o for s in stmts))
        if stmts and outs:
            yield dataclasses.replace(p, stmts=stmts, outputs=outs)
    for o in p.outputs:
        rest = [s for s in p.stmts if s.lhs != o]
        if rest and not any(_reads_tensor(s.rhs, o) for s in rest):
            outs = tuple(x for x in p.outputs if x != o)
            yield dataclasses.replace(p, stmts=tuple(rest), outputs=outs)
    for k, s in enumerate(p.stmts):
        for r in _simpler(s.rhs):
            yield dataclasses.replace(p, stmts=(*p.stmts[:k], dataclasses.replace(s, rhs=r),
                                                *p.stmts[k + 1 :]))  # fmt: skip
        for j in range(len(s.lets)):
            yield dataclasses.replace(p, stmts=(*p.stmts[:k], _inline_let(s, j),
                                                *p.stmts[k + 1 :]))  # fmt: skip
    for k, s in enumerate(p.stmts):
        for c in _fewer_wheres(p, s):
            yield dataclasses.replace(p, stmts=(*p.stmts[:k], c, *p.stmts[k + 1 :]))
    for name, v in p.sizes:
        for smaller in (x for x in SMALLER if x < v):
            sizes = tuple((n, smaller if n == name else w) for n, w in p.sizes)
            yield dataclasses.replace(p, sizes=sizes)


def _fewer_wheres(p: Program, s: Stmt) -> Iterator[Stmt]:
    """`s` without one stated range that TC's inference certainly recovers
    (`fuzz_gen._inferable`, the generator's own rule)."""
    from types import SimpleNamespace

    from tools.fuzz_gen import TensorInfo, _inferable

    tensors = {t.name: TensorInfo(t.name, t.dtype, tuple((d, 0) for d in t.dims)) for t in p.inputs}
    for o in p.outputs:
        tensors[o] = TensorInfo(o, p.dtype, (), output=True)
    if s.op in ("+=", "max=", "min=", "*=") or any(
        x.lhs == s.lhs for x in p.stmts[: p.stmts.index(s)]
    ):
        return  # an update: its ranges stay stated (as generated)
    stated = {v: st for v, _, _, st in s.ranges}
    for i, (v, lo, hi, st) in enumerate(s.ranges):
        if st and _inferable(SimpleNamespace(tensors=tensors), s, v, lo, hi, stated):
            ranges = (*s.ranges[:i], (v, lo, hi, False), *s.ranges[i + 1 :])
            yield dataclasses.replace(s, ranges=ranges)


def reduce(p: Program, still_fails: Callable[[Program], bool], budget_s: float = 120.0,
           max_tries: int = 400) -> Program:  # fmt: skip
    """The smallest program found (greedy) on which `still_fails` holds."""
    start, tries = time.monotonic(), 0
    improved = True
    while improved:
        improved = False
        for c in candidates(p):
            if time.monotonic() - start > budget_s or tries >= max_tries:
                return p
            try:
                c = _prune(c)
                output_shapes(c, dict(c.sizes))
            except (Invalid, KeyError):
                continue
            if any(t.name not in {n for n, _ in c.bounds} and t.dtype.startswith("int")
                   for t in c.inputs):  # fmt: skip
                continue
            tries += 1
            if still_fails(c):
                p, improved = c, True
                break
    return p


def size_of(p: Program) -> int:
    from tools.fuzz_ir import show_program

    return len(show_program(p))
