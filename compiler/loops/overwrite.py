"""Outputs a Function overwrites before anything reads them: their starting contents
are dead, so the runtime may allocate them uninitialised.

Requires: a verified Function.
Ensures:  `Overwrites(f).outputs(sizes)`: the names of the output buffers that, for
these size values, the first top-level statement of `f` touching them (in program
order, looking through Blocks and the Allocs of temporaries) writes in full before
anything reads them. That statement must be a nest of unit-step loops from 0 whose one
access to `T` is a Store of `T[v0, ..., vk]`, the loop variables in nesting order, with
a value that does not read `T`; each loop's extent is its dimension of `T`. Beside
the path to the Store there may be statements that do not touch `T` (a Block's others,
a Local's or Let's value): a layernorm's nest `for n { mean; var; for d: Y[n, d] = .. }`
overwrites `Y`. No If may lie on the path. Other accesses to `T` in that statement
may follow the Store in program order if each touches an element it wrote: the same
index, after it in a Block around both (so within the same iteration of the loops
around that Block), each variable bound by the same loop as the Store's or, for a
loop of the Store's below that Block, by one of the same unit-step bounds over sizes
(softmax after `loops.keep_terms`: `Y[n, d] = exp(..); acc = acc + Y[n, d]`, then
`for d: Y[n, d] = Y[n, d] / s[n]`).
A last loop may span several trailing dimensions, its extent their product, its
variable the last subscript and zeros those before it (`loops.collapse`: `O[n, m, 0,
h_w]` for `h_w < (H - KH + 1) * (W - KW + 1)`).
The nest then writes every element exactly once and reads none of `T`, and no earlier
statement touches `T`.

Example: matmul's `parallel for m < M: for n < N: C[m, n] = 0.0f` (the init nest of
`C(m, n) +=! ...`) comes first, so `C` needs no zeroed allocation; an output whose
first write accumulates (`+=`) or reads itself (`O(i) = O(i) + 1`) keeps its zeros.

Why: a kernel call allocated every output zeroed (`np.zeros`), and an `op!` statement
then set it to the identity again -- a second pass over the output's memory
(measured, 2 threads, same process, medians of blocks: matmul 512^3 1.73 -> 1.60 ms
and 1.93 -> 1.85 ms; conv2d N8 C16 32^2 M16 3x3 0.48 -> 0.47 and 0.51 -> 0.48 ms).
A large zeroed output is fresh pages from the system, faulted in by the threads that
first write them: layernorm 256x1024 took 157 us on 2 threads with `Y` zeroed, 83 us
with `np.empty` (122 us on one thread).

The structure is found once per Function (a walk of its top-level statements until
every output has been touched: 4 ms for the conv2d gradient's 30,000 nodes); the
extents are checked per call signature (`outputs(sizes)`), with the sizes' values.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass

from compiler.diagnostics import InternalError
from compiler.loops.arguments import eval_size_expr
from compiler.loops.ir import (
    Alloc,
    Assign,
    Block,
    Buffer,
    Const,
    Expr,
    For,
    Function,
    If,
    Let,
    Load,
    Local,
    Node,
    Role,
    Stmt,
    Store,
    VarRef,
    child_fields,
    stmt_children,
    var_names,
)


@dataclass(frozen=True)
class _Nest:
    """A candidate overwrite: the loops (outermost first) and their Store."""

    loops: tuple[For, ...]
    store: Store


class Overwrites:
    """The overwrite nests of one Function (see the module doc)."""

    def __init__(self, f: Function) -> None:
        self.function = f
        self.nests: dict[str, _Nest] = {}
        outputs = {b.name for b in f.buffers if b.role is Role.OUT}
        unseen = set(outputs)
        sizes = frozenset(f.size_params)
        for stmt in _top_level(f.body):
            if not unseen:
                break
            accesses = _accesses(stmt)
            for name in accesses.keys() & unseen:
                nest = _nest(stmt, name, accesses[name], sizes)
                if nest is not None:
                    self.nests[name] = nest
            unseen -= accesses.keys()

    def outputs(self, sizes: Mapping[str, int]) -> frozenset[str]:
        """The outputs whose first statement writes all of them for `sizes`."""
        shapes = {b.name: b.shape for b in self.function.buffers}
        return frozenset(
            name for name, nest in self.nests.items() if _covers(nest, shapes[name], sizes)
        )


def _top_level(stmt: Stmt) -> list[Stmt]:
    """`stmt`'s statements in program order, through Blocks and Allocs."""
    if isinstance(stmt, Block):
        return [s for child in stmt.stmts for s in _top_level(child)]
    if isinstance(stmt, Alloc):
        return _top_level(stmt.body)
    return [stmt]


