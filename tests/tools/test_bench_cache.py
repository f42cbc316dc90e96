"""tools/bench_cache.py: one measured case, its columns, and its option checks."""

from __future__ import annotations

import pytest

from tools import bench_cache


def test_one_case_prints_wall_and_cpu_times(capsys: pytest.CaptureFixture[str]) -> None:
    assert bench_cache.main(["--runs", "1", "--only", "matmul"]) == 0
    header, row = capsys.readouterr().out.splitlines()
    assert header.split() == [
        "kernel",
        "cold",
        "ms",
        "cold",
        "cpu",
        "ms",
        "warm",
        "disk",
        "ms",
        "warm",
        "memory",
        "ms",
    ]
    name, cold, cpu, disk, memory, _ = row.split(maxsplit=5)
    assert name == "matmul"
    assert float(cold) > 0 and float(cpu) > 0 and float(disk) > 0 and float(memory) >= 0


@pytest.mark.parametrize("argv", [["--runs", "0"], ["--only", "nothing"]])
def test_bad_options_are_refused(argv: list[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        bench_cache.main(argv)
    assert exit_.value.code == 2
