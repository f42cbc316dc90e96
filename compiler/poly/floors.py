"""Bound expressions as a person writes them: terms moved across a floor division.

Requires: `Lin`, a linear combination of sizes and floor divisions (`Floor`) with
integer numerators, as `isl_bridge` reads it off an isl affine expression.
Ensures:  `readable(lin)` is a `Lin` of the same value for every integer value of the
sizes, written with as few terms as the identities below reach (then as few minus
signs, then as few constants).

isl keeps a floor division's coefficients in `0:d` (`floor((H + KH) / 2) - KH + 1` for
the output height of a stride-2 convolution); a person writes `(H - KH) / 2 + 1`. Three
identities hold for every integer `n`, `x`, `q` and `d >= 1` (TC's `/` rounds towards
negative infinity, as isl's `floor` does):

    c * floor(n / d) + b * x  ==  c * floor((n + d * q * x) / d) + (b - c * q) * x
    c * floor(n / d) + k      ==  c * floor((n + d * q) / d) + (k - c * q)
    c * floor(n / d)          ==  -c * floor((d - 1 - n) / d)

`readable` tries, for each floor division in turn, both signs of its coefficient,
moving each outer size term inside where that cancels or shrinks it without growing
the size's coefficient inside, and the constant inside, outside or left; it keeps the
cheapest form (fewest terms, then minus signs, then minus signs outside the floors,
then constants). Worked example: `floor((H + KH) / 2) - KH + 1` moves `-KH` inside
(`q = -1`: `KH`'s coefficient `1 -> -1`) and reads `(H - KH) / 2 + 1`;
`y - floor((y + KH + 1) / 2) + 1` flips to `y + floor((-y - KH) / 2) + 1`, moves `y`
inside and reads `(y - KH) / 2 + 1`.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
from fractions import Fraction


@dataclasses.dataclass(frozen=True)
class Floor:
    """`coeff * floor(num / den)`, `num` with integer coefficients, `den >= 1`."""

    coeff: Fraction
    num: Lin
    den: int


@dataclasses.dataclass(frozen=True)
class Lin:
    """`sum(c * name) + sum(floors) + const`; `named` in the order it is written."""

    named: tuple[tuple[str, Fraction], ...]
    floors: tuple[Floor, ...]
    const: Fraction

    def value(self, env: dict[str, int]) -> Fraction:
        """The value at integer sizes `env` (what tests compare)."""
        total = self.const + sum((c * env[n] for n, c in self.named), Fraction(0))
        for f in self.floors:
            total += f.coeff * (f.num.value(env) // f.den)
        return total


def readable(lin: Lin) -> Lin:
    """`lin` rewritten by the module doc's identities into its cheapest form."""
    for k in range(len(lin.floors)):
        lin = _best(lin, k)
    return lin


def _cost(lin: Lin) -> tuple[int, int, int, int, Fraction]:
    """Terms, minus signs, minus signs outside every floor, constants, magnitudes."""
    outside = sum(c < 0 for _, c in lin.named) + sum(f.coeff < 0 for f in lin.floors)
    terms, negatives, consts, size = _counts(lin)
    return terms, negatives, outside, consts, size


def _counts(lin: Lin) -> tuple[int, int, int, Fraction]:
    terms = negatives = consts = 0
    size = abs(lin.const)
    for _, c in lin.named:
        terms += c != 0
        negatives += c < 0
        size += abs(c)
    consts += lin.const != 0
    negatives += lin.const < 0
    for f in lin.floors:
        t, n, k, s = _counts(f.num)
        terms, negatives, consts, size = (
            terms + t,
            negatives + n + (f.coeff < 0),
            consts + k,
            size + s,
        )
    return terms, negatives, consts, size


def _best(lin: Lin, k: int) -> Lin:
    f = lin.floors[k]
    if f.coeff.denominator != 1 or f.num.floors or f.coeff == 0:
        return lin
    best, cost = lin, _cost(lin)
    for start in (lin, _flipped(lin, k)):
        for cand in _moves(start, k):
            c = _cost(cand)
            if c < cost:
                best, cost = cand, c
    return best


def _flipped(lin: Lin, k: int) -> Lin:
    """`c * floor(n / d)` as `-c * floor((d - 1 - n) / d)`."""
    f = lin.floors[k]
    num = Lin(tuple((n, -c) for n, c in f.num.named), (), Fraction(f.den - 1) - f.num.const)
    return _replace_floor(lin, k, Floor(-f.coeff, num, f.den))


def _moves(lin: Lin, k: int) -> list[Lin]:
    """`lin` with some outer size terms and the constant moved across floor `k`."""
    f = lin.floors[k]
    c, d = int(f.coeff), f.den
    inner = dict(f.num.named)
    options: list[list[tuple[str, int]]] = []
    for name, b in lin.named:
        opts = [(name, 0)]
        a = inner.get(name, Fraction(0))
        if b != 0 and a != 0:
            ratio = b / c  # q = ratio cancels the outer term; floor or ceil shrinks it
            for q in sorted({math.floor(ratio), math.ceil(ratio)} - {0}):
                if abs(a + d * q) <= abs(a):
                    opts.append((name, q))
        options.append(opts)
    consts = {0}
    if lin.const != 0 and (lin.const / c).denominator == 1:
        consts.add(int(lin.const / c))  # the outer constant inside
    n0 = int(f.num.const)
    consts.add(-(n0 // d))  # the inner constant in 0:d
    consts.add(-int(Fraction(n0, d)))  # ... with its sign kept, towards 0
    out = []
    for choice in itertools.product(*options):
        for q0 in sorted(consts):
            moved = dict(choice)
            named = tuple((n, b - c * moved[n]) for n, b in lin.named)
            new_inner = dict(inner)
            for n, q in moved.items():
                if q:
                    new_inner[n] = new_inner.get(n, Fraction(0)) + d * q
            num = Lin(
                tuple((n, a) for n, a in new_inner.items() if a != 0),
                (),
                f.num.const + d * q0,
            )
            out.append(
                _replace_floor(
                    Lin(named, lin.floors, lin.const - c * q0), k, Floor(f.coeff, num, d)
                )
            )
    return out


def _replace_floor(lin: Lin, k: int, f: Floor) -> Lin:
    named = tuple((n, c) for n, c in lin.named if c != 0)
    return Lin(named, (*lin.floors[:k], f, *lin.floors[k + 1 :]), lin.const)


__all__ = ["Floor", "Lin", "readable"]
