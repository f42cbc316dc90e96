"""GPU mapping: a target-only pass from a phased loop-IR Function to CUDA kernels.

Requires: a Function whose top-level nests (*phases*) run one after the other; in a
phase, the perfectly nested chain of `PARALLEL` loops at its root is a parallel band
(`cuda.gpu_lower` marks it): every iteration of the band writes its own elements.
Ensures:  `map_to_gpu(f, phases, options, error=...) -> GpuProgram`, one `GpuKernel` per
phase with its launch configuration, whose loops are `SERIAL`, `GPU_BLOCK` or
`GPU_THREAD` (no `PARALLEL`, `VECTOR`, `UNROLL` left), plus the temporaries a phase
allocates at its root, hoisted to kernel parameters the host allocates zeroed.

The mapping (the model default; `CudaOptions` sets block and grid sizes):
- the band's innermost loops, as many as have bounds free of each other's variables,
  collapse into one index `t` over the product of their extents, mapped to
  `blockIdx.x * blockDim.x + threadIdx.x` with a grid-stride loop (so any grid covers any
  extent; remainders need no guard). The innermost band loop varies fastest with `t`:
  it is the left-hand side's last variable, unit stride in the output, so neighbouring
  threads write neighbouring elements (coalesced);
- the band's next loops outwards map to `blockIdx.y`, then `blockIdx.z` (grid-stride);
  any further ones stay serial loops in every thread;
- the loops below the band (reductions) stay inside the thread, accumulating in a
  register (`Local`);
- a band over a reduction also gets *thread tiles* (`cuda.cuda_tile`): kernels in
  which a thread computes `CudaOptions.thread_tile` outputs, run instead of the
  one-output kernel when the band is large; and a *warp reduction*
  (`cuda.cuda_warp`), a warp an output, run when the band is small and its
  reduction long (each kernel's `when`, decided by the host from the sizes). All of a
  phase's kernels carry its index (`GpuKernel.phase`);
- a band (possibly empty) over a reduction with few outputs also gets a *split
  reduction* (`cuda.cuda_split`): partial results over many threads, then a second
  pass that combines them in a fixed order (deterministic), run when the sizes give
  enough partials;
- consecutive phases over the same rows, independent row by row, also run as one
  kernel, a warp a row (`cuda.cuda_rows`; its `when`: where the rows are enough);
- a phase whose root is an `If` on the sizes only (a padded gather's size split) or a
  `Block` of such pieces is mapped piece by piece: each branch's kernels run where the
  host finds the condition true (their `when`);
- a phase with no parallel band whose only writes are `T[i] = T[i] + v` (v not reading
  T; a data-dependent scatter) runs its whole root chain in parallel with
  `AtomicAdd(T, i, v)` when T is float32/float64 and `CudaOptions.atomics`; any other
  phase runs on a single thread (`<<<1, 1>>>`), its launch comment saying why
  (`GpuKernel.reason`: a recurrence, an argmin-like update, a reduction too short).

Worked example, matmul `C(m, n) +=! A(m, k) * B(k, n)` (block 256):

    for (m = 0; m < M; m += 1) gpu_block(y) {
      for (n = 0; n < N; n += 1) gpu_thread(x) {
        local acc = 0.0f { for (k ...) acc = acc + A[m, k] * B[k, n]; C[m, n] = acc } } }
    grid = (ceil(N / 256), min(M, 65535), 1), block = (256, 1, 1)
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from compiler.cuda.cuda_nodes import AtomicAdd, GpuKernel, GpuProgram, PosDiv, PosMod
from compiler.cuda.cuda_options import CudaOptions
from compiler.cuda.cuda_rows import FILL_THREADS, plan_rows
from compiler.cuda.cuda_shared import shared_variant
from compiler.cuda.cuda_split import SplitReduction, inner_reason, serial_reason, split_of
from compiler.cuda.cuda_tile import extent, fresh, thread_tile
from compiler.cuda.cuda_warp import LANES, warp_reduce
from compiler.diagnostics import InternalError
from compiler.loops import (
    Alloc,
    Assign,
    Bin,
    BinOp,
    Block,
    Buffer,
    Const,
    DType,
    Expr,
    FloorDiv,
    For,
    Function,
    If,
    Let,
    Load,
    Local,
    LoopKind,
    Max,
    Min,
    Mutator,
    Node,
    Select,
    Stmt,
    Store,
    VarRef,
    Visitor,
)

I64 = DType.INT64
ATOMIC_DTYPES = (DType.FLOAT32, DType.FLOAT64)


def map_to_gpu(
    f: Function, phases: tuple[Stmt, ...], options: CudaOptions, *, error: str | None = None
) -> GpuProgram:
    """The kernels of `f`'s phases and of its row groups (see the module doc); `error`
    names the error-record buffer, whose writes do not count as a phase's writes."""
    taken = _names(f)
    one = Const(1, I64)
    kernels: list[GpuKernel] = []

    def phase_kernels(p: int, when: Expr | None) -> list[GpuKernel]:
        found = _map_phase(f"{f.name}_k{p}", phases[p], f, options, error, set(taken))
        return [dataclasses.replace(k, phase=p, when=_both(when, k.when)) for k in found]

    sizes = set(f.size_params)
    plan = (
        plan_rows(phases, sizes, error, set(taken))
        if options.fuse_rows
        else list(range(len(phases)))
    )
    for item in plan:
        if isinstance(item, int):
            kernels += phase_kernels(item, None)
            continue
        first = item.phases[0]
        grid = (one, item.rows, one)
        temps = tuple(c.temp for c in item.columns)
        kernels.append(GpuKernel(f"{f.name}_k{first}r", item.body, "parallel", item.block, grid,
                                 ((item.row, "y"),), temps, first, item.when, "rows"))  # fmt: skip
        for column in item.columns:  # their temporaries are the fused kernel's: one phase
            found = _second_kernels(f"{f.name}_k{column.phase}c", column.second, 1,
                                    (column.temp,), sizes, options, error, set(taken))  # fmt: skip
            kernels += [dataclasses.replace(k, phase=first, when=item.when) for k in found]
        otherwise = Bin(BinOp.SUB, one, item.when)
        for p in item.phases:
            kernels += phase_kernels(p, otherwise)
    return GpuProgram(f.name, f.buffers, f.size_params, tuple(kernels))


