"""The parity split: a strided scatter as one dense gather per residue class.

Requires: a `RangedDef` after the gather pass (`poly.gather`, `Options.gather="auto"`:
the strided reduction scatters it keeps, `poly.partial.keep_partial`).
Ensures:  `split_parities(ranged) -> Split`: the def the CPU schedule lowers
(`Split.ranged`), computing the same outputs, where each `+=` / `+=!` scatter whose
left-hand-side subscripts are each a plain variable, `s * v`, or `s * a + b + c`
(`a`, `b` variables of this subscript only, with box ranges, `b` of coefficient 1, `s
>= 1` a constant, `c` a size expression), at least one with `s >= 2`, becomes one
statement per residue class of its strided subscripts, each writing its output
elements exactly once (its left-hand side is injective: no partial scatter):

    I_grad(n, c, 2 * h + kh, ...) +=! O_grad(n, m, h, ...) * W1(m, c, kh, ...)
        where h in 0:HO, kh in 0:KH, ...
  ==>  (for each residue p in 0:2 of the subscript `2 * h + kh`, and likewise `x`)
    I_grad(n, c, y, ...) = 0 where y in 0:H, ...
    I_grad(n, c, 2 * h_kh + p, ...) += O_grad(n, m, h_kh - kh_t, ...)
                                       * W1(m, c, p + 2 * kh_t, ...)
        where h_kh in 0:HO + T_p - 1,
              kh_t in max(0, h_kh - HO + 1):min(T_p, h_kh + 1), ...
        with T_p = (KH - p + 1) / 2, the number of kh of residue p.

In general, for `s * a + b + c` with `a in A0:A1`, `b in B0:B1`: `b = B0 + p + s * t`
with `t in 0:T_p`, `T_p = (B1 - B0 - p + s - 1) / s`, and `a = y - t` with `y in A0:A1
- 1 + T_p`, which gives the subscript `s * y + B0 + p + c` and `t in max(0, y - A1 +
1):min(T_p, y - A0 + 1)`. Each instance `(a, b)` of the scatter is exactly one
instance `(p, y, t)` of one class (p = (b - B0) mod s, t = (b - B0) div s, y = a + t),
so the classes together add the same contributions. A class may be empty for some
sizes (`T_p = 0`: KH = 1, p = 1); its window `t` then has an empty range. The window
is clamped only so that `a = y - t` stays in `A0:A1`, i.e. so that the read of `a`
stays in bounds: `cpu.pad` then pads that read, and the class is a convolution with
constant bounds that the CPU model register-tiles. `+=!` becomes an explicit `= 0`
over the output's box first (classes need not cover it: a window that misses the last
row), then `+=` for every class.

This is a decision of the CPU schedule, below the printed def (like `cpu.pad`): the
gradient def `--grad` prints is the gather (`poly.gather.printed_form`); the CPU's
gather pass keeps the scatter (`Options.gather="auto"`) and `cpu.model.schedule(...,
pad=True)` splits it here. `Options.gather="partial"` keeps the partial scatter
(`poly.partial`), unsplit. Anything else (a subscript with three variables or a
negative coefficient, ranges that depend on other variables, an operator other than
`+`, an `exists` clause) is left as it is: a partial scatter, still correct.

Measured (2 threads, float32, an idle 2-core Zen 4, medians of 9 interleaved blocks,
ms, partial scatter / parity split / torch 2 eager): stride-2 conv N8 C16 33^2 M32 3x3
fwd+bwd 1.43 / 2.01 / 1.42; transposed conv (user scatter) N8 C32 16^2 M16 3x3 fwd 0.67 /
1.23 / 0.48, N4 C64 15^2 M32 4x4 fwd 1.46 / 4.16 / 0.66; stride-2 conv N4 C32 31^2 M64 5x5
fwd+bwd 4.42 / 4.47 / 2.11; the strided conv gradient compiled in 1.38 s split against
0.11 s. The classes write the output with a stride (the register tiles copy it to a
channel-last layout and back once per class) and each class pads its own copy of the
read, so `ENABLED` is off: the CPU keeps the partial scatter until a class writes a
contiguous scratch tile (or shares one transposed output) and measures faster.

Why it was built: the exact gather of a strided scatter has floor-divided window ranges that the CPU
model cannot tile (7.3 ms against 3.2 for the partial scatter, `poly.partial`); a class
has dense windows with constant bounds after padding. `Split.origins` maps each
statement to the statement of the input def it comes from.
"""

