"""Tests of the differential fuzzer itself (tools/fuzz*.py): its oracle against NumPy
written here by hand, its printer against tcc's parser, its reducer on a synthetic
failure, and its verdicts on deliberately wrong "systems" (fake kernels)."""

from __future__ import annotations

import dataclasses
import random

import numpy as np
import pytest

import compiler
from tools import fuzz, fuzz_run
from tools.fuzz_gen import Gen, generate
from tools.fuzz_idioms import idiom
from tools.fuzz_ir import (
    Bin,
    Call,
    Num,
    Program,
    Read,
    Size,
    Stmt,
    Tensor,
    Var,
    evaluate,
    show_program,
)
from tools.fuzz_reduce import _inline_let, reduce, size_of

V, S = Var, Size


def _prog(inputs: list, outputs: list, stmts: list, sizes: dict, dtype: str = "double") -> Program:
    return Program("f", dtype, tuple(sorted(sizes.items())), tuple(inputs), tuple(outputs),
                   tuple(stmts))  # fmt: skip


def _r(v: str, hi: object, lo: object = Num(0), stated: bool = True) -> tuple:
    return (v, lo, hi, stated)


RNG = np.random.default_rng(0)


def test_oracle_window_scatter_and_partial_update() -> None:
    a, w = RNG.standard_normal(7), RNG.standard_normal(3)
    inputs = [Tensor("A", "double", (S("N"),)), Tensor("W", "double", (S("K"),))]
    conv = Stmt("O", (V("i"),), "+=!", Bin("*", Read("A", (Bin("+", V("i"), V("k")),)),
                Read("W", (V("k"),))), (_r("i", Bin("+", Bin("-", S("N"), S("K")), Num(1))),
                _r("k", S("K"))))  # fmt: skip
    scatter = Stmt("P", (Bin("+", Bin("*", Num(2), V("i")), V("k")),), "+=!",
                   Bin("*", Read("A", (V("i"),)), Read("W", (V("k"),))),
                   (_r("i", S("N")), _r("k", S("K"))))  # fmt: skip
    rev = Stmt("O", (V("j"),), "=", Read("O", (Bin("-", Bin("-", Bin("-", S("N"), S("K")),
               Num(0)), V("j")),)), (_r("j", Bin("+", Bin("-", S("N"), S("K")), Num(1)), Num(1)),))  # fmt: skip
    p = _prog(inputs, ["O", "P"], [conv, scatter, rev], {"N": 7, "K": 3})
    got = evaluate(p, {"N": 7, "K": 3}, {"A": a, "W": w}).values
    o = np.array([a[i : i + 3] @ w for i in range(5)])
    want_o = o.copy()
    want_o[1:] = o[[3, 2, 1, 0]]  # j in 1:5 reads the old O(4 - j)
    want_p = np.zeros(2 * 6 + 3)
    for i in range(7):
        for k in range(3):
            want_p[2 * i + k] += a[i] * w[k]
    np.testing.assert_allclose(got["O"], want_o, rtol=1e-12)
    np.testing.assert_allclose(got["P"], want_p, rtol=1e-12)


def test_oracle_bang_sets_the_whole_output_and_max_partial() -> None:
    x = RNG.standard_normal((4, 5))
    inputs = [Tensor("X", "double", (S("N"), S("M")))]
    first = Stmt("O", (V("i"),), "=", Read("X", (V("i"), Num(0))), (_r("i", S("N")),))
    again = Stmt("O", (V("i"),), "max=!", Read("X", (V("i"), V("k"))),
                 (_r("i", S("N"), Num(2)), _r("k", S("M"))))  # fmt: skip
    tri = Stmt("T", (V("i"),), "+=!", Read("X", (V("k"), V("i"))),
               (_r("i", S("N")), _r("k", Bin("+", V("i"), Num(1)))))  # fmt: skip
    p = _prog(inputs, ["O", "T"], [first, again, tri], {"N": 4, "M": 5})
    got = evaluate(p, {"N": 4, "M": 5}, {"X": x}).values
    want = np.full(4, -np.inf)  # `max=!` sets all of O to the identity first
    want[2:] = x[2:].max(axis=1)
    np.testing.assert_array_equal(got["O"], want)
    np.testing.assert_allclose(got["T"], [x[: i + 1, i].sum() for i in range(4)], rtol=1e-12)


