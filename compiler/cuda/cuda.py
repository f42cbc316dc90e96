"""CUDA C from a mapped GPU program (`cuda.cuda_map`): one `__global__` per phase.

    source = emit_cuda(program, fast_math=False)

The source is self-contained (no #include: NVRTC has no system headers): a preamble of
`__device__` helpers, then one `extern "C" __global__` function per kernel taking every
buffer as a `__restrict__` pointer (`const` for inputs), then every size as `long long`.
Index arithmetic is 64-bit, except in the kernels named in `index32`: their sizes, loop
variables and index lets are `int` (`cuda.cuda_width`, which also says when the host
may run them). A buffer is indexed row-major from its shape expressions. A serial loop
of a few constant steps gets `#pragma unroll`.
The same text compiles with NVRTC (target "cuda"), nvcc, and g++ with the emulation
header (`cuda.cuda_emulation`, target "cuda-emulated").

Semantics follow the loop IR (`loops/ir.py`): integer `/` and `%` by zero give 0 and
never trap (`tcc_div`, `tcc_rem`), `FloorDiv`/`Mod` round toward -inf, float min/max
propagate NaN (`tcc_min`, like NumPy's minimum), narrow integer arithmetic wraps in its type (a cast back), math
builtins map to CUDA's float (`expf`) or double (`exp`) functions, and to the fast
intrinsics (`__expf`) only with `fast_math`. A failed run-time bounds check reports
through `tcc_report` (an atomicCAS on the error record: the first failure wins).

Expressions print with C precedence (`Prec`); statements through `_Writer.block()`.
A node this emitter does not implement raises `InternalError`.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Collection, Iterator
from contextlib import contextmanager

from compiler.cuda.cuda_lanes import emit_lane_loop
from compiler.cuda.cuda_nodes import AtomicAdd, GpuKernel, GpuProgram, PosDiv, PosMod
from compiler.cuda.cuda_options import DEFAULT_BLOCKS
from compiler.cuda.cuda_preamble import PREAMBLE
from compiler.cuda.cuda_rows import WarpSync, is_lane_loop
from compiler.cuda.cuda_warp import WarpReduce
from compiler.cuda.cuda_width import narrow_expr
from compiler.diagnostics import InternalError
from compiler.loops import (
    Assign,
    Bin,
    BinOp,
    Block,
    Buffer,
    Call,
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
    Max,
    Min,
    Mod,
    Node,
    Role,
    Select,
    Stmt,
    Store,
    Unary,
    UnaryOp,
    VarRef,
)

C_TYPE = {
    DType.BOOL: "bool",
    DType.INT8: "signed char",
    DType.INT16: "short",
    DType.INT32: "int",
    DType.INT64: "long long",
    DType.UINT8: "unsigned char",
    DType.UINT16: "unsigned short",
    DType.UINT32: "unsigned int",
    DType.UINT64: "unsigned long long",
    DType.FLOAT32: "float",
    DType.FLOAT64: "double",
}

# C precedence, higher binds tighter
P_TERNARY, P_OR, P_AND, P_EQ, P_REL, P_ADD, P_MUL, P_UNARY, P_POSTFIX = (
    3,
    4,
    5,
    9,
    10,
    12,
    13,
    15,
    16,
)
_PREC = {
    BinOp.OR: P_OR, BinOp.AND: P_AND, BinOp.EQ: P_EQ, BinOp.NE: P_EQ, BinOp.LT: P_REL,
    BinOp.LE: P_REL, BinOp.GT: P_REL, BinOp.GE: P_REL, BinOp.ADD: P_ADD, BinOp.SUB: P_ADD,
    BinOp.MUL: P_MUL, BinOp.DIV: P_MUL, BinOp.MOD: P_MUL,
}  # fmt: skip

# math builtins whose CUDA name differs from `<name>f` / `<name>`
_FAST = {
    "exp": "__expf", "exp10": "__exp10f", "log": "__logf", "log2": "__log2f",
    "log10": "__log10f", "sin": "__sinf", "cos": "__cosf", "tan": "__tanf", "pow": "__powf",
    "fdivide": "__fdividef",
}  # fmt: skip

_RESERVED = frozenset(
    """auto bool break case char class const continue default delete do double else enum
    extern false float for goto if inline int long new operator private protected public
    register return short signed sizeof static struct switch template this throw true try
    typedef union unsigned void volatile while threadIdx blockIdx blockDim gridDim warpSize
    dim3 main asm restrict namespace using typename virtual friend mutable explicit export
    alignas alignof and or not xor char16_t char32_t constexpr decltype noexcept nullptr
    static_assert thread_local""".split()
)


def emit_cuda(
    program: GpuProgram,
    *,
    fast_math: bool = False,
    launch_comments: bool = True,
    index32: Collection[str] = frozenset(),
) -> str:
    """The CUDA C source of `program` (see the module doc); the kernels named in
    `index32` are written with 32-bit indices (`cuda.cuda_width`)."""
    w = _Writer()
    w.line(f"// tcc: CUDA C for def {program.name}: {len(program.kernels)} kernel(s)")
    w.raw(PREAMBLE)
    names = _Names()
    for kernel in program.kernels:
        w.line("")
        emitter = _KernelEmitter(w, program, kernel, names, fast_math, kernel.name in index32)
        if launch_comments:
            w.line(f"// launch: {launch_text(kernel, emitter.expr)}")
        emitter.run()
    return w.text()


def launch_text(kernel: GpuKernel, expr: Callable[[Expr], str]) -> str:
    """`kernel<<<grid, block>>>` with the grid as C expressions of the sizes."""
    grid = ", ".join(str(DEFAULT_BLOCKS) if g is None else expr(g) for g in kernel.grid)
    what = {"parallel": "parallel band", "atomic": "atomicAdd scatter", "serial": "one thread"}
    when = "" if kernel.when is None else f", only where {expr(kernel.when)} > 0"
    why = f": {kernel.reason}" if kernel.reason else ""
    return f"{kernel.name}<<<dim3({grid}), {kernel.block}>>>  ({what[kernel.mode]}{why}{when})"


class _Writer:
    """Lines of text with an indentation level; `block()` opens and closes braces."""

    def __init__(self) -> None:
        self.lines: list[str] = []
        self.depth = 0

    def line(self, text: str) -> None:
        self.lines.append("  " * self.depth + text if text else "")

    def raw(self, text: str) -> None:
        self.lines.extend(text.rstrip("\n").split("\n"))

    @contextmanager
    def block(self, head: str) -> Iterator[None]:
        self.line(f"{head} {{" if head else "{")
        self.depth += 1
        yield
        self.depth -= 1
        self.line("}")

    def text(self) -> str:
        return "\n".join(self.lines) + "\n"


class _Names:
    """C identifiers for the IR's names (`tcc.error` -> `tcc_error`; keywords get a `_`)."""

    def __init__(self) -> None:
        self.map: dict[str, str] = {}
        self.used: set[str] = set()

    def __call__(self, name: str) -> str:
        found = self.map.get(name)
        if found is None:
            base = "".join(ch if ch.isalnum() or ch == "_" else "_" for ch in name)
            if not base or base[0].isdigit() or base in _RESERVED:
                base = f"v_{base}"
            found = base
            while found in self.used:
                found += "_"
            self.used.add(found)
            self.map[name] = found
        return found


