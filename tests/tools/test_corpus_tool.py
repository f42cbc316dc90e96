"""tools/corpus.py on a tiny corpus made in tmp_path: verdicts, summary, exit code."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tools import corpus

ROOT = Path(__file__).resolve().parents[2]
MATMUL = "def matmul(float(M, K) A, float(K, N) B) -> (C) {\n    C(m, n) +=! A(m, k) * B(k, n)\n}\n"
CONST_LHS = "def sum1D(float(N) A) -> (B) {\n    B(0) +=! A(i)\n}\n"
UNDEFINED = "def f(float(N) A) -> (B) {\n    B(i) = Z(i)\n}\n"


def make_corpus(tmp_path: Path, entries: list[tuple[str, str, dict[str, str]]]) -> Path:
    manifest = []
    for name, text, extra in entries:
        (tmp_path / name).write_text(text)
        defname = text.split("(")[0].removeprefix("def ")
        manifest.append({"file": name, "def": defname, "category": "kernel", **extra})
    (tmp_path / "manifest.json").write_text(json.dumps(manifest))
    return tmp_path


NEGATIVE = {
    "category": "negative",
    "expected_error": "parse error: expected ident but found number",
}


def test_good_and_negative_entries_pass_as_expected(tmp_path: Path) -> None:
    make_corpus(tmp_path, [("mm.tc", MATMUL, {}), ("neg.tc", CONST_LHS, NEGATIVE)])
    proc = subprocess.run(
        [sys.executable, "-m", "tools.corpus", str(tmp_path), "--json", str(tmp_path / "r.json")],
        capture_output=True, text=True, cwd=ROOT, timeout=60,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0] == "2 entries"
    assert (
        lines[1].split()
        == "stage passed failed expected failures unexpected skipped informative".split()
    )
    rows = {line.split()[0]: [int(n) for n in line.split()[1:]] for line in lines[2:5]}
    assert rows == {
        "parse": [1, 1, 1, 0, 0, 0],
        "check": [1, 0, 0, 0, 1, 0],
        "roundtrip": [1, 0, 0, 0, 1, 0],
    }
    assert lines[-1] == "no unexpected results"
    report = json.loads((tmp_path / "r.json").read_text())
    neg = next(e for e in report["entries"] if e["file"] == "neg.tc")
    assert neg["expected_failure_stage"] == "parse"
    verdicts = [s["verdict"] for s in neg["stages"]]
    assert verdicts == ["expected failure"] + ["skipped"] * (len(verdicts) - 1)
    assert neg["stages"][0]["message"].startswith("2:7: ")


def test_unexpected_results_exit_1_and_are_listed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    wrong_stage = {"category": "negative", "expected_error": "sema: undefined variable"}
    make_corpus(
        tmp_path,
        [
            ("bad.tc", UNDEFINED, {}),
            ("neg.tc", CONST_LHS, wrong_stage),
            ("ok.tc", UNDEFINED, wrong_stage),
        ],
    )
    assert corpus.main([str(tmp_path)]) == 1
    out = capsys.readouterr().out
    unexpected = out.split("unexpected (2):\n")[1].splitlines()
    assert unexpected[0].startswith("  bad.tc [f] check failed: 2:12: ")
    assert unexpected[1].startswith("  neg.tc [sum1D] parse failed: 2:7: ")
    assert "ok.tc" not in out  # failed at check, as its expected error says


def test_stage_limits_the_stages_run(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    make_corpus(tmp_path, [("bad.tc", UNDEFINED, {})])
    assert corpus.main([str(tmp_path), "--stage", "parse"]) == 0
    out = capsys.readouterr().out
    assert "check" not in out and out.splitlines()[2].split() == [
        "parse",
        "1",
        "0",
        "0",
        "0",
        "0",
        "0",
    ]
    assert corpus.main([str(tmp_path), "--stage", "nope"]) == 1
    assert "unknown stage 'nope'" in capsys.readouterr().err


def test_range_negatives_must_fail_at_ranges(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    ranges = {"category": "negative", "expected_error": "tc2halide: Could not infer ranges"}
    coupled = "def f(float(N) A) -> (O) { O(i) +=! A(i + j) }\n"
    make_corpus(
        tmp_path,
        [
            ("r.tc", coupled, ranges),
            ("m.tc", MATMUL, ranges),
            ("u.tc", CONST_LHS, {"category": "unmerged_pr"}),
        ],
    )
    results = {r.file: r for r in corpus.run_corpus(tmp_path, corpus.STAGES)}
    by_stage = {s.stage: s for s in results["r.tc"].stages}
    assert by_stage["ranges"].verdict is corpus.Verdict.EXPECTED_FAILURE
    assert results["m.tc"].unexpected  # a range negative that infers fine is a surprise
    assert corpus.main([str(tmp_path)]) == 1
    out = capsys.readouterr().out
    assert "informative (1):\n  u.tc [sum1D] parse failed" in out


def test_crash_is_always_unexpected(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def crash(work: corpus.Work) -> corpus.Work:
        raise ZeroDivisionError("bug")

    make_corpus(tmp_path, [("u.tc", MATMUL, {"category": "unmerged_pr"})])
    stages = (corpus.Stage("parse", crash),)
    [result] = corpus.run_corpus(tmp_path, stages)
    assert result.unexpected and result.stages[0].message == "ZeroDivisionError: bug"


def test_missing_manifest_is_a_one_line_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert corpus.main([str(tmp_path)]) == 1
    assert capsys.readouterr().err.startswith("corpus: error: cannot read ")


@pytest.mark.parametrize(
    ("error", "stage"),
    [
        ("parse error: expected ident", "parse"),
        ('sema: "TC inputs are immutable"', "check"),
        ('NOT a valid TC. First sema error: "undefined variable"', "check"),
        ('tc2halide: "Free variable m was not solved"', "ranges"),
        ("range inference error (doc: ...)", "ranges"),
        ("not a valid TC per docs/FAQ", corpus.ANY_STAGE),
    ],
)
def test_expected_failure_stage(error: str, stage: str) -> None:
    assert corpus.expected_failure_stage({"category": "negative", "expected_error": error}) == stage
    assert corpus.expected_failure_stage({"category": "kernel", "expected_error": error}) is None
