"""Names the compiler invents never capture the user's (compiler.names.NameSupply).

A def may use any name the gradient would invent (`z0`, `i0`, `A_grad`, `O_v1`,
`O_tmp1`, `f_grad`...): the gradient then picks a fresh one, and its value is the
value of the un-renamed def's gradient.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import compiler
from compiler.frontend.ast import Const
from compiler.frontend.lexer import TokenKind, tokenize
from compiler.frontend.source import Source
from compiler.names import NameSupply
from tests.autodiff.kit import check, reparse

RNG = np.random.default_rng(7)

Z0 = "def f(float(N) A, float(1) b) -> (O) { O(z0) +=! A(z0) * b(0) }"


def test_supply_hands_out_fresh_names_deterministically() -> None:
    supply = NameSupply({"A", "A_grad"}, {"z0"})
    assert supply.fresh("A_grad") == "A_grad_1"
    assert supply.fresh("A_grad") == "A_grad_2"
    assert supply.fresh("B_grad") == "B_grad"
    assert "A_grad_1" in supply
    scope = supply.scope({"i0"})
    assert scope.numbered("i", 2) == ("i1", "i2")
    assert scope.fresh("z0") == "z0"  # z0 was local to another statement
    assert "i1" not in supply  # a scope's names stay in the scope
    assert supply.first_free(["A", "y"], "y") == "y"
    assert supply.first_free(["A", "y"], "y") == "y0"


def test_index_named_z0_keeps_its_meaning() -> None:
    """The issue's program: the constant subscript `b(0)` used to become `b_grad(z0)`,
    capturing the user's `z0`; it now gets `z0_1`, and the gradient is exact."""
    text = compiler.grad(Z0, form="scatter")
    assert "b_grad(z0_1) +=! O_grad(z0) * A(z0) where z0 in 0:N, z0_1 in 0:1" in text
    a = np.array([1.0, 2.0, 3.0], np.float32)
    b = np.array([2.0], np.float32)
    for target in ("interp", "llvm"):
        k = compiler.define(Z0, target=target)
        ga, gb = k.vjp(a, b, grad_outputs=(np.ones(3, np.float32),))
        np.testing.assert_allclose(ga, [2.0, 2.0, 2.0])
        np.testing.assert_allclose(gb, [6.0])
    compiler.gradcheck(compiler.define(Z0, target="interp"), a, b)


def test_gradient_of_a_gradient_nests() -> None:
    """Issue 16's first bullet: `A_grad` of `f_grad` gets a fresh readable name and
    the printed TC re-parses; the second-order gradient is right."""
    src = "def f(double(N) A) -> (O) { O +=! exp(A(i)) * A(i) }"
    first = compiler.grad(src)
    second = compiler.grad(first, "f_grad")
    assert second.startswith("def f_grad_grad(double(N) A, double O_grad, double(N) A_grad_grad)")
    assert "-> (double(N) A_grad_1, double O_grad_grad" in second
    reparse(second)
    third = compiler.grad(second, "f_grad_grad")
    reparse(third)
    a = RNG.uniform(-1, 1, 5)
    check(first, a, np.array(0.7), name="f_grad")


# --------------------------------------------------------------- property test

DEFS = (
    "def f(double(M, K) A, double(K, N) B) -> (C) { C(m, n) +=! A(m, k) * B(k, n) }",
    "def f(double(N) A, double(1) b) -> (O) { O(i) +=! A(i) * b(0) }",
    "def f(double(N) A, double(N) B) -> (O) {\n    O(i) +=! A(i) * A(i)\n    O(i) = O(i) * B(i)\n}",
    "def f(double(N, M) A) -> (O) { O(i) max=! A(i, j) }",
    "def f(double(N, M) A) -> (O) { O(i) *=! A(i, j) }",
    "def f(double(N) A) -> (O) { O(i) +=! A(i + k) * A(k) where k in 0:3 }",
    "def f(double(N) A, double(N) B) -> (O, P) {\n"
    "    O(i) = A(i) * B(i)\n    P(i) +=! O(i) * A(j)\n}",
)

