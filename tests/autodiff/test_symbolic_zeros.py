"""Symbolic zero cotangents (issue 11): `Kernel.vjp(..., grad_outputs=(g, None))` treats
None as a zero gradient of that output, drops the statements only it feeds, and gives
the same result as the call with dense zeros; `compiler.torch` passes None for outputs
that received no gradient."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import compiler
from compiler.backward import gradient_ranged
from compiler.diagnostics import TCError
from compiler.frontend.printer import print_def

ROOT = Path(__file__).resolve().parents[2]
SOFTMAX = (ROOT / "examples" / "softmax.tc").read_text()
LAYERNORM = (ROOT / "examples" / "layernorm.tc").read_text()
TWO = (
    "def f(float(N) A) -> (B, C) {\n    B(i) = A(i) * A(i)\n    C(i) = 3 * A(i)\n}\n"
    "def f_grad(float(N) A, float(N) B_grad, float(N) C_grad) -> (A_grad) {\n"
    "    A_grad(i) = 2 * B_grad(i) * A(i) + 3 * C_grad(i)\n}\n"
)


def _dense(outputs: tuple, given: tuple) -> tuple:
    return tuple(np.zeros_like(o) if g is None else g for o, g in zip(outputs, given, strict=True))


@pytest.mark.parametrize("target", ["llvm", "interp"])
@pytest.mark.parametrize(
    ("source", "shapes", "keep"),
    [
        (SOFTMAX, [(5, 13)], (0,)),
        (SOFTMAX, [(1, 1)], (0, 3)),
        (SOFTMAX, [(3, 7)], ()),
        (LAYERNORM, [(4, 17), (17,), (17,)], (0,)),
        (LAYERNORM, [(2, 3), (3,), (3,)], (1, 2)),
    ],
)
def test_none_equals_dense_zeros(source: str, shapes: list, keep: tuple, target: str) -> None:
    k = compiler.define(source, target=target)
    rng = np.random.default_rng(len(keep))
    args = [rng.standard_normal(s).astype(np.float32) for s in shapes]
    outputs = k(*args)
    given = tuple(
        rng.standard_normal(o.shape).astype(np.float32) if i in keep else None
        for i, o in enumerate(outputs)
    )
    got = k.vjp(*args, grad_outputs=given)
    want = k.vjp(*args, grad_outputs=_dense(outputs, given))
    for a, b in zip(got, want, strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
    if not keep:
        assert all(not np.any(a) for a in got)


def test_zero_outputs_lose_their_parameter_and_statements() -> None:
    ranged = compiler.pipeline.run(SOFTMAX, upto="ranges")
    full = gradient_ranged(ranged).checked
    only_y = gradient_ranged(ranged, zeros=("rowmax", "shifted", "rowsum")).checked
    full_params = [t.name for t in full.inputs]
    params = [t.name for t in only_y.inputs]
    for name in ("rowmax_grad", "shifted_grad", "rowsum_grad"):
        assert name in full_params
        assert name not in params
    assert "Y_grad" in params
    assert len(only_y.stmts) < len(full.stmts)
    text = print_def(only_y.definition)
    assert compiler.pipeline.run(text, upto="ranges").checked.name == only_y.name


def test_zeros_must_name_outputs() -> None:
    ranged = compiler.pipeline.run(SOFTMAX, upto="ranges")
    with pytest.raises(TCError, match="'X', which is not an output"):
        gradient_ranged(ranged, zeros=("X",))


def test_user_backward_def_gets_dense_zeros() -> None:
    k = compiler.define(TWO, "f", backward="f_grad")
    a = np.arange(1, 6, dtype=np.float32)
    g = np.full(5, 2.0, np.float32)
    (only_b,) = k.vjp(a, grad_outputs=(g, None))
    np.testing.assert_allclose(only_b, 2 * g * a)
    (only_c,) = k.vjp(a, grad_outputs=(None, g))
    np.testing.assert_allclose(only_c, 3 * g)


def test_torch_passes_none_for_unused_outputs() -> None:
    torch = pytest.importorskip("torch")
    import compiler.torch as tct

    layer = tct.define(SOFTMAX, training=True)
    x = torch.randn(4, 9, dtype=torch.float32, requires_grad=True)
    y, *_ = layer(x)
    cot = torch.randn(4, 9)
    (got,) = torch.autograd.grad(y, x, cot)
    ref = x.detach().clone().requires_grad_(True)
    (want,) = torch.autograd.grad(torch.softmax(ref, dim=1), ref, cot)
    torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-4)
    keys = list(layer.gradients._derived)
    assert keys == [(("X",), ("rowmax", "shifted", "rowsum"))]
