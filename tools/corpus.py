"""Run the TC corpus through the compiler's stages and compare with the manifest.

    python -m tools.corpus [DIR] [--stage NAME] [--json FILE]

DIR (default `../shared/corpus/tc` from the repository root) holds `.tc` files and a
`manifest.json`: a list of entries with `file`, `def`, `category` and, for negative
tests, `expected_error` (see the corpus README). Every entry goes through `STAGES` in
order, each stage a function `Work -> Work`; the first stage that raises stops the
entry, and the later stages count as skipped.

Expectations:
- an entry that is not `negative` must pass every stage (category `unmerged_pr` is
  informative only: its results are shown but never unexpected);
- a `negative` entry must fail with a `TCError` at the stage its `expected_error`
  names (`parse error...` -> parse, `sema...` -> check, `tc2halide...` or `range
  inference...` -> ranges); while that stage is not in `STAGES` it must pass them all.
  A negative whose error names no stage may fail anywhere;
- an exception that is not a `TCError` is a compiler crash: always unexpected.

Output: a table per stage (passed / failed / expected failures / unexpected /
skipped / informative), then every unexpected result with the first line of its
diagnostic. Exit status 1 if anything was unexpected, 0 otherwise.

Extending: append `Stage("ranges", _ranges)` etc. to `STAGES`; a stage reads what
earlier stages put in `Work` and returns `dataclasses.replace(work, ...)`.
"""

from __future__ import annotations

import argparse
import enum
import json
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, TextIO

from compiler.diagnostics import TCError
from tools.corpus_grad import NotApplicable

REPO_ROOT = Path(__file__).resolve().parents[1]
DEFAULT_DIR = REPO_ROOT.parent / "shared" / "corpus" / "tc"
INFORMATIVE_CATEGORIES = frozenset({"unmerged_pr"})
ANY_STAGE = "*"  # a negative entry whose expected error names no stage


# ------------------------------------------------------------------- the stages


@dataclass(frozen=True)
class Work:
    """What the stages have produced so far for one manifest entry."""

    path: Path
    filename: str
    entry_point: str
    text: str = ""
    module: Any = None  # frontend.ast.Module after `parse`
    checked: Any = None  # frontend.checked.CheckedDef after `check`
    warnings: tuple[str, ...] = ()
    entry: Any = None  # the manifest entry (inputs, dtypes, ... for `interp`)
    gradient: Any = None  # tools.corpus_grad.GradReport after `grad`
    backward: str = ""  # what `backward` checked of the source's own backward def


def _parse(work: Work) -> Work:
    from compiler.frontend.parser import parse

    text = work.path.read_text(encoding="utf-8")
    return replace(work, text=text, module=parse(text, work.filename))


def _check(work: Work) -> Work:
    from compiler.frontend.check import check_def

    checked = check_def(work.module.get(work.entry_point))
    warnings = tuple(d.render() for d in getattr(checked, "warnings", ()))
    return replace(work, checked=checked, warnings=work.warnings + warnings)


def _roundtrip(work: Work) -> Work:
    from compiler.diagnostics import InternalError
    from compiler.frontend.parser import parse
    from compiler.frontend.printer import print_module

    printed = print_module(work.module)
    reparsed = parse(printed, f"{work.filename} (printed)")
    if reparsed != work.module:
        raise InternalError("parse(print(module)) differs from module:\n" + printed)
    return work


def _ranges(work: Work) -> Work:
    from compiler.diagnostics import RangeError
    from compiler.poly.ranges import infer_ranges

    ranged = infer_ranges(work.checked)
    warnings = tuple(d.render() for d in ranged.warnings)
    # TC's test_inference.cc sets throwWarnings=true: its unprovable preconditions fail.
    expected = str((work.entry or {}).get("expected_error", ""))
    if ranged.warnings and "Required precondition will not be checked" in expected:
        raise RangeError(ranged.warnings)
    return replace(work, warnings=work.warnings + warnings)


@dataclass(frozen=True)
class Stage:
    name: str
    run: Callable[[Work], Work]


def _interp(work: Work) -> Work:
    from tools.corpus_interp import SKIPPED_CATEGORIES, run_interp

    entry = work.entry or {}
    if entry.get("category") in SKIPPED_CATEGORIES or "inputs" not in entry:
        return work
    _, notes = run_interp(work.text, entry)
    return replace(work, warnings=work.warnings + notes)


