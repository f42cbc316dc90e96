"""The loop IR: the small, typed, target-neutral language every backend consumes.

Grammar (hi is exclusive, steps are positive constants, index arithmetic is int64):

    Function  ::= Function(name, buffers: Buffer*, size_params: str*, body: Stmt)
    Buffer    ::= Buffer(name, dtype, shape: Expr*, role: in | out | temp)  -- row-major, dense
    Stmt      ::= For(var, lo: Expr, hi: Expr, step: int, body: Stmt, kind)
                | If(cond: Expr, then: Stmt, otherwise: Stmt | None)
                | Block(stmts: Stmt*)
                | Store(buffer: Buffer, index: Expr*, value: Expr)
                | Let(var, value: Expr, body: Stmt)         -- immutable scalar in body
                | Local(var, dtype, init: Expr, body: Stmt)   -- mutable scalar in body
                | Assign(var, value: Expr)                  -- var names an enclosing Local
                | Alloc(buffer: Buffer, body: Stmt)          -- temporary, zero-filled, role temp
    kind      ::= serial | parallel | vector | unroll | gpu_block | gpu_thread
    Expr      ::= Const(value, dtype) | VarRef(name, dtype = int64)
                | Load(buffer: Buffer, index: Expr*)
                | Bin(op, a, b) | Unary(op, x) | Call(fn, args: Expr*)
                | Select(cond, a, b)                          -- lazy: only the chosen side runs
                | Cast(dtype, x) | Min(a, b) | Max(a, b) | FloorDiv(a, b) | Mod(a, b)
    op        ::= add sub mul div mod and or eq ne lt le gt ge    (Bin)
                | neg not                                         (Unary)

Why both Let and Local: `Let` binds a value once (a register, nothing to store);
`Local` + `Assign` is the register accumulator a reduction needs:
`Local(acc, f32, 0) { for k: acc = acc + A[i,k]*B[k,j]; C[i,j] = acc }`.
Variables (loop variables, size parameters, Let and Local names) are read with
`VarRef(name, dtype)`; loop variables and size parameters are int64.

Integer semantics: `Bin(div)` / `Bin(mod)` truncate toward zero (C); `FloorDiv`
rounds toward -inf and `Mod` takes the divisor's sign (Python). Integer division or
remainder by zero yields 0 (Halide's rule), never a trap. Arithmetic wraps. Float
`Bin(mod)` is C's fmod; float `FloorDiv(a, b)` is `floor(a / b)` and `Mod(a, b)` is
`a - b * floor(a / b)`. `Min`/`Max`
of floats propagate NaN (NumPy's minimum/maximum, TC's `min=`/`max=` and `min()`/`max()`):
a NaN operand gives NaN, and -0.0 < +0.0; the builtins `fmin`/`fmax` (Calls) keep C's
meaning and ignore a NaN operand. Booleans are one byte in memory.
Calls name a math builtin of `MATH_ARITY`; their arguments and result share one
float dtype. Each node's `dtype` is computed from its children; `verify` checks
that the children agree.
"""

from __future__ import annotations

import dataclasses
import enum
import sys
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from compiler.diagnostics import InternalError

# A register tile nests one Local per accumulator (up to 256: `cpu.cpu_model.
# MAX_TILE_ELEMENTS`) and the IR's visitors recurse, about six frames a level: a
# 32 x 8 tile needs some 1,600 frames, more than Python's default limit of 1,000.
RECURSION_LIMIT = 4000
if sys.getrecursionlimit() < RECURSION_LIMIT:
    sys.setrecursionlimit(RECURSION_LIMIT)


class DType(enum.Enum):
    """Scalar element types, named as NumPy names them."""

    BOOL = "bool"
    INT8 = "int8"
    INT16 = "int16"
    INT32 = "int32"
    INT64 = "int64"
    UINT8 = "uint8"
    UINT16 = "uint16"
    UINT32 = "uint32"
    UINT64 = "uint64"
    FLOAT16 = "float16"
    FLOAT32 = "float32"
    FLOAT64 = "float64"

    @property
    def np(self) -> np.dtype[Any]:
        return np.dtype(self.value)

    @property
    def is_float(self) -> bool:
        return self.value.startswith("float")

    @property
    def is_int(self) -> bool:
        return "int" in self.value

    @property
    def is_signed(self) -> bool:
        return self.is_float or self.value.startswith("int")

    @property
    def bits(self) -> int:
        return 1 if self is DType.BOOL else self.np.itemsize * 8

    @classmethod
    def from_numpy(cls, dtype: Any) -> DType:
        name = np.dtype(dtype).name
        try:
            return cls(name)
        except ValueError:
            raise InternalError(f"no loop-IR dtype for NumPy dtype {name}") from None


