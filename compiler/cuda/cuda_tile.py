"""Thread tiles: a GPU thread computes a tile of outputs of a contraction, not one.

Requires: a parallel band (`cuda_map`'s perfectly nested chain of PARALLEL loops,
whose iterations are independent: each writes its own elements) over a body with a
loop in it (a reduction).
Ensures:  `thread_tile(chain, ty, tx, taken)` is None, or the band's iterations split
into phases that together run each iteration once:

- *tiled*: one thread runs `ty` values of a band variable `y` and `tx` values of the
  innermost one `x`, its body's copies jammed (`loops.jam.jam_copies`: the copies'
  inner loops interleave, each copy accumulates in its own register). The `x` copies
  of a thread are 32 apart (`x = x0 + l + 32 j`, the lane `l` innermost), so a warp's
  loads and stores of one copy stay coalesced;
- *x rest*: the `x` beyond the last whole strip of `32 tx`, still `ty` values of `y`
  a thread (absent when `tx` is 1);
- *y rest*: the `y` beyond the last whole group of `ty`, one thread per iteration.

Interleaving the copies is legal because band iterations are independent. A read
that does not use `y` is the same for the `y` copies (and likewise for `x`): nvcc
loads it once and the tile reuses it from a register. `y` is the band variable that
minimises the loads of one tiled step, `sum over reads of (ty if it reads y) * (tx if
it reads x)`; no variable does better than untiled (`ty * tx` loads per read) means
no tiling.

Worked example, matmul `C(m, n) +=! A(m, k) * B(k, n)`, ty = tx = 4:

    for mo in 0:M / 4 { for no in 0:N / 128 { for l in 0:32 {       (tiled)
      let m = 4 * mo, n = 128 * no + l:
        acc_m0_n0 .. acc_m3_n3 = 0; for k { acc_mi_nj += A[m + i, k] * B[k, n + 32 j] }
        C[m + i, n + 32 j] = acc_mi_nj } } }
    for mo in 0:M / 4 { for n in (N / 128) * 128:N { ... 4 accumulators } }   (x rest)
    for m in (M / 4) * 4:M { for n in 0:N { the original body } }           (y rest)

The tiled phases leave fewer threads (`1 / (ty tx)`), so the host runs them only when
the band has at least `ty * tx * min_threads` iterations, and the original
one-thread-per-iteration phase otherwise (`TiledBand.enough`).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from compiler import loops as L
from compiler.loops.ir import var_names, walk
from compiler.loops.jam import jam_copies

I64 = L.DType.INT64
WARP = 32


@dataclass(frozen=True)
class TiledBand:
    """The phases (each a PARALLEL chain) of a tiled band, and when to run them."""

    phases: tuple[tuple[L.Stmt, int], ...]  # (tiled, band depth), [x rest], y rest
    enough: L.Expr  # > 0: the band is large enough for the tiles (int64, sizes only)


def thread_tile(
    chain: list[L.For], ty: int, tx: int, min_threads: int, taken: set[str]
) -> TiledBand | None:
    """The tiled phases of the band `chain` (module doc), or None when tiling does not
    apply or does not reduce the loads."""
    body = chain[-1].body
    band = {loop.var for loop in chain}
    if ty * tx <= 1 or not any(isinstance(n, L.For) for n in walk(body)):
        return None
    if any(loop.step != 1 or _uses(band, loop.lo, loop.hi) for loop in chain):
        return None
    yi = _pick_y(chain, body, ty, tx)
    if yi is None:
        return None
    y, x = chain[yi], chain[-1]
    outer, middle = chain[:yi], chain[yi + 1 : -1]
    yo, xo, lane = (fresh(n, taken) for n in (f"{y.var}_t", f"{x.var}_t", f"{x.var}_l"))
    ey, ex = extent(y), extent(x)
    y_tiles = L.FloorDiv(ey, _c(ty))
    jam_y = jam_copies(body, y.var, list(range(ty)))

    def at_y(stmt: L.Stmt) -> L.Stmt:  # the tile's first y
        return L.Let(y.var, _add(y.lo, scaled(L.VarRef(yo), ty)), stmt)

    depth = len(chain)
    phases: list[tuple[L.Stmt, int]] = []
    x_from = x.lo
    if tx > 1:
        strip = WARP * tx
        x_strips = L.FloorDiv(ex, _c(strip))
        x_from = _add(x.lo, scaled(x_strips, strip))
        x_at = _add(x.lo, L.Bin(L.BinOp.ADD, scaled(L.VarRef(xo), strip), L.VarRef(lane)))
        tile = jam_copies(jam_y, x.var, [WARP * j for j in range(tx)])
        inner = at_y(L.Let(x.var, x_at, tile))
        loops = [*outer, _loop(y, yo, y_tiles), *middle, _loop(x, xo, x_strips)]
        phases.append((_nest(loops, _loop(x, lane, _c(WARP), inner)), depth + 1))
    x_rest = dataclasses.replace(x, lo=x_from, body=at_y(jam_y))
    phases.append((_nest([*outer, _loop(y, yo, y_tiles), *middle], x_rest), depth))
    y_from = _add(y.lo, scaled(y_tiles, ty))
    y_rest = dataclasses.replace(y, lo=y_from, body=_nest(middle, x))
    phases.append((_nest(outer, y_rest), depth))
    enough = L.Bin(L.BinOp.SUB, iterations(chain), _c(ty * tx * min_threads - 1))
    return TiledBand(tuple(phases), enough)


def _pick_y(chain: list[L.For], body: L.Stmt, ty: int, tx: int) -> int | None:
    """The index of the band loop to tile by `ty` (module doc), or None."""
    reads = [var_names(*ld.index) for ld in walk(body) if isinstance(ld, L.Load)]
    x = chain[-1].var
    best, found = len(reads) * ty * tx, None
    for i in reversed(range(len(chain) - 1)):
        y = chain[i].var
        cost = sum((ty if y in r else 1) * (tx if x in r else 1) for r in reads)
        if cost < best:
            best, found = cost, i
    return found


def _nest(loops: list[L.For], body: L.Stmt) -> L.Stmt:
    for loop in reversed(loops):
        body = dataclasses.replace(loop, body=body)
    return body


def _loop(like: L.For, var: str, hi: L.Expr, body: L.Stmt | None = None) -> L.For:
    return dataclasses.replace(like, var=var, lo=_c(0), hi=hi, body=body or like.body)


def iterations(chain: list[L.For]) -> L.Expr:
    """The product of the extents of `chain`'s loops (bounds independent of each other)."""
    total: L.Expr = _c(1)
    for loop in chain:
        total = L.Bin(L.BinOp.MUL, total, extent(loop))
    return total


