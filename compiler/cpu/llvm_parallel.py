"""Parallel loops of the CPU target: outlined bodies run by a native thread pool.

Requires: a FunctionEmitter (`cpu.llvm_emit`) positioned at a `parallel` For, with
no Local enclosing it (`cpu.cpu_parallel` demotes such loops to serial).
Ensures: the loop runs over its whole range, split across threads when that pays.

A parallel loop `for i in [lo, hi) step s: body` becomes two functions and a decision
in the caller (`work` is compiled as a part of its own, `cpu.llvm_split`):

    work(ptr noalias buf..., <captured values>..., i64 first, i64 last)
        for i in [first, last) step s: body             -- the loop itself
    thunk(ptr ctx, i64 tid, i64 nthreads)
        unpack ctx = {lo, trips, buffers, values}; run work on thread tid's share:
        trips split in nthreads contiguous parts, the first `trips % nthreads` one longer
    caller:
        trips = max(0, ceil((hi - lo) / s));  work = trips * cost(body)
        if threads > 1 and trips > 1 and work >= GRAIN: launch(thunk, &ctx, min(threads, trips))
        else: work(..., lo, hi)                         -- no thread is woken

`launch(fn, data, n)` is the entry's last argument: the runtime passes the address of a
native launcher that calls libgomp's `GOMP_parallel` with a trampoline reading
`omp_get_thread_num()` / `omp_get_num_threads()` (`gomp_launcher_module`), or, where
libgomp does not load, a ctypes callback into a Python thread pool. Buffers and captured
values are parameters of `work`, so `noalias` and LLVM's vectoriser see the same code as
in a serial loop; values that are LLVM constants (unit strides) stay constants.

`cost(body)` (the grain-size rule) estimates the operations of one iteration: the loop-IR
nodes of its statements, each inner loop multiplying its body by its trip count when its
bounds can be evaluated before the loop (else by `UNKNOWN_TRIPS`).
"""

from __future__ import annotations

import copy
from typing import Any

from llvmlite import ir

from compiler.diagnostics import InternalError
from compiler.loops import (
    Alloc,
    Assign,
    Bin,
    BinOp,
    Block,
    Buffer,
    Cast,
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
    Mutator,
    Node,
    Stmt,
    Store,
    VarRef,
    children,
    var_names,
    walk,
)
from compiler.loops.ir import walk_stmts

I32, I64 = ir.IntType(32), ir.IntType(64)
F64 = ir.DoubleType()
PTR = ir.PointerType()
VOID = ir.VoidType()
GRAIN = 1 << 21  # estimated operations below which a parallel loop runs on the caller
UNKNOWN_TRIPS = 16.0  # the trip count assumed for an inner loop with data-dependent bounds
LAUNCH_TYPE = ir.FunctionType(VOID, [PTR, PTR, I64])  # launch(thunk, data, nthreads)
THUNK_TYPE = ir.FunctionType(VOID, [PTR, I64, I64])  # thunk(data, tid, nthreads)


def emit_parallel(em: Any, loop: For) -> None:
    """Emit `loop` (see the module doc) at `em`'s builder position."""
    if em.slots:
        raise InternalError(f"parallel loop '{loop.var}' inside a Local (not outlined)")
    b = em.builder
    lo, hi = em.expr(loop.lo), em.expr(loop.hi)
    step = ir.Constant(I64, loop.step)
    trips = b.sdiv(b.add(b.sub(hi, lo), ir.Constant(I64, loop.step - 1)), step)
    trips = b.select(b.icmp_signed(">", trips, ir.Constant(I64, 0)), trips, ir.Constant(I64, 0))
    estimate = _Cost(em)
    cost = estimate.value(loop.body, loop)  # one walk of the body: its cost, names and buffers
    captured = _Captures(em, estimate.names, estimate.buffers)
    work = _work_function(em, loop, captured)
    thunk = _thunk_function(em, loop, captured, work)
    amount = b.fmul(b.sitofp(trips, F64), cost)
    split = b.and_(
        b.and_(
            b.icmp_signed(">", em.threads, ir.Constant(I64, 1)),
            b.icmp_signed(">", trips, ir.Constant(I64, 1)),
        ),
        b.fcmp_ordered(">=", amount, ir.Constant(F64, float(GRAIN))),
    )
    with b.if_else(split) as (threaded, serial):
        with threaded:
            ctx = captured.pack(b, em.entry, lo, trips)
            n = b.select(b.icmp_signed("<", em.threads, trips), em.threads, trips)
            b.call(_Callee(em.launch, LAUNCH_TYPE), [thunk, ctx, n])
        with serial:
            b.call(work, [*captured.values, lo, hi])


