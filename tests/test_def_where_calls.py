"""[ext] The def's where clause at call time, on every CPU target and through the CLI,
and carried into the gradient and tangent defs; the gradient kernel checks the
preconditions the forward's reads need (issues 48 and 51).

A call whose sizes break a stated condition is a ShapeError (interp, llvm and
cuda-emulated alike) pointing at that condition in the user's file and naming the sizes
bound; the gradient def (`compiler.grad`, `Kernel.grad_source`, `tcc compile --grad`)
and the tangent def carry the clause, so their kernels refuse the same sizes.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import compiler
from compiler.diagnostics import ShapeError
from compiler.frontend.parser import parse, parse_expr

GRU = (
    "def gru(float(N, G) gates, float(N, H) h) -> (O) where G >= 4 * H {\n"
    "    O(n, j) = r * tanh(gates(n, 3 * H + j)) + (1 - r) * h(n, j) where j in 0:H,\n"
    "        r = 1 / (1 + exp(-gates(n, j)))\n"
    "}\n"
)
CLAUSE_COL = GRU.index("G >= 4 * H") + 1
BROKEN = "the sizes N=2, G=12, H=4 break the condition `G >= 4 * H` of the where clause of def"


def _inputs(g: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    return (
        rng.normal(size=(2, g)).astype(np.float32),
        rng.normal(size=(2, 4)).astype(np.float32),
    )


def _reference(gates: np.ndarray, h: np.ndarray) -> np.ndarray:
    r = 1 / (1 + np.exp(-gates[:, :4]))
    return r * np.tanh(gates[:, 12:16]) + (1 - r) * h


@pytest.mark.parametrize("target", ["interp", "llvm", "cuda-emulated"])
def test_a_call_checks_the_clause_at_its_position(target: str) -> None:
    k = compiler.define(GRU, target=target, cache=False)
    rng = np.random.default_rng(48)
    gates, h = _inputs(16, rng)
    (got,) = k(gates, h)
    np.testing.assert_allclose(got, _reference(gates, h), rtol=1e-5, atol=1e-6)
    with pytest.raises(ShapeError) as info:
        k(*_inputs(12, rng))
    (diag,) = info.value.diagnostics
    assert diag.message == f"{BROKEN} 'gru'"
    assert (diag.span.line, diag.span.col, diag.span.text) == (1, CLAUSE_COL, "G >= 4 * H")


def test_a_call_fails_exactly_for_the_sizes_that_break_the_clause() -> None:
    src = (
        "def f(float(N) A, float(M) B) -> (O) where M >= 2 * N - 3, M % 2 == 0 {\n"
        "    O(i) = A(i) + B(2 * i - 3) where i in 2:N\n}\n"
    )
    k = compiler.define(src, target="llvm", cache=False)
    assert k.ranged.warnings == ()  # `B(2 * i - 3)` is in bounds under the clause
    for n in range(2, 7):
        for m in range(1, 12):
            a, b = np.arange(n, dtype=np.float32), np.arange(m, dtype=np.float32) * 10
            if m >= 2 * n - 3 and m % 2 == 0:
                (got,) = k(a, b)
                want = np.zeros(n, np.float32)
                want[2:] = a[2:] + b[2 * np.arange(2, n) - 3]
                np.testing.assert_array_equal(got, want)
            else:
                with pytest.raises(ShapeError, match=f"the sizes N={n}, M={m} break"):
                    k(a, b)


@pytest.mark.parametrize("target", ["interp", "llvm"])
def test_the_gradient_carries_the_clause(target: str) -> None:
    k = compiler.define(GRU, target=target, cache=False)
    head = k.grad_source.splitlines()[0]
    assert head.endswith(") where G >= 4 * H {")
    assert parse(k.grad_source).get().where == (parse_expr("G >= 4 * H"),)
    rng = np.random.default_rng(51)
    gates, h = _inputs(12, rng)
    with pytest.raises(ShapeError) as info:
        k.grad(gates, h, np.ones((2, 4), np.float32))
    (diag,) = info.value.diagnostics
    assert diag.message == f"{BROKEN} 'gru_grad'"
    assert (diag.span.line, diag.span.col) == (1, CLAUSE_COL)
    gates, h = _inputs(16, rng)  # the gradient still computes for sizes the clause allows
    cotangent = rng.normal(size=(2, 4)).astype(np.float32)
    gates_grad, h_grad = k.grad(gates, h, cotangent)
    r = 1 / (1 + np.exp(-gates[:, :4]))
    np.testing.assert_allclose(h_grad, cotangent * (1 - r), rtol=1e-5, atol=1e-6)
    assert np.all(gates_grad[:, 4:12] == 0)
    t = np.tanh(gates[:, 12:16])
    np.testing.assert_allclose(
        gates_grad[:, 12:], cotangent * r * (1 - t * t), rtol=1e-5, atol=1e-6
    )


def test_the_tangent_def_carries_the_clause() -> None:
    tangent = parse(compiler.jvp(GRU)).get()
    assert tangent.name == "gru_jvp" and tangent.where == (parse_expr("G >= 4 * H"),)
    k = compiler.define(GRU, target="interp", cache=False)
    rng = np.random.default_rng(3)
    gates, h = _inputs(12, rng)
    with pytest.raises(ShapeError, match="break the condition `G >= 4 \\* H`"):
        k.jvp(gates, h, tangents=(np.ones_like(gates), None))


def test_a_gradient_kernel_rejects_the_sizes_its_forward_rejects() -> None:
    """Issue 51: without a clause, the read's inferred precondition (`G >= 4 * H`)
    survives the gather pass into the gradient kernel."""
    src = GRU.replace(" where G >= 4 * H", "")
    k = compiler.define(src, target="llvm", cache=False)
    rng = np.random.default_rng(5)
    gates, h = _inputs(12, rng)
    messages = []
    for call in (lambda: k(gates, h), lambda: k.grad(gates, h, np.ones((2, 4), np.float32))):
        with pytest.raises(ShapeError) as info:
            call()
        messages.append(info.value.diagnostics[0].message)
    forward, backward = messages
    assert forward == backward
    assert "reads `gates(n, 3 * H + j)` out of bounds with N=2, G=12, H=4" in forward
    assert "it needs `G >= 4 * H`" in forward


def _tcc(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "compiler", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_tcc_check_accepts_it_and_tcc_run_reports_the_clause(tmp_path: Path) -> None:
    (tmp_path / "gru.tc").write_text(GRU)
    checked = _tcc("check", "gru.tc", cwd=tmp_path)
    assert checked.returncode == 0, checked.stderr
    assert checked.stderr == ""  # no warning: the clause proves every read in bounds
    ran = _tcc("run", "gru.tc", "--shape", "gates=2,12,h=2,4", "--target", "interp", cwd=tmp_path)
    assert ran.returncode == 1
    assert f"gru.tc:1:{CLAUSE_COL}: error: {BROKEN} 'gru'" in ran.stderr
    assert "Traceback" not in ran.stderr
    ok = _tcc("run", "gru.tc", "--shape", "gates=2,16,h=2,4", "--target", "interp", cwd=tmp_path)
    assert ok.returncode == 0, ok.stderr
    graded = _tcc("compile", "gru.tc", "--grad", cwd=tmp_path)
    assert graded.returncode == 0, graded.stderr
    assert ") where G >= 4 * H {" in graded.stdout.splitlines()[0]