from __future__ import annotations

import dataclasses
import itertools

from compiler.diagnostics import InternalError, TCError
from compiler.frontend.ast import (
    Access,
    AssignOp,
    Binary,
    BinOp,
    Call,
    Cast,
    Const,
    Expr,
    Let,
    RangeConstraint,
    ScalarType,
    Stmt,
    Var,
    WhereClause,
)
from compiler.frontend.check import check_def
from compiler.frontend.checked import RangedDef, StmtFacts
from compiler.frontend.printer import print_def
from compiler.frontend.visit import substitute, walk
from compiler.poly.gather import WriteKind, write_kind
from compiler.poly.isl_bridge import StmtSpace, expr_to_aff
from compiler.poly.partial import subscript_rows
from compiler.poly.schedule import size_context

# residue classes one statement may split into (a 3-D stride-3 scatter has 27)
MAX_CLASSES = 64

# Off: measured slower than the partial scatter (module doc, "Measured"); tests turn it on.
ENABLED = False


@dataclasses.dataclass(frozen=True)
class Split:
    """`ranged` with its strided scatters split; `origins[k]`: the position, in the
    input def, of the statement that statement `k` comes from."""

    ranged: RangedDef
    origins: tuple[int, ...]
    classes: frozenset[int] = frozenset()  # the positions of the class statements


@dataclasses.dataclass(frozen=True)
class _Pair:
    """The subscript `s * a + b + c` (`c`: `rest`, an expression of sizes)."""

    dim: int
    a: str
    b: str
    s: int
    rest: Expr


def split_parities(ranged: RangedDef) -> Split:
    """`ranged` with every strided scatter that qualifies split into its residue
    classes (module doc); `ranged` itself when none does, or when `ENABLED` is off."""
    checked = ranged.checked
    if not ENABLED:
        return Split(ranged, tuple(range(len(checked.stmts))))
    taken = {t.name for t in checked.tensors} | set(checked.size_params)
    for f in checked.stmts:
        taken |= set(f.all_vars) | set(f.lets)
    stmts: list[Stmt] = []
    origins: list[int] = []
    classes: set[int] = set()
    changed = False
    for k, (stmt, facts) in enumerate(zip(checked.definition.stmts, checked.stmts, strict=True)):
        facts = dataclasses.replace(facts, stmt=stmt)
        pairs = _pairs(facts, checked.size_params)
        made = [stmt] if pairs is None else _classes(facts, pairs, ranged, taken)
        changed = changed or pairs is not None
        if pairs is not None:  # the classes: after the init, before the fallback
            first = 1 if stmt.op.init else 0
            count = len(made) - first - (len(made) - first > _count(pairs))
            classes |= {len(stmts) + first + j for j in range(count)}
        stmts += made
        origins += [k] * len(made)
    if not changed:
        return Split(ranged, tuple(range(len(stmts))))
    definition = dataclasses.replace(checked.definition, stmts=tuple(stmts))
    try:
        rechecked = check_def(definition)
    except TCError as e:
        raise InternalError(
            f"the parity split does not check:\n{print_def(definition)}\n{e}"
        ) from e
    split = RangedDef(rechecked, ranged.output_bounds, ranged.warnings, ranged.preconditions)
    return Split(split, tuple(origins), frozenset(classes))


