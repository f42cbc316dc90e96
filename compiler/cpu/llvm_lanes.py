"""Register tiles emitted as vectors: the lanes of a tile's accumulators become one
LLVM vector each, instead of scalars for the SLP vectoriser to regroup.

Requires: a `cpu.llvm_emit.FunctionEmitter` at a chain of nested float `Local`s
(a register tile, `cpu.regtile`: `Local acc_0 = i_0 { Local acc_1 = i_1 { ... body } }`).
Ensures: the emitted code computes what the scalar emission computes, lane by lane,
with the same operations and fast-math flags, so the results are the same bits.

A *group* is `w` consecutive Locals of the chain (`w` a power of two from 4 up to one
512-bit register of the dtype) whose inits are *lane-isomorphic*: the same expression
but for reads `X[.., e + l]` whose last subscript moves by one per lane `l`, which
become one vector load (identical subexpressions are computed once and broadcast).
The group is taken only when every `Assign` to its Locals in the body is part of a
*run*: `w` consecutive Assigns of one Block, lane by lane, with lane-isomorphic values
(`acc_l = acc_l + A[m, k] * B[k, n + l]`: a broadcast of `A[m, k]`, a vector load
of `B`, one vector FMA). The group then lives in one vector slot; a run of Stores
`Y[.., e + l] = acc_l` is one vector store; any other read of a lane is an
`extractelement`. Anything that does not match is emitted as before, so this is an
optimisation of the emitter alone.

Why: the loop IR of a register tile holds one Assign per output element (a packed
matmul tile 8 rows x 32 lanes: 256 per reduction step), and LLVM spent most of a
gradient's compile time building, simplifying and SLP-vectorising them back into the
16 vector FMAs they are.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from llvmlite import ir

from compiler.cpu.llvm_sums import REDUCTION_FLAGS
from compiler.cpu.llvm_types import CONTRACT_FLAGS, DIVIDE_FLAGS, ir_type
from compiler.loops import (
    Alloc,
    Assign,
    Bin,
    BinOp,
    Block,
    Const,
    DType,
    Expr,
    For,
    If,
    Let,
    Load,
    Local,
    Max,
    Min,
    Stmt,
    Store,
    Unary,
    UnaryOp,
    VarRef,
)
from compiler.loops.ir import Node, children, walk

REGISTER_BITS = 512  # the widest group: one 512-bit register
MIN_LANES = 4
_DTYPES = (DType.FLOAT32, DType.FLOAT64)
_VECTOR_OPS = frozenset({BinOp.ADD, BinOp.SUB, BinOp.MUL, BinOp.DIV})


@dataclass(eq=False)
class Group:
    """`w` Locals held in one vector slot (and one slot for Kahan's compensation)."""

    names: tuple[str, ...]
    dtype: DType
    slot: Any = None
    comp: Any = None

    @property
    def width(self) -> int:
        return len(self.names)

    @property
    def type(self) -> ir.VectorType:
        return ir.VectorType(ir_type(self.dtype), self.width)


class Lanes:
    """The groups live in one emitter (`FunctionEmitter.lanes`)."""

    def __init__(self, em: Any) -> None:
        self.em = em
        self.of: dict[str, tuple[Group, int]] = {}  # Local name -> (group, lane)

    # ---- planning -------------------------------------------------------------------

    def plan(self, chain: list[Local], body: Stmt) -> dict[str, Group]:
        """Groups of `chain` (Locals outermost first, `body` inside the last) whose inits
        and every Assign in `body` vectorise; keyed by the group's first Local."""
        groups: dict[str, Group] = {}
        names = {c.var for c in chain} | set(self.of)
        i = 0
        while i < len(chain):
            taken = None
            dtype = chain[i].dtype
            if dtype in _DTYPES:
                w = REGISTER_BITS // dtype.bits
                while w >= MIN_LANES and taken is None:
                    part = chain[i : i + w]
                    if len(part) == w and all(c.dtype is dtype for c in part):
                        g = Group(tuple(c.var for c in part), dtype)
                        inits = [c.init for c in part]
                        if not any(_mentions(e, names) for e in inits) and _isomorphic(inits, {}):
                            taken = g
                    w //= 2
            if taken is None:
                i += 1
                continue
            groups[taken.names[0]] = taken
            i += taken.width
        if not groups:
            return {}
        lanes = {n: (g, k) for g in groups.values() for k, n in enumerate(g.names)}
        bad: set[int] = set()
        _check_runs(body, lanes, bad)
        return {k: g for k, g in groups.items() if id(g) not in bad}

    # ---- emission -------------------------------------------------------------------

    def declare(self, g: Group, inits: list[Expr]) -> None:
        """The vector slots of `g`, its lanes set to `inits`."""
        em, b = self.em, self.em.builder
        ty = g.type
        with b.goto_block(em.entry):
            b.position_at_start(em.entry)
            g.slot = b.alloca(ty, name=f"{g.names[0]}.lanes")
            g.comp = b.alloca(ty, name=f"{g.names[0]}.lanes.comp")
        b.store(self.vector(inits), g.slot)
        b.store(ir.Constant(ty, None), g.comp)
        for k, n in enumerate(g.names):
            self.of[n] = (g, k)

    def release(self, g: Group) -> None:
        for n in g.names:
            del self.of[n]

    def read(self, name: str) -> ir.Value:
        """One lane of a group (a scalar read outside the runs)."""
        g, k = self.of[name]
        b = self.em.builder
        vec = b.load(g.slot, typ=g.type)
        return b.extract_element(vec, ir.Constant(ir.IntType(32), k))

    def write(self, name: str, value: ir.Value) -> None:
        g, k = self.of[name]
        b = self.em.builder
        vec = b.insert_element(b.load(g.slot, typ=g.type), value, ir.Constant(ir.IntType(32), k))
        b.store(vec, g.slot)

    def run(self, stmts: tuple[Stmt, ...], at: int) -> int:
        """Emit the run of Assigns or Stores starting at `stmts[at]` as one vector
        statement; the number of statements it covers (0: not a run)."""
        s = stmts[at]
        if isinstance(s, Assign) and s.var in self.of:
            g, lane = self.of[s.var]
            part = stmts[at : at + g.width]
            if lane != 0 or not _assign_run(part, g):
                return 0
            self._assign(g, part)  # type: ignore[arg-type]
            return g.width
        if isinstance(s, Store) and self.of:
            # a vector store's lanes are a whole group's (`_isomorphic`)
            for w in sorted({g.width for g, _ in self.of.values()}, reverse=True):
                part = stmts[at : at + w]
                if len(part) == w and self._store(part):  # type: ignore[arg-type]
                    return w
        return 0

    def sum_update(self, g: Group, part: tuple[Assign, ...], partial: ir.Value) -> None:
        """`partial += terms` of a run of sum updates (`cpu.llvm_sums`)."""
        b = self.em.builder
        terms = [_other(a) for a in part]
        value = b.fadd(b.load(partial, typ=g.type), self.sum_terms(terms), flags=REDUCTION_FLAGS)
        b.store(value, partial)

    def _assign(self, g: Group, part: tuple[Assign, ...]) -> None:
        b, em = self.em.builder, self.em
        ty = g.type
        shape = _reduction_shape(part)
        if shape is None:
            value = self.vector([a.value for a in part])
        else:
            terms = [_other(a) for a in part]
            summed = shape is BinOp.ADD
            acc = b.load(g.slot, typ=ty)
            if summed:
                x = self.sum_terms(terms)
            elif shape in ("min", "max"):
                with em.math.scalar_math():  # a candidate rounds alike everywhere
                    x = self.vector(terms)
            else:
                x = self.vector(terms)
            if shape is BinOp.ADD:
                value = b.fadd(acc, x, flags=REDUCTION_FLAGS)
            elif shape is BinOp.MUL:
                value = b.fmul(acc, x, flags=REDUCTION_FLAGS)
            else:
                name = "llvm.minimum" if shape == "min" else "llvm.maximum"
                fn = _vector_intrinsic(em.module, name, ty)
                value = b.call(fn, [acc, x], fastmath=REDUCTION_FLAGS)
        b.store(value, g.slot)

    def _store(self, part: tuple[Stmt, ...]) -> bool:
        first = part[0]
        if not all(isinstance(s, Store) for s in part) or first.buffer.dtype not in _DTYPES:
            return False
        loads = [Load(s.buffer, s.index) for s in part]  # type: ignore[union-attr]
        if _contiguous(loads) is None:
            return False
        values = [s.value for s in part]  # type: ignore[union-attr]
        if not _isomorphic(values, self.of) or not any(_mentions(v, set(self.of)) for v in values):
            return False
        # the lanes store in order: a lane may read the stored buffer only at its own
        # element (`C[m, n + l] = C[m, n + l] + acc_l`), never one an earlier lane wrote
        for s, v in zip(part, values, strict=True):
            loads = (x for x in walk(v) if isinstance(x, Load))
            if any(x.buffer.name == first.buffer.name and x.index != s.index for x in loads):
                return False
        em, b = self.em, self.em.builder
        vec = self.vector(values)
        ptr, _ = em._address(first.buffer.name, first.index)
        b.store(vec, ptr, align=first.buffer.dtype.bits // 8)
        return True

    def sum_terms(self, exprs: list[Expr]) -> ir.Value:
        """`vector(exprs)` of the terms a sum adds: the outermost products carry
        `contract` (`FunctionEmitter.sum_term`)."""
        em = self.em
        outer, em.fused = em.fused, exprs[0]
        try:
            return self.vector(exprs)
        finally:
            em.fused = outer

    def vector(self, exprs: list[Expr]) -> ir.Value:
        """The lane-isomorphic `exprs` as one vector (checked by `_isomorphic`)."""
        em, b = self.em, self.em.builder
        w = len(exprs)
        e0 = exprs[0]
        if all(e == e0 for e in exprs):
            return self._splat(em.expr(e0), w)
        if isinstance(e0, VarRef):  # a whole group in lane order (`_isomorphic`)
            return b.load(self.of[e0.name][0].slot, typ=self.of[e0.name][0].type)
        if isinstance(e0, Load):
            ptr, ty = em._address(e0.buffer.name, e0.index)
            return b.load(ptr, typ=ir.VectorType(ty, w), align=e0.buffer.dtype.bits // 8)
        if isinstance(e0, Unary):
            return b.fneg(self.vector([e.x for e in exprs]))  # type: ignore[attr-defined]
        if isinstance(e0, (Min, Max)):
            with em.math.scalar_math():  # candidates round alike everywhere
                x = self.vector([e.a for e in exprs])  # type: ignore[attr-defined]
                y = self.vector([e.b for e in exprs])  # type: ignore[attr-defined]
            name = "llvm.minimum" if isinstance(e0, Min) else "llvm.maximum"
            return b.call(_vector_intrinsic(em.module, name, x.type), [x, y])
        assert isinstance(e0, Bin)
        x = self.vector([e.a for e in exprs])  # type: ignore[attr-defined]
        y = self.vector([e.b for e in exprs])  # type: ignore[attr-defined]
        if e0.op is BinOp.DIV:
            return b.fdiv(x, y, flags=() if em.math.exact else DIVIDE_FLAGS)
        ops: dict[BinOp, Callable[..., ir.Value]] = {
            BinOp.ADD: b.fadd,
            BinOp.SUB: b.fsub,
            BinOp.MUL: b.fmul,
        }
        fused = e0 is self.em.fused and e0.op is BinOp.MUL
        return ops[e0.op](x, y, flags=CONTRACT_FLAGS if fused else ())

    def _splat(self, x: ir.Value, w: int) -> ir.Value:
        b = self.em.builder
        ty = ir.VectorType(x.type, w)
        one = b.insert_element(ir.Constant(ty, ir.Undefined), x, ir.Constant(ir.IntType(32), 0))
        return b.shuffle_vector(
            one,
            ir.Constant(ty, ir.Undefined),
            ir.Constant(ir.VectorType(ir.IntType(32), w), [0] * w),
        )


# ------------------------------------------------------------------ lane-isomorphism


def _isomorphic(exprs: list[Expr], of: dict[str, tuple[Group, int]]) -> bool:
    """Whether `exprs` (lane `l` at `exprs[l]`) vectorise: each node the same float
    operation, reads contiguous along their last subscript or identical, Locals of
    a group in lane order, anything else identical across the lanes."""
    e0 = exprs[0]
    if all(e == e0 for e in exprs):
        return True  # computed once, broadcast
    if e0.dtype not in _DTYPES or any(type(e) is not type(e0) for e in exprs):
        return False
    if isinstance(e0, VarRef):
        if e0.name not in of:
            return False
        g, lane = of[e0.name]
        return (
            lane == 0
            and g.width == len(exprs)
            and all(
                of.get(e.name) == (g, k)
                for k, e in enumerate(exprs)  # type: ignore[attr-defined]
            )
        )
    if isinstance(e0, Load):
        return _contiguous(exprs) is not None  # type: ignore[arg-type]
    if isinstance(e0, Unary):
        return e0.op is UnaryOp.NEG and _isomorphic([e.x for e in exprs], of)  # type: ignore[attr-defined]
    if isinstance(e0, (Min, Max)):
        return _isomorphic([e.a for e in exprs], of) and _isomorphic(  # type: ignore[attr-defined]
            [e.b for e in exprs],
            of,  # type: ignore[attr-defined]
        )
    if isinstance(e0, Bin):
        if e0.op not in _VECTOR_OPS or any(e.op is not e0.op for e in exprs):  # type: ignore[attr-defined]
            return False
        return _isomorphic([e.a for e in exprs], of) and _isomorphic(  # type: ignore[attr-defined]
            [e.b for e in exprs],
            of,  # type: ignore[attr-defined]
        )
    return False


def _contiguous(loads: list[Load]) -> Load | None:
    """The first of `loads` when they read one float buffer at consecutive elements
    of its last dimension (lane `l` at `+ l`), the other subscripts equal."""
    first = loads[0]
    if first.buffer.dtype not in _DTYPES or not first.index:
        return None
    base = _linear(first.index[-1])
    for k, x in enumerate(loads):
        if x.buffer != first.buffer or x.index[:-1] != first.index[:-1]:
            return None
        terms, c = _linear(x.index[-1])
        if terms != base[0] or c - base[1] != k:
            return None
    return first


def _linear(e: Expr) -> tuple[dict[Any, int], int]:
    """`e` as integer terms (a variable or any non-affine subexpression, with its
    coefficient) plus a constant."""
    if isinstance(e, Const) and isinstance(e.value, int) and not isinstance(e.value, bool):
        return {}, e.value
    if isinstance(e, Bin) and e.op in (BinOp.ADD, BinOp.SUB):
        (ta, ca), (tb, cb) = _linear(e.a), _linear(e.b)
        sign = 1 if e.op is BinOp.ADD else -1
        out = dict(ta)
        for t, c in tb.items():
            out[t] = out.get(t, 0) + sign * c
        return {t: c for t, c in out.items() if c}, ca + sign * cb
    if isinstance(e, Bin) and e.op is BinOp.MUL:
        for s, o in ((e.a, e.b), (e.b, e.a)):
            if isinstance(s, Const) and isinstance(s.value, int) and not isinstance(s.value, bool):
                t, c = _linear(o)
                return {k: v * s.value for k, v in t.items() if v * s.value}, c * s.value
    key = e.name if isinstance(e, VarRef) else e
    return {key: 1}, 0


# ------------------------------------------------------------------ runs


def _other(a: Assign) -> Expr:
    """`x` of `acc = acc op x` (or `x op acc`)."""
    e, me = a.value, a.var
    first = isinstance(e.a, VarRef) and e.a.name == me  # type: ignore[attr-defined]
    return e.b if first else e.a  # type: ignore[attr-defined]


def _reduction_shape(part: tuple[Assign, ...]) -> BinOp | str | None:
    """ADD / MUL / "min" / "max" when every Assign of `part` is `acc = acc op x` or
    `x op acc` (what the scalar emitter's `_reduction` handles), else None."""
    shapes = set()
    for a in part:
        e = a.value
        if not isinstance(e, (Bin, Min, Max)):
            return None
        mine = [isinstance(s, VarRef) and s.name == a.var for s in (e.a, e.b)]
        if not any(mine):
            return None
        if isinstance(e, Bin):
            if e.op not in (BinOp.ADD, BinOp.MUL):
                return None
            shapes.add(e.op)
        else:
            shapes.add("min" if isinstance(e, Min) else "max")
    return shapes.pop() if len(shapes) == 1 else None


def _assign_run(part: tuple[Stmt, ...], g: Group) -> bool:
    """`part` is g's Assigns in lane order with lane-isomorphic values."""
    if len(part) != g.width:
        return False
    if not all(isinstance(a, Assign) and a.var == n for a, n in zip(part, g.names, strict=True)):
        return False
    lanes = {n: (g, k) for k, n in enumerate(g.names)}
    shape = _reduction_shape(part)  # type: ignore[arg-type]
    if shape is not None:
        terms = [_other(a) for a in part]  # type: ignore[arg-type]
        return not any(_mentions(t, set(g.names)) for t in terms) and _isomorphic(terms, {})
    return _isomorphic([a.value for a in part], lanes)  # type: ignore[union-attr]


def _check_runs(s: Stmt, lanes: dict[str, tuple[Group, int]], bad: set[int]) -> None:
    """Mark (in `bad`) every group with an Assign outside a run of `s`."""
    if isinstance(s, Block):
        i, stmts = 0, s.stmts
        while i < len(stmts):
            x = stmts[i]
            if isinstance(x, Assign) and x.var in lanes:
                g, lane = lanes[x.var]
                part = stmts[i : i + g.width]
                if lane == 0 and _assign_run(part, g):
                    i += g.width
                    continue
                bad.add(id(g))
            elif not isinstance(x, Assign):
                _check_runs(x, lanes, bad)
            i += 1
        return
    if isinstance(s, Assign):
        if s.var in lanes:
            bad.add(id(lanes[s.var][0]))
        return
    if isinstance(s, (For, Let, Local)):
        _check_runs(s.body, lanes, bad)
    elif isinstance(s, If):
        _check_runs(s.then, lanes, bad)
        if s.otherwise is not None:
            _check_runs(s.otherwise, lanes, bad)
    elif isinstance(s, Alloc):
        _check_runs(s.body, lanes, bad)


def _mentions(e: Expr, names: set[str]) -> bool:
    """Whether `e` reads a variable of `names` (Locals: the sizes in buffers' shapes are
    not looked at, and the walk stops at the first one found; it ran for every term of
    every run, a fifth of the LLVM module build of a gradient)."""
    stack: list[Node] = [e]
    while stack:
        n = stack.pop()
        if isinstance(n, VarRef):
            if n.name in names:
                return True
        elif isinstance(n, Load):
            stack.extend(n.index)
        else:
            stack.extend(children(n))
    return False


def _vector_intrinsic(module: ir.Module, name: str, ty: ir.VectorType) -> ir.Function:
    """`name.v<w>f<bits>` of two vector operands (llvmlite names only scalar overloads)."""
    bits = 32 if isinstance(ty.element, ir.FloatType) else 64
    full = f"{name}.v{ty.count}f{bits}"
    fn = module.globals.get(full)
    return fn if fn is not None else ir.Function(module, ir.FunctionType(ty, [ty, ty]), full)


def emit_chain(em: Any, chain: list[Local], body: Stmt, groups: dict[str, Group]) -> None:
    """The Locals of `chain` (groups in vector slots, the rest as scalars), then `body`."""
    i = 0
    declared: list[Group] = []
    scalars: list[Local] = []
    while i < len(chain):
        g = groups.get(chain[i].var)
        if g is None:
            em.declare_local(chain[i])
            scalars.append(chain[i])
            i += 1
            continue
        em.lanes.declare(g, [c.init for c in chain[i : i + g.width]])
        for n in g.names:
            em.slots[n] = (g.slot, g.dtype)
            em.compensation[n] = g.comp
        declared.append(g)
        i += g.width
    em.stmt(body)
    for g in declared:
        em.lanes.release(g)
        for n in g.names:
            del em.slots[n]
            del em.compensation[n]
    for c in scalars:
        del em.slots[c.var]
        em.compensation.pop(c.var, None)


def chain_of(s: Local) -> tuple[list[Local], Stmt]:
    """The Locals nested directly in `s` (outermost first) and the body inside them."""
    chain = [s]
    while isinstance(chain[-1].body, Local):
        chain.append(chain[-1].body)  # type: ignore[arg-type]
    return chain, chain[-1].body


__all__ = ["Group", "Lanes", "chain_of", "emit_chain"]
