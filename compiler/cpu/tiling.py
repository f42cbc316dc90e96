"""Cache tiling of a memory-form reduction nest: which loops to tile, and the isl band.

Requires: a statement's `LoopOrder` from `cpu.cpu_model` (its loops, outermost first:
`outer + inner + innermost`), its `StmtFacts` and `Options`; for `tile_band`, the
statement's isl domain.
Ensures:  `choose_tiles(facts, order, options) -> tuple[int, ...]`: one tile size per
loop of `order` (1: untiled), or `()` when nothing is tiled; `tile_band(domain,
loops, tiles, taken) -> TileBand`: the band of tile loops that goes above the point
loops (isl generates exact `min` bounds for the partial tiles at the edges).

Tiling only applies to a statement in memory form (an innermost loop below the
reduction loops, accumulating into the output in memory): there, distinct values of
the output variables write distinct elements, and each element receives its
contributions in the order of the reduction loops. The tile loops run in the order of
the loops they tile; of the reduction loops only the first may be tiled, so that each
element's order `(k_t, k, later reduction loops)` is still the reduction order and the
results equal the untiled ones exactly. The first output loop (the parallel one that a
runtime splits across threads) always stays outermost: when it is not tiled itself
but another loop is, it moves whole into the tile band.

The default model (`Options.tile=None`) tiles a contraction with one reduction loop
(matmul, batched matmul) whose innermost loop and reduction loop are both long (not
`cpu_model.short`): the reduction loop by `REDUCTION` and the last output loop (the
register-blocked one, just above the reduction) by `OUTER`, so that a `REDUCTION`-row
panel of the operand indexed by the reduction and innermost variables (matmul's B)
stays in L2 while `OUTER` rows of the output stream through it. The innermost loop is
not tiled: measured on 512^3 and 1024^3 float32 matmul, a tile of it cost more (spilled
registers in the inner loop) than it saved; it pays from about 2048^3 on. When the
nest's register tiles are packed (`cpu.pack`), the tiles are
`cpu_registers.packed_cache_tile`'s rows and steps (128 rows and 256 steps with
AVX-512: a 32-lane panel of 32 KiB; 48 and 384 with AVX2: a 16-lane panel of 24 KiB)
and the rows a multiple of the register tile's (a row tile that is not ran its last
rows one at a time: AVX2's 6-row tiles in 128 rows, 1 thread, matmul 512^3 against
NumPy, 1.20x with 128 rows, 1.00x with 126). The panel stays in L1 beside the rows of
A it meets. The threads share each panel (`cpu.pack`
moves `k_t` outside the parallel row tiles), so the row tile no longer pays for a copy
(it did: measured, 2 threads, matmul 512^3 against NumPy, each thread copying its own
panel: 1.36x with 64 rows a tile, 1.16x with 128); shared, 64 and 128 rows ran within
noise of each other (matmul 512^3, 1 thread, CPU time: 2.19 and 2.25 ms).
Convolutions (several reduction loops) are not tiled.

A one-loop dot tile (`cpu_model._dot_tile`: a register sum per output, `Y(b, o) +=!
X(b, i) * W(o, i)`, matmul's `A_grad`) has its inner jammed output loop tiled by
`DOT_COLUMNS` (256) and the tile loop run *outside* the other, which stays the
parallel loop (`tile_band(tiles_first=True)`): `for o_t: parallel for b: for o in
block: sum over i`. The block's rows of `W` stay in L2 while every row of `X` meets
them; untiled, each block of 4 rows of `X` streamed all of `W` (at 1024^3, 4 MiB from
L3 for every 4 rows). The reduction loop is not tiled: each output's sum stays in its
register. Measured, 2 threads, same process, medians of blocks, float32 `A B^T`
(M x K x N) untiled / blocks of 128 / blocks of 256, NumPy: 1024^3 23.5 / 14.8 / 15.8
ms, 10.9 (another run, untiled / 256: 24.0 / 19.6); 512^3 within noise (2.12 / 2.20,
`B` fits in L2 anyway); but 64x256x1024 0.35 / 0.45 / 0.39 ms (NumPy 0.28): each
block is a parallel region, and small blocks of rows pay for waking the threads, hence
256 (4 regions for 1024 columns). With its loops swapped (`cpu.alternatives.SwapCheck`) the same
positions are tiled: the blocks are of the other loop.

A column reduction (one output variable `j`, unit stride in the reads, reduced over
one loop that is not: `b_grad(j) +=! C_grad(i) * exp(A(i, j))`, a bias or layer-norm
weight gradient) has no output loop to stay outside in memory form. Its innermost loop
is strip-mined by `COLUMNS` and the strips are the parallel loop; the reduction loop
is cut into blocks of `ROWS`: `[floor(j/1024), floor(i/1024)]`, then `i`, then `j` in
the strip, so every read is a contiguous row segment (measured at 4096^2, 1 thread,
process CPU time: 31 ms against 137 ms in the literal order, whose reads are `N`
floats apart). Wider strips read longer segments, which the hardware prefetchers
follow better: `C_grad(i) * exp(A(i, j))` at 4096^2, 1 thread, process CPU time,
strips of 256 / 512 / 1024 / 2048 columns: 22 / 18 / 13.8 / 10.9 ms (`C_grad(i) *
A(i, j)`: 14.4 / 10.3 / 7.9 / 6.6 ms); 2 threads: 17.5 ms at 256, 11.5 at 1024.
1024 keeps 4 parallel strips at `N = 4096` and the strip buffer (4 KiB in float32)
in L1; a def with `N <= 1024` columns has one strip, run by one thread (at 8192 x
1024, 2 threads, that one strip took 4.6 ms against 10.2 ms for four strips of
256). Each block's sums go to a local strip buffer that is added to the
output after the block (`cpu.colsum`), so each element is `M / ROWS` block sums of
`ROWS` terms: 2^20 rows of 0.1 in float32 come out with relative error 1.4e-5, like
the literal order's blocked, compensated register sum (1.6e-5; one running sum per
column gave 1e-2). `Options.tile` gives both sizes (its first and last entries; a
first entry of 1: strips without blocks), `Options(innermost=None)` or a last entry
of 1 keeps the literal order, as does a column reduction over several loops (a block
of the first would hold too many rows).

Worked example, matmul `C(m, n) +=! A(m, k) * B(k, n)` without packing (order
`m, k, n`, tiles `(32, 128, 1)`): the tile band is `S0[m, n, k] -> [floor(m/32),
floor(k/128)]` with loops `m_t, k_t`, then the point loops `m` (from `32*m_t` to `min(M, 32*m_t + 32)`),
`k` and `n`; `m_t` is the parallel loop. Batched matmul (order `b, m, k, n`, tiles
`(1, 32, 128, 1)`): the band is `[b, floor(m/32), floor(k/128)]`, `b` parallel.
"""

