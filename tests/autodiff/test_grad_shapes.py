"""Gradient defs know their output gradients' shapes (issue 11): `<out>_grad` is declared
with the forward output's shape expressions (`H - KH + 1`), which the dialect prints,
parses and checks; the call checks them once, and no per-element bounds check is left
in the loops of any gradient of the examples, the benchmark suites or the corpus."""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import numpy as np
import pytest

import compiler
from compiler import pipeline
from compiler.diagnostics import SemanticError, ShapeError, TCError
from compiler.frontend.check import check_def
from compiler.frontend.parser import parse
from compiler.frontend.printer import print_def
from compiler.poly.astgen import ERROR_BUFFER

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = sorted((ROOT / "examples").glob("*.tc"))
CORPUS = Path("/work/shared/corpus/tc")
CONV = (ROOT / "examples" / "conv2d.tc").read_text()

# Forward defs valid only for some sizes (they raise "written at negative index"
# otherwise): the gradient's range inference does not know those conditions, so one
# read keeps its check. `reverted` needs I <= 11; `convolutionGrad` OH == H, OW == W.
KNOWN_CHECKED = {("doc_reverted.tc", "reverted"), ("inf_conv_grad.tc", "convolutionGrad")}


def test_grad_param_has_the_output_shape_expressions() -> None:
    text = compiler.grad(CONV)
    assert "float(N, M, H - KH + 1, W - KW + 1) O_grad" in text
    assert "O_D2" not in text


def test_dimension_expressions_round_trip() -> None:
    src = (
        "def f(float(N, H) A, float(K) W, float(N, (H - K) / 2 + 1, max(3, K)) G) -> (O) {\n"
        "    O(n, h) +=! A(n, h + k) * W(k) + G(n, 0, 0)\n}\n"
    )
    d = parse(src).get()
    again = parse(print_def(d)).get()
    assert print_def(again) == print_def(d)
    assert again.params[2].dims == d.params[2].dims
    check_def(d)


@pytest.mark.parametrize(
    ("dims", "message"),
    [
        ("N, H - Q", "'Q', which is not a size"),
        ("N, H * 1.5", "must be an integer expression"),
        ("N, H == 2", "integer expression of sizes"),
        ("N, exp(H)", "may call only min and max"),
    ],
)
def test_bad_dimension_expressions_are_errors(dims: str, message: str) -> None:
    src = f"def f(float(N, H) A, float({dims}) G) -> (O) {{\n    O(n) = A(n, 0)\n}}\n"
    with pytest.raises(SemanticError, match=message):
        check_def(parse(src).get())


def test_expression_dimension_checked_once_per_call() -> None:
    k = compiler.define(CONV)
    rng = np.random.default_rng(0)
    shapes = ((2, 3, 7, 6), (4, 3, 3, 2), (4,))
    args = [rng.standard_normal(s).astype(np.float32) for s in shapes]
    (out,) = k(*args)
    assert out.shape == (2, 4, 5, 5)
    bad = np.zeros((2, 4, 6, 5), np.float32)
    with pytest.raises(ShapeError, match="'O_grad' is declared `H - KH \\+ 1` = 5"):
        k.grad(*args, bad)
    with pytest.raises(ShapeError, match="grad_outputs for 'O'"):
        k.vjp(*args, grad_outputs=(bad,))
    g = rng.standard_normal(out.shape).astype(np.float32)
    ref = compiler.define(CONV, target="interp").vjp(*args, grad_outputs=(g,))
    for got, want in zip(k.vjp(*args, grad_outputs=(g,)), ref, strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.stem)
def test_no_bounds_check_in_the_loops_of_example_gradients(path: Path) -> None:
    lowered = pipeline.run(path.read_text(), grad=True, upto="lower")
    names = {b.name for b in lowered.function.buffers}
    assert ERROR_BUFFER not in names
    assert lowered.checks == ()


def _suite_sources() -> list[tuple[str, str]]:
    from tools.bench import _cases

    return [(c.name, c.source) for c in _cases(extra=True, layers=True) if not c.call]


@pytest.mark.parametrize(("name", "source"), _suite_sources(), ids=[n for n, _ in _suite_sources()])
def test_no_bounds_check_in_the_loops_of_benchmark_gradients(name: str, source: str) -> None:
    """Also where the forward def itself is valid only for some sizes (the LSTM cell
    reads `Gt(b, 3 * H + h)`): the gradient's `<out>_grad` parameters carry the
    forward's output shapes, whose extents (>= 1, checked at the call) prove the reads
    that the forward's output extents prove for the forward."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        lowered = pipeline.run(source, grad=True, upto="lower")
    assert ERROR_BUFFER not in {b.name for b in lowered.function.buffers}
    assert lowered.checks == ()


def _corpus_entries() -> list[tuple[str, str]]:
    if not (CORPUS / "manifest.json").exists():
        return []
    manifest = json.loads((CORPUS / "manifest.json").read_text())
    skip = {"negative", "unmerged_pr"}
    return [(e["file"], e["def"]) for e in manifest if e.get("category") not in skip]


def _bounds_warnings(result: object) -> list[str]:
    return [w.message for w in result.warnings if "stays in bounds" in w.message]  # type: ignore[attr-defined]


@pytest.mark.skipif(not _corpus_entries(), reason="the TC corpus is not available")
def test_corpus_gradients_add_no_bounds_checks() -> None:
    """Every read a gradient adds is proved in bounds: the gradient's range inference
    warns (a run-time check) only where the forward's does (data-dependent reads)."""
    checked = 0
    added: list[str] = []
    for file, name in _corpus_entries():
        text = (CORPUS / file).read_text()
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                forward = pipeline.run(text, name, upto="ranges")
                gradient = pipeline.gradient(forward, form="scatter")
        except TCError:
            continue  # not differentiable: tools.corpus reports why
        checked += 1
        extra = _bounds_warnings(gradient)
        if extra and not _bounds_warnings(forward) and (file, name) not in KNOWN_CHECKED:
            added.append(f"{file}:{name}: {extra[0]}")
    assert checked > 100
    assert added == []
