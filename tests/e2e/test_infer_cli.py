"""`tcc infer`: symbolic ranges and shapes, concrete ones with --shape, exit codes."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SHIFT = "def shift(float(N) I) -> (O) {\n    O(i) = I(i - 1)\n}\n"
UNSOLVABLE = "def f(float(N) I) -> (O) {\n    O(i, j) = I(i)\n}\n"


def tcc(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "compiler.cli", *args],
        input=stdin,
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=60,
    )


def test_infer_symbolic_and_concrete() -> None:
    r = tcc("infer", "-", "--shape", "I=10", stdin=SHIFT)
    assert r.returncode == 0, r.stderr
    assert r.stdout == (
        "def shift:\n"
        "  statement 1: O(i) = ...\n"
        "    i in 1:N + 1  = 1:11\n"
        "  output O: shape (N + 1)  = (11,)\n"
        "  sizes: N=10\n"
    )


def test_infer_conv_example_without_shapes() -> None:
    r = tcc("infer", "examples/conv2d.tc", "--entry", "conv2d")
    assert r.returncode == 0, r.stderr
    assert "    h in 0:H - KH + 1\n" in r.stdout
    assert "  output O: shape (N, M, H - KH + 1, W - KW + 1)\n" in r.stdout


def test_infer_range_error_exits_1_with_caret() -> None:
    r = tcc("infer", "-", stdin=UNSOLVABLE)
    assert r.returncode == 1
    assert "error: could not infer a range for index 'j' of `O(i, j)`" in r.stderr
    assert "Traceback" not in r.stderr


def test_infer_bad_shapes_exit_1() -> None:
    r = tcc("infer", "-", "--shape", "I=10,3", stdin=SHIFT)
    assert r.returncode == 1
    assert "'I' has rank 1 but a shape of rank 2 was given: [10, 3]" in r.stderr
    r = tcc("infer", "-", "--shape", "I10", stdin=SHIFT)
    assert r.returncode == 1
    assert "bad --shape 'I10'" in r.stderr