def _map_phase(
    name: str, phase: Stmt, f: Function, options: CudaOptions, error: str | None, taken: set[str]
) -> list[GpuKernel]:
    """The kernels of one phase: of each of its pieces (`_pieces`), in order, each
    launched only where its sizes-only condition holds."""
    temps: list[Buffer] = []
    while isinstance(phase, Alloc):
        temps.append(phase.buffer)
        phase = phase.body
    pieces = _pieces(phase, set(f.size_params))
    kernels: list[GpuKernel] = []
    for k, (cond, piece) in enumerate(pieces):
        piece_name = name if len(pieces) == 1 else f"{name}_{k}"
        for kernel in _map_piece(piece_name, piece, temps, f, options, error, taken):
            kernels.append(dataclasses.replace(kernel, when=_both(cond, kernel.when)))
    return kernels


def _pieces(stmt: Stmt, sizes: set[str]) -> list[tuple[Expr | None, Stmt]]:
    """`stmt` as a sequence of pieces, each with the condition (an int64 expression of
    the sizes, > 0: it runs; None: always) under which it runs: a root `If` whose
    condition reads only sizes becomes its branches' pieces (the host tests it), a
    root `Block` with a parallel band in some member its members' pieces, in order
    (kernels run one after the other, as the members do). Anything else is one piece."""
    if isinstance(stmt, If) and _free(stmt.cond) <= sizes and not _reads(stmt.cond):
        one, zero = Const(1, I64), Const(0, I64)
        found = [(_both(Select(stmt.cond, one, zero), c), s) for c, s in _pieces(stmt.then, sizes)]
        if stmt.otherwise is not None:
            found += [
                (_both(Select(stmt.cond, zero, one), c), s)
                for c, s in _pieces(stmt.otherwise, sizes)
            ]
        return found
    if isinstance(stmt, Block) and any(_has_band(s) for s in stmt.stmts):
        return [p for s in stmt.stmts for p in _pieces(s, sizes)]
    return [(None, stmt)]