def _pairs(facts: StmtFacts, params: tuple[str, ...]) -> list[_Pair] | None:
    """The strided subscripts of a statement the split applies to, or None."""
    stmt = facts.stmt
    if stmt.op not in (AssignOp.PLUS, AssignOp.PLUS_INIT) or stmt.equivalent is not None:
        return None
    if write_kind(facts) is not WriteKind.SCATTER:
        return None
    ranges = _box_ranges(facts)
    if ranges is None:
        return None
    rows = subscript_rows(facts, params)
    if rows is None:
        return None
    names = facts.all_vars
    lets = {c.name: c.value for c in stmt.where if isinstance(c, Let)}
    used: set[str] = set()
    pairs: list[_Pair] = []
    for dim, (arg, row) in enumerate(zip(stmt.lhs.args, rows, strict=True)):
        vs = [names[v] for v, c in enumerate(row) if c]
        if any(v in used for v in vs):
            return None  # a variable in two subscripts (`O(i, i)`)
        used |= set(vs)
        coeff = {names[v]: c for v, c in enumerate(row) if c}
        if len(vs) <= 1:
            if vs and coeff[vs[0]] < 0:
                return None
            continue  # a constant, a plain variable or `s * v`: injective as it is
        if len(vs) != 2 or _uses_lets(arg, lets):
            return None
        a, b = _roles(facts, coeff)
        if a is None or b is None:
            return None
        rest = _simplify(substitute(arg, {a: _int(0), b: _int(0)}))
        if any(isinstance(n, Var) and n.name in names for n in walk(rest)):
            return None
        pairs.append(_Pair(dim, a, b, coeff[a], rest))
    if not any(p.s >= 2 for p in pairs):
        return None
    return pairs if _count(pairs) <= MAX_CLASSES else None


def _count(pairs: list[_Pair]) -> int:
    """The number of residue classes."""
    count = 1
    for p in pairs:
        count *= p.s
    return count


def _roles(facts: StmtFacts, coeff: dict[str, int]) -> tuple[str | None, str | None]:
    """(a, b) of `s * a + b`: `b` has coefficient 1; with two unit coefficients, `b` is
    the later reduction variable (the window: `h + kh`)."""
    (v1, c1), (v2, c2) = coeff.items()
    if c1 < 1 or c2 < 1:
        return None, None
    if c1 == 1 and c2 == 1:
        red = facts.reduction_vars
        later = max((v1, v2), key=lambda v: red.index(v) if v in red else -1)
        return (v1 if later == v2 else v2), later
    if c2 == 1:
        return v1, v2
    if c1 == 1:
        return v2, v1
    return None, None


def _box_ranges(facts: StmtFacts) -> dict[str, tuple[Expr, Expr]] | None:
    """Every variable's range, when each is one `v in lo:hi` of sizes only and the
    where clauses hold nothing else but lets."""
    names = set(facts.all_vars)
    ranges: dict[str, tuple[Expr, Expr]] = {}
    for c in facts.stmt.where:
        if isinstance(c, Let):
            continue
        if not (isinstance(c, RangeConstraint) and isinstance(c.expr, Var)):
            return None
        if c.expr.name in ranges or any(
            isinstance(n, Var) and n.name in names for e in (c.lo, c.hi) for n in walk(e)
        ):
            return None
        ranges[c.expr.name] = (c.lo, c.hi)
    if set(ranges) != names:
        return None
    return ranges


