"""Strided gathers without divisibility (`poly.invert.unit_inner`): each scatter
subscript is solved for a variable with coefficient +-1 (`2 * h + kh = y` gives
`kh = y - 2 * h`, `h` in a floor-divided range), never for a strided one.

- golden: the printed gradients of strided (2, 3) and dilated convolutions
  (tests/golden/gather/*_grad.txt), with a plain left-hand side and no `%`;
- cost: the gather needs a small fraction of the isl budget (it used to search);
- numbers: the gradients of strided and dilated convolutions and a transposed
  convolution's forward (a user's scatter), against NumPy in float64, at odd sizes,
  on every target (interp, llvm as partial scatter and as gather, cuda-emulated);
  and against central finite differences.
"""

from __future__ import annotations

import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest

import compiler
from compiler.frontend.printer import print_def
from compiler.options import Options
from compiler.pipeline import PassContext, run
from compiler.poly.gather import GatherBudgetWarning, remaining_scatters, scatter_to_gather
from compiler.poly.invert import unit_inner
from tests.codegen.kit import EVERY_TARGET

EXAMPLE = Path(__file__).parents[2] / "examples" / "strided_conv.tc"


def _conv(stride: int, dilation: int = 1) -> str:
    def sub(v: str) -> str:
        k = f"k{v}" if dilation == 1 else f"{dilation} * k{v}"
        return f"{stride} * {v} + {k}" if stride != 1 else f"{v} + {k}"

    return (
        "def conv(double(N, C, H, W) I, double(M, C, KH, KW) W1) -> (O) {\n"
        f"    O(n, m, h, w) +=! I(n, c, {sub('h')}, {sub('w')}) * W1(m, c, kh, kw)\n}}\n"
    )


def _conv_t(stride: int) -> str:
    return (
        "def conv_t(double(N, C, H, W) I, double(C, M, KH, KW) W1) -> (O) {\n"
        f"    O(n, m, {stride} * h + kh, {stride} * w + kw) +=! I(n, c, h, w) * W1(c, m, kh, kw)\n"
        "}\n"
    )


# ------------------------------------------------------------ NumPy oracles (float64)


def _windows(i: np.ndarray, k: tuple[int, int], stride: int, dilation: int) -> tuple:
    """Per kernel offset (a, b): the slices of the input it reads."""
    ho = (i.shape[2] - dilation * (k[0] - 1) - 1) // stride + 1
    wo = (i.shape[3] - dilation * (k[1] - 1) - 1) // stride + 1
    for a in range(k[0]):
        for b in range(k[1]):
            rows = slice(dilation * a, dilation * a + stride * (ho - 1) + 1, stride)
            cols = slice(dilation * b, dilation * b + stride * (wo - 1) + 1, stride)
            yield a, b, rows, cols


def _conv_np(i: np.ndarray, w: np.ndarray, stride: int, dilation: int) -> np.ndarray:
    parts = [
        np.einsum("nchw,mc->nmhw", i[:, :, r, c], w[:, :, a, b])
        for a, b, r, c in _windows(i, w.shape[2:], stride, dilation)
    ]
    return np.sum(parts, axis=0)


def _conv_grad_np(i, w, g, stride: int, dilation: int):  # type: ignore[no-untyped-def]
    i_grad, w_grad = np.zeros_like(i), np.zeros_like(w)
    for a, b, r, c in _windows(i, w.shape[2:], stride, dilation):
        i_grad[:, :, r, c] += np.einsum("nmhw,mc->nchw", g, w[:, :, a, b])
        w_grad[:, :, a, b] = np.einsum("nmhw,nchw->mc", g, i[:, :, r, c])
    return i_grad, w_grad


def _conv_t_np(i: np.ndarray, w: np.ndarray, stride: int) -> np.ndarray:
    (n, _, h, wd), (_, m, kh, kw) = i.shape, w.shape
    out = np.zeros((n, m, stride * (h - 1) + kh, stride * (wd - 1) + kw))
    for a in range(kh):
        for b in range(kw):
            rows = slice(a, a + stride * (h - 1) + 1, stride)
            cols = slice(b, b + stride * (wd - 1) + 1, stride)
            out[:, :, rows, cols] += np.einsum("nchw,cm->nmhw", i, w[:, :, a, b])
    return out


