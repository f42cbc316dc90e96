"""Emitting loop-IR expressions as LLVM values: the expression half of
`cpu.llvm_emit.FunctionEmitter`, one method per node type, dispatched by class name (an
unknown node raises InternalError).

Requires: a subclass that provides `builder` (the IRBuilder), `module`, `math` (a
`MathEmitter`), `lanes` (register tiles' accumulators), `values` (names bound to LLVM
values), `slots` (mutable Locals), `_emitted` / `_pure` (the reuse caches) and
`_address(buffer, index)`. Ensures: `expr(e)` is `e`'s value in the current block;
integer expressions of immutable values emitted earlier in the block are reused
(`_index_key`); `sum_term(e)` marks the product a sum adds for contraction (one FMA).
"""

from __future__ import annotations

from typing import Any

from llvmlite import ir

from compiler.cpu.llvm_math import intrinsic
from compiler.cpu.llvm_types import (
    CONTRACT_FLAGS,
    DIVIDE_FLAGS,
    I8,
    cast,
    int_divmod,
    int_floor_divmod,
    ir_type,
)
from compiler.diagnostics import InternalError
from compiler.loops import (
    Bin,
    BinOp,
    Call,
    Cast,
    Const,
    DType,
    Expr,
    FloorDiv,
    Load,
    Max,
    Min,
    Mod,
    Select,
    Unary,
    UnaryOp,
    VarRef,
    Visitor,
)

_CONTRACTABLE = frozenset({BinOp.ADD, BinOp.SUB, BinOp.MUL})
_ICMP = {
    BinOp.EQ: "==",
    BinOp.NE: "!=",
    BinOp.LT: "<",
    BinOp.LE: "<=",
    BinOp.GT: ">",
    BinOp.GE: ">=",
}
_INDEX_NODES = (Bin, Min, Max, FloorDiv, Mod)
_UNSEEN: Any = object()


def _pure_int(e: Expr) -> tuple[str, ...] | None:
    """The names an int64 expression of variables and constants reads (sorted), or None
    when it is not one (a load, a call, a select, another type)."""
    names: set[str] = set()
    stack = [e]
    while stack:
        x = stack.pop()
        if isinstance(x, VarRef):
            if x.dtype is not DType.INT64:
                return None
            names.add(x.name)
        elif isinstance(x, Const):
            if x.dtype is not DType.INT64:
                return None
        elif isinstance(x, _INDEX_NODES):
            if isinstance(x, Bin) and x.op.is_compare:
                return None
            stack.extend((x.a, x.b))
        else:
            return None
    return tuple(sorted(names))


