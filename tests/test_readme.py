"""Every fenced ```python and ```sh block of README.md and of the documentation
(docs/**/*.md) runs as written, from the repository root (so `open("examples/...")` and
`tcc compile examples/...` work), each block in fresh processes, so nothing leaks between
blocks.

- A ```python block runs as one `python -c` process.
- A ```sh block runs line by line through bash; each `&&`-joined part runs, except
  `pip install ...` (the environment is already installed) and `python -m pytest ...`
  (the suite itself). `tcc` is this checkout's `python -m compiler`.
- Leading marker lines: `# needs: MODULE[, MODULE...]` skips the block when one of those
  Python modules is not installed (`gpu`: when no NVIDIA GPU is reachable);
  `# not run: REASON` never runs it (it installs, trains for minutes, exits 1 on
  purpose, ...). Fences of other languages (```text, ```c, plain ```) are not run."""

from __future__ import annotations

import functools
import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
PAGES = [README, *sorted((ROOT / "docs").glob("**/*.md"))]
NEEDS = "# needs:"
NOT_RUN = "# not run:"
RUNNABLE = ("python", "sh")
SKIPPED_COMMANDS = ("pip install", "python -m pytest")


def fenced_blocks(text: str) -> list[tuple[int, str, str]]:
    """(line number of the opening fence, language, code) of each ```python / ```sh block."""
    blocks = []
    for match in re.finditer(r"^```(\w*)[ \t]*\n(.*?)^```[ \t]*$", text, re.M | re.S):
        if match.group(1) in RUNNABLE:
            line = text.count("\n", 0, match.start()) + 1
            blocks.append((line, match.group(1), match.group(2)))
    return blocks


def python_blocks(text: str) -> list[tuple[int, str]]:
    """(line number of the opening fence, code) of each ```python block."""
    return [(line, code) for line, lang, code in fenced_blocks(text) if lang == "python"]


def markers(code: str) -> tuple[list[str], str | None]:
    """The modules a block needs and why it is not run (None: it runs), from its leading
    `# needs:` / `# not run:` lines."""
    needs: list[str] = []
    not_run = None
    for raw in code.splitlines():
        line = raw.strip()
        if line.startswith(NEEDS):
            needs += [m.strip() for m in line[len(NEEDS) :].split(",") if m.strip()]
        elif line.startswith(NOT_RUN):
            not_run = line[len(NOT_RUN) :].strip() or "marked not runnable"
        else:
            break
    return needs, not_run


def shell_commands(code: str) -> list[str]:
    """The commands a ```sh block runs: each line's `&&` parts, less comments, blank lines,
    `pip install` and `python -m pytest`."""
    commands = []
    for raw in code.splitlines():
        line = raw.split(" #", 1)[0].strip()
        if not line or line.startswith("#"):
            continue
        parts = [p.strip() for p in line.split("&&")]
        kept = [p for p in parts if not p.startswith(SKIPPED_COMMANDS)]
        if kept:
            commands.append(" && ".join(kept))
    return commands


@functools.cache
def _gpu() -> bool:
    if importlib.util.find_spec("cuda") is None:
        return False
    from compiler.cuda.cuda_driver import CudaUnavailable, current_device

    try:
        current_device()
    except CudaUnavailable:
        return False
    return True


def _missing(module: str) -> bool:
    if module == "gpu":
        return not _gpu()
    return importlib.util.find_spec(module) is None


def _cases() -> list[tuple[str, int, str, str]]:
    cases = []
    for page in PAGES:
        for line, lang, code in fenced_blocks(page.read_text(encoding="utf-8")):
            cases.append((str(page.relative_to(ROOT)), line, lang, code))
    return cases


CASES = _cases()
BLOCKS = [(line, code) for name, line, lang, code in CASES if name == "README.md"]


def test_pages_have_blocks() -> None:
    langs = {(name.split("/")[0], lang) for name, _, lang, _ in CASES}
    assert {
        ("README.md", "python"),
        ("README.md", "sh"),
        ("docs", "python"),
        ("docs", "sh"),
    } <= langs
    assert sum(1 for _, _, lang, _ in CASES if lang == "python") >= 20


def test_block_extraction() -> None:
    text = "a\n```python\nx = 1\n```\n```sh\nls\n```\n```text\nno\n```\n```python\n# needs: torch\ny\n```\n"
    assert fenced_blocks(text) == [
        (2, "python", "x = 1\n"),
        (5, "sh", "ls\n"),
        (11, "python", "# needs: torch\ny\n"),
    ]
    assert python_blocks(text) == [(2, "x = 1\n"), (11, "# needs: torch\ny\n")]


def test_markers_and_shell_commands() -> None:
    code = "# needs: torch, ray\n# not run: slow\nx = 1  # needs: no\n"
    assert markers(code) == (["torch", "ray"], "slow")
    assert markers("x = 1\n# not run: late\n") == ([], None)
    sh = "pip install -e . && tcc compile a.tc --grad\n# a comment\n\npip install x\ntcc run a.tc  # why\npip install -e '.[test]' && python -m pytest -q\n"
    assert shell_commands(sh) == ["tcc compile a.tc --grad", "tcc run a.tc"]


@pytest.fixture(scope="module")
def shell_env(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """PATH with a `tcc` that is this checkout's compiler under this interpreter."""
    bin_dir = tmp_path_factory.mktemp("bin")
    shim = bin_dir / "tcc"
    shim.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m compiler "$@"\n')
    shim.chmod(0o755)
    path = os.pathsep.join([str(bin_dir), str(Path(sys.executable).parent), os.environ["PATH"]])
    return dict(os.environ, PATH=path, PYTHONPATH=str(ROOT))


@pytest.mark.parametrize(
    "page,line,lang,code", CASES, ids=[f"{name}:{line}" for name, line, _, _ in CASES]
)
def test_block_runs(page: str, line: int, lang: str, code: str, shell_env: dict[str, str]) -> None:
    needs, not_run = markers(code)
    if not_run is not None:
        pytest.skip(f"{page}:{line} is not run: {not_run}")
    for module in needs:
        if _missing(module):
            pytest.skip(f"{page}:{line} needs {module}, which is not available")
    if lang == "python":
        commands = [[sys.executable, "-c", code]]
    else:
        commands = [["bash", "-c", command] for command in shell_commands(code)]
    for command in commands:
        result = subprocess.run(
            command, cwd=ROOT, env=shell_env, capture_output=True, text=True, timeout=600
        )
        what = f"{page}:{line} ({command[-1].splitlines()[0]})"
        assert result.returncode == 0, f"{what} failed:\n{result.stdout}\n{result.stderr}"
        assert "Traceback" not in result.stderr, f"{what}:\n{result.stderr}"


OPTIONAL_IMPORTS = {"torch": "torch", "ray": "ray", "compiler.torch": "torch", "cuda": "cuda"}


def test_optional_imports_are_declared() -> None:
    """A block that imports an optional package says so with `# needs:`, so the suite's
    first CI run (no torch, no Ray, no CUDA bindings) skips it instead of failing; checked
    statically, so a machine with every extra installed catches the omission too."""
    undeclared = []
    for name, line, lang, code in CASES:
        needs, not_run = markers(code)
        if lang != "python" or not_run is not None:
            continue
        for module, package in OPTIONAL_IMPORTS.items():
            pattern = rf"^\s*(import {re.escape(module)}\b|from {re.escape(module)}\b)"
            if re.search(pattern, code, re.M) and package not in needs:
                undeclared.append(f"{name}:{line} imports {module} without '# needs: {package}'")
    assert not undeclared, "\n".join(undeclared)