class _Callee:
    """A function pointer to call: llvmlite's `IRBuilder.call` reads the callee's
    `function_type`, which an opaque `ptr` value does not have."""

    def __init__(self, value: ir.Value, function_type: ir.FunctionType) -> None:
        self.value, self.function_type, self.type = value, function_type, value.type

    def get_reference(self) -> str:
        return str(self.value.get_reference())


class _Captures:
    """What the loop body reads from the enclosing function: the buffers it names
    (pointer and non-constant strides) and the scalars in scope it names that are not
    constants. (Capturing everything in scope made a conv2d gradient's record 35 fields
    for each of its 7 loops, most of its entry function's instructions.)"""

    def __init__(self, em: Any, names: set[str], buffers: set[str]) -> None:
        self.buffers = [(n, ref) for n, ref in em.buffers.items() if n in buffers]
        self.names = [
            n for n, v in em.values.items() if n in names and not isinstance(v, ir.Constant)
        ]
        self.constants = {n: v for n, v in em.values.items() if isinstance(v, ir.Constant)}
        values: list[ir.Value] = [ref.ptr for _, ref in self.buffers]
        for _, ref in self.buffers:
            values += [s for s in ref.strides if not isinstance(s, ir.Constant)]
        values += [em.values[n] for n in self.names]
        self.values = values
        self.types = [v.type for v in values]

    def bind(self, em: Any, sub: Any, args: list[ir.Value]) -> None:
        """Fill `sub`'s scopes from `args` (in the order of `self.values`)."""
        it = iter(args)
        ptrs = {name: next(it) for name, _ in self.buffers}
        for name, ref in self.buffers:
            new = copy.copy(ref)
            new.ptr = ptrs[name]
            new.strides = [s if isinstance(s, ir.Constant) else next(it) for s in ref.strides]
            sub.buffers[name] = new
        sub.values.update(self.constants)
        sub.values.update({n: next(it) for n in self.names})

    def pack(self, b: ir.IRBuilder, entry: ir.Block, lo: ir.Value, trips: ir.Value) -> ir.Value:
        """A stack record {lo, trips, values...} (allocated in the entry block)."""
        ty = self.record_type()
        with b.goto_block(entry):
            b.position_at_start(entry)
            slot = b.alloca(ty, name="par.ctx")
        for k, v in enumerate([lo, trips, *self.values]):
            b.store(v, b.gep(slot, [_i32(0), _i32(k)], inbounds=True))
        return slot

    def record_type(self) -> ir.LiteralStructType:
        return ir.LiteralStructType([I64, I64, *self.types])


def _work_function(em: Any, loop: For, captured: _Captures) -> ir.Function:
    name = em.module.get_unique_name(f"{em.fn.name}.{loop.var}.work")
    fn = ir.Function(em.module, ir.FunctionType(VOID, [*captured.types, I64, I64]), name=name)
    fn.linkage = "internal"
    fn.attributes = copy.copy(em.fn.attributes)
    # Called from the caller's serial path and from the thunk: inlined into both, the
    # loop was optimised and compiled twice (a conv2d gradient's LLVM time 0.60 ->
    # 0.47 s kept out of line; the call costs nothing beside the loop).
    fn.attributes.add("noinline")
    for arg, _ in zip(fn.args, captured.buffers, strict=False):
        arg.add_attribute("noalias")
    em.outlined.append(fn)
    sub = em.fork(fn)
    captured.bind(em, sub, list(fn.args[:-2]))
    first, last = fn.args[-2], fn.args[-1]
    sub._loop(loop.var, first, last, loop.step, lambda: sub.stmt(loop.body))
    sub.builder.ret_void()
    if em.on_outlined is not None:
        # its part compiles while the rest is built
        em.on_outlined(em.module, fn, moves_only(loop.body))
    return fn


def moves_only(body: Stmt) -> bool:
    """Whether `body` only moves data: every store writes a value read from memory or a
    constant (copies, transposes, fills; index arithmetic aside), and nothing
    accumulates in a Local or a temporary, and no loop is a VECTOR loop (a transposed
    panel's copy, `cpu.pack`, which pays for vectorising). Its part is compiled at
    LLVM's O1 (`cpu.llvm_split.MOVES`): vectorising such loops cost more than they
    gained."""
    for node in walk_stmts(body):
        if isinstance(node, (Local, Assign, Alloc)):
            return False
        if isinstance(node, For) and node.kind is LoopKind.VECTOR:
            return False
        if isinstance(node, Store):
            value = node.value.x if isinstance(node.value, Cast) else node.value
            if not isinstance(value, (Load, Const)):
                return False
    return True


