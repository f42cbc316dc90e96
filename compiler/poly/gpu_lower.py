"""Lowering for the GPU: every loop of a statement's parallel band marked parallel.

Requires: a `RangedDef`.
Ensures:  `lower_gpu(ranged) -> GpuLowered`: the loop-IR Function, one top-level
*phase* per schedule nest (in execution order), the statement each phase comes from,
the run-time checks and the notes of `lower_native`.

The CPU schedule (`poly.cpu_model`) moves an output variable below the reduction and
unrolls for SIMD lanes; a GPU wants the opposite, the literal order: the left-hand-side
variables outermost (one thread per output element), the reduction inside the thread
in a register. So the schedule here is `Options(innermost=None, unroll=1, block=1,
tile=())`, after `poly.gather.scatter_to_gather` (so gradients are gathers). isl marks
only the outermost loop of a parallel band `PARALLEL`; the GPU mapping
(`codegen.cuda_map`) needs the whole band, so every loop of the perfectly nested chain
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

GPU_SCHEDULE = Options(innermost=None, unroll=1, block=1, tile=())


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
    body = phases[0] if len(phases) == 1 else L.Block(phases)
    stmts = gathered.checked.definition.stmts
    scatters = remaining_scatters(gathered)
    notes = tuple(
        f"statement {k} ({print_stmt(stmts[k]).strip()}): data-dependent scatter" for k in scatters
    )
    lowered = dataclasses.replace(lowered, function=dataclasses.replace(f, body=body), notes=notes)
    return GpuLowered(lowered, phases, tuple(n.index for n in sched.nests), scatters)


def _mark_band(stmt: L.Stmt, band: set[str]) -> L.Stmt:
    """`stmt` with every loop of its root chain whose variable is in `band` parallel."""
    if not (isinstance(stmt, L.For) and stmt.var in band):
        return stmt
    body = _mark_band(stmt.body, band - {stmt.var})
    return dataclasses.replace(stmt, body=body, kind=L.LoopKind.PARALLEL)


__all__ = ["GPU_SCHEDULE", "GpuLowered", "lower_gpu"]