def _has_band(stmt: Stmt) -> bool:
    """True when `stmt`, through root `If`s and `Block`s, has a PARALLEL loop at a root."""
    if isinstance(stmt, For):
        return stmt.kind is LoopKind.PARALLEL
    if isinstance(stmt, If):
        return _has_band(stmt.then) or (stmt.otherwise is not None and _has_band(stmt.otherwise))
    if isinstance(stmt, Block):
        return any(_has_band(s) for s in stmt.stmts)
    return False


def _both(a: Expr | None, b: Expr | None) -> Expr | None:
    """The condition (> 0) that both `a` and `b` hold (None: no condition)."""
    if a is None or b is None:
        return b if a is None else a
    return Min(a, b)


def _map_piece(
    name: str,
    phase: Stmt,
    temps: list[Buffer],
    f: Function,
    options: CudaOptions,
    error: str | None,
    taken: set[str],
) -> list[GpuKernel]:
    """The kernels of one piece of a phase: its parallel band mapped (with variants),
    an atomic scatter, or one thread."""
    chain = _chain(phase, lambda loop: loop.kind is LoopKind.PARALLEL)
    mode = "parallel"
    if not chain:
        target = _atomic_target(phase, error) if options.atomics else None
        if target is not None:
            phase = _Atomics(target).mutate(phase)
            chain = _chain(phase, lambda loop: True)
            mode = "atomic"
    depth = len(chain)  # the band: the first `depth` loops of the root chain
    phase = _Serial().mutate(phase)
    sizes = set(f.size_params)
    if not depth:
        one = Const(1, I64)
        reason = serial_reason(phase, error)
        plain = GpuKernel(name, phase, "serial", 1, (one, one, one), (), tuple(temps),
                          reason=reason)  # fmt: skip
        if temps:
            return [plain]
        return _with_variants(plain, [], phase, sizes, options, error, taken)
    band = _chain(phase, lambda loop: True)[:depth]
    body, grid, dims = _map_band(band, sizes, options, taken)
    reason = inner_reason(band[-1].body, error)
    plain = GpuKernel(name, body, mode, options.block, grid, dims, tuple(temps), reason=reason)
    if mode != "parallel" or temps:
        return [plain]
    return _with_variants(plain, band, band[-1].body, sizes, options, error, taken)


def _with_variants(
    plain: GpuKernel,
    band: list[For],
    inner: Stmt,
    sizes: set[str],
    options: CudaOptions,
    error: str | None,
    taken: set[str],
) -> list[GpuKernel]:
    """`plain` and the variants of its band (possibly empty, over `inner`) that the host
    picks from by the sizes (each kernel's `when`): thread tiles for large bands, split
    reductions (`cuda_split`) for few outputs of reductions with many partials, warp
    reductions for small bands of long reductions. Exactly one runs: the first variant
    whose `when` holds, else `plain`."""
    name = plain.name
    variants: list[tuple[Expr, list[GpuKernel]]] = []  # when, kernels (when unset)
    warp = None
    if band and options.block % LANES == 0:
        warp = warp_reduce(band, error, options.warp_outputs, taken)
    if warp is not None and _size_only(warp.when, sizes) is None:
        warp = None
    shared = shared_variant(name, band, sizes, options, taken)  # cuda_shared: first
    if shared is not None:
        when, found = shared
        if warp is not None:  # few outputs of a long reduction: a warp each, unless the
            # shared tiles fill the GPU (a conv's weight gradient: 5 tiles of 128 x 128)
            (kernel,) = found
            blocks: Expr = Const(kernel.block, I64)
            for g in kernel.grid:
                blocks = blocks if g is None else Bin(BinOp.MUL, blocks, g)
            fills = Bin(BinOp.SUB, blocks, Const(FILL_THREADS - 1, I64))
            when = Min(when, Max(fills, Bin(BinOp.SUB, Const(1, I64), warp.when)))
        variants.append((when, found))
    tiled = thread_tile(band, *options.thread_tile, options.tile_threads, taken) if band else None
    if tiled is not None and _size_only(tiled.enough, sizes) is not None:
        parts = [(f"{name}t{k}", part, d) for k, (part, d) in enumerate(tiled.phases)]
        variants.append((tiled.enough, _kernels(parts, "tile", (), sizes, options, taken)))
    split = split_of(band, inner, sizes, error, taken)
    if split is not None and _size_only(split.when, sizes) is not None:
        variants.append((split.when, _split_kernels(name, split, sizes, options, error, taken)))
    if warp is not None:
        parts = [(f"{name}w", warp.phase, warp.depth)]
        variants.append((warp.when, _kernels(parts, "warp", (), sizes, options, taken)))
    grid = _grid_variant(name, band, sizes, options, taken)
    if grid is not None:
        variants.append(grid)
    if not variants:
        return [plain]
    one = Const(1, I64)
    kernels: list[GpuKernel] = []
    otherwise: Expr | None = None  # > 0: no variant so far holds
    for when, found in variants:
        runs = when if otherwise is None else Min(when, otherwise)
        kernels += [dataclasses.replace(k, mode="parallel", when=runs) for k in found]
        fails = Bin(BinOp.SUB, one, when)
        otherwise = fails if otherwise is None else Min(otherwise, fails)
    return [dataclasses.replace(plain, when=otherwise), *kernels]


