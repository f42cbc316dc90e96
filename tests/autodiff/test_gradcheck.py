"""Gradients checked against central finite differences in float64 (compiler.gradcheck),
through the reference evaluator, one small def per construct."""

from __future__ import annotations

import numpy as np
import pytest

import compiler
from compiler.gradcheck import GradcheckError
from tests.autodiff.kit import check, uniform

RNG = np.random.default_rng(1234)

# Builtins with a derivative rule, with an input interval inside their domain.
UNARY_DOMAINS: dict[str, tuple[float, float]] = {
    "exp": (-1, 1), "exp2": (-1, 1), "exp10": (-1, 1), "expm1": (-1, 1),
    "log": (0.5, 2), "log2": (0.5, 2), "log10": (0.5, 2), "log1p": (-0.5, 2),
    "sqrt": (0.5, 2), "rsqrt": (0.5, 2), "cbrt": (0.5, 2), "rcbrt": (0.5, 2),
    "sin": (-2, 2), "cos": (-2, 2), "tan": (-1, 1), "asin": (-0.8, 0.8),
    "acos": (-0.8, 0.8), "atan": (-2, 2), "sinh": (-1, 1), "cosh": (-1, 1),
    "tanh": (-2, 2), "asinh": (-2, 2), "acosh": (1.5, 3), "atanh": (-0.8, 0.8),
    "sinpi": (-1, 1), "cospi": (-1, 1), "erf": (-1.5, 1.5), "erfc": (-1.5, 1.5),
    "erfinv": (-0.8, 0.8), "erfcinv": (0.2, 1.8), "erfcx": (-1, 2), "normcdf": (-2, 2),
    "normcdfinv": (0.1, 0.9), "fabs": (-2, 2), "floor": (-2, 2), "ceil": (-2, 2),
    "round": (-2, 2), "trunc": (-2, 2), "logb": (0.3, 5),
}  # fmt: skip

BINARY_DOMAINS: dict[str, tuple[tuple[float, float], tuple[float, float]]] = {
    "pow": ((0.5, 2), (-2, 2)), "hypot": ((-2, 2), (0.5, 2)), "rhypot": ((-2, 2), (0.5, 2)),
    "atan2": ((-2, 2), (0.5, 2)), "fmod": ((2.1, 2.9), (1.1, 1.9)),
    "remainder": ((2.1, 2.4), (1.1, 1.9)), "fdim": ((-2, 2), (-2, 2)),
    "copysign": ((0.5, 2), (-2, 2)), "nextafter": ((-2, 2), (-2, 2)),
    "fdivide": ((-2, 2), (0.5, 2)), "fmin": ((-2, 2), (-2, 2)), "fmax": ((-2, 2), (-2, 2)),
    "min": ((-2, 2), (-2, 2)), "max": ((-2, 2), (-2, 2)),
}  # fmt: skip


@pytest.mark.parametrize("fn", sorted(UNARY_DOMAINS))
def test_unary_builtin(fn: str) -> None:
    src = f"def f(double(N) A) -> (O) {{ O(i) = {fn}(A(i)) }}"
    check(src, uniform(RNG, (5,), *UNARY_DOMAINS[fn]))


@pytest.mark.parametrize("fn", sorted(BINARY_DOMAINS))
def test_binary_builtin(fn: str) -> None:
    src = f"def f(double(N) A, double(N) B) -> (O) {{ O(i) = {fn}(A(i), B(i)) }}"
    (a_lo, a_hi), (b_lo, b_hi) = BINARY_DOMAINS[fn]
    check(src, uniform(RNG, (5,), a_lo, a_hi), uniform(RNG, (5,), b_lo, b_hi))


@pytest.mark.parametrize("fn", ["norm3d", "rnorm3d", "norm4d", "rnorm4d", "fma"])
def test_nary_builtin(fn: str) -> None:
    n = {"norm3d": 3, "rnorm3d": 3, "norm4d": 4, "rnorm4d": 4, "fma": 3}[fn]
    params = ", ".join(f"double(N) A{k}" for k in range(n))
    args = ", ".join(f"A{k}(i)" for k in range(n))
    src = f"def f({params}) -> (O) {{ O(i) = {fn}({args}) }}"
    check(src, *(uniform(RNG, (4,), 0.5, 2) for _ in range(n)))


@pytest.mark.parametrize(
    "expr",
    [
        "A(i) + B(i)",
        "A(i) - B(i)",
        "A(i) * B(i)",
        "A(i) / B(i)",
        "A(i) % B(i)",
        "-A(i) * B(i)",
        "A(i) * A(i) * B(i)",
        "2 * A(i) + 0.5 / B(i)",
        "float(A(i)) * B(i)",
        "A(i) * float(int32(B(i) * 3))",
        "A(i) > B(i) ? A(i) * A(i) : B(i) - A(i)",
        "min(A(i), B(i)) + max(A(i), 2 * B(i))",
        "A(i) * float(i) + B(i) * N",
    ],
)
def test_arithmetic(expr: str) -> None:
    src = f"def f(double(N) A, double(N) B) -> (O) {{ O(i) = {expr} }}"
    check(src, uniform(RNG, (5,), 0.5, 2), uniform(RNG, (5,), 0.3, 1.7))