class LoopKind(enum.Enum):
    """SERIAL, PARALLEL (a runtime may split it across threads), UNROLL (its body is
    unrolled lanes, e.g. a register tile's: a back end vectorises across the lanes, not
    the loop; LLVM: no loop vectorisation, SLP), VECTOR, GPU_BLOCK, GPU_THREAD."""

    SERIAL = "serial"
    PARALLEL = "parallel"
    VECTOR = "vector"
    UNROLL = "unroll"
    GPU_BLOCK = "gpu_block"
    GPU_THREAD = "gpu_thread"


class Role(enum.Enum):
    IN = "in"
    OUT = "out"
    TEMP = "temp"


class BinOp(enum.Enum):
    ADD = "+"
    SUB = "-"
    MUL = "*"
    DIV = "/"
    MOD = "%"
    AND = "&&"
    OR = "||"
    EQ = "=="
    NE = "!="
    LT = "<"
    LE = "<="
    GT = ">"
    GE = ">="

    @property
    def is_compare(self) -> bool:
        return self in _COMPARE

    @property
    def is_logical(self) -> bool:
        return self in (BinOp.AND, BinOp.OR)


_COMPARE = frozenset({BinOp.EQ, BinOp.NE, BinOp.LT, BinOp.LE, BinOp.GT, BinOp.GE})


class UnaryOp(enum.Enum):
    NEG = "-"
    NOT = "!"


# The math builtins a Call may name (TC's names), with their arities.
MATH_ARITY: dict[str, int] = {
    "exp": 1, "exp2": 1, "exp10": 1, "expm1": 1, "log": 1, "log2": 1, "log10": 1,
    "log1p": 1, "logb": 1, "sqrt": 1, "rsqrt": 1, "cbrt": 1, "rcbrt": 1, "pow": 2,
    "hypot": 2, "rhypot": 2, "norm3d": 3, "norm4d": 4, "rnorm3d": 3, "rnorm4d": 4,
    "sin": 1, "cos": 1, "tan": 1, "asin": 1, "acos": 1, "atan": 1, "atan2": 2,
    "sinh": 1, "cosh": 1, "tanh": 1, "asinh": 1, "acosh": 1, "atanh": 1,
    "erf": 1, "erfc": 1, "lgamma": 1, "tgamma": 1, "normcdf": 1,
    "ceil": 1, "floor": 1, "round": 1, "trunc": 1, "fmod": 2, "remainder": 2,
    "fdim": 2, "copysign": 2, "nextafter": 2, "fabs": 1, "fma": 3, "fdivide": 2,
    "fmin": 2, "fmax": 2,
}  # fmt: skip


class Node:
    """Base of every loop-IR node (expressions, statements, buffers, functions)."""

    __slots__ = ()


class Expr(Node):
    """An expression; every subclass has a `dtype` (a field or a computed property)."""

    __slots__ = ()

    if TYPE_CHECKING:

        @property
        def dtype(self) -> DType: ...


class Stmt(Node):
    __slots__ = ()


@dataclass(frozen=True, slots=True)
class Buffer(Node):
    name: str
    dtype: DType
    shape: tuple[Expr, ...]
    role: Role


@dataclass(frozen=True, slots=True)
class Const(Expr):
    value: bool | int | float
    dtype: DType


@dataclass(frozen=True, slots=True)
class VarRef(Expr):
    name: str
    dtype: DType = DType.INT64


@dataclass(frozen=True, slots=True)
class Load(Expr):
    buffer: Buffer
    index: tuple[Expr, ...]

    @property
    def dtype(self) -> DType:
        return self.buffer.dtype


@dataclass(frozen=True, slots=True)
class Bin(Expr):
    op: BinOp
    a: Expr
    b: Expr

    @property
    def dtype(self) -> DType:
        return DType.BOOL if self.op.is_compare else self.a.dtype


@dataclass(frozen=True, slots=True)
class Unary(Expr):
    op: UnaryOp
    x: Expr

    @property
    def dtype(self) -> DType:
        return self.x.dtype


@dataclass(frozen=True, slots=True)
class Call(Expr):
    fn: str
    args: tuple[Expr, ...]

    def __post_init__(self) -> None:
        if MATH_ARITY.get(self.fn) != len(self.args):
            raise InternalError(f"Call of {self.fn} with {len(self.args)} arguments")

    @property
    def dtype(self) -> DType:
        return self.args[0].dtype