def test_oracle_indirect_clamp_floordiv_let_and_0d() -> None:
    a = RNG.standard_normal(5)
    idx = np.array([4, 0, 2], dtype=np.int32)
    inputs = [Tensor("A", "double", (S("N"),)), Tensor("idx", "int32", (S("M"),)),
              Tensor("s", "double", ())]  # fmt: skip
    gather = Stmt("O", (V("i"),), "=", Bin("*", Read("A", (Read("idx", (V("i"),)),)), V("t")),
                  (_r("i", S("M")),), (("t", Read("s", ())),))  # fmt: skip
    clamp = Stmt("P", (V("i"),), "+=!", Read("A", (Call("min", (Bin("+", V("i"), V("k")),
                 Bin("-", S("N"), Num(1)))),)), (_r("i", S("N")), _r("k", Num(3))))  # fmt: skip
    half = Stmt("Q", (V("i"),), "+=!", Read("A", (Bin("/", Bin("+", V("i"), V("l")), Num(2)),)),
                (_r("i", Num(4)), _r("l", Num(2))))  # fmt: skip
    total = Stmt("Z", (), "+=!", Read("A", (V("k"),)), (_r("k", S("N")),))
    p = _prog(inputs, ["O", "P", "Q", "Z"], [gather, clamp, half, total], {"N": 5, "M": 3})
    got = evaluate(p, {"N": 5, "M": 3}, {"A": a, "idx": idx, "s": np.float64(1.5)}).values
    np.testing.assert_allclose(got["O"], a[idx] * 1.5, rtol=1e-12)
    np.testing.assert_allclose(got["P"], [a[np.minimum(np.arange(i, i + 3), 4)].sum()
                                          for i in range(5)], rtol=1e-12)  # fmt: skip
    np.testing.assert_allclose(got["Q"], [a[i // 2] + a[(i + 1) // 2] for i in range(4)])
    assert got["Z"].shape == () and np.isclose(got["Z"], a.sum())


@pytest.mark.parametrize("kind", ["matmul", "softmax", "norm", "pool"])
def test_oracle_on_generated_idioms(kind: str) -> None:
    g = Gen(5, exact=False, grad=False)
    p = idiom(g, kind)
    from tools.fuzz_run import make_inputs

    data = make_inputs(p, 3, exact=False)
    got = evaluate(p, dict(p.sizes), {k: v.astype(np.float64) for k, v in data.items()}).values
    if kind == "matmul":
        want = data["A"].astype(np.float64) @ data["B"]
        if "bias" in data:
            want = np.maximum(want + data["bias"], 0)
        np.testing.assert_allclose(got["C"], want, rtol=1e-12, atol=1e-12)
    elif kind == "softmax":
        x = data["X"].astype(np.float64)
        e = np.exp(x - x.max(axis=1, keepdims=True))
        np.testing.assert_allclose(got["Y"], e / e.sum(axis=1, keepdims=True), rtol=1e-6)
    elif kind == "norm":
        x = data["X"].astype(np.float64)
        y = (x - x.mean(1, keepdims=True)) / np.sqrt(x.var(1, keepdims=True) + 0.125)
        np.testing.assert_allclose(got["Y"], y, rtol=1e-6, atol=1e-6)
    else:
        x, k = data["X"].astype(np.float64), p.stmts[0].ranges[2][2].value
        s = 2 if "2 * i" in show_program(p) else 1
        cols = (x.shape[1] - k) // s + 1
        want = np.array([[x[m, s * i : s * i + k].max() for i in range(cols)]
                         for m in range(x.shape[0])])  # fmt: skip
        np.testing.assert_array_equal(got["O"], want)


@pytest.mark.parametrize("seed", range(6))
def test_printed_programs_parse_and_match_the_interpreter_shapes(seed: int) -> None:
    p = generate(seed, exact=True)
    data = fuzz_run.make_inputs(p, seed, exact=True)
    shapes = compiler.infer_shapes(show_program(p), "f", {k: v.shape for k, v in data.items()})
    exp = evaluate(p, dict(p.sizes), {k: v.astype(np.float64) for k, v in data.items()})
    assert {k: tuple(v) for k, v in shapes.items()} == {o: exp.values[o].shape for o in p.outputs}


def test_reducer_shrinks_a_synthetic_failure() -> None:
    p = next(q for q in (generate(s) for s in range(40)) if len(q.stmts) >= 3
             and "min(" in show_program(q))  # fmt: skip

    def fails(c: Program) -> bool:  # the "bug": any clamped subscript
        return "min(" in show_program(c)

    small = reduce(p, fails)
    assert fails(small)
    assert len(small.stmts) == 1 and size_of(small) < size_of(p)
    assert len(small.inputs) <= len(p.inputs)


def test_the_reducer_inlines_a_let_it_removes() -> None:
    """A let is dropped with its value substituted where it is used: dropped alone, the
    right-hand side still named it (a KeyError that ended the reduction of fuzz seed
    62358). The inlined program means the same."""
    p = next(q for q in (generate(s, grad=True) for s in range(200))
             if any(len(x.lets) == 1 for x in q.stmts))  # fmt: skip
    k = next(i for i, x in enumerate(p.stmts) if len(x.lets) == 1)
    inlined = dataclasses.replace(
        p, stmts=(*p.stmts[:k], _inline_let(p.stmts[k], 0), *p.stmts[k + 1 :])
    )
    assert not inlined.stmts[k].lets and p.stmts[k].lets[0][0] not in show_program(inlined)
    inputs = fuzz_run.make_inputs(p, 0, exact=False)
    want, got = evaluate(p, dict(p.sizes), inputs), evaluate(inlined, dict(p.sizes), inputs)
    for name, values in want.values.items():
        np.testing.assert_array_equal(got.values[name], values)


def test_a_tiny_product_of_normal_values_is_not_taken_for_exact() -> None:
    """`P *=! A(k2, k3, 0)` over 33 x 33 normal values is about 3e-303: its binary
    places pass the oracle's cap of 400, below which a small magnitude looked exact
    (tolerance 0, and llvm's last bit failed it: fuzz seed 70750)."""
    p = generate(70750, exact=False, grad=True)
    expected = evaluate(p, dict(p.sizes), fuzz_run.make_inputs(p, 70750, exact=False))
    assert 0 < abs(float(expected.values["P"])) < 1e-290
    assert float(expected.tol["P"]) > 0


class _Wrong:
    """A fake kernel: the real interp kernel with one output element perturbed."""

    def __init__(self, k: object, delta: float) -> None:
        self.k, self.delta = k, delta

    def __call__(self, *args: object) -> tuple:
        outs = [np.array(o) for o in self.k(*args)]
        outs[0].reshape(-1)[-1] += self.delta
        return tuple(outs)

    def vjp(self, *args: object, grad_outputs: object) -> tuple:
        return tuple(None if g is None else g * 1.001 for g in self.k.vjp(*args,
                     grad_outputs=grad_outputs))  # fmt: skip

    def jvp(self, *args: object, tangents: object) -> tuple:
        return self.k.jvp(*args, tangents=tangents)


def _fake(monkeypatch: pytest.MonkeyPatch, make: object) -> None:
    real = fuzz_run.compile_for

    def compile_for(p: Program, target: str, seed: int) -> tuple:
        k, opts = real(p, "interp", seed)
        return make(k), opts

    monkeypatch.setattr(fuzz_run, "compile_for", compile_for)


def test_a_perturbed_result_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    p = generate(0, exact=True)
    _fake(monkeypatch, lambda k: _Wrong(k, 2.0**-20))  # exact data: any difference is a bug
    outcomes = fuzz_run.check_forward(p, 0, ("interp",), exact=True)
    assert [o.kind for o in outcomes] == ["wrong"]
    assert outcomes[0].signature == f"wrong:interp:{p.outputs[0]}"


def test_a_wrong_gradient_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    from tools.fuzz_grad import check_gradients

    def checked(q: Program) -> list:
        return [(o.kind, o.target) for o in check_gradients(q, 1, ("interp",))]

    p = next(q for q in (generate(s, exact=False, grad=True) for s in range(40))
             if checked(q) == [("ok", "grad-interp"), ("ok", "jvp-interp")])  # fmt: skip
    _fake(monkeypatch, lambda k: _Wrong(k, 0.0))  # every gradient 0.1% off
    assert checked(p) == [("wrong", "grad-interp")]


def test_crashes_and_rejections_are_told_apart(monkeypatch: pytest.MonkeyPatch) -> None:
    p = generate(1, exact=False)

    def boom(exc: Exception) -> object:
        def compile_for(*a: object) -> tuple:
            raise exc

        return compile_for

    monkeypatch.setattr(fuzz_run, "compile_for", boom(RuntimeError("segfault-ish 12")))
    (o,) = fuzz_run.check_forward(p, 1, ("llvm",), exact=False)[-1:]
    assert (o.kind, o.signature) == ("crash", "crash:llvm:RuntimeError: segfault-ish #")
    monkeypatch.setattr(fuzz_run, "compile_for", boom(compiler.RangeError("no range for 'k'")))
    (o,) = fuzz_run.check_forward(p, 1, ("llvm",), exact=False)[-1:]
    assert o.kind == "rejected" and "'_'" in o.signature


def _then_a_good_program(task: str, seed: int, timeout: float) -> list:
    """The results of `task` on a pool of one worker, then of seed 3 (fine) on it."""
    pool = fuzz.Pool(1)
    got: list = []
    try:
        cfg = fuzz.Config(targets=("interp",))
        pool.map([(task, seed, cfg, None)], timeout, lambda t, r: got.append(r))
        pool.map([("run", 3, cfg, None)], 120.0, lambda t, r: got.append(r))
    finally:
        pool.close()
    assert got[1]["seed"] == 3 and all(o["kind"] == "ok" for o in got[1]["outcomes"])
    return got


def test_a_hanging_program_is_killed_and_the_worker_replaced() -> None:
    got = _then_a_good_program("sleep", 600, 0.5)
    assert got[0] == {"seed": 600, "hang": True, "target": ""}


def test_a_target_that_kills_its_process_is_a_crash_of_that_target() -> None:
    got = _then_a_good_program("crash", 5, 60.0)  # the second program: a new worker
    assert got[0] == {"seed": 5, "died": "llvm", "code": 139}
    table, first = fuzz.summarise(got)
    assert first == {"crash:llvm:the process died (exit code 139)": (5,)}
    assert fuzz.representatives(first) == {next(iter(first)): 5}  # reduced in forked children


def test_a_death_is_told_from_a_survival_in_a_forked_child() -> None:
    import os
    import signal

    assert fuzz._kills_its_process(lambda: os.kill(os.getpid(), signal.SIGKILL), 30.0)
    assert fuzz._kills_its_process(lambda: os._exit(3), 30.0)
    assert not fuzz._kills_its_process(lambda: None, 30.0)
    assert not fuzz._kills_its_process(lambda: 1 / 0, 30.0)  # an exception is an outcome


def test_generation_is_deterministic() -> None:
    assert show_program(generate(11)) == show_program(generate(11))
    assert random.Random(1).random() == random.Random(1).random()


def test_one_reduction_per_failure_across_targets() -> None:
    first = {"wrong:llvm:O": (2, 7), "wrong:interp:O": (2, 7), "wrong:llvm-t2:O": (9,),
             "rejected:grad-llvm:E: m": (3,), "rejected:grad-interp:E: m": (4,),
             "rejected:jvp-llvm:E: m": (5,), "hang:(program):timeout": (6,)}  # fmt: skip
    assert fuzz.representatives(first) == {
        "wrong:interp:O": 2,
        "wrong:llvm-t2:O": 9,  # other seeds: another bug
        "rejected:grad-interp:E: m": 4,
        "rejected:jvp-llvm:E: m": 5,
    }


def test_summary_groups_by_signature() -> None:
    ok = {"kind": "ok", "target": "llvm", "signature": "", "detail": ""}
    bad = {"kind": "wrong", "target": "llvm", "signature": "wrong:llvm:O", "detail": ""}
    results = [{"seed": 1, "outcomes": [ok]}, {"seed": 2, "outcomes": [bad]},
               {"seed": 3, "outcomes": [bad]}, {"seed": 4, "hang": True}]  # fmt: skip
    table, first = fuzz.summarise(results)
    assert first == {"wrong:llvm:O": (2, 3), "hang:(program):timeout": (4,)}
    assert "   2  wrong:llvm:O" in table


def test_one_value_as_several_candidates_is_no_kink_for_gradients() -> None:
    # both k give the same candidate, A(0) + A(i): one value, differentiable, and tcc
    # splits the adjoint between the two (docs/language.md, the tie rule), so the
    # gradient check runs; a near tie of distinct values would still skip it
    rhs = Read("A", (Call("min", (V("k"), Num(0))),))
    tie = Stmt("O", (V("i"),), "max=!", Bin("+", rhs, Read("A", (V("i"),))),
               (_r("i", S("N")), _r("k", Num(2))))  # fmt: skip
    p = _prog([Tensor("A", "double", (S("N"),))], ["O"], [tie], {"N": 3})
    a = RNG.standard_normal(3)
    exp = evaluate(p, {"N": 3}, {"A": a})
    assert exp.gap > 1.0  # no other candidate value: nothing within reach of a tie
    assert exp.stable["O"].all()
    from tools.fuzz_ir import show_program

    (g,) = compiler.define(show_program(p), target="interp").vjp(a, grad_outputs=(np.ones(3),))
    np.testing.assert_allclose(g, [4.0, 1.0, 1.0], rtol=1e-12)  # dO(i)/dA(0) = 1 + [i == 0]


def test_finite_differences_keep_a_small_output_beside_a_huge_one() -> None:
    # seed 22680: P, a product of many terms, is about 4e17 and does not change; O's
    # change is about 1. Summed into one loss first, O's part fell below P's rounding.
    from tools import fuzz_grad
    from tools.fuzz_ir import show_program

    p = generate(22680, exact=False, grad=True)
    inputs, values, _ = fuzz_grad._data(p, 22680)
    cots = [np.ones_like(values[o]) for o in p.outputs]
    step = fuzz_grad.STEP
    up = dict(inputs, A=inputs["A"] + step)
    down = dict(inputs, A=inputs["A"] - step)
    fd = fuzz_grad._difference(p, up, down, cots) / (2 * step)
    k = compiler.define(show_program(p), target="interp")
    grads = k.vjp(inputs["A"], grad_outputs=tuple(cots))
    assert abs(values["P"]).max() > 1e15
    assert fd != 0.0 and abs(fd - float(np.sum(grads[0]))) <= 1e-5 * abs(fd)


def test_an_fma_is_on_the_grid_of_its_addend_too() -> None:
    """`fma(1.5, int32(A(k)), A(i))` summed over k: exact in the product, but the
    addend's normal float32 value makes the float32 sum round (fuzz seed 101905: the
    oracle left the addend's binary places out, asked for tolerance 0, and interp and
    llvm differed from it in the last bit)."""
    p = generate(101905, exact=False, grad=False)
    expected = evaluate(p, dict(p.sizes), fuzz_run.make_inputs(p, 101905, exact=False))
    assert all(float(np.max(t)) > 0 for t in expected.tol.values())