# Every kind of name the compiler generates (and some of them already taken).
POOL = (
    "z0", "z1", "z0_1", "i", "i0", "i1", "y", "x", "d0", "acc", "A", "B", "O", "P",
    "A_grad", "B_grad", "O_grad", "P_grad", "C_grad", "b_grad", "O_v1", "O_v1_grad",
    "O_tmp1", "O_tmp2", "O_D0", "O_grad_acc", "f_grad", "f", "A_grad_1",
)  # fmt: skip


def _identifiers(text: str) -> list[str]:
    seen: list[str] = []
    for tok in tokenize(Source("<t>", text)):
        if tok.kind is TokenKind.IDENT and tok.text not in seen and tok.text != "exp":
            seen.append(tok.text)
    return seen


def _rename(text: str, mapping: dict[str, str]) -> str:
    out, pos = [], 0
    for tok in tokenize(Source("<t>", text)):
        if tok.kind is TokenKind.IDENT and tok.text in mapping:
            out.append(text[pos : tok.span.start] + mapping[tok.text])
            pos = tok.span.end
    return "".join(out) + text[pos:]


def _inputs(kernel: compiler.kernel.Kernel) -> list[np.ndarray]:
    """Random float64 inputs; sizes by position of first use (renaming-proof)."""
    extents = iter((5, 3, 4, 2))
    sizes: dict[str, int] = {}
    arrays = []
    for t in kernel.ranged.checked.inputs:
        dims = []
        for d in t.dims:
            if isinstance(d, Const):
                dims.append(int(d.value))
            else:
                dims.append(sizes.setdefault(d.name, next(extents)))
        arrays.append(RNG.uniform(0.5, 1.5, tuple(dims)))
    return arrays


@pytest.mark.parametrize("index", range(len(DEFS)))
@settings(max_examples=12, deadline=None)
@given(data=st.data())
def test_renaming_to_generated_names_keeps_the_gradient(index: int, data: st.DataObject) -> None:
    source = DEFS[index]
    names = _identifiers(source)
    targets = data.draw(st.permutations(POOL).map(lambda p: p[: len(names)]))
    renamed = _rename(source, dict(zip(names, targets, strict=True)))
    original = compiler.define(source, target="interp")
    other = compiler.define(renamed, target="interp")
    arrays = _inputs(original)
    outs = original(*arrays)
    cot = [RNG.uniform(-1, 1, o.shape) for o in outs]
    want = original.vjp(*arrays, grad_outputs=cot)
    got = other.vjp(*arrays, grad_outputs=cot)
    for w, g in zip(want, got, strict=True):
        np.testing.assert_allclose(g, w, rtol=1e-12, atol=1e-12)
    reparse(other.grad_source)


NATIVE_DEFS = (
    DEFS[5],  # the gradient's scatter `A_grad(i + k)` is gathered: gather names `y`, `x`
    "def f(double(N) A) -> (O) {\n    O(i) = A(i)\n    O(i) = O(N - 1 - i) * O(i)\n}",
)
NATIVE_POOL = (*POOL, "s0", "s1", "u", "t", "acc_1")


@pytest.mark.parametrize("index", range(len(NATIVE_DEFS)))
@settings(max_examples=4, deadline=None)
@given(data=st.data())
def test_renamed_native_gradient_equals_the_reference(index: int, data: st.DataObject) -> None:
    """The same through gather, scheduling and LLVM, against the interpreter."""
    source = NATIVE_DEFS[index]
    names = _identifiers(source)
    targets = data.draw(st.permutations(NATIVE_POOL).map(lambda p: p[: len(names)]))
    renamed = _rename(source, dict(zip(names, targets, strict=True)))
    original = compiler.define(source, target="interp")
    native = compiler.define(renamed, cache=None)
    arrays = _inputs(original)
    cot = [RNG.uniform(-1, 1, o.shape) for o in original(*arrays)]
    want = original.vjp(*arrays, grad_outputs=cot)
    for w, g in zip(want, native.vjp(*arrays, grad_outputs=cot), strict=True):
        np.testing.assert_allclose(g, w, rtol=1e-10, atol=1e-12)
