"""The CPU schedule model: the loop order of one statement, and what to unroll-and-jam.

Requires: a statement's `PolyStmt` and `StmtFacts` (ranged: every variable has a
`where` range), whether its left-hand side is injective and whether it reads its own
output, and `Options`.
Ensures:  `choose_order(...) -> LoopOrder`: the outer band (parallel when injective),
the inner band (reduction variables, in order), an optional innermost band, whether
the reduction accumulates in a register, and the unroll-and-jam steps
(`compiler/loops/jam.py` applies them to the lowered loops).

Two shapes of a reduction nest:

- register (the literal order): left-hand-side variables, then the reduction loops
  around a register accumulator, stored once. Best when the innermost reduction is
  long and unit-stride in its reads: LLVM vectorises the register reduction, which it
  may reassociate because `cpu.llvm` puts fast-math flags on accumulator updates.
- memory: one left-hand-side variable `j` moves *below* the reduction loops and the
  statement accumulates into the output element in memory (an init nest sets the
  identity first). Each element still receives its contributions in the same order
  (the reduction loops keep their order, only `j` moved), so no reassociation is
  needed and results are exactly those of the literal order's sequential sum; the `j`
  loop has no dependence at all, so LLVM vectorises it without fast-math.

The "auto" model picks memory form with `j` = the last left-hand-side subscript when:
the statement is a reduction (`+=`, `*=`, `min=`, `max=`, with or without `!`) with
reduction variables, the left-hand side is injective, it does not read its own output
(a read would see partial sums), another left-hand-side variable stays outside (the
parallel loop; with none, `Options(innermost=j)` lets `cpu.tiling` strip-mine `j`
into parallel strips), `j` is not short, every read that uses `j` uses it only in its last
subscript with coefficient 1 (unit stride) and some read does; and the innermost
reduction variable is short or not unit stride in every read that uses it (otherwise
the register reduction already vectorises well). "Short" is a constant extent up to
16, or an extent that is one size parameter that some range of the statement
subtracts (`kw in 0:KW` next to `w in 0:W - KW + 1`: a window).

In memory form the model also unroll-and-jams: the innermost reduction loop by
`UNROLL` into the `j` loop (each output vector is loaded and stored once per `UNROLL`
contributions), and register-blocks the left-hand-side variable that the most reads
using `j` do not use (matmul's `m`, the output channel of a convolution): it moves
just above the reduction loops and is unrolled by `BLOCK` and jammed down to the `j`
loop, so those reads are loaded once for `BLOCK` output rows. Both are legal: distinct
values of a left-hand-side variable write distinct elements, and jamming a reduction
loop keeps the order of the contributions to each element.

Register tiling (`compiler/cpu/regtile.py`, `LoopOrder.lanes`): in memory form the
innermost loop may move above the reduction loops in tiles of `lanes` elements that
accumulate in registers for the whole reduction. The model uses `LANES` = 16 for nests
with two or more reduction loops (convolutions; measured, 1 thread, CPU time: conv2d
N8 C16 32^2 M16 3x3 0.9 ms against 7-11 ms in memory form), and for one reduction
loop when a read along the tile also moves with the reduction and not with the
blocked rows (matmul's `B(k, n)`, `_packable`): such a read lies a row apart for every
`k`, so `cpu.pack` copies its panel contiguously once per row tile (unpacked, matmul
1024^3 ran 88 ms register-tiled against 37 ms in memory form: every `k` mapped to the
same cache sets). With register tiling, reads may use the innermost variable with a
constant stride up to `MAX_STRIDE` (`I(n, c, 2 * h + kh, 2 * w + kw)`); the unroll of
the reduction loop defaults to 1 (the lanes are the unroll).

Transposed lanes (`transposed_lanes`, `cpu.transpose`): when the last output
subscript cannot carry the lanes (short, or not unit stride in a read) or carries them
only with a stride (`I(n, c, 2 * h + kh, 2 * w + kw)`), a nest with several reduction
loops takes its lanes along another output variable instead (a weight gradient's `m`,
a strided convolution's `m`), reading and writing copies with that subscript moved
last. Measured, 2 threads, AVX-512, against PyTorch: the weight gradient of conv2d N8
C32 28^2 M32 3x3 2.3 -> 0.64 ms (torch 0.50); stride-2 conv N8 C16 33^2 M32 3x3
forward 1.94x -> 0.85x. A unit-stride convolution keeps its lanes along `w`.

Tile sizes follow the vector registers (`Options.vector_bits`, else the host's:
`cpu.cpu_registers`): a tile keeps `ACCUMULATORS` (8) vectors of partial sums, as many
as the two FMA units of a core need to hide an FMA's 4-cycle latency. With 256-bit
vectors (AVX2) that is 4 rows of 16 lanes; with 512-bit ones (AVX-512) 8 rows of 16
lanes for a convolution (`tile_rows`). A packed panel's tile has several vectors a row
(a row of one vector loads as often as it multiplies) and more accumulators
(`packed_vectors`, `packed_lanes`): 12 of AVX2's 16 registers, 6 rows of 16 lanes (Zen
3, matmul 512^3 against NumPy: 1.56x with 4 rows, 1.27x with 6), and 16 of AVX-512's
32, 4 rows of 64 lanes (8 rows of 32 before: 1 thread, CPU time, 512^3 against NumPy:
1.39x with 4 rows of 32, 1.13x with 8; 4 rows of 64 over 128 steps, 2 threads against
torch: 1.39x -> 1.27x, `cpu_registers.packed_lanes`). A
dot-product tile has 16 outputs instead of 8 (`WIDE_DOT_TILE`). With 4 rows of one
512-bit vector, 4 FMA chains kept the FMA units half busy (measured on an AVX-512
Xeon, 2 threads, against PyTorch: conv2d N8 C16 32^2 M16 3x3 1.40x -> 1.13x, matmul
512^3 2.0x -> 1.2x NumPy).

Transposed panels (`transposed_panels`): a one-loop dot product whose last output
variable `n` some read uses in another subscript than its last (`C(m, n) +=! A(m, k) *
B(n, k)`) takes matmul's packed order all the same, `cpu.pack` copying `B`'s panels
transposed; its dot tile stays as the run-time alternative for fewer than
`panel_rows()` rows or `PANEL_LANES` columns (`cpu.alternatives.RowsCheck`). Compile time: the
packed nest and the dot tile (with its swapped order) are both built: a linear layer
`Y(b, o) +=! X(b, i) * W(o, i)` compiled in 2.2 s of CPU time against 0.7 s for the
dot tile alone (measured, first compile of each, no cache).

Worked example, matmul `C(m, n) +=! A(m, k) * B(k, n)`: memory form, outer `(m,)`,
inner `(k,)`, innermost `(n,)`, jams `(("m", 6),)` and 16 lanes with AVX2, `(("m", 8),)`
and 32 lanes with AVX-512 (B's panel packed).
"""

