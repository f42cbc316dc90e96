"""Gradients of an `op!` statement whose clamp split gives a first piece that writes
only part of the output (issue 43, fuzz class G5), checked in float64 against central
differences on every CPU target and the CUDA emulation.

`O(i + k) max=! A(i) * B(min(k, 0)) where k in 0:3` splits into the piece `k = 0`,
which initialises O (its `!` sets the *whole* output to the identity) but writes only
`O(0:N)`, and the piece `k in 1:3`, which writes up to `O(N + 1)`. The gradient def
recomputes the first piece as a version `O_v1` declared with O's shape and reads it
over that whole shape (the `max=` pass-through, the whole-shape copy that starts the
next version): those reads are in bounds of the declared shape, where the elements
no piece wrote hold the identity. Range inference used to bound them by what was
written so far and rejected the gradient ("reads out of bounds for every size").
"""

from __future__ import annotations

import numpy as np
import pytest

import compiler
from tests.autodiff.kit import GRAD_TARGETS, gradcheck_cases

# name -> (source, shapes of the inputs for each size case)
DEFS = {
    # two pieces: the pass-through of the last one reads O_v1 over O's whole shape
    "max=! pass-through": (
        "def f(double(N) A, double(3) B) -> (O) {\n"
        "    O(i + k) max=! A(i) * B(min(k, 0)) where k in 0:3\n}",
        [((1,), (3,)), ((5,), (3,))],
    ),
    # three pieces: the second and third versions start with a whole-shape copy of
    # the previous one (`versions._copy_previous`)
    "min=! copies": (
        "def f(double(N) A, double(M) B, double(3) C) -> (O) {\n"
        "    O(i + k) min=! A(min(i, N - 1)) + B(min(i, M - 1)) + C(k) where i in 0:N + 2\n}",
        [((1,), (1,), (3,)), ((7,), (4,), (3,)), ((3,), (5,), (3,))],
    ),
    # a sum: the identity 0 outside the first piece
    "+=! pass-through": (
        "def f(double(N) A, double(2) B) -> (O) {\n"
        "    O(i + k) +=! A(i) * B(min(k, 1)) where k in 0:4\n}",
        [((2,), (2,)), ((5,), (2,))],
    ),
}


@pytest.mark.parametrize("target", sorted(GRAD_TARGETS))
@pytest.mark.parametrize("case", sorted(DEFS))
def test_gradient_matches_finite_differences(case: str, target: str) -> None:
    source, cases = DEFS[case]
    gradcheck_cases(source, cases, target, (43,))


def test_forward_matches_numpy() -> None:
    """The recomputed pieces mean the unsplit statement: O(p) = max over i + k = p."""
    k = compiler.define(DEFS["max=! pass-through"][0], target="interp", cache=False)
    a, b = np.array([0.5, -2.0, 1.5]), np.array([2.0, -1.0, 3.0])
    (got,) = k(a, b)
    want = np.full(5, -np.inf)
    for i in range(3):
        for kk in range(3):
            want[i + kk] = max(want[i + kk], a[i] * b[min(kk, 0)])
    np.testing.assert_array_equal(got, want)


def test_a_declared_output_is_read_in_its_whole_shape() -> None:
    """The same rule in a forward def: `op!` sets the whole declared output, so a read
    past what was written, inside the declared shape, sees the identity."""
    src = (
        "def f(double(N) A) -> (double(N + 2) O, double(N + 2) P) {\n"
        "    O(i) max=! A(i)\n"
        "    P(i) = O(i) where i in 0:N + 2\n}"
    )
    a = np.array([1.0, 2.0, 3.0])
    for target in ("interp", "llvm"):
        _, p = compiler.define(src, target=target, cache=False)(a)
        np.testing.assert_array_equal(p, [1.0, 2.0, 3.0, -np.inf, -np.inf])
