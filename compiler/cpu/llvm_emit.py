"""Emitting one loop-IR Function as an llvmlite function (the body of `cpu.llvm`).

Requires: a verified Function. Ensures: a function with the ABI `cpu.llvm` states,
built only with `llvmlite.ir.IRBuilder` calls. Statement and expression lowering is one
method per node type, dispatched by class name; an unknown node raises InternalError.

Numerics: float `Min`/`Max` are `llvm.minimum`/`llvm.maximum` (NaN propagates, and
they vectorise); a loop whose body only adds terms to float Locals is, when longer
than `SUM_BLOCK`, summed in blocks with Kahan's compensation across blocks
(`cpu.llvm_sums`); a loop of kind UNROLL (the lanes of a register tile) carries
`llvm.loop.vectorize.width 1` so the SLP vectoriser, not the loop vectoriser, widens it;
math builtins go through `llvm_math` (libmvec where present).

Unrolling: a loop whose body holds a loop carries `llvm.loop.unroll.disable` (tcc
unrolls register tiles itself). LLVM fully unrolled `for k_lane in 0:16 { for n ... }`
(a matmul gradient's packing loop) and vectorised each of the 16 copies: 40% of that
gradient's LLVM time. Innermost loops keep LLVM's unrolling (the packed micro-kernel
needs it; README "Compile cache"). `compute_loops`: loops launching no outlined body.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager

from llvmlite import ir

from compiler.cpu.llvm_dots import dot_plan, emit_dots
from compiler.cpu.llvm_exact import exact_reads
from compiler.cpu.llvm_expr import ExprEmitter
from compiler.cpu.llvm_lanes import Lanes, chain_of, emit_chain
from compiler.cpu.llvm_math import MathEmitter, intrinsic
from compiler.cpu.llvm_parallel import emit_parallel
from compiler.cpu.llvm_split import OnOutlined
from compiler.cpu.llvm_sums import (
    REDUCTION_FLAGS,
    SUM_BLOCK,
    blocked_sum,
    flat_body,
    sum_terms,
)
from compiler.cpu.llvm_types import (
    CONTRACT_FLAGS,
    I8,
    ir_type,
    loop_id,
    memory_type,
)
from compiler.diagnostics import InternalError
from compiler.loops import (
    Alloc,
    Assign,
    Bin,
    BinOp,
    Block,
    Buffer,
    DType,
    Expr,
    For,
    Function,
    If,
    Let,
    Load,
    Local,
    LoopKind,
    Max,
    Min,
    Stmt,
    Store,
    VarRef,
    children,
)

_LOOP_KINDS = frozenset({LoopKind.SERIAL, LoopKind.PARALLEL, LoopKind.VECTOR, LoopKind.UNROLL})
I64 = ir.IntType(64)
ALIGN = 64  # bytes: the start of an Alloc's buffer (a cache line, a 512-bit vector)
PTR = ir.PointerType()


def symbol(f: Function) -> str:
    """The LLVM name of `f`: prefixed, so a kernel named `exp` cannot shadow libm's."""
    return f"tcc.{f.name}"


class _BufferRef:
    def __init__(self, ptr: ir.Value, buffer: Buffer, strides: list[ir.Value]) -> None:
        self.ptr = ptr
        self.buffer = buffer
        self.strides = strides


# LLVM's tuning for recent x86 server cores prefers 256-bit vectors even where AVX-512
# is present; the loop nests tcc emits are long, unit-stride and FMA-bound, where
# 512-bit vectors measured faster (tools/bench: matmul, convolutions). On a host
# without AVX-512 the attributes change nothing (512 bits are not legal there).
VECTOR_WIDTH_ATTRIBUTES = ('"prefer-vector-width"="512"', '"min-legal-vector-width"="512"')


class _FunctionAttributes(ir.values.FunctionAttributes):
    """llvmlite's function attributes, plus the string attributes tcc sets."""

    _known = ir.values.FunctionAttributes._known | frozenset(VECTOR_WIDTH_ATTRIBUTES)