from __future__ import annotations

from collections.abc import Iterator

import islpy as isl

from compiler.cpu.cpu_registers import (
    ACCUMULATORS,
    BLOCK,
    packed_lanes,
    packed_vectors,
    tile_rows,
    vector_bits,
)
from compiler.frontend.ast import Access, Binary, BinOp, Const, Expr, Let, RangeConstraint, Var
from compiler.frontend.checked import StmtFacts
from compiler.frontend.scopes import children, var_uses
from compiler.options import AUTO, Options
from compiler.poly.isl_bridge import NotAffine, StmtSpace, expr_to_aff
from compiler.poly.order import LoopOrder, literal_order

UNROLL = 4  # unroll-and-jam factor of the innermost reduction loop
SHORT = 16  # a constant extent up to this is short
DOT_TILE = (2, 4)  # jam factors of the last two output loops of a dot-product nest
WIDE_DOT_TILE = (4, 4)  # the same with 32 vector registers (AVX-512)
MAX_STRIDE = 4  # the largest stride of a read along a register-tiled loop
LANES = 16  # register tile width along the innermost loop (cpu/regtile.py)
PANEL_LANES = 64  # ... and this many columns (`cpu.alternatives.RowsCheck`)


def choose_order(
    facts: StmtFacts,
    params: tuple[str, ...],
    options: Options,
    *,
    injective: bool,
    self_reads: bool,
) -> LoopOrder:
    """The loop order of one statement (see the module doc)."""
    literal = literal_order(facts)
    if options.innermost is None or not _memory_legal(facts, injective, self_reads):
        return literal
    space = StmtSpace(facts.all_vars, params)
    lets = {c.name: c.value for c in facts.stmt.where if isinstance(c, Let)}
    reads = list(stmt_reads(facts))
    lanes = options.register_tile
    floats = vector_bits(options) // 32  # float32 lanes of one vector register
    if lanes is None:  # the model: convolution-like nests only (module doc)
        # (not for a column reduction: its strips sum in blocks, cpu.colsum)
        lanes = LANES if len(facts.reduction_vars) >= 2 and len(facts.index_vars) > 1 else 1
    transposed = None
    if options.innermost == AUTO:
        j = _auto_innermost(facts, space, lets, reads, strided=lanes > 1)
        strided = j is not None and _unit_stride_reads(j, reads, space, lets) is None
        if (j is None or strided) and lanes > 1:
            transposed = transposed_lanes(facts, space, lets, reads)
            j = transposed or j
    else:
        j = options.innermost if options.innermost in _lhs_vars(facts) else None
    if j is None:
        if options.innermost != AUTO or options.register_tile == 1:
            return literal
        dot = _dot_tile(facts, space, lets, reads, options)
        if options.register_tile is None and options.block is None and dot.swap is not None:
            return transposed_panels(facts, space, lets, reads, options, dot) or dot
        return dot
    others = tuple(v for v in facts.index_vars if v != j)
    block_var = _block_var(others, j, reads, space, lets, facts)
    jams: list[tuple[str, int]] = []
    block = BLOCK if options.block is None else options.block
    if block_var is not None and block > 1:
        rest = tuple(v for v in others if v != block_var)
        # transposed lanes: the rows (channels) outermost, the parallel loop; a weight
        # gradient's other output loops are its short window `kh, kw`
        first = transposed and all(short(facts, v) for v in rest)
        others = (block_var, *rest) if first else (*rest, block_var)
        jams.append((block_var, block))
    packed = block_var is not None and _packable(facts, j, block_var, reads, lets)
    if options.register_tile is None and lanes <= 1 and packed and block > 1:
        lanes = max(LANES, packed_lanes(floats))  # 16 lanes with AVX2, 64 with AVX-512
    inner = facts.reduction_vars
    if lanes > 1:
        inner = long_innermost(facts)
        if jams:
            vectors = packed_vectors(floats) if packed else ACCUMULATORS
            jams[-1] = (jams[-1][0], tile_rows(lanes, floats, options.block, vectors))
    unroll = (UNROLL if lanes <= 1 else 1) if options.unroll is None else options.unroll
    if unroll > 1:
        jams.append((inner[-1], unroll))
    return LoopOrder(others, inner, (j,), register=False, jams=tuple(jams), lanes=lanes)


