"""The driver (compiler.pipeline): one pass list, one context, every caller goes
through it, and the gradient travels as IR from autodiff to code."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

import numpy as np
import pytest

import compiler
from compiler import pipeline
from compiler.diagnostics import OptionsError, Severity
from compiler.frontend.checked import RangedDef
from compiler.options import Options

ROOT = Path(__file__).resolve().parents[1]
MATMUL = "def matmul(float(M, K) A, float(K, N) B) -> (C) {\n    C(m, n) +=! A(m, k) * B(k, n)\n}\n"
CONV = (ROOT / "examples" / "conv2d.tc").read_text()


def test_pass_list_order() -> None:
    assert pipeline.PASS_NAMES == (
        "parse", "select", "check", "ranges", "grad", "gather", "schedule", "lower", "codegen",
    )  # fmt: skip


def test_run_observes_every_pass_and_skips_grad_unless_asked() -> None:
    seen: list[str] = []
    result = pipeline.run(MATMUL, upto="lower", observe=lambda n, r, s: seen.append(n))
    assert seen == ["parse", "select", "check", "ranges", "gather", "schedule", "lower"]
    assert result.function.name == "matmul"
    seen.clear()
    gradient = pipeline.run(
        MATMUL, upto="gather", grad=True, observe=lambda n, r, s: seen.append(n)
    )
    assert seen == ["parse", "select", "check", "ranges", "grad", "gather"]
    assert isinstance(gradient, RangedDef) and gradient.name == "matmul_grad"


def test_unknown_pass_is_an_options_error() -> None:
    with pytest.raises(OptionsError, match="unknown pass 'lowr'"):
        pipeline.run(MATMUL, upto="lowr")


def test_pipeline_and_kernel_produce_the_same_code() -> None:
    """Options reach the schedule through the context, as in `Kernel`."""
    for options in (Options(), Options(tile=(4, 4, 4)), Options(unroll=4, innermost=None)):
        kernel = compiler.define(MATMUL, options=options, cache=False)
        lowered = pipeline.run(MATMUL, upto="lower", options=options)
        assert kernel._native.lowered.function == lowered.function  # type: ignore[union-attr]
    assert (
        pipeline.run(MATMUL, upto="lower", options=Options(tile=(4, 4, 4))).function
        != pipeline.run(MATMUL, upto="lower").function
    )


def test_gradient_is_never_printed_and_parsed(monkeypatch: pytest.MonkeyPatch) -> None:
    kernel = compiler.define(MATMUL, target="interp")
    import compiler.frontend.parser as parser

    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("the gradient went through text")

    # every module that took `parse` by name, also those a gradient imports lazily
    # (imported here first, so they bind the real function, which the patch then replaces
    # and restores: a module first imported under the patch would keep `refuse`)
    for name in ("compiler.backward", "compiler.higher"):
        importlib.import_module(name)

    original = parser.parse
    for module in [m for n, m in sys.modules.items() if n.startswith("compiler")]:
        if getattr(module, "parse", None) is original:
            monkeypatch.setattr(module, "parse", refuse)
    a = np.arange(6, dtype=np.float32).reshape(2, 3)
    b = np.ones((3, 2), np.float32)
    ga, gb = kernel.vjp(a, b, grad_outputs=(np.ones((2, 2), np.float32),))
    np.testing.assert_allclose(ga, np.ones((2, 2)) @ b.T)
    np.testing.assert_allclose(gb, a.T @ np.ones((2, 2)))
    assert kernel.grad_source.startswith("def matmul_grad(")


def test_gradient_diagnostics_point_at_the_forward_source() -> None:
    # The gradient's output-gradient shapes are known now (no O_D2 warnings for conv2d);
    # an indirect read still warns, in the forward and in the gradient that reads it.
    src = "def f(float(N) A, int32(M) idx) -> (O) {\n    O(i) = A(idx(i))\n}\n"
    ctx = pipeline.PassContext(filename="ind.tc", grad=True)
    pipeline.run(src, ctx=ctx, upto="gather")
    assert ctx.diagnostics
    for diag in ctx.diagnostics:
        assert diag.severity is Severity.WARNING
        assert diag.span.source is not None and diag.span.source.name == "ind.tc"
        assert "A(idx(i))" in src.splitlines()[diag.span.line - 1]


def test_gradient_error_points_at_the_forward_statement() -> None:
    src = "def f(float(N) A) -> (O) {\n    O(i) = lgamma(A(i))\n}\n"
    with pytest.raises(compiler.TCError) as err:
        pipeline.run(src, filename="lg.tc", upto="grad", grad=True)
    rendered = str(err.value)
    assert rendered.startswith("lg.tc:2:12: error: cannot differentiate 'lgamma'"), rendered
