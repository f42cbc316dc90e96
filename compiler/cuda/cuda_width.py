"""Index width of CUDA kernels: which int64 expressions a 32-bit kernel computes in
`int`, and whether, for a call's sizes, every one of them fits.

    narrow_expr(e, narrow_vars)          # would `e` be an `int` in a 32-bit kernel?
    fits_int32(kernel, program, sizes, grid)   # may this call run the 32-bit version?

Every kernel has two versions (`cuda.cuda.emit_cuda(..., index32=names)`): the
64-bit one, with `long long` sizes, loop variables and index `Let`s, and a 32-bit one
in which those are `int` and int64 literals that fit are plain `int` literals. A
*narrow* expression is one built from such `int` leaves only (sizes, loop variables,
narrow `Let`s, literals) by arithmetic, min/max, division and selection: C computes
it in `int`. An expression that reads memory (`Load`), converts (`Cast`), or refers
to a mutable `Local` is not narrow; it keeps its C type (`long long` for int64
data), and a narrow operand beside it is promoted, so its value is exact.

The host runs the 32-bit version only where `fits_int32` proves, by interval
arithmetic over the sizes' values and the launch's grid, that every narrow
expression of the kernel, every partial sum of its row-major element offsets, every
loop variable (below `hi` in the body; the value that ends a grid-stride loop, up to
`hi - 1 + stride`, is checked too) and the launch's thread count lie in
[-INT32_LIMIT, INT32_LIMIT). Otherwise (a loop bound that reads memory, a product of
sizes past 2^31, a band of more than about 2^30 elements whose grid covers it: its
last `v += stride` passes 2^31) it runs the 64-bit one.
The proof is per call signature (`runtime.cuda` remembers it with the grids).

`INT32_LIMIT` is 2^31; tests lower it (monkeypatch) to select the 64-bit version at
small sizes.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Collection, Mapping

from compiler.cuda.cuda_nodes import AtomicAdd, GpuKernel, GpuProgram, PosDiv, PosMod
from compiler.loops import (
    Assign,
    Bin,
    BinOp,
    Block,
    Buffer,
    Const,
    DType,
    Expr,
    FloorDiv,
    For,
    If,
    Let,
    Load,
    Local,
    LoopKind,
    Max,
    Min,
    Mod,
    Node,
    Select,
    Store,
    Unary,
    UnaryOp,
    VarRef,
    children,
)

INT32_LIMIT = 2**31
NARROW_SUFFIX = "_i32"

Interval = tuple[int, int]  # inclusive bounds


def narrow_expr(e: Expr, narrow_vars: Collection[str]) -> bool:
    """Whether int64 `e` is computed in `int` by a 32-bit kernel in which the
    variables `narrow_vars` are `int` (see the module doc)."""
    if e.dtype is not DType.INT64:
        return False
    if isinstance(e, Const):
        return -(2**31) <= int(e.value) < 2**31
    if isinstance(e, VarRef):
        return e.name in narrow_vars
    if isinstance(e, Bin) and not e.op.is_compare and not e.op.is_logical:
        return narrow_expr(e.a, narrow_vars) and narrow_expr(e.b, narrow_vars)
    if isinstance(e, Unary) and e.op is UnaryOp.NEG:
        return narrow_expr(e.x, narrow_vars)
    if isinstance(e, (Min, Max, FloorDiv, Mod, PosDiv, PosMod)):
        return narrow_expr(e.a, narrow_vars) and narrow_expr(e.b, narrow_vars)
    if isinstance(e, Select):
        return narrow_expr(e.a, narrow_vars) and narrow_expr(e.b, narrow_vars)
    return False


def narrow_program(program: GpuProgram) -> GpuProgram:
    """`program` with every kernel renamed to its 32-bit version's name (emit it with
    `index32` = those names)."""
    kernels = tuple(narrow_kernel(k) for k in program.kernels)
    return dataclasses.replace(program, kernels=kernels)


def narrow_kernel(kernel: GpuKernel) -> GpuKernel:
    """The 32-bit version of `kernel`: the same kernel under its own name."""
    return dataclasses.replace(kernel, name=kernel.name + NARROW_SUFFIX)


def fits_int32(
    kernel: GpuKernel,
    program: GpuProgram,
    sizes: Mapping[str, int],
    grid: tuple[int, int, int],
) -> bool:
    """Whether the 32-bit version of `kernel` computes every index exactly for these
    `sizes` and this launch `grid` (see the module doc)."""
    limit = INT32_LIMIT
    threads = grid[0] * kernel.block
    if threads >= limit or max(grid) >= limit:
        return False
    env: dict[str, Interval] = {n: (sizes[n], sizes[n]) for n in program.size_params}
    try:
        _Bounds(kernel, grid, limit).stmt(kernel.body, env)
    except _Overflow:
        return False
    return True


class _Overflow(Exception):
    """A narrow value may leave the int32 range (or cannot be bounded)."""


class _Bounds:
    """Interval arithmetic over a kernel body; raises `_Overflow` at the first narrow
    expression whose interval leaves [-limit, limit)."""

    def __init__(self, kernel: GpuKernel, grid: tuple[int, int, int], limit: int) -> None:
        self.grid, self.block, self.limit = grid, kernel.block, limit
        self.dims = dict(kernel.dims)

    # ------------------------------------------------------------ statements

    def stmt(self, s: Node, env: dict[str, Interval]) -> None:
        if isinstance(s, Block):
            for child in s.stmts:
                self.stmt(child, env)
        elif isinstance(s, For):
            self._for(s, env)
        elif isinstance(s, Let):
            self.visit(s.value, env)
            inner = dict(env)
            inner.pop(s.var, None)
            if narrow_expr(s.value, env):
                inner[s.var] = self.interval(s.value, env)
            self.stmt(s.body, inner)
        elif isinstance(s, Local):
            self.visit(s.init, env)
            inner = dict(env)
            inner.pop(s.var, None)  # a Local is `long long`: never narrow
            self.stmt(s.body, inner)
        elif isinstance(s, If):
            self.visit(s.cond, env)
            self.stmt(s.then, env)
            if s.otherwise is not None:
                self.stmt(s.otherwise, env)
        elif isinstance(s, (Store, AtomicAdd)):
            self._element(s.buffer, s.index, env)
            self.visit(s.value, env)
        elif isinstance(s, Assign):
            self.visit(s.value, env)
        else:
            for child in children(s):
                if isinstance(child, Expr):
                    self.visit(child, env)
                else:
                    self.stmt(child, env)

    def _for(self, s: For, env: dict[str, Interval]) -> None:
        """The loop variable's interval: from `lo` up to the value that ends the loop
        (`hi - 1 + stride` at most), the stride being the grid's for GPU loops."""
        self.visit(s.lo, env)
        self.visit(s.hi, env)
        lo, hi = self._bounded(s.lo, env), self._bounded(s.hi, env)
        if s.kind is LoopKind.GPU_THREAD:
            stride = self.grid[0] * self.block * s.step
        elif s.kind is LoopKind.GPU_BLOCK:
            stride = self.grid[1 if self.dims.get(s.var) == "y" else 2] * s.step
        else:
            stride = s.step
        self._check((lo[0], max(lo[1], hi[1]) + stride))  # `v += stride` past the end
        inner = dict(env)
        inner[s.var] = (lo[0], max(lo[0], hi[1] - 1))  # in the body, v < hi
        self.stmt(s.body, inner)

    def _element(self, b: Buffer, index: tuple[Expr, ...], env: dict[str, Interval]) -> None:
        """The partial sums `((i0 * E1 + i1) * E2 + ...)` the emitter writes, where
        they are narrow."""
        for i in index:
            self.visit(i, env)
        for extent in b.shape:
            self.visit(extent, env)
        flat: Interval | None = None
        narrow_so_far = True
        for i, extent in zip(index, b.shape, strict=True):
            narrow_so_far = narrow_so_far and narrow_expr(i, env)
            if not narrow_so_far:
                return
            if flat is None:
                flat = self.interval(i, env)
                continue
            if not narrow_expr(extent, env):
                return
            product = _mul(flat, self.interval(extent, env))
            self._check(product)
            flat = _add(product, self.interval(i, env))
            self._check(flat)

    # ------------------------------------------------------------ expressions

    def visit(self, e: Expr, env: dict[str, Interval]) -> None:
        """Check every narrow subexpression of `e` (the largest first: its operands are
        narrow too)."""
        if narrow_expr(e, env):
            self.interval(e, env)
            return
        if isinstance(e, Load):
            self._element(e.buffer, e.index, env)
            return
        for child in children(e):
            if isinstance(child, Expr):
                self.visit(child, env)

    def _bounded(self, e: Expr, env: dict[str, Interval]) -> Interval:
        if not narrow_expr(e, env):
            raise _Overflow  # a loop bound that reads memory: no interval
        return self.interval(e, env)

    def interval(self, e: Expr, env: Mapping[str, Interval]) -> Interval:
        """The interval of narrow `e`, each subexpression checked against the limit."""
        found = self._interval(e, env)
        self._check(found)
        return found

    def _interval(self, e: Expr, env: Mapping[str, Interval]) -> Interval:
        if isinstance(e, Const):
            return int(e.value), int(e.value)
        if isinstance(e, VarRef):
            return env[e.name]
        if isinstance(e, Unary):
            lo, hi = self.interval(e.x, env)
            return -hi, -lo
        if isinstance(e, Select):
            a, b = self.interval(e.a, env), self.interval(e.b, env)
            return min(a[0], b[0]), max(a[1], b[1])
        a, b = self.interval(e.a, env), self.interval(e.b, env)  # type: ignore[attr-defined]
        rule = _RULES.get(e.op if isinstance(e, Bin) else type(e))  # type: ignore[attr-defined]
        if rule is None:
            raise _Overflow
        return rule(a, b)

    def _check(self, interval: Interval) -> None:
        if interval[0] < -self.limit or interval[1] >= self.limit:
            raise _Overflow