def test_guarded_shift_reads_stay_in_bounds() -> None:
    src = "def f(double(N) A) -> (O) { O(i) = i > 0 ? exp(A(i - 1)) : A(i) where i in 0:N }"
    check(src, uniform(RNG, (6,)))


def test_max_reduction_without_ties() -> None:
    src = "def f(double(N, M) A) -> (O) { O(i) max=! A(i, j) }"
    check(src, RNG.permutation(12).reshape(3, 4).astype(np.float64) / 3)


def test_min_reduction_without_ties() -> None:
    src = "def f(double(N, M) A) -> (O) { O(i) min=! A(i, j) * A(i, j) }"
    check(src, RNG.permutation(12).reshape(3, 4).astype(np.float64) / 3 + 0.1)


def test_product_reduction_without_zeros() -> None:
    check("def f(double(N, M) A) -> (O) { O(i) *=! A(i, j) }", uniform(RNG, (3, 4), 0.5, 1.5))


@pytest.mark.parametrize("zeros", [[(0, 1)], [(0, 1), (0, 2)], [(1, 0), (2, 3), (2, 1)]])
def test_product_reduction_with_zeros(zeros: list[tuple[int, int]]) -> None:
    a = uniform(RNG, (3, 4), 0.5, 1.5)
    for idx in zeros:
        a[idx] = 0.0
    src = "def f(double(N, M) A) -> (O) { O(i) *=! A(i, j) }"
    # Central differences are exact for a product (linear in each element).
    check(src, a)
    k = compiler.define(src)
    (g,) = k.vjp(a, grad_outputs=(np.ones(3),))
    for i in range(3):
        for j in range(4):
            others = np.prod(np.delete(a[i], j))
            assert g[i, j] == pytest.approx(others)


TIMES_INTO_PREVIOUS = {
    "product after a sum": "def f(double(N, M) A) -> (O) { O(i) +=! A(i, j)\n O(i) *= A(i, j) }",
    "gate (wavenet)": """def f(double(N) A, double(N) B) -> (O) {
        O(i) = tanh(A(i))
        O(i) *= 1 / (1 + exp(-B(i)))
    }""",
    "reads the previous value": "def f(double(N) A) -> (O) { O(i) = A(i) + 1\n O(i) *= O(i) * A(i) }",
    "twice, over a 2-d output": """def f(double(N, M) A, double(M) B) -> (O) {
        O(i, j) = A(i, j)
        O(i, j) *= B(j) * A(i, j)
        O(i, j) *= B(j)
    }""",
}


@pytest.mark.parametrize("case", sorted(TIMES_INTO_PREVIOUS))
@pytest.mark.parametrize("zeros", [[], [(0, 1)], [(0, 1), (0, 2)]])
def test_product_into_previous_contents(case: str, zeros: list[tuple[int, int]]) -> None:
    """`*=` without '!': the previous version times the product, exact with zeros."""
    src = TIMES_INTO_PREVIOUS[case]
    ranged = compiler.define(src, target="interp").ranged.checked.inputs
    arrays = [uniform(RNG, (3, 4) if len(t.dims) == 2 else (4,), 0.5, 1.5) for t in ranged]
    for idx in zeros:
        arrays[0][idx if arrays[0].ndim == 2 else idx[1]] = 0.0
    check(src, *arrays)
    native = compiler.define(src)  # the same gradient compiled, against finite differences
    compiler.gradcheck(native, *arrays)


def test_lstm_cell_valid_only_for_some_sizes() -> None:
    """Reads `Gt(b, 3 * H + h)` that only the sizes' check proves in bounds (G >= 4H):
    its gradient's loops carry no bounds check (test_grad_shapes), and are exact."""
    from tools.bench_layers import LSTM

    src = LSTM.replace("float(", "double(")
    b, i, h = 2, 3, 2
    arrays = [uniform(RNG, s) for s in [(b, i), (b, h), (b, h), (4 * h, i), (4 * h, h)]]
    check(src, *arrays)
    compiler.gradcheck(compiler.define(src), *arrays)


def test_softmax_multi_statement() -> None:
    check(open("examples/softmax.tc").read(), uniform(RNG, (3, 4)))


def test_layernorm() -> None:
    src = open("examples/layernorm.tc").read()
    check(src, uniform(RNG, (2, 5)), uniform(RNG, (5,)), uniform(RNG, (5,)))


