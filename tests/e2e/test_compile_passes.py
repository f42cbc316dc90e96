"""`tcc compile --dump-after PASS|all` and `--time-passes`, as a subprocess."""

from __future__ import annotations

from pathlib import Path

from compiler.pipeline import PASS_NAMES
from tests.e2e.test_cli import tcc

ROOT = Path(__file__).resolve().parents[2]
MATMUL = ROOT / "examples" / "matmul.tc"
CONV = ROOT / "examples" / "conv2d.tc"


def _sections(stdout: str) -> list[str]:
    return [line.split()[3] for line in stdout.splitlines() if line.startswith("// ----- after ")]


def test_dump_after_all_prints_every_pass_in_order() -> None:
    proc = tcc("compile", MATMUL, "--dump-after", "all")
    assert proc.returncode == 0, proc.stderr
    assert _sections(proc.stdout) == [p for p in PASS_NAMES if p != "grad"]
    assert "C(m, n) +=! A(m, k) * B(k, n) where" in proc.stdout  # ranges: explicit where
    assert "define void @tcc.matmul(" in proc.stdout  # the LLVM IR, last


def test_dump_after_grad_shows_the_scatter_form_and_gather_rewrites_it() -> None:
    proc = tcc("compile", CONV, "--grad", "--dump-after", "grad", "--dump-after", "gather")
    assert proc.returncode == 0, proc.stderr
    assert _sections(proc.stdout) == ["grad", "gather"]
    grad_part, gather_part = proc.stdout.split("// ----- after gather -----")
    assert "I_grad(n, c, h + kh, w + kw) +=!" in grad_part  # a scatter
    assert "I_grad(n, c, h + kh, w + kw)" not in gather_part
    assert gather_part.count("def conv2d_grad(") == 2  # the dump, then the --grad print


def test_time_passes_reports_each_pass_run() -> None:
    proc = tcc("compile", MATMUL, "--emit", "loops", "--time-passes")
    assert proc.returncode == 0, proc.stderr
    rows = [line.split()[0] for line in proc.stderr.splitlines()[1:]]
    assert rows == ["parse", "select", "check", "ranges", "gather", "schedule", "lower", "total"]
    assert "parallel for (m = 0; m < M; m += 1)" in proc.stdout


def test_unknown_pass_is_a_usage_error() -> None:
    proc = tcc("compile", MATMUL, "--dump-after", "lowr")
    assert proc.returncode != 0
    assert "Traceback" not in proc.stderr
    assert "lowr" in proc.stderr
