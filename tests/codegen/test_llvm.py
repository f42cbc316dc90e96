"""Compiled loop-IR programs against NumPy references and the loop-IR interpreter."""

from __future__ import annotations

import numpy as np
import pytest

from compiler.cpu import build_module, compile_function, emit_llvm
from compiler.loops import (
    Alloc,
    Assign,
    BinOp,
    Block,
    Cast,
    DType,
    FloorDiv,
    If,
    Let,
    Local,
    Max,
    Min,
    Mod,
    Role,
    Select,
    Unary,
    UnaryOp,
)
from tests.codegen.kit import (
    BOOL,
    F32,
    F64,
    I32,
    I64,
    add,
    bin_,
    buf,
    c,
    func,
    load,
    loop,
    mul,
    out,
    pfor,
    run_both,
    store,
    sub,
    v,
)

RNG = np.random.default_rng(7)


def matmul(dtype: DType) -> object:
    A, B, C = buf("A", dtype, "M", "K"), buf("B", dtype, "K", "N"), out("C", dtype, "M", "N")
    acc = v("acc", dtype)
    body = Local(
        "acc",
        dtype,
        c(0.0, dtype),
        Block(
            (
                loop(
                    "k", 0, "K", Assign("acc", add(acc, mul(load(A, "i", "k"), load(B, "k", "j"))))
                ),
                store(C, ("i", "j"), acc),
            )
        ),
    )
    return func("matmul", [A, B, C], "M N K", pfor("i", 0, "M", loop("j", 0, "N", body)))


