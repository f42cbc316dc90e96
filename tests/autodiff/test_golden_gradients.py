"""Golden gradients (issue 47): the gradient `tcc compile FILE --grad --loss OUT` prints
for the layers people differentiate, with the loss naming the real output.

For each layer: the printed text (gather form, `compiler.grad(..., outputs=loss)`) is
the golden file tests/golden/gradients/<name>.tc (regenerate every one with
`pytest tests/autodiff/test_golden_gradients.py --update-golden`); its statements and
terms stay within what a careful hand-written gradient has (the bounds below are
that count, not tcc's); the text recompiles with `tcc check` and range inference;
and the compiled gradient (`Kernel.vjp` with None for the other outputs' cotangents)
matches central differences of `<c, loss(x)>` in float64.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pytest

import compiler
from compiler.cli import main as tcc
from compiler.frontend.ast import Binary, BinOp, Expr, Unary, UnaryOp
from compiler.frontend.parser import parse
from compiler.gradcheck import as_float64
from tests.autodiff.kit import reparse

ROOT = Path(__file__).resolve().parents[2]
CORPUS = Path("/work/shared/corpus/tc")

ATTENTION = """
def attention(float(B, T, D) Q, float(B, S, D) K, float(B, S, E) V)
    -> (O, scores, smax, ex, ssum)
{
    scores(b, t, s) +=! Q(b, t, d) * K(b, s, d) * 0.5
    smax(b, t) max=! scores(b, t, s)
    ex(b, t, s) = exp(scores(b, t, s) - smax(b, t))
    ssum(b, t) +=! ex(b, t, s)
    O(b, t, e) +=! ex(b, t, s) * V(b, s, e) / ssum(b, t)
}
"""


@dataclass(frozen=True)
class Layer:
    """A layer, its loss outputs, input shapes, and a hand-written gradient's size."""

    name: str
    source: str  # examples/<file>, corpus:<file> or the text itself
    loss: tuple[str, ...]
    shapes: dict[str, tuple[int, ...]]
    statements: int  # statements a careful hand-written gradient has
    terms: int  # additive terms over all its right-hand sides
    positive: tuple[str, ...] = field(default=())

    def text(self) -> str:
        if self.source.startswith("examples/"):
            return (ROOT / self.source).read_text()
        if self.source.startswith("corpus:"):
            path = CORPUS / self.source.removeprefix("corpus:")
            if not path.exists():
                pytest.skip(f"the TC corpus ({path}) is not on this machine")
            return path.read_text()
        return self.source


LAYERS = [
    # B_grad, I_grad, W1_grad: one term each
    Layer("conv2d", "examples/conv2d.tc", ("O",), {"I": (2, 2, 5, 5), "W1": (3, 2, 3, 3), "B": (3,)}, 3, 3),
    # I_grad zeroed where no window reaches, then gathered; W1_grad
    Layer("strided_conv", "examples/strided_conv.tc", ("O",), {"I": (1, 2, 7, 7), "W1": (2, 2, 3, 3)}, 3, 3),
    Layer("maxpool", "examples/maxpool.tc", ("O",), {"I": (1, 2, 4, 4)}, 1, 1),
    Layer("matmul", "examples/matmul.tc", ("C",), {"A": (3, 4), "B": (4, 5)}, 2, 2),
    # rowsum's, shifted's (two terms), rowmax's, X's (two terms)
    Layer("softmax", "examples/softmax.tc", ("Y",), {"X": (3, 5)}, 4, 6),
    # gamma, beta, var, var / D, mean (two terms), mean / D, X (three terms)
    Layer("layernorm", "examples/layernorm.tc", ("Y",), {"X": (3, 5), "gamma": (5,), "beta": (5,)}, 7, 10),
    # one adjoint per forward statement but the copy normalizedOut; centered and I take two terms
    Layer(
        "batchnorm", "corpus:batchnorm.tc", ("O",),
        {"I": (2, 3, 2, 2), "rMeanIn": (3,), "rVarIn": (3,)}, 10, 12, positive=("rVarIn",),
    ),
    # four gate slices of G, Cnext's (two terms), Cprev, G's zero cover (its slices write
    # parts of it), Bias, Hprev, U, X, W
    Layer(
        "lstm_cell", "corpus:synthetic_lstm_cell.tc", ("Cnext", "Hnext"),
        {"X": (2, 3), "Hprev": (2, 4), "Cprev": (2, 4), "W": (4, 4, 3), "U": (4, 4, 4), "Bias": (4, 4)},
        12, 13,
    ),
    # ex's (a reduction over e, so ssum's contribution is a second statement), V, ssum,
    # smax, scores (two terms), then Q and K through the scores
    Layer("attention", ATTENTION, ("O",), {"Q": (1, 2, 3), "K": (1, 3, 3), "V": (1, 3, 2)}, 8, 9),
]  # fmt: skip


