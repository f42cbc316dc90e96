"""The differential fuzzer's own program representation, printer and oracle.

Grammar (frozen dataclasses; index and value expressions share the node types):

    Program   := name dtype sizes inputs outputs stmts
    Tensor    := name dtype dims            dims: Node per dimension (Size or Num)
    Stmt      := lhs subs op rhs ranges lets   ranges: (var, lo, hi, stated) outer first
    Node      := Var | Size | Num | Bin | Un | Call | Read | Cond | Cast

The oracle (`evaluate`) runs a program with plain Python loops over the ranges the
generator chose; it shares nothing with tcc (TC semantics: outputs start at zero, a `!`
reduction first sets the elements it writes to the identity, a statement's right-hand
sides all read the state before that statement; a float literal is float32 and an
output has the type of its first write's right-hand side, so `c ? 0.5 : 1.5` makes a
float32 output even in a double def, its values stored rounded to float32). Along
with every value it tracks a
rounding-error scale (`mag`, `cnt`), whether the value is computed exactly in the
program's dtype (`exact`: dyadic data, no rounding anywhere, in every summation order),
how close the value came to a kink or tie in units of its rounding error (`margin`:
forward comparisons skip such elements) and in absolute terms (`gap`: gradient checks
skip such data).
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

import numpy as np

FLOATS = {"float": np.float32, "double": np.float64}
INTS = {"int32": np.int32, "int64": np.int64}
MANTISSA = {"float": 24, "double": 53}
EPS = {"float": 2.0**-24, "double": 2.0**-53}
IDENTITY = {"+": 0.0, "*": 1.0, "max": -math.inf, "min": math.inf}
COMPARE = ("<", "<=", ">", ">=", "==", "!=")


class Invalid(Exception):
    """The generated program or data is outside what the oracle models (regenerate)."""


@dataclass(frozen=True, slots=True)
class Var:
    name: str


@dataclass(frozen=True, slots=True)
class Size:
    name: str


@dataclass(frozen=True, slots=True)
class Num:
    value: float | int


@dataclass(frozen=True, slots=True)
class Bin:
    op: str
    a: object
    b: object


@dataclass(frozen=True, slots=True)
class Un:
    op: str  # "-" or "!"
    a: object


@dataclass(frozen=True, slots=True)
class Call:
    fn: str
    args: tuple


@dataclass(frozen=True, slots=True)
class Read:
    tensor: str
    subs: tuple


@dataclass(frozen=True, slots=True)
class Cond:
    c: object
    a: object
    b: object


@dataclass(frozen=True, slots=True)
class Cast:
    to: str
    a: object


@dataclass(frozen=True, slots=True)
class Tensor:
    name: str
    dtype: str
    dims: tuple


@dataclass(frozen=True, slots=True)
class Stmt:
    lhs: str
    subs: tuple
    op: str  # "=", "+=", "+=!", "*=", "*=!", "max=", "max=!", "min=", "min=!"
    rhs: object
    ranges: tuple  # (var, lo, hi, stated)
    lets: tuple = ()  # (name, Node)


@dataclass(frozen=True, slots=True)
class Program:
    name: str
    dtype: str
    sizes: tuple  # (name, value)
    inputs: tuple  # Tensor
    outputs: tuple  # names, in declaration order
    stmts: tuple
    bounds: tuple = ()  # index tensors: (name, Node of the extent their values index)


# ------------------------------------------------------------------ printing

_PREC = {"||": 1, "&&": 2, "==": 3, "!=": 3, "<": 4, "<=": 4, ">": 4, ">=": 4}
_PREC.update({"+": 5, "-": 5, "*": 6, "/": 6, "%": 6})


def show(n: object, outer: int = 0) -> str:
    """TC text of a node (parenthesised by precedence)."""
    if isinstance(n, (Var, Size)):
        return n.name
    if isinstance(n, Num):
        v = n.value
        if isinstance(v, float):
            text = repr(v) if v >= 0 else f"({v!r})"
            return text if "." in text or "e" in text else text + ".0"
        return str(v) if v >= 0 else f"({v})"
    if isinstance(n, Bin):
        p = _PREC[n.op]
        text = f"{show(n.a, p)} {n.op} {show(n.b, p + 1)}"
        return f"({text})" if p < outer else text
    if isinstance(n, Un):
        return f"{n.op}{show(n.a, 9)}"
    if isinstance(n, Call):
        return f"{n.fn}({', '.join(show(a) for a in n.args)})"
    if isinstance(n, Read):
        return n.tensor if not n.subs else f"{n.tensor}({', '.join(show(s) for s in n.subs)})"
    if isinstance(n, Cond):
        text = f"{show(n.c, 1)} ? {show(n.a, 1)} : {show(n.b, 1)}"
        return f"({text})" if outer > 0 else text
    if isinstance(n, Cast):
        return f"{n.to}({show(n.a)})"
    raise TypeError(f"not a node: {n!r}")


def show_stmt(s: Stmt) -> str:
    lhs = s.lhs if not s.subs else f"{s.lhs}({', '.join(show(x) for x in s.subs)})"
    where = [f"{v} in {show(lo)}:{show(hi)}" for v, lo, hi, stated in s.ranges if stated]
    where += [f"{name} = {show(e)}" for name, e in s.lets]
    tail = f" where {', '.join(where)}" if where else ""
    return f"{lhs} {s.op} {show(s.rhs)}{tail}"


def show_program(p: Program) -> str:
    params = []
    for t in p.inputs:
        dims = f"({', '.join(show(d) for d in t.dims)})" if t.dims else ""
        params.append(f"{t.dtype}{dims} {t.name}")
    body = "\n".join(f"    {show_stmt(s)}" for s in p.stmts)
    return f"def {p.name}({', '.join(params)}) -> ({', '.join(p.outputs)}) {{\n{body}\n}}\n"


# ------------------------------------------------------------------ index arithmetic


def ival(n: object, env: dict, sizes: dict, state: dict | None = None) -> int:
    """An index expression's integer value (C semantics for `/` and `%`, which the
    generator only uses with non-negative operands)."""
    if isinstance(n, Var):
        return env[n.name]
    if isinstance(n, Size):
        return sizes[n.name]
    if isinstance(n, Num):
        return int(n.value)
    if isinstance(n, Bin):
        a, b = ival(n.a, env, sizes, state), ival(n.b, env, sizes, state)
        if n.op in ("/", "%") and (a < 0 or b <= 0):
            raise Invalid(f"index {n.op} with a negative operand: {show(n)}")
        return {"+": a + b, "-": a - b, "*": a * b, "/": a // max(b, 1), "%": a % max(b, 1)}[n.op]
    if isinstance(n, Un) and n.op == "-":
        return -ival(n.a, env, sizes, state)
    if isinstance(n, Call) and n.fn in ("min", "max"):
        vals = [ival(a, env, sizes, state) for a in n.args]
        return min(vals) if n.fn == "min" else max(vals)
    if isinstance(n, Read) and state is not None:
        arr = state[n.tensor][0]
        at = tuple(ival(s, env, sizes, state) for s in n.subs)
        _bounds(n.tensor, arr.shape, at)
        return int(arr[at])
    raise Invalid(f"not an index expression: {show(n)}")


def _bounds(name: str, shape: tuple, at: tuple) -> None:
    if len(at) != len(shape) or any(not 0 <= a < s for a, s in zip(at, shape, strict=True)):
        raise Invalid(f"read {name}{at} outside {shape}")


def domain(s: Stmt, sizes: dict, env: dict | None = None):
    """Every point of a statement's ranges, outer variable first (lexicographic)."""
    names = [r[0] for r in s.ranges]

    def walk(k: int, env: dict):
        if k == len(names):
            yield env
            return
        _, lo, hi, _ = s.ranges[k]
        for v in range(ival(lo, env, sizes), ival(hi, env, sizes)):
            env[names[k]] = v
            yield from walk(k + 1, env)
        env.pop(names[k], None)

    yield from walk(0, dict(env or {}))