def _llvm(work: Work) -> Work:
    from tools.corpus_interp import SKIPPED_CATEGORIES
    from tools.corpus_llvm import run_llvm

    entry = work.entry or {}
    if entry.get("category") in SKIPPED_CATEGORIES or "inputs" not in entry:
        return work
    return replace(work, warnings=work.warnings + run_llvm(work.text, entry))


def _grad(work: Work) -> Work:
    from tools.corpus_grad import run_grad

    return replace(work, gradient=run_grad(work.text, work.entry or {}))


def _grad_llvm(work: Work) -> Work:
    from tools.corpus_grad import run_grad_llvm

    return replace(work, gradient=run_grad_llvm(work.text, work.entry or {}, work.gradient))


def _backward(work: Work) -> Work:
    from tools.corpus_grad import run_backward

    return replace(work, backward=run_backward(work.text, work.entry or {}))


def _cuda_emulated(work: Work) -> Work:
    from tools.corpus_cuda import run_cuda_emulated

    notes = run_cuda_emulated(work.text, work.entry or {}, work.gradient)
    return replace(work, warnings=work.warnings + notes)


STAGES: tuple[Stage, ...] = (
    Stage("parse", _parse),
    Stage("check", _check),
    Stage("roundtrip", _roundtrip),
    Stage("ranges", _ranges),
    Stage("interp", _interp),
    Stage("llvm", _llvm),  # after interp: compares with it on the same inputs
    Stage("grad", _grad),  # gradient (AD + gather) checked in float64 through interp
    Stage("grad-llvm", _grad_llvm),  # after grad: the same points, vjp == interp's
    Stage("backward", _backward),  # the source's own `<def>_grad`, checked like `grad`
    Stage("cuda-emulated", _cuda_emulated),  # CUDA C on the CPU: kernel and vjp == interp
)

# Where a negative entry's `expected_error` says the original TC failed.
_ERROR_STAGE_PREFIXES: tuple[tuple[str, str], ...] = (
    ("parse error", "parse"),
    ("sema", "check"),
    ("not a valid tc. first sema error", "check"),
    ("tc2halide", "ranges"),
    ("range inference", "ranges"),
)


# Entries TC accepts but tcc deliberately rejects, because TC computed something wrong
# there (README: "Where tcc differs from TC"): (file, def) -> (stage, why).
DEVIATIONS: dict[tuple[str, str], tuple[str, str]] = {
    ("inf_shift1d_plus.tc", "fun"): (
        "ranges",
        "O(i) = I(i + 5) writes O at negative indices for every size (TC writes out of bounds)",
    ),
    ("inf_empty_where.tc", "fun"): (
        "ranges",
        "`where i in 8:4` is an empty range (TC silently gives a negative extent)",
    ),
    ("doc_reverted.tc", "reverted"): (
        "interp",
        "A(i) = B(10 - i) with I = 12 writes A(-1): a ShapeError at call time (TC: out of bounds)",
    ),
    ("conv_with_backward_fused.tc", "convolution"): (
        "backward",
        "its backward def convolution_grad gives d_Bias(m) = Bias(m), a placeholder "
        "('TODO: Bias incorrect'); the gradient of Bias is the sum of d_O over n, h, w",
    ),
}


def expected_failure_stage(entry: dict[str, Any]) -> str | None:
    """The stage a negative entry must fail at, ANY_STAGE, or None (must pass)."""
    deviation = DEVIATIONS.get((entry.get("file", ""), entry.get("def", "")))
    if deviation is not None:
        return deviation[0]
    error = entry.get("expected_error")
    if entry.get("category") != "negative" or not error:
        return None
    lowered = str(error).strip().lower()
    for prefix, stage in _ERROR_STAGE_PREFIXES:
        if lowered.startswith(prefix):
            return stage
    return ANY_STAGE


# ------------------------------------------------------------------- results


class Status(enum.Enum):
    PASSED = "passed"
    FAILED = "failed"
    SKIPPED = "skipped"


class Verdict(enum.Enum):
    OK = "ok"
    EXPECTED_FAILURE = "expected failure"
    UNEXPECTED = "unexpected"
    INFORMATIVE = "informative"
    SKIPPED = "skipped"


@dataclass(frozen=True)
class StageResult:
    stage: str
    status: Status
    verdict: Verdict
    message: str = ""  # first line of the diagnostic, or a note on the verdict
    seconds: float = 0.0


@dataclass(frozen=True)
class EntryResult:
    file: str
    entry_point: str
    category: str
    expected_stage: str | None
    stages: tuple[StageResult, ...]
    warnings: tuple[str, ...] = field(default=())
    gradient: Any = None  # tools.corpus_grad.GradReport, when the entry has a gradient

    @property
    def unexpected(self) -> bool:
        return any(s.verdict is Verdict.UNEXPECTED for s in self.stages)