@dataclass(frozen=True, slots=True)
class Select(Expr):
    cond: Expr
    a: Expr
    b: Expr

    @property
    def dtype(self) -> DType:
        return self.a.dtype


@dataclass(frozen=True, slots=True)
class Cast(Expr):
    dtype: DType
    x: Expr


@dataclass(frozen=True, slots=True)
class Min(Expr):
    a: Expr
    b: Expr

    @property
    def dtype(self) -> DType:
        return self.a.dtype


@dataclass(frozen=True, slots=True)
class Max(Expr):
    a: Expr
    b: Expr

    @property
    def dtype(self) -> DType:
        return self.a.dtype


@dataclass(frozen=True, slots=True)
class FloorDiv(Expr):
    a: Expr
    b: Expr

    @property
    def dtype(self) -> DType:
        return self.a.dtype


@dataclass(frozen=True, slots=True)
class Mod(Expr):
    a: Expr
    b: Expr

    @property
    def dtype(self) -> DType:
        return self.a.dtype


@dataclass(frozen=True, slots=True)
class For(Stmt):
    var: str
    lo: Expr
    hi: Expr
    step: int
    body: Stmt
    kind: LoopKind = LoopKind.SERIAL

    def __post_init__(self) -> None:
        if not isinstance(self.step, int) or self.step <= 0:
            raise InternalError(f"loop {self.var}: step must be a positive int, not {self.step}")


@dataclass(frozen=True, slots=True)
class If(Stmt):
    cond: Expr
    then: Stmt
    otherwise: Stmt | None = None


@dataclass(frozen=True, slots=True)
class Block(Stmt):
    stmts: tuple[Stmt, ...]


@dataclass(frozen=True, slots=True)
class Store(Stmt):
    buffer: Buffer
    index: tuple[Expr, ...]
    value: Expr


@dataclass(frozen=True, slots=True)
class Let(Stmt):
    var: str
    value: Expr
    body: Stmt


@dataclass(frozen=True, slots=True)
class Local(Stmt):
    var: str
    dtype: DType
    init: Expr
    body: Stmt


@dataclass(frozen=True, slots=True)
class Assign(Stmt):
    var: str
    value: Expr


@dataclass(frozen=True, slots=True)
class Alloc(Stmt):
    buffer: Buffer
    body: Stmt


@dataclass(frozen=True, slots=True)
class Function(Node):
    name: str
    buffers: tuple[Buffer, ...]
    size_params: tuple[str, ...]
    body: Stmt


_ONE_BODY = frozenset({For, Let, Local, Alloc, Function})  # a `body` statement field only
_LEAVES = frozenset({Store, Assign})
_FIELD_NAMES: dict[type, tuple[str, ...]] = {}
_CHILD_FIELDS: dict[type, tuple[str, ...]] = {}
# Field annotations that never hold a node: skipped when looking for children.
_SCALAR_FIELDS = frozenset(
    {"str", "int", "bool", "float", "bool | int | float", "DType", "LoopKind", "Role"}
    | {"BinOp", "UnaryOp", "tuple[str, ...]"}
)


def field_names(node: Node) -> tuple[str, ...]:
    """The names of `node`'s dataclass fields, in order (looked up once per class:
    `dataclasses.fields` is slow enough to dominate tree walks)."""
    cls = type(node)
    names = _FIELD_NAMES.get(cls)
    if names is None:
        names = _FIELD_NAMES[cls] = tuple(f.name for f in dataclasses.fields(cls))
    return names


def child_fields(node: Node) -> tuple[str, ...]:
    """The fields of `node` that may hold nodes (a node, None or a tuple), in order: its
    other fields (names, dtypes, operators) are not looked at by walks and mutators."""
    cls = type(node)
    names = _CHILD_FIELDS.get(cls)
    if names is None:
        fields = dataclasses.fields(cls)
        names = tuple(f.name for f in fields if str(f.type) not in _SCALAR_FIELDS)
        _CHILD_FIELDS[cls] = names
    return names


def children(node: Node) -> Iterator[Node]:
    """The direct child nodes of `node`, in field order."""
    for name in child_fields(node):
        value = getattr(node, name)
        if isinstance(value, Node):
            yield value
        elif isinstance(value, tuple):
            yield from (v for v in value if isinstance(v, Node))


