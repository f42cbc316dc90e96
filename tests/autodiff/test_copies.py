"""autodiff.copies: an adjoint that is only a whole-tensor copy is not made (conv2d's
`O_v1_grad`); a copy that receives other contributions, or whose source changes
afterwards, stays. Gradients stay exact (float64 finite differences)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

import compiler
from compiler.autodiff.copies import propagate_copies
from compiler.frontend.parser import parse
from compiler.frontend.printer import print_def
from tests.autodiff.kit import check

ROOT = Path(__file__).resolve().parents[2]
CONV = (ROOT / "examples" / "conv2d.tc").read_text()
OVERWRITTEN = (
    "def f(float(N) A, float(N) B) -> (O, P) {\n"
    "    O(i) = A(i) * 2\n"
    "    P(i) = O(i) * O(i)\n"
    "    O(i) = O(i) + B(i)\n"
    "}\n"
)


def test_conv2d_reads_the_callers_adjoint() -> None:
    text = compiler.grad(CONV, form="scatter")
    assert "O_v1_grad" not in text
    assert "I_grad(n, c, h + kh, w + kw) +=! O_grad(n, m, h, w) * W1(m, c, kh, kw)" in text


def test_conv2d_gradient_stays_exact() -> None:
    rng = np.random.default_rng(3)
    shapes = ((2, 2, 5, 4), (3, 2, 2, 3), (3,))
    check(CONV, *(rng.standard_normal(s) for s in shapes))


def test_a_copy_with_other_contributions_stays() -> None:
    text = compiler.grad(OVERWRITTEN, form="scatter")
    assert "O_v1_grad(i) +=! O_grad(i)" in text.replace("i0", "i")
    rng = np.random.default_rng(4)
    check(OVERWRITTEN, rng.standard_normal(7), rng.standard_normal(7))


def test_a_copy_whose_source_changes_later_stays() -> None:
    d = parse(
        "def g(float(N) S) -> (float(N) R, float(N) T, float(N) U) {\n"
        "    T(i) = S(i) where i in 0:N\n"
        "    U(i) = S(i) + 1 where i in 0:N\n"
        "    R(i) = T(i) where i in 0:N\n"
        "}\n"
    ).get()
    moved = propagate_copies(d, keep=1)
    assert [p.name for p in moved.outputs] == ["R", "U"]
    assert "R(i) = S(i)" in print_def(moved)
    d2 = parse(
        "def g(float(N) S) -> (float(N) R, float(N) T, float(N) S2) {\n"
        "    T(i) = R(i) where i in 0:N\n"
        "    R(i) = S(i) where i in 0:N\n"
        "    S2(i) = T(i) where i in 0:N\n"
        "}\n"
    ).get()
    kept = propagate_copies(d2, keep=1)
    assert "T(i) = R(i)" in print_def(kept)  # R is written after the copy


# ------------------------------------------------------------ reuse of the forward

SOFTMAX = (ROOT / "examples" / "softmax.tc").read_text()


def test_softmax_gradient_reads_the_saved_exp() -> None:
    text = compiler.grad(SOFTMAX, form="scatter")
    assert "exp(" not in text
    assert "shifted_grad_acc(n, d) * shifted(n, d)" in text
    rng = np.random.default_rng(5)
    check(SOFTMAX, rng.standard_normal((3, 5)))


def test_reuse_needs_the_same_ranges_and_a_costly_expression() -> None:
    shifted = (  # `E` covers only d in 0:D - 1: the gradient's exp over 0:D stays
        "def f(float(N, D) X) -> (E, S) {\n"
        "    E(n, d) = exp(X(n, d)) where d in 0:D - 1\n"
        "    S(n) +=! exp(X(n, d)) * E(n, 0)\n"
        "}\n"
    )
    text = compiler.grad(shifted, form="scatter")
    assert "exp(X(n, d))" in text
    cheap = (
        "def g(float(N) X) -> (E, S) {\n    E(n) = X(n) * X(n)\n    S(n) = E(n) * X(n) * X(n)\n}\n"
    )
    assert "X(n) * X(n)" in compiler.grad(cheap, form="scatter")
    rng = np.random.default_rng(6)
    check(shifted, rng.standard_normal((2, 4)))


# ------------------------------------------------------- merged contributions

LAYERNORM = (ROOT / "examples" / "layernorm.tc").read_text()


def test_layernorm_contributions_of_the_square_are_merged() -> None:
    text = compiler.grad(LAYERNORM, form="scatter")
    lines = [line.strip() for line in text.splitlines()]
    # merged, then collected as like terms by autodiff.simplify: one X_grad statement
    x_var = [line for line in lines if line.startswith("X_grad") and "var_v1_grad" in line]
    assert len(x_var) == 1
    assert x_var[0].count("2 * (var_v1_grad(n) * (X(n, d) - mean(n)))") == 1
    rng = np.random.default_rng(7)
    check(LAYERNORM, rng.standard_normal((3, 6)), rng.standard_normal(6), rng.standard_normal(6))


def test_no_merge_across_a_write_of_what_the_later_one_reads() -> None:
    from compiler.autodiff.merge import merge_contributions

    d = parse(
        "def g(float(N) S) -> (float(N) R, float(N) T) {\n"
        "    R(i) +=! S(i) where i in 0:N\n"
        "    T(i) = S(i) where i in 0:N\n"
        "    R(i) += T(i) where i in 0:N\n"
        "    R(i) += S(i) where i in 0:N\n"
        "}\n"
    ).get()
    merged = print_def(merge_contributions(d))
    assert "R(i) +=! S(i) where" in merged
    assert "R(i) += T(i) + S(i) where" in merged