def _packable(
    facts: StmtFacts, j: str, block_var: str, reads: list[Access], lets: dict[str, Expr]
) -> bool:
    """A one-loop contraction whose register tiles `cpu.pack` can pack: some read
    uses `j` (in its last subscript: the caller checked unit stride) and the reduction
    variable (matmul's `B(k, n)`) but not the row-blocked `block_var`. Such a read
    lies a row apart for every step of the reduction; packed, the tile reads it
    contiguously (measured, 1 thread, process CPU time, float32, against the memory
    form: 1024x256x1024 8.8 against 12.1 ms, 256^3 0.48 against 0.57)."""
    if len(facts.reduction_vars) != 1 or short(facts, facts.reduction_vars[0]):
        return False
    (r,) = facts.reduction_vars
    return any(
        read.args  # a 0-d read (a scalar factor `* b`) is no panel
        and mentions(read.args[-1], j, lets)
        and any(mentions(a, r, lets) for a in read.args[:-1])
        and not any(mentions(a, block_var, lets) for a in read.args)
        for read in reads
    )


def long_innermost(facts: StmtFacts) -> tuple[str, ...]:
    """A register tile's reduction order: the short reduction variables (windows:
    `kh, kw`) outside the long ones (channels: `c`), each group in literal order. The
    innermost reduction loop then runs `C` iterations instead of `KW` (= 1 for a
    pointwise convolution), so the loop overhead and address arithmetic of the loops
    around the tile's FMAs are paid once per `C` steps (measured, 1 thread, float32:
    conv 1x1 N8 C64 28^2 M128 55 against 13 GFLOP/s, 3x3 N8 C32 28^2 M32 63 against
    41). Each element's sum is reordered, as the register tile's reassociation
    already allows. `poly.schedule` keeps the literal order as a run-time alternative
    for when the reads along `c` alias in the L1 cache (`Nest.alternative`)."""
    shorts = tuple(v for v in facts.reduction_vars if short(facts, v))
    return shorts + tuple(v for v in facts.reduction_vars if v not in shorts)


