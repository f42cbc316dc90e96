"""The CPU schedule pads a clamped gather's read only when the statement's other
factors stay finite and in bounds over the unclamped ranges (cpu.pad
`_finite_elsewhere`): a `let` of a clamped variable is evaluated where the clamp kept
the statement from evaluating it (tools.fuzz seed 37580: llvm read A(-1) in a let)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import compiler

SCATTER_WITH_LET = """
def f(float(N) A) -> (O) {
    O(i1, i2 + k3) +=! t0 * (2.0 * A(k3)) where k3 in 0:N, i1 in 0:1, i2 in 0:N,
        t0 = logb(A(k3 / 2) * A(k3 / 2) + 0.5)
}
"""


def _reference(a: np.ndarray) -> np.ndarray:
    n = a.size
    out = np.zeros((1, 2 * n - 1), np.float64)
    for k in range(n):
        t0 = np.floor(np.log2(a[k // 2] * a[k // 2] + 0.5))  # logb of a positive normal
        for i2 in range(n):
            out[0, i2 + k] += t0 * 2.0 * a[k]
    return out


@pytest.mark.parametrize("n", [1, 2, 5, 8])
@pytest.mark.parametrize("target", ["interp", "llvm"])
def test_a_let_of_the_clamped_variable_keeps_the_clamp(n: int, target: str) -> None:
    a = np.linspace(0.5, 3.0, n).astype(np.float32)
    (o,) = compiler.define(SCATTER_WITH_LET, target=target)(a)
    np.testing.assert_allclose(o, _reference(a.astype(np.float64)), rtol=1e-5)


def _loops(text: str, tmp_path: Path) -> str:
    path = tmp_path / "f.tc"
    path.write_text(text)
    done = subprocess.run(
        [sys.executable, "-m", "compiler", "compile", str(path), "--emit", "loops"],
        capture_output=True,
        text=True,
        check=True,
    )
    return done.stdout


def test_the_let_blocks_the_pad_but_a_plain_read_does_not(tmp_path: Path) -> None:
    assert "A_pad" not in _loops(SCATTER_WITH_LET, tmp_path)
    plain = SCATTER_WITH_LET.replace("t0 * ", "3.0 * ").replace(
        ",\n        t0 = logb(A(k3 / 2) * A(k3 / 2) + 0.5)", ""
    )
    assert "t0" not in plain
    assert "alloc temp float32 A_pad" in _loops(plain, tmp_path)