# ------------------------------------------------------------ golden text, cost


@pytest.mark.parametrize(
    ("name", "stride", "dilation"),
    [("strided_conv", 2, 1), ("stride3_conv", 3, 1), ("dilated_conv", 1, 2)],
)
def test_printed_gradient_is_a_gather(name: str, stride: int, dilation: int, golden) -> None:  # type: ignore[no-untyped-def]
    text = compiler.grad(_conv(stride, dilation))
    golden.check(f"gather/{name}_grad.txt", text)
    (i_grad,) = [line for line in text.splitlines() if line.lstrip().startswith("I_grad")][-1:]
    assert i_grad.lstrip().startswith("I_grad(n, c, y, x) +")
    assert "%" not in text
    # the raw form is still autodiff's scatter
    assert "I_grad(n, c, " in compiler.grad(_conv(stride, dilation), form="scatter")


def test_example_prints_its_gradient_as_a_gather(golden) -> None:  # type: ignore[no-untyped-def]
    source = EXAMPLE.read_text()
    text = compiler.grad(source)
    golden.check("gather/strided_conv_example_grad.txt", text)
    assert "W1(m, c, y - 2 * h, x - 2 * w)" in text
    kernel = compiler.define(source, cache=False)
    assert kernel.grad_source == text  # before and after the gradient is compiled
    kernel.grad  # noqa: B018
    assert kernel.grad_source == text


def test_cli_prints_the_gather_and_the_raw_scatter(golden) -> None:  # type: ignore[no-untyped-def]
    def cli(*args: str) -> str:
        done = subprocess.run(
            [sys.executable, "-m", "compiler", "compile", str(EXAMPLE), "--grad", *args],
            capture_output=True, text=True, timeout=120, check=True,
        )  # fmt: skip
        assert done.stderr == ""
        return done.stdout

    golden.check("gather/strided_conv_example_grad.txt", cli())
    assert "I_grad(n, c, 2 * h + kh, 2 * w + kw) +=!" in cli("--form", "scatter")


@pytest.mark.parametrize(
    ("text", "grad"), [(_conv(2), True), (_conv(3), True), (_conv(1, 2), True), (_conv_t(2), False)]
)
def test_strided_gather_is_cheap(text: str, grad: bool) -> None:
    # the gradient's scatter (I_grad), or the user's (the transposed convolution)
    ranged = run(text, upto="grad" if grad else "ranges", ctx=PassContext(grad=grad))
    with warnings.catch_warnings():
        warnings.simplefilter("error", GatherBudgetWarning)
        # a tenth of the default budget (MAX_OPERATIONS) is ample
        gathered = scatter_to_gather(ranged, max_operations=300_000)
    assert remaining_scatters(gathered) == ()
    assert "%" not in print_def(gathered.checked.definition)


def test_unit_inner_rules() -> None:
    # variables (n, m, h, w, c, kh, kw); candidates in order of preference
    cands = [1, 5, 6, 0, 2, 3, 4]
    rows = [(1, 0, 0, 0, 0, 0, 0), (0, 0, 0, 0, 1, 0, 0), (0, 0, 2, 0, 0, 1, 0)]
    rows.append((0, 0, 0, 2, 0, 0, 1))
    assert unit_inner(rows, cands) == (1, 2, 3)  # m, h, w stay; kh, kw eliminated
    # h + kh: both have coefficient 1; h, the less preferred, is eliminated
    assert unit_inner([(1, 1)], [1, 0]) == (1,)
    assert unit_inner([(2, 3)], [0, 1]) is None  # 2 * i + 3 * k: no unit coefficient
    # i + 2 * j, 2 * i + j: units on the diagonal, but the determinant is -3
    assert unit_inner([(1, 2), (2, 1)], [0, 1]) is None
    assert unit_inner([(1, 0), (1, 0)], [0, 1]) is None  # A(i, i): i twice
    assert unit_inner([(2, 3, 1)], [2, 0, 1]) is None  # two inner variables in one
    assert unit_inner([(1, 0, 0), (0, 0, 0)], [0, 1]) == (1,)  # a constant subscript


