"""Versions of the tensors a def writes, and recomputation of the intermediate ones.

A forward def may write one output several times (`O(i) +=! ...` then the in-place
`O(i) = O(i) + B(i)`; `P = exp(P - m)`). Write number k of tensor T produces
*version* k; the last one is the output itself. A read in statement s sees the
version current before s (all reads of a statement see the tensors as they were
before it started, as `compiler.interp` does). Inputs have one version.

The gradient def names version k < last `T_v<k>` (a fresh name from the
compilation's `NameSupply`: `T_v<k>_1` if the def already uses `T_v<k>`) and
recomputes the versions it reads as its own leading statements ("recompute"
strategy: the forward is not changed; the gradient def gets `T_v<k>` as extra
outputs, declared with T's shape):

    O(i) +=! A(i, j)            O_v1(i) +=! A(i, j)          (recomputed)
    O(i) = O(i) * O(i)    ==>   ... O_grad(i) * O_v1(i) ...  (the adjoint reads O_v1)

Output shapes: an output's shape is its declared dims, or the upper ends of its index
ranges: size names, integers or expressions of sizes (`H - KH + 1`). `<T>_grad`
is declared with that shape, so the gradient knows it statically (every read of
`O_grad` in bounds, no per-element check); the call checks it once (`ShapeError`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Mapping

from compiler.autodiff.products import reduced
from compiler.autodiff.rewrite import inline_lets, locate, rename_reads
from compiler.diagnostics import TCError
from compiler.frontend.ast import (
    Access,
    AssignOp,
    Binary,
    BinOp,
    Call,
    Const,
    Exists,
    Expr,
    RangeConstraint,
    ScalarType,
    Stmt,
    Unary,
    UnaryOp,
    Var,
)
from compiler.frontend.checked import RangedDef, Role
from compiler.frontend.scopes import walk
from compiler.names import NameSupply

Dim = Expr


@dataclasses.dataclass(frozen=True)
class Versions:
    """Which statement writes which version of which tensor."""

    ranged: RangedDef
    writes: Mapping[str, tuple[int, ...]]
    shapes: Mapping[str, tuple[Dim, ...]]
    fresh_sizes: tuple[str, ...]
    version_names: Mapping[tuple[str, int], str]
    names: NameSupply  # the compilation's supply, seeded with the forward def's names
    # per statement, the one whose previous state its reads see: itself, or the
    # first piece of the statement a clamp split (`autodiff.clamps.Split`)
    reads_before: tuple[int, ...] = ()

    @property
    def stmts(self) -> tuple[Stmt, ...]:
        """The forward statements, lets inlined (the traversal needs no lets)."""
        return tuple(inline_lets(s) for s in self.ranged.checked.definition.stmts)

    def final(self, tensor: str) -> int:
        return len(self.writes.get(tensor, ()))

    def written(self, index: int) -> int:
        """The version statement `index` produces."""
        target = self.ranged.checked.definition.stmts[index].lhs.name
        return self.writes[target].index(index) + 1

    def read_version(self, tensor: str, index: int) -> int:
        """The version of `tensor` that statement `index` reads (0 for inputs)."""
        start = self.reads_before[index] if self.reads_before else index
        return sum(1 for w in self.writes.get(tensor, ()) if w < start)

    def name(self, tensor: str, version: int) -> str:
        """The gradient def's name for a version: the tensor itself when final (or 0:
        the caller's data, which the gradient never reads)."""
        if tensor not in self.writes or version in (0, self.final(tensor)):
            return tensor
        return self.version_names[(tensor, version)]

    def dtype(self, tensor: str) -> ScalarType:
        return self.ranged.checked.tensor(tensor).dtype

    def dims(self, tensor: str) -> tuple[Dim, ...]:
        """Declared dims of an input, or the shape dims of an output."""
        info = self.ranged.checked.tensor(tensor)
        if info.role is Role.INPUT:
            return tuple(info.dims or ())
        return self.shapes[tensor]

    def versioned_reads(self, stmt: Stmt, index: int) -> Stmt:
        """Statement `index` with every read renamed to the version it sees."""

        def rename(name: str) -> str:
            return self.name(name, self.read_version(name, index))

        self._check_no_unwritten_read(stmt, index)
        rhs = rename_reads(stmt.rhs, rename)
        lhs_args = tuple(rename_reads(a, rename) for a in stmt.lhs.args)
        where = tuple(c for c in stmt.where if not isinstance(c, Exists))
        return dataclasses.replace(
            stmt, lhs=dataclasses.replace(stmt.lhs, args=lhs_args), rhs=rhs, where=where
        )

    def _check_no_unwritten_read(self, stmt: Stmt, index: int) -> None:
        for e in walk(stmt.rhs):
            if isinstance(e, Access) and e.name in self.writes:
                if self.read_version(e.name, index) == 0:
                    raise TCError(
                        f"cannot differentiate: '{e.name}' is read before any statement "
                        "writes it (its value comes from the caller's out= data)",
                        e.span,
                        hint="write the output before reading it",
                    )

    def covers(self, index: int) -> bool:
        """Whether statement `index` replaces every element of the previous version:
        an `op!`, or an `=` over the whole output box with plain index variables."""
        stmt = self.ranged.checked.definition.stmts[index]
        if stmt.op.init:
            return True
        return stmt.op is AssignOp.ASSIGN and self.covers_box(stmt, reducing=False)

    def covers_box(self, stmt: Stmt, reducing: bool = True) -> bool:
        """Whether `stmt`'s left-hand side is plain distinct index variables ranging
        over its output's whole box; `reducing`: other variables (a reduction's) may
        range too."""
        names = [a.name for a in stmt.lhs.args if isinstance(a, Var)]
        if len(names) != len(stmt.lhs.args) or len(set(names)) != len(names):
            return False
        ranges = {}
        for c in stmt.where:
            if isinstance(c, RangeConstraint):
                if isinstance(c.expr, Var) and c.expr.name in names:
                    ranges[c.expr.name] = (c.lo, c.hi)
                elif not reducing:
                    return False
        bounds = self.ranged.bounds_of(stmt.lhs.name)
        return all(ranges.get(n) == (b.lo, b.hi) for n, b in zip(names, bounds, strict=True))

    def accumulates(self, index: int) -> bool:
        """Whether the version statement `index` writes depends on the previous one."""
        return not self.covers(index)

    def rounds_apart(self, tensor: str, version: int) -> bool:
        """Whether the gradient's recomputation of an intermediate version may differ
        in its last bits from the forward's: it, or a version it reads, sums or
        multiplies floating values over a reduction variable, which the gradient's
        schedule may combine in another order (an extremum is exact in any order, an
        elementwise statement computes the same operations)."""
        todo, seen = [(tensor, version)], set()
        while todo:
            t, k = todo.pop()
            if (t, k) in seen or not 0 < k < self.final(t):
                continue
            seen.add((t, k))
            index = self.writes[t][k - 1]
            stmt = self.stmts[index]
            combined = stmt.op.base in (AssignOp.PLUS, AssignOp.TIMES)
            if combined and reduced(stmt) and self.dtype(t).is_float:
                return True
            todo.extend(_deps(self, index, t, k))
        return False