def _grid_variant(
    name: str, band: list[For], sizes: set[str], options: CudaOptions, taken: set[str]
) -> tuple[Expr, list[GpuKernel]] | None:
    """A band of 2 or 3 independent loops (which `plain` collapses into one index it
    decomposes with `/` and `%`) mapped to a grid of as many dimensions: the innermost
    loop to x, the others to blockIdx.y and z. It runs (`when`) where the innermost
    extent fills a block; below that, most of a block's threads would idle."""
    if not 2 <= len(band) <= 3 or not _independent(band):
        return None
    inner = _size_only(extent(band[-1]), sizes)
    if inner is None:
        return None
    body, grid, dims = _map_band(band, sizes, options, taken, collapse=False)
    kernel = GpuKernel(f"{name}g", body, "parallel", options.block, grid, dims, (), 0, None, "grid")
    return Bin(BinOp.SUB, inner, Const(options.block - 1, I64)), [kernel]


def _kernels(
    parts: list[tuple[str, Stmt, int]],
    variant: str,
    temps: tuple[Buffer, ...],
    sizes: set[str],
    options: CudaOptions,
    taken: set[str],
) -> list[GpuKernel]:
    """A kernel for each (name, phase, band depth) of `parts`, its band mapped."""
    kernels = []
    for part_name, part, part_depth in parts:
        part_band = _chain(part, lambda loop: True)[:part_depth]
        body, grid, dims = _map_band(part_band, sizes, options, taken)
        kernels.append(GpuKernel(part_name, body, "parallel", options.block, grid, dims,
                                 temps, 0, None, variant))  # fmt: skip
    return kernels


def _split_kernels(
    name: str,
    split: SplitReduction,
    sizes: set[str],
    options: CudaOptions,
    error: str | None,
    taken: set[str],
) -> list[GpuKernel]:
    """The two passes of a split reduction, sharing its temporary; the second as a
    warp reduction where it applies (then its variant is "warp": lanes combine)."""
    temps = (split.temp,)
    first = _kernels([(f"{name}s1", split.first, split.first_depth)], "split", temps, sizes,
                     options, taken)  # fmt: skip
    second = _second_kernels(f"{name}s2", split.second, split.second_depth, temps, sizes,
                             options, error, taken)  # fmt: skip
    return first + second


