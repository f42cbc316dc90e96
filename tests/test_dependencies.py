"""The README's second command, `pip install -e '.[test]' && python -m pytest -q`, passes on
a fresh machine: every third-party module that a test or a tool module imports when it is
loaded is a dependency of tcc or of its `test` extra (pyproject.toml). Optional modules
(torch, ray, CUDA's bindings, ...) are imported inside functions or through
`pytest.importorskip`, so their tests skip without them. (`tests/tools/test_fit_expf.py`
once imported mpmath through `tools.fit_expf`, which only torch's dependencies brought.)"""

from __future__ import annotations

import ast
import re
import sys
from pathlib import Path

import pytest

tomllib = pytest.importorskip("tomllib")  # Python 3.11+

ROOT = Path(__file__).resolve().parents[1]
FIRST_PARTY = {"compiler", "tests", "tools"}
# distribution name -> the module it installs, where the two differ
MODULE_OF = {"pytest-xdist": "xdist", "cuda-bindings": "cuda"}


def declared_modules() -> set[str]:
    """The modules of tcc's dependencies and of its `test` extra."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    requirements = [*project["dependencies"], *project["optional-dependencies"]["test"]]
    names = {re.match(r"[A-Za-z0-9_.-]+", r).group(0).lower() for r in requirements}
    return {MODULE_OF.get(n, n.replace("-", "_")) for n in names}


def load_time_imports(path: Path) -> set[str]:
    """Top-level module names imported by `path` when it is loaded: statements at module
    level, and inside module-level `if` / `try` blocks (not inside functions)."""
    found: set[str] = set()
    body = list(ast.parse(path.read_text(encoding="utf-8")).body)
    while body:
        node = body.pop()
        if isinstance(node, ast.Import):
            found.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.add(node.module.split(".")[0])
        elif isinstance(node, ast.If) and not _is_type_checking(node.test):
            body.extend([*node.body, *node.orelse])
        elif isinstance(node, ast.Try):
            body.extend([*node.body, *node.orelse, *node.finalbody])
    return found


def _is_type_checking(test: ast.expr) -> bool:
    return isinstance(test, ast.Name) and test.id == "TYPE_CHECKING"


def test_load_time_imports_reads_module_level_only(tmp_path: Path) -> None:
    f = tmp_path / "m.py"
    f.write_text(
        "import numpy as np\nfrom a.b import c\nfrom . import d\n"
        "if X:\n    import e\nif TYPE_CHECKING:\n    import f\n"
        "def g():\n    import h\n"
    )
    assert load_time_imports(f) == {"numpy", "a", "e"}


def test_declared_modules_include_the_test_extra() -> None:
    assert {"numpy", "islpy", "llvmlite", "pytest", "xdist", "hypothesis"} <= declared_modules()


def test_every_load_time_import_of_tests_and_tools_is_declared() -> None:
    allowed = declared_modules() | FIRST_PARTY | set(sys.stdlib_module_names)
    missing = {}
    for path in sorted([*ROOT.glob("tests/**/*.py"), *ROOT.glob("tools/*.py")]):
        for module in load_time_imports(path) - allowed:
            missing.setdefault(module, []).append(str(path.relative_to(ROOT)))
    assert not missing, (
        f"imported when a test or tool module loads, but not a dependency of tcc or of "
        f"its test extra: {missing}; add it to the test extra in pyproject.toml, or import "
        f"it inside the test with pytest.importorskip"
    )
