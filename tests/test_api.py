"""The public API is discoverable: spelled-out signatures, docstrings, exports, py.typed."""

from __future__ import annotations

import inspect
import subprocess
import sys
from pathlib import Path

import compiler

ROOT = Path(__file__).resolve().parents[1]


def test_define_spells_out_its_keywords_and_returns_a_kernel() -> None:
    sig = inspect.signature(compiler.define)
    assert list(sig.parameters) == [
        "source",
        "name",
        "constants",
        "target",
        "options",
        "backward",
        "cache",
    ]
    assert sig.parameters["target"].default == "llvm"
    assert sig.return_annotation == "Kernel"
    k = compiler.define("def f(float(N) A) -> (B) { B(i) = A(i) }", target="interp")
    assert isinstance(k, compiler.Kernel)


def test_kernel_call_and_exports_are_documented() -> None:
    assert "one array per input" in (compiler.Kernel.__call__.__doc__ or "")
    assert {"Kernel", "Options", "define", "grad", "gradcheck"} <= set(compiler.__all__)
    assert compiler.Options(threads=2).threads == 2


def test_compiler_options_works_in_a_fresh_process() -> None:
    code = "import compiler; print(compiler.options.Options(threads=1).threads)"
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "1"


def test_package_is_typed() -> None:
    assert (ROOT / "compiler" / "py.typed").exists()
    pyproject = (ROOT / "pyproject.toml").read_text()
    assert '[tool.setuptools.package-data]\ncompiler = ["py.typed"]' in pyproject
