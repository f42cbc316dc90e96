"""Hints a newcomer meets: missing builtins, transposed letters, targets, entry points."""

from __future__ import annotations

import pytest

import compiler
from compiler import OptionsError, SemanticError, TCError
from compiler.diagnostics import close_names, did_you_mean, edit_distance
from compiler.frontend.builtins import ARITY


def _hint(source: str) -> str:
    with pytest.raises(SemanticError) as info:
        compiler.define(source, target="interp")
    return info.value.diagnostics[0].hint or ""


@pytest.mark.parametrize(
    "fn,formula", [("sigmoid", "1 / (1 + exp(-x))"), ("relu", "fmax(x, 0)"), ("abs", "fabs(x)")]
)
def test_missing_builtin_says_so_and_how_to_write_it(fn: str, formula: str) -> None:
    hint = _hint(f"def f(float(N) A) -> (O) {{ O(i) = {fn}(A(i)) }}")
    assert hint == f"tcc has no builtin '{fn}': write `{formula}`"


def test_misspelt_builtin_lists_close_ones_transposition_first() -> None:
    hint = _hint("def f(float(N) A) -> (O) { O(i) = tahn(A(i)) }")
    assert hint.startswith("did you mean 'tanh'? ('tahn' is no builtin; close ones: 'tanh'")
    assert "'tan'" in hint


def test_a_close_tensor_name_comes_before_builtins() -> None:
    hint = _hint("def f(float(N) Input) -> (O) { O(i) = Inptu(i) }")
    assert hint == "did you mean 'Input'?"


def test_unknown_name_with_nothing_close_keeps_the_declaration_hint() -> None:
    hint = _hint("def f(float(N) A) -> (O) { O(i) = zzzzqq(A(i)) }")
    assert hint == "tensors must be declared as inputs or outputs of the def"


def test_edit_distance_counts_a_transposition_as_one_edit() -> None:
    assert edit_distance("tahn", "tanh") == 1
    assert edit_distance("tahn", "tan") == 1
    assert edit_distance("kitten", "sitting") == 3
    assert edit_distance("", "abc") == 3
    assert edit_distance("same", "same") == 0
    assert did_you_mean("tahn", ARITY) == "did you mean 'tanh'?"
    assert did_you_mean("expp", ARITY) == "did you mean 'exp'?"
    assert did_you_mean("c", ["b"]) is None  # one-letter names are not "close"
    assert close_names("sqtr", ARITY)[0] == "sqrt"


def test_cuda_target_hint_points_at_llvm() -> None:
    from compiler.kernel import AVAILABLE_TARGETS

    if "cuda" in AVAILABLE_TARGETS:
        pytest.skip("the CUDA target is available here")
    with pytest.raises(OptionsError) as info:
        compiler.define("def f(float(N) A) -> (O) { O(i) = A(i) }", target="cuda")
    assert "target='llvm'" in (info.value.diagnostics[0].hint or "")


def test_several_defs_without_a_name_say_how_to_pick() -> None:
    with pytest.raises(TCError) as info:
        compiler.define("def a(float(N) X) -> (Y) { Y(i) = X(i) }\n"
                        "def b(float(N) X) -> (Y) { Y(i) = X(i) }")  # fmt: skip
    hint = info.value.diagnostics[0].hint or ""
    assert "--entry NAME (e.g. --entry a)" in hint and "define(source, 'a')" in hint