def _add(a: Interval, b: Interval) -> Interval:
    return a[0] + b[0], a[1] + b[1]


def _sub(a: Interval, b: Interval) -> Interval:
    return a[0] - b[1], a[1] - b[0]


def _mul(a: Interval, b: Interval) -> Interval:
    corners = (a[0] * b[0], a[0] * b[1], a[1] * b[0], a[1] * b[1])
    return min(corners), max(corners)


def _magnitude(a: Interval) -> int:
    return max(abs(a[0]), abs(a[1]))


def _quotient(a: Interval, b: Interval) -> Interval:
    """Truncating or floor division (by zero: 0). By a positive divisor, the corners
    (the quotient is monotone in each operand there); else |q| <= |a| + 1."""
    if b[0] >= 1:
        corners = [x // y for x in a for y in b] + [-(-x // y) for x in a for y in b]
        return min(corners), max(corners)
    m = _magnitude(a) + 1
    return -m, m


def _remainder(a: Interval, b: Interval) -> Interval:
    """`%` or floor mod (by zero: 0): in [0, min(a, b - 1)] for a >= 0 and b >= 1,
    else |r| <= max(|a|, |b|)."""
    if a[0] >= 0 and b[0] >= 1:
        return 0, min(a[1], b[1] - 1)
    m = max(_magnitude(a), _magnitude(b))
    return -m, m


_RULES: dict[object, Callable[[Interval, Interval], Interval]] = {
    BinOp.ADD: _add,
    BinOp.SUB: _sub,
    BinOp.MUL: _mul,
    BinOp.DIV: _quotient,
    BinOp.MOD: _remainder,
    FloorDiv: _quotient,
    PosDiv: _quotient,
    Mod: _remainder,
    PosMod: _remainder,
    Min: lambda a, b: (min(a[0], b[0]), min(a[1], b[1])),
    Max: lambda a, b: (max(a[0], b[0]), max(a[1], b[1])),
}

__all__ = [
    "INT32_LIMIT",
    "NARROW_SUFFIX",
    "fits_int32",
    "narrow_expr",
    "narrow_kernel",
    "narrow_program",
]