def _thunk_function(em: Any, loop: For, captured: _Captures, work: ir.Function) -> ir.Function:
    name = em.module.get_unique_name(f"{em.fn.name}.{loop.var}.thread")
    fn = ir.Function(em.module, THUNK_TYPE, name=name)
    fn.linkage = "internal"
    fn.attributes = copy.copy(em.fn.attributes)
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    data, tid, n = fn.args
    ty = captured.record_type()
    fields = [
        b.load(b.gep(data, [_i32(0), _i32(k)], inbounds=True, source_etype=ty), typ=t)
        for k, t in enumerate(ty.elements)
    ]
    lo, trips, values = fields[0], fields[1], fields[2:]
    q, r = b.sdiv(trips, n), b.srem(trips, n)
    start = b.add(b.mul(tid, q), b.select(b.icmp_signed("<", tid, r), tid, r))
    count = b.add(q, b.zext(b.icmp_signed("<", tid, r), I64))
    step = ir.Constant(I64, loop.step)
    first = b.add(lo, b.mul(start, step))
    last = b.add(first, b.mul(count, step))
    b.call(work, [*values, first, last])
    b.ret_void()
    return fn


# ------------------------------------------------------------------ grain size


# An estimate is a polynomial in the trip counts known before the loop: {monomial:
# coefficient}, a monomial the sorted indices of its trip counts in `_Cost.trips`. It
# is folded here and emitted once: built as LLVM additions of constants (which LLVM may
# not reassociate in doubles), a conv2d gradient's estimates were 630 `fadd`s.
_Poly = dict[tuple[int, ...], float]
# The variables bound between a parallel loop and a statement, each mapped to a value
# in terms of what is known before the loop (a loop's variable to the middle of its
# range): a tile's inner loop `j_t * 32 : min(j_t * 32 + 32, N)` is estimated at a
# whole tile's 32 trips, not UNKNOWN_TRIPS, and a triangle's `0 : i` at its mean.
_At = dict[str, Expr]


class _Cost:
    def __init__(self, em: Any) -> None:
        self.em = em
        self.trips: list[ir.Value] = []
        self._known: dict[tuple[Expr, Expr, int], int | float] = {}
        self.names: set[str] = set()  # the variables and buffers the walked code names
        self._counted: dict[int, int] = {}  # id -> `_size` of the nodes counted
        self.buffers: set[str] = set()

    def value(self, body: Stmt, loop: For) -> ir.Value:
        """The estimated operations of one run of `body`, the body of `loop`, as a
        double."""
        b = self.em.builder
        products: dict[tuple[int, ...], ir.Value] = {}
        total: ir.Value = ir.Constant(F64, 0.0)
        estimate = self.of(body, {loop.var: _middle(loop.lo, loop.hi)})
        for monomial, coefficient in sorted(estimate.items()):
            if not monomial:
                total = b.fadd(total, ir.Constant(F64, coefficient))
                continue
            product = self.trips[monomial[0]]
            for k in range(1, len(monomial)):
                found = products.get(monomial[: k + 1])
                if found is None:
                    found = products[monomial[: k + 1]] = b.fmul(product, self.trips[monomial[k]])
                product = found
            total = b.fadd(total, b.fmul(product, ir.Constant(F64, coefficient)))
        return total

    def of(self, s: Stmt | None, inner: _At) -> _Poly:
        """The estimate of `s`; `inner` maps the variables bound between the parallel
        loop and `s` (the loop's own included) to a value in terms of what is known
        before the loop (`_At`)."""
        if s is None:
            return {}
        if isinstance(s, Block):
            total: _Poly = {}
            for child in s.stmts:
                _add(total, self.of(child, inner))
            return total
        if isinstance(s, For):
            self._size(s.lo)  # for the names its bounds read
            self._size(s.hi)
            middle = _middle(_at(s.lo, inner), _at(s.hi, inner))
            body = self.of(s.body, {**inner, s.var: middle})
            _add(body, {(): 1.0})
            trips = self._trips(s, inner)
            if isinstance(trips, float):
                return {m: c * trips for m, c in body.items()}
            return {tuple(sorted((*m, trips))): c for m, c in body.items()}
        if isinstance(s, If):
            branches = self.of(s.then, inner)
            _add(branches, self.of(s.otherwise, inner))
            return _add(branches, {(): float(self._size(s.cond))})
        if isinstance(s, (Let, Local)):
            value = s.value if isinstance(s, Let) else s.init
            bound = {**inner, s.var: _at(value, inner)} if isinstance(s, Let) else inner
            return _add(self.of(s.body, bound), {(): float(self._size(value))})
        if isinstance(s, Alloc):
            self._size(s.buffer)
            return self.of(s.body, inner)
        return {(): float(self._size(s))}

    def _size(self, node: Node) -> int:
        """The loop-IR nodes of `node`, buffers' shapes not counted (the names they
        read are recorded all the same). A subtree met again (a tile's lanes share
        their subexpressions) is counted from its first count: the names it reads are
        recorded already."""
        known = self._counted.get(id(node))
        if known is not None:
            return known
        if isinstance(node, Buffer):
            if node.name not in self.buffers:
                self.buffers.add(node.name)
                self.names.update(var_names(*node.shape))
            return 0
        if isinstance(node, VarRef):
            self.names.add(node.name)
        count = 1
        for c in children(node):
            count += self._size(c)
        self._counted[id(node)] = count
        return count

    def _trips(self, s: For, inner: _At) -> int | float:
        """The index of `s`'s trip count in `self.trips` (at the values of `inner`,
        where its bounds read them), or UNKNOWN_TRIPS."""
        em = self.em
        lo, hi = _at(s.lo, inner), _at(s.hi, inner)
        reads = any(isinstance(n, Load) for bound in (lo, hi) for n in walk(bound))
        if reads or not var_names(lo, hi) <= set(em.values):
            return UNKNOWN_TRIPS
        key = (lo, hi, s.step)
        found = self._known.get(key)
        if found is None:
            b = em.builder
            span = b.sitofp(b.sub(em.expr(hi), em.expr(lo)), F64)
            trips = b.fdiv(span, ir.Constant(F64, float(s.step)))
            zero = ir.Constant(F64, 0.0)
            self.trips.append(b.select(b.fcmp_ordered(">", trips, zero), trips, zero))
            found = self._known[key] = len(self.trips) - 1
        return found