def output_shapes(p: Program, sizes: dict) -> dict[str, tuple[int, ...]]:
    """Each output's shape: one past the largest index any statement writes."""
    shapes: dict[str, list[int]] = {}
    for s in p.stmts:
        top = shapes.setdefault(s.lhs, [0] * len(s.subs))
        for env in domain(s, sizes):
            for d, sub in enumerate(s.subs):
                v = ival(sub, env, sizes)
                if v < 0:
                    raise Invalid(f"negative output index in {show_stmt(s)}")
                top[d] = max(top[d], v + 1)
    for name in p.outputs:
        if name not in shapes:
            raise Invalid(f"output {name} is never written")
        if any(x == 0 for x in shapes[name]):
            raise Invalid(f"output {name} is empty")
    return {k: tuple(v) for k, v in shapes.items()}


# ------------------------------------------------------------------ values

# A value: (val, mag, cnt, grid, exact, margin, gap); see the module docstring.
INF = math.inf


def _leaf(v: float, grid: int = 0) -> tuple:
    return (float(v), abs(float(v)), 0, grid, True, INF, INF)


def _is_index(n: object) -> bool:
    """An integer expression of index variables, sizes and integer literals."""
    if isinstance(n, (Var, Size)):
        return True
    if isinstance(n, Num):
        return isinstance(n.value, int)
    if isinstance(n, Bin) and n.op in ("+", "-", "*", "/", "%"):
        return _is_index(n.a) and _is_index(n.b)
    return False