def _first_line(err: BaseException) -> str:
    if isinstance(err, TCError):
        diag = err.diagnostics[0]
        where = f"{diag.span.line}:{diag.span.col}: " if diag.span.source else ""
        return f"{where}{diag.message}".splitlines()[0]
    text = str(err).splitlines()[0] if str(err) else ""
    return f"{type(err).__name__}: {text}"


def _judge(stage: str, expected: str | None, error: BaseException | None) -> Verdict:
    if error is not None and not isinstance(error, TCError):
        return Verdict.UNEXPECTED  # a crash is a compiler bug, whatever the entry says
    if error is None:
        return Verdict.UNEXPECTED if expected == stage else Verdict.OK
    return Verdict.EXPECTED_FAILURE if expected in (stage, ANY_STAGE) else Verdict.UNEXPECTED


def _note_unmet_expectation(
    entry: dict[str, Any], expected: str | None, last: StageResult, work: Work
) -> StageResult:
    """A negative whose error names no stage, or an expected warning, that no stage
    produced: worth showing, but not a failure (the manifest cannot say where)."""
    if last.verdict is not Verdict.OK:
        return last
    if expected == ANY_STAGE:
        note = f"invalid TC that no stage rejects yet: {entry.get('expected_error', '')}"
    elif entry.get("expected_warning") and work.checked is not None and not work.warnings:
        note = f"expected a warning: {entry['expected_warning']}"
    else:
        return last
    return replace(last, verdict=Verdict.INFORMATIVE, message=note.splitlines()[0])


def run_entry(entry: dict[str, Any], corpus: Path, stages: Sequence[Stage]) -> EntryResult:
    """Run one manifest entry through `stages`, judging each against the manifest."""
    expected = expected_failure_stage(entry)
    informative = entry.get("category") in INFORMATIVE_CATEGORIES
    work = Work(corpus / entry["file"], entry["file"], entry["def"], entry=entry)
    results: list[StageResult] = []
    failed = False
    for stage in stages:
        if failed:
            results.append(StageResult(stage.name, Status.SKIPPED, Verdict.SKIPPED))
            continue
        start = time.perf_counter()
        error: BaseException | None = None
        try:
            work = stage.run(work)
        except NotApplicable as err:
            verdict = Verdict.INFORMATIVE if err.informative else Verdict.SKIPPED
            seconds = time.perf_counter() - start
            results.append(StageResult(stage.name, Status.SKIPPED, verdict, err.reason, seconds))
            continue
        except Exception as err:  # judged below: TCError expected or not, or a crash
            error = err
        seconds = time.perf_counter() - start
        verdict = _judge(stage.name, expected, error)
        crashed = error is not None and not isinstance(error, TCError)
        if informative and verdict is Verdict.UNEXPECTED and not crashed:
            verdict = Verdict.INFORMATIVE
        message = _first_line(error) if error is not None else ""
        if error is None and verdict is Verdict.UNEXPECTED:
            message = f"expected to fail here: {entry.get('expected_error', '')}".splitlines()[0]
        status = Status.PASSED if error is None else Status.FAILED
        results.append(StageResult(stage.name, status, verdict, message, seconds))
        failed = error is not None
    ran = [i for i, r in enumerate(results) if r.status is Status.PASSED]
    if ran and not failed:  # the note goes on the last stage that ran
        results[ran[-1]] = _note_unmet_expectation(entry, expected, results[ran[-1]], work)
    return EntryResult(
        entry["file"],
        entry["def"],
        str(entry.get("category", "")),
        expected,
        tuple(results),
        work.warnings,
        work.gradient,
    )


# ------------------------------------------------------------------- reporting

_COLUMNS = ("passed", "failed", "expected failures", "unexpected", "skipped", "informative")


def summarize(results: Sequence[EntryResult], stages: Sequence[Stage]) -> dict[str, dict[str, int]]:
    """Per stage, the count in each of `_COLUMNS`."""
    table = {s.name: dict.fromkeys(_COLUMNS, 0) for s in stages}
    for result in results:
        for r in result.stages:
            row = table[r.stage]
            if r.status is Status.PASSED:
                row["passed"] += 1
            elif r.status is Status.FAILED:
                row["failed"] += 1
            else:
                row["skipped"] += 1
            if r.verdict is Verdict.EXPECTED_FAILURE:
                row["expected failures"] += 1
            elif r.verdict is Verdict.UNEXPECTED:
                row["unexpected"] += 1
            elif r.verdict is Verdict.INFORMATIVE:
                row["informative"] += 1
    return table


