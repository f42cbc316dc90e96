"""Choosing the cotangents (issue 47): `tcc compile --grad --loss OUT`,
`compiler.grad(..., outputs=...)`, `Kernel.vjp` with None cotangents and the torch
layer's unused outputs all give the gradient of the named outputs alone: no `_grad`
parameter for the others, nothing only they feed."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import compiler
from compiler.cli import main as tcc
from compiler.diagnostics import TCError
from compiler.frontend.parser import parse

ROOT = Path(__file__).resolve().parents[2]
SOFTMAX = ROOT / "examples" / "softmax.tc"


def _params(text: str) -> list[str]:
    return [p.name for p in parse(text).get().params]


def test_grad_outputs_names_the_loss() -> None:
    text = compiler.grad(SOFTMAX.read_text(), outputs=["Y"])
    assert _params(text) == ["X", "rowmax", "shifted", "rowsum", "Y_grad"]
    assert "_grad_acc(i0" not in text  # no pass-through of another output's cotangent
    assert len(parse(text).get().stmts) == 4


def test_grad_outputs_comma_separated_equals_a_list() -> None:
    src = SOFTMAX.read_text()
    assert compiler.grad(src, outputs="Y,rowsum") == compiler.grad(src, outputs=["rowsum", "Y"])
    assert _params(compiler.grad(src, outputs="Y,rowsum"))[-2:] == ["Y_grad", "rowsum_grad"]


def test_unknown_loss_output_is_an_error_listing_the_outputs() -> None:
    with pytest.raises(
        TCError,
        match=r"'Z' is not an output of def 'softmax'; its outputs are Y, rowmax, shifted, rowsum",
    ) as info:
        compiler.grad(SOFTMAX.read_text(), outputs="Z")
    assert info.value.span is not None and "def softmax" in str(info.value)
    with pytest.raises(TCError, match="no output named"):
        compiler.grad(SOFTMAX.read_text(), outputs=[])


def test_vjp_with_none_cotangents_runs_the_loss_gradient() -> None:
    k = compiler.define(SOFTMAX.read_text(), target="interp")
    x = np.random.default_rng(3).standard_normal((3, 5)).astype(np.float32)
    g = np.random.default_rng(4).standard_normal((3, 5)).astype(np.float32)
    (dx,) = k.vjp(x, grad_outputs=(g, None, None, None))
    y = k(x)[0].astype(np.float64)
    want = y * (g - np.sum(g * y, axis=1, keepdims=True))  # softmax's vjp
    np.testing.assert_allclose(dx, want, atol=1e-5, rtol=1e-4)
    backward = k.__dict__["_zero_grads"][("rowmax", "shifted", "rowsum")]
    names = [t.name for t in backward.ranged.checked.inputs]
    assert names == ["X", "rowmax", "shifted", "rowsum", "Y_grad"]


def test_cli_loss_prints_the_loss_gradient(capsys: pytest.CaptureFixture[str]) -> None:
    assert tcc(["compile", str(SOFTMAX), "--grad", "--loss", "Y"]) == 0
    out = capsys.readouterr().out
    assert out == compiler.grad(SOFTMAX.read_text(), outputs="Y")
    assert tcc(["compile", str(SOFTMAX), "--grad", "--loss", "Y", "--loss", "rowsum"]) == 0
    assert capsys.readouterr().out == compiler.grad(SOFTMAX.read_text(), outputs="Y,rowsum")


def test_cli_loss_errors() -> None:
    run = [sys.executable, "-m", "compiler", "compile", str(SOFTMAX)]
    bad = subprocess.run([*run, "--grad", "--loss", "Z"], capture_output=True, text=True)
    assert bad.returncode == 1
    assert "'Z' is not an output of def 'softmax'; its outputs are Y, rowmax" in bad.stderr
    assert "Traceback" not in bad.stderr
    alone = subprocess.run([*run, "--loss", "Y", "--emit", "loops"], capture_output=True, text=True)
    assert alone.returncode == 1
    assert "pass --grad with it" in alone.stderr
