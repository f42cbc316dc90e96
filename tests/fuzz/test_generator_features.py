"""Generator features beyond the basics, each with the oracle checked against NumPy
written here by hand: a zero-padded convolution (a guarded read), an `=` update that
reads its own output shifted by one (it sees the values before the statement); both in
forward programs only."""

from __future__ import annotations

import re

import numpy as np

from tools.fuzz_gen import Gen, generate
from tools.fuzz_idioms import idiom
from tools.fuzz_ir import Bin, Num, Program, Read, Size, Stmt, Tensor, Var, evaluate, show_stmt
from tools.fuzz_run import make_inputs

V, S = Var, Size


def _padded_conv() -> Program:
    for seed in range(200):
        p = idiom(Gen(seed, exact=False, grad=False), "conv")
        if "&&" in show_stmt(p.stmts[0]):
            return p
    raise AssertionError("no zero-padded convolution in 200 seeds")


def test_oracle_zero_padded_convolution() -> None:
    p = _padded_conv()
    data = {k: v.astype(np.float64) for k, v in make_inputs(p, 1, exact=False).items()}
    x, w = data["I"], data["W"]
    (m, n), (ell, _, k) = x.shape, w.shape
    pad = k // 2
    xp = np.concatenate([np.zeros((m, pad)), x, np.zeros((m, k))], axis=1)
    want = np.array([[sum(xp[c, i + j] * w[o, c, j] for c in range(m) for j in range(k))
                      for i in range(n)] for o in range(ell)])  # fmt: skip
    np.testing.assert_allclose(evaluate(p, dict(p.sizes), data).values["O"], want, rtol=1e-12,
                               atol=1e-12)  # fmt: skip


def test_oracle_shifted_self_read_sees_the_values_before_the_statement() -> None:
    a = np.array([0.5, -1.0, 2.0, 3.0, -0.25])
    first = Stmt("O", (V("i"),), "=", Read("A", (V("i"),)), (("i", Num(0), S("N"), True),))
    shift = Stmt("O", (V("i"),), "=", Bin("*", Read("O", (Bin("-", V("i"), Num(1)),)), Num(2.0)),
                 (("i", Num(1), S("N"), True),))  # fmt: skip
    p = Program("f", "double", (("N", 5),), (Tensor("A", "double", (S("N"),)),), ("O",),
                (first, shift))  # fmt: skip
    want = np.concatenate([a[:1], 2 * a[:-1]])  # not a running product: each reads old O
    np.testing.assert_array_equal(evaluate(p, {"N": 5}, {"A": a}).values["O"], want)


def _has_shifted_self_read(p: Program) -> bool:
    for s in p.stmts:
        rhs = show_stmt(s).split(" = ", 1)[1] if s.op == "=" else ""
        if re.search(rf"\b{s.lhs}\([^)]*[-+] 1\b", rhs):
            return True
    return False


def test_the_features_are_drawn_in_forward_programs_only() -> None:
    forward = [generate(s, exact=s % 2 == 0) for s in range(600)]
    assert sum(_has_shifted_self_read(p) for p in forward) >= 3
    assert sum("&&" in show_stmt(p.stmts[0]) and "W(o, c, k)" in show_stmt(p.stmts[0])
               for p in forward) >= 1  # fmt: skip
    grad = [generate(s, exact=False, grad=True) for s in range(100)]
    assert not any(_has_shifted_self_read(p) for p in grad)