from __future__ import annotations

import islpy as isl

from compiler.cpu import cpu_registers
from compiler.cpu.cpu_model import short
from compiler.frontend.checked import StmtFacts
from compiler.options import Options
from compiler.poly.order import LoopOrder
from compiler.poly.schedule import TileBand

OUTER = 32  # rows of the last output loop (the register-blocked one) per tile
COLUMNS = 1024  # a column reduction's strip of the innermost loop (the parallel tiles)
ROWS = 1024  # a column reduction's block of its first reduction loop (cpu.colsum)
REDUCTION = 128  # the reduction loop's tile
DOT_COLUMNS = 256  # a dot tile's block of its inner jammed output loop (the rows it streams)


def choose_tiles(facts: StmtFacts, order: LoopOrder, options: Options) -> tuple[int, ...]:
    """One tile size per loop of `order` (module doc); `()` when nothing is tiled."""
    if order.register and order.swap is not None and options.innermost is not None:
        return _dot_tiles(order, options)
    if not order.innermost or order.register:
        return ()
    loops = order.outer + order.inner + order.innermost
    if not order.outer:  # a column reduction: strips of the innermost, blocks of rows
        return _column_tiles(loops, options)
    if options.tile is not None:
        sizes = _given(options.tile, len(loops))
    else:
        sizes = _model(facts, order, options)
    first_reduction = len(order.outer)
    for k in range(first_reduction + 1, first_reduction + len(order.inner)):
        sizes[k] = 1  # a later reduction loop's tile would reorder each element's sum
    return tuple(sizes) if any(s > 1 for s in sizes) else ()


def _given(tile: tuple[int, ...], count: int) -> list[int]:
    """`Options.tile` as one size per loop of `count`: missing entries untiled (1)."""
    return [*tile[:count], *[1] * max(0, count - len(tile))]