_RANK = {"int": 0, "float": 1, "double": 2}
_INT_LIMIT = {"int32": 2.0**31, "int64": 2.0**53}  # past int64's exact floats: not modelled


def node_type(n: object, dtypes: dict, lets: dict, default: str, rec: object = None) -> str:
    """TC's type of a value expression ("float", "double" or "int"): a read has its
    tensor's dtype (`dtypes`, else `default`), a let its value's (`lets`), a float
    literal is float (32-bit) even in a double program, comparisons are int, and an
    operation, ternary or builtin promotes its operands (builtins from float). `rec`
    types the operands (default: this function)."""
    if rec is None:
        return node_type(n, dtypes, lets, default, lambda m: node_type(m, dtypes, lets, default))
    if isinstance(n, Num):
        return "float" if isinstance(n.value, float) else "int"
    if isinstance(n, Var):
        return lets.get(n.name, "int")
    if isinstance(n, Size):
        return "int"
    if isinstance(n, Read):
        t = dtypes.get(n.tensor, default)
        return t if t in FLOATS else "int"
    if isinstance(n, Cast):
        return n.to if n.to in FLOATS else "int"
    if isinstance(n, Un):
        return "int" if n.op == "!" else rec(n.a)
    if isinstance(n, Bin):
        if n.op in COMPARE or n.op in ("&&", "||"):
            return "int"
        return max(rec(n.a), rec(n.b), key=_RANK.get)
    if isinstance(n, Cond):
        return max(rec(n.a), rec(n.b), key=_RANK.get)
    if isinstance(n, Call):
        return max(["float", *(rec(a) for a in n.args)], key=_RANK.get)
    return default


def _grid_of(v: float) -> int:
    """The number of binary fraction digits of a finite float (up to 60)."""
    if v == 0 or not math.isfinite(v):
        return 0
    g = 0
    while v != math.floor(v) and g < 60:
        v *= 2
        g += 1
    return g