class ExprEmitter:
    """The expression methods of a function emitter (see the module doc)."""

    def sum_term(self, e: Expr) -> ir.Value:
        """The term a sum adds to its accumulator: only its outermost product carries
        `contract` (with the sum's addition: one FMA); every other float operation is
        rounded as written, so a value computed twice (a gradient recomputing a `max=`
        candidate to find the winner) has the same bits (README, numerics)."""
        outer, self.fused = self.fused, e
        try:
            return self.expr(e)
        finally:
            self.fused = outer

    def expr(self, e: Expr) -> ir.Value:
        key = self._index_key(e) if isinstance(e, _INDEX_NODES) else None
        if key is not None:
            hit = self._emitted.get(key)
            if hit is not None:
                return hit
        method = getattr(self, f"_expr_{type(e).__name__}", None)
        if method is None:
            raise InternalError(f"LLVM backend: unknown expression {type(e).__name__}")
        value = method(e)
        if key is not None:
            self._emitted[key] = value
        return value

    def _term_key(self, e: Expr) -> object:
        """What a subscript's value is keyed by for reuse within a block (`_index_key`),
        or None."""
        if isinstance(e, Const):
            return ("c", e.value)
        if isinstance(e, VarRef):
            v = self.values.get(e.name)
            return None if v is None or e.name in self.slots else ("v", id(v))
        return self._index_key(e) if isinstance(e, _INDEX_NODES) else None

    def _index_key(self, e: Expr) -> tuple | None:
        """A key under which an integer expression of immutable values (loop variables,
        sizes, lets) emitted earlier in the current block is reused: a register tile's
        lanes share all but the last term of their addresses (`n * s0 + (c + r) * s1 +
        ..`), emitted once instead of once a lane (half the instructions of a conv
        gradient's tile, and of the time to build and optimise them). The key holds the
        block (whose earlier instructions dominate the rest of it) and the values the
        names are bound to (a let may rebind a name within one block)."""
        names = self._pure.get(e, _UNSEEN)
        if names is _UNSEEN:
            names = self._pure[e] = _pure_int(e)
        if names is None:
            return None
        bound = []
        for n in names:
            v = self.values.get(n)
            if v is None or n in self.slots:
                return None
            bound.append(id(v))
        return (self.builder.block, e, tuple(bound))

    def _expr_Const(self, e: Const) -> ir.Value:
        value: Any = int(e.value) if not e.dtype.is_float else float(e.value)
        return ir.Constant(ir_type(e.dtype), value)

    def _expr_VarRef(self, e: VarRef) -> ir.Value:
        if e.name in self.lanes.of:
            return self.lanes.read(e.name)
        if e.name in self.slots:
            slot, dtype = self.slots[e.name]
            return self.builder.load(slot, typ=ir_type(dtype))
        return self.values[e.name]

    def _expr_Load(self, e: Load) -> ir.Value:
        ptr, ty = self._address(e.buffer.name, e.index)
        value = self.builder.load(ptr, typ=ty)
        if e.buffer.dtype is DType.BOOL:
            value = self.builder.icmp_unsigned("!=", value, ir.Constant(I8, 0))
        return value

    def _expr_Bin(self, e: Bin) -> ir.Value:
        if e.op.is_compare and e.a.dtype.is_float:
            with self.math.scalar_math():
                a, b = self.expr(e.a), self.expr(e.b)
        else:
            a, b = self.expr(e.a), self.expr(e.b)
        dtype, bld = e.a.dtype, self.builder
        if e.op.is_compare:
            if dtype.is_float:
                if e.op is BinOp.NE:
                    return bld.fcmp_unordered("!=", a, b)
                return bld.fcmp_ordered(_ICMP[e.op], a, b)
            cmp = bld.icmp_signed if dtype.is_signed else bld.icmp_unsigned
            return cmp(_ICMP[e.op], a, b)
        if e.op is BinOp.AND:
            return bld.and_(a, b)
        if e.op is BinOp.OR:
            return bld.or_(a, b)
        if dtype.is_float:
            if e.op in _CONTRACTABLE:  # only a sum's product fuses (`sum_term`)
                ops = {BinOp.ADD: bld.fadd, BinOp.SUB: bld.fsub, BinOp.MUL: bld.fmul}
                fused = e is self.fused and e.op is BinOp.MUL
                return ops[e.op](a, b, flags=CONTRACT_FLAGS if fused else ())
            if e.op is BinOp.DIV:  # exactly rounded in a candidate (`scalar_math`)
                return bld.fdiv(a, b, flags=() if self.math.exact else DIVIDE_FLAGS)
            return bld.frem(a, b)
        if e.op in (BinOp.DIV, BinOp.MOD):
            q, r = int_divmod(bld, a, b, dtype)
            return q if e.op is BinOp.DIV else r
        return {BinOp.ADD: bld.add, BinOp.SUB: bld.sub, BinOp.MUL: bld.mul}[e.op](a, b)

    def _expr_FloorDiv(self, e: FloorDiv) -> ir.Value:
        return self._floor(e)[0]

    def _expr_Mod(self, e: Mod) -> ir.Value:
        return self._floor(e)[1]

    def _floor(self, e: FloorDiv | Mod) -> tuple[ir.Value, ir.Value]:
        a, b, bld = self.expr(e.a), self.expr(e.b), self.builder
        if e.dtype.is_float:
            floor = self.math.call("floor", [bld.fdiv(a, b)], e.dtype)
            return floor, bld.fsub(a, bld.fmul(b, floor))
        return int_floor_divmod(bld, a, b, e.dtype)

    def _expr_Min(self, e: Min) -> ir.Value:
        return self._minmax(e, "<", "llvm.minimum")

    def _expr_Max(self, e: Max) -> ir.Value:
        return self._minmax(e, ">", "llvm.maximum")

    def _minmax(self, e: Min | Max, op: str, name: str) -> ir.Value:
        bld = self.builder
        if e.dtype.is_float:
            with self.math.scalar_math():  # a candidate: `scalar_math`
                a, b = self.expr(e.a), self.expr(e.b)
            return bld.call(intrinsic(self.module, name, a.type, 2), [a, b])
        a, b = self.expr(e.a), self.expr(e.b)
        cmp = bld.icmp_signed if e.dtype.is_signed else bld.icmp_unsigned
        return bld.select(cmp(op, a, b), a, b)

    def _expr_Unary(self, e: Unary) -> ir.Value:
        x = self.expr(e.x)
        if e.op is UnaryOp.NOT:
            return self.builder.not_(x)
        if e.dtype.is_float:
            return self.builder.fneg(x)
        return self.builder.neg(x)

    def _expr_Call(self, e: Call) -> ir.Value:
        return self.math.call(e.fn, [self.expr(a) for a in e.args], e.dtype)

    def _expr_Select(self, e: Select) -> ir.Value:
        cond = self.expr(e.cond)
        if not (reads_memory(e.a) or reads_memory(e.b)):
            return self.builder.select(cond, self.expr(e.a), self.expr(e.b))
        bld = self.builder
        with bld.if_else(cond) as (then, otherwise):
            with then:
                a, a_block = self.expr(e.a), bld.block
            with otherwise:
                b, b_block = self.expr(e.b), bld.block
        phi = bld.phi(a.type)
        phi.add_incoming(a, a_block)
        phi.add_incoming(b, b_block)
        return phi

    def _expr_Cast(self, e: Cast) -> ir.Value:
        return cast(self.builder, self.expr(e.x), e.x.dtype, e.dtype)


def reads_memory(e: Expr) -> bool:
    found: list[Load] = []

    class _Loads(Visitor):
        def visit_Load(self, node: Load) -> None:
            found.append(node)

    _Loads().visit(e)
    return bool(found)