def _dot_tile(
    facts: StmtFacts,
    space: StmtSpace,
    lets: dict[str, Expr],
    reads: list[Access],
    options: Options,
) -> LoopOrder:
    """The literal order; for a long innermost reduction read with unit stride or a
    small constant stride (a dot product per output: linear layers, attention scores,
    a strided convolution's weight gradient, `I(n, c, 2 * h + kh, 2 * w + kw)` along
    `w`: 6.0 -> 1.6 ms for tools/bench's stride-2 case, one thread), the last two output loops unrolled and
    jammed by DOT_TILE (the last two that are not short), so a tile of outputs accumulates in registers (LLVM vectorises
    the reduction loop, one vector of partial sums per output) and each loaded vector
    of a read is used by several outputs. `Options(register_tile=1)` turns it off."""
    literal = _unit_stride_last(facts, space, lets, reads)
    r = literal.inner[-1]
    if short(facts, r) or not _unit_stride_reads(r, reads, space, lets, strided=True):
        return literal
    # a jammed variable pays only if some read does not use it (that read's vectors
    # serve the whole tile); `mx(b, i) max=! S(b, i, j)` shares nothing: no tile
    outer = [
        v
        for v in facts.index_vars
        if not short(facts, v) and any(not mentions(r, v, lets) for r in reads)
    ][-2:]
    if len(outer) < 2:
        return literal  # one output row per loop: no read is shared between outputs
    # one vector of partial sums an output: 8 of 16 registers, 16 of 32 with AVX-512
    # for one long reduction loop (measured, 2 threads, linear+relu 128x512->256: 0.32
    # -> 0.26 ms, torch 0.22); a weight gradient's `n, h, w` reduction reduces its
    # vectors every row of `w`, which 16 outputs made slower (2.9 -> 4.8 ms)
    one_loop = len(facts.reduction_vars) == 1
    tile = WIDE_DOT_TILE if vector_bits(options) >= 512 and one_loop else DOT_TILE
    jams = tuple((v, f) for v, f in zip(outer, tile, strict=True))
    # either loop order, picked at run time (`cpu.alternatives.SwapCheck`); not for a weight
    # gradient's `n, h, w` dot products, where the second copy of the nest cost compile
    # time (conv2d's gradient 1.6 -> 2.1-2.6 s) with no measured gain
    p, q = sorted(outer, key=literal.outer.index)
    swap = (p, q) if one_loop else None
    return LoopOrder(literal.outer, literal.inner, jams=jams[::-1], swap=swap)


def _unit_stride_last(
    facts: StmtFacts, space: StmtSpace, lets: dict[str, Expr], reads: list[Access]
) -> LoopOrder:
    """The literal order, except that when the last reduction loop is short or not unit
    stride in its reads and another reduction variable is long and unit stride in every
    read that uses it, that variable's loop moves innermost (the one nearest the end).

    Legal in register form: each element's sum stays in one register, only the order of
    its terms changes, which the accumulator's fast-math flags allow already (`max=` and
    `min=` are exact in any order). `l_grad(b, i) +=! O_g(b, i, e) * P(b, i, j) * V(b, j, e)`
    over `e, j` runs `j` outside and `e` inside: unit stride in `O_g` and `V`, vectorised."""
    literal = literal_order(facts)
    red = facts.reduction_vars
    if len(red) < 2 or not facts.stmt.op.is_reduction:
        return literal
    last = red[-1]
    if not short(facts, last) and _unit_stride_reads(last, reads, space, lets):
        return literal
    for v in reversed(red[:-1]):
        if not short(facts, v) and _unit_stride_reads(v, reads, space, lets):
            return LoopOrder(literal.outer, (*(x for x in red if x != v), v))
    return literal