class _KernelEmitter:
    def __init__(
        self,
        w: _Writer,
        program: GpuProgram,
        kernel: GpuKernel,
        names: _Names,
        fast: bool,
        narrow: bool = False,
    ) -> None:
        self.w, self.program, self.kernel, self.name, self.fast = w, program, kernel, names, fast
        self.dims = dict(kernel.dims)
        self.scopes: list[set[str]] = [set()]
        # 32-bit indices: sizes, loop variables and index Lets are `int`
        self.narrow = narrow
        self.itype = "int" if narrow else "long long"
        self.narrow_vars: set[str] = set(program.size_params) if narrow else set()
        self.in_lanes = False  # inside a fused kernel's lane loop (`cuda_lanes`)

    def run(self) -> None:
        params = []
        for b in self.program.buffers_of(self.kernel):
            const = "const " if b.role is Role.IN else ""
            params.append(f"{const}{ctype(b.dtype)}* __restrict__ {self.name(b.name)}")
        params += [f"{self.itype} {self.name(s)}" for s in self.program.size_params]
        bounds = f"__launch_bounds__({self.kernel.block}) "
        head = f'extern "C" __global__ void {bounds}{self.kernel.name}({", ".join(params)})'
        with self.w.block(head):
            self.stmt(self.kernel.body)

    @contextmanager
    def _scope(self, head: str) -> Iterator[None]:
        """A C block: its declarations end with it."""
        with self.w.block(head):
            self.scopes.append(set())
            try:
                yield
            finally:
                self.scopes.pop()

    # ------------------------------------------------------------ statements

    def stmt(self, s: Stmt) -> None:
        method = getattr(self, f"_stmt_{type(s).__name__}", None)
        if method is None and hasattr(s, "emit_cuda"):  # a node that writes itself
            method = s.emit_cuda  # (cuda_shared.SharedGemm), given this emitter
            return method(self)
        if method is None:
            raise InternalError(f"the CUDA emitter does not implement {type(s).__name__}")
        method(s)

    def _stmt_Block(self, s: Block) -> None:
        if _is_record(s.stmts):
            first, second = s.stmts
            assert isinstance(first, Store) and isinstance(second, Store)
            buf = self.name(first.buffer.name)
            self.w.line(f"tcc_report({buf}, {self.expr(first.value)}, {self.expr(second.value)});")
            return
        for child in s.stmts:
            self.stmt(child)

    def _stmt_For(self, s: For) -> None:
        if is_lane_loop(s) and not self.in_lanes:  # a fused kernel's warp (cuda_rows)
            self.in_lanes = True
            try:
                emit_lane_loop(self, s)
            finally:
                self.in_lanes = False
            return
        # the bound binds tighter than `<`: `v < (N == 1LL ? 1LL : 2LL)`
        v, lo, hi = self.name(s.var), self.expr(s.lo), self._at(s.hi, P_REL + 1)
        t = self.itype
        step = f"{s.step}" if self.narrow else f"{s.step}LL"
        if s.kind is LoopKind.SERIAL:
            inc = f"{v} += {step}" if s.step != 1 else f"++{v}"
            head = f"for ({t} {v} = {lo}; {v} < {hi}; {inc})"
            if _unrolled(s):
                self.w.line("#pragma unroll")
        elif s.kind is LoopKind.GPU_THREAD:
            first = "((long long)blockIdx.x * blockDim.x + threadIdx.x)"
            stride = "(long long)gridDim.x * blockDim.x"
            if self.narrow:  # unsigned arithmetic, then int: the host proved it fits
                first = "(int)(blockIdx.x * blockDim.x + threadIdx.x)"
                stride = "(int)(gridDim.x * blockDim.x)"
            if s.step != 1:
                first, stride = f"{first} * {step}", f"{stride} * {step}"
            head = f"for ({t} {v} = {self._add(lo, first)}; {v} < {hi}; {v} += {stride})"
        elif s.kind is LoopKind.GPU_BLOCK:
            d = self.dims.get(s.var)
            if d not in ("y", "z"):
                raise InternalError(f"gpu_block loop {s.var} has no grid dimension")
            first, stride = f"({t})blockIdx.{d}", f"({t})gridDim.{d}"
            if s.step != 1:
                first, stride = f"{first} * {step}", f"{stride} * {step}"
            head = f"for ({t} {v} = {self._add(lo, first)}; {v} < {hi}; {v} += {stride})"
        else:
            raise InternalError(f"the CUDA emitter does not implement {s.kind.value} loops")
        with self._scope(head), self._binding(s.var, self.narrow):
            self.stmt(s.body)

    @staticmethod
    def _add(lo: str, offset: str) -> str:
        """`lo + offset`, `lo` in parentheses unless a name or a number (a select's
        `c ? a : b + offset` would add the offset to `b` only)."""
        if lo in ("0LL", "0"):
            return offset
        return f"{lo} + {offset}" if re.fullmatch(r"[\w.]+", lo) else f"({lo}) + {offset}"

    @contextmanager
    def _binding(self, var: str, narrow: bool) -> Iterator[None]:
        """`var` is an `int` (narrow) or not in the statements inside."""
        before = var in self.narrow_vars
        if narrow:
            self.narrow_vars.add(var)
        else:
            self.narrow_vars.discard(var)
        try:
            yield
        finally:
            if before:
                self.narrow_vars.add(var)
            else:
                self.narrow_vars.discard(var)

    def _stmt_If(self, s: If) -> None:
        with self._scope(f"if ({self.expr(s.cond)})"):
            self.stmt(s.then)
        if s.otherwise is not None:
            last = self.w.lines.pop()
            with self._scope(f"{last.strip()} else"):
                self.stmt(s.otherwise)

    def _stmt_Store(self, s: Store) -> None:
        me = Load(s.buffer, s.index)
        value = self._fused_sum(me, s.value) or self.expr(s.value)
        self.w.line(f"{self._element(s.buffer, s.index)} = {value};")

    def _stmt_WarpSync(self, s: WarpSync) -> None:
        self.w.line("__syncwarp();")

    def _stmt_AtomicAdd(self, s: AtomicAdd) -> None:
        self.w.line(f"atomicAdd(&{self._element(s.buffer, s.index)}, {self.expr(s.value)});")

    def _stmt_Let(self, s: Let) -> None:
        narrow = self.narrow and narrow_expr(s.value, self.narrow_vars)
        type_ = "int" if narrow else ctype(s.value.dtype)
        self._declare(s.var, f"const {type_}", s.value, s.body, narrow)

    def _stmt_Local(self, s: Local) -> None:
        self._declare(s.var, ctype(s.dtype), s.init, s.body, False)

    def _declare(self, var: str, ctype_: str, value: Expr, body: Stmt, narrow: bool) -> None:
        """`T var = value;` then `body`, in the current C block unless `var` is
        declared there already (then in a block of its own)."""
        decl = f"{ctype_} {self.name(var)} = {self.expr(value)};"
        if var in self.scopes[-1]:
            with self._scope(""), self._binding(var, narrow):
                self.scopes[-1].add(var)
                self.w.line(decl)
                self.stmt(body)
            return
        self.scopes[-1].add(var)
        self.w.line(decl)
        with self._binding(var, narrow):
            self.stmt(body)

    def _stmt_Assign(self, s: Assign) -> None:
        me = VarRef(s.var, s.value.dtype)
        value = self._fused_sum(me, s.value) or self.expr(s.value)
        self.w.line(f"{self.name(s.var)} = {value};")

    def _fused_sum(self, me: Expr, e: Expr) -> str | None:
        """`fma(a, b, acc)` for a float sum `acc = acc + a * b`, else None. NVRTC runs
        with `--fmad=false` (unless `fast_math`), so this product is the only one fused
        with an addition, as on the LLVM target: a value computed twice (a `max=`
        gradient recomputing the candidate) rounds the same way both times."""
        if not (isinstance(e, Bin) and e.op is BinOp.ADD and e.dtype.is_float):
            return None
        if e.dtype.bits < 32 or me not in (e.a, e.b):
            return None
        term = e.b if e.a == me else e.a
        if not (isinstance(term, Bin) and term.op is BinOp.MUL and term.dtype == e.dtype):
            return None
        fn = "fmaf" if e.dtype.bits == 32 else "fma"
        return f"{fn}({self.expr(term.a)}, {self.expr(term.b)}, {self.expr(me)})"

    # ------------------------------------------------------------ expressions

    def expr(self, e: Expr) -> str:
        return self._expr(e)[0]

    def _expr(self, e: Node) -> tuple[str, int]:
        method = getattr(self, f"_expr_{type(e).__name__}", None)
        if method is None:
            raise InternalError(f"the CUDA emitter does not implement {type(e).__name__}")
        return method(e)

    def _at(self, e: Expr, prec: int) -> str:
        """`e` printed, parenthesised unless it binds at least as tightly as `prec`."""
        text, p = self._expr(e)
        return text if p >= prec else f"({text})"

    def _element(self, b: Buffer, index: tuple[Expr, ...]) -> str:
        if len(index) != len(b.shape):
            raise InternalError(f"{b.name} indexed with {len(index)} subscripts")
        flat: tuple[str, int] | None = None
        for i, extent in zip(index, b.shape, strict=True):
            if flat is None:
                flat = self._expr(i)
                continue
            text, p = flat
            outer = text if p >= P_MUL else f"({text})"
            flat = f"{outer} * {self._at(extent, P_MUL + 1)} + {self._at(i, P_ADD + 1)}", P_ADD
        return f"{self.name(b.name)}[{flat[0] if flat else '0'}]"

    def _expr_Const(self, e: Const) -> tuple[str, int]:
        if self.narrow and narrow_expr(e, ()):
            text = literal(e.value, DType.INT32)
        else:
            text = literal(e.value, e.dtype)
        return text, P_UNARY if text.startswith("-") else P_POSTFIX

    def _expr_VarRef(self, e: VarRef) -> tuple[str, int]:
        return self.name(e.name), P_POSTFIX

    def _expr_Load(self, e: Load) -> tuple[str, int]:
        return self._element(e.buffer, e.index), P_POSTFIX

    def _expr_Bin(self, e: Bin) -> tuple[str, int]:
        dtype = e.a.dtype
        if not dtype.is_float and e.op in (BinOp.DIV, BinOp.MOD):
            fn = "tcc_div" if e.op is BinOp.DIV else "tcc_rem"
            return f"{fn}({self._operands(e, e.a, e.b)})", P_POSTFIX
        if dtype.is_float and e.op is BinOp.MOD:
            return self._call("fmod", (e.a, e.b), dtype), P_POSTFIX
        p = _PREC[e.op]
        text = f"{self._at(e.a, p)} {e.op.value} {self._at(e.b, p + 1)}"
        if dtype.bits < 32 and dtype is not DType.BOOL and not e.op.is_compare:
            return f"({ctype(dtype)})({text})", P_UNARY  # wrap in the narrow type
        return text, p

    def _expr_Unary(self, e: Unary) -> tuple[str, int]:
        op = "!" if e.op is UnaryOp.NOT else "-"
        inner = self._at(e.x, P_UNARY)
        text = f"{op}({inner})" if inner.startswith("-") else f"{op}{inner}"
        if e.op is UnaryOp.NEG and e.dtype.bits < 32 and not e.dtype.is_float:
            return f"({ctype(e.dtype)})({text})", P_UNARY
        return text, P_UNARY

    def _expr_Call(self, e: Call) -> tuple[str, int]:
        return self._call(e.fn, e.args, e.dtype), P_POSTFIX

    def _call(self, fn: str, args: tuple[Expr, ...], dtype: DType) -> str:
        text = ", ".join(self.expr(a) for a in args)
        if dtype is DType.FLOAT32:
            name = _FAST[fn] if self.fast and fn in _FAST else f"{fn}f"
        elif dtype is DType.FLOAT64:
            if fn == "fdivide":
                return f"({self._at(args[0], P_MUL)} / {self._at(args[1], P_MUL + 1)})"
            name = fn
        else:
            raise InternalError(f"math builtin {fn} on {dtype.value}")
        return f"{name}({text})"

    def _expr_Select(self, e: Select) -> tuple[str, int]:
        c = self._at(e.cond, P_TERNARY + 1)
        return f"{c} ? {self._at(e.a, P_TERNARY + 1)} : {self._at(e.b, P_TERNARY)}", P_TERNARY

    def _expr_Cast(self, e: Cast) -> tuple[str, int]:
        if e.dtype is e.x.dtype:
            return self._expr(e.x)
        if e.dtype is DType.BOOL:
            return f"{self._at(e.x, P_EQ + 1)} != {literal(0, e.x.dtype)}", P_EQ
        return f"({ctype(e.dtype)})({self.expr(e.x)})", P_UNARY

    def _expr_Min(self, e: Min) -> tuple[str, int]:
        return self._minmax(e, "min"), P_POSTFIX

    def _expr_Max(self, e: Max) -> tuple[str, int]:
        return self._minmax(e, "max"), P_POSTFIX

    def _minmax(self, e: Min | Max, which: str) -> str:
        # floats too: tcc_min/tcc_max propagate NaN, as the loop IR's Min/Max do
        # (`fminf` would ignore it; the builtins fmin/fmax are Calls, not Min/Max)
        return f"tcc_{which}({self._operands(e, e.a, e.b)})"

    def _operands(self, e: Expr, a: Expr, b: Expr) -> str:
        """`a, b` for a template helper `tcc_xxx(a, b)`: in a 32-bit kernel an `int`
        operand beside a `long long` one is widened (the template takes one type)."""
        texts = [self.expr(a), self.expr(b)]
        if self.narrow and e.dtype is DType.INT64 and not narrow_expr(e, self.narrow_vars):
            texts = [
                f"(long long)({t})" if narrow_expr(x, self.narrow_vars) else t
                for t, x in zip(texts, (a, b), strict=True)
            ]
        return ", ".join(texts)

    def _expr_FloorDiv(self, e: FloorDiv) -> tuple[str, int]:
        fn = "tcc_ffloordiv" if e.dtype.is_float else "tcc_floordiv"
        return f"{fn}({self._operands(e, e.a, e.b)})", P_POSTFIX

    def _expr_Mod(self, e: Mod) -> tuple[str, int]:
        fn = "tcc_fmod" if e.dtype.is_float else "tcc_mod"
        return f"{fn}({self._operands(e, e.a, e.b)})", P_POSTFIX

    def _expr_PosDiv(self, e: PosDiv) -> tuple[str, int]:
        return f"{self._at(e.a, P_MUL)} / {self._at(e.b, P_MUL + 1)}", P_MUL

    def _expr_PosMod(self, e: PosMod) -> tuple[str, int]:
        return f"{self._at(e.a, P_MUL)} % {self._at(e.b, P_MUL + 1)}", P_MUL

    def _expr_WarpReduce(self, e: WarpReduce) -> tuple[str, int]:
        fn = {"+": "sum", "*": "prod", "max": "max", "min": "min"}[e.op]
        return f"tcc_warp_{fn}({self.expr(e.value)})", P_POSTFIX


