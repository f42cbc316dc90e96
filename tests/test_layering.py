"""The layout is the pipeline (STYLE.md rule 1), checked by reading every import.

frontend imports nothing else of ours; autodiff only frontend; poly only frontend
and loops; codegen only loops; only compiler/poly imports islpy. The leaves
(diagnostics and source spans) may be imported from anywhere.
"""

from __future__ import annotations

import ast
from pathlib import Path

COMPILER = Path(__file__).resolve().parents[1] / "compiler"
LEAVES = (
    "compiler.frontend.diagnostics",
    "compiler.frontend.source",
    "compiler.names",
    "compiler.options",
)
ALLOWED = {  # layer -> the layers of ours it may import (besides itself and the leaves)
    "frontend": set(),
    "autodiff": {"frontend"},
    "poly": {"frontend", "loops"},
    "codegen": {"loops"},
}


def _imports(path: Path, root: Path) -> tuple[str, set[str]]:
    """The module's dotted name and every name it imports, relative ones made absolute."""
    parts = list(path.relative_to(root.parent).with_suffix("").parts)
    package = parts[:-1]
    if parts[-1] == "__init__":
        parts = package
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = package[: len(package) - node.level + 1] if node.level else []
            module = ".".join(base + ([node.module] if node.module else []))
            names.add(module)
            names.update(f"{module}.{alias.name}" for alias in node.names)
    return ".".join(parts), names


def _layer(module: str) -> str | None:
    parts = module.split(".")
    return parts[1] if parts[0] == "compiler" and len(parts) > 1 else None


def violations(root: Path) -> list[str]:
    found = []
    for path in sorted(root.rglob("*.py")):
        here, names = _imports(path, root)
        layer = _layer(here)
        for name in sorted(names):
            if name.split(".")[0] == "islpy" and layer != "poly":
                found.append(f"{here} imports islpy (only compiler.poly may)")
            ours = name.split(".")[0] == "compiler" and not name.startswith(LEAVES)
            if here.startswith(LEAVES) and ours:
                found.append(f"leaf {here} imports {name}")
            elif layer in ALLOWED and ours and _layer(name) not in {layer, None} | ALLOWED[layer]:
                found.append(f"{here} imports {name}")
    return found


def test_layers_import_only_what_rule_1_allows() -> None:
    assert len(list((COMPILER / "frontend").glob("*.py"))) >= 5
    assert violations(COMPILER) == []


def test_the_import_reader_catches_violations(tmp_path: Path) -> None:
    (tmp_path / "compiler" / "codegen").mkdir(parents=True)
    (tmp_path / "compiler" / "codegen" / "llvm.py").write_text(
        "import islpy\nfrom ..frontend import ast\nfrom ..loops import For\n"
        "from compiler.frontend.diagnostics import TCError\n"
    )
    assert violations(tmp_path / "compiler") == [
        "compiler.codegen.llvm imports compiler.frontend",
        "compiler.codegen.llvm imports compiler.frontend.ast",
        "compiler.codegen.llvm imports islpy (only compiler.poly may)",
    ]