def _memory_legal(facts: StmtFacts, injective: bool, self_reads: bool) -> bool:
    return (
        facts.stmt.op.is_reduction
        and bool(facts.reduction_vars)
        and injective
        and not self_reads
        and len(facts.index_vars) >= 1  # one: a column reduction (cpu.tiling strip-mines it)
    )


def _lhs_vars(facts: StmtFacts) -> list[str]:
    return [
        a.name for a in facts.stmt.lhs.args if isinstance(a, Var) and a.name in facts.index_vars
    ]


def _auto_innermost(
    facts: StmtFacts,
    space: StmtSpace,
    lets: dict[str, Expr],
    reads: list[Access],
    strided: bool = False,
) -> str | None:
    last = facts.stmt.lhs.args[-1]
    if not (isinstance(last, Var) and last.name in facts.index_vars):
        return None
    j = last.name
    if short(facts, j) or _unit_stride_reads(j, reads, space, lets, strided) is None:
        return None
    r = facts.reduction_vars[-1]
    if not short(facts, r) and _unit_stride_reads(r, reads, space, lets):
        return None  # a long unit-stride reduction: the register reduction vectorises
    return j


def _unit_stride_reads(
    v: str,
    reads: list[Access],
    space: StmtSpace,
    lets: dict[str, Expr],
    strided: bool = False,
    last: bool = True,
) -> int | None:
    """How many reads use `v` only in their last subscript with coefficient 1 (with
    `strided`: any positive constant coefficient, as `2 * w + kw`; without `last`: in
    any one subscript); None when some read uses it elsewhere (or not affinely)."""
    count = 0
    pos = space.pos(v)
    for read in reads:
        uses = [k for k, a in enumerate(read.args) if mentions(a, v, lets)]
        if not uses:
            continue
        if len(uses) != 1 or (last and uses[0] != len(read.args) - 1):
            return None
        try:
            aff = expr_to_aff(read.args[uses[0]], space, lets)
        except NotAffine:
            return None
        strides = range(1, MAX_STRIDE + 1) if strided else (1,)
        if all(
            (aff - space.var(v).mul(space.const(c))).involves_dims(isl.dim_type.in_, pos, 1)
            for c in strides
        ):
            return None
        count += 1
    return count or None


def _block_var(
    others: tuple[str, ...],
    j: str,
    reads: list[Access],
    space: StmtSpace,
    lets: dict[str, Expr],
    facts: StmtFacts,
) -> str | None:
    """The output variable that the most reads using `j` do not use (ties: a long one
    before a short one, a weight gradient's rows are its channels `c`, not its 3-wide
    `kw`; then the last)."""
    using_j = [r for r in reads if any(mentions(a, j, lets) for a in r.args)]
    best, best_key = None, (0, False)
    for v in others:
        count = sum(1 for r in using_j if not any(mentions(a, v, lets) for a in r.args))
        key = (count, not short(facts, v))
        if count > 0 and key >= best_key:
            best, best_key = v, key
    return best


