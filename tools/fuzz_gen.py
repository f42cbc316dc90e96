"""Random TC programs with their meaning (`generate(seed, ...) -> Program`).

The generator chooses every index variable's range itself and builds each subscript
from a pattern whose values it knows stay in bounds (plain, window `i + k`, stride and
dilation `2 * i + k`, reversal `N - 1 - i`, floor division `(i + l) / 2`, clamps,
constants into literal dimensions, indirect reads through index tensors). A `where`
clause is left out only where TC's inference certainly gives the chosen range: every
read subscript that uses the variable is the plain variable on an input dimension
whose extent is the range's upper bound, or `i + k` with `k` stated `0:K` and `i` in
`0:E - K + 1` (`_inferable`). Statements that update an output keep all of theirs.
"""

from __future__ import annotations

import dataclasses

from tools.fuzz_ir import (
    Bin,
    Call,
    Cast,
    Cond,
    Invalid,
    Num,
    Program,
    Read,
    Size,
    Stmt,
    Tensor,
    Un,
    Var,
    node_type,
    output_shapes,
    show,
)
from tools.fuzz_math import BUILTINS, EXACT, FORWARD_ONLY, NOT_NATIVE
from tools.fuzz_state import (
    MAX_POINTS,
    REDUCTIONS,
    Gen,
    TensorInfo,
    VarInfo,
    _minus,
    _plus,
)


