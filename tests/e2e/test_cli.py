"""The `tcc` command as users run it: a subprocess, its exit code and its output.

Exit codes: 0 ok, 1 user error (no traceback), 2 compiler bug (traceback and a
request to report it).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from compiler import cli
from compiler.diagnostics import InternalError

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = sorted((ROOT / "examples").glob("*.tc"))

MATMUL = "def matmul(float(M, K) A, float(K, N) B) -> (C) {\n    C(m, n) +=! A(m, k) * B(k, n)\n}\n"
MESSY_MATMUL = "def   matmul(float(M,K) A,float(K,N) B)->(C){C(m,n)+=!A(m,k)*B(k,n)}"
PARSE_ERROR = "def f(float(N) A) -> (B) {\n    B(i) = A(i) +* 2\n}\n"
UNDEFINED_TENSOR = "def f(float(N) A) -> (B) {\n    B(i) = Z(i)\n}\n"


def tcc(
    *args: str | Path, stdin: str | None = None, cwd: Path = ROOT
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "compiler.cli", *map(str, args)],
        input=stdin,
        capture_output=True,
        text=True,
        cwd=cwd,
        timeout=60,
    )


def assert_one_line_error(proc: subprocess.CompletedProcess[str], *fragments: str) -> None:
    assert proc.returncode == 1, proc.stderr
    assert "Traceback" not in proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("tcc: error: "), proc.stderr
    for fragment in fragments:
        assert fragment in lines[0]


def assert_caret_diagnostic(stderr: str, filename: str) -> tuple[int, int]:
    """`file:line:col: error: ...`, the source line, and a caret under column `col`."""
    lines = stderr.splitlines()
    match = re.match(rf"{re.escape(filename)}:(\d+):(\d+): error: \S", lines[0])
    assert match, stderr
    line, col = int(match[1]), int(match[2])
    caret = lines[2]
    assert caret.strip().startswith("^") and caret.index("^") - 4 == col - 1, stderr
    return line, col


# ------------------------------------------------------------ usage and files


def test_help_lists_every_registered_subcommand() -> None:
    proc = tcc("--help")
    assert proc.returncode == 0
    for command in cli.COMMANDS:
        assert re.search(rf"^\s+{command.name}\s+\S", proc.stdout, re.M), proc.stdout
    assert {c.name for c in cli.COMMANDS} >= {"check", "fmt"}


def test_unknown_flag_is_named_and_exits_1() -> None:
    assert_one_line_error(tcc("--bogus"), "unrecognized arguments: --bogus")
    assert_one_line_error(
        tcc("check", "--frobnicate", "x.tc"), "--frobnicate", "see 'tcc check --help'"
    )


def test_missing_command_exits_1() -> None:
    assert_one_line_error(tcc(), "missing COMMAND", "check")


def test_missing_file(tmp_path: Path) -> None:
    assert_one_line_error(tcc("check", tmp_path / "nope.tc"), "nope.tc", "no such file")


def test_directory_given_as_file(tmp_path: Path) -> None:
    assert_one_line_error(tcc("check", tmp_path), "is a directory")
    assert_one_line_error(tcc("fmt", tmp_path), "is a directory")


def test_non_utf8_file(tmp_path: Path) -> None:
    path = tmp_path / "latin1.tc"
    path.write_bytes(b"# caf\xe9\n" + MATMUL.encode())
    assert_one_line_error(tcc("check", path), "not UTF-8", "0xe9", "offset 5")


@pytest.mark.skipif(os.name != "posix" or os.geteuid() == 0, reason="root reads anything")
def test_unreadable_file(tmp_path: Path) -> None:
    path = tmp_path / "secret.tc"
    path.write_text(MATMUL)
    path.chmod(0)
    assert_one_line_error(tcc("check", path), "secret.tc", "ermission denied")


# ------------------------------------------------------------------ tcc check


def test_check_accepts_every_example() -> None:
    proc = tcc("check", *EXAMPLES)
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == ""
    for path in EXAMPLES:
        assert f"{path}: ok (" in proc.stdout


def test_check_quiet_prints_nothing_on_success() -> None:
    proc = tcc("check", "-q", EXAMPLES[0])
    assert (proc.returncode, proc.stdout, proc.stderr) == (0, "", "")


def test_parse_error_is_rendered_with_location_and_caret(tmp_path: Path) -> None:
    (tmp_path / "bad.tc").write_text(PARSE_ERROR)
    proc = tcc("check", "bad.tc", cwd=tmp_path)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    line, col = assert_caret_diagnostic(proc.stderr, "bad.tc")
    assert (line, col) == (2, 18)  # the unexpected '*'
    assert proc.stderr.splitlines()[1].strip() == "B(i) = A(i) +* 2"


def test_semantic_error_points_at_the_undefined_name(tmp_path: Path) -> None:
    (tmp_path / "undef.tc").write_text(UNDEFINED_TENSOR)
    proc = tcc("check", "undef.tc", cwd=tmp_path)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    assert assert_caret_diagnostic(proc.stderr, "undef.tc") == (2, 12)
    assert "Z" in proc.stderr.splitlines()[0]


def test_warnings_are_printed_and_exit_0(tmp_path: Path) -> None:
    (tmp_path / "acc.tc").write_text("def acc(float(N, M) A) -> (O) {\n    O(i) += A(i, j)\n}\n")
    proc = tcc("check", "acc.tc", cwd=tmp_path)
    assert proc.returncode == 0
    assert proc.stdout == "acc.tc: ok (acc, 1 warning(s))\n"
    assert re.match(r"acc.tc:2:5: warning: ", proc.stderr), proc.stderr


def test_check_reports_every_file_and_fails_if_any_fails(tmp_path: Path) -> None:
    (tmp_path / "bad.tc").write_text(PARSE_ERROR)
    (tmp_path / "good.tc").write_text(MATMUL)
    proc = tcc("check", "bad.tc", "good.tc", cwd=tmp_path)
    assert proc.returncode == 1
    assert proc.stdout == "good.tc: ok (matmul)\n"
    assert proc.stderr.startswith("bad.tc:2:")


def test_check_reads_stdin() -> None:
    proc = tcc("check", "-", stdin=MATMUL)
    assert (proc.returncode, proc.stdout) == (0, "-: ok (matmul)\n")
    proc = tcc("check", "-", stdin=PARSE_ERROR)
    assert proc.returncode == 1 and proc.stderr.startswith("<stdin>:2:")


RANGE_ERRORS = {
    "empty_where": (
        "def f(float(N) I) -> (O) {\n    O(i) = I(i) where i in 8:4\n}\n",
        (2, 23),
        "empty range: `i in 8:4`",
    ),
    "negative_index": (
        "def f(float(N) I) -> (O) {\n    O(i) = I(i + 5)\n}\n",
        (2, 7),
        "index `i` of output 'O' is negative for every size",
    ),
    "coupled": (
        "def f(float(N) I) -> (O) {\n    O(i) max=! I(2 * i + k)\n}\n",
        (2, 7),
        "could not infer a range for 'i', 'k'",
    ),
}


@pytest.mark.parametrize("case", sorted(RANGE_ERRORS))
def test_check_runs_range_inference(tmp_path: Path, case: str) -> None:
    text, position, message = RANGE_ERRORS[case]
    (tmp_path / "r.tc").write_text(text)
    proc = tcc("check", "r.tc", cwd=tmp_path)
    assert proc.returncode == 1 and proc.stdout == "", proc.stdout
    assert assert_caret_diagnostic(proc.stderr, "r.tc") == position
    assert message in proc.stderr.splitlines()[0]
    # what `tcc compile` says too: the same error at the same place
    compiled = tcc("compile", "r.tc", "--emit", "loops", cwd=tmp_path)
    assert compiled.returncode == 1 and compiled.stderr == proc.stderr
    proc = tcc("check", "--no-ranges", "r.tc", cwd=tmp_path)
    assert (proc.returncode, proc.stdout, proc.stderr) == (0, "r.tc: ok (f)\n", "")


def test_check_reports_the_range_errors_of_every_def(tmp_path: Path) -> None:
    bad = [RANGE_ERRORS[k][0].replace("def f", f"def {k}") for k in sorted(RANGE_ERRORS)]
    (tmp_path / "r.tc").write_text("\n".join([*bad, MATMUL]))
    proc = tcc("check", "r.tc", cwd=tmp_path)
    assert proc.returncode == 1
    assert len(re.findall(r"^r\.tc:\d+:\d+: error: ", proc.stderr, re.M)) == 3, proc.stderr


def test_check_prints_range_warnings(tmp_path: Path) -> None:
    (tmp_path / "w.tc").write_text(
        "def f(float(N) I, float(M) J) -> (O) {\n    O(i) = I(i) + J(i) where i in 0:N\n}\n"
    )
    proc = tcc("check", "w.tc", cwd=tmp_path)
    assert proc.returncode == 0
    assert proc.stdout == "w.tc: ok (f, 1 warning(s))\n"
    assert proc.stderr.startswith("w.tc:2:19: warning: cannot prove that `J(i)` stays in bounds")


# -------------------------------------------------------------------- tcc fmt


def test_fmt_prints_canonical_text(tmp_path: Path) -> None:
    (tmp_path / "messy.tc").write_text(MESSY_MATMUL)
    proc = tcc("fmt", "messy.tc", cwd=tmp_path)
    assert (proc.returncode, proc.stdout, proc.stderr) == (0, MATMUL, "")


def test_fmt_keeps_the_leading_comment_block(tmp_path: Path) -> None:
    (tmp_path / "c.tc").write_text("\n# Matrix product.\n#\n" + MESSY_MATMUL)
    proc = tcc("fmt", "c.tc", cwd=tmp_path)
    assert proc.stdout == "# Matrix product.\n#\n" + MATMUL


def test_every_example_is_canonically_formatted() -> None:
    proc = tcc("fmt", "--check", *EXAMPLES)
    assert (proc.returncode, proc.stderr) == (0, "")


def test_fmt_check_fails_on_non_canonical_text(tmp_path: Path) -> None:
    (tmp_path / "messy.tc").write_text(MESSY_MATMUL)
    proc = tcc("fmt", "--check", "messy.tc", cwd=tmp_path)
    assert (proc.returncode, proc.stdout) == (1, "")
    assert "messy.tc is not canonically formatted" in proc.stderr
    assert (tmp_path / "messy.tc").read_text() == MESSY_MATMUL


def test_fmt_in_place_rewrites_and_leaves_no_temp_file(tmp_path: Path) -> None:
    path = tmp_path / "messy.tc"
    path.write_text(MESSY_MATMUL)
    path.chmod(0o640)
    proc = tcc("fmt", "--in-place", path)
    assert (proc.returncode, proc.stdout, proc.stderr) == (0, "", "")
    assert path.read_text() == MATMUL
    assert path.stat().st_mode & 0o777 == 0o640
    assert sorted(p.name for p in tmp_path.iterdir()) == ["messy.tc"]


def test_fmt_in_place_leaves_a_bad_file_unchanged(tmp_path: Path) -> None:
    path = tmp_path / "bad.tc"
    path.write_text(PARSE_ERROR)
    proc = tcc("fmt", "-i", path)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    assert path.read_text() == PARSE_ERROR
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad.tc"]


def test_fmt_in_place_refuses_to_drop_comments(tmp_path: Path) -> None:
    path = tmp_path / "c.tc"
    text = MESSY_MATMUL.replace("{", "{ # sum over k\n", 1)
    path.write_text(text)
    proc = tcc("fmt", "-i", path)
    assert proc.returncode == 1 and "--drop-comments" in proc.stderr
    assert path.read_text() == text
    assert tcc("fmt", "-i", "--drop-comments", path).returncode == 0
    assert path.read_text() == MATMUL


def test_fmt_in_place_and_check_conflict() -> None:
    assert_one_line_error(tcc("fmt", "-i", "--check", EXAMPLES[0]), "--check", "--in-place")


def test_atomic_write_keeps_the_old_file_when_replace_fails(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "a.tc"
    path.write_text("old")

    def fail(src: str, dst: str) -> None:
        raise OSError("disk full")

    monkeypatch.setattr(cli.os, "replace", fail)
    with pytest.raises(OSError, match="disk full"):
        cli.write_atomically(path, "new")
    assert path.read_text() == "old"
    assert [p.name for p in tmp_path.iterdir()] == ["a.tc"]


# --------------------------------------------------------------- compiler bugs


def test_internal_error_exits_2_with_traceback(tmp_path: Path) -> None:
    (tmp_path / "m.tc").write_text(MATMUL)
    script = (
        "import sys, compiler.cli as cli, compiler.frontend.parser as p\n"
        "from compiler.diagnostics import InternalError\n"
        "def boom(*a, **k): raise InternalError('invariant broken')\n"
        "p.parse = boom\n"
        "sys.exit(cli.main(['check', 'm.tc']))\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, cwd=tmp_path, timeout=60
    )
    assert proc.returncode == 2
    assert "Traceback" in proc.stderr and "InternalError: invariant broken" in proc.stderr
    assert proc.stderr.rstrip().endswith(
        "tcc: internal compiler error, please report (with the input and the traceback above)"
    )


def test_unexpected_exception_exits_2(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def boom(args: object) -> int:
        raise KeyError("oops")

    command = cli.Command("boom", "raise", lambda parser: None, boom)
    monkeypatch.setattr(cli, "COMMANDS", (*cli.COMMANDS, command))
    assert cli.main(["boom"]) == 2
    err = capsys.readouterr().err
    assert "Traceback" in err and "KeyError: 'oops'" in err
    assert "internal compiler error, please report" in err


def test_internal_error_is_not_a_user_error() -> None:
    assert not issubclass(InternalError, cli.TCError)


def test_version() -> None:
    proc = tcc("--version")
    assert (proc.returncode, proc.stdout.split()[0]) == (0, "tcc")