@pytest.mark.parametrize("dtype", [F32, F64])
def test_matmul_with_register_accumulation(dtype: DType) -> None:
    a = RNG.standard_normal((13, 17)).astype(dtype.np)
    b = RNG.standard_normal((17, 9)).astype(dtype.np)
    arrays = {"A": a, "B": b, "C": np.zeros((13, 9), dtype.np)}
    mine, theirs = run_both(matmul(dtype), arrays, {"M": 13, "N": 9, "K": 17})
    np.testing.assert_allclose(theirs["C"], a @ b, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(mine["C"], a @ b, rtol=1e-5, atol=1e-5)


def test_full_conv2d_with_min_max_inner_bounds() -> None:
    Img, W = buf("I", F32, "H", "X"), buf("W", F32, "KH", "KW")
    Out = out("O", F32, add(sub("H", 1), "KH"), add(sub("X", 1), "KW"))
    acc = v("acc", F32)
    kh_lo, kh_hi = Max(c(0), add(sub("y", "H"), 1)), add(Min(sub("KH", 1), v("y")), 1)
    kw_lo, kw_hi = Max(c(0), add(sub("x", "X"), 1)), add(Min(sub("KW", 1), v("x")), 1)
    term = mul(load(Img, sub("y", "kh"), sub("x", "kw")), load(W, "kh", "kw"))
    inner = loop("kh", kh_lo, kh_hi, loop("kw", kw_lo, kw_hi, Assign("acc", add(acc, term))))
    body = Local("acc", F32, c(0.0, F32), Block((inner, store(Out, ("y", "x"), acc))))
    nest = pfor("y", 0, add(sub("H", 1), "KH"), loop("x", 0, add(sub("X", 1), "KW"), body))
    f = func("conv", [Img, W, Out], "H X KH KW", nest)
    img, w = (
        RNG.standard_normal((7, 6)).astype(np.float32),
        RNG.standard_normal((3, 4)).astype(np.float32),
    )
    expected = np.zeros((9, 9), np.float32)
    for kh in range(3):
        for kw in range(4):
            expected[kh : kh + 7, kw : kw + 6] += img * w[kh, kw]
    arrays = {"I": img, "W": w, "O": np.zeros((9, 9), np.float32)}
    mine, theirs = run_both(f, arrays, {"H": 7, "X": 6, "KH": 3, "KW": 4})
    np.testing.assert_allclose(theirs["O"], expected, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(mine["O"], expected, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("threads", [1, 2, 3])
@pytest.mark.parametrize("n", [0, 1, 10, 23])
def test_strided_parallel_loop_chunks_stay_on_the_grid(threads: int, n: int) -> None:
    A, Out = buf("A", F64, "N"), out("O", F64, "N")
    f = func(
        "strided",
        [A, Out],
        "N",
        pfor("i", 1, "N", store(Out, ("i",), mul(load(A, "i"), c(2.0, F64))), step=3),
    )
    a = np.arange(n, dtype=np.float64) + 1
    expected = np.zeros(n)
    expected[1::3] = a[1::3] * 2
    mine, theirs = run_both(f, {"A": a, "O": np.zeros(n)}, {"N": n}, threads=threads)
    np.testing.assert_array_equal(theirs["O"], expected)
    np.testing.assert_array_equal(mine["O"], expected)


def test_select_guards_reads_that_would_be_out_of_bounds() -> None:
    A, Out = buf("A", F32, "N"), out("O", F32, "N")
    inside = bin_(BinOp.GE, "i", 1)
    shifted = Select(inside, load(A, sub("i", 1)), c(0.0, F32))
    # The untaken side reads a terabyte away: executing it would crash the process.
    never = Select(bin_(BinOp.LT, "i", 0), load(A, add("i", 10**12)), shifted)
    f = func("shift", [A, Out], "N", pfor("i", 0, "N", store(Out, ("i",), never)))
    a = RNG.standard_normal(19).astype(np.float32)
    mine, theirs = run_both(f, {"A": a, "O": np.zeros(19, np.float32)}, {"N": 19})
    expected = np.concatenate([[0.0], a[:-1]]).astype(np.float32)
    np.testing.assert_array_equal(theirs["O"], expected)
    np.testing.assert_array_equal(mine["O"], expected)


@pytest.mark.parametrize("dtype", [I64, I32])
def test_integer_division_floor_and_truncating_with_negatives_and_zero(dtype: DType) -> None:
    A, B = buf("A", dtype, "N"), buf("B", dtype, "N")
    outs = [out(name, dtype, "N") for name in ("FD", "FM", "TD", "TM")]
    a_, b_ = load(A, "i"), load(B, "i")
    exprs = [FloorDiv(a_, b_), Mod(a_, b_), bin_(BinOp.DIV, a_, b_), bin_(BinOp.MOD, a_, b_)]
    stores = [store(o, ("i",), e) for o, e in zip(outs, exprs, strict=True)]
    f = func("divmod", [A, B, *outs], "N", pfor("i", 0, "N", *stores))
    info = np.iinfo(dtype.np)
    a = np.array([7, -7, 7, -7, 0, 5, -5, 3, info.min, info.min, info.max, -1], dtype.np)
    b = np.array([2, 2, -2, -2, 3, 0, 0, 7, -1, 3, -4, 5], dtype.np)
    arrays = {"A": a, "B": b, **{o.name: np.zeros(12, dtype.np) for o in outs}}
    mine, theirs = run_both(f, arrays, {"N": 12})
    safe = np.where(b == 0, 1, b)
    with np.errstate(all="ignore"):
        floor_q = np.where(b == 0, 0, a // safe)
        floor_r = np.where(b == 0, 0, a % safe)
        trunc_r = np.where(b == 0, 0, np.fmod(a, safe))
        trunc_q = np.where(b == 0, 0, (a - trunc_r) // safe)
    expected = {"FD": floor_q, "FM": floor_r, "TD": trunc_q, "TM": trunc_r}
    for name, want in expected.items():
        np.testing.assert_array_equal(theirs[name], want.astype(dtype.np), err_msg=name)
        np.testing.assert_array_equal(mine[name], want.astype(dtype.np), err_msg=name)
    assert theirs["FD"][8] == info.min  # MIN / -1 wraps instead of trapping


@pytest.mark.parametrize(
    ("src", "dst", "values"),
    [
        (F64, I32, [-2.7, -0.5, 0.0, 0.9, 123456.99]),
        (I64, DType.INT8, [-129, -128, 127, 128, 300, -1]),
        (DType.INT8, DType.UINT8, [-1, -128, 5, 127]),
        (DType.UINT8, I32, [0, 200, 255]),
        (I64, F32, [-(2**40), 3, 16777217]),
        (F64, F32, [1e-3, 1e30, -2.5]),
        (F32, F64, [0.1, -3.25]),
        (F32, DType.FLOAT16, [0.1, 65504.0, -2.0]),
        (F64, BOOL, [0.0, -0.0, 2.5, np.nan]),
        (I32, BOOL, [0, 5, -1]),
        (BOOL, F32, [True, False]),
        (BOOL, I64, [True, False]),
    ],
)
def test_casts_match_numpy(src: DType, dst: DType, values: list[object]) -> None:
    A, Out = buf("A", src, "N"), out("O", dst, "N")
    f = func("cast", [A, Out], "N", pfor("i", 0, "N", store(Out, ("i",), Cast(dst, load(A, "i")))))
    a = np.array(values, dtype=src.np)
    with np.errstate(all="ignore"):
        expected = a.astype(dst.np) if dst is not BOOL else a != 0
    mine, theirs = run_both(f, {"A": a, "O": np.zeros(len(a), dst.np)}, {"N": len(a)})
    np.testing.assert_array_equal(theirs["O"], expected)
    np.testing.assert_array_equal(mine["O"], expected)


def test_bool_buffers_logic_and_comparisons() -> None:
    A, M, Out = buf("A", F32, "N"), buf("M", BOOL, "N"), out("O", BOOL, "N")
    cond = bin_(
        BinOp.AND, bin_(BinOp.GT, load(A, "i"), c(0.0, F32)), Unary(UnaryOp.NOT, load(M, "i"))
    )
    ne = bin_(BinOp.NE, load(A, "i"), load(A, "i"))  # true only for NaN
    f = func(
        "logic", [A, M, Out], "N", pfor("i", 0, "N", store(Out, ("i",), bin_(BinOp.OR, cond, ne)))
    )
    a = np.array([1.0, -1.0, 2.0, np.nan, 0.0], np.float32)
    m = np.array([False, False, True, True, False])
    mine, theirs = run_both(f, {"A": a, "M": m, "O": np.zeros(5, bool)}, {"N": 5})
    expected = ((a > 0) & ~m) | (a != a)
    np.testing.assert_array_equal(theirs["O"], expected)
    np.testing.assert_array_equal(mine["O"], expected)


def test_alloc_let_if_and_max_reduction() -> None:
    A, Out, S = buf("A", F32, "N"), out("O", F32, "N"), out("S", F32, 1)
    T = buf("T", F32, "N", role=Role.TEMP)
    best = v("best", F32)
    fill = loop(
        "i", 0, "N", Let("twice", mul(load(A, "i"), c(2.0, F32)), store(T, ("i",), v("twice", F32)))
    )
    rev = loop("i", 0, "N", store(Out, ("i",), load(T, sub(sub("N", 1), "i"))))
    reduce = Local(
        "best",
        F32,
        c(float("-inf"), F32),
        Block((loop("i", 0, "N", Assign("best", Max(best, load(T, "i")))), store(S, (0,), best))),
    )
    clamp = loop(
        "i",
        0,
        "N",
        If(bin_(BinOp.LT, load(Out, "i"), c(0.0, F32)), store(Out, ("i",), c(0.0, F32))),
    )
    f = func("temps", [A, Out, S], "N", Alloc(T, Block((fill, rev, reduce, clamp))))
    a = RNG.standard_normal(37).astype(np.float32)
    arrays = {"A": a, "O": np.zeros(37, np.float32), "S": np.zeros(1, np.float32)}
    mine, theirs = run_both(f, arrays, {"N": 37})
    for got in (mine, theirs):
        np.testing.assert_array_equal(got["O"], np.maximum(a[::-1] * 2, 0))
        assert got["S"][0] == (a * 2).max()


def test_parallel_runs_with_one_and_two_threads_agree() -> None:
    f = matmul(F32)
    a = RNG.standard_normal((31, 40)).astype(np.float32)
    b = RNG.standard_normal((40, 21)).astype(np.float32)
    cf = compile_function(f)
    results = []
    for threads in (1, 2):
        arrays = {"A": a, "B": b, "C": np.zeros((31, 21), np.float32)}
        cf(arrays, {"M": 31, "N": 21, "K": 40}, threads=threads)
        results.append(arrays["C"])
    np.testing.assert_array_equal(results[0], results[1])
    assert compile_function(matmul(F32)) is cf  # the in-memory cache


def test_llvm_text_has_noalias_target_vectors_and_reduction_flags_only_on_reductions() -> None:
    text = emit_llvm(matmul(F32))
    assert "noalias" in text and "target triple" in text and "target datalayout" in text
    raw = str(build_module(matmul(F32)))
    # the accumulation (its loop for short sums and its blocked loop for long ones), nothing else
    assert raw.count("reassoc") == 2
    A, Out = buf("A", F32, "N"), out("O", F32, "N")
    saxpy = func(
        "scale",
        [A, Out],
        "N",
        pfor("i", 0, "N", store(Out, ("i",), mul(load(A, "i"), c(3.0, F32)))),
    )
    assert "x float>" in emit_llvm(saxpy)  # vectorised


def test_index_expressions_reused_within_a_block_respect_rebound_lets() -> None:
    # `x * 3 + i` is emitted once per block and binding of x (`llvm_expr._index_key`):
    # a let that rebinds x in the same block must not see the first one's value, and a
    # local (mutable) is never reused
    res = out("O", I64, "N", 4)
    cell = add(mul("x", 3), "i")
    body = Block(
        (
            Let("x", c(1), store(res, ("i", 0), cell)),
            Let("x", c(2), store(res, ("i", 1), cell)),
            Let("x", add("i", 5), store(res, ("i", 2), cell)),
            Local(
                "y",
                I64,
                c(7),
                Block((Assign("y", add("y", "i")), store(res, ("i", 3), add(v("y"), mul("i", 3))))),
            ),
        )
    )
    f = func("rebind", [res], "N", loop("i", 0, "N", body))
    mine, theirs = run_both(f, {"O": np.zeros((5, 4), np.int64)}, {"N": 5})
    i = np.arange(5)
    want = np.stack([3 + i, 6 + i, 3 * (i + 5) + i, 7 + i + 3 * i], axis=1)
    for got in (mine, theirs):
        np.testing.assert_array_equal(got["O"], want)
