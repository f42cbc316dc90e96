"""LLVM types of the loop IR's dtypes, C conversions between them, integer division
that never traps, and the fast-math flags of float arithmetic (`cpu.llvm_emit`,
`cpu.llvm_lanes`)."""

from __future__ import annotations

from llvmlite import ir

from compiler.loops import DType

I1, I8 = ir.IntType(1), ir.IntType(8)
# Only the product a sum adds to its accumulator (`FunctionEmitter.sum_term`): with the
# sum's `contract` addition one FMA; every other float add, sub, mul is rounded as written.
CONTRACT_FLAGS = ("contract",)
# A float division may become a multiplication by the divisor's reciprocal (`arcp`):
# LLVM then computes a divisor that the loop does not change (`P * V / l(i)` inside
# `j` and `e`) once, before the loop, and multiplies (at most 1 ulp more than the
# division rounded once; special values as the division: x/0 = x*inf, x/inf = x*0).
DIVIDE_FLAGS = ("arcp",)


def ir_type(dtype: DType) -> ir.Type:
    """The register type of a dtype (booleans are i1)."""
    if dtype is DType.BOOL:
        return I1
    if dtype.is_int:
        return ir.IntType(dtype.bits)
    return {DType.FLOAT16: ir.HalfType(), DType.FLOAT32: ir.FloatType()}.get(dtype, ir.DoubleType())


def memory_type(dtype: DType) -> ir.Type:
    """The in-memory type of a dtype (booleans are one byte, as in NumPy)."""
    return I8 if dtype is DType.BOOL else ir_type(dtype)


def cast(b: ir.IRBuilder, x: ir.Value, src: DType, dst: DType) -> ir.Value:
    """Convert `x` from `src` to `dst` with C semantics (bool: nonzero is true)."""
    to = ir_type(dst)
    if src is dst:
        return x
    if dst is DType.BOOL:
        if src.is_float:
            return b.fcmp_unordered("!=", x, ir.Constant(x.type, 0.0))
        return b.icmp_unsigned("!=", x, ir.Constant(x.type, 0))
    if src.is_float and dst.is_float:
        return b.fpext(x, to) if dst.bits > src.bits else b.fptrunc(x, to)
    if src.is_float:
        return b.fptosi(x, to) if dst.is_signed else b.fptoui(x, to)
    signed = src.is_signed and src is not DType.BOOL
    if dst.is_float:
        return b.sitofp(x, to) if signed else b.uitofp(x, to)
    if dst.bits == src.bits:
        return x
    if dst.bits < src.bits:
        return b.trunc(x, to)
    return b.sext(x, to) if signed else b.zext(x, to)


class _LoopID(ir.values.MDValue):
    """A distinct, self-referencing `!llvm.loop` node (llvmlite makes only uniqued ones)."""

    def descr(self, buf: list[str]) -> None:
        ops = ", ".join(op.get_reference() for op in self.operands)
        buf += (f"distinct !{{ {self.get_reference()}, {ops} }}", "\n")


def loop_id(module: ir.Module, *properties: list[object]) -> ir.values.MDValue:
    """A loop's `!llvm.loop` node with these properties (each a metadata tuple), for the
    `llvm.loop` metadata of its latch branch."""
    ops = [module.add_metadata(p) for p in properties]
    return _LoopID(module, ops, name=str(len(module.metadata)))


__all__ = [
    "CONTRACT_FLAGS",
    "DIVIDE_FLAGS",
    "I1",
    "I8",
    "cast",
    "ir_type",
    "loop_id",
    "memory_type",
]


def int_divmod(
    bld: ir.IRBuilder, a: ir.Value, b: ir.Value, dtype: DType
) -> tuple[ir.Value, ir.Value]:
    """Truncating quotient and remainder; x/0 == x%0 == 0 and MIN/-1 never trap."""
    ty = a.type
    zero, one = ir.Constant(ty, 0), ir.Constant(ty, 1)
    is_zero = bld.icmp_unsigned("==", b, zero)
    if not dtype.is_signed:
        safe = bld.select(is_zero, one, b)
        q, r = bld.udiv(a, safe), bld.urem(a, safe)
        return bld.select(is_zero, zero, q), bld.select(is_zero, zero, r)
    minus_one = bld.icmp_signed("==", b, ir.Constant(ty, -1))
    special = bld.or_(is_zero, minus_one)
    safe = bld.select(special, one, b)
    q, r = bld.sdiv(a, safe), bld.srem(a, safe)
    q = bld.select(minus_one, bld.sub(zero, a), q)
    return bld.select(is_zero, zero, q), bld.select(special, zero, r)


def int_floor_divmod(
    bld: ir.IRBuilder, a: ir.Value, b: ir.Value, dtype: DType
) -> tuple[ir.Value, ir.Value]:
    """Floor quotient and remainder (the remainder takes the divisor's sign), from
    `int_divmod`'s truncating ones."""
    q, r = int_divmod(bld, a, b, dtype)
    if not dtype.is_signed:
        return q, r
    zero = ir.Constant(a.type, 0)
    fix = bld.and_(bld.icmp_signed("!=", r, zero), bld.icmp_signed("<", bld.xor(r, b), zero))
    q = bld.sub(q, bld.zext(fix, a.type))
    return q, bld.add(r, bld.select(fix, b, zero))
