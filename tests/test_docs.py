"""The documentation agrees with the code: docs/cli.md documents every subcommand and
every flag that `tcc`'s argument parser defines; mkdocs.yml's navigation lists exactly the
pages under docs/; the README is a landing page that starts with the two set-up commands
and, like the docs, carries no history (commit hashes, "this session")."""

from __future__ import annotations

import argparse
import re
from pathlib import Path

import pytest

from compiler.cli import COMMANDS, build_parser

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
CLI_PAGE = DOCS / "cli.md"
README = ROOT / "README.md"
SETUP = (
    "pip install -e . && tcc compile examples/conv2d.tc --grad\n"
    "pip install -e '.[test]' && python -m pytest -q\n"
)


def subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    raise AssertionError("tcc's parser has no subcommands")


def flags(parser: argparse.ArgumentParser) -> set[str]:
    """Every option string of `parser` but -h/--help."""
    return {
        s
        for action in parser._actions
        if not isinstance(action, argparse._HelpAction)
        for s in action.option_strings
    }


def sections(text: str) -> dict[str, str]:
    """`## tcc NAME` heading -> the text up to the next `## ` heading."""
    parts = re.split(r"^## ", text, flags=re.M)
    return {p.split("\n", 1)[0].strip(): p for p in parts[1:]}


def test_cli_page_documents_every_subcommand_and_flag() -> None:
    pages = sections(CLI_PAGE.read_text(encoding="utf-8"))
    commands = subparsers(build_parser())
    assert set(commands) == {c.name for c in COMMANDS}
    missing = {}
    for name, sub in commands.items():
        section = pages.get(f"tcc {name}")
        if section is None:
            missing[name] = "no '## tcc NAME' section"
            continue
        absent = sorted(f for f in flags(sub) if not re.search(rf"`{re.escape(f)}[` =]", section))
        if absent:
            missing[name] = absent
    assert not missing, f"docs/cli.md lacks: {missing}"
    text = CLI_PAGE.read_text(encoding="utf-8")
    assert [f for f in flags(build_parser()) if f"`tcc {f}`" not in text] == []


def test_flags_sees_each_option_string() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("-q", "--quiet", action="store_true")
    parser.add_argument("--shape")
    assert flags(parser) == {"-q", "--quiet", "--shape"}


def nav_pages() -> list[str]:
    text = (ROOT / "mkdocs.yml").read_text(encoding="utf-8")
    nav = text[text.index("\nnav:") :]
    return re.findall(r":\s*(\S+\.md)\s*$", nav, flags=re.M)


def test_navigation_lists_every_page() -> None:
    pages = sorted(str(p.relative_to(DOCS)) for p in DOCS.glob("**/*.md"))
    assert sorted(nav_pages()) == pages


def test_readme_is_a_landing_page() -> None:
    text = README.read_text(encoding="utf-8")
    assert len(text.splitlines()) <= 250
    first = re.search(r"^```sh\n(.*?)^```", text, flags=re.M | re.S)
    assert first is not None and first.group(1) == SETUP
    assert text.index("```sh") < text.index("\n## ")  # the commands come first
    for target in re.findall(r"\]\((docs/[^)#]+)", text):
        assert (ROOT / target).is_file(), target


HISTORY = [
    r"\b(?=[0-9a-f]*[a-f])(?=[0-9a-f]*[0-9])[0-9a-f]{7,40}\b",  # a commit hash
    r"\bthis session\b",
    r"\bfirst run\b",
    r"\bbefore and after\b",
    r"\bthis tree\b",
    r"when this was written",
]


@pytest.mark.parametrize(
    "page", [README, *sorted(DOCS.glob("**/*.md"))], ids=lambda p: str(p.relative_to(ROOT))
)
def test_pages_carry_no_history(page: Path) -> None:
    text = page.read_text(encoding="utf-8")
    found = [m.group(0) for pattern in HISTORY for m in re.finditer(pattern, text, re.I)]
    assert not found, f"{page.name}: {found}"
