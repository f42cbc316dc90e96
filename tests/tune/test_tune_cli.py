"""`tcc tune` end to end, as a subprocess."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from tests.tune.kit import MM

ROOT = Path(__file__).resolve().parents[2]


def _tcc(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "compiler", *args],
        capture_output=True, text=True, cwd=ROOT, env=env, timeout=300,
    )  # fmt: skip


def test_tcc_tune_then_show(tmp_path: Path) -> None:
    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path), "PYTHONPATH": str(ROOT)}
    source = tmp_path / "mm.tc"
    source.write_text(MM + "\n")
    run = _tcc(
        "tune", str(source), "--entry", "mm", "--shape", "A=9,4", "--shape", "B=4,13",
        "--candidates", "3", "--workers", "2", "--seed", "1", env=env,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    assert "def mm (llvm): 3 candidates, 0 failed" in run.stdout
    assert "best" in run.stdout and "default" in run.stdout
    stored = json.loads((tmp_path / "tcc" / "tuned-options.json").read_text())
    (entry,) = stored["entries"].values()
    assert entry["components"]["shapes"] == [[9, 4], [4, 13]] and entry["candidates"] == 3
    show = _tcc("tune", "--show", env=env)
    assert show.returncode == 0
    assert "1 entry" in show.stdout and "mm [9x4 4x13] llvm" in show.stdout


def test_tcc_tune_user_errors(tmp_path: Path) -> None:
    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path), "PYTHONPATH": str(ROOT)}
    source = tmp_path / "mm.tc"
    source.write_text(MM + "\n")
    cases = [
        (["tune"], "missing FILE"),
        (["tune", str(source), "--shape", "A=9,4"], "B"),  # a missing shape
        (["tune", str(source), "--shape", "A=9,4", "--shape", "B=4,3", "--budget", "soon"],
         "budget"),
        (["tune", str(source), "--shape", "A=9,4", "--shape", "B=4,3", "--target", "interp"],
         "no tunable Options"),
    ]  # fmt: skip
    for args, message in cases:
        run = _tcc(*args, env=env)
        assert run.returncode == 1, (args, run.stderr)
        assert message in run.stderr and "Traceback" not in run.stderr
