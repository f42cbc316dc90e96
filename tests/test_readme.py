"""Every fenced ```python block of README.md runs as written, each in a fresh process
from the repository root (so `open("examples/...")` works and nothing leaks between
blocks). A block whose first line is `# needs: MODULE[, MODULE...]` (e.g.
`# needs: torch`) is skipped when one of those Python modules is not installed."""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
NEEDS = "# needs:"


def python_blocks(text: str) -> list[tuple[int, str]]:
    """(line number of the opening fence, code) of each ```python block."""
    blocks = []
    for match in re.finditer(r"^```python[ \t]*\n(.*?)^```[ \t]*$", text, re.M | re.S):
        line = text.count("\n", 0, match.start()) + 1
        blocks.append((line, match.group(1)))
    return blocks


BLOCKS = python_blocks(README.read_text(encoding="utf-8"))


def test_readme_has_python_blocks() -> None:
    assert len(BLOCKS) >= 4  # library API, passes, gradients, PyTorch


def test_block_extraction() -> None:
    text = "a\n```python\nx = 1\n```\n```sh\nls\n```\n```python\n# needs: torch\ny\n```\n"
    assert python_blocks(text) == [(2, "x = 1\n"), (8, "# needs: torch\ny\n")]


@pytest.mark.parametrize("line,code", BLOCKS, ids=[f"README.md:{n}" for n, _ in BLOCKS])
def test_readme_block_runs(line: int, code: str) -> None:
    first = code.splitlines()[0] if code else ""
    if first.startswith(NEEDS):
        for module in (m.strip() for m in first[len(NEEDS) :].split(",")):
            if module and importlib.util.find_spec(module) is None:
                pytest.skip(f"README.md:{line} needs {module}, which is not installed")
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    result = subprocess.run(
        [sys.executable, "-c", code],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, f"README.md:{line} failed:\n{result.stderr}"
    assert "Traceback" not in result.stderr, result.stderr