class Oracle:
    """Evaluates one program on one set of inputs (see `evaluate`)."""

    def __init__(self, p: Program, sizes: dict, eps: float, mant: int) -> None:
        self.p, self.sizes, self.eps, self.mant = p, sizes, eps, mant
        self.state: dict = {}
        self.gap = INF  # smallest distance to a kink or tie seen anywhere
        self.float32 = False  # whether a double program computed a float32 value
        self.types: dict[int, str] = {}
        self.let_types: dict[str, str] = {}
        self.dtypes = {t.name: t.dtype for t in p.inputs}

    def tol(self, x: tuple) -> float:
        return 0.0 if x[4] else 4 * self.eps * (x[2] + 2) * x[1] + 1e-300

    def _kink(self, dist: float, *args: tuple) -> float:
        """Record a distance to a kink; returns the margin (in rounding errors)."""
        dist = abs(dist)
        self.gap = min(self.gap, dist)
        t = max(self.tol(a) for a in args)
        return INF if t == 0 else dist / t

    def _combine(self, val: float, args: tuple, cnt: int, mag: float, grid: int,
                 exact: bool, margin: float = INF) -> tuple:  # fmt: skip
        # past 400 binary places no value is exact (a product of 1089 normal values,
        # about 3e-303, looked exact after the cap: fuzz seed 70750); 2.0**grid stays finite
        exact = exact and grid < 400
        grid = min(grid, 400)
        exact = exact and all(a[4] for a in args) and mag * 2.0**grid < 2.0 ** (self.mant - 1)
        margin = min([margin, *(a[5] for a in args)])
        if not math.isfinite(val) or abs(val) > 1e18:
            raise Invalid(f"value out of the modelled range: {val}")
        return (val, mag, cnt, grid, exact, margin, INF)

    def type_of(self, n: object) -> str:
        """TC's type of a value expression: float literals and builtins of them are
        float (32-bit) even in a double program; comparisons are int."""
        key = id(n)
        t = self.types.get(key)
        if t is None:
            t = node_type(n, self.dtypes, self.let_types, self.p.dtype, self.type_of)
            self.types[key] = t
        return t

    def value(self, n: object, env: dict) -> tuple:
        v = self._value(n, env)
        if isinstance(n, (Bin, Un)) and self.type_of(n) == "int" and abs(v[0]) >= 2.0**31:
            raise Invalid(f"integer overflow in {show(n)}")  # int32 arithmetic would wrap
        if (self.p.dtype == "double" and isinstance(n, (Bin, Call, Un, Cond))
                and self.type_of(n) == "float"):  # fmt: skip
            r = float(np.float32(v[0]))
            self.float32 = True
            # float32 rounding errors, in the double tolerance's units (2**29 ulps)
            v = (r, v[1] * 2.0**29, v[2] + 1, v[3], v[4] and r == v[0], v[5], v[6])
        return v

    def _value(self, n: object, env: dict) -> tuple:
        if isinstance(n, Var) and isinstance(env.get(n.name), tuple):
            return env[n.name]  # a let
        if isinstance(n, (Var, Size)):
            return _leaf(ival(n, env, self.sizes))
        if isinstance(n, Num):  # a float literal is float32 (`0.1` is 0.1f)
            v = float(np.float32(n.value)) if isinstance(n.value, float) else float(n.value)
            return _leaf(v, _grid_of(v))
        if isinstance(n, Read):
            return self.read(n, env)
        if isinstance(n, Cast):
            return self.cast(n, env)
        if isinstance(n, Un):
            a = self.value(n.a, env)
            if n.op == "-":
                return self._combine(-a[0], (a,), a[2], a[1], a[3], True)
            return self._combine(float(a[0] == 0), (a,), 0, 1.0, 0, True)
        if isinstance(n, Cond):
            c = self.value(n.c, env)
            chosen = self.value(n.a if c[0] != 0 else n.b, env)
            return self._combine(chosen[0], (c, chosen), chosen[2], chosen[1], chosen[3], True)
        if isinstance(n, Bin):
            return self.binary(n, env)
        if isinstance(n, Call):
            from tools.fuzz_math import call

            return call(self, n, [self.value(a, env) for a in n.args])
        raise Invalid(f"cannot evaluate {n!r}")

    def read(self, n: Read, env: dict) -> tuple:
        if n.tensor not in self.state:
            raise Invalid(f"{n.tensor} is read but never written")
        arr, meta = self.state[n.tensor]
        at = tuple(ival(s, env, self.sizes, self.state) for s in n.subs)
        _bounds(n.tensor, arr.shape, at)
        return meta[at]

    def cast(self, n: Cast, env: dict) -> tuple:
        if _is_index(n.a):
            return _leaf(ival(n.a, env, self.sizes, self.state))
        a = self.value(n.a, env)
        if n.to in INTS:  # C: toward zero; out of the type's range is undefined
            if not math.isfinite(a[0]):  # an untouched max=! element's -inf, a NaN
                raise Invalid(f"{n.to}({a[0]}) is out of range")
            v = float(math.trunc(a[0]))
            if abs(v) >= _INT_LIMIT[n.to]:
                raise Invalid(f"{n.to}({a[0]}) is out of range")
            m = self._kink(a[0] - round(a[0]), a)
            return self._combine(v, (a,), 0, abs(v), 0, True, m)
        if n.to == "float" and self.p.dtype == "double":
            v = float(np.float32(a[0]))  # float32 rounding, in double units (2**29 ulps)
            return self._combine(v, (a,), a[2] + 1, a[1] * 2.0**29, a[3], v == a[0])
        return a

    def binary(self, n: Bin, env: dict) -> tuple:
        a, b = self.value(n.a, env), self.value(n.b, env)
        x, y = a[0], b[0]
        cnt = max(a[2], b[2]) + 1
        if n.op in ("+", "-"):
            v = x + y if n.op == "+" else x - y
            return self._combine(v, (a, b), cnt, a[1] + b[1], max(a[3], b[3]), True)
        if n.op == "*":
            return self._combine(x * y, (a, b), cnt, a[1] * b[1], a[3] + b[3], True)
        if n.op == "/":
            if y == 0:
                raise Invalid("division by zero")
            if self.type_of(n) == "int":  # C's integer division truncates toward zero
                v = float(math.trunc(x / y)) if abs(x) < 2.0**52 else math.nan
                return self._combine(v, (a, b), 0, abs(v), 0, True)
            v = x / y
            mag = a[1] / abs(y) + abs(v) * b[1] / abs(y)
            pow2 = b[4] and y == 2.0 ** round(math.log2(abs(y)))
            return self._combine(v, (a, b), cnt, mag, a[3] + max(0, round(math.log2(abs(y)))), pow2)
        if n.op in COMPARE:
            v = {"<": x < y, "<=": x <= y, ">": x > y, ">=": x >= y, "==": x == y,
                 "!=": x != y}[n.op]  # fmt: skip
            m = self._kink(x - y, a, b)
            return self._combine(float(v), (a, b), 0, 1.0, 0, True, m)
        if n.op in ("&&", "||"):
            v = (x != 0 and y != 0) if n.op == "&&" else (x != 0 or y != 0)
            return self._combine(float(v), (a, b), 0, 1.0, 0, True)
        raise Invalid(f"operator {n.op} on values")

    def run_stmt(self, s: Stmt) -> None:
        arr, meta = self.state[s.lhs]
        red = s.op.rstrip("!").rstrip("=") or "="
        if red == "=":
            red = None
        bang = s.op.endswith("!")
        if bang:  # `op!` first sets the whole output to the identity (tcc's interp doc)
            ident = (IDENTITY[red], 0.0, 0, 0, True, INF, INF)
            for at in itertools.product(*(range(d) for d in arr.shape)):
                meta[at] = ident
                arr[at] = ident[0]
        for name, e in s.lets:
            self.let_types[name] = self.type_of(e)
        self.type_output(s)
        terms: dict[tuple, list] = {}
        for env in domain(s, self.sizes):
            env = dict(env)
            for name, e in s.lets:
                env[name] = self.value(e, env)
            at = tuple(ival(x, env, self.sizes) for x in s.subs)
            _bounds(s.lhs, arr.shape, at)
            terms.setdefault(at, []).append(self.value(s.rhs, env))
        for at, vals in terms.items():
            if red is None:
                if len(vals) != 1:
                    raise Invalid(f"`=` writes {s.lhs}{at} twice")
                meta[at] = self.store(s, vals[0], abs(vals[0][0]))
                continue
            prior = [] if bang else [meta[at]]
            total = self.reduce(red, prior + vals)
            partial = math.fsum(abs(v[0]) for v in prior + vals) if red == "+" else abs(total[0])
            meta[at] = self.store(s, total, partial)
        for at in terms:
            arr[at] = meta[at][0]

    def type_output(self, s: Stmt) -> None:
        """An output is typed by its first write (TC): the right-hand side's type."""
        if s.lhs in self.dtypes:
            return
        t = self.type_of(s.rhs)
        if t not in FLOATS:
            raise Invalid(f"{s.lhs} is typed {t} by its first write (not modelled)")
        self.dtypes[s.lhs] = t

    def store(self, s: Stmt, v: tuple, partial: float) -> tuple:
        """Value `v` as statement `s` stores it: rounded to float32 where a double
        program has a float output. It stays exact only where it and every partial
        result (at most `partial` in magnitude, on `v`'s grid) fit float32's mantissa;
        its error scale grows to float32's unless the right-hand side was float already."""
        if self.p.dtype != "double" or self.dtypes[s.lhs] != "float":
            return v
        r = float(np.float32(v[0]))
        exact = v[4] and r == v[0] and partial * 2.0 ** v[3] < 2.0**23
        mag = v[1] if self.type_of(s.rhs) == "float" else v[1] * 2.0**29
        return (r, mag, v[2] + 1, v[3], exact, v[5], v[6])

    def reduce(self, red: str, vals: list) -> tuple:
        xs = [v[0] for v in vals]
        cnt = max(v[2] for v in vals) + len(vals)
        grid = max(v[3] for v in vals)
        if red == "+":
            return self._combine(math.fsum(xs) + 0.0, tuple(vals), cnt, sum(v[1] for v in vals), grid,
                                 True)  # fmt: skip
        if red == "*":
            return self._combine(math.prod(xs), tuple(vals), cnt, math.prod(v[1] for v in vals),
                                 sum(v[3] for v in vals), True)  # fmt: skip
        best = max(xs) if red == "max" else min(xs)
        margin = INF
        # A near tie is a kink for gradients (the value itself is continuous). An exact
        # tie is not: with normal data two candidates are bit-equal when they are one
        # value (`A(min(i + k, N - 1))` at the edge, a term without the summed variable)
        # or both locally constant, and tcc splits the adjoint among them (each value's
        # shares add up to its derivative). The distance is to the nearest other value.
        others = [x for x in xs if x != best]
        if others:
            self.gap = min(self.gap, min(abs(best - x) for x in others))
        chosen = vals[xs.index(best)]
        return self._combine(best, tuple(vals), chosen[2], max(v[1] for v in vals), grid, True,
                             margin)  # fmt: skip