def _classes(
    facts: StmtFacts, pairs: list[_Pair], ranged: RangedDef, taken: set[str]
) -> list[Stmt]:
    """The explicit initialisation (for `+=!`) and one statement per residue class."""
    stmt = facts.stmt
    ranges = _box_ranges(facts)
    assert ranges is not None
    fresh = [(_fresh(f"{p.a}_{p.b}", taken), _fresh(f"{p.b}_t", taken)) for p in pairs]
    result: list[Stmt] = []
    if stmt.op is AssignOp.PLUS_INIT:
        result.append(_zero(stmt, ranged, taken))
    guards = _choice(facts, pairs, ranges, ranged)
    pays: tuple[WhereClause, ...] = () if guards is None else (guards[0],)
    strided = {p.a for p in pairs} | {p.b for p in pairs}
    for residues in itertools.product(*(range(p.s) for p in pairs)):
        values: dict[str, Expr] = {}
        args = list(stmt.lhs.args)
        where: list[WhereClause] = []
        for pair, (y, t), r in zip(pairs, fresh, residues, strict=True):
            a0, a1 = ranges[pair.a]
            b0, b1 = ranges[pair.b]
            s = _int(pair.s)
            # T = (B1 - B0 - r + s - 1) / s: the b of residue r
            count = _simplify(_div(_add(_sub(b1, b0), _int(pair.s - 1 - r)), s))
            values[pair.a] = _sub(Var(y), Var(t))
            values[pair.b] = _simplify(_add(_add(b0, _int(r)), _mul(s, Var(t))))
            args[pair.dim] = _simplify(_add(_mul(s, Var(y)), _add(_add(b0, _int(r)), pair.rest)))
            hi_y = _simplify(_add(_sub(a1, _int(1)), count))
            where.append(RangeConstraint(Var(y), a0, hi_y))
            t_lo = Call("max", (_int(0), _simplify(_add(_sub(Var(y), a1), _int(1)))))
            t_hi = Call("min", (count, _simplify(_add(_sub(Var(y), a0), _int(1)))))
            where.append(RangeConstraint(Var(t), t_lo, t_hi))
        for c in stmt.where:
            if isinstance(c, Let):
                where.append(Let(c.name, substitute(c.value, values)))
            elif isinstance(c, RangeConstraint) and c.expr.name not in strided:  # type: ignore[attr-defined]
                where.append(c)
        result.append(
            dataclasses.replace(
                stmt,
                lhs=Access(stmt.lhs.name, tuple(args), span=stmt.lhs.span),
                op=AssignOp.PLUS,
                rhs=substitute(stmt.rhs, values),
                where=(*where, *pays),
            )
        )
    if guards is not None:  # the other sizes: the partial scatter, as it was
        result.append(dataclasses.replace(stmt, op=AssignOp.PLUS, where=(*stmt.where, guards[1])))
    return result


def _window(pair: _Pair, ranges: dict[str, tuple[Expr, Expr]]) -> tuple[Expr, Expr]:
    """(T_0, the extent of `a`): the longest class window and the range it is clamped to."""
    a0, a1 = ranges[pair.a]
    b0, b1 = ranges[pair.b]
    count = _simplify(_div(_add(_sub(b1, b0), _int(pair.s - 1)), _int(pair.s)))
    return count, _simplify(_sub(a1, a0))


def _choice(
    facts: StmtFacts,
    pairs: list[_Pair],
    ranges: dict[str, tuple[Expr, Expr]],
    ranged: RangedDef,
) -> tuple[RangeConstraint, RangeConstraint] | None:
    """None when the classes pay for every size the def runs at, else size-only guards
    `(classes, partial scatter)`. A class runs its window `t` over `0:T` at each of the
    `A + T - 1` values of `y` (after `cpu.pad`), against `A * T` instances in the
    scatter: it pays while the windows are at most twice `a`'s extents (`X <= 2 D`, the
    rule of `cpu.pad`), true for a strided convolution (`T` about `KH / s`), false when
    the unit-coefficient variable is the long one (`h + 2 * kh` with a large `h`)."""

    windows = [_window(p, ranges) for p in pairs]
    x = _sum([w for w, _ in windows])
    d = _sum([e for _, e in windows])
    twice = _mul(_int(2), d)
    slack = _sub(twice, x)
    space = StmtSpace((), ranged.checked.size_params)
    context = size_context(ranged)
    pays = expr_to_aff(slack, space).ge_set(space.const(0))
    if context.is_subset(pays):
        return None
    return (
        RangeConstraint(slack, _int(0), _add(twice, _int(1))),
        RangeConstraint(_sub(x, twice), _int(1), _add(x, _int(1))),
    )


