"""Loop fusion on the loop IR: sibling loops with the same bounds become one loop.

Requires: a verified `Function` (every name bound once along any path).
Ensures:  `fuse(f)` computes what `f` computes, element for element and in the same
order of operations per element (each element's value is the same expression, its
reduction terms are added in the same order), and `verify` accepts it.

Two adjacent statements of a block are *loop units* when each is a `For`, possibly
inside register accumulators, with statements after the loop:

    Local a1 = i1 { ... { for v in lo:hi step s { X } ; P1 } }
    Local a2 = i2 { ... { for w in lo:hi step s { Y } ; P2 } }
        ==>
    Local a1 = i1 { Local a2' = i2 { for v in lo:hi step s { X ; Y[w := v, a2 := a2'] } ; P1 ; P2' } }

(`a2'`: a fresh name where `a2` is taken; the loops need the same bounds, step and
kind). The old order was `i1, X*, P1, i2, Y*, P2`; the new one evaluates `i2` before
`X` and `P1`, and `Y` before `P1`, and interleaves `X` and `Y` iteration by iteration.
So fusion is legal when (tensors compared by buffer name; a conflict is two accesses
to one buffer, at least one a store):

- `i2` reads nothing that `X` or `P1` stores, and `Y` has no conflict with `P1`;
- for every buffer both `X` and `Y` access with a conflict, some dimension `p` is
  indexed by exactly the loop variable in *every* access of `X` and `Y` to it: then
  iteration `v` of `Y` touches only the elements iteration `v` of `X` touches, and
  moving it before the later iterations of `X` changes nothing. (The run-time check
  record is indexed by a constant, so two loops that both check never fuse: the first
  failure stays the first.)

No unit holds an `Alloc` (a snapshot's copy). Parallel loops stay parallel: each
iteration of the fused loop touches its own slice of every shared buffer. Fusion runs
greedily left to right and then inside the fused bodies, so the rows of softmax's max,
sum and normalisation run as one parallel loop over rows, and the gradient's
per-element loops over a row fuse with each other (LLVM then computes the `exp` they
share once).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from compiler.loops.ir import (
    Alloc,
    Assign,
    Block,
    Expr,
    For,
    Function,
    If,
    Let,
    Load,
    Local,
    Mutator,
    Node,
    Stmt,
    Store,
    VarRef,
    walk,
    walk_stmts,
)


def fuse(f: Function) -> Function:
    """`f` with adjacent compatible loops fused (see the module doc)."""
    facts = _Facts()
    names = _Names(_bound_names(f))
    body = _Fuser(names, facts).stmt(f.body)
    return f if body is f.body else dataclasses.replace(f, body=body)


@dataclass(frozen=True)
class _Unit:
    """`Local*` wrappers (outermost first), the loop, and the statements after it."""

    locals: tuple[Local, ...]
    loop: For
    post: tuple[Stmt, ...]

    def rebuild(self) -> Stmt:
        inner: Stmt = self.loop if not self.post else Block((self.loop, *self.post))
        for local in reversed(self.locals):
            inner = dataclasses.replace(local, body=inner)
        return inner


def _unit(s: Stmt, facts: _Facts) -> _Unit | None:
    """`s` as a loop unit, or None."""
    if isinstance(s, For):
        return _Unit((), s, ())
    if isinstance(s, Local):
        inner = _unit(s.body, facts)
        if inner is None:
            return None
        return _Unit((s, *inner.locals), inner.loop, inner.post)
    if isinstance(s, Block) and s.stmts and isinstance(s.stmts[0], For):
        if any(facts.has_loop(x) for x in s.stmts[1:]):
            return None
        return _Unit((), s.stmts[0], s.stmts[1:])
    return None


class _Names:
    def __init__(self, taken: set[str]) -> None:
        self.taken = taken

    def fresh(self, base: str) -> str:
        k = 1
        while f"{base}_{k}" in self.taken:
            k += 1
        name = f"{base}_{k}"
        self.taken.add(name)
        return name


class _Fuser:
    def __init__(self, names: _Names, facts: _Facts) -> None:
        self.names = names
        self.facts = facts

    def stmt(self, s: Stmt) -> Stmt:
        if isinstance(s, Block):
            items = self._siblings(list(s.stmts))
            items = [self.stmt(x) for x in items]
            if len(items) == 1:
                return items[0]
            return s if _same(items, s.stmts) else Block(tuple(items))
        if isinstance(s, (For, Local, Let, Alloc)):
            body = self.stmt(s.body)
            return s if body is s.body else dataclasses.replace(s, body=body)
        if isinstance(s, If):
            then = self.stmt(s.then)
            other = None if s.otherwise is None else self.stmt(s.otherwise)
            if then is s.then and other is s.otherwise:
                return s
            return dataclasses.replace(s, then=then, otherwise=other)
        return s

    def _siblings(self, items: list[Stmt]) -> list[Stmt]:
        out: list[Stmt] = []
        for s in items:
            if out:
                fused = self._pair(out[-1], s)
                if fused is not None:
                    out[-1] = fused
                    continue
            out.append(s)
        return out

    def _pair(self, s1: Stmt, s2: Stmt) -> Stmt | None:
        facts = self.facts
        u1, u2 = _unit(s1, facts), _unit(s2, facts)
        if u1 is None or u2 is None:
            return None
        f1, f2 = u1.loop, u2.loop
        if (f1.lo, f1.hi, f1.step, f1.kind) != (f2.lo, f2.hi, f2.step, f2.kind):
            return None
        if facts.has_alloc(s1) or facts.has_alloc(s2):
            return None
        # names: u2's locals fresh, u2's loop variable renamed to u1's
        taken2 = facts.names(s2)
        renames: dict[str, str] = {}
        for local in u2.locals:
            if local.var in facts.names(s1):
                renames[local.var] = self.names.fresh(local.var)
        if f2.var != f1.var:
            if f1.var in taken2:
                return None
            renames[f2.var] = f1.var
        u2 = _rename_unit(u2, renames)
        f2 = u2.loop
        if any(local.var in facts.names(u2.rebuild()) for local in u1.locals):
            return None
        inits2 = [local.init for local in u2.locals]
        post1 = Block(u1.post)
        if _conflict(facts.accesses(inits2), facts.accesses([f1.body, post1])):
            return None
        if _conflict(facts.accesses([f2.body]), facts.accesses([post1])):
            return None
        if not _same_slices(facts.accesses([f1.body]), facts.accesses([f2.body]), f1.var):
            return None
        body = Block((*_flat(f1.body), *_flat(f2.body)))
        loop = dataclasses.replace(f1, body=body)
        return _Unit((*u1.locals, *u2.locals), loop, (*u1.post, *u2.post)).rebuild()


# ------------------------------------------------------------------ accesses


@dataclass(frozen=True)
class _Access:
    buffer: str
    index: tuple[Expr, ...]
    store: bool


class _Facts:
    """What the pair tests ask of a subtree: the names it binds or reads and its buffer
    accesses, found by one walk of it and kept (keyed by identity: the node is kept
    too, so an id is never reused while the table lives). Facts are not built for every
    node below: merging the children's facts at each of a register tile's hundreds of
    nested Locals was quadratic (a conv2d gradient's fusion 50-77 ms). Whether a subtree
    holds a loop or an `Alloc` is a walk of its statements only."""

    def __init__(self) -> None:
        self._memo: dict[int, tuple[Node, _Fact]] = {}

    def names(self, node: Node) -> frozenset[str]:
        return self._of(node).names

    def has_alloc(self, node: Node) -> bool:
        return any(isinstance(n, Alloc) for n in walk_stmts(node))

    def has_loop(self, node: Node) -> bool:
        return any(isinstance(n, For) for n in walk_stmts(node))

    def accesses(self, nodes: list) -> list[_Access]:
        return [a for n in nodes if n is not None for a in self._of(n).accesses]

    def _of(self, node: Node) -> _Fact:
        hit = self._memo.get(id(node))
        if hit is not None:
            return hit[1]
        names: set[str] = set()
        accesses: list[_Access] = []
        for n in walk(node):
            if isinstance(n, VarRef):
                names.add(n.name)
            elif isinstance(n, (For, Let, Local, Assign)):
                names.add(n.var)
            elif isinstance(n, (Load, Store)):
                accesses.append(_Access(n.buffer.name, n.index, isinstance(n, Store)))
        fact = _Fact(frozenset(names), tuple(accesses))
        self._memo[id(node)] = (node, fact)
        return fact


@dataclass(frozen=True)
class _Fact:
    names: frozenset[str]
    accesses: tuple[_Access, ...]


def _conflict(a: list[_Access], b: list[_Access]) -> bool:
    """Some buffer accessed by both, stored by at least one."""
    stored_a = {x.buffer for x in a if x.store}
    stored_b = {x.buffer for x in b if x.store}
    names_a, names_b = {x.buffer for x in a}, {x.buffer for x in b}
    return bool(stored_a & names_b) or bool(stored_b & names_a)


def _same_slices(a: list[_Access], b: list[_Access], var: str) -> bool:
    """Every conflicting buffer has a dimension indexed by exactly `var` everywhere."""
    stored = {x.buffer for x in a + b if x.store}
    shared = stored & {x.buffer for x in a} & {x.buffer for x in b}
    ref = VarRef(var)
    for name in shared:
        uses = [x for x in a + b if x.buffer == name]
        rank = len(uses[0].index)
        if not any(
            all(len(x.index) == rank and x.index[p] == ref for x in uses) for p in range(rank)
        ):
            return False
    return True


# ------------------------------------------------------------------ names


class _Rename(Mutator):
    def __init__(self, renames: dict[str, str]) -> None:
        self.renames = renames

    def mutate_VarRef(self, node: VarRef) -> VarRef:
        new = self.renames.get(node.name)
        return node if new is None else dataclasses.replace(node, name=new)

    def mutate_Assign(self, node: Assign) -> Assign:
        node = self.generic_mutate(node)
        new = self.renames.get(node.var)
        return node if new is None else dataclasses.replace(node, var=new)


def _rename_unit(u: _Unit, renames: dict[str, str]) -> _Unit:
    """Rename u's locals (their uses too) and its loop variable (inside the loop)."""
    if not renames:
        return u
    local_renames = {k: v for k, v in renames.items() if k != u.loop.var}
    ren = _Rename(local_renames)
    locals_ = tuple(
        dataclasses.replace(x, var=local_renames.get(x.var, x.var), init=ren.mutate(x.init))
        for x in u.locals
    )
    body = _Rename(renames).mutate(u.loop.body)
    loop = dataclasses.replace(u.loop, var=renames.get(u.loop.var, u.loop.var), body=body)
    post = tuple(ren.mutate(p) for p in u.post)
    return _Unit(locals_, loop, post)


# ------------------------------------------------------------------ helpers


def _bound_names(f: Function) -> set[str]:
    """The names `f` binds (loops, lets, locals) and its sizes: every name a fresh one
    must avoid (a read names one of them), found without walking the expressions."""
    bound = (s.var for s in walk_stmts(f.body) if isinstance(s, (For, Let, Local)))
    return set(f.size_params) | set(bound)


def _flat(s: Stmt) -> tuple[Stmt, ...]:
    return s.stmts if isinstance(s, Block) else (s,)


def _same(a: list[Stmt], b: tuple[Stmt, ...]) -> bool:
    return len(a) == len(b) and all(x is y for x, y in zip(a, b, strict=True))


__all__ = ["fuse"]
