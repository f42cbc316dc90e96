"""`tcc compile --jvp` and `--grad --order N`: the printed defs compile and compute
what the library computes."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np

import compiler
from tests.autodiff.kit import ranged

ROOT = Path(__file__).parents[2]
SRC = "def f(double(N) A) -> (O) { O() +=! exp(A(i)) * A(i) }\n"


def tcc(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "compiler", *args], capture_output=True, text=True, cwd=ROOT
    )


def test_compile_jvp_prints_the_tangent_def(tmp_path: Path) -> None:
    f = tmp_path / "f.tc"
    f.write_text(SRC)
    r = tcc("compile", str(f), "--jvp")
    assert r.returncode == 0, r.stderr
    assert r.stdout == compiler.jvp(SRC)
    a, t = np.array([0.3, -1.2, 2.0]), np.array([1.0, 0.5, -2.0])
    o, o_dot = compiler.define(r.stdout, target="interp")(a, t)
    np.testing.assert_allclose(o_dot, np.sum(t * np.exp(a) * (a + 1)), rtol=1e-12)


def test_compile_grad_order_2_is_the_gradient_of_the_gradient(tmp_path: Path) -> None:
    f = tmp_path / "f.tc"
    f.write_text(SRC)
    r = tcc("compile", str(f), "--grad", "--order", "2")
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("def f_grad_grad(")
    assert r.stdout == compiler.grad(compiler.grad(SRC), "f_grad")
    ranged(r.stdout)


def test_compile_order_without_grad_is_a_user_error(tmp_path: Path) -> None:
    f = tmp_path / "f.tc"
    f.write_text(SRC)
    r = tcc("compile", str(f), "--order", "2")
    assert r.returncode == 1
    assert "--grad" in r.stderr and "Traceback" not in r.stderr


def test_second_order_gradient_is_gathered() -> None:
    """No affine scatter is left in the gradient of the gradient of a convolution."""
    from compiler.frontend.ast import Var
    from compiler.frontend.parser import parse

    r = tcc("compile", "examples/conv2d.tc", "--grad", "--order", "2")
    assert r.returncode == 0, r.stderr
    definition = parse(r.stdout).get(None)
    assert any(s.lhs.name.startswith("I_grad") for s in definition.stmts)
    for stmt in definition.stmts:
        assert all(isinstance(a, Var) for a in stmt.lhs.args), stmt
