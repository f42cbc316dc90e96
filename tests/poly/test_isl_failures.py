"""An isl failure anywhere in the pipeline is an InternalError naming the statement at
its source position (`poly.failures`), never a raw islpy exception.

Each test makes one isl-using step fail as isl does (an `isl.Error`, or the
RuntimeError islpy raises itself) and checks what reaches the caller."""

from __future__ import annotations

import islpy as isl
import numpy as np
import pytest

import compiler
from compiler.diagnostics import InternalError
from compiler.pipeline import run
from compiler.poly import astgen, companions, gather, invert, ranges
from compiler.poly.failures import IslFailure, is_isl_error

SRC = """def f(float(N) A, float(K) W) -> (B, C) {
    B(i) = A(i) * 2.0
    C(i) +=! A(i + k) * W(k)
}"""


def _fail(*args: object, **kwargs: object) -> object:
    raise isl.Error("call to isl_fake failed: injected")


def _islpy_runtime_error(*args: object, **kwargs: object) -> object:
    space = isl.Set("{ [i, j] }").set_dim_name(isl.dim_type.set, 1, "i")
    return space.get_var_dict()  # islpy's own RuntimeError: non-unique var name 'i'


def _assert_names_c(e: InternalError, what: str) -> None:
    text = str(e)
    assert isinstance(e, IslFailure)
    assert text.startswith("<string>:3:5: isl failed on `C(i) +=! A(i + k)"), text
    assert what in text
    assert e.span.line == 3 and e.span.col == 5


def test_lowering(monkeypatch: pytest.MonkeyPatch) -> None:
    real = astgen._NestLowering.run

    def failing(self: astgen._NestLowering) -> object:
        if self.facts.stmt.lhs.name == "C":
            _fail()
        return real(self)

    monkeypatch.setattr(astgen._NestLowering, "run", failing)
    with pytest.raises(InternalError) as info:
        compiler.define(SRC)(np.ones(3, np.float32), np.ones(2, np.float32))
    _assert_names_c(info.value, "isl_fake")


def test_gather_in_the_gradient(monkeypatch: pytest.MonkeyPatch) -> None:
    """The gradient's scatter `A_grad(i + k) += ...` comes from C's statement: its span."""
    monkeypatch.setattr(gather, "choose_inner", _islpy_runtime_error)
    monkeypatch.setattr(gather, "unit_inner", lambda rows, candidates: None)  # isl's search
    with pytest.raises(InternalError) as info:
        run(SRC, grad=True, upto="gather", options=compiler.Options(gather="full"))
    text = str(info.value)
    assert isinstance(info.value, IslFailure)
    assert text.startswith("<string>:3:5: isl failed on `A_grad(i + k) +="), text
    assert "non-unique var name 'i'" in text


def test_range_inference(monkeypatch: pytest.MonkeyPatch) -> None:
    real = ranges._StmtInference.run

    def failing(self: ranges._StmtInference) -> object:
        if self.facts.stmt.lhs.name == "C":
            _fail()
        return real(self)

    monkeypatch.setattr(ranges._StmtInference, "run", failing)
    with pytest.raises(InternalError) as info:
        run(SRC, upto="ranges")
    _assert_names_c(info.value, "isl_fake")


def test_what_escapes_a_pass_names_the_pass(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(companions, "with_companions", _fail)
    with pytest.raises(InternalError) as info:
        run(SRC, upto="schedule")
    assert isinstance(info.value, IslFailure)
    assert "pass 'schedule'" in str(info.value) and "isl_fake" in str(info.value)


def test_other_errors_pass_through(monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(*args: object) -> object:
        raise RuntimeError("not isl")

    monkeypatch.setattr(invert, "schedule_of", broken)
    monkeypatch.setattr(gather, "schedule_of", broken)
    with pytest.raises(RuntimeError, match="not isl") as info:
        run(SRC, grad=True, upto="gather", options=compiler.Options(gather="full"))
    assert not isinstance(info.value, InternalError)


def test_is_isl_error() -> None:
    with pytest.raises(RuntimeError) as raised:
        _islpy_runtime_error()
    assert is_isl_error(raised.value)
    assert is_isl_error(isl.Error("x"))
    assert not is_isl_error(RuntimeError("x"))
    assert not is_isl_error(ValueError("x"))