def analyse(ranged: RangedDef, names: NameSupply, reads_before: tuple[int, ...] = ()) -> Versions:
    """Versions of every output of `ranged`, and the shape dims of every output;
    new names come from `names`; `reads_before` as `Versions.reads_before`."""
    writes: dict[str, list[int]] = {}
    for i, stmt in enumerate(ranged.checked.definition.stmts):
        writes.setdefault(stmt.lhs.name, []).append(i)
    shapes: dict[str, tuple[Dim, ...]] = {}
    fresh: list[str] = []
    for info in ranged.checked.outputs:
        declared = info.dims
        his = declared if declared is not None else [b.hi for b in ranged.bounds_of(info.name)]
        dims: list[Dim] = []
        for d, hi in enumerate(his):
            if _is_size_expr(hi):
                dims.append(hi)
                continue
            name = names.fresh(f"{info.name}_D{d}")  # not a declarable dimension:
            fresh.append(name)  # a size of its own, bound from `<T>_grad`
            dims.append(Var(name))
        shapes[info.name] = tuple(dims)
    version_names = {
        (t, k): names.fresh(f"{t}_v{k}") for t, ws in writes.items() for k in range(1, len(ws))
    }
    frozen = {k: tuple(v) for k, v in writes.items()}
    return Versions(ranged, frozen, shapes, tuple(fresh), version_names, names, reads_before)


_SIZE_OPS = (BinOp.ADD, BinOp.SUB, BinOp.MUL, BinOp.DIV, BinOp.MOD)


def _is_size_expr(e: Expr) -> bool:
    """Whether `e` may be declared as a dimension (see `frontend.scopes`)."""
    for node in walk(e):
        if isinstance(node, Const):
            if not isinstance(node.value, int) or not node.dtype.is_integral:
                return False
        elif isinstance(node, Binary):
            if node.op not in _SIZE_OPS:
                return False
        elif isinstance(node, Unary):
            if node.op is not UnaryOp.NEG:
                return False
        elif isinstance(node, Call):
            if node.fn not in ("min", "max"):
                return False
        elif not isinstance(node, Var):
            return False
    return True


