"""The CPU's loop order of a partial scatter (`poly.partial`): an affine scatter run in
parallel over its plain variables.

Requires: a ranged statement's `StmtFacts` with plain variables (`poly.partial.plain_vars`)
and the def's size parameters.
Ensures:  `partial_order(facts, params) -> LoopOrder` (`cpu.model` answers it for such a
statement).

Loop order of a partial scatter (`partial_order`, a `LoopOrder` in memory form): the plain variables outermost, in left-hand-side order (the parallel band),
then every other variable, sequential: the reduction variables first, then the
left-hand-side ones by the first subscript that uses them, and last the *inner*
variable: the variable of the last subscript that is not short (a window), then with
the largest coefficient (`w` of `2 * w + kw`: its reads are unit stride; `w`, not
`kw`, of a dilation's `w + 2 * kw`). Jams (`loops.jam`): the last reduction variable,
when it is not short, by `cpu_model.BLOCK` (consecutive contributions to one element
share its load and store), and, when the inner variable's coefficient is a stride
2..`MAX_STRIDE`, the last unit-coefficient variable of that subscript (the window
`kw`) by the stride, so one iteration stores a full group of consecutive elements
(`2 * w + kw`, `2 * w + kw + 1`), which LLVM vectorises as interleaved accesses.
Jamming `kw` by the stride never reorders the contributions to one element (two
instances of a jam group differ in `kw` by less than the stride, so they write
different elements); jamming the reduction variable does. Each element receives its
contributions in an order fixed by the loops (sequential per element), so the
result is deterministic; it may differ from the scatter's literal order in the last
bits (`float` addition is not associative), like any gather's. Measured (one
thread, `tools/bench`'s stride-2 case, `I_grad` alone): 6.0 ms unjammed, 3.5 with
`kw` jammed, 1.45 with both jams; the exact gather took 5.8.

Worked example: `I_grad(n, c, 2 * h + kh, 2 * w + kw) +=! O_grad(n, m, h, w) *
W1(m, c, kh, kw)`: plain `(n, c)`; order `n, c | m, h, kh, kw, w`, parallel over `n`,
jams `m` by 4 and `kw` by 2.
"""

from __future__ import annotations

from compiler.cpu.cpu_model import BLOCK, MAX_STRIDE, mentions, short
from compiler.frontend.ast import Expr, Let
from compiler.frontend.checked import StmtFacts
from compiler.poly.isl_bridge import StmtSpace
from compiler.poly.order import LoopOrder
from compiler.poly.partial import coefficients, plain_vars


def partial_order(facts: StmtFacts, params: tuple[str, ...]) -> LoopOrder:
    """The loop order of a partial scatter (module doc): the plain variables as the
    (parallel) outer band, every other variable in the inner band, and the jams."""
    plain = plain_vars(facts)
    rest = [v for v in facts.all_vars if v not in plain]
    space = StmtSpace(facts.all_vars, params)
    coeffs = _last_coefficients(facts, space, rest)
    inner = _inner_var(facts, coeffs)
    lets = lets_of(facts)
    args = facts.stmt.lhs.args

    def depth(v: str) -> int:
        """The first subscript that uses `v` (reduction variables: before any)."""
        for k, a in enumerate(args):
            if mentions(a, v, lets):
                return k + 1
        return 0

    ordered = sorted((v for v in rest if v != inner), key=lambda v: (depth(v), rest.index(v)))
    if inner is not None:
        ordered.append(inner)
    jams: list[tuple[str, int]] = []
    reductions = [v for v in facts.reduction_vars if v in ordered]
    if reductions and not short(facts, reductions[-1]):
        jams.append((reductions[-1], BLOCK))
    stride = abs(coeffs.get(inner, 0)) if inner is not None else 0
    if 2 <= stride <= MAX_STRIDE:
        windows = [v for v in ordered if v != inner and abs(coeffs.get(v, 0)) == 1]
        if windows:
            jams.append((windows[-1], stride))
    return LoopOrder(plain, tuple(ordered), register=False, jams=tuple(jams))


def _last_coefficients(facts: StmtFacts, space: StmtSpace, rest: list[str]) -> dict[str, int]:
    """The coefficients of `rest` in the last subscript ({} if it is not affine)."""
    row = coefficients(facts.stmt.lhs.args[-1], space, lets_of(facts))
    if row is None:
        return {}
    return {v: row[space.pos(v)] for v in rest if row[space.pos(v)]}


def _inner_var(facts: StmtFacts, coeffs: dict[str, int]) -> str | None:
    """The variable of the last subscript that is not short (`cpu_model.short`: a
    window), then with the largest coefficient (ties: the later one)."""
    best, best_key = None, (False, 0)
    for v, c in coeffs.items():
        key = (not short(facts, v), abs(c))
        if key >= best_key:
            best, best_key = v, key
    return best


def lets_of(facts: StmtFacts) -> dict[str, Expr]:
    return {c.name: c.value for c in facts.stmt.where if isinstance(c, Let)}


__all__ = ["partial_order"]