def extent(loop: L.For) -> L.Expr:
    """max(0, ceil((hi - lo) / step)) as loop IR."""
    span: L.Expr = L.Bin(L.BinOp.SUB, loop.hi, loop.lo)
    if isinstance(loop.lo, L.Const) and loop.lo.value == 0:
        span = loop.hi
    if loop.step != 1:
        span = L.FloorDiv(L.Bin(L.BinOp.ADD, span, _c(loop.step - 1)), _c(loop.step))
    return L.Max(_c(0), span)


def _add(a: L.Expr, b: L.Expr) -> L.Expr:
    return b if isinstance(a, L.Const) and a.value == 0 else L.Bin(L.BinOp.ADD, a, b)


def scaled(a: L.Expr, k: int) -> L.Expr:
    """`a * k` (int64), `a` itself for k = 1."""
    return a if k == 1 else L.Bin(L.BinOp.MUL, a, _c(k))


def _c(value: int) -> L.Const:
    return L.Const(value, I64)


def _uses(names: set[str], *exprs: L.Expr) -> bool:
    return bool(var_names(*exprs) & names)


def fresh(base: str, taken: set[str]) -> str:
    """`base`, or `base` with `_`s appended, not in `taken` (added to it)."""
    name = base
    while name in taken:
        name += "_"
    taken.add(name)
    return name


__all__ = ["TiledBand", "extent", "fresh", "iterations", "scaled", "thread_tile"]
