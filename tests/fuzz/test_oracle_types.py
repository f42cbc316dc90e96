"""The fuzzer's oracle on TC's typing, casts and C's rounding functions, against NumPy
written here by hand: an output is typed by its first write (a ternary of float literals
is float32 even in a double def), and `trunc`/`ceil`/`floor`/`round` keep the sign of
zero that `copysign` sees (the two "wrong on every target" reports of seeds 11817 and
12190); value casts truncate toward zero or round to float32, integer division
truncates, and an int32 cast out of range is outside what the oracle models."""

from __future__ import annotations

import numpy as np
import pytest

from tools import fuzz_run
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
    Var,
    evaluate,
    node_type,
)

V, S = Var, Size


def _prog(inputs: list, outputs: list, stmts: list, sizes: dict) -> Program:
    return Program("f", "double", tuple(sorted(sizes.items())), tuple(inputs), tuple(outputs),
                   tuple(stmts))  # fmt: skip


def _r(v: str, hi: object, lo: object = Num(0)) -> tuple:
    return (v, lo, hi, True)


def _literal_ternary_program() -> Program:
    """O(i) min=! A(i + k) != 1.0 ? 0.5 : 1.5 where k in 0:3, then Q float, P double."""
    a = Read("A", (Bin("+", V("i"), V("k")),))
    first = Stmt("O", (V("i"),), "min=!", Cond(Bin("!=", a, Num(1.0)), Num(0.5), Num(1.5)),
                 (_r("i", Bin("+", Bin("-", S("N"), Num(3)), Num(1))), _r("k", Num(3))))  # fmt: skip
    q0 = Stmt("Q", (V("i"),), "=", Cond(Bin(">", Read("A", (V("i"),)), Num(0.0)), Num(0.5),
              Num(1.5)), (_r("i", S("N")),))  # fmt: skip
    q1 = Stmt("Q", (V("i"),), "+=", Bin("/", Read("A", (V("i"),)), Num(3.0)), (_r("i", S("N")),))
    p = Stmt("P", (V("i"),), "=", Bin("*", Read("O", (V("i"),)), Read("A", (V("i"),))),
             (_r("i", Bin("+", Bin("-", S("N"), Num(3)), Num(1))),))  # fmt: skip
    return _prog([Tensor("A", "double", (S("N"),))], ["O", "Q", "P"], [first, q0, q1, p],
                 {"N": 6})  # fmt: skip


def test_an_output_is_typed_by_its_first_write() -> None:
    a = np.array([1.0, -0.25, 1.0, 1.0, 1.0, 0.75])
    exp = evaluate(_literal_ternary_program(), {"N": 6}, {"A": a})
    assert exp.dtypes == {"O": "float", "Q": "float", "P": "double"}
    windows = np.stack([a[i : i + 3] for i in range(4)])
    want_o = np.where(windows != 1.0, 0.5, 1.5).min(axis=1)
    np.testing.assert_array_equal(exp.values["O"], want_o)
    # a double value added into a float32 output is stored rounded to float32
    want_q = (np.where(a > 0, 0.5, 1.5) + a / 3.0).astype(np.float32).astype(np.float64)
    np.testing.assert_array_equal(exp.values["Q"], want_q)
    assert (exp.tol["Q"] > 0).all()  # a third is inexact: compared within float32's error
    np.testing.assert_array_equal(exp.values["P"], want_o * a[:4])


def test_the_runner_expects_the_first_write_dtype() -> None:
    p = _literal_ternary_program()
    a = np.array([1.0, -0.25, 1.0, 1.0, 1.0, 0.75])
    exp = evaluate(p, {"N": 6}, {"A": a})
    o = exp.values["O"]
    assert fuzz_run.compare("O", o.astype(np.float32), exp) is None
    assert "dtype float64, expected float32" in fuzz_run.compare("O", o, exp)
    assert fuzz_run.compare("P", exp.values["P"].astype(np.float32), exp) is not None


def test_literal_and_builtin_types() -> None:
    lit = Cond(Bin("<", Read("A", ()), Num(0.0)), Num(0.5), Num(1.5))
    assert node_type(lit, {"A": "double"}, {}, "double") == "float"
    assert node_type(Bin("*", lit, Read("A", ())), {"A": "double"}, {}, "double") == "double"
    assert node_type(Call("exp", (Num(1),)), {}, {}, "double") == "float"
    assert node_type(Var("t"), {}, {"t": "double"}, "float") == "double"


@pytest.mark.parametrize("fn, numpy_fn", [("trunc", np.trunc), ("ceil", np.ceil),
                                          ("floor", np.floor), ("round", None)])  # fmt: skip
