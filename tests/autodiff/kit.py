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