class _Substitute(Mutator):
    def __init__(self, values: _At) -> None:
        self.values = values

    def mutate_VarRef(self, node: VarRef) -> Expr:
        return self.values.get(node.name, node)


def _middle(lo: Expr, hi: Expr) -> Expr:
    return FloorDiv(Bin(BinOp.ADD, lo, hi), Const(2, DType.INT64))


def _at(expr: Expr, inner: _At) -> Expr:
    """`expr` with the variables of `inner` replaced by their values."""
    if not var_names(expr) & inner.keys():
        return expr
    return _Substitute(inner).mutate(expr)


def _add(total: _Poly, more: _Poly) -> _Poly:
    """`total += more`, in place."""
    for monomial, coefficient in more.items():
        total[monomial] = total.get(monomial, 0.0) + coefficient
    return total


def _i32(k: int) -> ir.Constant:
    return ir.Constant(I32, k)


# ------------------------------------------------------------------ the launcher


def gomp_launcher_module(triple: str, data_layout: str) -> ir.Module:
    """`void tcc.gomp_launch(ptr thunk, ptr data, i64 n)`: runs `thunk(data, tid, n')` on
    n threads of libgomp's pool (n' the team size libgomp gave), the caller included."""
    module = ir.Module(name="tcc.gomp")
    module.triple, module.data_layout = triple, data_layout
    pair = ir.LiteralStructType([PTR, PTR])
    num = ir.Function(module, ir.FunctionType(I32, []), "omp_get_thread_num")
    size = ir.Function(module, ir.FunctionType(I32, []), "omp_get_num_threads")
    parallel = ir.Function(module, ir.FunctionType(VOID, [PTR, PTR, I32, I32]), "GOMP_parallel")
    tramp = ir.Function(module, ir.FunctionType(VOID, [PTR]), "tcc.gomp_trampoline")
    tramp.linkage = "internal"
    b = ir.IRBuilder(tramp.append_basic_block("entry"))
    (p,) = tramp.args
    thunk = b.load(b.gep(p, [_i32(0), _i32(0)], source_etype=pair), typ=PTR)
    data = b.load(b.gep(p, [_i32(0), _i32(1)], source_etype=pair), typ=PTR)
    tid, n = b.sext(b.call(num, []), I64), b.sext(b.call(size, []), I64)
    b.call(_Callee(thunk, THUNK_TYPE), [data, tid, n])
    b.ret_void()
    launch = ir.Function(module, LAUNCH_TYPE, "tcc.gomp_launch")
    b = ir.IRBuilder(launch.append_basic_block("entry"))
    thunk_arg, data_arg, n_arg = launch.args
    slot = b.alloca(pair)
    b.store(thunk_arg, b.gep(slot, [_i32(0), _i32(0)]))
    b.store(data_arg, b.gep(slot, [_i32(0), _i32(1)]))
    b.call(parallel, [tramp, slot, b.trunc(n_arg, I32), _i32(0)])
    b.ret_void()
    return module


__all__ = ["GRAIN", "LAUNCH_TYPE", "THUNK_TYPE", "emit_parallel", "gomp_launcher_module"]