def format_report(results: Sequence[EntryResult], stages: Sequence[Stage]) -> str:
    table = summarize(results, stages)
    width = max(len("stage"), *(len(s.name) for s in stages))
    header = "stage".ljust(width) + "".join(f"  {c:>{len(c)}}" for c in _COLUMNS)
    lines = [f"{len(results)} entries", header]
    for name, row in table.items():
        lines.append(name.ljust(width) + "".join(f"  {row[c]:>{len(c)}}" for c in _COLUMNS))
    unexpected = [
        (res, r) for res in results for r in res.stages if r.verdict is Verdict.UNEXPECTED
    ]
    informative = [
        (res, r) for res in results for r in res.stages if r.verdict is Verdict.INFORMATIVE
    ]
    for title, rows in (("unexpected", unexpected), ("informative", informative)):
        if rows:
            lines.append(f"\n{title} ({len(rows)}):")
            for res, r in rows:
                lines.append(
                    f"  {res.file} [{res.entry_point}] {r.stage} {r.status.value}: {r.message}"
                )
    if any(s.name == "grad" for s in stages):
        from tools.corpus_grad import format_gradients

        lines.append("\n" + format_gradients(results))
    if not unexpected:
        lines.append("\nno unexpected results")
    return "\n".join(lines)


def results_to_json(results: Sequence[EntryResult], stages: Sequence[Stage]) -> dict[str, Any]:
    return {
        "stages": [s.name for s in stages],
        "summary": summarize(results, stages),
        "entries": [
            {
                "file": res.file,
                "def": res.entry_point,
                "category": res.category,
                "expected_failure_stage": res.expected_stage,
                "unexpected": res.unexpected,
                "warnings": list(res.warnings),
                "gradient": res.gradient.to_json() if res.gradient is not None else None,
                "stages": [
                    {
                        "stage": r.stage,
                        "status": r.status.value,
                        "verdict": r.verdict.value,
                        "message": r.message,
                        "seconds": round(r.seconds, 6),
                    }
                    for r in res.stages
                ],
            }
            for res in results
        ],
    }


# ------------------------------------------------------------------- driver


class CorpusError(Exception):
    """The corpus directory or its manifest cannot be used."""


def load_manifest(corpus: Path) -> list[dict[str, Any]]:
    manifest = corpus / "manifest.json"
    try:
        entries = json.loads(manifest.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise CorpusError(f"cannot read {manifest}: {err}") from None
    if not isinstance(entries, list) or not all(
        isinstance(e, dict) and "file" in e and "def" in e for e in entries
    ):
        raise CorpusError(f"{manifest}: expected a list of objects with 'file' and 'def'")
    return entries


def stages_upto(name: str | None) -> tuple[Stage, ...]:
    if name is None:
        return STAGES
    names = [s.name for s in STAGES]
    if name not in names:
        raise CorpusError(f"unknown stage '{name}'; stages are: {', '.join(names)}")
    return STAGES[: names.index(name) + 1]


def run_corpus(
    corpus: Path, stages: Sequence[Stage] = STAGES, progress: TextIO | None = None
) -> list[EntryResult]:
    """Run every manifest entry; draw a progress line on `progress` if given."""
    entries = load_manifest(corpus)
    results = []
    for i, entry in enumerate(entries, 1):
        if progress is not None:
            progress.write(f"\r\x1b[K[{i:>4}/{len(entries)}] {entry['file']}")
            progress.flush()
        results.append(run_entry(entry, corpus, stages))
    if progress is not None:
        progress.write("\r\x1b[K")
        progress.flush()
    return results


def _arg_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m tools.corpus", description=__doc__.splitlines()[0]
    )
    parser.add_argument("dir", nargs="?", type=Path, default=DEFAULT_DIR, help="corpus folder")
    parser.add_argument("--stage", help="run the stages up to and including this one")
    parser.add_argument("--json", type=Path, metavar="FILE", help="write the results as JSON")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = _arg_parser().parse_args(argv)
    try:
        stages = stages_upto(args.stage)
        progress = sys.stderr if sys.stderr.isatty() else None
        results = run_corpus(args.dir, stages, progress)
    except CorpusError as err:
        print(f"corpus: error: {err}", file=sys.stderr)
        return 1
    print(format_report(results, stages))
    if args.json is not None:
        args.json.write_text(json.dumps(results_to_json(results, stages), indent=2) + "\n")
    return 1 if any(r.unexpected for r in results) else 0


if __name__ == "__main__":
    sys.exit(main())