def _dot_tiles(order: LoopOrder, options: Options) -> tuple[int, ...]:
    """A one-loop dot tile's cache tiles: `DOT_COLUMNS` for the inner of its two jammed
    output loops (`Options.tile` gives the output loops' sizes; the reduction loop is
    never tiled: each output's sum stays in its register). Module doc."""
    loops = order.outer + order.inner
    if options.tile is not None:
        sizes = _given(options.tile, len(loops))
    else:
        inner = max(order.swap or (), key=order.outer.index, default=None)
        sizes = [DOT_COLUMNS if v == inner else 1 for v in loops]
    sizes[len(order.outer) :] = [1] * len(order.inner)
    return tuple(sizes) if any(s > 1 for s in sizes) else ()


def _column_tiles(loops: tuple[str, ...], options: Options) -> tuple[int, ...]:
    """A column reduction's tiles: `ROWS` for the first reduction loop, `COLUMNS` for
    the innermost; `Options.tile` gives them (its first and last entries), and
    `Options(innermost=None)` (the literal order) has none."""
    if options.innermost is None or len(loops) != 2:
        # more than one reduction loop: a block of the first holds many rows, and the
        # strips' sums would lose accuracy; the literal order's register sum keeps it
        return ()
    rows, columns = ROWS, COLUMNS
    if options.tile is not None:
        given = _given(options.tile, len(loops))
        rows, columns = given[0], given[-1]
    if columns <= 1:
        return ()  # without strips the innermost loop would be the only one, serial
    return (rows, *[1] * (len(loops) - 2), columns)


def _model(facts: StmtFacts, order: LoopOrder, options: Options) -> list[int]:
    loops = order.outer + order.inner + order.innermost
    sizes = [1] * len(loops)
    if len(order.inner) != 1 or short(facts, order.innermost[-1]) or short(facts, order.inner[0]):
        return sizes
    rows, steps = OUTER, REDUCTION
    if order.lanes > 1:  # packed register tiles (cpu.pack)
        rows, steps = cpu_registers.packed_cache_tile(options)
        block = dict(order.jams).get(order.outer[-1], 1)
        rows = max(block, rows // block * block)  # whole register tiles (module doc)
    sizes[len(order.outer) - 1] = rows
    sizes[len(order.outer)] = steps
    return sizes


def tile_band(
    domain: isl.Set,
    loops: tuple[str, ...],
    tiles: tuple[int, ...],
    taken: set[str],
    hoist: bool = True,
    tiles_first: bool = False,
) -> TileBand:
    """The tile band of `domain` for `tiles` (one per loop of `loops`, module doc).
    `hoist=False` (no output loop above the reduction: a column reduction) keeps an
    untiled first loop out of the band, so the band starts at the innermost's tiles.
    `tiles_first` (a dot tile): an untiled first loop moves into the band after the
    tile loops, and stays the parallel one."""
    space = domain.get_space()
    identity = isl.MultiAff.identity(space.map_from_set())
    affs: list[isl.Aff] = []
    names: list[str] = []
    hoisted = loops[0] if hoist and tiles[0] <= 1 else None
    for k, (var, size) in enumerate(zip(loops, tiles, strict=True)):
        if size <= 1 and (k > 0 or not hoist):
            continue
        aff = identity.get_at(domain.find_dim_by_name(isl.dim_type.set, var))
        if size > 1:
            aff = aff.scale_down_val(isl.Val.int_from_si(aff.get_ctx(), size)).floor()
            names.append(_fresh(f"{var}_t", taken))
        else:
            names.append(var)
        taken.add(names[-1])
        affs.append(aff)
    if not hoist and len(affs) > 1:  # a column reduction: its strips are the parallel loop
        affs, names = [affs[-1], *affs[:-1]], [names[-1], *names[:-1]]
    if tiles_first and hoisted is not None and len(affs) > 1:
        affs, names = [*affs[1:], affs[0]], [*names[1:], names[0]]
    target = isl.Space.set_alloc(space.get_ctx(), 0, len(affs)).align_params(space)
    aff_list = isl.AffList.alloc(space.get_ctx(), len(affs))
    for a in affs:
        aff_list = aff_list.add(a)
    band = isl.MultiAff.from_aff_list(space.map_from_domain_and_range(target), aff_list)
    band_map = isl.Map.from_multi_aff(band).intersect_domain(domain)
    schedule = isl.MultiUnionPwAff.from_union_map(isl.UnionMap.from_map(band_map))
    parallel = hoisted if tiles_first and hoisted is not None else names[0]
    return TileBand(schedule, tuple(names), hoisted, parallel)


def _fresh(base: str, taken: set[str]) -> str:
    name = base
    while name in taken:
        name += "_"
    return name


__all__ = ["COLUMNS", "OUTER", "REDUCTION", "ROWS", "choose_tiles", "tile_band"]
