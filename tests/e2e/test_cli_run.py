"""`tcc run` end to end (subprocess): random and .npy inputs, checksums against the
reference evaluator, --grad, --bench, --output, --shape in one flag, user errors."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import compiler
from compiler import OptionsError
from compiler.cli.execute import parse_ranges, parse_shapes
from compiler.poly.flops import count_flops
from compiler.shapes import bind_sizes

ROOT = Path(__file__).resolve().parents[2]
CONV = ROOT / "examples" / "conv2d.tc"
MATMUL = ROOT / "examples" / "matmul.tc"


def tcc(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "compiler", "run", *args],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=300,
    )


def _sum(out: str, name: str) -> float:
    match = re.search(rf"{name}: \S+ \([^)]*\)\s+sum=(\S+)", out)
    assert match, out
    return float(match.group(1))


@pytest.mark.parametrize("target", ["llvm", "interp"])
def test_run_prints_shapes_and_checksums(target: str) -> None:
    r = tcc(str(CONV), "--shape", "I=2,3,9,7,W1=4,3,3,2", "--shape", "B=4", "--target", target)
    assert r.returncode == 0, r.stderr
    assert "output O: float32 (2, 4, 7, 6)" in r.stdout
    # the same random inputs through the reference evaluator
    k = compiler.define(CONV.read_text(), target="interp")
    from compiler.inputs import random_inputs

    arrays = random_inputs(
        k.ranged, {"I": (2, 3, 9, 7), "W1": (4, 3, 3, 2), "B": (4,)}, np.random.default_rng(0)
    )
    (out,) = k(*arrays.values())
    assert _sum(r.stdout, "output O") == pytest.approx(float(out.sum(dtype=np.float64)), rel=1e-4)


def test_run_npy_inputs_grad_and_output(tmp_path: Path) -> None:
    rng = np.random.default_rng(5)
    A = rng.standard_normal((5, 3)).astype(np.float32)
    np.save(tmp_path / "A.npy", A)
    out = tmp_path / "results"
    r = tcc(str(MATMUL), "--input", f"A={tmp_path / 'A.npy'}", "--shape", "B=3,1", "--grad",
            "--output", str(out), "--seed", "7")  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert sorted(p.name for p in out.iterdir()) == ["A_grad.npy", "B_grad.npy", "C.npy"]
    C = np.load(out / "C.npy")
    B = np.load(out / "B_grad.npy")
    assert C.shape == (5, 1) and B.shape == (3, 1)
    assert _sum(r.stdout, "output C") == pytest.approx(float(C.sum(dtype=np.float64)), rel=1e-5)
    # A was loaded, not drawn: C = A @ B (B drawn) lies in the column space of this A
    assert np.load(out / "A_grad.npy").shape == (5, 3)
    coef, *_ = np.linalg.lstsq(A.astype(np.float64), C.astype(np.float64), rcond=None)
    np.testing.assert_allclose(A @ coef, C, rtol=1e-4, atol=1e-4)
    assert not any(p.name.endswith(".tmp") for p in out.iterdir())


def test_run_bench_prints_time_and_gflops() -> None:
    r = tcc(str(MATMUL), "--shape", "A=16,8,B=8,4", "--bench", "--repeat", "3", "--threads", "1")
    assert r.returncode == 0, r.stderr
    assert re.search(r"time: median [\d.]+ ms over 3 calls, threads 1; 1024 flops", r.stdout)
    assert "GFLOP/s" in r.stdout


def test_run_several_defs_without_entry_names_the_flag(tmp_path: Path) -> None:
    f = tmp_path / "two.tc"
    f.write_text(
        "def a(float(N) X) -> (Y) { Y(i) = X(i) }\ndef b(float(N) X) -> (Y) { Y(i) = X(i) }\n"
    )
    r = tcc(str(f), "--shape", "X=3")
    assert r.returncode == 1
    assert "--entry NAME (e.g. --entry a)" in r.stderr
    r = tcc(str(f), "--entry", "b", "--shape", "X=3")
    assert r.returncode == 0, r.stderr


@pytest.mark.parametrize(
    "args,message",
    [
        (["--shape", "A=2,3"], "no shape given for input 'B'"),
        (["--shape", "A=2,x"], "bad --shape 'A=2,x'"),
        (["--shape", "A=2,3,B=3,2", "--input", "A=/nonexistent.npy"], "cannot read"),
        (["--shape", "A=2,3,B=3,2", "--threads", "2", "--target", "interp"], "--threads"),
        (["--shape", "A=2,3,B=4,2"], "size"),
    ],
)
def test_run_user_errors(args: list[str], message: str) -> None:
    r = tcc(str(MATMUL), *args)
    assert r.returncode == 1, r.stdout
    assert message in r.stderr
    assert "Traceback" not in r.stderr


def test_parse_shapes() -> None:
    assert parse_shapes(["I=8,16,32,32,W1=4,16,3,3", "B=4", "s="]) == {
        "I": (8, 16, 32, 32),
        "W1": (4, 16, 3, 3),
        "B": (4,),
        "s": (),
    }
    for bad in ("8,16", "A=1,A=2", "=3", "A=-1"):
        with pytest.raises(OptionsError):
            parse_shapes([bad])
    assert parse_ranges(["x=-1:2.5"]) == {"x": (-1.0, 2.5)}


def test_count_flops() -> None:
    k = compiler.define(MATMUL.read_text(), target="interp")
    assert count_flops(k.ranged, bind_sizes(k.ranged, {"A": (3, 4), "B": (4, 5)})) == 120
    k = compiler.define(CONV.read_text(), target="interp")
    sizes = bind_sizes(k.ranged, {"I": (2, 3, 8, 7), "W1": (4, 3, 3, 2), "B": (4,)})
    points = 2 * 4 * 6 * 6  # output elements
    assert count_flops(k.ranged, sizes) == points * 3 * 3 * 2 * 2 + points


def test_gradient_loops_of_conv2d_need_no_bounds_warnings() -> None:
    # O_grad is declared with O's shape (H - KH + 1, ...): nothing to check per element
    r = subprocess.run(
        [sys.executable, "-m", "compiler", "compile", str(CONV), "--grad", "--emit", "loops"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=300,
    )
    assert r.returncode == 0, r.stderr
    assert "cannot prove" not in r.stderr
    assert "O_D2" not in r.stdout and "tcc.error" not in r.stdout


def test_actionable_keeps_warnings_about_the_users_sizes() -> None:
    from types import SimpleNamespace

    from compiler.cli.execute import actionable
    from compiler.diagnostics import Diagnostic, Severity

    ranged = SimpleNamespace(checked=SimpleNamespace(size_params=("N", "O_D1")))
    mine = Diagnostic(Severity.WARNING, "cannot prove that `A(i + N)` stays in bounds")
    theirs = Diagnostic(Severity.WARNING, "it needs `O_D1 >= N`, which is checked at run time")
    kept = actionable([mine, theirs], ranged, frozenset({"N"}))
    assert kept[0] == mine and len(kept) == 2 and kept[1].severity is Severity.NOTE
    assert actionable([mine, theirs], ranged, None) == [mine, theirs]


def test_gradient_errors_name_the_users_file(tmp_path: Path) -> None:
    f = tmp_path / "lg.tc"
    f.write_text("def f(float(N) A) -> (O) {\n    O(i) = lgamma(A(i))\n}\n")
    r = subprocess.run(
        [sys.executable, "-m", "compiler", "compile", str(f), "--grad"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=300,
    )
    assert r.returncode == 1
    assert r.stderr.startswith(f"{f}:2:12: error: cannot differentiate 'lgamma'")
    r = tcc(str(f), "--shape", "A=0")
    assert r.returncode == 1
    assert r.stderr.startswith(f"{f}:1:7: error: dimension 0 of 'A' has size 0")


def test_call_time_errors_name_the_users_file(tmp_path: Path) -> None:
    # a float64 .npy for a float32 input fails at the call, after `define` succeeded
    f = tmp_path / "two.tc"
    f.write_text("def two(float(N) X) -> (Y) {\n    Y(i) = X(i) * 2\n}\n")
    np.save(tmp_path / "x64.npy", np.ones(4))
    r = tcc(str(f), "--input", f"X={tmp_path / 'x64.npy'}")
    assert r.returncode == 1, r.stdout
    assert r.stderr.startswith(f"{f}:1:9: error: input 'X' is declared float32"), r.stderr
    assert "<string>" not in r.stderr
    assert "Traceback" not in r.stderr