def _accesses(node: Node) -> dict[str, list[Load | Store]]:
    """The Loads and Stores below `node`, by buffer name (not `walk`: it also descends
    into every access's Buffer and its shape, 15 ms against 4 for the conv2d gradient)."""
    found: dict[str, list[Load | Store]] = {}
    stack: list[object] = [node]
    while stack:
        n = stack.pop()
        if isinstance(n, (Load, Store)):
            found.setdefault(n.buffer.name, []).append(n)
        for field in child_fields(n):  # type: ignore[arg-type]
            value = getattr(n, field)
            if type(value) is tuple:
                stack.extend(value)
            elif isinstance(value, Node) and not isinstance(value, Buffer):
                stack.append(value)
    return found


def _nest(
    stmt: Stmt, name: str, accesses: list[Load | Store], sizes: frozenset[str]
) -> _Nest | None:
    """The loops and the Store by which `stmt` writes `name` in the module doc's
    pattern (extents unchecked), or None. `accesses`: `stmt`'s Loads and Stores of
    `name`, which must be that one Store: the statements beside its path (a Block's
    others, a Local's or Let's value, a loop's bounds) then touch no `name`, as in a
    layernorm's row nest (its sums, then its row's store). Or else, the first access
    in program order is such a Store and every other comes after it and reads or
    writes an element it wrote (`_first_covering`). `sizes`: the size parameters."""
    if len(accesses) == 1 and isinstance(accesses[0], Store):
        store = accesses[0]
        path = _path(stmt, store)
    else:
        found = _first_covering(stmt, name, sizes)
        if found is None:
            return None
        store, path = found
    if path is None:
        return None
    loops: list[For] = []
    for s in path:
        if isinstance(s, For) and s.step == 1:
            loops.append(s)
        elif not isinstance(s, (Block, Let, Local, Alloc)):
            return None  # an If, a loop of another step: not every element surely
    if not loops:
        return None
    index, variables = store.index, [loop.var for loop in loops]
    if len(index) < len(loops) or len(set(variables)) != len(variables):
        return None
    binders = _binders(tuple(path))
    if any(binders[loop.var] is not loop for loop in loops):
        return None  # a Let or Local below a loop binds its name again
    # the last loop's variable is the last subscript; zeros stand for the dimensions
    # it was collapsed over (`loops.collapse`), the other variables lead in order
    wanted = [*variables[:-1], *[None] * (len(index) - len(loops)), variables[-1]]
    for e, v in zip(index, wanted, strict=True):
        if v is None and not (isinstance(e, Const) and e.value == 0):
            return None
        if v is not None and not (isinstance(e, VarRef) and e.name == v):
            return None
    return _Nest(tuple(loops), store)


# An access in program order: whether it writes, the statement it is in or evaluated
# by (a Load in a loop's bounds: that For), the statements around that one
# (outermost first), and its index.
_Event = tuple[bool, Stmt, tuple[Stmt, ...], tuple[Expr, ...]]