class StmtGen:
    """Builds one statement: its right-hand side introduces the variables' ranges."""

    def __init__(self, g: Gen, lhs: str, lhs_vars: list[str], scope: dict[str, VarInfo]) -> None:
        self.g, self.r = g, g.rng
        self.lhs = lhs  # the tensor written: reads of it go through `self_read` only
        self.lhs_vars = lhs_vars
        self.scope = scope
        self.order: list[str] = [v for v in lhs_vars if v in scope]
        self.pending = [v for v in lhs_vars if v not in scope]
        self.self_read: tuple | None = None  # (tensor, subs) readable at the LHS element
        self.allow_new = True  # whether reads may introduce reduction variables

    def points(self) -> int:
        n = 1
        for v in self.order:
            n *= max(1, self.scope[v].hi_c - self.scope[v].lo_c)
        return n

    def introduce(self, name: str, info: VarInfo) -> None:
        self.scope[name] = info
        self.order.append(name)
        if name in self.pending:
            self.pending.remove(name)

    def new_var(self) -> str | None:
        """A pending left-hand-side variable, or a fresh reduction variable."""
        if self.pending and self.r.random() < 0.85:
            return self.pending[0]
        reds = [v for v in self.order if v not in self.lhs_vars]
        if not self.allow_new or len(reds) >= 2 or self.points() > MAX_POINTS // 4:
            return None
        return self.g.fresh("k")

    # ---------------------------------------------------------------- subscripts
    def sub(self, dim: tuple) -> object:
        """A subscript for a dimension of extent `dim` that stays in bounds."""
        e, ec = dim
        r = self.r
        usable = [v for v in self.order if self.scope[v].hi_c > self.scope[v].lo_c]
        if r.random() < 0.08:  # a constant subscript: any into a literal extent, else 0 / E - 1
            if isinstance(e, Num):
                return Num(r.randrange(e.value))
            return r.choice((Num(0), _minus(e, Num(1))))
        if usable and (not self.pending or r.random() < 0.3) and r.random() < 0.7:
            return self.reuse(r.choice(usable), dim)
        name = self.new_var()
        if name is None or self.points() * ec > MAX_POINTS:
            return self.reuse(r.choice(usable), dim) if usable else Num(0)
        return self.fresh_pattern(name, dim)

    def reuse(self, v: str, dim: tuple) -> object:
        e, ec = dim
        info, r = self.scope[v], self.r
        key = show(e)
        if key in info.fits:
            pick = r.choice(("plain", "plain", "plain", "rev", "half", "clamp"))
            if pick == "plain":
                return Var(v)
            if pick == "rev":
                return _minus(_minus(e, Num(1)), Var(v))
            if pick == "half":
                return Bin("/", Var(v), Num(2))
        if isinstance(e, Num) and r.random() < 0.3:
            return Num(r.randrange(e.value))
        if r.random() < 0.3 and info.lo_c >= 0:
            c = r.choice((1, 2))
            inner = Call("max", (Bin("-", Var(v), Num(c)), Num(0)))
            return inner if key in info.fits else Call("min", (inner, _minus(e, Num(1))))
        if not self.g.grad and r.random() < 0.2 and isinstance(e, Num) and e.value >= 2:
            return Bin("%", Var(v), e)
        return Call("min", (Var(v), _minus(e, Num(1))))

    def fresh_pattern(self, v: str, dim: tuple) -> object:
        e, ec = dim
        r, key = self.r, show(e)
        pick = r.choices(
            ("plain", "part", "window", "stride", "fdiv", "rev", "clamp", "indirect", "tri", "min"),
            (10, 2, 4, 2, 1, 1, 1, 1, 1, 1),
        )[0]
        outer = [u for u in self.order if key in self.scope[u].fits]
        if pick == "tri" and outer:
            u = r.choice(outer)
            self.introduce(v, VarInfo(Num(0), _plus(Var(u), Num(1)), 0, self.scope[u].hi_c,
                                      {key}))  # fmt: skip
            return Var(v)
        others = [(Size(n), c) for n, c in self.g.sizes.items() if n != key]
        if pick == "min" and others:  # `v in 0:min(E, F)` fits both extents
            f, fc = r.choice(others)
            self.introduce(v, VarInfo(Num(0), Call("min", (e, f)), 0, min(ec, fc), {key, show(f)}))
            return Var(v)
        if pick == "part" and ec >= 2:
            self.introduce(v, VarInfo(Num(1), e, 1, ec, {key}))
            return Var(v)
        if pick in ("window", "stride") and ec >= 2:
            k = self.g.fresh("k") if v in self.lhs_vars else None
            kk = r.choice([s for s in ((Num(2), 2), (Num(3), 3), self.g.size()) if s[1] <= ec])
            s, d = (1, 1) if pick == "window" else (r.choice((1, 2, 3)), r.choice((1, 2)))
            span = d * (kk[1] - 1)
            if k is None or span >= ec or kk[0] == e:
                return self.plain(v, e, ec)
            hi_c = (ec - 1 - span) // s + 1
            hi = _minus(e, kk[0]) if (s, d) == (1, 1) else None
            hi = (
                _plus(hi, Num(1))
                if hi is not None
                else Bin("+", Bin("/", _minus(_minus(e, Num(1)), Num(span)), Num(s)), Num(1))
            )
            self.introduce(v, VarInfo(Num(0), hi, 0, hi_c, {key}))
            self.introduce(k, VarInfo(Num(0), kk[0], 0, kk[1], {show(kk[0])}))
            lin = Var(v) if s == 1 else Bin("*", Num(s), Var(v))
            return Bin("+", lin, Var(k) if d == 1 else Bin("*", Num(d), Var(k)))
        if pick == "fdiv" and ec >= 2:
            lv = self.g.fresh("l")
            self.introduce(v, VarInfo(Num(0), _minus(Bin("*", Num(2), e), Num(2)), 0, 2 * ec - 2))
            self.introduce(lv, VarInfo(Num(0), Num(2), 0, 2, {"2"}))
            return Bin("/", Bin("+", Var(v), Var(lv)), Num(2))
        if pick == "rev":
            self.introduce(v, VarInfo(Num(0), e, 0, ec, {key}))
            return _minus(_minus(e, Num(1)), Var(v))
        if pick == "clamp":
            extra = r.choice((1, 2))
            self.introduce(v, VarInfo(Num(0), _plus(e, Num(extra)), 0, ec + extra))
            return Call("min", (Var(v), _minus(e, Num(1))))
        if pick == "indirect" and len(self.g.inputs) < 7:
            t = self.g.new_index_tensor(dim)
            inner = self.plain(v, *t.dims[0])
            return Read(t.name, (inner,))
        return self.plain(v, e, ec)

    def plain(self, v: str, e: object, ec: int) -> object:
        self.introduce(v, VarInfo(Num(0), e, 0, ec, {show(e)}))
        return Var(v)

    # ---------------------------------------------------------------- expressions
    def read(self) -> object:
        g, r = self.g, self.r
        if self.self_read is not None and r.random() < 0.25:
            return Read(*self.self_read)
        pool = [
            t for t in g.tensors.values() if t.bound is None and t.readable and t.name != self.lhs
        ]
        if not pool or (len(g.inputs) < 4 and r.random() < 0.3):
            t = g.new_input()
        else:
            outs = [t for t in pool if t.output]
            t = r.choice(outs) if outs and r.random() < 0.4 else r.choice(pool)
        return Read(t.name, tuple(self.sub(d) for d in t.dims))

    def leaf(self) -> object:
        r = self.r
        x = r.random()
        if x < 0.75:
            return self.read()
        if x < 0.88 or not self.order:
            vals = (0.5, 2.0, 1.0, 0.25, 3.0) if self.g.exact else (0.5, 1.5, 0.375, 2.0, 0.75)
            return Num(r.choice(vals))
        v = Var(r.choice(self.order))
        ix = r.choice((v, Bin("/", v, Num(2)), Bin("%", v, Num(3)), Bin("+", v, Num(1))))
        return Cast(self.g.dtype, ix)

    def expr(self, depth: int) -> object:
        r = self.r
        if depth <= 0 or r.random() < 0.3:
            return self.leaf()
        if not self.g.grad and r.random() < 0.05:
            return self.cast(depth)
        x = r.random()
        if x < 0.45:
            op = r.choice(("+", "-", "*", "+", "*"))
            return Bin(op, self.expr(depth - 1), self.expr(depth - 1))
        if x < 0.55 and not self.g.exact:
            den = self.expr(depth - 1)
            return Bin("/", self.expr(depth - 1), Bin("+", Bin("*", den, den), Num(1.0)))
        if x < 0.6 and self.g.exact:
            return Bin("/", self.expr(depth - 1), Num(r.choice((2.0, 4.0))))
        if x < 0.85:
            return self.call(depth)
        if x < 0.95:
            cmp = r.choice(("<", "<=", ">", ">=", "==", "!="))
            c = Bin(cmp, self.expr(depth - 1), self.expr(depth - 1))
            if r.random() < 0.2:
                c = Un("!", c)
            return Cond(c, self.expr(depth - 1), self.expr(depth - 1))
        return Un("-", self.expr(depth - 1))

    def cast(self, depth: int) -> object:
        """A value cast: `float(x)`, `double(x)`, or to an integer and back
        (`float(int32(x))`, C's truncation toward zero)."""
        to = self.r.choice(("int32", "int64", "float", "double"))
        inner = Cast(to, self.expr(depth - 1))
        return Cast(self.g.dtype, inner) if to in ("int32", "int64") else inner

    def call(self, depth: int) -> object:
        r = self.r
        names = EXACT if self.g.exact else tuple(BUILTINS)
        if r.random() > 0.03:
            names = tuple(n for n in names if n not in NOT_NATIVE)
        if self.g.grad:
            names = tuple(n for n in names if BUILTINS[n].smooth and n not in FORWARD_ONLY)
        fn = r.choice(names)
        args = []
        for dom in BUILTINS[fn].domain:
            a = self.expr(depth - 1)
            if dom == "pos":
                a = Bin("+", Bin("*", a, a), Num(0.5))
            elif dom == "ge1":
                a = Bin("+", Bin("*", a, a), Num(1.5))
            elif dom == "unit":
                a = Bin("*", Call("tanh", (a,)), Num(0.75))
            elif dom == "small":
                a = Bin("*", Call("tanh", (a,)), Num(4.0))
            elif dom == "two":
                a = Bin("+", Bin("*", Call("tanh", (a,)), Num(0.75)), Num(1.0))
            elif dom == "prob":
                a = Bin("+", Bin("*", Call("tanh", (a,)), Num(0.4375)), Num(0.5))
            args.append(a)
        return Call(fn, tuple(args))


