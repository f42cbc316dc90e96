"""Shared test fixtures: golden files and hypothesis profiles.

Golden files live under tests/golden/. `pytest --update-golden` rewrites them from
the current output; otherwise a mismatch fails with a unified diff.

Hypothesis profiles: `ci` (default, quick) and `thorough` (thousands of cases):
`pytest --hypothesis-profile=thorough`.
"""

from __future__ import annotations

import atexit
import difflib
import importlib.util
import os
import shutil
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

GOLDEN_DIR = Path(__file__).parent / "golden"
# tcc's own dependencies (pyproject.toml's `dependencies`): without one, nearly every
# test module fails to import; the session stops at once with the command to run
CORE = ("islpy", "llvmlite", "numpy", "tqdm")


def pytest_configure(config: pytest.Config) -> None:
    missing = [m for m in CORE if importlib.util.find_spec(m) is None]
    if missing:
        pytest.exit(
            f"tcc's dependencies {', '.join(missing)} are not installed in this Python "
            f"({sys.executable}): run `pip install -e '.[test]'` (README) first",
            returncode=4,
        )


# The compile cache goes to a private directory for the session (also for the `tcc`
# subprocesses the tests start), never into the user's ~/.cache/tcc.
_CACHE_HOME = tempfile.mkdtemp(prefix="tcc-test-cache-")
os.environ["XDG_CACHE_HOME"] = _CACHE_HOME
atexit.register(shutil.rmtree, _CACHE_HOME, ignore_errors=True)

# `ci` is derandomized: the same cases every run, so CI is reproducible.
settings.register_profile(
    "ci",
    max_examples=100,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.register_profile(
    "thorough", max_examples=5000, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
settings.load_profile("ci")


@pytest.hookimpl(tryfirst=True)
def pytest_cmdline_main(config: pytest.Config) -> None:
    """One worker per core (`-n auto`) where pytest-xdist is installed and no `-n` was
    given; without xdist the suite runs in one process (an `addopts = "-n auto"` would
    make pytest refuse its own command line there)."""
    if os.environ.get("PYTEST_XDIST_WORKER") or hasattr(config, "workerinput"):
        return  # a worker: it runs the tests it is sent
    if config.pluginmanager.has_plugin("xdist") and config.getoption("numprocesses") is None:
        config.option.numprocesses = "auto"


def _record_skip(nodeid: str) -> None:
    """With `TCC_RECORD_SKIPS=FILE` (`.ci/run`'s first step, without the optional
    packages), the file of every skipped test is appended to FILE: CI's second step
    runs those files again once the extras are installed."""
    path = os.environ.get("TCC_RECORD_SKIPS")
    if path and not os.environ.get("PYTEST_XDIST_WORKER"):
        with open(path, "a", encoding="utf-8") as f:
            f.write(nodeid.split("::")[0] + "\n")


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if report.skipped:
        _record_skip(report.nodeid)


def pytest_collectreport(report: pytest.CollectReport) -> None:
    if report.skipped:
        _record_skip(report.nodeid)


@pytest.fixture(autouse=True)
def _vector_width_256(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """The CPU model sizes register tiles for the host's vector registers
    (`cpu_registers.host_vector_bits`); the tests see a 256-bit host everywhere, so loop
    goldens and schedule assertions do not depend on the machine. Tests of other widths
    pass `Options(vector_bits=...)`; `@pytest.mark.host_vectors` keeps the real host."""
    if request.node.get_closest_marker("host_vectors") is None:
        from compiler.cpu import cpu_registers

        monkeypatch.setattr(cpu_registers, "host_vector_bits", lambda: 256)


@pytest.fixture(scope="module")
def no_few_rows() -> Iterator[None]:
    """The CPU schedule without `cpu.rows`' versions for fewer rows than a tile's row
    block (`FEW_ROWS = 1`): a module that inspects the structure of one register tile
    (or compares loop nests with goldens) sees the general nest once, not under the
    run-time tests of its row count. `tests/codegen/test_few_rows.py` tests the versions."""
    from compiler.cpu import rows

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(rows, "FEW_ROWS", 1)
        yield


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--update-golden", action="store_true", help="rewrite golden files from current output"
    )


class Golden:
    """Compare text against tests/golden/<path>, or rewrite it with --update-golden."""

    def __init__(self, update: bool) -> None:
        self.update = update

    def check(self, path: str, actual: str) -> None:
        file = GOLDEN_DIR / path
        if self.update:
            file.parent.mkdir(parents=True, exist_ok=True)
            file.write_text(actual)
            return
        if not file.exists():
            pytest.fail(f"golden file {file} is missing: run pytest --update-golden")
        expected = file.read_text()
        if expected != actual:
            diff = "".join(
                difflib.unified_diff(
                    expected.splitlines(keepends=True),
                    actual.splitlines(keepends=True),
                    fromfile=f"golden/{path}",
                    tofile="actual",
                )
            )
            pytest.fail(f"output differs from golden/{path}:\n{diff}")


@pytest.fixture
def golden(request: pytest.FixtureRequest) -> Golden:
    return Golden(bool(request.config.getoption("--update-golden")))


EXAMPLES_DIR = Path(__file__).resolve().parents[1] / "examples"
