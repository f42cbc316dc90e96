"""The padding of clamped gathers (`compiler/cpu/pad.py`): which gradients the CPU
schedule pads (the def it lowers; the gradient def itself never has a pad), that the
transposed convolution is then register-tiled, and that the gradients equal torch's (an
oracle independent of tcc's gradient defs) in float64."""

from __future__ import annotations

import numpy as np
import pytest

import compiler
from compiler import loops as L
from compiler.cpu.model import lower
from compiler.cpu.pad import pad_gathers
from compiler.frontend.printer import print_def
from compiler.options import Options
from compiler.pipeline import gradient
from tests.codegen.kit import find as _find

CONV = (
    "def conv(double(N, C, H, W) I, double(M, C, KH, KW) W1) -> (O) {\n"
    "    O(n, m, h, w) +=! I(n, c, h + kh, w + kw) * W1(m, c, kh, kw)\n}"
)


def _grad_text(src: str) -> str:
    k = compiler.define(src, target="interp")
    return print_def(gradient(k.ranged).checked.definition)


def _padded_text(src: str) -> str:
    """The gradient def as the CPU schedule lowers it (`cpu.pad`'s def)."""
    k = compiler.define(src, target="interp")
    return print_def(pad_gathers(gradient(k.ranged)).ranged.checked.definition)


def test_the_gradient_def_has_no_pad_and_its_schedule_reads_a_padded_copy() -> None:
    text = _grad_text(CONV)
    assert "_pad" not in text
    assert "kh in max(0, y + KH - H):min(KH, y + 1)" in text  # the clamped gather
    padded = _padded_text(CONV)
    assert "double(N, M, H + KH - 1, W + KW - 1) O_grad_pad" in padded
    assert "O_grad_pad(n, m, y - kh + (KH - 1), x - kw + (KW - 1))" in padded
    assert "kh in 0:KH, kw in 0:KW" in padded  # constant window bounds
    assert "max(" not in padded.split("I_grad(n, c, y, x)")[1].split("\n")[0]


def test_the_padded_transposed_convolution_is_register_tiled() -> None:
    k = compiler.define(CONV.replace("double", "float"))
    f = lower(gradient(k.ranged), Options())
    tiles = [
        lp
        for lp in _find(f.body, L.For)
        if lp.var == "x"
        and lp.step == 16
        and any(s.buffer.name == "I_grad" for s in _find(lp, L.Store))
    ]
    assert tiles and all(_find(t.body, L.Local) for t in tiles)


@pytest.mark.parametrize(
    ("n", "c", "h", "w", "m", "kh", "kw"),
    [(1, 1, 1, 1, 1, 1, 1), (2, 3, 7, 6, 4, 3, 2), (2, 2, 5, 5, 3, 5, 5), (1, 2, 4, 11, 2, 4, 3),
     (2, 3, 9, 8, 2, 1, 1), (1, 1, 17, 3, 1, 2, 3)],
)  # fmt: skip
def test_conv_gradients_equal_torch(
    n: int, c: int, h: int, w: int, m: int, kh: int, kw: int
) -> None:
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(n + c + h + w + m + kh + kw)
    i, wt = rng.standard_normal((n, c, h, w)), rng.standard_normal((m, c, kh, kw))
    _equals_torch(CONV, (i, wt), torch.conv2d, rng)


def _equals_torch(src: str, arrays: tuple[np.ndarray, ...], fn: object, rng: object) -> None:
    """The def's output and its vjp (a random cotangent) against torch's `fn` and
    autograd, in float64."""
    torch = pytest.importorskip("torch")
    k = compiler.define(src)
    (o,) = k(*arrays)
    leaves = [torch.from_numpy(a).requires_grad_() for a in arrays]
    want = fn(*leaves)  # type: ignore[operator]
    np.testing.assert_allclose(o, want.detach().numpy(), rtol=1e-12, atol=1e-12)
    g = rng.standard_normal(o.shape)  # type: ignore[attr-defined]
    got = k.vjp(*arrays, grad_outputs=(g,))
    want.backward(torch.from_numpy(g))
    for a, b in zip(got, leaves, strict=True):
        np.testing.assert_allclose(a, b.grad.numpy(), rtol=1e-12, atol=1e-12)