# ------------------------------------------------------------------ statements


def _reads(n: object, out: list) -> list:
    """Every Read node under `n` (subscripts included)."""
    if isinstance(n, Read):
        out.append(n)
        for s in n.subs:
            _reads(s, out)
    elif isinstance(n, (Bin, Cond, Un, Cast, Call)):
        kids = {Bin: ("a", "b"), Cond: ("c", "a", "b"), Un: ("a",), Cast: ("a",)}.get(type(n))
        for k in n.args if isinstance(n, Call) else [getattr(n, a) for a in kids]:
            _reads(k, out)
    return out


def _uses(n: object, v: str) -> bool:
    if isinstance(n, Var):
        return n.name == v
    if isinstance(n, Read):
        return any(_uses(s, v) for s in n.subs)
    if isinstance(n, Call):
        return any(_uses(a, v) for a in n.args)
    kids = {Bin: ("a", "b"), Cond: ("c", "a", "b"), Un: ("a",), Cast: ("a",)}.get(type(n), ())
    return any(_uses(getattr(n, k), v) for k in kids)


def _inferable(g: Gen, s: Stmt, v: str, lo: object, hi: object, stated: dict) -> bool:
    """Whether TC's range inference certainly gives `v` the range lo:hi (see module doc)."""
    if not (isinstance(lo, Num) and lo.value == 0):
        return False
    if any(_uses(l2, v) or _uses(h2, v) for u, l2, h2, _ in s.ranges if u != v):
        return False
    found = False
    for e in [s.rhs, *(x for _, x in s.lets)]:
        for rd in _reads(e, []):
            t = g.tensors[rd.tensor]
            if t.output:  # an output's extents are not what TC bounds reads by here
                if any(_uses(sub, v) for sub in rd.subs):
                    return False
                continue
            for sub, (ext, _) in zip(rd.subs, t.dims, strict=True):
                if not _uses(sub, v):
                    continue
                if sub == Var(v) and ext == hi:
                    found = True
                    continue
                if isinstance(sub, Bin) and sub.op == "+" and sub.a == Var(v):
                    k = sub.b.name if isinstance(sub.b, Var) else None
                    kr = next((r for r in s.ranges if r[0] == k), None)
                    if (kr is not None and stated.get(k) and kr[1] == Num(0)
                            and hi == _plus(_minus(ext, kr[2]), Num(1))):  # fmt: skip
                        found = True
                        continue
                return False
    return found


