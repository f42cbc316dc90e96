"""`tcc gradcheck` as a subprocess: exit codes and reports."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).parents[2]


def tcc(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "compiler", *args], capture_output=True, text=True, cwd=ROOT
    )


def test_gradcheck_ok() -> None:
    r = tcc("gradcheck", "examples/matmul.tc", "--shape", "A=2,3", "--shape", "B=3,2")
    assert r.returncode == 0, r.stderr
    assert "gradcheck ok (matmul)" in r.stdout


def test_gradcheck_mismatch_exits_1_with_report(tmp_path: Path) -> None:
    f = tmp_path / "sq.tc"
    f.write_text(
        "def sq(double(N) A) -> (O) { O(i) = A(i) * A(i) }\n"
        "def bad(double(N) A, double(N) O_grad) -> (A_grad) { A_grad(i) = O_grad(i) }\n"
    )
    r = tcc("gradcheck", str(f), "--entry", "sq", "--backward", "bad", "--shape", "A=3")
    assert r.returncode == 1
    assert "gradcheck failed for input 'A' of def 'sq'" in r.stderr
    assert "Traceback" not in r.stderr


def test_gradcheck_missing_shape_is_a_user_error() -> None:
    r = tcc("gradcheck", "examples/matmul.tc", "--shape", "A=2,3")
    assert r.returncode == 1
    assert "no shape given for input 'B'" in r.stderr


def test_compile_grad_prints_the_gradient_tc() -> None:
    r = tcc("compile", "examples/matmul.tc", "--grad", "--form", "scatter")
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("def matmul_grad(")
    assert "A_grad(m, k) +=! C_grad(m, n) * B(k, n)" in r.stdout
