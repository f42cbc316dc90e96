"""Shared-memory tiling of contractions: block tiles, thread tiles and a K loop whose
operand tiles are staged in `__shared__` memory.

Requires: a parallel band (`cuda_map`'s chain of loops, steps 1, bounds free of the
band's variables) whose body is `Local acc = init { R; E }`: R a perfect nest of
reduction loops (steps 1, bounds of sizes only) around `acc = acc + X * Y`, E the
statements that use `acc` (the output's store), `init` of sizes only, acc float32 or
float64; X reads no band variable that Y reads beyond the *batch* ones, and both read
some (each operand is reused across the other's band variables).
Ensures:  `shared_gemm(band, options, taken)` is None, or a `SharedGemm` kernel body
computing the same values in the same order (each output's terms summed in R's order,
fused as `fma(X, Y, acc)` like the plain kernel), through the *GEMM view* of the
contraction:

- the band variables only Y reads (the side holding the band's innermost variable,
  the output's unit stride) are flattened into a column index `c` in 0:Nc, those
  only X reads into a row index `r` in 0:Mr, the reduction loops into `k` in 0:Kr,
  the rest (read by both or neither) into a batch index. Each (r, c) decodes back to
  the band's variables, each k to the reduction's: matmul is (m; n; k), bmm
  (b; m; n; k), conv2d `O(n, m, h, w) +=! I(n, c, h + kh, w + kw) * W1(m, c, kh, kw)`
  is rows m, columns (n, h, w), k over (c, kh, kw) -- the implicit GEMM;
- a block computes a BM x BN tile of (r, c) (blockIdx.y, blockIdx.x; the batch on
  blockIdx.z; all grid-stride, uniform in a block); its (BM / TM) x (BN / TN) threads
  each hold TM x TN accumulators in registers, rows `ty + i BM / TM` and columns
  `tx + j BN / TN` (a warp's lanes read neighbouring shared words and store
  neighbouring outputs);
- the K loop steps by BK: the block copies the tile X(r0:r0+BM, k0:k0+BK) into
  `Xs[BK][BM + 1]` and Y's into `Ys[BK][BN + 1]` (the footprint of the tile under the
  access maps of X and Y, in the GEMM view's coordinates), each thread a strided
  share, consecutive threads along the operand's unit-stride index (k when the load's
  last subscript reads only reduction variables, else the row/column): coalesced. The
  `+ 1` row padding spreads a k-fastest copy's stores over all 32 banks. Points
  outside (r >= Mr, k >= Kr) are stored as 0 and never read memory: exact bounds at
  every edge, any size. `__syncthreads()` before and after each tile's products;
- the epilogue E runs once per in-range output with `acc` its accumulator.

Tile sizes come from `CudaOptions.shared_tile` (the model default 128 x 128 x 8 with
8 x 8 a thread, 256 threads); the host runs the kernel where the GEMM view has at least
`CudaOptions.shared_min_outputs` outputs and as many terms as BK.

Worked example, matmul with BM = BN = 64, BK = 8, TM = TN = 4 (256 threads):

    __shared__ float Xs[8 * 65], Ys[8 * 65];
    for r0 = 64 blockIdx.y ..., c0 = 64 blockIdx.x ... {
      acc[4][4] = 0
      for k0 in 0:K:8 {
        for e = tid; e < 512; e += 256: kk = e % 8, rr = e / 8; r = r0 + rr, k = k0 + kk
          Xs[kk * 65 + rr] = r < M && k < K ? A[r, k] : 0     (A's unit stride is k)
        for e ...: rr = e % 64, kk = e / 64 ... Ys[kk * 65 + rr] = ... B[k, c] : 0
        __syncthreads()
        for kk in 0:8: a[i] = Xs[kk * 65 + ty + 16 i]; b[j] = Ys[kk * 65 + tx + 16 j]
                       acc[i][j] = fmaf(a[i], b[j], acc[i][j])
        __syncthreads() }
      for i, j: r = r0 + ty + 16 i, c = c0 + tx + 16 j; if r < M && c < N: C[r, c] = acc[i][j] }
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from compiler import loops as L
from compiler.cuda.cuda_nodes import GpuKernel, PosDiv, PosMod
from compiler.cuda.cuda_tile import extent, fresh
from compiler.loops.ir import var_names, walk

I64 = L.DType.INT64
FLOATS = (L.DType.FLOAT32, L.DType.FLOAT64)
PAD = 1  # words of padding a shared row

Dim = tuple[str, L.Expr, L.Expr]  # a loop's variable, lo, hi (step 1)


@dataclass(frozen=True, slots=True)
class SharedGemm(L.Stmt):
    """A contraction's kernel body staged through shared memory (module doc)."""

    x: L.Expr  # the row operand (reads rows, k, batch)
    y: L.Expr  # the column operand (reads columns, k, batch)
    init: L.Expr
    epilogue: L.Stmt  # reads `acc`, the band's variables
    acc: str
    dtype: L.DType
    batch: tuple[Dim, ...]
    rows: tuple[Dim, ...]
    cols: tuple[Dim, ...]
    red: tuple[Dim, ...]
    tile: tuple[int, int, int, int, int]  # BM, BN, BK, TM, TN
    x_k_fastest: bool
    y_k_fastest: bool
    names: tuple[str, ...]  # fresh C names (see `_NAMES`)

    def emit_cuda(self, em: Any) -> None:
        """Write the kernel body with `em`, a `cuda.cuda._KernelEmitter`."""
        _emit(self, em)

    def work(self, env: dict[str, int]) -> tuple[int, int, set[str]]:
        """(threads, FLOPs, buffers touched) at the sizes `env` (`cuda_report`): the
        launched threads of the covering grid, two FLOPs a term (an FMA) and the
        epilogue's operations once an output."""
        from compiler.cuda.cuda_options import MAX_GRID_X, MAX_GRID_YZ

        mr, nc, kr, bz = (int(L.eval_expr(e, dict(env))) for e in gemm_extents(self))
        bm, bn = self.tile[0], self.tile[1]
        blocks = (
            min(-(-nc // bn), MAX_GRID_X) * min(-(-mr // bm), MAX_GRID_YZ) * min(bz, MAX_GRID_YZ)
        )
        ops = sum(1 for n in walk(self.epilogue) if isinstance(n, L.Bin) and n.dtype.is_float)
        touched = {n.buffer.name for n in walk(self) if isinstance(n, (L.Load, L.Store))}
        outputs = mr * nc * bz
        return blocks * threads(self.tile), 2 * outputs * kr + ops * outputs, touched


_NAMES = ("Xs", "Ys", "Mr", "Nc", "Kr", "Bz", "tid", "tx", "ty", "bz", "r0", "c0", "k0",
          "e", "rr", "kk", "r", "c", "k", "acc_t", "a_t", "b_t", "i", "j")  # fmt: skip


def threads(tile: tuple[int, int, int, int, int]) -> int:
    bm, bn, _, tm, tn = tile
    return (bm // tm) * (bn // tn)


def shared_bytes(tile: tuple[int, int, int, int, int], dtype: L.DType) -> int:
    """The shared memory of a block: the two padded operand tiles."""
    bm, bn, bk, _, _ = tile
    return bk * (bm + PAD + bn + PAD) * (dtype.bits // 8)


def shared_gemm(
    band: list[L.For], tile: tuple[int, int, int, int, int], taken: set[str]
) -> SharedGemm | None:
    """The SharedGemm body of the band (module doc), or None where it does not apply."""
    if not band or any(loop.step != 1 for loop in band):
        return None
    band_vars = {loop.var for loop in band}
    if any(var_names(loop.lo, loop.hi) & band_vars for loop in band):
        return None
    local = band[-1].body
    if not isinstance(local, L.Local) or local.dtype not in FLOATS:
        return None
    if var_names(local.init) & band_vars:
        return None
    body = local.body
    stmts = body.stmts if isinstance(body, L.Block) else (body,)
    if not stmts or not isinstance(stmts[0], L.For):
        return None
    red: list[L.For] = []
    node: L.Stmt = stmts[0]
    while isinstance(node, L.For):
        red.append(node)
        node = node.body
    red_vars = {loop.var for loop in red}
    if any(loop.step != 1 or var_names(loop.lo, loop.hi) & (band_vars | red_vars) for loop in red):
        return None
    term = _term(node, local.var, local.dtype)
    epilogue = stmts[1:]
    if term is None or not epilogue or any(isinstance(n, L.For) for s in epilogue for n in walk(s)):
        return None
    if any(isinstance(n, L.Assign) for s in epilogue for n in walk(s)):
        return None
    a, b = term
    inner = band[-1].var
    sides = [var_names(a) & band_vars, var_names(b) & band_vars]
    if local.var in var_names(a) | var_names(b):
        return None
    if inner in sides[0] and inner not in sides[1]:
        a, b = b, a
        sides.reverse()
    elif not (inner in sides[1] and inner not in sides[0]):
        return None
    rows_vars, cols_vars = sides[0] - sides[1], sides[1] - sides[0]
    if not rows_vars or not cols_vars:
        return None
    dims = [(loop.var, loop.lo, loop.hi) for loop in band]
    rows = tuple(d for d in dims if d[0] in rows_vars)
    cols = tuple(d for d in dims if d[0] in cols_vars)
    batch = tuple(d for d in dims if d[0] not in rows_vars | cols_vars)
    redd = tuple((loop.var, loop.lo, loop.hi) for loop in red)
    names = tuple(fresh(f"tcc_{n}", taken) for n in _NAMES)
    epi = epilogue[0] if len(epilogue) == 1 else L.Block(tuple(epilogue))
    return SharedGemm(a, b, local.init, epi, local.var, local.dtype, batch, rows, cols, redd,
                      tile, _k_fastest(a, red_vars), _k_fastest(b, red_vars), names)  # fmt: skip


def _term(node: L.Stmt, acc: str, dtype: L.DType) -> tuple[L.Expr, L.Expr] | None:
    """(X, Y) of `acc = acc + X * Y` (either order of the sum), else None."""
    if not (isinstance(node, L.Assign) and node.var == acc):
        return None
    v = node.value
    if not (isinstance(v, L.Bin) and v.op is L.BinOp.ADD and v.dtype == dtype):
        return None
    me = L.VarRef(acc, dtype)
    term = v.b if v.a == me else v.a if v.b == me else None
    if not (isinstance(term, L.Bin) and term.op is L.BinOp.MUL and term.dtype == dtype):
        return None
    return term.a, term.b


def _k_fastest(operand: L.Expr, red_vars: set[str]) -> bool:
    """Whether consecutive threads of a copy should take consecutive k (the operand's
    first load's last subscript reads reduction variables only)."""
    for node in walk(operand):
        if isinstance(node, L.Load) and node.index:
            names = var_names(node.index[-1])
            return bool(names) and names <= red_vars
    return False


def gemm_extents(g: SharedGemm) -> tuple[L.Expr, L.Expr, L.Expr, L.Expr]:
    """(Mr, Nc, Kr, batch) as int64 expressions of the sizes."""
    return tuple(_product(d) for d in (g.rows, g.cols, g.red, g.batch))  # type: ignore[return-value]


def _product(dims: tuple[Dim, ...]) -> L.Expr:
    total: L.Expr = L.Const(1, I64)
    for d in dims:
        e = _extent(d)
        total = (
            e if isinstance(total, L.Const) and total.value == 1 else L.Bin(L.BinOp.MUL, total, e)
        )
    return total


def _extent(d: Dim) -> L.Expr:
    return extent(L.For(d[0], d[1], d[2], 1, L.Block(())))


def _decode(dims: tuple[Dim, ...], flat: str, body: L.Stmt) -> L.Stmt:
    """`body` under Lets binding each of `dims`' variables from the flat index `flat`
    (row-major: the last dim varies fastest)."""

    stride: L.Expr | None = None
    lets: list[tuple[str, L.Expr]] = []
    for k in reversed(range(len(dims))):
        var, lo, _ = dims[k]
        q: L.Expr = L.VarRef(flat) if stride is None else PosDiv(L.VarRef(flat), stride)
        if k > 0:
            q = PosMod(q, _extent(dims[k]))
        zero = isinstance(lo, L.Const) and lo.value == 0
        lets.append((var, q if zero else L.Bin(L.BinOp.ADD, lo, q)))
        e = _extent(dims[k])
        stride = e if stride is None else L.Bin(L.BinOp.MUL, e, stride)
    for var, value in lets:
        body = L.Let(var, value, body)
    return body


def _emit(g: SharedGemm, em: Any) -> None:
    n = dict(zip(_NAMES, (em.name(x) for x in g.names), strict=True))
    bm, bn, bk, tm, tn = g.tile
    ct = _ctype(g.dtype)
    ldx, ldy = bm + PAD, bn + PAD
    mr, nc, kr, bz = gemm_extents(g)
    w = em.w
    w.line(f"__shared__ {ct} {n['Xs']}[{bk * ldx}];")
    w.line(f"__shared__ {ct} {n['Ys']}[{bk * ldy}];")
    for key, value in (("Mr", mr), ("Nc", nc), ("Kr", kr), ("Bz", bz)):
        w.line(f"const long long {n[key]} = {em.expr(value)};")
    w.line(f"const int {n['tid']} = threadIdx.x;")
    w.line(f"const int {n['tx']} = {n['tid']} % {bn // tn}, {n['ty']} = {n['tid']} / {bn // tn};")
    zero = L.Const(0.0, g.dtype)
    xs = L.Buffer(g.names[0], g.dtype, (L.Const(bk * ldx, I64),), L.Role.TEMP)
    ys = L.Buffer(g.names[1], g.dtype, (L.Const(bk * ldy, I64),), L.Role.TEMP)
    with em._scope(
        f"for (long long {n['bz']} = blockIdx.z; {n['bz']} < {n['Bz']}; {n['bz']} += gridDim.z)"
    ):
        r0, c0 = n["r0"], n["c0"]
        with (
            em._scope(f"for (long long {r0} = (long long)blockIdx.y * {bm}; {r0} < {n['Mr']}; "
                      f"{r0} += (long long)gridDim.y * {bm})"),
            em._scope(f"for (long long {c0} = (long long)blockIdx.x * {bn}; {c0} < {n['Nc']}; "
                      f"{c0} += (long long)gridDim.x * {bn})"),
        ):  # fmt: skip
            acc, init = n["acc_t"], em.expr(g.init)
            w.line(f"{ct} {acc}[{tm}][{tn}];")
            w.line("#pragma unroll")
            w.line(f"for (int {n['i']} = 0; {n['i']} < {tm}; ++{n['i']}) {{")
            w.line("  #pragma unroll")
            w.line(
                f"  for (int {n['j']} = 0; {n['j']} < {tn}; ++{n['j']}) {acc}[{n['i']}][{n['j']}] = {init};"
            )
            w.line("}")
            k0 = n["k0"]
            with em._scope(f"for (long long {k0} = 0; {k0} < {n['Kr']}; {k0} += {bk})"):
                for buf, rows, base, span, ld, fast, operand in (
                    (xs, g.rows, r0, bm, ldx, g.x_k_fastest, g.x),
                    (ys, g.cols, c0, bn, ldy, g.y_k_fastest, g.y),
                ):
                    _copy(g, em, n, buf, rows, base, span, ld, fast, operand, zero)
                w.line("__syncthreads();")
                fma = "fmaf" if g.dtype is L.DType.FLOAT32 else "fma"
                kk = n["kk"]
                w.line("#pragma unroll")
                with em._scope(f"for (int {kk} = 0; {kk} < {bk}; ++{kk})"):
                    a, b = n["a_t"], n["b_t"]
                    w.line(f"{ct} {a}[{tm}], {b}[{tn}];")
                    w.line("#pragma unroll")
                    w.line(f"for (int {n['i']} = 0; {n['i']} < {tm}; ++{n['i']}) "
                           f"{a}[{n['i']}] = {n['Xs']}[{kk} * {ldx} + {n['ty']} + {n['i']} * {bm // tm}];")  # fmt: skip
                    w.line("#pragma unroll")
                    w.line(f"for (int {n['j']} = 0; {n['j']} < {tn}; ++{n['j']}) "
                           f"{b}[{n['j']}] = {n['Ys']}[{kk} * {ldy} + {n['tx']} + {n['j']} * {bn // tn}];")  # fmt: skip
                    w.line("#pragma unroll")
                    w.line(f"for (int {n['i']} = 0; {n['i']} < {tm}; ++{n['i']}) {{")
                    w.line("  #pragma unroll")
                    w.line(f"  for (int {n['j']} = 0; {n['j']} < {tn}; ++{n['j']}) "
                           f"{acc}[{n['i']}][{n['j']}] = {fma}({a}[{n['i']}], {b}[{n['j']}], "
                           f"{acc}[{n['i']}][{n['j']}]);")  # fmt: skip
                    w.line("}")
                w.line("__syncthreads();")
            _epilogue(g, em, n)


def shared_variant(
    name: str, band: list[L.For], sizes: set[str], options: Any, taken: set[str]
) -> tuple[L.Expr, list[Any]] | None:
    """(when, [kernel]) of the band's shared-memory kernel (`cuda_map`'s variants), or
    None: off (`CudaOptions.shared_memory`), not a contraction of the module doc's
    form, or extents that read more than the sizes."""
    from compiler.cuda.cuda_options import MAX_GRID_X, MAX_GRID_YZ

    if not options.shared_memory or not band:
        return None
    g = shared_gemm(band, options.shared_tile, taken)
    if g is None:
        return None
    mr, nc, kr, bz = gemm_extents(g)
    if not var_names(mr, nc, kr, bz) <= sizes:
        return None
    bm, bn = g.tile[0], g.tile[1]
    grid = (
        L.Min(_ceil(nc, bn), L.Const(MAX_GRID_X, I64)),
        L.Min(_ceil(mr, bm), L.Const(MAX_GRID_YZ, I64)),
        L.Min(bz, L.Const(MAX_GRID_YZ, I64)),
    )
    kernel = GpuKernel(f"{name}m", g, "parallel", threads(g.tile), grid, (), (), 0, None, "shared")
    outputs = L.Bin(L.BinOp.MUL, mr, nc)
    when = L.Bin(L.BinOp.SUB, outputs, L.Const(options.shared_min_outputs - 1, I64))
    return when, [kernel]


def _ceil(e: L.Expr, d: int) -> L.Expr:
    return L.FloorDiv(L.Bin(L.BinOp.ADD, e, L.Const(d - 1, I64)), L.Const(d, I64))


def _copy(g: SharedGemm, em: Any, n: dict[str, str], buf: L.Buffer, dims: tuple[Dim, ...],
          base: str, span: int, ld: int, k_fast: bool, operand: L.Expr, zero: L.Expr) -> None:  # fmt: skip
    """The block's cooperative copy of one operand tile into shared memory."""
    _, _, bk, _, _ = g.tile
    nt = threads(g.tile)
    e, rr, kk = n["e"], n["rr"], n["kk"]
    total = span * bk
    em.w.line("#pragma unroll")
    with em._scope(f"for (int {e} = {n['tid']}; {e} < {total}; {e} += {nt})"):
        if k_fast:
            em.w.line(f"const long long {kk} = {e} % {bk}, {rr} = {e} / {bk};")
        else:
            em.w.line(f"const long long {rr} = {e} % {span}, {kk} = {e} / {span};")
        r, k = g.names[16], g.names[18]  # "r", "k"
        em.w.line(f"const long long {em.name(r)} = {base} + {rr}, {em.name(k)} = {n['k0']} + {kk};")
        inside = L.Bin(
            L.BinOp.AND,
            L.Bin(L.BinOp.LT, L.VarRef(r), L.VarRef(g.names[2] if base == n["r0"] else g.names[3])),
            L.Bin(L.BinOp.LT, L.VarRef(k), L.VarRef(g.names[4])),
        )
        at = L.Bin(L.BinOp.ADD, L.Bin(L.BinOp.MUL, L.VarRef(g.names[15]), L.Const(ld, I64)),
                   L.VarRef(g.names[14]))  # fmt: skip
        store = L.Store(buf, (at,), L.Select(inside, operand, zero))
        em.stmt(_decode(g.batch, g.names[9], _decode(dims, r, _decode(g.red, k, store))))


def _epilogue(g: SharedGemm, em: Any, n: dict[str, str]) -> None:
    """Each thread's in-range outputs: `acc` bound to the accumulator, then E."""
    bm, bn, _, tm, tn = g.tile
    i, j = n["i"], n["j"]
    em.w.line("#pragma unroll")
    with em._scope(f"for (int {i} = 0; {i} < {tm}; ++{i})"):
        em.w.line("#pragma unroll")
        with em._scope(f"for (int {j} = 0; {j} < {tn}; ++{j})"):
            r, c = g.names[16], g.names[17]
            em.w.line(f"const long long {em.name(r)} = {n['r0']} + {n['ty']} + {i} * {bm // tm};")
            em.w.line(f"const long long {em.name(c)} = {n['c0']} + {n['tx']} + {j} * {bn // tn};")
            with em._scope(f"if ({em.name(r)} < {n['Mr']} && {em.name(c)} < {n['Nc']})"):
                em.w.line(f"const {_ctype(g.dtype)} {em.name(g.acc)} = {n['acc_t']}[{i}][{j}];")
                body = _decode(
                    g.batch, g.names[9], _decode(g.rows, r, _decode(g.cols, c, g.epilogue))
                )
                em.stmt(body)


def _ctype(dtype: L.DType) -> str:
    return "float" if dtype is L.DType.FLOAT32 else "double"


__all__ = [
    "PAD",
    "SharedGemm",
    "gemm_extents",
    "shared_bytes",
    "shared_gemm",
    "shared_variant",
    "threads",
]
