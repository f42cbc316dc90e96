"""The suite collects, and skips the PyTorch tests, in an environment without torch.

CI installs torch, so this test makes it unimportable in a subprocess: a meta-path
finder looks `torch` up on every `sys.path` entry except the folder the installed torch
lives in. A folder of the tests named `torch` without `__init__.py` would then be
found as a namespace package (`AttributeError: module 'torch' has no attribute 'nn'`),
exactly what a fresh virtual environment without torch sees; without such a folder
`import torch` is a `ModuleNotFoundError` and `pytest.importorskip` skips.
"""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

_RUNNER = r"""
import importlib.machinery, os, sys
hidden = sys.argv[1]

class HideInstalledTorch:
    def find_spec(self, name, path=None, target=None):
        if name != "torch":
            return None
        entries = [p for p in sys.path if os.path.realpath(p or ".") != hidden]
        spec = importlib.machinery.PathFinder.find_spec(name, entries)
        if spec is None:
            raise ModuleNotFoundError("No module named 'torch'", name="torch")
        return spec

sys.meta_path.insert(0, HideInstalledTorch())
import pytest
sys.exit(pytest.main(sys.argv[2:]))
"""


def _torch_site() -> str:
    """The folder holding the installed torch package ('' when there is none)."""
    spec = importlib.util.find_spec("torch")
    if spec is None or not spec.submodule_search_locations:
        return ""
    return os.path.realpath(os.path.dirname(list(spec.submodule_search_locations)[0]))


def run_without_torch(*pytest_args: str) -> subprocess.CompletedProcess[str]:
    code = _RUNNER
    # in this process (-n 0): xdist workers would not inherit the import blocker
    args = ["-p", "no:cacheprovider", "-n", "0", *pytest_args]
    return subprocess.run(
        [sys.executable, "-c", code, _torch_site(), *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )


def test_blocker_hides_installed_torch() -> None:
    probe = subprocess.run(
        [
            sys.executable,
            "-c",
            _RUNNER.replace("import pytest\nsys.exit(pytest.main(sys.argv[2:]))", "import torch"),
            _torch_site(),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert probe.returncode != 0
    assert "ModuleNotFoundError: No module named 'torch'" in probe.stderr


def test_suite_collects_without_torch() -> None:
    result = run_without_torch("--collect-only", "-q", "tests")
    out = result.stdout + result.stderr
    assert result.returncode == 0, out
    # both PyTorch test modules are skipped at collection, not collected or broken
    assert "tests/torch_layers/test_" not in out, out
    assert re.search(r"\d+ tests collected", out), out


def test_torch_tests_skip_with_reason_without_torch() -> None:
    result = run_without_torch("-q", "-rs", "tests/torch_layers")
    out = result.stdout + result.stderr
    assert result.returncode in (0, 5), out
    assert out.count("PyTorch is not installed") >= 2, out
