"""Forward mode (jvp) and forward-over-reverse (hvp): against central differences in
float64, the dot-product identity <jvp(t), c> == <t, vjp(c)>, and PyTorch."""

from __future__ import annotations

import numpy as np
import pytest

import compiler
from tests.autodiff.kit import ranged

RNG = np.random.default_rng(16)


def _double(path: str) -> str:
    return open(path).read().replace("float(", "double(")


MLP = """
def mlp(double(B, I) X, double(H, I) W1, double(H) b1, double(O, H) W2, double(O) b2)
    -> (Z, A, Y, L) {
    Z(b, h) +=! X(b, i) * W1(h, i)
    A(b, h) = tanh(Z(b, h) + b1(h))
    Y(b, o) +=! A(b, h) * W2(o, h)
    L() +=! (Y(b, o) + b2(o)) * (Y(b, o) + b2(o))
}
"""

# name -> (source, input shapes); odd sizes, a size-1 dimension, primes.
CASES = {
    "matmul": (_double("examples/matmul.tc"), [(3, 5), (5, 2)]),
    "conv2d": (_double("examples/conv2d.tc"), [(1, 2, 5, 4), (3, 2, 2, 3), (3,)]),
    "softmax": (_double("examples/softmax.tc"), [(3, 7)]),
    "layernorm": (_double("examples/layernorm.tc"), [(2, 5), (5,), (5,)]),
    "maxpool": (_double("examples/maxpool.tc"), [(1, 2, 4, 6)]),
    "mlp": (MLP, [(3, 4), (5, 4), (5,), (2, 5), (2,)]),
    "in_place": (
        """
        def f(double(N, M) A, double(N) B) -> (O) {
            O(i) +=! A(i, j) * A(i, j)
            O(i) = O(i) * B(i) + O(i)
            O(i) = exp(O(i) - B(i)) where i in 1:N
        }""",
        [(4, 3), (4,)],
    ),
    "lets": (
        """
        def f(double(N) A, double(N) B) -> (O) {
            O(i) = s * t where s = A(i) + B(i), t = exp(s)
        }""",
        [(5,), (5,)],
    ),
    "lets_select": (
        """
        def f(double(N) A, double(N) B) -> (O) {
            O(i) = i > 0 ? s * t : A(i) where s = A(i) + B(i), t = exp(s), i in 0:N
        }""",
        [(5,), (5,)],
    ),
}


def _inputs(name: str) -> list[np.ndarray]:
    _, shapes = CASES[name]
    if name == "maxpool":  # distinct values: no ties, so differences are smooth
        n = int(np.prod(shapes[0]))
        return [RNG.permutation(n).reshape(shapes[0]).astype(np.float64) / n]
    return [RNG.uniform(-1, 1, size=s) for s in shapes]


def _central(kernel, arrays, tangents, eps=1e-6):
    plus = kernel(*[a + eps * t for a, t in zip(arrays, tangents, strict=True)])
    minus = kernel(*[a - eps * t for a, t in zip(arrays, tangents, strict=True)])
    return [(p - m) / (2 * eps) for p, m in zip(plus, minus, strict=True)]