def _gradient(layer: Layer) -> str:
    return compiler.grad(layer.text(), outputs=layer.loss)


def _summands(e: Expr) -> int:
    if isinstance(e, Binary) and e.op in (BinOp.ADD, BinOp.SUB):
        return _summands(e.lhs) + _summands(e.rhs)
    if isinstance(e, Unary) and e.op is UnaryOp.NEG:
        return _summands(e.operand)
    return 1


@pytest.mark.parametrize("layer", LAYERS, ids=lambda layer: layer.name)
def test_golden_gradient(layer: Layer, golden) -> None:  # type: ignore[no-untyped-def]
    golden.check(f"gradients/{layer.name}.tc", _gradient(layer))


@pytest.mark.parametrize("layer", LAYERS, ids=lambda layer: layer.name)
def test_gradient_is_as_short_as_a_hand_written_one(layer: Layer) -> None:
    d = parse(_gradient(layer)).get()
    terms = sum(_summands(s.rhs) for s in d.stmts)
    assert len(d.stmts) <= layer.statements, print_lines(d)
    assert terms <= layer.terms, print_lines(d)
    params = {p.name for p in d.params}
    forward = parse(layer.text()).get()
    for out in forward.outputs:  # a cotangent parameter for the loss outputs alone
        assert (f"{out.name}_grad" in params) == (out.name in layer.loss), out.name


def print_lines(d) -> str:  # type: ignore[no-untyped-def]
    from compiler.frontend.printer import print_def

    return print_def(d)


@pytest.mark.parametrize("layer", LAYERS, ids=lambda layer: layer.name)
def test_printed_gradient_recompiles(layer: Layer, tmp_path: Path) -> None:
    text = _gradient(layer)
    file = tmp_path / f"{layer.name}_grad.tc"
    file.write_text(text)
    assert tcc(["check", str(file)]) == 0
    reparse(text)


@pytest.mark.parametrize("layer", LAYERS, ids=lambda layer: layer.name)
def test_loss_gradient_matches_central_differences(layer: Layer) -> None:
    kernel = as_float64(compiler.define(layer.text(), target="llvm"))
    rng = np.random.default_rng(47)
    arrays = [
        rng.uniform(0.5, 2.0, shape) if name in layer.positive else rng.standard_normal(shape)
        for name, shape in layer.shapes.items()
    ]
    outputs = kernel(*arrays)
    outputs = outputs if isinstance(outputs, tuple) else (outputs,)
    names = [t.name for t in kernel.ranged.checked.outputs]
    cot = [
        rng.standard_normal(o.shape) if n in layer.loss else None
        for n, o in zip(names, outputs, strict=True)
    ]
    grads = kernel.vjp(*arrays, grad_outputs=cot)

    def objective(args: list[np.ndarray]) -> float:
        values = kernel(*args)
        values = values if isinstance(values, tuple) else (values,)
        return sum(float(np.sum(c * v)) for c, v in zip(cot, values, strict=True) if c is not None)

    eps = 1e-6
    for pos, (array, grad) in enumerate(zip(arrays, grads, strict=True)):
        numeric = np.zeros_like(array)
        for e in np.ndindex(array.shape):
            moved = [a.copy() for a in arrays]
            moved[pos][e] += eps
            up = objective(moved)
            moved[pos][e] -= 2 * eps
            numeric[e] = (up - objective(moved)) / (2 * eps)
        np.testing.assert_allclose(grad, numeric, rtol=1e-5, atol=1e-6, err_msg=layer.name)