def _first_covering(
    stmt: Stmt, name: str, sizes: frozenset[str]
) -> tuple[Store, list[Stmt]] | None:
    """The Store that first touches `name` in `stmt` and its path, if every later
    access touches an element that Store wrote before (else None): one of the same
    index, after it in a Block around both (within the same iteration of the loops
    around that Block), its variables bound either by the Store's own loops or by
    loops of the same unit-step bounds over sizes (softmax's `Y[n, d] = exp(..);
    acc = acc + Y[n, d]`, then `for d: Y[n, d] = Y[n, d] / s[n]`)."""
    if isinstance(stmt, If):
        return None  # the Store's path would hold it
    events = _events(stmt, name, ())  # lazily: the first access that fails ends it
    first = next(events, None)
    if first is None or not first[0]:
        return None
    _, store, path, index = first
    assert isinstance(store, Store)
    binders = _binders(path)
    for _, at, around, used in events:
        if used != index or at is store:
            return None
        shared = 0
        while shared < min(len(path), len(around)) and path[shared] is around[shared]:
            shared += 1
        split = path[shared - 1] if shared else None
        if not isinstance(split, Block):
            return None
        mine = path[shared] if shared < len(path) else store
        theirs = around[shared] if shared < len(around) else at
        if _position(split, theirs) <= _position(split, mine):
            return None  # before the Store, in this iteration of the loops around
        outer = {id(s) for s in path[:shared]}
        there = _binders(around)
        for e in used:
            if not isinstance(e, VarRef):
                continue
            loop, other = binders.get(e.name), there.get(e.name)
            if loop is other:
                continue
            # a variable of the loops around both: the same loop, or another row's
            # elements are read; one of the Store's loops below: the same bounds
            if id(loop) in outer or not (
                isinstance(loop, For)
                and isinstance(other, For)
                and other.step == 1
                and (other.lo, other.hi) == (loop.lo, loop.hi)
                and var_names(other.lo, other.hi) <= sizes
            ):
                return None
    return store, list(path)


def _events(stmt: Stmt, name: str, around: tuple[Stmt, ...]) -> Iterator[_Event]:
    """`stmt`'s accesses to `name` in program order."""
    own: list[Node] = []  # the expressions `stmt` evaluates before its statements
    if isinstance(stmt, For):
        own = [stmt.lo, stmt.hi]
    elif isinstance(stmt, If):
        own = [stmt.cond]
    elif isinstance(stmt, Let):
        own = [stmt.value]
    elif isinstance(stmt, Local):
        own = [stmt.init]
    elif isinstance(stmt, Store):
        own = [*stmt.index, stmt.value]
    elif isinstance(stmt, Assign):
        own = [stmt.value]
    for e in own:
        for load in _accesses(e).get(name, ()):
            yield False, stmt, around, load.index
    if isinstance(stmt, Store) and stmt.buffer.name == name:
        yield True, stmt, around, stmt.index
    inner = (*around, stmt)
    for child in stmt_children(stmt):
        yield from _events(child, name, inner)  # type: ignore[arg-type]


def _position(block: Block, child: Stmt) -> int:
    """Where `child` (the object itself: equal statements may recur) is in `block`."""
    return next(k for k, s in enumerate(block.stmts) if s is child)


def _binders(path: tuple[Stmt, ...]) -> dict[str, Stmt]:
    """The innermost statement binding each name along `path` (loops, lets, locals)."""
    return {s.var: s for s in path if isinstance(s, (For, Let, Local))}


def _path(stmt: Stmt, target: Store) -> list[Stmt] | None:
    """The statements from `stmt` down to `target`, outermost first (`target` not
    included), walking statements only; None if `target` is not below `stmt`."""
    stack: list[tuple[Stmt, int]] = [(stmt, 0)]  # (statement, its depth)
    path: list[Stmt] = []
    while stack:
        s, depth = stack.pop()
        del path[depth:]
        if s is target:
            return path
        path.append(s)
        stack.extend((c, depth + 1) for c in reversed(stmt_children(s)))  # type: ignore[misc]
    return None


def _covers(nest: _Nest, shape: tuple[Expr, ...], sizes: Mapping[str, int]) -> bool:
    """Whether `nest`'s loops, for `sizes`, run over every element of `shape`."""
    try:
        dims = [eval_size_expr(d, sizes) for d in shape]
        bounds = [(eval_size_expr(f.lo, sizes), eval_size_expr(f.hi, sizes)) for f in nest.loops]
    except (KeyError, InternalError):  # a bound reads a loop variable, or is no size
        return False
    if any(d <= 0 for d in dims):
        return True  # no element
    last = len(bounds) - 1
    spanned = 1
    for d in dims[last:]:
        spanned *= d
    wanted = [*dims[:last], spanned]
    return all(lo == 0 and hi == want for (lo, hi), want in zip(bounds, wanted, strict=True))


__all__ = ["Overwrites"]