def full_box(
    versions: Versions, tensor: str, prefix: str = "i"
) -> tuple[tuple[Var, ...], tuple[RangeConstraint, ...]]:
    """Index variables over a tensor's whole shape, with their ranges `0:dim`."""
    dims = versions.dims(tensor)
    names = versions.names.scope().numbered(prefix, len(dims))
    where = tuple(
        RangeConstraint(Var(n), Const(0, ScalarType.INT32), dim)
        for n, dim in zip(names, dims, strict=True)
    )
    return tuple(Var(n) for n in names), where


def writes_box(stmt: Stmt, dims: tuple[Expr, ...]) -> bool:
    """Whether `stmt` writes every element of a tensor of shape `dims`: distinct plain
    variables on the left, each `in 0:dim`, and no other clause on them."""
    names = plain_vars(stmt.lhs)
    if names is None:
        return False
    ranges = {}
    for c in stmt.where:
        if isinstance(c, RangeConstraint):
            if isinstance(c.expr, Var) and c.expr.name in names and c.expr.name not in ranges:
                ranges[c.expr.name] = (c.lo, c.hi)
            elif any(isinstance(e, Var) and e.name in names for e in walk(c.expr)):
                return False
    zero = Const(0, ScalarType.INT32)
    return all(ranges.get(n) == (zero, d) for n, d in zip(names, dims, strict=True))


def plain_vars(lhs: Access) -> tuple[str, ...] | None:
    """The left-hand side's variables when it is distinct plain variables, else None."""
    names = tuple(a.name for a in lhs.args if isinstance(a, Var))
    return names if len(names) == len(lhs.args) == len(set(names)) else None


def recompute(
    versions: Versions, needed: set[tuple[str, int]]
) -> tuple[list[Stmt], list[tuple[str, int]]]:
    """Statements recomputing every needed intermediate version (and those they
    read), in forward order; and the (tensor, version) pairs they write."""
    closure = _closure(versions, needed)
    order = sorted(closure, key=lambda tv: versions.writes[tv[0]][tv[1] - 1])
    stmts: list[Stmt] = []
    for tensor, k in order:
        index = versions.writes[tensor][k - 1]
        stmts.extend(_recompute_one(versions, tensor, k, index))
    return stmts, order


def _closure(versions: Versions, needed: set[tuple[str, int]]) -> set[tuple[str, int]]:
    todo = [tv for tv in needed if tv[1] < versions.final(tv[0])]
    done: set[tuple[str, int]] = set()
    while todo:
        tensor, k = todo.pop()
        if (tensor, k) in done:
            continue
        done.add((tensor, k))
        index = versions.writes[tensor][k - 1]
        todo.extend(_deps(versions, index, tensor, k))
    return done


def _deps(versions: Versions, index: int, tensor: str, k: int) -> Iterator[tuple[str, int]]:
    stmt = versions.stmts[index]
    for arg in (*stmt.lhs.args, stmt.rhs):
        for e in walk(arg):
            if isinstance(e, Access) and e.name in versions.writes:
                j = versions.read_version(e.name, index)
                if 0 < j < versions.final(e.name):
                    yield e.name, j
    if versions.accumulates(index) and k > 1:
        yield tensor, k - 1


def _copy_previous(versions: Versions, tensor: str, k: int) -> list[Stmt]:
    """`T_vk = T_v(k-1)` over the whole shape, the start of an accumulating version.
    Range inference lets a read over stated ranges touch every element below the hull
    of the earlier writes (those left at the initial value too), so the copy needs no
    piece per earlier write; such pieces would also copy one element several times
    where a write's left-hand side is not one to one (`O(2 * i + k)`)."""
    name, previous = versions.name(tensor, k), versions.name(tensor, k - 1)
    idx, where = full_box(versions, tensor)
    return [Stmt(Access(name, idx), AssignOp.ASSIGN, Access(previous, idx), where)]


def _recompute_one(versions: Versions, tensor: str, k: int, index: int) -> list[Stmt]:
    stmt = versions.versioned_reads(versions.stmts[index], index)
    name = versions.name(tensor, k)
    out: list[Stmt] = []
    op = stmt.op
    if versions.accumulates(index):
        if k > 1:
            out.extend(locate(c, stmt.span) for c in _copy_previous(versions, tensor, k))
        elif op is AssignOp.PLUS:
            op = AssignOp.PLUS_INIT  # version 0 is zeros, the identity of +
    out.append(dataclasses.replace(stmt, lhs=dataclasses.replace(stmt.lhs, name=name), op=op))
    return out
