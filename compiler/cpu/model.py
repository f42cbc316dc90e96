"""The CPU target's schedule model: the decisions `poly.schedule` and `poly.astgen` ask.

Requires: what `poly.schedule.Model` gives each method.
Ensures:  `CpuModel(pad)` is a `poly.schedule.Model`:

- `rewrite` (with `pad`, the target's own schedule: `CPU`): the strided scatters
  split into parity classes (`cpu.parity`, `Options.gather="auto"`), clamped gathers
  reading zero-padded copies (`cpu.pad`), a scatter's contraction summed into scratch
  first (`cpu.factor`, `Options.factor`), loops over whole dimensions merged
  (`cpu.merge`, `Options.merge`); without `pad` the def as given (`UNPADDED`: the
  loop order and passes alone, as tests of one decision want them);
- `order` and `tiles`: the cost model (`cpu_model.choose_order`, `cpu.tiling`), and
  a partial scatter's order (`cpu.scatter_order`);
- `alternatives`: the run-time versions (`cpu.alternatives`);
- `tile_band`, `loop_passes` and `finish`: the tile band (`cpu.tiling.tile_band`),
  then on one nest's lowered loops transposed reads (`cpu.transpose`), the jams
  (`loops.jam`), register tiles (`cpu.regtile`), packed panels (`cpu.pack`) and
  blocked column sums (`cpu.colsum`); on the function, the merged loops' views
  undone (`cpu.merge.unmerge`).

`schedule`, `lower` and `lower_kernel` are `poly`'s with this model (`CPU` unless
`pad=False`).
"""

from __future__ import annotations

from dataclasses import dataclass

from compiler import loops as L
from compiler.cpu.alternatives import alternatives
from compiler.cpu.colsum import block_column_sums
from compiler.cpu.cpu_model import choose_order
from compiler.cpu.factor import factor_scatters
from compiler.cpu.merge import merge_loops, unmerge
from compiler.cpu.pack import pack_tiles
from compiler.cpu.pad import pad_gathers
from compiler.cpu.parity import split_parities
from compiler.cpu.regtile import register_tile
from compiler.cpu.scatter_order import partial_order
from compiler.cpu.tiling import choose_tiles, tile_band
from compiler.cpu.transpose import transpose_reads
from compiler.frontend.ast import AssignOp, Expr
from compiler.frontend.checked import RangedDef, StmtFacts
from compiler.loops.jam import unroll_and_jam
from compiler.options import Options
from compiler.poly import astgen
from compiler.poly import schedule as poly_schedule
from compiler.poly.astgen import Lowered, identity
from compiler.poly.isl_bridge import param_names
from compiler.poly.order import LoopOrder
from compiler.poly.schedule import Nest, Rewritten, Schedule, TileBand, Views