UNROLL_TRIPS = 16  # a serial loop of at most this many constant steps gets `#pragma unroll`


def _unrolled(s: For) -> bool:
    """A serial loop with constant bounds and a short trip count (a small reduction,
    a stencil's taps): NVRTC unrolls it completely."""
    if not (isinstance(s.lo, Const) and isinstance(s.hi, Const)):
        return False
    trips = -(-(int(s.hi.value) - int(s.lo.value)) // s.step)
    return 1 < trips <= UNROLL_TRIPS


def _is_record(stmts: tuple[Stmt, ...]) -> bool:
    """The error record `e[0] = id; e[1] = value` that `poly.astgen` emits."""
    if len(stmts) != 2 or not all(isinstance(s, Store) for s in stmts):
        return False
    a, b = stmts
    assert isinstance(a, Store) and isinstance(b, Store)
    return (
        a.buffer == b.buffer
        and a.buffer.dtype is DType.INT64
        and a.index == (Const(0, DType.INT64),)
        and b.index == (Const(1, DType.INT64),)
    )


def ctype(dtype: DType) -> str:
    found = C_TYPE.get(dtype)
    if found is None:
        raise InternalError(f"the CUDA back end has no type for {dtype.value}")
    return found


def literal(value: bool | int | float, dtype: DType) -> str:
    """A C literal of exactly `dtype`."""
    if dtype is DType.BOOL:
        return "true" if value else "false"
    if dtype.is_float:
        x = float(value)
        f = dtype is DType.FLOAT32
        if math.isnan(x):
            return (
                "__int_as_float(0x7fc00000)" if f else "__longlong_as_double(0x7ff8000000000000LL)"
            )
        if math.isinf(x):
            inf = (
                "__int_as_float(0x7f800000)" if f else "__longlong_as_double(0x7ff0000000000000LL)"
            )
            return inf if x > 0 else f"(-{inf})"
        text = repr(x)
        return f"{text}f" if f else text
    n = int(value)
    if dtype is DType.INT64:
        return "(-9223372036854775807LL - 1LL)" if n == -(2**63) else f"{n}LL"
    if dtype is DType.UINT64:
        return f"{n}ULL"
    if dtype is DType.INT32:
        return "(-2147483647 - 1)" if n == -(2**31) else str(n)
    if dtype is DType.UINT32:
        return f"{n}U"
    return f"(({ctype(dtype)}){n})"


__all__ = ["C_TYPE", "PREAMBLE", "ctype", "emit_cuda", "launch_text", "literal"]