def drop_wheres(g: Gen, s: Stmt, update: bool) -> Stmt:
    if update or s.op in ("+=", "max=", "min=", "*="):
        return s
    stated = {v: True for v, *_ in s.ranges}
    for v, lo, hi, _ in s.ranges:  # window variables (`k`) stay stated
        if g.rng.random() < 0.7 and _inferable(g, s, v, lo, hi, stated):
            stated[v] = False
    ranges = tuple((v, lo, hi, stated[v]) for v, lo, hi, _ in s.ranges)
    from dataclasses import replace

    return replace(s, ranges=ranges)


def _free_range(g: Gen) -> VarInfo:
    """The range of a variable no read bounds: a size, or a piecewise extent
    (`min(N, M)`, `max(N, 5)`, `max(min(N, M), 5)`, `N + 2`)."""
    r = g.rng
    e, ec = g.size()
    pick = r.choice(("plain", "plain", "plain", "min", "max", "maxmin", "plus"))
    if pick == "plain" or not isinstance(e, Size):
        return VarInfo(Num(0), e, 0, ec, {show(e)})
    f, fc = g.size()
    c = r.choice((2, 5))
    if pick == "min":
        return VarInfo(Num(0), Call("min", (e, f)), 0, min(ec, fc), {show(e), show(f)})
    if pick == "max":
        return VarInfo(Num(0), Call("max", (e, Num(c))), 0, max(ec, c))
    if pick == "maxmin":
        hi = Call("max", (Call("min", (e, f)), Num(c)))
        return VarInfo(Num(0), hi, 0, max(min(ec, fc), c))
    return VarInfo(Num(0), _plus(e, Num(c)), 0, ec + c)