def test_in_place_updates() -> None:
    src = """
    def f(double(N, M) A, double(N) B) -> (O) {
        O(i) +=! A(i, j) * A(i, j)
        O(i) = O(i) * B(i) + O(i)
        O(i) = exp(O(i) - B(i))
    }"""
    check(src, uniform(RNG, (3, 2)), uniform(RNG, (3,)))


def test_accumulating_second_write_and_partial_overwrite() -> None:
    src = """
    def f(double(N, M) A, double(N) B) -> (O) {
        O(i) +=! A(i, j)
        O(i) += B(i) * A(i, j)
        O(i) = O(i) * O(i) where i in 1:3
    }"""
    check(src, uniform(RNG, (4, 3)), uniform(RNG, (4,)))


def test_lets() -> None:
    src = """
    def f(double(N) A, double(N) B) -> (O) {
        O(i) = s * t where s = A(i) + B(i), t = exp(s)
    }"""
    check(src, uniform(RNG, (4,)), uniform(RNG, (4,)))


def test_exists() -> None:
    src = "def f(double(N) A, double(N) B) -> (O) { O(i) = A(i) * 3 where exists B(i) }"
    check(src, uniform(RNG, (4,)), uniform(RNG, (4,)))


def test_affine_where_constraint() -> None:
    src = """
    def f(double(N) A) -> (O) {
        O(i) +=! A(j) * A(j) where i in 0:N, j in 0:N, i - j in 0:2
    }"""
    check(src, uniform(RNG, (5,)))


def test_indirect_embedding_lookup() -> None:
    src = """
    def embed(double(V, D) E, int32(B) idx) -> (O) {
        O(b, d) = E(idx(b), d) * E(idx(b), d) where b in 0:B, d in 0:D
    }"""
    idx = np.array([1, 3, 1, 0], dtype=np.int32)
    check(src, uniform(RNG, (5, 3)), idx)
    grads = compiler.define(src).vjp(uniform(RNG, (5, 3)), idx, grad_outputs=(np.ones((4, 3)),))
    assert grads[1] is None


def test_strided_conv() -> None:
    src = open("examples/strided_conv.tc").read()
    check(src, uniform(RNG, (1, 2, 5, 5)), uniform(RNG, (2, 2, 2, 2)))


def test_dilated_conv() -> None:
    src = """
    def dconv(double(N, C, H, W) I, double(M, C, KH, KW) W1) -> (O) {
        O(n, m, h, w) +=! I(n, c, h + 2 * kh, w + 2 * kw) * W1(m, c, kh, kw)
    }"""
    check(src, uniform(RNG, (1, 2, 5, 5)), uniform(RNG, (2, 2, 2, 2)))


def test_conv2d_and_matmul() -> None:
    check(
        open("examples/conv2d.tc").read(),
        uniform(RNG, (1, 2, 4, 4)),
        uniform(RNG, (2, 2, 2, 2)),
        uniform(RNG, (2,)),
    )
    check(open("examples/matmul.tc").read(), uniform(RNG, (2, 3)), uniform(RNG, (3, 2)))


def test_maxpool() -> None:
    x = RNG.permutation(32).reshape(1, 2, 4, 4).astype(np.float64)
    check(open("examples/maxpool.tc").read(), x)


def test_float32_kernel_is_checked_in_float64() -> None:
    src = "def f(float(N) A) -> (O) { O(i) = float(A(i)) * A(i) }"
    compiler.gradcheck(compiler.define(src), uniform(RNG, (4,)).astype(np.float32))


def test_gradcheck_reports_a_wrong_backward() -> None:
    src = """
    def sq(double(N) A) -> (O) { O(i) = A(i) * A(i) }
    def sq_bad(double(N) A, double(N) O_grad) -> (A_grad) { A_grad(i) = O_grad(i) * A(i) }
    def sq_good(double(N) A, double(N) O_grad) -> (A_grad) { A_grad(i) = 2 * O_grad(i) * A(i) }
    """
    a = uniform(RNG, (4,))
    compiler.gradcheck(compiler.define(src, "sq", backward="sq_good"), a)
    with pytest.raises(GradcheckError, match=r"input 'A' of def 'sq'.*worst at index"):
        compiler.gradcheck(compiler.define(src, "sq", backward="sq_bad"), a)


def test_integer_inputs_get_no_gradient() -> None:
    src = "def f(double(N) A, int32(N) K) -> (O) { O(i) = A(i) * K(i) }"
    k = compiler.define(src)
    grads = k.vjp(np.ones(3), np.arange(3, dtype=np.int32), grad_outputs=(np.ones(3),))
    assert grads[1] is None
    np.testing.assert_array_equal(grads[0], [0.0, 1.0, 2.0])
