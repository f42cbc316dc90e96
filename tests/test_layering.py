"""The layout is the pipeline (STYLE.md rule 1), checked by reading every import.

frontend imports nothing else of ours; autodiff only frontend; poly only frontend
and loops; codegen (the target seam) only loops; each target package (cpu, cuda) the
layers below it; loops nothing; only compiler/poly and the CPU schedule (compiler/cpu)
import islpy. The
leaves (diagnostics, source spans, the name supply, options) may be imported from
anywhere and import nothing of ours. Every root module of `compiler/` is listed in
`ROOT_ALLOWED` with what it may import (a new one must be added there).
"""

from __future__ import annotations

import ast
from pathlib import Path

COMPILER = Path(__file__).resolve().parents[1] / "compiler"
LEAVES = (
    "compiler.__version__",
    "compiler.diagnostics",
    "compiler.frontend.source",
    "compiler.names",
    "compiler.options",
)
ALLOWED = {  # package -> the packages and root modules of ours it may import (besides
    # itself and the leaves). The compiler's layers first, then the packages by role
    # (issue 9): the reference evaluator, the runtimes, the PyTorch layers, the tuner, the
    # command line.
    "frontend": set(),
    "autodiff": {"frontend"},
    "poly": {"frontend", "loops"},
    "codegen": {"loops"},
    "cpu": {"codegen", "frontend", "loops", "poly"},
    "cuda": {"codegen", "frontend", "loops", "poly"},
    "loops": set(),
    "interp": {"frontend", "shapes"},
    "runtime": {
        "codegen", "cpu", "cuda", "frontend", "interp", "loops", "pipeline", "poly", "shapes",
    },
    "torch": {
        "backward", "batch", "frontend", "higher", "interp", "kernel", "progress", "retype",
        "shapes", "templates", "tune",
    },
    "tune": {"backward", "cli", "codegen", "cpu", "frontend", "interp", "kernel", "shapes"},
    "cli": {
        "backward", "codegen", "cpu", "frontend", "gradcheck", "inputs", "kernel", "pipeline", "poly",
        "progress", "runtime", "shapes", "tune",
    },
}  # fmt: skip

# Root modules (the API layer and the driver) -> the packages and root modules they may
# import (besides the leaves), as they are. Known cycles, each broken at run time by a
# function-level import: kernel <-> backward (Kernel.grad), kernel <-> higher (Kernel.jvp), pipeline <-> runtime (the
# codegen pass compiles through the CPU runtime, whose compile cache lowers through the
# pipeline), kernel <-> tune (options="tuned"), cli <-> tune (`tcc tune`).
ROOT_ALLOWED: dict[str, set[str]] = {
    "__init__": {"backward", "gradcheck", "higher", "kernel", "progress", "shapes", "tune"},
    "__main__": {"cli"},
    "arguments": {"frontend", "interp"},
    "batch": {"frontend"},
    "backward": {"frontend", "interp", "kernel", "pipeline", "poly", "runtime", "templates"},
    "gradcheck": {"frontend", "kernel"},
    "higher": {"autodiff", "backward", "frontend", "interp", "kernel", "pipeline", "templates"},
    "inputs": {"frontend", "interp", "shapes"},
    "outputs": {"frontend", "interp"},
    "kernel": {
        "arguments", "backward", "codegen", "cpu", "cuda", "frontend", "higher", "interp", "outputs", "pipeline", "runtime",
        "shapes", "templates", "tune",
    },
    "names": set(),
    "options": set(),
    "pipeline": {"autodiff", "cpu", "frontend", "loops", "poly", "runtime"},
    "progress": set(),
    "retype": {"frontend"},
    "shapes": {"frontend", "pipeline"},
    "templates": {"frontend"},
}  # fmt: skip


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


def _root_module(module: str, root: Path) -> str | None:
    """The root module's short name (`kernel`, `__init__`), or None inside a package."""
    parts = module.split(".")
    if parts == ["compiler"]:
        return "__init__"
    return parts[1] if len(parts) == 2 and (root / f"{parts[1]}.py").exists() else None


def _target(name: str, root: Path) -> str | None:
    """The package or root module of ours that an imported name belongs to."""
    parts = name.split(".")
    if parts[0] != "compiler" or len(parts) < 2 or name.startswith(LEAVES):
        return None
    return parts[1] if (root / parts[1]).is_dir() or (root / f"{parts[1]}.py").exists() else None


def root_violations(root: Path) -> list[str]:
    found = []
    for path in sorted(root.glob("*.py")):
        here, names = _imports(path, root)
        short = _root_module(here, root)
        if short is None or here.startswith(LEAVES):
            continue
        if short not in ROOT_ALLOWED:
            found.append(f"{here} is a root module missing from ROOT_ALLOWED")
            continue
        for name in sorted(names):
            target = _target(name, root)
            if target is not None and target != short and target not in ROOT_ALLOWED[short]:
                found.append(f"{here} imports {name}")
    return found


ISL_LAYERS = {"poly", "cpu"}


def violations(root: Path) -> list[str]:
    found = []
    for path in sorted(root.rglob("*.py")):
        here, names = _imports(path, root)
        layer = _layer(here)
        for name in sorted(names):
            if name.split(".")[0] == "islpy" and layer not in ISL_LAYERS:
                found.append(f"{here} imports islpy (only compiler.poly and compiler.cpu may)")
            ours = name.split(".")[0] == "compiler" and not name.startswith(LEAVES)
            if here.startswith(LEAVES) and ours:
                found.append(f"leaf {here} imports {name}")
            elif layer in ALLOWED and ours and _layer(name) not in {layer, None} | ALLOWED[layer]:
                found.append(f"{here} imports {name}")
    return found


def test_layers_import_only_what_rule_1_allows() -> None:
    assert len(list((COMPILER / "frontend").glob("*.py"))) >= 5
    assert violations(COMPILER) == []


def test_root_modules_import_only_what_they_are_allowed() -> None:
    assert len(list(COMPILER.glob("*.py"))) >= 10
    assert root_violations(COMPILER) == []


def test_root_rules_catch_a_new_import_and_an_unlisted_module(tmp_path: Path) -> None:
    (tmp_path / "compiler" / "poly").mkdir(parents=True)
    (tmp_path / "compiler" / "names.py").write_text("from compiler.kernel import Kernel\n")
    (tmp_path / "compiler" / "kernel.py").write_text("")
    (tmp_path / "compiler" / "shapes.py").write_text("from compiler.poly import gather\n")
    (tmp_path / "compiler" / "extra.py").write_text("")
    assert root_violations(tmp_path / "compiler") == [
        "compiler.extra is a root module missing from ROOT_ALLOWED",
        "compiler.shapes imports compiler.poly",
        "compiler.shapes imports compiler.poly.gather",
    ]
    assert violations(tmp_path / "compiler") == [
        "leaf compiler.names imports compiler.kernel",
        "leaf compiler.names imports compiler.kernel.Kernel",
    ]


def test_the_import_reader_catches_violations(tmp_path: Path) -> None:
    (tmp_path / "compiler" / "codegen").mkdir(parents=True)
    (tmp_path / "compiler" / "codegen" / "llvm.py").write_text(
        "import islpy\nfrom ..frontend import ast\nfrom ..loops import For\n"
        "from compiler.diagnostics import TCError\n"
    )
    assert violations(tmp_path / "compiler") == [
        "compiler.codegen.llvm imports compiler.frontend",
        "compiler.codegen.llvm imports compiler.frontend.ast",
        "compiler.codegen.llvm imports islpy (only compiler.poly and compiler.cpu may)",
    ]