def transposed_lanes(
    facts: StmtFacts, space: StmtSpace, lets: dict[str, Expr], reads: list[Access]
) -> str | None:
    """The register tile's lane variable of a nest with several reduction loops whose
    last output subscript is short or not unit stride (a weight gradient
    `W1_grad(m, c, kh, kw) +=! O_grad(n, m, h, w) * I(n, c, h + kh, w + kw)`): an
    output variable that is long, that every read using it uses in one subscript as
    `v + constant` only, that some read does not use (its value serves every lane:
    attention's `l_grad(b, i)` has no such variable), and that leaves a long row
    variable (`_block_var`) whose reads do not use it. `cpu.transpose` copies each read (and the output) that
    uses it elsewhere than last into a buffer with that subscript moved last, so the
    tile's lanes are contiguous (and its final stores too: LLVM's SLP vectoriser
    starts from consecutive stores). Without it a weight gradient's dot tile reduces
    a vector of partial sums every row of `w` (26 wide: one vector, a 10-step scalar
    remainder), and a strided convolution's lanes along `w` read every other float.
    Of several, the one whose reads name the fewest variables (the smaller tensor: a
    window `h + kh` spans more than its loops)."""
    if len(facts.reduction_vars) < 2:
        return None
    best, best_names = None, 0
    for v in _lhs_vars(facts):
        if short(facts, v) or _unit_stride_reads(v, reads, space, lets, last=False) is None:
            continue
        if all(any(mentions(a, v, lets) for a in r.args) for r in reads):
            continue  # every read moves with the lanes: nothing is shared across them
        others = tuple(x for x in facts.index_vars if x != v)
        row = _block_var(others, v, reads, space, lets, facts)
        if row is None or short(facts, row):
            continue
        using = [r for r in reads if any(mentions(a, v, lets) for a in r.args)]
        names = sum(len({u.name for u in var_uses(r.args)}) for r in using)
        if best is None or names <= best_names:
            best, best_names = v, names
    return best


def transposed_panels(
    facts: StmtFacts,
    space: StmtSpace,
    lets: dict[str, Expr],
    reads: list[Access],
    options: Options,
    dot: LoopOrder,
) -> LoopOrder | None:
    """The packed order of a one-loop dot product `C(m, n) +=! A(m, k) * B(n, k)`
    (linear layers, matmul's `A_grad`): lanes along the last output variable `n`,
    which some read uses as `n + c` in a subscript other than its last (`B(n, k)`,
    contiguous along the reduction `k`), so `cpu.pack` copies each panel of it
    transposed (`X.pack[tile, k, lane] = B[n0 + lane, k]`) and the tile reads it like
    matmul's `B(k, n)`; `dot` (the dot tile) is the fallback for fewer than
    `panel_rows()` rows or `PANEL_LANES` columns. None when the statement has another
    shape: every read using `n` must use it in one subscript as `n + c`, those with it
    elsewhere than last must use `k` (unit stride, last) and otherwise only output
    variables other than `m` (a batched product's `K(b, j, e)`: the panels are then
    copied for each batch, in its parallel iteration), and a long row variable `m` must
    remain whose reads do not use `n`. Measured (module doc of `cpu.pack`; batched:
    2 threads, float32 `S(b, i, j) +=! Q(b, i, e) * K(b, j, e)`, B x T x E, dot tile /
    panels forced, ms: 8x512x64 4.03 / 2.84, 4x256x32 0.36 / 0.26, 1x256x64 0.21 /
    0.14, 8x128x64 0.28 / 0.25)."""
    last = facts.stmt.lhs.args[-1]
    (r,) = facts.reduction_vars
    if not (isinstance(last, Var) and last.name in facts.index_vars) or short(facts, last.name):
        return None
    j = last.name
    if _unit_stride_reads(j, reads, space, lets, last=False) is None:
        return None
    others = tuple(v for v in facts.index_vars if v != j)
    m = _block_var(others, j, reads, space, lets, facts)
    if m is None or short(facts, m):
        return None
    batch = set(others) - {m}  # a batched product's `K(b, j, e)` (attention's Q K^T)
    for read in reads:
        at = [p for p, a in enumerate(read.args) if mentions(a, j, lets)]
        if not at or at[0] == len(read.args) - 1:
            continue
        rest = [a for p, a in enumerate(read.args) if p != at[0]]
        used = {u for a in rest for u in facts.all_vars if mentions(a, u, lets)}
        if r not in used or used - {r} - batch or not mentions(read.args[-1], r, lets):
            return None
        if _unit_stride_reads(r, [read], space, lets) is None:
            return None
    floats = vector_bits(options) // 32
    lanes = max(LANES, packed_lanes(floats))
    rows = tile_rows(lanes, floats, None, packed_vectors(floats))
    order = (*(v for v in others if v != m), m)
    jams = ((m, rows),)
    return LoopOrder(order, (r,), (j,), register=False, jams=jams, lanes=lanes, fallback=dot)


