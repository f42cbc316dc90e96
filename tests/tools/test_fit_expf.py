"""tools.fit_expf reproduces the coefficients of the inline float32 exp."""

from __future__ import annotations

from compiler.cpu.llvm_exp import COEFFS
from tools.fit_expf import fit


def test_the_fit_gives_the_coefficients_in_use() -> None:
    coeffs, ulps = fit(len(COEFFS))
    assert tuple(float(c) for c in coeffs) == COEFFS
    assert ulps < 0.1