@dataclass
class Expected:
    """The oracle's outputs: values, and per element a tolerance and whether to compare."""

    values: dict  # name -> float64 array
    tol: dict  # name -> float64 array (0 where exact)
    stable: dict  # name -> bool array
    gap: float  # smallest distance to a kink/tie (gradient checks skip below a bound)
    dtypes: dict  # name -> "float" | "double": TC's type of the output (its first write)
    float32: bool = False  # a double program computed a float32 value (`sin(2.0)`)


def evaluate(p: Program, sizes: dict, inputs: dict) -> Expected:
    """Run `p` on `inputs` (name -> array) with the sizes `sizes`."""
    o = Oracle(p, sizes, EPS[p.dtype], MANTISSA[p.dtype])
    for t in p.inputs:
        arr = np.asarray(inputs[t.name])
        meta = np.empty(arr.shape, dtype=object)
        for at in itertools.product(*(range(d) for d in arr.shape)):
            v = float(arr[at])
            meta[at] = (v, abs(v), 0, _grid_of(v), True, INF, INF)
        o.state[t.name] = (arr, meta)
    shapes = output_shapes(p, sizes)
    for name, shape in shapes.items():
        meta = np.empty(shape, dtype=object)
        for at in itertools.product(*(range(d) for d in shape)):
            meta[at] = _leaf(0.0)
        o.state[name] = (np.zeros(shape), meta)
    for s in p.stmts:
        o.run_stmt(s)
    values, tol, stable = {}, {}, {}
    for name in p.outputs:
        arr, meta = o.state[name]
        values[name] = arr.copy()
        tol[name] = np.vectorize(o.tol, otypes=[float])(meta) if meta.size else np.zeros(arr.shape)
        stable[name] = (
            np.vectorize(lambda m: m[5] > 16, otypes=[bool])(meta)
            if meta.size
            else np.ones(arr.shape, bool)
        )
    return Expected(values, tol, stable, o.gap, {n: o.dtypes[n] for n in p.outputs}, o.float32)


def values_only(p: Program, sizes: dict, inputs: dict) -> dict:
    """The oracle's output values (for finite differences)."""
    return evaluate(p, sizes, inputs).values