def _mul(b: ir.IRBuilder, x: ir.Value, y: ir.Value) -> ir.Value:
    """`x * y`, folded when both are constants: an outlined body gets a constant stride
    as a constant, not an argument (`llvm_parallel`), which LLVM then folds into its
    addresses (a packed panel's row: 3 instructions fewer per step of a matmul tile)."""
    if isinstance(x, ir.Constant) and isinstance(y, ir.Constant):
        return ir.Constant(x.type, x.constant * y.constant)
    return b.mul(x, y)


def _add(b: ir.IRBuilder, x: ir.Value, y: ir.Value) -> ir.Value:
    """`x + y`, folded when both are constants (an address's constant subscripts)."""
    if isinstance(x, ir.Constant) and isinstance(y, ir.Constant):
        return ir.Constant(x.type, x.constant + y.constant)
    return b.add(x, y)


class FunctionEmitter(ExprEmitter):
    """Builds `f` into `module` (statements here, expressions in `ExprEmitter`)."""

    def __init__(self, module: ir.Module, f: Function, fn: ir.Function | None = None) -> None:
        """An emitter of `f` into `module`; with `fn`, of a function other than `f`'s
        entry (an outlined loop body, `cpu.llvm_parallel`), with empty scopes."""
        self.module = module
        self.f = f
        if fn is None:
            args = [PTR] * len(f.buffers) + [I64] * (len(f.size_params) + 1) + [PTR]
            fn = ir.Function(module, ir.FunctionType(ir.VoidType(), args), name=symbol(f))
            fn.attributes = _FunctionAttributes(["nounwind", *VECTOR_WIDTH_ATTRIBUTES])
        self.fn = fn
        self.entry = self.fn.append_basic_block("entry")
        self.builder = ir.IRBuilder(self.entry)
        self.math = MathEmitter(module, self.builder)
        self.values: dict[str, ir.Value] = {}
        self._emitted: dict[tuple, ir.Value] = {}  # integer expressions, by block (expr)
        self._pure: dict[Expr, tuple[str, ...] | None] = {}
        self.slots: dict[str, tuple[ir.Value, DType]] = {}
        self.compensation: dict[str, ir.Value] = {}  # Kahan's correction of a float Local
        self.buffers: dict[str, _BufferRef] = {}
        self.threads: ir.Value = ir.Constant(I64, 1)  # the entry's thread count argument
        self.launch: ir.Value | None = None  # its launcher argument (None: run serially)
        self.lanes = Lanes(self)  # register tiles' accumulators as vectors (llvm_lanes)
        self.fused: Expr | None = None  # the product a sum is adding (`sum_term`)
        self.loop_vars: list[str] = []  # the enclosing loops' variables (`_sum_update`)
        self.let_reads: dict[str, frozenset[str]] = {}  # a Let -> the variables it reads
        # the outlined loop bodies (`work` functions, cpu.llvm_parallel) of the whole
        # module, shared with every fork: each is compiled as a part of its own (llvm_split)
        self.outlined: list[ir.Function] = []
        self.loops_emitted = self.compute_loops = 0  # loops built so far (module doc)
        self.on_outlined: OnOutlined | None = None  # each body, once built (llvm_split)

    def fork(self, fn: ir.Function) -> FunctionEmitter:
        """An emitter for another function `fn` of the same module."""
        sub = type(self)(self.module, self.f, fn)
        sub.outlined, sub.on_outlined = self.outlined, self.on_outlined
        return sub

    def emit(self) -> None:
        f, args = self.f, self.fn.args
        for arg, b in zip(args, f.buffers, strict=False):
            arg.name = b.name
            arg.add_attribute("noalias")
        sizes = args[len(f.buffers) :]
        for arg, name in zip(sizes, (*f.size_params, "tcc.threads", "tcc.launch"), strict=True):
            arg.name = name
        self.values.update(zip(f.size_params, sizes, strict=False))
        self.threads, self.launch = sizes[-2], sizes[-1]
        for arg, b in zip(args, f.buffers, strict=False):
            self._declare(b, arg)
        self.stmt(f.body)
        self.builder.ret_void()
        self.math.finish()

    # ---- helpers -------------------------------------------------------------------

    def _declare(self, b: Buffer, ptr: ir.Value) -> None:
        dims = [self.expr(d) for d in b.shape]
        strides = [ir.Constant(I64, 1)] if dims else []  # a 0-d buffer has no strides
        for d in reversed(dims[1:]):  # constant extents give constant strides (a panel's)
            strides.insert(0, _mul(self.builder, strides[0], d))
        self.buffers[b.name] = _BufferRef(ptr, b, strides)

    def _address(self, name: str, index: tuple[Expr, ...]) -> tuple[ir.Value, ir.Type]:
        ref = self.buffers[name]
        offset: ir.Value | None = None  # no term yet (a constant term is a term too)
        prefix: tuple | None = (self.builder.block, name)
        for i, stride in zip(index, ref.strides, strict=True):
            part = self._term_key(i) if prefix is not None else None
            prefix = None if part is None else (*prefix, part)  # type: ignore[misc]
            hit = self._emitted.get(prefix) if prefix is not None else None
            if hit is not None:
                offset = hit
                continue
            term = self.expr(i)
            if not (isinstance(stride, ir.Constant) and stride.constant == 1):
                term = _mul(self.builder, term, stride)
            offset = term if offset is None else _add(self.builder, offset, term)
            if prefix is not None:
                self._emitted[prefix] = offset
        if offset is None:  # a 0-d buffer
            offset = ir.Constant(I64, 0)
        ty = memory_type(ref.buffer.dtype)
        return self.builder.gep(ref.ptr, [offset], inbounds=True, source_etype=ty), ty

    def _loop(
        self,
        var: str,
        lo: ir.Value,
        hi: ir.Value,
        step: int,
        body: Callable[[], None],
        lanes: bool = False,
    ) -> None:
        """The one loop shape: header (phi, compare) -> body -> latch (i += step)."""
        b = self.builder
        pre = b.block
        header = self.fn.append_basic_block(f"{var}.header")
        loop_body = self.fn.append_basic_block(f"{var}.body")
        after = self.fn.append_basic_block(f"{var}.after")
        b.branch(header)
        b.position_at_end(header)
        i = b.phi(I64, name=var)
        i.add_incoming(lo, pre)
        b.cbranch(b.icmp_signed("<", i, hi), loop_body, after)
        b.position_at_end(loop_body)
        self.values[var] = i
        inner_before, outlined_before = self.loops_emitted, len(self.outlined)
        body()
        holds_loop = self.loops_emitted > inner_before
        self.loops_emitted += 1
        self.compute_loops += len(self.outlined) == outlined_before
        del self.values[var]
        i.add_incoming(b.add(i, ir.Constant(I64, step), flags=["nsw"]), b.block)
        latch = b.branch(header)
        if lanes:  # the lanes of a register tile: SLP vectorises across them, not the loop
            latch.set_metadata("llvm.loop", self._scalar_loop_id())
        elif holds_loop:  # an outer loop (module doc: Unrolling)
            latch.set_metadata("llvm.loop", loop_id(self.module, ["llvm.loop.unroll.disable"]))
        b.position_at_end(after)

    def _scalar_loop_id(self) -> ir.values.MDValue:
        one = ir.Constant(ir.IntType(32), 1)
        return loop_id(
            self.module, ["llvm.loop.vectorize.width", one], ["llvm.loop.interleave.count", one]
        )

    @contextmanager
    def _bound(self, var: str, value: ir.Value) -> Iterator[None]:
        self.values[var] = value
        try:
            yield
        finally:
            del self.values[var]

    # ---- statements ----------------------------------------------------------------

    def stmt(self, s: Stmt) -> None:
        method = getattr(self, f"_stmt_{type(s).__name__}", None)
        if method is None:
            raise InternalError(f"LLVM backend: unknown statement {type(s).__name__}")
        method(s)

    def _stmt_Block(self, s: Block) -> None:
        i, stmts = 0, s.stmts
        while i < len(stmts):
            covered = self.lanes.run(stmts, i) if self.lanes.of else 0
            if not covered:
                self.stmt(stmts[i])
            i += covered or 1

    def _stmt_For(self, s: For) -> None:
        self.loop_vars.append(s.var)
        try:
            self._for(s)
        finally:
            self.loop_vars.pop()

    def _for(self, s: For) -> None:
        if s.kind not in _LOOP_KINDS:
            raise InternalError(
                f"LLVM backend: {s.kind.value} loops are not implemented (loop '{s.var}')"
            )
        if s.kind is LoopKind.PARALLEL and self.launch is not None:
            emit_parallel(self, s)  # on the thread pool (cpu.llvm_parallel)
            return
        lo, hi = self.expr(s.lo), self.expr(s.hi)
        lanes = s.kind is LoopKind.UNROLL  # a register tile's lanes: never blocked
        sums = [] if lanes else sum_terms(self, s)
        if not sums:
            self._loop(s.var, lo, hi, s.step, lambda: self.stmt(s.body), lanes)
            return
        b = self.builder
        span = ir.Constant(I64, SUM_BLOCK * s.step)
        with b.if_else(b.icmp_signed(">", b.sub(hi, lo), span)) as (long, short):
            with long:
                blocked_sum(self, s.var, lo, hi, s.step, sums, flat_body(s))
            with short:
                plan = dot_plan(self, s, sums)
                if plan is not None:  # a dot-product tile (cpu.llvm_dots)
                    emit_dots(self, s, lo, hi, sums, plan)
                else:
                    self._loop(s.var, lo, hi, s.step, lambda: self.stmt(s.body))

    def _stmt_If(self, s: If) -> None:
        cond = self.expr(s.cond)
        if s.otherwise is None:
            with self.builder.if_then(cond):
                self.stmt(s.then)
            return
        with self.builder.if_else(cond) as (then, otherwise):
            with then:
                self.stmt(s.then)
            with otherwise:
                self.stmt(s.otherwise)

    def _stmt_Store(self, s: Store) -> None:
        value = self._sum_update(s)
        value = value if value is not None else self.expr(s.value)
        if s.buffer.dtype is DType.BOOL:
            value = self.builder.zext(value, I8)
        ptr, _ = self._address(s.buffer.name, s.index)
        self.builder.store(value, ptr)

    def _sum_update(self, s: Store) -> ir.Value | None:
        """`X[i] = X[i] + term` inside a loop whose variable `i` does not use (a sum in
        memory form): the term's product fuses with the addition (`sum_term`); None if
        not that shape. An update of each element once (`O(i) = O(i) + A(i) * B(i)`)
        is rounded as written, as its recomputation into another version is."""
        e = s.value
        if not (s.buffer.dtype.is_float and isinstance(e, Bin) and e.op is BinOp.ADD):
            return None
        me = Load(s.buffer, s.index)
        if me not in (e.a, e.b):
            return None
        used = set().union(*(self._reads(x) for x in s.index))
        if all(v in used for v in self.loop_vars):
            return None
        other = e.b if e.a == me else e.a
        a, b = (self.expr(me), self.sum_term(other))
        return self.builder.fadd(a, b, flags=CONTRACT_FLAGS)

    def _stmt_Let(self, s: Let) -> None:
        self.let_reads[s.var] = self._reads(s.value)
        if s.value.dtype.is_float and s.var in exact_reads(s.body):
            with self.math.scalar_math():  # a comparison operand or candidate (llvm_exact)
                value = self.expr(s.value)
        else:
            value = self.expr(s.value)
        with self._bound(s.var, value):
            self.stmt(s.body)

    def _reads(self, e: Expr) -> frozenset[str]:
        """The variables `e` reads, with those the Lets it reads read."""
        if isinstance(e, VarRef):
            return frozenset({e.name}) | self.let_reads.get(e.name, frozenset())
        return frozenset().union(*(self._reads(c) for c in children(e) if isinstance(c, Expr)))

    def _stmt_Local(self, s: Local) -> None:
        if s.dtype.is_float and isinstance(s.body, Local):
            chain, body = chain_of(s)
            groups = self.lanes.plan(chain, body)
            if groups:
                emit_chain(self, chain, body, groups)
                return
        self.declare_local(s)
        self.stmt(s.body)
        del self.slots[s.var]
        self.compensation.pop(s.var, None)

    def declare_local(self, s: Local) -> None:
        """The slot of `s` (and of its compensation, for a float), set to its init."""
        with self.builder.goto_block(self.entry):
            self.builder.position_at_start(self.entry)
            slot = self.builder.alloca(ir_type(s.dtype), name=s.var)
        self.builder.store(self.expr(s.init), slot)
        self.slots[s.var] = (slot, s.dtype)
        if s.dtype.is_float:
            with self.builder.goto_block(self.entry):
                self.builder.position_at_start(self.entry)
                comp = self.builder.alloca(ir_type(s.dtype), name=f"{s.var}.comp")
            self.builder.store(ir.Constant(ir_type(s.dtype), 0.0), comp)
            self.compensation[s.var] = comp

    def _stmt_Assign(self, s: Assign) -> None:
        slot, dtype = self.slots[s.var]
        value = self._reduction(s) if dtype.is_float else None
        value = value if value is not None else self.expr(s.value)
        if s.var in self.lanes.of:
            self.lanes.write(s.var, value)  # one lane of a vector group
        else:
            self.builder.store(value, slot)

    def _reduction(self, s: Assign) -> ir.Value | None:
        """`acc = acc op x` (or `x op acc`) with fast-math flags; None if not that shape."""
        e, me = s.value, VarRef(s.var, self.slots[s.var][1])
        if not isinstance(e, (Bin, Min, Max)) or me not in (e.a, e.b):
            return None
        other = e.b if e.a == me else e.a
        if isinstance(e, Bin) and e.op not in (BinOp.ADD, BinOp.MUL):
            return None
        summed = isinstance(e, Bin) and e.op is BinOp.ADD
        if isinstance(e, (Min, Max)):
            with self.math.scalar_math():  # a max=/min= candidate: `scalar_math`
                acc, x = self.expr(me), self.expr(other)
        else:
            acc, x = self.expr(me), self.sum_term(other) if summed else self.expr(other)
        b = self.builder
        if isinstance(e, Bin):
            op = b.fadd if e.op is BinOp.ADD else b.fmul
            return op(acc, x, flags=REDUCTION_FLAGS)
        name = "llvm.minimum" if isinstance(e, Min) else "llvm.maximum"  # NaN propagates
        fn = intrinsic(self.module, name, acc.type, 2)
        return b.call(fn, [acc, x], fastmath=REDUCTION_FLAGS)

    def _stmt_Alloc(self, s: Alloc) -> None:
        b = self.builder
        count: ir.Value = ir.Constant(I64, 1)
        for d in s.buffer.shape:
            count = b.mul(count, self.expr(d))
        count = b.select(b.icmp_signed(">", count, ir.Constant(I64, 0)), count, ir.Constant(I64, 1))
        size = ir.Constant(I64, s.buffer.dtype.np.itemsize)
        # 64 bytes more, and the start rounded up to a cache line: calloc's 16-byte
        # alignment splits a 512-bit load of the buffer across two lines
        bytes_ = b.add(b.mul(count, size), ir.Constant(I64, ALIGN))
        raw = b.call(self._libc("calloc", PTR, [I64, I64]), [bytes_, ir.Constant(I64, 1)])
        at = b.ptrtoint(raw, I64)
        pad = b.and_(b.sub(ir.Constant(I64, 0), at), ir.Constant(I64, ALIGN - 1))
        ptr = b.gep(raw, [pad], source_etype=ir.IntType(8))
        self._declare(s.buffer, ptr)
        self.stmt(s.body)
        del self.buffers[s.buffer.name]
        b.call(self._libc("free", ir.VoidType(), [PTR]), [raw])

    def _libc(self, name: str, ret: ir.Type, args: list[ir.Type]) -> ir.Function:
        fn = self.module.globals.get(name)
        return fn if fn is not None else ir.Function(self.module, ir.FunctionType(ret, args), name)