def _sum(terms: list[Expr]) -> Expr:
    total = terms[0]
    for t in terms[1:]:
        total = _add(total, t)
    return total


def _zero(stmt: Stmt, ranged: RangedDef, taken: set[str]) -> Stmt:
    """`X(i...) = 0 where i in 0:hi...` over the output's whole box."""
    dtype = ranged.checked.tensor(stmt.lhs.name).dtype
    names = [_fresh(f"i{d}", taken) for d in range(len(stmt.lhs.args))]
    where = tuple(
        RangeConstraint(Var(n), _int(0), b.hi)
        for n, b in zip(names, ranged.bounds_of(stmt.lhs.name), strict=True)
    )
    lhs = Access(stmt.lhs.name, tuple(Var(n) for n in names))
    return Stmt(lhs, AssignOp.ASSIGN, Cast(dtype, _int(0)), where, span=stmt.span)


def _uses_lets(e: Expr, lets: dict[str, Expr]) -> bool:
    return any(isinstance(n, Var) and n.name in lets for n in walk(e))


def _fresh(base: str, taken: set[str]) -> str:
    name, k = base, 1
    while name in taken:
        name, k = f"{base}{k}", k + 1
    taken.add(name)
    return name


def _int(v: int) -> Const:
    return Const(v, ScalarType.INT32)


def _add(a: Expr, b: Expr) -> Expr:
    return Binary(BinOp.ADD, a, b)


def _sub(a: Expr, b: Expr) -> Expr:
    return Binary(BinOp.SUB, a, b)


def _mul(a: Expr, b: Expr) -> Expr:
    return Binary(BinOp.MUL, a, b)


def _div(a: Expr, b: Expr) -> Expr:
    return Binary(BinOp.DIV, a, b)


def _is(e: Expr, v: int) -> bool:
    return isinstance(e, Const) and e.value == v


def _simplify(e: Expr) -> Expr:
    """Drop `+ 0`, `- 0`, `* 1`, `/ 1` and fold constant `+`/`-` (bottom-up)."""
    if not isinstance(e, Binary):
        return e
    lhs, rhs = _simplify(e.lhs), _simplify(e.rhs)
    if (
        isinstance(lhs, Const)
        and isinstance(rhs, Const)
        and e.op in (BinOp.ADD, BinOp.SUB, BinOp.MUL)
    ):
        ops = {BinOp.ADD: lambda u, v: u + v, BinOp.SUB: lambda u, v: u - v}
        value = ops.get(e.op, lambda u, v: u * v)(lhs.value, rhs.value)
        return _int(int(value)) if value >= 0 else Binary(BinOp.SUB, _int(0), _int(int(-value)))
    if e.op is BinOp.ADD and _is(lhs, 0):
        return rhs
    if e.op in (BinOp.ADD, BinOp.SUB) and _is(rhs, 0):
        return lhs
    if e.op is BinOp.MUL and (_is(lhs, 0) or _is(rhs, 0)):
        return _int(0)
    if e.op in (BinOp.MUL, BinOp.DIV) and _is(rhs, 1):
        return lhs
    if e.op is BinOp.MUL and _is(lhs, 1):
        return rhs
    # `(x - 1) + 2` -> `x + 1`: a constant added to or subtracted from `x +- k`
    if isinstance(rhs, Const) and isinstance(lhs, Binary) and lhs.op in (BinOp.ADD, BinOp.SUB):
        if isinstance(lhs.rhs, Const) and e.op in (BinOp.ADD, BinOp.SUB):
            k = (lhs.rhs.value if lhs.op is BinOp.ADD else -lhs.rhs.value) + (
                rhs.value if e.op is BinOp.ADD else -rhs.value
            )
            k = int(k)
            if k == 0:
                return lhs.lhs
            return Binary(BinOp.ADD if k > 0 else BinOp.SUB, lhs.lhs, _int(abs(k)))
    return Binary(e.op, lhs, rhs)


__all__ = ["MAX_CLASSES", "Split", "split_parities"]