@dataclass(frozen=True)
class CpuModel:
    """The CPU's decisions (module doc); `pad`: rewrite the def first."""

    pad: bool = True

    def rewrite(self, ranged: RangedDef, options: Options) -> Rewritten:
        if not self.pad:
            return Rewritten(ranged)
        strided: frozenset[int] = frozenset()
        views = Views()
        split = split_parities(ranged) if options.gather == "auto" else None
        padded = pad_gathers(*((ranged,) if split is None else (split.ranged, split.classes)))
        ranged, scratch, origins = padded.ranged, padded.scratch, padded.origins
        if split is not None:  # the pads' origins are statements of the split def
            strided = frozenset(k for k, o in enumerate(origins) if o in split.classes)
            origins = tuple(split.origins[k] for k in origins)
        if options.factor:  # a scatter's contraction into a scratch tensor (cpu.factor)
            factored = factor_scatters(ranged)
            if factored.scratch:
                ranged, scratch = factored.ranged, scratch + factored.scratch
                strided = frozenset(k for k, o in enumerate(factored.origins) if o in strided)
                origins = tuple(origins[o] for o in factored.origins)
        if options.merge:  # merged loops see tensors as views (cpu.merge)
            merged = merge_loops(ranged, scratch)
            ranged, views = merged.ranged, merged.views
        return Rewritten(ranged, scratch, origins, views, strided)

    def order(
        self,
        facts: StmtFacts,
        params: tuple[str, ...],
        options: Options,
        *,
        injective: bool,
        self_reads: bool,
        partial: bool,
    ) -> LoopOrder:
        if partial:
            return partial_order(facts, params)
        return choose_order(facts, params, options, injective=injective, self_reads=self_reads)

    def tiles(self, facts: StmtFacts, order: LoopOrder, options: Options) -> tuple[int, ...]:
        return choose_tiles(facts, order, options)

    def alternatives(
        self,
        main: Nest,
        order: LoopOrder,
        facts: StmtFacts,
        extents: dict[str, tuple[Expr, ...]],
        params: tuple[str, ...],
        options: Options,
    ) -> Nest:
        return alternatives(main, order, facts, extents, params, options)

    def tile_band(self, nest: Nest) -> TileBand | None:
        if not nest.tiles:
            return None
        taken = set(nest.facts.all_vars) | set(nest.facts.lets) | set(nest.dims)
        taken |= set(param_names(nest.domain))
        # a dot tile (a register sum, no innermost band): its column tiles outermost, the
        # rows that stream through each block the parallel loop (cpu.tiling)
        dot = nest.accumulate and not nest.innermost
        return tile_band(
            nest.domain, nest.bands, nest.tiles, taken, hoist=bool(nest.outer), tiles_first=dot
        )

    def loop_passes(
        self,
        body: L.Stmt,
        nest: Nest,
        target: L.Buffer,
        sizes: frozenset[str],
        band: TileBand | None,
    ) -> L.Stmt:
        stmt = nest.facts.stmt
        tiled = nest.lanes > 1 and bool(nest.innermost)
        if tiled:
            zero = target.name if stmt.op is AssignOp.PLUS_INIT else None
            panels = None
            if len(nest.inner) == 1:  # packed (cpu.pack): transposed panels
                panels = sizes | {nest.inner[0]}
            body = transpose_reads(body, nest.innermost[0], zero, panels)
        for var, factor in nest.jams:
            body = unroll_and_jam(body, var, factor)
        if tiled:
            first = nest.inner[0]
            # a cache-tiled reduction visits each element once per reduction tile
            whole = stmt.op.init and not nest.tiles
            start = identity(stmt.op, target.dtype) if whole else None
            body = register_tile(body, nest.innermost[0], first, nest.lanes, start)
            rows = [v for v, _ in nest.jams if v in nest.facts.index_vars]
            if len(nest.inner) == 1 and rows:
                depth = _reduction_tile(nest)
                j = nest.innermost[0]
                body = pack_tiles(body, rows[0], j, first, nest.lanes, sizes, depth)
        if _blocked_columns(nest, target, band):
            strip, rows_var = band.names  # type: ignore[union-attr]
            j, width = nest.innermost[0], nest.tiles[-1]
            body = block_column_sums(body, target, strip, rows_var, j, width)
        return body

    def finish(self, function: L.Function, views: Views) -> L.Function:
        return unmerge(function, views)


CPU = CpuModel()
UNPADDED = CpuModel(pad=False)


def _reduction_tile(nest: Nest) -> int | None:
    """The cache tile size of the first reduction loop, None when it is not tiled."""
    loops = nest.bands
    first = nest.inner[0]
    if not nest.tiles or first not in loops:
        return None
    size = nest.tiles[loops.index(first)]
    return size if size > 1 else None


def _blocked_columns(nest: Nest, target: L.Buffer, band: TileBand | None) -> bool:
    """A float `+=` column reduction in strips and row blocks (`cpu.colsum`)."""
    return (
        not nest.outer
        and band is not None
        and len(band.names) == 2
        and nest.facts.stmt.op in (AssignOp.PLUS, AssignOp.PLUS_INIT)
        and target.dtype.is_float
    )


def schedule(ranged: RangedDef, options: Options | None = None, *, pad: bool = False) -> Schedule:
    """`poly.schedule.schedule` with the CPU's model (`pad`: `CPU`, else `UNPADDED`)."""
    return poly_schedule.schedule(ranged, options, model=CPU if pad else UNPADDED)


def lower_kernel(ranged: RangedDef, options: Options | None = None) -> Lowered:
    """The CPU's Function of `ranged` and its run-time bounds checks."""
    return astgen.lower_schedule(schedule(ranged, options, pad=True))


def lower(ranged: RangedDef, options: Options | None = None) -> L.Function:
    """The CPU's loop-IR Function of `ranged` (`lower_kernel`'s function)."""
    return lower_kernel(ranged, options).function


__all__ = ["CPU", "UNPADDED", "CpuModel", "lower", "lower_kernel", "schedule"]