def _second_kernels(
    name: str,
    second: Stmt,
    depth: int,
    temps: tuple[Buffer, ...],
    sizes: set[str],
    options: CudaOptions,
    error: str | None,
    taken: set[str],
) -> list[GpuKernel]:
    """The kernel of a second pass (`second`, a band of `depth` loops over the
    combination of partials): a warp reduction where it applies."""
    band = _chain(second, lambda loop: True)[:depth]
    warp = warp_reduce(band, error, 2**62, taken) if options.block % LANES == 0 else None
    if warp is None:
        part, variant = second, "split"
    else:
        part, depth, variant = warp.phase, warp.depth, "warp"
    return _kernels([(name, part, depth)], variant, temps, sizes, options, taken)


def _chain(stmt: Stmt, take: Callable[[For], bool]) -> list[For]:
    """The perfectly nested loops at `stmt`'s root, while `take` accepts them."""
    chain: list[For] = []
    while isinstance(stmt, For) and take(stmt):
        chain.append(stmt)
        stmt = stmt.body
    return chain


def _map_band(
    chain: list[For],
    sizes: set[str],
    options: CudaOptions,
    taken: set[str],
    collapse: bool = True,
) -> tuple[Stmt, tuple[Expr | None, Expr | None, Expr | None], tuple[tuple[str, str], ...]]:
    """The mapped nest of the band `chain` and its grid (see the module doc); without
    `collapse`, only the innermost loop maps to x."""
    j = len(chain) - 1
    while collapse and j > 0 and _independent(chain[j - 1 :]):
        j -= 1
    group, outer = chain[j:], chain[:j]
    inner_body = chain[-1].body
    # the thread loop: one loop as it is, or several collapsed into one index
    if len(group) == 1:
        loop = group[0]
        threads = extent(loop)
        body: Stmt = dataclasses.replace(loop, body=inner_body, kind=LoopKind.GPU_THREAD)
    else:
        body, threads = _collapse(group, inner_body, taken)
    grid_x = _size_only(_ceil_div(threads, options.block), sizes)
    if options.grid is not None:
        grid_x = Const(options.grid, I64) if grid_x is None else _min(grid_x, options.grid)
    grid: list[Expr | None] = [grid_x, Const(1, I64), Const(1, I64)]
    dims: list[tuple[str, str]] = []
    for k, loop in enumerate(reversed(outer)):
        if k < 2:
            dim = "yz"[k]
            grid[1 + k] = _size_only(extent(loop), sizes)
            dims.append((loop.var, dim))
            body = dataclasses.replace(loop, body=body, kind=LoopKind.GPU_BLOCK)
        else:
            body = dataclasses.replace(loop, body=body, kind=LoopKind.SERIAL)
    return body, (grid[0], grid[1], grid[2]), tuple(dims)


def _independent(group: list[For]) -> bool:
    """True when no loop of `group` has a bound that reads a variable of `group`."""
    names = {loop.var for loop in group}
    return not any((_free(loop.lo) | _free(loop.hi)) & names for loop in group)


def _collapse(group: list[For], body: Stmt, taken: set[str]) -> tuple[Stmt, Expr]:
    """`for t in 0:prod(extents)` (GPU_THREAD) binding each loop variable from t."""
    t = fresh("tcc_t", taken)
    exts = [fresh(f"tcc_e{k}", taken) for k in range(len(group))]
    stride: Expr | None = None  # product of the extents inside loop k
    lets: list[tuple[str, Expr]] = []
    for k in reversed(range(len(group))):
        loop = group[k]
        q: Expr = VarRef(t) if stride is None else PosDiv(VarRef(t), stride)
        if k > 0:
            q = PosMod(q, VarRef(exts[k]))
        offset = q if loop.step == 1 else Bin(BinOp.MUL, q, Const(loop.step, I64))
        zero = isinstance(loop.lo, Const) and loop.lo.value == 0
        lets.append((loop.var, offset if zero else Bin(BinOp.ADD, loop.lo, offset)))
        size = VarRef(exts[k])
        stride = size if stride is None else Bin(BinOp.MUL, size, stride)
    for var, value in lets:  # innermost first: wrap outermost last
        body = Let(var, value, body)
    assert stride is not None
    body = For(t, Const(0, I64), stride, 1, body, LoopKind.GPU_THREAD)
    total: Expr | None = None
    for k in reversed(range(len(group))):
        body = Let(exts[k], extent(group[k]), body)
        e = extent(group[k])
        total = e if total is None else Bin(BinOp.MUL, e, total)
    assert total is not None
    return body, total