def short(facts: StmtFacts, v: str) -> bool:
    """A constant extent up to SHORT, or one size parameter `P` that a range subtracts
    (`w in 0:W - KW + 1`) or that a read's subscript adds to `v` and another variable
    (a gradient's window, `O_grad_pad(n, m, y - kh + (KH - 1), x - kw + (KW - 1))`:
    the 1x1 convolution's input gradient, N8 C64 28^2 M128, ran 7.6 ms with `m`
    outside its one-step `kh, kw` loops; see `long_innermost`), or whose variable is
    the offset within a stride of a read's subscript (`kw` of `2 * w + kw`: a strided
    window; a transposed convolution's weight gradient `W1_grad(c, m, kh, kw) +=!
    O_grad(n, m, 2 * h + kh, 2 * w + kw) * I(n, c, h, w)` laid its 16 lanes along
    `kw`, ran every column in memory form for KW = 3, and took 3.9 ms against 0.26
    with its transposed lanes)."""
    ranges = [c for c in facts.stmt.where if isinstance(c, RangeConstraint)]
    mine = [c for c in ranges if isinstance(c.expr, Var) and c.expr.name == v]
    if not mine:
        return False
    extent = _linear(Binary(BinOp.SUB, mine[0].hi, mine[0].lo))
    if extent is None:
        return False
    terms = {n: k for n, k in extent.items() if n and k}
    if not terms:
        return 0 < extent.get("", 0) <= SHORT
    if len(terms) != 1 or next(iter(terms.values())) != 1:
        return False
    size = next(iter(terms))
    for c in ranges:
        for bound in (c.lo, c.hi):
            coeffs = _linear(bound, opaque=True)
            if coeffs is not None and coeffs.get(size, 0) < 0:
                return True
    for read in stmt_reads(facts):
        for arg in read.args:
            coeffs = _linear(arg, opaque=True) or {}
            others = set(coeffs) & set(facts.all_vars) - {v}
            if coeffs.get(v) and coeffs.get(size) and any(coeffs[u] for u in others):
                return True
            # the offset within a stride: `kw` of `2 * w + kw` (a strided window)
            if abs(coeffs.get(v, 0)) == 1 and any(abs(coeffs[u]) > 1 for u in others):
                return True
    return False


def _linear(e: Expr, opaque: bool = False) -> dict[str, int] | None:
    """Integer coefficients of a linear TC expression (key "" is the constant); with
    `opaque`, the terms of a sum that are not linear (`floordiv(W + KW, 2)`) count as 0."""
    if isinstance(e, Const) and isinstance(e.value, int):
        return {"": e.value}
    if isinstance(e, Var):
        return {e.name: 1}
    if isinstance(e, Binary) and e.op in (BinOp.ADD, BinOp.SUB):
        a, b = _linear(e.lhs, opaque), _linear(e.rhs, opaque)
        if a is None or b is None:
            return None
        sign = 1 if e.op is BinOp.ADD else -1
        out = dict(a)
        for n, k in b.items():
            out[n] = out.get(n, 0) + sign * k
        return out
    if isinstance(e, Binary) and e.op is BinOp.MUL:
        a, b = _linear(e.lhs), _linear(e.rhs)
        if a is None or b is None:
            return None
        if set(a) == {""}:
            a, b = b, a
        if set(b) != {""}:
            return None
        return {n: k * b[""] for n, k in a.items()}
    return {} if opaque else None


def mentions(e: Expr, v: str, lets: dict[str, Expr]) -> bool:
    stack = [e]
    while stack:
        x = stack.pop()
        if isinstance(x, Var):
            if x.name == v:
                return True
            if x.name in lets:
                stack.append(lets[x.name])
        stack.extend(children(x))
    return False


def stmt_reads(facts: StmtFacts) -> Iterator[Access]:
    exprs: list[Expr] = [facts.stmt.rhs]
    exprs += [c.value for c in facts.stmt.where if isinstance(c, Let)]
    stack = list(exprs)
    while stack:
        e = stack.pop()
        if isinstance(e, Access):
            yield e
        stack.extend(children(e))


__all__ = [
    "BLOCK",
    "SHORT",
    "UNROLL",
    "choose_order",
    "long_innermost",
    "mentions",
    "short",
    "stmt_reads",
]