def new_output_stmt(g: Gen) -> Stmt:
    r = g.rng
    rank = r.choices((0, 1, 2, 3), (1, 5, 4, 1))[0]
    lhs_vars = [g.fresh("i") for _ in range(rank)]
    name = "OPQRSTUV"[len(g.outputs)]
    sg = StmtGen(g, name, lhs_vars, {})
    rhs = sg.expr(r.choice((0, 1, 1, 2, 2, 3)))
    if not any(g.tensors[x.tensor].bound is None for x in _reads(rhs, [])):
        rhs = Bin("*", rhs, sg.read())  # no constant outputs
    dtypes = {t.name: t.dtype for t in g.tensors.values()}
    if g.grad and node_type(rhs, dtypes, {}, g.dtype) != g.dtype:
        # a float output of a double program (`c ? 0.5 : 1.5`; the forward oracle
        # models it as TC types it) has no float64 gradient to compare: read data
        rhs = Bin("*", rhs, sg.read())
    lets = ()
    if r.random() < 0.15:
        lets = (("t0", sg.expr(1)),)
        rhs = Bin(r.choice(("+", "*")), Var("t0"), rhs)
    for v in list(sg.pending):  # a left-hand-side variable no read used
        sg.introduce(v, _free_range(g))
    reds = [v for v in sg.order if v not in lhs_vars]
    subs: list = [Var(v) for v in lhs_vars]
    scatter = [v for v in reds if sg.scope[v].lo_c == 0 and isinstance(sg.scope[v].hi, Num | Size)]
    if subs and scatter and r.random() < 0.25:  # an affine scatter `O(i + k)`, `O(2 * i + k)`
        d = r.randrange(len(subs))
        c, c2 = r.choice((1, 1, 2)), r.choice((1, 1, 1, 2, 3))
        k = Var(scatter[0]) if c2 == 1 else Bin("*", Num(c2), Var(scatter[0]))
        subs[d] = Bin("+", subs[d] if c == 1 else Bin("*", Num(c), subs[d]), k)
    if reds or any(not isinstance(s, Var) for s in subs):
        op = r.choice(REDUCTIONS)
    else:
        op = r.choice(("=", "=", "=", "+=!", "max=!", "+="))
    if g.grad and op == "*=":
        op = "*=!"
    ranges = tuple((v, sg.scope[v].lo, sg.scope[v].hi, True) for v in sg.order)
    let_types = {n: node_type(e, dtypes, {}, g.dtype) for n, e in lets}
    g.tensors[name] = TensorInfo(name, node_type(rhs, dtypes, let_types, g.dtype), (), output=True)
    g.outputs.append(name)
    s = Stmt(name, tuple(subs), op, rhs, ranges, lets)
    return drop_wheres(g, s, update=False)


def update_stmt(g: Gen, name: str) -> Stmt | None:
    """A later write of output `name` over all or part of what it holds."""
    r = g.rng
    t = g.tensors[name]
    lhs_vars, scope = [], {}
    for e, ec in t.dims:
        v = g.fresh("i")
        lhs_vars.append(v)
        if ec >= 2 and r.random() < 0.3 and r.random() < 0.5:
            scope[v] = VarInfo(Num(1), e, 1, ec, {show(e)})
        elif ec >= 2 and r.random() < 0.3:
            scope[v] = VarInfo(Num(0), _minus(e, Num(1)), 0, ec - 1, {show(e)})
        else:
            scope[v] = VarInfo(Num(0), e, 0, ec, {show(e)})
    sg = StmtGen(g, name, lhs_vars, scope)
    op = r.choice(("=", "=", "+=", "max=", "min=", "*=", "+=", "+=!"))
    if g.grad and op == "*=":
        op = "+="
    shifted = None
    if op == "=":
        sg.self_read = (name, tuple(Var(v) for v in lhs_vars))
        if t.dims and r.random() < 0.3:  # a reversed read of the old contents
            d = r.randrange(len(t.dims))
            subs = [Var(v) for v in lhs_vars]
            if scope[lhs_vars[d]].lo_c == 0 and show(scope[lhs_vars[d]].hi) == show(t.dims[d][0]):
                subs[d] = _minus(_minus(t.dims[d][0], Num(1)), Var(lhs_vars[d]))
            sg.self_read = (name, tuple(subs))
        elif not g.grad and t.dims and r.random() < 0.4:  # a shifted read `O(i - 1)`
            sg.self_read = (name, _shifted(lhs_vars, scope, t.dims, r.randrange(len(t.dims))))
            shifted = Read(*sg.self_read)
    sg.pending = []
    sg.allow_new = op != "="  # an `=` reading its own output has no reduction
    rhs = sg.expr(r.choice((0, 1, 1, 2)))
    if shifted is not None and shifted not in _reads(rhs, []):
        rhs = Bin("+", shifted, rhs)
    ranges = tuple((v, sg.scope[v].lo, sg.scope[v].hi, True) for v in sg.order)
    return Stmt(name, tuple(Var(v) for v in lhs_vars), op, rhs, ranges)