def _ceil_div(e: Expr, d: int) -> Expr:
    return FloorDiv(Bin(BinOp.ADD, e, Const(d - 1, I64)), Const(d, I64))


def _min(e: Expr, limit: int) -> Expr:
    return Min(e, Const(limit, I64))


def _size_only(e: Expr, sizes: set[str]) -> Expr | None:
    return e if _free(e) <= sizes else None


# ------------------------------------------------------------ atomics


def _atomic_target(stmt: Stmt, error: str | None) -> Buffer | None:
    """The buffer T when every write of `stmt` is `T[i] = T[i] + v` (v not reading T)."""
    stores: list[Store] = []
    blocked: list[Node] = []
    loads: list[Load] = []

    class _Scan(Visitor):
        def visit_Store(self, node: Store) -> None:
            if node.buffer.name != error:
                stores.append(node)
            self.generic_visit(node)

        def visit_Load(self, node: Load) -> None:
            loads.append(node)
            self.generic_visit(node)

        def visit_Local(self, node: Local) -> None:
            blocked.append(node)

        def visit_Alloc(self, node: Alloc) -> None:
            blocked.append(node)

        def visit_Assign(self, node: Assign) -> None:
            blocked.append(node)

    _Scan().visit(stmt)
    if blocked or not stores:
        return None
    target = stores[0].buffer
    if target.dtype not in ATOMIC_DTYPES:
        return None
    own = [ld for ld in loads if ld.buffer.name == target.name]
    for s in stores:
        v = s.value
        if s.buffer != target or not (
            isinstance(v, Bin) and v.op is BinOp.ADD and v.a == Load(target, s.index)
        ):
            return None
    if len(own) != len(stores):  # T read anywhere but in its own `T[i] + v`
        return None
    return target


class _Atomics(Mutator):
    def __init__(self, target: Buffer) -> None:
        self.target = target

    def mutate_Store(self, node: Store) -> Stmt:
        if node.buffer != self.target:
            return node
        value = node.value
        assert isinstance(value, Bin)
        return AtomicAdd(node.buffer, node.index, value.b)


class _Serial(Mutator):
    """Every PARALLEL loop SERIAL (those the band mapping does not take run in a thread)."""

    def mutate_For(self, node: For) -> For:
        new = self.generic_mutate(node)
        if new.kind is LoopKind.PARALLEL:
            return dataclasses.replace(new, kind=LoopKind.SERIAL)
        if new.kind not in (LoopKind.SERIAL,):
            raise InternalError(f"GPU mapping: loop {node.var} of kind {node.kind.value}")
        return new


# ------------------------------------------------------------ names


def _free(e: Node) -> set[str]:
    names: set[str] = set()

    class _Names(Visitor):
        def visit_VarRef(self, node: VarRef) -> None:
            names.add(node.name)

    _Names().visit(e)
    return names


def _reads(e: Node) -> bool:
    """True when `e` loads from a buffer."""

    class _Loads(Visitor):
        found = False

        def visit_Load(self, node: Load) -> None:
            self.found = True

    v = _Loads()
    v.visit(e)
    return v.found


def _names(f: Function) -> set[str]:
    names = set(f.size_params) | {b.name for b in f.buffers}

    class _All(Visitor):
        def visit_VarRef(self, node: VarRef) -> None:
            names.add(node.name)

        def visit_For(self, node: For) -> None:
            names.add(node.var)
            self.generic_visit(node)

        def visit_Let(self, node: Let) -> None:
            names.add(node.var)
            self.generic_visit(node)

        def visit_Local(self, node: Local) -> None:
            names.add(node.var)
            self.generic_visit(node)

    _All().visit(f.body)
    return names


__all__ = ["AtomicAdd", "GpuKernel", "GpuProgram", "PosDiv", "PosMod", "map_to_gpu"]