def test_rounding_functions_keep_the_sign_of_zero(fn: str, numpy_fn: object) -> None:
    # P(i) = copysign(2.0, fn(A(i))): -0.0 from trunc(-0.5) gives -2 (seed 12190)
    a = np.array([-0.5, -0.25, -0.0, 0.0, 0.25, -1.5, 2.5, -2.5])
    rhs = Call("copysign", (Num(2.0), Call(fn, (Read("A", (V("i"),)),))))
    p = _prog([Tensor("A", "double", (S("N"),))], ["P"],
              [Stmt("P", (V("i"),), "=", rhs, (_r("i", S("N")),))], {"N": 8})  # fmt: skip
    got = evaluate(p, {"N": 8}, {"A": a}).values["P"]
    # C's round is half away from zero, NumPy's half to even: written out by hand
    rounded = np.copysign(np.floor(np.abs(a) + 0.5), a) if numpy_fn is None else numpy_fn(a)
    np.testing.assert_array_equal(got, np.copysign(2.0, rounded))


def test_fdim_of_equal_zeros_is_positive_zero() -> None:
    rhs = Call("copysign", (Num(1.0), Call("fdim", (Read("A", (V("i"),)), Num(0.0)))))
    p = _prog([Tensor("A", "double", (S("N"),))], ["P"],
              [Stmt("P", (V("i"),), "=", rhs, (_r("i", S("N")),))], {"N": 3})  # fmt: skip
    a = np.array([-0.0, -1.0, 2.0])
    want = np.copysign(1.0, np.where(a > 0.0, a - 0.0, 0.0))  # C: +0 unless x > y
    np.testing.assert_array_equal(evaluate(p, {"N": 3}, {"A": a}).values["P"], want)


def _cast_program(rhs: object, n: int) -> Program:
    return _prog([Tensor("A", "double", (S("N"),))], ["O"],
                 [Stmt("O", (V("i"),), "=", rhs, (_r("i", S("N")),))], {"N": n})  # fmt: skip


def test_value_casts_truncate_toward_zero_and_round_to_float32() -> None:
    a = np.array([-2.75, -0.5, 0.3, 1.9, 7.0])
    x = Bin("*", Read("A", (V("i"),)), Num(2.0))
    to_int = _cast_program(Cast("double", Cast("int32", x)), 5)
    np.testing.assert_array_equal(evaluate(to_int, {"N": 5}, {"A": a}).values["O"],
                                  np.trunc(a * 2.0))  # fmt: skip
    third = Bin("/", Read("A", (V("i"),)), Num(3.0))
    to_float = _cast_program(Cast("double", Cast("float", third)), 5)
    exp = evaluate(to_float, {"N": 5}, {"A": a})
    np.testing.assert_array_equal(exp.values["O"], (a / 3.0).astype(np.float32))
    assert exp.dtypes["O"] == "double" and (exp.tol["O"] >= 2.0**-26 * np.abs(a / 3)).all()


def test_integer_division_of_values_truncates() -> None:
    a = np.array([-7.0, 7.0, -1.0, 5.0])
    q = Bin("/", Cast("int32", Read("A", (V("i"),))), Cast("int32", Num(2.0)))
    got = evaluate(_cast_program(Cast("double", q), 4), {"N": 4}, {"A": a}).values["O"]
    np.testing.assert_array_equal(got, np.trunc(a / 2))  # C: -7 / 2 == -3


def test_an_int32_cast_out_of_range_is_not_modelled() -> None:
    big = Cast("double", Cast("int32", Bin("*", Read("A", (V("i"),)), Num(2.0**30))))
    with pytest.raises(Invalid, match="out of range"):
        evaluate(_cast_program(big, 1), {"N": 1}, {"A": np.array([3.0])})
    # seed 122013: an unset max=! element's -inf
    whole = Cast("double", Cast("int32", Read("A", (V("i"),))))
    for x in (-np.inf, np.inf, np.nan):
        with pytest.raises(Invalid, match="out of range"):
            evaluate(_cast_program(whole, 1), {"N": 1}, {"A": np.array([x])})


def test_a_reduction_variable_of_one_branch_reduces_both() -> None:
    # seed 12190's shape: k only in the else branch; the max runs over all of k for
    # every element, so the then branch's value is the max of K equal candidates
    c, d = np.array([1.0, -1.0, 2.0, -3.0]), np.array([5.0, 6.0, 7.0, 8.0])
    a = np.array([-0.5, 2.5, 1.25])
    pick = Cond(Bin(">", Read("C", (V("i"),)), Num(0.0)), Read("D", (V("i"),)),
                Read("A", (V("k"),)))  # fmt: skip
    stmt = Stmt("P", (V("i"),), "max=!", pick, (_r("i", S("N")), _r("k", S("K"))))
    p = _prog([Tensor("A", "double", (S("K"),)), Tensor("C", "double", (S("N"),)),
               Tensor("D", "double", (S("N"),))], ["P"], [stmt], {"N": 4, "K": 3})  # fmt: skip
    want = np.where(c > 0, d, a.max())
    np.testing.assert_array_equal(evaluate(p, dict(p.sizes), {"A": a, "C": c, "D": d}).values["P"],
                                  want)  # fmt: skip
    for target in ("interp", "llvm"):
        (got,) = fuzz_run.compile_for(p, target, 0)[0](a, c, d)
        np.testing.assert_array_equal(np.asarray(got), want)
