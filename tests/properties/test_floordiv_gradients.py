"""Property test: the gradient of a read through random affine / floor-divided
subscripts, compiled for the CPU, is the cotangent scattered by brute force.

Each case is a def

    def f(float(N) B, float(<extent>, ...) A) -> (O) {
        O(<some of the variables>) +=! A(<r subscripts (sum c_v * v + offset) / d>)
            where v in <a constant range `0:4`, or one of the size N `0:N - 2`, `0:(N + 1) / 2`>
    }

with 1-3 variables, coefficients in -2..2 (a negative one gets `+ |c| * (hi_v - 1)` so
the subscript is never negative), divisors 1-3, and A's extents the largest subscript
plus one, as TC expressions of N (`B` only gives N its value). The gradient's
`A_grad(...) += O_grad(...)` is a scatter through the floor divisions, which the gather
pass inverts (ranges with floors, case splits, branches that isl specialises). The
oracle: `A_grad[s(v)] += c[lhs(v)]` with Python loops over every point. Runs on the
CPU target ("llvm") with each `gather=` mode and 1 or 2 threads.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

import compiler
from compiler import Options

VARS = ("i", "j", "k")
# a variable's range: its TC upper bound and its value at N (all ranges start at 0)
RANGES = (
    ("2", lambda n: 2),
    ("3", lambda n: 3),
    ("4", lambda n: 4),
    ("N", lambda n: n),
    ("N - 2", lambda n: n - 2),
    ("(N + 1) / 2", lambda n: (n + 1) // 2),
)


@dataclass(frozen=True)
class Case:
    ranges: tuple[int, ...]  # per variable: an index into RANGES
    subscripts: tuple[tuple[tuple[int, ...], int, int], ...]  # coefficients, offset, divisor
    lhs: tuple[int, ...]  # the output's variables, in order
    n: int  # the size N
    gather: str
    threads: int

    def hi(self, v: int) -> str:
        return RANGES[self.ranges[v]][0]

    def extent(self, v: int) -> int:
        return RANGES[self.ranges[v]][1](self.n)

    def numerator(self, coefs: tuple[int, ...], offset: int) -> str:
        terms = [f"{c} * {VARS[v]}" for v, c in enumerate(coefs) if c]
        terms += [f"{-c} * ({self.hi(v)} - 1)" for v, c in enumerate(coefs) if c < 0]
        return " + ".join([*terms, str(offset)])

    def largest(self, coefs: tuple[int, ...], offset: int) -> str:
        """The numerator's largest value, as TC (each variable at its extreme)."""
        terms = [f"{abs(c)} * ({self.hi(v)} - 1)" for v, c in enumerate(coefs) if c]
        return " + ".join([*terms, str(offset)])

    @property
    def source(self) -> str:
        dims = ", ".join(f"({self.largest(c, o)}) / {d} + 1" for c, o, d in self.subscripts)
        subs = ", ".join(f"({self.numerator(c, o)}) / {d}" for c, o, d in self.subscripts)
        lhs = ", ".join(VARS[v] for v in self.lhs)
        where = ", ".join(f"{VARS[v]} in 0:{self.hi(v)}" for v in range(len(self.ranges)))
        return (
            f"def f(float(N) B, float({dims}) A) -> (O) {{\n"
            f"    O({lhs}) +=! A({subs}) where {where}\n}}\n"
        )

    def subscript(self, point: tuple[int, ...]) -> tuple[int, ...]:
        out = []
        for coefs, offset, d in self.subscripts:
            value = sum(c * p for c, p in zip(coefs, point, strict=True)) + offset
            value += sum(-c * (self.extent(v) - 1) for v, c in enumerate(coefs) if c < 0)
            out.append(value // d)
        return tuple(out)

    def a_shape(self) -> tuple[int, ...]:
        shape = []
        for coefs, offset, d in self.subscripts:
            top = sum(abs(c) * (self.extent(v) - 1) for v, c in enumerate(coefs) if c) + offset
            shape.append(top // d + 1)
        return tuple(shape)


@st.composite
def cases(draw: st.DrawFn) -> Case:
    n_vars = draw(st.integers(1, 3))
    n = draw(st.integers(3, 7))  # every range non-empty
    ranges = tuple(draw(st.integers(0, len(RANGES) - 1)) for _ in range(n_vars))
    rank = draw(st.integers(1, 2))
    subscripts = tuple(
        (
            tuple(draw(st.integers(-2, 2)) for _ in range(n_vars)),
            draw(st.integers(0, 2)),
            draw(st.integers(1, 3)),
        )
        for _ in range(rank)
    )
    lhs = tuple(draw(st.permutations(range(n_vars))))[: draw(st.integers(1, n_vars))]
    gather = draw(st.sampled_from(("auto", "full", "partial")))
    return Case(ranges, subscripts, lhs, n, gather, draw(st.integers(1, 2)))


def _scattered(case: Case, cot: np.ndarray) -> np.ndarray:
    out = np.zeros(case.a_shape())
    extents = [case.extent(v) for v in range(len(case.ranges))]
    for point in itertools.product(*(range(e) for e in extents)):
        out[case.subscript(point)] += cot[tuple(point[v] for v in case.lhs)]
    return out


# each case compiles a gradient (seconds): a quarter of the profile's examples
@settings(max_examples=max(10, settings.default.max_examples // 4))
@given(cases(), st.integers(0, 2**16))
def test_floordiv_read_gradient_is_the_scattered_cotangent(case: Case, seed: int) -> None:
    rng = np.random.default_rng(seed)
    b = rng.standard_normal(case.n)
    a = rng.standard_normal(case.a_shape())
    kernel = compiler.define(
        case.source.replace("float(", "double("),
        options=Options(gather=case.gather, threads=case.threads),
    )
    cot = rng.standard_normal(tuple(case.extent(v) for v in case.lhs))
    b_grad, a_grad = kernel.vjp(b, a, grad_outputs=(cot,))
    np.testing.assert_allclose(
        a_grad, _scattered(case, cot), rtol=1e-12, atol=1e-12, err_msg=case.source
    )
    assert b_grad is None or not np.any(b_grad)
