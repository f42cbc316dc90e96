"""Lowering for the GPU: every loop of a statement's parallel band marked parallel.

Requires: a `RangedDef`.
Ensures:  `lower_gpu(ranged) -> GpuLowered`: the loop-IR Function, one top-level
*phase* per schedule nest (in execution order), the statement each phase comes from,
the run-time checks and the notes of `lower_native`. A nest that only fills a buffer
with a constant is dropped when the next one overwrites every element it fills without
reading the buffer (`_overwritten`: a gradient's `W1_grad = 0` before its gather), so
no kernel is launched for it.

The CPU schedule (`cpu.cpu_model`) moves an output variable below the reduction and
unrolls for SIMD lanes; a GPU wants the opposite, the literal order: the left-hand-side
variables outermost (one thread per output element), the reduction inside the thread
in a register. So the schedule here is `Options(innermost=None, unroll=1, block=1,
tile=())`, after `poly.gather.scatter_to_gather` (so gradients are gathers). isl marks
only the outermost loop of a parallel band `PARALLEL`; the GPU mapping
(`cuda.cuda_map`) needs the whole band, so every loop of the perfectly nested chain
at a parallel phase's root whose variable belongs to the band is marked too.

Worked example, conv2d's `O(n, m, h, w) +=! I(n, c, h + kh, w + kw) * W1(m, c, kh, kw)`:

    parallel for n { parallel for m { parallel for h { parallel for w {
        local acc = 0 { for c { for kh { for kw { acc = acc + ... } } }  O[n, m, h, w] = acc }
    } } } }
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from compiler import loops as L
from compiler.frontend.checked import RangedDef
from compiler.frontend.printer import print_stmt
from compiler.options import Options
from compiler.poly.astgen import Lowered, lower_schedule
from compiler.poly.gather import remaining_scatters, scatter_to_gather
from compiler.poly.schedule import schedule

# one nest per statement (no companions, poly.companions): each becomes its own phase
GPU_SCHEDULE = Options(innermost=None, unroll=1, block=1, tile=(), fuse=False)


@dataclass(frozen=True)
class GpuLowered:
    lowered: Lowered  # function, run-time checks, notes
    phases: tuple[L.Stmt, ...]  # the Function's top-level nests, in execution order
    statements: tuple[int, ...]  # the def's statement each phase comes from
    scatters: tuple[int, ...]  # the statements that remain data-dependent scatters


def lower_gpu(ranged: RangedDef) -> GpuLowered:
    """The GPU lowering of `ranged` (see the module doc)."""
    gathered = scatter_to_gather(ranged)
    sched = schedule(gathered, GPU_SCHEDULE)
    lowered = lower_schedule(sched)
    f = lowered.function
    raw = (f.body,) if len(sched.nests) == 1 else f.body.stmts  # type: ignore[attr-defined]
    phases = tuple(
        _mark_band(p, set(n.outer)) if n.parallel else p
        for p, n in zip(raw, sched.nests, strict=True)
    )
    kept = [k for k in range(len(phases)) if not _overwritten(phases, k)]
    phases = tuple(phases[k] for k in kept)
    body = phases[0] if len(phases) == 1 else L.Block(phases)
    stmts = gathered.checked.definition.stmts
    scatters = remaining_scatters(gathered)
    notes = tuple(
        f"statement {k} ({print_stmt(stmts[k]).strip()}): data-dependent scatter" for k in scatters
    )
    lowered = dataclasses.replace(lowered, function=dataclasses.replace(f, body=body), notes=notes)
    statements = tuple(sched.nests[k].index for k in kept)
    return GpuLowered(lowered, phases, statements, scatters)


def _overwritten(phases: tuple[L.Stmt, ...], k: int) -> bool:
    """True when phase `k` only stores a constant into `X[v1, .., vn]` over a band of
    loops `v1 .. vn` and the next phase, over a band with the same bounds, stores into
    `X[u1, .., un]` once per iteration without reading X: every element it fills is
    overwritten before anything reads it (a gradient's `X_grad = 0` before its gather)."""
    if k + 1 >= len(phases):
        return False
    fill, band = _band(phases[k])
    if not isinstance(fill, L.Store) or not isinstance(fill.value, L.Const):
        return False
    body, next_band = _band(phases[k + 1])
    if [(a.lo, a.hi, a.step) for a in band] != [(b.lo, b.hi, b.step) for b in next_band]:
        return False
    names = {loop.var for loop in band} | {loop.var for loop in next_band}
    if any(L.var_names(loop.lo, loop.hi) & names for loop in band):
        return False
    if fill.index != tuple(L.VarRef(loop.var) for loop in band):
        return False
    target = fill.buffer.name
    if any(isinstance(n, L.Load) and n.buffer.name == target for n in L.walk(body)):
        return False
    stores = _top_stores(body)
    writes = [n for n in L.walk(body) if isinstance(n, L.Store) and n.buffer.name == target]
    return (
        len(writes) == 1
        and writes[0] in stores
        and writes[0].index == tuple(L.VarRef(loop.var) for loop in next_band)
    )


def _band(stmt: L.Stmt) -> tuple[L.Stmt, list[L.For]]:
    """The body below `stmt`'s chain of parallel loops, and the chain."""
    band: list[L.For] = []
    while isinstance(stmt, L.For) and stmt.kind is L.LoopKind.PARALLEL:
        band.append(stmt)
        stmt = stmt.body
    return stmt, band


def _top_stores(stmt: L.Stmt) -> list[L.Store]:
    """The stores `stmt` runs exactly once: not under a loop or a condition."""
    if isinstance(stmt, L.Store):
        return [stmt]
    if isinstance(stmt, L.Block):
        return [s for c in stmt.stmts for s in _top_stores(c)]
    if isinstance(stmt, (L.Local, L.Let)):
        return _top_stores(stmt.body)
    return []


def _mark_band(stmt: L.Stmt, band: set[str]) -> L.Stmt:
    """`stmt` with every loop of its root chain whose variable is in `band` parallel.

    A root `If` (its condition reads only sizes: no loop is open above it) or `Block`
    is looked through: each branch or member gets its own chain marked, as the GPU
    mapping maps each one as a kernel of its own (`cuda.cuda_map`: the host tests a
    sizes-only condition, e.g. the `2 H + 2 W + 4 >= 3 KH + 3 KW` of a padded gather's
    size split, and launches the branch that holds)."""
    if isinstance(stmt, L.If) and not L.var_names(stmt.cond) & band:
        otherwise = None if stmt.otherwise is None else _mark_band(stmt.otherwise, band)
        return dataclasses.replace(stmt, then=_mark_band(stmt.then, band), otherwise=otherwise)
    if isinstance(stmt, L.Block):
        return dataclasses.replace(stmt, stmts=tuple(_mark_band(s, band) for s in stmt.stmts))
    if not (isinstance(stmt, L.For) and stmt.var in band):
        return stmt
    body = _mark_band(stmt.body, band - {stmt.var})
    return dataclasses.replace(stmt, body=body, kind=L.LoopKind.PARALLEL)


__all__ = ["GPU_SCHEDULE", "GpuLowered", "lower_gpu"]
