"""The reference evaluator against NumPy references written here.

Every def states all of its ranges with `where` clauses, so these tests build the
`RangedDef` directly (the output shape is the range of the first statement's
left-hand side variables) and exercise `compiler.interp` alone.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

import compiler.interp as interp
from compiler.diagnostics import ShapeError, TCError
from compiler.frontend.ast import RangeConstraint, Var
from compiler.frontend.check import check_def
from compiler.frontend.checked import Bound, RangedDef
from compiler.frontend.parser import parse
from compiler.interp import evaluate, identity
from compiler.interp.builtins import BUILTINS

FLOATS = [np.float32, np.float64]
RNG = np.random.default_rng(0)


def ranged(source: str) -> RangedDef:
    checked = check_def(parse(source).get())
    bounds: dict[str, tuple[Bound, ...]] = {}
    for facts in checked.stmts:
        ranges = {
            c.expr.name: c
            for c in facts.stmt.where
            if isinstance(c, RangeConstraint) and isinstance(c.expr, Var)
        }
        lhs = facts.stmt.lhs
        if lhs.name not in bounds and all(isinstance(a, Var) for a in lhs.args):
            bounds[lhs.name] = tuple(Bound(ranges[a.name].lo, ranges[a.name].hi) for a in lhs.args)
    return RangedDef(checked, tuple(bounds.items()))


def run(source: str, sizes: dict[str, int], **inputs: np.ndarray) -> dict[str, np.ndarray]:
    return evaluate(ranged(source), inputs, sizes)


def rand(*shape: int, dtype: type = np.float32) -> np.ndarray:
    return RNG.standard_normal(shape).astype(dtype)


def tc_type(dtype: type) -> str:
    return "float" if dtype is np.float32 else "double"


def tol(dtype: type) -> dict[str, float]:
    return {"rtol": 1e-5, "atol": 1e-5} if dtype is np.float32 else {"rtol": 1e-12, "atol": 1e-12}


# ------------------------------------------------------------------ kernels


@pytest.mark.parametrize("dtype", FLOATS)
def test_matmul(dtype: type) -> None:
    t = tc_type(dtype)
    src = f"""def mm({t}(M, K) A, {t}(K, N) B) -> (C) {{
        C(m, n) +=! A(m, k) * B(k, n) where m in 0:M, n in 0:N, k in 0:K
    }}"""
    a, b = rand(5, 7, dtype=dtype), rand(7, 3, dtype=dtype)
    out = run(src, {"M": 5, "K": 7, "N": 3}, A=a, B=b)["C"]
    assert out.dtype == dtype
    np.testing.assert_allclose(out, a @ b, **tol(dtype))


@pytest.mark.parametrize("dtype", FLOATS)
def test_batched_matmul(dtype: type) -> None:
    t = tc_type(dtype)
    src = f"""def bmm({t}(B, M, K) X, {t}(B, K, N) Y) -> (Z) {{
        Z(b, m, n) +=! X(b, m, k) * Y(b, k, n)
            where b in 0:B, m in 0:M, n in 0:N, k in 0:K
    }}"""
    x, y = rand(2, 4, 6, dtype=dtype), rand(2, 6, 3, dtype=dtype)
    out = run(src, {"B": 2, "M": 4, "K": 6, "N": 3}, X=x, Y=y)["Z"]
    np.testing.assert_allclose(out, x @ y, **tol(dtype))


def conv_reference(i: np.ndarray, w: np.ndarray, stride: int) -> np.ndarray:
    n, c, h, wd = i.shape
    m, _, kh, kw = w.shape
    ho, wo = (h - kh) // stride + 1, (wd - kw) // stride + 1
    out = np.zeros((n, m, ho, wo), dtype=i.dtype)
    for y in range(ho):
        for x in range(wo):
            patch = i[:, :, y * stride : y * stride + kh, x * stride : x * stride + kw]
            out[:, :, y, x] = np.einsum("nchw,mchw->nm", patch, w)
    return out


@pytest.mark.parametrize("dtype", FLOATS)
def test_conv2d_with_bias(dtype: type) -> None:
    t = tc_type(dtype)
    src = f"""def conv({t}(N, C, H, W) I, {t}(M, C, KH, KW) W1, {t}(M) B) -> (O) {{
        O(n, m, h, w) +=! I(n, c, h + kh, w + kw) * W1(m, c, kh, kw)
            where n in 0:N, m in 0:M, h in 0:H-KH+1, w in 0:W-KW+1,
                  c in 0:C, kh in 0:KH, kw in 0:KW
        O(n, m, h, w) = O(n, m, h, w) + B(m)
            where n in 0:N, m in 0:M, h in 0:H-KH+1, w in 0:W-KW+1
    }}"""
    i, w, b = rand(2, 3, 7, 6, dtype=dtype), rand(4, 3, 3, 2, dtype=dtype), rand(4, dtype=dtype)
    sizes = {"N": 2, "C": 3, "H": 7, "W": 6, "M": 4, "KH": 3, "KW": 2}
    out = run(src, sizes, I=i, W1=w, B=b)["O"]
    expected = conv_reference(i, w, 1) + b[None, :, None, None]
    np.testing.assert_allclose(out, expected, **tol(dtype))


@pytest.mark.parametrize("dtype", FLOATS)
def test_strided_conv(dtype: type) -> None:
    t = tc_type(dtype)
    src = f"""def sconv({t}(N, C, H, W) I, {t}(M, C, KH, KW) W1) -> (O) {{
        O(n, m, h, w) +=! I(n, c, 2 * h + kh, 2 * w + kw) * W1(m, c, kh, kw)
            where n in 0:N, m in 0:M, h in 0:(H-KH)/2+1, w in 0:(W-KW)/2+1,
                  c in 0:C, kh in 0:KH, kw in 0:KW
    }}"""
    i, w = rand(1, 2, 9, 8, dtype=dtype), rand(3, 2, 3, 3, dtype=dtype)
    sizes = {"N": 1, "C": 2, "H": 9, "W": 8, "M": 3, "KH": 3, "KW": 3}
    out = run(src, sizes, I=i, W1=w)["O"]
    assert out.shape == (1, 3, 4, 3)
    np.testing.assert_allclose(out, conv_reference(i, w, 2), **tol(dtype))


def test_transpose() -> None:
    src = "def t(float(M, N) A) -> (B) { B(n, m) = A(m, n) where m in 0:M, n in 0:N }"
    a = rand(3, 5)
    # The first LHS variable is n: its range gives the output's first dimension.
    np.testing.assert_array_equal(run(src, {"M": 3, "N": 5}, A=a)["B"], a.T)


@pytest.mark.parametrize("dtype", FLOATS)
def test_softmax(dtype: type) -> None:
    t = tc_type(dtype)
    src = f"""def softmax({t}(N, D) X) -> (Y, mx, e, s) {{
        mx(n) max=! X(n, d) where n in 0:N, d in 0:D
        e(n, d) = exp(X(n, d) - mx(n)) where n in 0:N, d in 0:D
        s(n) +=! e(n, d) where n in 0:N, d in 0:D
        Y(n, d) = e(n, d) / s(n) where n in 0:N, d in 0:D
    }}"""
    x = rand(4, 9, dtype=dtype) * 10
    out = run(src, {"N": 4, "D": 9}, X=x)
    ex = np.exp(x - x.max(axis=1, keepdims=True))
    np.testing.assert_allclose(out["Y"], ex / ex.sum(axis=1, keepdims=True), **tol(dtype))
    np.testing.assert_array_equal(out["mx"], x.max(axis=1))


@pytest.mark.parametrize("dtype", FLOATS)
def test_layernorm(dtype: type) -> None:
    t = tc_type(dtype)
    src = f"""def ln({t}(N, D) X) -> (Y, mean, var) {{
        mean(n) +=! X(n, d) / D where n in 0:N, d in 0:D
        var(n) +=! (X(n, d) - mean(n)) * (X(n, d) - mean(n)) / D where n in 0:N, d in 0:D
        Y(n, d) = (X(n, d) - mean(n)) * rsqrt(var(n) + 1e-5) where n in 0:N, d in 0:D
    }}"""
    x = rand(3, 16, dtype=dtype)
    out = run(src, {"N": 3, "D": 16}, X=x)
    mean, var = x.mean(axis=1, keepdims=True), x.var(axis=1, keepdims=True)
    expected = (x - mean) / np.sqrt(var + dtype(1e-5))
    np.testing.assert_allclose(out["Y"], expected, rtol=1e-4, atol=1e-4)
    assert out["Y"].dtype == dtype


def test_maxpool_and_min() -> None:
    src = """def pool(float(N, H, W) I) -> (MX, MN) {
        MX(n, h, w) max=! I(n, 2 * h + kh, 2 * w + kw)
            where n in 0:N, h in 0:H/2, w in 0:W/2, kh in 0:2, kw in 0:2
        MN(n, h, w) min=! I(n, 2 * h + kh, 2 * w + kw)
            where n in 0:N, h in 0:H/2, w in 0:W/2, kh in 0:2, kw in 0:2
    }"""
    i = rand(2, 6, 4)
    out = run(src, {"N": 2, "H": 6, "W": 4}, I=i)
    blocks = i.reshape(2, 3, 2, 2, 2)
    np.testing.assert_array_equal(out["MX"], blocks.max(axis=(2, 4)))
    np.testing.assert_array_equal(out["MN"], blocks.min(axis=(2, 4)))


def test_product_with_zeros_and_int_identities() -> None:
    src = """def p(float(N, K) A, int32(N, K) B) -> (P, Q, R) {
        P(n) *=! A(n, k) where n in 0:N, k in 0:K
        Q(n) min=! B(n, k) where n in 0:N, k in 1:1
        R(n) max=! B(n, k) where n in 0:N, k in 0:K
    }"""
    a = rand(3, 4)
    a[1, 2] = 0.0
    b = RNG.integers(-50, 50, size=(3, 4), dtype=np.int32)
    out = run(src, {"N": 3, "K": 4}, A=a, B=b)
    np.testing.assert_allclose(out["P"], a.prod(axis=1), rtol=1e-6)
    assert out["P"][1] == 0.0
    # An empty reduction leaves the identity: int32's max for min=!.
    np.testing.assert_array_equal(out["Q"], np.full(3, np.iinfo(np.int32).max, np.int32))
    np.testing.assert_array_equal(out["R"], b.max(axis=1))


def test_identities() -> None:
    from compiler.frontend.ast import AssignOp, ScalarType

    assert identity(AssignOp.PLUS_INIT, ScalarType.FLOAT32) == 0
    assert identity(AssignOp.TIMES_INIT, ScalarType.INT64) == 1
    assert identity(AssignOp.MIN_INIT, ScalarType.FLOAT64) == math.inf
    assert identity(AssignOp.MAX_INIT, ScalarType.FLOAT32) == -math.inf
    assert identity(AssignOp.MAX_INIT, ScalarType.INT8) == -128
    assert identity(AssignOp.MIN_INIT, ScalarType.UINT16) == 65535


def test_in_place_update_after_reduction_reads_old_values() -> None:
    src = """def f(float(N, K) A, float(N) B) -> (O) {
        O(n) +=! A(n, k) where n in 0:N, k in 0:K
        O(n) = O(n) + B(n) where n in 0:N
        O(n) = O(n) * 2 + O(N - 1 - n) where n in 0:N
    }"""
    a, b = rand(5, 3), rand(5)
    o = a.sum(axis=1) + b
    np.testing.assert_allclose(
        run(src, {"N": 5, "K": 3}, A=a, B=b)["O"], o * 2 + o[::-1], rtol=1e-6
    )


def test_accumulates_into_given_outputs_without_mutating_them() -> None:
    source = "def f(float(N, K) A) -> (O) { O(n) += A(n, k) where n in 0:N, k in 0:K }"
    a, start = rand(4, 3), rand(4)
    kept = start.copy()
    out = evaluate(ranged(source), {"A": a}, {"N": 4, "K": 3}, {"O": start})["O"]
    np.testing.assert_allclose(out, kept + a.sum(axis=1), rtol=1e-6)
    np.testing.assert_array_equal(start, kept)


def test_lets() -> None:
    src = """def f(float(N) A) -> (O) {
        O(i) = y * y + x where x = A(i) + 1, y = x * 2, i in 0:N
    }"""
    a = rand(6)
    x = a + 1
    np.testing.assert_allclose(run(src, {"N": 6}, A=a)["O"], (2 * x) ** 2 + x, rtol=1e-6)


def test_exists_only_constrains() -> None:
    src = "def f(float(N) A, float(N) B) -> (O) { O(i) = A(i) where exists B(i), i in 0:N }"
    a = rand(4)
    np.testing.assert_array_equal(run(src, {"N": 4}, A=a, B=rand(4))["O"], a)


def test_ternary_guards_out_of_range_reads() -> None:
    src = """def shift(float(N) A) -> (O, P) {
        O(i) = i > 0 ? A(i - 1) : 0 where i in 0:N
        P(i) = i < N - 1 && A(i + 1) > 0 ? 1.0 : 0.0 where i in 0:N
    }"""
    a = np.array([1.0, -2.0, 3.0, 4.0], np.float32)
    out = run(src, {"N": 4}, A=a)
    np.testing.assert_array_equal(out["O"], [0, 1, -2, 3])
    np.testing.assert_array_equal(out["P"], [0, 1, 1, 0])


def test_integer_division_and_modulo_are_euclidean() -> None:
    src = """def dm(int32(N) A, int32(N) B) -> (Q, R) {
        Q(i) = A(i) / B(i) where i in 0:N
        R(i) = A(i) % B(i) where i in 0:N
    }"""
    a = np.array([7, -7, 7, -7, 6, -1, 5], np.int32)
    b = np.array([2, 2, -2, -2, 3, 4, 0], np.int32)
    out = run(src, {"N": 7}, A=a, B=b)
    # Halide: (a/b)*b + a%b == a and 0 <= a%b < |b|; x/0 == x%0 == 0.
    np.testing.assert_array_equal(out["Q"], [3, -4, -3, 4, 2, -1, 0])
    np.testing.assert_array_equal(out["R"], [1, 1, 1, 1, 0, 3, 0])
    assert out["Q"].dtype == np.int32


def test_index_arithmetic_with_negative_division() -> None:
    src = "def f(float(N) A) -> (O) { O(i) = A((i - 2) / 2 + 1) where i in 0:N }"
    a = rand(5)
    idx = [(i - 2) // 2 + 1 for i in range(5)]
    np.testing.assert_array_equal(run(src, {"N": 5}, A=a)["O"], a[idx])


def test_type_promotion_and_casts() -> None:
    src = """def f(int32(N) I, float(N) F, double(N) D, uint8(N) U) -> (O, P, Q, R) {
        O(i) = I(i) + F(i) where i in 0:N
        P(i) = F(i) * D(i) where i in 0:N
        Q(i) = int32(F(i)) + U(i) where i in 0:N
        R(i) = exp(I(i)) where i in 0:N
    }"""
    i = np.array([1, -2, 3], np.int32)
    f = np.array([0.5, 1.75, -2.5], np.float32)
    d = np.array([1e-20, 2.0, 3.0], np.float64)
    u = np.array([250, 3, 255], np.uint8)
    out = run(src, {"N": 3}, I=i, F=f, D=d, U=u)
    assert out["O"].dtype == np.float32 and out["P"].dtype == np.float64
    assert out["Q"].dtype == np.int32 and out["R"].dtype == np.float32
    np.testing.assert_array_equal(out["O"], i + f)
    np.testing.assert_array_equal(out["P"], f.astype(np.float64) * d)
    np.testing.assert_array_equal(out["Q"], [250, 4, 253])  # casts truncate toward zero
    np.testing.assert_allclose(out["R"], np.exp(i.astype(np.float32)), rtol=1e-6)


def test_indirect_read_and_out_of_range_index() -> None:
    src = "def emb(float(V, D) E, int32(N) idx) -> (O) { O(i, d) = E(idx(i), d) where i in 0:N, d in 0:D }"
    e = rand(5, 3)
    idx = np.array([4, 0, 2, 2], np.int32)
    out = run(src, {"V": 5, "D": 3, "N": 4}, E=e, idx=idx)["O"]
    np.testing.assert_array_equal(out, e[idx])
    with pytest.raises(ShapeError) as err:
        run(src, {"V": 5, "D": 3, "N": 4}, E=e, idx=np.array([1, 5, 0, 0], np.int32))
    assert "index 5 out of range" in err.value.message and "'E'" in err.value.message


def test_non_rectangular_domain() -> None:
    src = """def tri(float(N, N) A) -> (O, L) {
        O(i) +=! A(i, j) where i in 0:N, j in 0:i + 1
        L(i, j) = A(i, j) where i in 0:N, j in 0:N, j - i in 1:N
    }"""
    a = rand(4, 4)
    out = run(src, {"N": 4}, A=a)
    np.testing.assert_allclose(out["O"], np.tril(a).sum(axis=1), rtol=1e-6)
    np.testing.assert_array_equal(out["L"], np.triu(a, 1))


def test_scatter_with_affine_left_hand_side() -> None:
    src = """def g(float(H) O_grad, float(KH) W) -> (I_grad) {
        I_grad(h + kh) +=! O_grad(h) * W(kh) where h in 0:H, kh in 0:KH
    }"""
    og, w = rand(5), rand(3)
    # The helper cannot size an affine left-hand side: pass the output.
    r = ranged(src)
    out = evaluate(
        r, {"O_grad": og, "W": w}, {"H": 5, "KH": 3}, {"I_grad": np.zeros(7, np.float32)}
    )
    np.testing.assert_allclose(out["I_grad"], np.convolve(og, w), rtol=1e-5, atol=1e-6)


def test_zero_dimensional_output_and_scalar_input() -> None:
    src = (
        "def dot(float(N) A, float(N) B, float s) -> (O) { O() +=! A(i) * B(i) * s where i in 0:N }"
    )
    a, b = rand(6), rand(6)
    out = run(src, {"N": 6}, A=a, B=b, s=np.asarray(2.0, np.float32))["O"]
    assert out.shape == ()
    np.testing.assert_allclose(out, 2 * a @ b, rtol=1e-5)


def test_chunked_evaluation_equals_whole_grid(monkeypatch: pytest.MonkeyPatch) -> None:
    src = """def f(float(M, K) A, float(K, N) B) -> (C, T) {
        C(m, n) +=! A(m, k) * B(k, n) where m in 0:M, n in 0:N, k in 0:K
        T(i) +=! A(i, j) where i in 0:K, j in 0:i + 1
    }"""
    a, b = rand(6, 5), rand(5, 4)
    whole = run(src, {"M": 6, "K": 5, "N": 4}, A=a, B=b)
    monkeypatch.setattr(interp, "CHUNK_POINTS", 7)
    chunked = run(src, {"M": 6, "K": 5, "N": 4}, A=a, B=b)
    for name in ("C", "T"):
        np.testing.assert_allclose(chunked[name], whole[name], rtol=1e-6)
    np.testing.assert_allclose(whole["C"], a @ b, rtol=1e-5, atol=1e-6)


def test_range_starting_above_zero_leaves_leading_elements() -> None:
    src = "def f(float(N) A) -> (O) { O(i) = A(i) where i in 2:N }"
    a = rand(5)
    np.testing.assert_array_equal(run(src, {"N": 5}, A=a)["O"], np.r_[0, 0, a[2:]])


# ------------------------------------------------------------------ builtins


def test_builtins_follow_cuda() -> None:
    x = np.array([-2.5, -0.5, 0.5, 1.5, 2.5, 0.49999997], np.float32)
    np.testing.assert_array_equal(BUILTINS["round"](x), [-3, -1, 1, 2, 3, 0])
    ints = np.array([0.0, 1.0, -3.0, 0.5, 2.5], np.float64)
    np.testing.assert_array_equal(BUILTINS["sinpi"](ints), [0, 0, 0, 1, 1])
    np.testing.assert_array_equal(BUILTINS["cospi"](ints), [1, -1, -1, 0, 0])
    np.testing.assert_array_equal(BUILTINS["logb"](np.array([8.0, 0.75, 0.0])), [3, -1, -np.inf])
    y = np.array([-0.9, 0.0, 0.3, 0.999], np.float64)
    np.testing.assert_allclose([math.erf(v) for v in BUILTINS["erfinv"](y)], y, rtol=1e-15)
    assert BUILTINS["lgamma"](np.array([5.0], np.float32)).dtype == np.float32
    np.testing.assert_allclose(BUILTINS["lgamma"](np.array([5.0])), [math.log(24)], rtol=1e-15)
    np.testing.assert_array_equal(BUILTINS["remainder"](np.array([5.0]), np.array([2.0])), [1.0])
    np.testing.assert_allclose(BUILTINS["erfcx"](np.array([30.0])), [0.018795888861416751])
    assert BUILTINS["fmax"](np.array([np.nan]), np.array([1.0]))[0] == 1.0


def test_unsupported_builtin_is_a_clear_error() -> None:
    src = "def f(float(N) A) -> (O) { O(i) = j0(A(i)) where i in 0:N }"
    with pytest.raises(TCError, match="builtin j0 is not supported by the reference evaluator"):
        run(src, {"N": 2}, A=rand(2))


def test_every_builtin_is_implemented_or_refused() -> None:
    from compiler.frontend.builtins import ARITY
    from compiler.interp.builtins import UNSUPPORTED

    for name, arity in ARITY.items():
        if name in UNSUPPORTED:
            continue
        args = [np.array([0.25, 0.75], np.float32) for _ in range(arity)]
        with np.errstate(all="ignore"):  # acosh(0.25) is nan, as in C
            result = BUILTINS[name](*args)
        assert result.dtype == np.float32 and result.shape == (2,), name
