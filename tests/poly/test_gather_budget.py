"""The gather pass's isl budget: past it a scatter stays a scatter (serial, correct)
with a GatherBudgetWarning, and isl's context is left as it was."""

from __future__ import annotations

import subprocess
import sys
import warnings
from pathlib import Path

import islpy as isl
import numpy as np
import pytest

import compiler
import compiler.poly.gather as gather
from compiler.backward import grad
from compiler.frontend.check import check_def
from compiler.frontend.parser import parse
from compiler.poly.gather import GatherBudgetWarning, remaining_scatters, scatter_to_gather
from compiler.poly.ranges import infer_ranges

ROOT = Path(__file__).resolve().parents[2]
CONV = (ROOT / "examples" / "conv2d.tc").read_text()
WEIRD = Path("/work/shared/corpus/tc/inf_weird_conv.tc")


def _scatter_form() -> object:
    return infer_ranges(check_def(parse(grad(CONV, "conv2d", form="scatter")).get()))


def test_small_budget_keeps_the_scatter_with_a_warning() -> None:
    ranged = _scatter_form()
    with pytest.warns(GatherBudgetWarning, match="stays a scatter, which runs serially"):
        kept = scatter_to_gather(ranged, max_operations=1000)
    assert remaining_scatters(kept) == remaining_scatters(ranged) != ()
    assert isl.DEFAULT_CONTEXT.get_max_operations() == 0  # restored: no limit
    full = scatter_to_gather(ranged)  # the default budget is ample for a convolution
    assert remaining_scatters(full) == ()


def test_budget_zero_means_no_limit() -> None:
    assert remaining_scatters(scatter_to_gather(_scatter_form(), max_operations=0)) == ()


def test_kept_scatter_computes_the_same_gradient(monkeypatch: pytest.MonkeyPatch) -> None:
    rng = np.random.default_rng(3)
    arrays = [rng.standard_normal(s).astype(np.float32) for s in [(2, 3, 7, 5), (4, 3, 3, 2), (4,)]]
    (out,) = compiler.define(CONV, target="interp")(*arrays)
    cot = (rng.standard_normal(out.shape).astype(np.float32),)
    want = compiler.define(CONV, target="interp").vjp(*arrays, grad_outputs=cot)
    monkeypatch.setattr(gather, "MAX_OPERATIONS", 1000)
    # derive the gradient again under this budget: not one an earlier test shared
    monkeypatch.setattr(compiler.kernel, "_GRADS", {})
    with pytest.warns(GatherBudgetWarning):
        got = compiler.define(CONV, target="llvm", cache=False).vjp(*arrays, grad_outputs=cot)
    for g, w in zip(got, want, strict=True):
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-4)


@pytest.mark.skipif(not WEIRD.exists(), reason="the shared TC corpus is not present")
def test_pathological_strided_gradient_does_not_hang() -> None:
    # minutes without the budget; a few seconds with it (the timeout only guards a
    # hang). On the CPU (Options.gather="auto") the strided scatter is a partial
    # scatter: the gather is not even tried, so no warning.
    result = subprocess.run(
        [sys.executable, "-m", "compiler", "compile", str(WEIRD), "--grad"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    assert "def fun_grad" in result.stdout
    assert "input_grad(b, ip, 2 * h + 3 * w + kh, 2 * w + kw) +=!" in result.stdout
    assert "gave up" not in result.stderr


def test_a_remembered_gradient_warns_again(monkeypatch: pytest.MonkeyPatch) -> None:
    """`pipeline.gradient` derives a def once per budget (the same object again) and
    gives the gather pass's warnings at every call, remembered or not."""
    from compiler import pipeline

    ranged = infer_ranges(check_def(parse(CONV).get()))
    monkeypatch.setattr(gather, "MAX_OPERATIONS", 1000)
    monkeypatch.setattr(pipeline, "_GRADIENTS", {})
    got = []
    for _ in range(3):
        with pytest.warns(GatherBudgetWarning, match="gave up on `I_grad"):
            got.append(pipeline.gradient(ranged, form="gather"))
    first = got[0]
    assert got[1] is first and got[2] is first and len(pipeline._GRADIENTS) == 1
    monkeypatch.setattr(gather, "MAX_OPERATIONS", 0)  # another budget: derived again
    with warnings.catch_warnings():
        warnings.simplefilter("error", GatherBudgetWarning)
        again = pipeline.gradient(ranged, form="gather")
    assert again is not first and len(pipeline._GRADIENTS) == 2
    assert remaining_scatters(again) == ()