WGRAD = (
    "def wgrad(double(N, C, H, W) I, double(N, M, HO, WO) G) -> (WG) {\n"
    "    WG(m, c, kh, kw) +=! G(n, m, h, w) * I(n, c, h + kh, w + kw)\n}"
)


def test_padding_that_may_not_pay_is_guarded_by_the_sizes() -> None:
    # The weight gradient's own input gradient: the gather runs `h` over 0:HO, whose
    # padded box is HO wide, against the H - HO + 1 (the window) the clamps allow.
    # Which is smaller depends on the sizes: the padded statement runs where
    # X = HO + WO <= 2 D (D = the window's extents), the clamped one elsewhere.
    text = _padded_text(WGRAD)
    pays = "2 * (H - HO + 1 + (W - WO + 1)) - (HO + WO) in 0:"
    padded, exact = (line for line in text.splitlines() if line.lstrip().startswith("I_grad("))
    assert "WG_grad_pad(" in padded and "+=!" in padded
    assert pays in padded
    assert "WG_grad(m, c, y - h, x - w)" in exact and " += " in exact and "max(" in exact
    assert "HO + WO - 2 * (H - HO + 1 + (W - WO + 1)) in 1:" in exact
    (copy,) = (line for line in text.splitlines() if line.lstrip().startswith("WG_grad_pad("))
    assert pays in copy  # no copy for the sizes that take the clamped statement
    # a convolution's window is a size of its own: padding may not pay there either
    assert "in 1:KH + KW + 1" in _padded_text(CONV)
    assert "_pad" not in _grad_text(WGRAD)  # the choice is the schedule's, not the def's


@pytest.mark.parametrize(
    ("n", "c", "h", "w", "m", "ho", "wo"),
    [(2, 3, 9, 8, 2, 7, 6), (1, 2, 6, 6, 3, 2, 2), (2, 1, 5, 7, 2, 5, 1), (1, 1, 1, 1, 1, 1, 1),
     (2, 2, 11, 4, 3, 10, 4)],
)  # fmt: skip
def test_weight_gradient_gradients_equal_torch_on_both_sides_of_the_guard(
    n: int, c: int, h: int, w: int, m: int, ho: int, wo: int
) -> None:
    # (9, 8; 7, 6) and (11, 4; 10, 4) take the clamped statement, (6, 6; 2, 2) the padded
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(h * w + ho)
    i, g = rng.standard_normal((n, c, h, w)), rng.standard_normal((n, m, ho, wo))

    def wgrad(ti: object, tg: object) -> object:
        return torch.conv2d(ti.transpose(0, 1), tg.transpose(0, 1)).transpose(0, 1)  # type: ignore[attr-defined]

    _equals_torch(WGRAD, (i, g), wgrad, rng)


@pytest.mark.parametrize(
    "src",
    [
        # strided: the subscript is `y - 2 * kh`-like after the gather pass, not `v - r`
        "def f(double(N, H) I, double(K) W1) -> (O) { O(n, h) +=! I(n, 2 * h + k) * W1(k) }",
        # a 1-D convolution: its input gradient is padded
        "def f(double(N, H) I, double(K) W1) -> (O) { O(n, h) +=! I(n, h + k) * W1(k) }",
    ],
)
def test_gradients_with_or_without_pads_equal_the_evaluators(src: str) -> None:
    rng = np.random.default_rng(5)
    i, wt = rng.standard_normal((2, 9)), rng.standard_normal(3)
    k, ref = compiler.define(src), compiler.define(src, target="interp")
    (o,) = k(i, wt)
    g = rng.standard_normal(o.shape)
    for a, b in zip(
        k.vjp(i, wt, grad_outputs=(g,)), ref.vjp(i, wt, grad_outputs=(g,)), strict=True
    ):
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-12)


