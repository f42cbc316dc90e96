"""tools/tune_bench.py on tiny sizes: tunes, checks against NumPy, prints the table."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tools import tune_bench


def test_tune_bench_small(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "rows.json"
    args = ["--small", "--budget", "1s", "--only", "matmul 512", "--repeat", "3", "--quiet"]
    assert tune_bench.main([*args, "--workers", "1", "--json", str(out)]) == 0
    table = capsys.readouterr().out
    assert "matmul 512^3" in table and "speedup" in table
    (row,) = json.loads(out.read_text())
    assert row["tried"] >= 1 and row["default_ms"] > 0 and row["tuned_ms"] > 0