def _shifted(lhs_vars: list, scope: dict, dims: tuple, d: int) -> tuple:
    """Subscripts of the written element shifted by one in dimension `d`: `v + 1` over
    `0:E - 1`, else `v - 1` over `1:E` (a full range `0:E` is narrowed to that)."""
    subs = [Var(v) for v in lhs_vars]
    v, (e, ec) = lhs_vars[d], dims[d]
    if show(scope[v].hi) == show(_minus(e, Num(1))) and scope[v].lo_c == 0:
        subs[d] = Bin("+", Var(v), Num(1))
    elif ec >= 2:
        if scope[v].lo_c == 0:
            scope[v] = VarInfo(Num(1), e, 1, ec, {show(e)})
        subs[d] = Bin("-", Var(v), Num(1))
    return tuple(subs)


def _record_dims(g: Gen, s: Stmt) -> None:
    """An output's dimensions after its first write: (extent Node, concrete)."""
    t = g.tensors[s.lhs]
    if t.dims or not s.subs:
        return
    shape = output_shapes(Program("f", g.dtype, (), (), (s.lhs,), (s,)), g.sizes)[s.lhs]
    scope = {v: (lo, hi) for v, lo, hi, _ in s.ranges}
    dims, readable = [], True
    for sub, ec in zip(s.subs, shape, strict=True):
        e = scope[sub.name][1] if isinstance(sub, Var) else Num(ec)
        if not isinstance(sub, Var) or _has_var(e):
            e, readable = Num(ec), False
        dims.append((e, ec))
    g.tensors[s.lhs] = TensorInfo(t.name, t.dtype, tuple(dims), output=True, readable=readable)


def _has_var(n: object) -> bool:
    if isinstance(n, Var):
        return True
    if isinstance(n, Bin):
        return _has_var(n.a) or _has_var(n.b)
    if isinstance(n, Call):
        return any(_has_var(a) for a in n.args)
    return False


def generate(seed: int, exact: bool = True, grad: bool = False) -> Program:
    """A random program (deterministic in `seed`); retries internally until valid."""
    for attempt in range(50):
        try:
            return _generate(seed * 1000 + attempt, exact, grad)
        except Invalid:
            continue
    raise Invalid(f"seed {seed}: no valid program in 50 attempts")


def _generate(seed: int, exact: bool, grad: bool) -> Program:
    from tools.fuzz_idioms import idiom

    g = Gen(seed, exact, grad)
    if g.rng.random() < 0.15:
        return idiom(g)
    n = g.rng.choices((1, 2, 3, 4), (4, 4, 2, 1))[0]
    for _ in range(n):
        updatable = [o for o in g.outputs if g.tensors[o].readable]
        if updatable and g.rng.random() < 0.4:
            s = update_stmt(g, g.rng.choice(updatable))
        else:
            s = new_output_stmt(g)
        g.stmts.append(s)
        _record_dims(g, s)
    return finish(g)


def finish(g: Gen) -> Program:
    inputs = []
    for name in g.inputs:
        t = g.tensors[name]
        inputs.append(Tensor(name, t.dtype, tuple(d for d, _ in t.dims)))
    bounds = tuple((n, g.tensors[n].bound[0]) for n in g.inputs if g.tensors[n].bound)
    p = Program("f", g.dtype, tuple(sorted(g.sizes.items())), tuple(inputs), tuple(g.outputs),
                tuple(g.stmts), bounds=bounds)  # fmt: skip
    p = _bound_sizes(p)
    output_shapes(p, dict(p.sizes))
    return p


def _bound_sizes(p: Program) -> Program:
    """Drop sizes nothing uses; a size used but bound by no input's plain dimension
    (how TC binds sizes) makes the program Invalid."""
    import re

    from tools.fuzz_ir import show_stmt

    bound = {d.name for t in p.inputs for d in t.dims if isinstance(d, Size)}
    text = "\n".join([*(show_stmt(s) for s in p.stmts), *(show(b) for _, b in p.bounds)])
    for name, _ in p.sizes:
        if name not in bound and re.search(rf"\b{name}\b", text):
            raise Invalid(f"size {name} is bound by no input")
    return dataclasses.replace(p, sizes=tuple((n, v) for n, v in p.sizes if n in bound))