def _children_reversed(node: Node) -> list[Node]:
    """The direct child nodes of `node`, last first (what a pre-order stack pushes)."""
    out: list[Node] = []
    for name in reversed(child_fields(node)):
        value = getattr(node, name)
        if isinstance(value, Node):
            out.append(value)
        elif isinstance(value, tuple):
            out.extend(v for v in reversed(value) if isinstance(v, Node))
    return out


def walk(node: Node) -> Iterator[Node]:
    """`node` and every node below it, in pre-order (field order)."""
    stack = [node]
    while stack:
        n = stack.pop()
        yield n
        stack.extend(_children_reversed(n))


def walk_stmts(node: Node) -> Iterator[Node]:
    """`node` and every statement below it, in pre-order, without descending into
    expressions (most of a register-tiled tree's nodes)."""
    stack = [node]
    while stack:
        n = stack.pop()
        yield n
        stack.extend(reversed(stmt_children(n)))


def stmt_children(n: Node) -> Sequence[Node]:
    """The statements directly below `n`, in field order (read from the statement
    fields of the loop IR's own classes: only the others are searched)."""
    cls = type(n)
    if cls is Block:
        return n.stmts  # type: ignore[attr-defined,no-any-return]
    if cls in _ONE_BODY:
        return (n.body,)  # type: ignore[attr-defined]
    if cls is If:
        return (n.then,) if n.otherwise is None else (n.then, n.otherwise)  # type: ignore[attr-defined]
    if cls in _LEAVES:
        return ()
    return [c for c in children(n) if isinstance(c, Stmt)]


def var_names(*exprs: Node) -> set[str]:
    """The names of the variables read anywhere in `exprs`."""
    return {n.name for e in exprs for n in walk(e) if isinstance(n, VarRef)}


def _method(walker: type, prefix: str, node: Node) -> Any:
    """`walker`'s method `<prefix><class of node>` (unbound), or None. Looked up once
    per walker and node class: each Visitor and Mutator class keeps a table (a failed
    getattr raises and catches an AttributeError, once per node of every walk); a
    method assigned to a class after its first walk is not seen."""
    return getattr(walker, f"{prefix}{type(node).__name__}", None)


class Visitor:
    """Walks a tree; `visit_<Class>` methods override, `generic_visit` descends."""

    _visitors: dict[type, Any] = {}  # as Mutator._mutators

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        cls._visitors = {}

    def visit(self, node: Node) -> Any:
        try:
            method = self._visitors[type(node)]
        except KeyError:
            method = self._visitors[type(node)] = _method(type(self), "visit_", node)
        return method(self, node) if method is not None else self.generic_visit(node)

    def generic_visit(self, node: Node) -> None:
        for child in children(node):
            self.visit(child)


class Mutator:
    """Rebuilds a tree bottom-up; returns the very same object when nothing changed."""

    # node class -> `mutate_<Class>` (unbound) or None (`_method`), a table per class
    # (set by __init_subclass__): the hottest lookup of every rewrite
    _mutators: dict[type, Any] = {}

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        cls._mutators = {}

    def mutate(self, node: Any) -> Any:
        try:
            method = self._mutators[type(node)]
        except KeyError:
            method = _method(type(self), "mutate_", node)
            self._mutators[type(node)] = method
        return method(self, node) if method is not None else self.generic_mutate(node)

    def generic_mutate(self, node: Any) -> Any:
        changes: dict[str, Any] | None = None
        mutate = self.mutate
        for name in child_fields(node):
            value = getattr(node, name)
            if isinstance(value, Node):
                new = mutate(value)
                if new is not value:
                    if changes is None:
                        changes = {}
                    changes[name] = new
            elif isinstance(value, tuple):
                items = [mutate(v) if isinstance(v, Node) else v for v in value]
                for a, b in zip(items, value, strict=True):
                    if a is not b:
                        if changes is None:
                            changes = {}
                        changes[name] = tuple(items)
                        break
        if changes is None:
            return node
        # the class's own constructor: `dataclasses.replace` checks every field first
        return type(node)(*[changes.get(f, getattr(node, f)) for f in field_names(node)])


class StmtMutator(Mutator):
    """A Mutator that rewrites statements only: expressions and buffers are returned as
    they are, without descending into them (a tree after register tiling holds about
    ten expression nodes per statement node, which a whole-tree walk paid for)."""

    def mutate(self, node: Any) -> Any:
        if isinstance(node, (Expr, Buffer)):
            return node
        return super().mutate(node)