def test_a_sum_that_is_not_a_product_keeps_its_clamps() -> None:
    src = "def f(double(H) I) -> (O) { O(h) +=! exp(I(h + k)) where k in 0:3 }"
    text = _grad_text(src)
    assert "_pad" not in text


def test_a_forward_def_is_padded_in_its_loops_only() -> None:
    src = (
        "def f(double(H) I, double(K) W1) -> (O) {\n"
        "    O(y) +=! I(y - k) * W1(k) where y in 0:H, k in max(0, y - H + 1):min(K, y + 1)\n}"
    )
    k = compiler.define(src)
    assert [t.name for t in k.ranged.checked.outputs] == ["O"]
    assert pad_gathers(k.ranged).scratch == ("I_pad",)
    f = lower(k.ranged, Options())
    assert [b.name for b in f.buffers] == ["I", "W1", "O"]  # the pad is no parameter
    (pad,) = [a.buffer for a in _find(f.body, L.Alloc) if a.buffer.name == "I_pad"]
    assert pad.role is L.Role.TEMP
    i, wt = np.arange(5.0), np.array([1.0, 2.0])
    (o,) = k(i, wt)
    want = [sum(i[y - kk] * wt[kk] for kk in range(2) if 0 <= y - kk < 5) for y in range(5)]
    np.testing.assert_allclose(o, want)


def test_an_accumulated_output_gradient_is_padded_too() -> None:
    # T is read twice (T and O = T + Bias): its gradient is the output `T_grad_acc`,
    # whose declared shape gives the pad's extent
    torch = pytest.importorskip("torch")
    src = (
        "def cb(double(N, C, H, W) I, double(M, C, KH, KW) W1, double(M) Bias) -> (T, O) {\n"
        "    T(n, m, h, w) +=! I(n, c, h + kh, w + kw) * W1(m, c, kh, kw)\n"
        "    O(n, m, h, w) = T(n, m, h, w) + Bias(m)\n}"
    )
    assert "T_grad_acc_pad" in _padded_text(src)
    rng = np.random.default_rng(11)
    i, wt, b = (
        rng.standard_normal((2, 3, 6, 7)),
        rng.standard_normal((4, 3, 3, 2)),
        rng.standard_normal(4),
    )
    k = compiler.define(src)
    t, o = k(i, wt, b)
    gt, go = rng.standard_normal(t.shape), rng.standard_normal(o.shape)
    got = k.vjp(i, wt, b, grad_outputs=(gt, go))
    ti, tw, tb = (torch.from_numpy(a).requires_grad_() for a in (i, wt, b))
    tt = torch.conv2d(ti, tw)
    (
        (tt * torch.from_numpy(gt)).sum()
        + ((tt + tb[None, :, None, None]) * torch.from_numpy(go)).sum()
    ).backward()
    for a, ref in zip(got, (ti, tw, tb), strict=True):
        np.testing.assert_allclose(a, ref.grad.numpy(), rtol=1e-12, atol=1e-12)


def test_a_pad_piecewise_in_the_sizes_leaves_the_gather_unpadded() -> None:
    """Fuzz seed 26009: the pad of `P_grad` before its rows is `N == 1 && M >= 2 ? 0 : 1`,
    which no tensor dimension can be: the gather is lowered unpadded (it was an
    InternalError, "the padded gather does not check"), and its gradient is exact."""
    src = (
        "def f(double(N, M) A, double(M) B) -> (P) {\n"
        "    P(i, j) +=! B(i + k) * A(min(k, N - 1), 0) where k in 0:2, j in 0:max(M, 2)\n}"
    )
    assert "_pad" not in _padded_text(src)
    rng = np.random.default_rng(0)
    k = compiler.define(src, target="llvm", cache=False)
    for n, m in ((1, 2), (3, 5), (2, 3)):
        compiler.gradcheck(k, rng.standard_normal((n, m)), rng.standard_normal(m))