@pytest.mark.parametrize("target", ["interp", "llvm"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_jvp_matches_central_differences_and_vjp(case: str, target: str) -> None:
    source, _ = CASES[case]
    kernel = compiler.define(source, target=target)
    arrays = _inputs(case)
    tangents = [RNG.uniform(-1, 1, size=a.shape) for a in arrays]
    outputs, dots = kernel.jvp(*arrays, tangents=tangents)
    for got, want in zip(outputs, kernel(*arrays), strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)
    for got, want in zip(dots, _central(kernel, arrays, tangents), strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    cotangents = [RNG.uniform(-1, 1, size=o.shape) for o in outputs]
    grads = kernel.vjp(*arrays, grad_outputs=cotangents)
    lhs = sum(float(np.vdot(d, c)) for d, c in zip(dots, cotangents, strict=True))
    rhs = sum(float(np.vdot(t, g)) for t, g in zip(tangents, grads, strict=True))
    assert lhs == pytest.approx(rhs, rel=1e-10, abs=1e-10)


@pytest.mark.parametrize("case", sorted(CASES))
def test_tangent_def_reparses(case: str) -> None:
    text = compiler.jvp(CASES[case][0])
    assert "_dot" in text
    ranged(text)


def test_none_tangents_are_symbolic_zeros() -> None:
    source, _ = CASES["matmul"]
    text = compiler.jvp(source, wrt=["A"])
    assert "B_dot" not in text and "A_dot" in text
    kernel = compiler.define(source)
    a, b = _inputs("matmul")
    da = RNG.uniform(-1, 1, size=a.shape)
    _, (dc,) = kernel.jvp(a, b, tangents=(da, None))
    np.testing.assert_allclose(dc, da @ b, rtol=1e-12)
    _, (zero,) = kernel.jvp(a, b, tangents=(None, None))
    assert zero.shape == (3, 2) and not zero.any()


def test_max_tie_rule_matches_reverse_mode() -> None:
    src = "def f(double(N, M) A) -> (O) { O(i) max=! A(i, j) }"
    a = np.array([[1.0, 3.0, 3.0], [2.0, 0.0, 1.0]])
    t = np.array([[10.0, 1.0, 2.0], [1.0, 5.0, 7.0]])
    kernel = compiler.define(src, target="interp")
    _, (dot,) = kernel.jvp(a, tangents=(t,))
    np.testing.assert_array_equal(dot, [3.0, 1.0])  # both tied elements' tangents
    (g,) = kernel.vjp(a, grad_outputs=(np.ones(2),))
    assert float(np.vdot(dot, np.ones(2))) == float(np.vdot(t, g))


@pytest.mark.parametrize(
    "src, message",
    [
        ("def f(double(N, M) A) -> (O) { O(i) *= A(i, j) }", "first write of 'O'"),
        ("def f(double(N, M) A) -> (O) { O(i) = A(i, 0)\n O(i + j) *= A(i, j) }", "several"),
        ("def f(double(N) A) -> (O) { O(i) = lgamma(A(i)) }", "digamma"),
    ],
)
def test_unsupported_constructs_raise_tc_errors(src: str, message: str) -> None:
    with pytest.raises(compiler.TCError, match=message):
        compiler.jvp(src)


EXTREMA = {
    "max= after =": "def f(double(N, M) A, double(N) B) -> (O) { O(n) = B(n)\n O(n) max= A(n, m) }",
    "min= over part": (
        "def f(double(N, M) A, double(N) B) -> (O) { O(n) = B(n)\n"
        " O(n) min= A(n, m) where n in 1:N }"
    ),
}


@pytest.mark.parametrize("target", ["interp", "llvm"])
@pytest.mark.parametrize("case", sorted(EXTREMA))
def test_extremum_into_previous_contents(case: str, target: str) -> None:
    """`max=`/`min=` without '!': differences where there is no tie, and the identity
    <jvp(t), c> == <t, vjp(c)> with ties (the previous value tied with two terms)."""
    kernel = compiler.define(EXTREMA[case], target=target)
    a, b = RNG.uniform(-1, 1, size=(4, 5)), 2 * RNG.uniform(-1, 1, size=4)
    tangents = [RNG.uniform(-1, 1, size=x.shape) for x in (a, b)]
    _, (dot,) = kernel.jvp(a, b, tangents=tangents)
    np.testing.assert_allclose(dot, _central(kernel, [a, b], tangents)[0], rtol=1e-7, atol=1e-9)
    a[1, 1] = a[1, 3] = b[1] = 5.0 if "max" in case else -5.0  # a three-way tie in row 1
    _, (dot,) = kernel.jvp(a, b, tangents=tangents)
    c = RNG.uniform(-1, 1, size=dot.shape)
    ga, gb = kernel.vjp(a, b, grad_outputs=(c,))
    pairing = float(np.vdot(tangents[0], ga) + np.vdot(tangents[1], gb))
    assert float(np.vdot(dot, c)) == pytest.approx(pairing, rel=1e-12, abs=1e-12)


PRODUCTS = {
    "product": "def f(double(N, M) A, double(N) B) -> (O) { O(i) *=! A(i, j) * B(i) }",
    "into previous contents": """def f(double(N, M) A, double(N) B) -> (O) {
        O(i) +=! A(i, j)
        O(i) *= A(i, j) * B(i)
    }""",
    "gate": """def f(double(N, M) A, double(N) B) -> (O) {
        O(i, j) = tanh(A(i, j))
        O(i, j) *= 1 / (1 + exp(-B(i)))
    }""",
}


@pytest.mark.parametrize("target", ["interp", "llvm"])
@pytest.mark.parametrize("zeros", [0, 1, 2, 3])
@pytest.mark.parametrize("case", sorted(PRODUCTS))
def test_products_jvp_and_hvp_are_exact_with_zero_terms(case: str, zeros: int, target: str) -> None:
    """Products are smooth: jvp and hvp match differences also where terms are 0."""
    kernel = compiler.define(PRODUCTS[case], target=target)
    a, b = RNG.uniform(0.5, 1.5, size=(3, 5)), RNG.uniform(0.5, 1.5, size=3)
    a[1, :zeros] = 0.0  # row 1: that many zero terms
    arrays = [a, b]
    tangents = [RNG.uniform(-1, 1, size=x.shape) for x in arrays]
    outputs, (dot,) = kernel.jvp(*arrays, tangents=tangents)
    np.testing.assert_allclose(dot, _central(kernel, arrays, tangents)[0], rtol=1e-6, atol=1e-9)
    cotangents = [RNG.uniform(-1, 1, size=o.shape) for o in outputs]
    hv = kernel.hvp(*arrays, vectors=tangents, grad_outputs=cotangents)
    eps = 1e-6
    plus, minus = (
        kernel.vjp(*[x + sign * eps * t for x, t in zip(arrays, tangents, strict=True)],
                   grad_outputs=cotangents)
        for sign in (1.0, -1.0)
    )  # fmt: skip
    for got, p, m in zip(hv, plus, minus, strict=True):
        np.testing.assert_allclose(got, (p - m) / (2 * eps), rtol=1e-5, atol=1e-7)


def test_integer_input_takes_no_tangent() -> None:
    src = "def f(double(V) E, int32(B) idx) -> (O) { O(b) = E(idx(b)) * E(idx(b)) }"
    kernel = compiler.define(src, target="interp")
    e, idx = RNG.uniform(-1, 1, size=4), np.array([1, 3, 1], dtype=np.int32)
    _, (dot,) = kernel.jvp(e, idx, tangents=(np.ones(4), None))
    np.testing.assert_allclose(dot, 2 * e[idx])
    with pytest.raises(compiler.ShapeError, match="no tangent"):
        kernel.jvp(e, idx, tangents=(np.ones(4), np.ones(3)))


# ------------------------------------------------------------------------ hvp


@pytest.mark.parametrize("target", ["interp", "llvm"])
@pytest.mark.parametrize("case", ["conv2d", "layernorm", "matmul", "mlp", "softmax"])
def test_hvp_matches_differences_of_the_gradient(case: str, target: str) -> None:
    source, _ = CASES[case]
    kernel = compiler.define(source, target=target)
    arrays = _inputs(case)
    vectors = [RNG.uniform(-1, 1, size=a.shape) for a in arrays]
    cotangents = [RNG.uniform(-1, 1, size=o.shape) for o in kernel(*arrays)]
    hv = kernel.hvp(*arrays, vectors=vectors, grad_outputs=cotangents)
    eps = 1e-6

    def grads(sign: float) -> tuple:
        shifted = [a + sign * eps * v for a, v in zip(arrays, vectors, strict=True)]
        return kernel.vjp(*shifted, grad_outputs=cotangents)

    for got, p, m in zip(hv, grads(1.0), grads(-1.0), strict=True):
        np.testing.assert_allclose(got, (p - m) / (2 * eps), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("case", ["conv2d", "layernorm", "mlp", "softmax"])
def test_hvp_matches_torch(case: str) -> None:
    torch = pytest.importorskip("torch")
    source, _ = CASES[case]
    kernel = compiler.define(source)
    arrays = _inputs(case)
    vectors = [RNG.uniform(-1, 1, size=a.shape) for a in arrays]
    outputs = kernel(*arrays)
    weights = [RNG.uniform(-1, 1, size=o.shape) for o in outputs]
    hv = kernel.hvp(*arrays, vectors=vectors, grad_outputs=weights)

    def loss(*xs):  # <weights, outputs> through tcc's own forward, differentiated by torch
        outs = _torch_forward(torch, case, xs)
        return sum((o * torch.from_numpy(w)).sum() for o, w in zip(outs, weights, strict=True))

    xs = tuple(torch.from_numpy(a) for a in arrays)
    vs = tuple(torch.from_numpy(v) for v in vectors)
    _, want = torch.autograd.functional.hvp(loss, xs, vs)
    for got, w in zip(hv, want, strict=True):
        np.testing.assert_allclose(got, w.numpy(), rtol=1e-8, atol=1e-10)


def _torch_forward(torch, case: str, xs):
    """The examples written in PyTorch (an independent implementation)."""
    if case == "conv2d":
        i, w, b = xs
        return (torch.nn.functional.conv2d(i, w, b),)
    if case == "softmax":
        (x,) = xs
        rowmax = x.max(dim=1).values
        shifted = torch.exp(x - rowmax[:, None])
        rowsum = shifted.sum(dim=1)
        return shifted / rowsum[:, None], rowmax, shifted, rowsum
    if case == "layernorm":
        x, g, b = xs
        mean = x.mean(dim=1)
        var = ((x - mean[:, None]) ** 2).mean(dim=1)
        y = g * (x - mean[:, None]) * torch.rsqrt(var[:, None] + 1e-05) + b
        return y, mean, var
    x, w1, b1, w2, b2 = xs
    z = x @ w1.T
    a = torch.tanh(z + b1)
    y = a @ w2.T
    return z, a, y, ((y + b2) ** 2).sum()


@pytest.mark.parametrize("shape", [(1, 1, 1), (1, 7, 1), (2, 1, 3)])
def test_jvp_and_hvp_on_size_one_dimensions(shape: tuple[int, int, int]) -> None:
    m, k, n = shape
    kernel = compiler.define(CASES["matmul"][0])
    a, b = RNG.uniform(-1, 1, size=(m, k)), RNG.uniform(-1, 1, size=(k, n))
    da, db = RNG.uniform(-1, 1, size=(m, k)), RNG.uniform(-1, 1, size=(k, n))
    (c,), (dc,) = kernel.jvp(a, b, tangents=(da, db))
    np.testing.assert_allclose(dc, da @ b + a @ db, rtol=1e-12, atol=1e-14)
    g = RNG.uniform(-1, 1, size=(m, n))
    ha, hb = kernel.hvp(a, b, vectors=(da, db), grad_outputs=(g,))
    np.testing.assert_allclose(ha, g @ db.T, rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(hb, da.T @ g, rtol=1e-12, atol=1e-14)


def test_hvp_checks_grad_outputs_and_refuses_a_hand_written_backward() -> None:
    source = CASES["matmul"][0]
    a, b = _inputs("matmul")
    kernel = compiler.define(source, target="interp")
    with pytest.raises(compiler.ShapeError, match="one array per output"):
        kernel.hvp(a, b, vectors=(a, b), grad_outputs=())
    with pytest.raises(compiler.ShapeError, match=r"expected \(3, 2\)"):
        kernel.hvp(a, b, vectors=(a, b), grad_outputs=(np.ones((2, 3)),))
    user = source + (
        "def mm_grad(double(M, K) A, double(K, N) B, double(M, N) C_grad)"
        " -> (A_grad, B_grad) {\n"
        "    A_grad(m, k) +=! C_grad(m, n) * B(k, n)\n"
        "    B_grad(k, n) +=! C_grad(m, n) * A(m, k)\n}\n"
    )
    kernel = compiler.define(user, "matmul", target="interp", backward="mm_grad")
    with pytest.raises(compiler.TCError, match="hand-written def 'mm_grad'"):
        kernel.hvp(a, b, vectors=(a, b), grad_outputs=(np.ones((3, 2)),))
