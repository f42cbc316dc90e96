"""Refit the polynomial of `compiler/cpu/llvm_exp.py` (offline; prints `COEFFS`).

    python -m tools.fit_expf [--degree 5]

`exp(r) ~ 1 + r + r^2 (c2 + c3 r + ... )` over `|r| <= R`, minimax in the relative
error of `exp`: Lawson's iteratively reweighted least squares on Chebyshev points,
the reference values from mpmath at 40 digits. Prints the float32 coefficients and
the largest relative error (in float32 ulps, 2^-24 relative) with them rounded.
"""

from __future__ import annotations

import argparse

import mpmath as mp
import numpy as np

R = 0.3486  # a little beyond ln2/2: x * log2(e) is rounded before n is taken


def fit(degree: int, points: int = 4001, rounds: int = 200) -> tuple[np.ndarray, float]:
    """The coefficients c2 .. c(degree+1), and their error rounded to float32 (ulps)."""
    mp.mp.dps = 40
    x = np.cos(np.linspace(0, np.pi, points)) * R
    exact = [mp.exp(mp.mpf(float(v))) for v in x]
    ex = np.array([float(e) for e in exact])
    tail = np.array([float(e - 1 - mp.mpf(float(v))) for e, v in zip(exact, x, strict=True)])
    basis = np.vander(x, degree, increasing=True) * (x**2)[:, None]
    weight = np.ones_like(x)
    coeffs = np.zeros(degree)
    for _ in range(rounds):
        scale = np.sqrt(weight) / ex
        coeffs, *_ = np.linalg.lstsq(basis * scale[:, None], tail * scale, rcond=None)
        err = np.abs(basis @ coeffs - tail) / ex
        weight = weight * err
        weight /= weight.sum()
    rounded = coeffs.astype(np.float32).astype(np.float64)
    return rounded, float(np.max(np.abs(basis @ rounded - tail) / ex) / 2.0**-24)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--degree", type=int, default=5, help="number of coefficients")
    args = parser.parse_args()
    coeffs, ulps = fit(args.degree)
    print("COEFFS =", tuple(float(c) for c in coeffs))
    print(f"approximation error: {ulps:.3f} ulp")


if __name__ == "__main__":
    main()
