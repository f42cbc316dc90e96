"""Helpers of the autodiff tests: random inputs, gradient round trips."""

from __future__ import annotations

import numpy as np

import compiler
from compiler.frontend.check import check_def
from compiler.frontend.checked import RangedDef
from compiler.frontend.parser import parse
from compiler.poly.ranges import infer_ranges


def ranged(source: str, name: str | None = None) -> RangedDef:
    return infer_ranges(check_def(parse(source).get(name)))


def reparse(text: str) -> RangedDef:
    """The gradient text parses, checks and infers ranges (it is self-contained TC)."""
    return ranged(text)


def check(source: str, *arrays: np.ndarray, name: str | None = None, **kwargs: float) -> None:
    """gradcheck through the reference evaluator, after a scatter-form round trip."""
    reparse(compiler.grad(source, name, form="scatter"))
    compiler.gradcheck(compiler.define(source, name, target="interp"), *arrays, **kwargs)


def uniform(
    rng: np.random.Generator, shape: tuple[int, ...], lo: float = -1.0, hi: float = 1.0
) -> np.ndarray:
    return rng.uniform(lo, hi, size=shape)


# every target a gradient runs on: define's keywords, by test id
GRAD_TARGETS: dict[str, dict[str, object]] = {
    "interp": {"target": "interp"},
    "llvm-1": {"target": "llvm", "options": compiler.Options(threads=1)},
    "llvm-2": {"target": "llvm", "options": compiler.Options(threads=2)},
    "cuda-emulated": {"target": "cuda-emulated"},
}


def gradcheck_cases(
    source: str, cases: list[tuple[tuple[int, ...], ...]], target: str, seeds: tuple[int, ...]
) -> None:
    """`compiler.gradcheck` of `source` on `target` (a `GRAD_TARGETS` key), no cache,
    for random normal inputs of each case's shapes, drawn from each seed."""
    k = compiler.define(source, cache=False, **GRAD_TARGETS[target])  # type: ignore[arg-type]
    for seed in seeds:
        rng = np.random.default_rng(seed)
        for shapes in cases:
            compiler.gradcheck(k, *(rng.standard_normal(s) for s in shapes))
