"""Idioms for the fuzzer: matmul, convolutions (strided, dilated, clamp-padded,
zero-padded by a guarded read, transposed), softmax, layer norm, max pooling -- built
in the fuzzer's own IR with random sizes, so the oracle knows their meaning like any
generated program."""

from __future__ import annotations

import random

from tools.fuzz_ir import Bin, Call, Cond, Num, Read, Size, Stmt, Var

V, N, S = Var, Num, Size


def _add(*xs: object) -> object:
    out = xs[0]
    for x in xs[1:]:
        out = Bin("+", out, x)
    return out


def _rng(v: str, lo: object, hi: object, stated: bool = True) -> tuple:
    return (v, lo, hi, stated)


KINDS = ("matmul", "bmm", "conv", "tconv", "softmax", "norm", "pool")


def idiom(g: object, kind: str | None = None) -> object:
    """One idiom (`kind`, or a random one) with random sizes, as a Program."""
    from tools.fuzz_gen import TensorInfo, finish

    r = g.rng
    kind = kind or r.choice(KINDS)
    pick = (1, 2, 3, 5, 7, 13, 17)
    for n in ("N", "M", "K"):
        g.sizes[n] = r.choice(pick)

    def inp(name: str, *dims: object) -> None:
        g.tensors[name] = TensorInfo(name, g.dtype, tuple((d, 0) for d in dims))
        g.inputs.append(name)

    def out(name: str) -> None:
        g.outputs.append(name)

    i, j, k = V("i"), V("j"), V("k")
    if kind in ("matmul", "bmm"):
        b = () if kind == "matmul" else (V("b"),)
        if b:
            g.sizes["L"] = r.choice((1, 2, 3))
        lead = (S("L"),) if b else ()
        inp("A", *lead, S("N"), S("K"))
        inp("B", *lead, S("K"), S("M"))
        rhs = Bin("*", Read("A", (*b, i, k)), Read("B", (*b, k, j)))
        if r.random() < 0.3:  # a 0-d scale inside the product
            inp("s")
            rhs = Bin("*", rhs, Read("s", ()))
        rb = (_rng("b", N(0), S("L"), False),) if b else ()
        mm = (*rb, _rng("i", N(0), S("N"), False), _rng("j", N(0), S("M"), False))
        g.stmts.append(Stmt("C", (*b, i, j), "+=!", rhs, (*mm, _rng("k", N(0), S("K"), False))))
        out("C")
        if r.random() < 0.5:
            inp("bias", S("M"))
            g.stmts.append(Stmt("C", (*b, i, j), "=", Call("fmax", (
                Bin("+", Read("C", (*b, i, j)), Read("bias", (j,))), N(0.0))), mm))  # fmt: skip
    elif kind == "conv":
        s, d = r.choice((1, 2, 3)), r.choice((1, 2))
        g.sizes["K"] = r.choice((1, 2, 3))
        g.sizes["N"] = max(g.sizes["N"], d * (g.sizes["K"] - 1) + 1)
        inp("I", S("M"), S("N"))
        inp("W", S("L"), S("M"), S("K"))
        g.sizes["L"] = r.choice((1, 2, 3))
        c = V("c")
        guard = None
        if not g.grad and r.random() < 0.25:  # zero-padded: a guarded read, same length
            pad = g.sizes["K"] // 2
            sub = Bin("-", _add(i, k), N(pad)) if pad else _add(i, k)
            guard = Bin("&&", Bin(">=", sub, N(0)), Bin("<", sub, S("N")))
            ranges = (_rng("i", N(0), S("N")), _rng("k", N(0), S("K")))
        elif r.random() < 0.4:  # clamp-padded ("replicate"), output as long as the input
            sub = Call("max", (Call("min", (Bin("-", _add(i, k), N(1)), Bin("-", S("N"), N(1)))),
                               N(0)))  # fmt: skip
            ranges = (_rng("i", N(0), S("N")), _rng("k", N(0), S("K")))
        else:
            sub = _add(Bin("*", N(s), i) if s > 1 else i, Bin("*", N(d), k) if d > 1 else k)
            span = d * (g.sizes["K"] - 1)
            hi = _add(Bin("/", Bin("-", S("N"), N(span + 1)), N(s)), N(1))
            ranges = (_rng("i", N(0), hi), _rng("k", N(0), S("K")))
        rhs = Bin("*", Read("I", (c, sub)), Read("W", (V("o"), c, k)))
        rhs = rhs if guard is None else Cond(guard, rhs, N(0.0))
        ranges = (_rng("o", N(0), S("L"), False), *ranges, _rng("c", N(0), S("M"), False))
        g.stmts.append(Stmt("O", (V("o"), i), "+=!", rhs, ranges))
        out("O")
    elif kind == "tconv":
        s = r.choice((1, 2, 3))
        lhs = (_add(Bin("*", N(s), i) if s > 1 else i, k),)
        tr = (_rng("i", N(0), S("N"), False), _rng("k", N(0), S("K"), False))
        # channels (`O(o, 2 * i + k) +=! I(c, i) * W(c, o, k)`: a partial scatter with a
        # sum of its own, `cpu.factor`) for half the seeds, drawn apart from `r` so
        # that the other programs of every seed stay what they were
        if random.Random(f"channels-{g.seed}").random() < 0.5:
            g.sizes["L"] = r.choice((1, 2, 3))
            inp("I", S("M"), S("N"))
            inp("W", S("M"), S("L"), S("K"))
            c, m = V("c"), V("o")
            rhs = Bin("*", Read("I", (c, i)), Read("W", (c, m, k)))
            tr = (_rng("o", N(0), S("L"), False), *tr, _rng("c", N(0), S("M"), False))
            g.stmts.append(Stmt("O", (m, *lhs), "+=!", rhs, tr))
        else:
            inp("I", S("N"))
            inp("W", S("K"))
            g.stmts.append(Stmt("O", lhs, "+=!", Bin("*", Read("I", (i,)), Read("W", (k,))), tr))
        out("O")
    elif kind == "softmax":
        inp("X", S("N"), S("M"))
        ij = (_rng("i", N(0), S("N"), False), _rng("j", N(0), S("M"), False))
        g.stmts.append(Stmt("mx", (i,), "max=!", Read("X", (i, j)), ij))
        e = Call("exp", (Bin("-", Read("X", (i, j)), Read("mx", (i,))),))
        g.stmts.append(Stmt("ex", (i, j), "=", e, ij))
        g.stmts.append(Stmt("sm", (i,), "+=!", Read("ex", (i, j)), ij))
        y = Bin("/", Read("ex", (i, j)), Read("sm", (i,)))
        g.stmts.append(Stmt("Y", (i, j), "=", y, ij))
        for o in ("mx", "ex", "sm", "Y"):
            out(o)
    elif kind == "norm":
        inp("X", S("N"), S("M"))
        ij = (_rng("i", N(0), S("N"), False), _rng("j", N(0), S("M"), False))
        ij2 = (_rng("i", N(0), S("N")), _rng("j", N(0), S("M")))
        g.stmts.append(Stmt("mean", (i,), "+=!", Bin("/", Read("X", (i, j)), S("M")), ij))
        dev = Bin("-", Read("X", (i, j)), Read("mean", (i,)))
        g.stmts.append(Stmt("var", (i,), "+=!", Bin("/", Bin("*", dev, dev), S("M")), ij2))
        y = Bin("*", dev, Call("rsqrt", (Bin("+", Read("var", (i,)), N(0.125)),)))
        g.stmts.append(Stmt("Y", (i, j), "=", y, ij2))
        for o in ("mean", "var", "Y"):
            out(o)
    else:  # pool
        g.sizes["K"] = r.choice((1, 2, 3))
        g.sizes["N"] = max(g.sizes["N"], g.sizes["K"])
        s = r.choice((1, 2))
        inp("X", S("M"), S("N"))
        sub = _add(Bin("*", N(s), i) if s > 1 else i, k)
        kk = N(g.sizes["K"])  # a literal window: no input binds K
        hi = _add(Bin("/", Bin("-", S("N"), kk), N(s)), N(1))
        ranges = (_rng("j", N(0), S("M"), False), _rng("i", N(0), hi), _rng("k", N(0), kk))
        g.stmts.append(Stmt("O", (j, i), "max=!", Read("X", (j, sub)), ranges))
        out("O")
    return finish(g)
