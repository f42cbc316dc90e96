"""tools/bench.py: a smoke run at tiny sizes, and the block-interleaved measurement."""

from __future__ import annotations

import pytest

from tools import bench


def test_small_run_checks_every_case_and_prints_the_table(
    capsys: pytest.CaptureFixture[str],
) -> None:
    names = [c.name for c in bench._cases()]
    calls = [c.name for c in bench._cases() if c.call]
    argv = ["--small", "--target", "interp", "--repeat", "1", "--block", "1", "--no-torch"]
    assert bench.main(argv) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("threads=")
    rows = [(line[:36].strip(), line[36:].split()) for line in lines[2:]]
    body = [(n, f) for n, f in rows if not n.startswith("geometric mean")]
    kinds: dict[str, list[str]] = {}
    for name, fields in body:
        kinds.setdefault(name, []).append(fields[0])
        if fields[0] == "fwd":
            assert float(fields[-1]) < 1e-4, f"{name}: tcc differs from the NumPy reference"
    assert sorted(kinds) == sorted(names)
    for name, got in kinds.items():
        assert got == (["fwd", "fwd+bwd", "vjp"] if name in calls else ["fwd", "fwd+bwd"])
    assert rows[-1][0] == "geometric mean (no call rows)"  # no torch: fwd only


def test_blocks_interleave_systems_and_take_block_medians() -> None:
    order: list[str] = []
    runners = {"a": lambda: order.append("a"), "b": lambda: order.append("b")}
    times = bench.measure(runners, blocks=2, block=3)
    assert order == ["a"] * 3 + ["b"] * 3 + ["a"] * 3 + ["b"] * 3
    assert {k: len(v) for k, v in times.items()} == {"a": 2, "b": 2}


def test_bad_arguments_exit_with_usage() -> None:
    for argv in (["--threads", "0"], ["--block", "0"], ["--spin-count", "-1"]):
        with pytest.raises(SystemExit) as err:
            bench.main(argv)
        assert err.value.code == 2


def test_the_layer_suite_matches_numpy_at_tiny_sizes(capsys: pytest.CaptureFixture[str]) -> None:
    from tools import bench_layers

    names = [c.name for c in bench_layers.layer_cases()]
    argv = ["--small", "--layers", "--only", *names, "--repeat", "1", "--block", "1",
            "--no-torch", "--no-backward"]  # fmt: skip
    assert bench.main(argv) == 0
    lines = capsys.readouterr().out.splitlines()
    rows = [(line[:36].strip(), line[36:].split()) for line in lines[2:]]
    body = [(n, f) for n, f in rows if not n.startswith("geometric mean")]
    checked = {n for n, f in body if f and f[0] == "fwd" and float(f[-1]) < 1e-4}
    assert checked == set(names)  # every layer ran and matched its NumPy reference