# ------------------------------------------------------------ numbers

CONV_CASES = [
    # stride, dilation, N, C, M, H, W, KH, KW
    (1, 1, 1, 2, 3, 5, 7, 3, 2),
    (2, 1, 2, 3, 2, 7, 8, 3, 3),  # W - KW not a multiple of the stride
    (2, 1, 1, 1, 1, 1, 1, 1, 1),  # every size 1
    (3, 1, 1, 2, 3, 11, 13, 2, 3),
    (1, 2, 2, 1, 2, 9, 7, 2, 3),
]


@pytest.mark.parametrize(("target", "options"), EVERY_TARGET)
@pytest.mark.parametrize(("stride", "dilation", "n", "c", "m", "h", "w", "kh", "kw"), CONV_CASES)
def test_conv_gradient_matches_numpy(
    target: str, options: Options | None, stride: int, dilation: int, n: int, c: int,
    m: int, h: int, w: int, kh: int, kw: int,
) -> None:  # fmt: skip
    rng = np.random.default_rng(stride * 10 + dilation + h)
    i, wt = rng.standard_normal((n, c, h, w)), rng.standard_normal((m, c, kh, kw))
    kernel = compiler.define(_conv(stride, dilation), target=target, options=options, cache=False)
    (out,) = kernel(i, wt)
    np.testing.assert_allclose(out, _conv_np(i, wt, stride, dilation), rtol=1e-12, atol=1e-12)
    g = rng.standard_normal(out.shape)
    got = kernel.vjp(i, wt, grad_outputs=(g,))
    want = _conv_grad_np(i, wt, g, stride, dilation)
    for a, b in zip(got, want, strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-11, atol=1e-11)


@pytest.mark.parametrize("stride", [2, 3])
def test_gathered_gradient_on_the_cpu_matches_numpy(stride: int) -> None:
    # Options(gather="full"): the CPU runs the gather itself, not the partial scatter
    rng = np.random.default_rng(stride)
    i, wt = rng.standard_normal((2, 3, 11, 8)), rng.standard_normal((4, 3, 3, 2))
    kernel = compiler.define(_conv(stride), options=Options(gather="full"), cache=False)
    assert not any("partial scatter" in note for note in kernel.grad.info()["notes"])
    (out,) = kernel(i, wt)
    g = rng.standard_normal(out.shape)
    got = kernel.vjp(i, wt, grad_outputs=(g,))
    for a, b in zip(got, _conv_grad_np(i, wt, g, stride, 1), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-11, atol=1e-11)


@pytest.mark.parametrize(("target", "options"), [*EVERY_TARGET, ("llvm", Options(gather="full"))])
@pytest.mark.parametrize(("stride", "h", "w", "kh"), [(2, 5, 4, 3), (3, 3, 7, 2), (2, 1, 1, 1)])
def test_transposed_conv_forward_matches_numpy(
    target: str, options: Options | None, stride: int, h: int, w: int, kh: int
) -> None:
    rng = np.random.default_rng(h * 10 + w)
    i, wt = rng.standard_normal((2, 3, h, w)), rng.standard_normal((3, 2, kh, 3))
    kernel = compiler.define(_conv_t(stride), target=target, options=options, cache=False)
    (out,) = kernel(i, wt)
    np.testing.assert_allclose(out, _conv_t_np(i, wt, stride), rtol=1e-12, atol=1e-12)


def test_transposed_conv_full_gather_form() -> None:
    gathered = scatter_to_gather(run(_conv_t(2), upto="ranges"), mode="full")
    text = print_def(gathered.checked.definition)
    assert "O(n, m, y, x) +" in text and "I(n, c, h, w) * W1(c, m, y - 2 * h, x - 2 * w)" in text
    assert "%" not in text


def test_strided_gradient_passes_gradcheck() -> None:
    rng = np.random.default_rng(11)
    i, wt = rng.standard_normal((1, 2, 7, 6)), rng.standard_normal((2, 2, 3, 2))
    for options in (None, Options(gather="full")):
        kernel = compiler.define(_conv(2), options=options, cache=False)
        compiler.gradcheck(kernel, i, wt)
