"""tools/bench.py: a smoke run at tiny sizes through the reference evaluator."""

from __future__ import annotations

import pytest

from tools import bench


def test_small_run_checks_every_case_and_prints_the_table(
    capsys: pytest.CaptureFixture[str],
) -> None:
    names = [c.name for c in bench._cases()]
    assert bench.main(["--small", "--target", "interp", "--repeat", "1", "--no-torch"]) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert lines[0].startswith("threads=")
    rows = {line[:34].strip(): line.split() for line in lines[2:-1]}
    assert sorted(rows) == sorted(names)
    for name, fields in rows.items():
        assert float(fields[-1]) < 1e-4, f"{name}: tcc differs from the NumPy reference"
    assert lines[-1].startswith("geometric mean")


def test_bad_arguments_exit_with_usage() -> None:
    with pytest.raises(SystemExit) as err:
        bench.main(["--threads", "0"])
    assert err.value.code == 2
