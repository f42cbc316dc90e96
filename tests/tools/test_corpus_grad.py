"""The gradient stages of tools/corpus.py (tools/corpus_grad.py) on a tiny corpus made
in tmp_path: a differentiable entry passes through interp and llvm, a wrong user
backward def is unexpected, an integer-only def and a def autodiff rejects have no
gradient (with the reason), a data-dependent scatter is reported as such."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from compiler.backward import grad
from compiler.gradcheck import GradcheckError, as_float64
from compiler.kernel import define
from tools import corpus
from tools.corpus_grad import ScatterForm, _directional, format_gradients, run_grad

CONV = "def conv(float(N) A, float(K) W) -> (O) {\n    O(i) +=! A(i + k) * W(k)\n}\n"
TANH = "def f(float(N) A, float(N) B) -> (C) {\n    C(i) = A(i) * tanh(B(i))\n}\n"
SQUARE = (
    "def sq(float(N) A) -> (B) {\n    B(i) = A(i) * A(i)\n}\n"
    "def sq_grad(float(N) A, float(N) B_grad) -> (A_grad) {\n"
    "    A_grad(i) = B_grad(i) * A(i)\n}\n"  # wrong: the factor 2 is missing
)
SQUARE_RIGHT = SQUARE.replace("B_grad(i) * A(i)", "2 * B_grad(i) * A(i)")
INTEGER = "def inc(int32(N) A) -> (B) {\n    B(i) = A(i) + 1\n}\n"
TIMES = "def t(float(N) A) -> (B) {\n    B(i) *= A(i)\n}\n"  # a first write: no gradient
EMBED = (
    "def embed(float(V, D) E, int32(L) idx) -> (O) {\n"
    "    O(i, d) = E(idx(i), d) where i in 0:L\n}\n"
)


def run(tmp_path: Path, entries: list[tuple[str, str, str, dict[str, Any]]]) -> dict[str, Any]:
    """Run the whole stage list on a corpus of (file, text, def, manifest fields)."""
    manifest = []
    for name, text, defname, extra in entries:
        (tmp_path / name).write_text(text)
        manifest.append({"file": name, "def": defname, "category": "kernel", **extra})
    (tmp_path / "manifest.json").write_text(json.dumps(manifest))
    results = corpus.run_corpus(tmp_path)
    return {r.file: r for r in results}


def stage(result: corpus.EntryResult, name: str) -> corpus.StageResult:
    return next(s for s in result.stages if s.stage == name)


def test_differentiable_entries_pass_through_interp_and_llvm(tmp_path: Path) -> None:
    results = run(
        tmp_path,
        [
            ("conv.tc", CONV, "conv", {"inputs": {"A": [300], "W": [5]}}),
            ("tanh.tc", TANH, "f", {"inputs": {"A": [6], "B": [6]}}),
        ],
    )
    for name in ("conv.tc", "tanh.tc"):
        res = results[name]
        assert not res.unexpected, res.stages
        assert stage(res, "grad").status is corpus.Status.PASSED
        assert stage(res, "grad-llvm").status is corpus.Status.PASSED
        assert res.gradient.scatters == ()  # the conv's A_grad scatter became a gather
    checks = results["conv.tc"].gradient.checks
    assert checks[0].startswith("interp (scatter form): directional (2 input(s)")
    assert "llvm: vjp == interp's" in checks
    assert not any("full" in c for c in checks)  # A has 300 elements: directional only
    small = results["tanh.tc"].gradient.checks
    assert "interp: full gradcheck" in small and "llvm: full gradcheck" in small


def test_wrong_user_backward_is_unexpected_and_a_right_one_passes(tmp_path: Path) -> None:
    results = run(
        tmp_path,
        [
            ("wrong.tc", SQUARE, "sq", {"inputs": {"A": [40]}}),
            ("right.tc", SQUARE_RIGHT, "sq", {"inputs": {"A": [40]}}),
        ],
    )
    wrong = stage(results["wrong.tc"], "backward")
    assert wrong.verdict is corpus.Verdict.UNEXPECTED
    assert "directional gradcheck failed for input 'A'" in wrong.message
    assert stage(results["wrong.tc"], "grad").verdict is corpus.Verdict.OK  # AD is right
    right = stage(results["right.tc"], "backward")
    assert right.status is corpus.Status.PASSED and not results["right.tc"].unexpected


def test_entries_without_gradient_say_why(tmp_path: Path) -> None:
    results = run(
        tmp_path,
        [
            ("int.tc", INTEGER, "inc", {"inputs": {"A": [8]}, "dtypes": {"A": "int32"}}),
            ("times.tc", TIMES, "t", {"inputs": {"A": [8]}}),
        ],
    )
    integer = stage(results["int.tc"], "grad")
    assert (integer.status, integer.verdict) == (corpus.Status.SKIPPED, corpus.Verdict.SKIPPED)
    assert integer.message == "no gradient: no float input"
    times = stage(results["times.tc"], "grad")
    assert times.verdict is corpus.Verdict.INFORMATIVE
    assert times.message.startswith("no gradient: cannot differentiate `*=` without '!'")
    assert not any(r.unexpected for r in results.values())
    summary = format_gradients(list(results.values()))
    assert "gradients: 0 entries have one" in summary
    assert "  int.tc [inc]: no gradient: no float input" in summary


def test_data_dependent_scatter_is_reported(tmp_path: Path) -> None:
    entry = {
        "inputs": {"E": [10, 4], "idx": [12]},
        "dtypes": {"idx": "int32"},
        "input_values": {"idx": "integers in [0, V)"},
        "size_params": {"V": 10, "D": 4, "L": 12},
    }
    res = run(tmp_path, [("embed.tc", EMBED, "embed", entry)])["embed.tc"]
    assert not res.unexpected, res.stages
    (scatter,) = res.gradient.scatters
    assert scatter.data_dependent and scatter.statement.startswith("E_grad(idx(i), d) +=")
    summary = format_gradients([res])
    assert "scatters left in gradients after the gather pass (1):" in summary
    assert "embed.tc [embed]: data-dependent: E_grad(idx(i), d) +=" in summary


def test_directional_check_catches_a_wrong_vjp() -> None:
    """The check itself: a vjp off by a factor fails, the right one passes."""
    entry = {"file": "x.tc", "def": "sq", "inputs": {"A": [50]}, "category": "kernel"}
    report = run_grad(SQUARE, entry)
    assert report.point is not None and report.point.vjp is not None

    class Halved(ScatterForm):
        def vjp(self, *arrays: Any, grad_outputs: Any) -> tuple[np.ndarray | None, ...]:
            return tuple(
                None if g is None else g / 2
                for g in super().vjp(*arrays, grad_outputs=grad_outputs)
            )

    forward = as_float64(define(SQUARE, "sq", target="interp"))
    text = grad(forward.text, "sq", form="scatter")
    assert _directional(ScatterForm(forward, text), report.point, "t").startswith("t: directional")
    with pytest.raises(GradcheckError, match="directional gradcheck failed for input 'A'"):
        _directional(Halved(forward, text), report.point, "t")


def test_scatter_kept_at_the_isl_budget_is_reported_not_unexpected(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import compiler.poly.gather as gather

    monkeypatch.setattr(gather, "MAX_OPERATIONS", 1000)  # the conv's A_grad gather gives up
    results = run(tmp_path, [("conv.tc", CONV, "conv", {"inputs": {"A": [30], "W": [5]}})])
    res = results["conv.tc"]
    assert not res.unexpected, res.stages
    assert stage(res, "grad-llvm").status is corpus.Status.PASSED  # serial, still right
    (kept,) = res.gradient.scatters
    assert kept.budget and not kept.data_dependent
    assert kept.statement.startswith("A_grad(i + k) +=! ")
    assert any("gave up on `A_grad(i + k) +=! ...`" in n for n in res.gradient.notes)
    assert "affine, kept at the gather pass's isl budget (serial)" in format_gradients(
        list(results.values())
    )
