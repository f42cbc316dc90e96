"""Compilation options: one frozen dataclass, validated when it is made.

    Options()                           all defaults: the CPU model chooses the schedule
    Options(threads=2)                  run parallel loops on 2 threads
    Options(innermost=None)             the literal order: output variables, then the
                                        reduction, accumulated in a register
    Options(innermost="n", unroll=4, block=4)   what the model picks for matmul

CPU schedule fields (the native targets read them; `poly.schedule` applies them, see
`compiler/cpu/cpu_model.py` for what "auto" means):

- `innermost`: `"auto"` (default) lets the model choose, per reduction statement, a
  left-hand-side variable to run innermost, *below* the reduction loops, accumulating
  into the output in memory (so LLVM vectorises the unit-stride dimension); `None`
  keeps the literal order (left-hand-side variables, then the reduction loops with a
  register accumulator); a variable name asks for that variable in every statement
  where it is a left-hand-side variable and the move is legal.
- `unroll`: unroll-and-jam factor of the innermost reduction loop into the innermost
  loop (1: none); None lets the model choose. Only for statements scheduled with an
  innermost variable.
- `block`: register blocking: unroll-and-jam factor of the output loop just above the
  reduction loops (1: none); None lets the model choose. Same condition.
- `tile`: cache tiling of a statement in memory form (the same condition): one tile
  size per loop of its nest, outermost first, in the order `tcc compile --emit loops`
  prints the untiled nest (the outer output loops, the reduction loops, the innermost
  loop); 1 or a missing entry leaves a loop untiled; only the first reduction loop
  may be tiled (a later one's entry is ignored: it would reorder each element's sum).
  `()` tiles nothing; None lets the model choose (`compiler/cpu/tiling.py`). The tile
  loops run above the point loops, the first output loop's outermost (parallel);
  sizes need not divide the extents (partial tiles get `min` bounds). A dot-product
  nest (a register sum per output: `Y(b, o) +=! X(b, i) * W(o, i)`) takes the entries
  of its output loops (not of its reduction loop).
- `register_tile`: register tiling of a statement in memory form: the innermost loop
  moves above the reduction loops in steps of this many lanes, the tile of outputs
  (block x lanes) accumulates in registers for the whole reduction
  (`compiler/cpu/regtile.py`); 1: off; None lets the model choose. A tile holds at
  most `MAX_TILE_ELEMENTS` (256) accumulators: with a larger block x lanes the
  model lowers the block (to 256 // lanes rows).
- `vector_bits`: the width of the vector registers the CPU model sizes register tiles
  and packed cache tiles for (128, 256 or 512); None (default) reads the host's (512
  with AVX-512, 256 with AVX2 or AVX, else 128). Pinning it makes the schedule the same on every host
  (`tcc compile --emit loops` shows it).
- `fuse`: True (default) fuses adjacent loop nests with equal bounds where every
  element's computation stays the same (`compiler/loops/fuse.py`): softmax's row
  maximum, sum and normalisation run as one parallel loop over rows; and it computes a
  pointwise statement inside a later reduction's nest over the same domain
  (`compiler/poly/schedule.py`, companions: the gradient of `C(i) +=! exp(A(i, j)) *
  b(j)` reads `A` and computes `exp` once for `A_grad` and `b_grad`); False keeps one
  nest per statement (`tcc compile --emit loops` shows either).
- `merge`: True (default) merges, before the CPU model chooses orders and tiles, two
  adjacent loops `h, w` of a statement into one loop `hw` over `H * W` when every
  access uses them as two adjacent whole dimensions (`I(n, c, h, w)`, `O(n, m, h, w)`,
  no offset or window on them), so a short row (`W` = 14) no longer defeats the
  vector and register tiles (`compiler/cpu/merge.py`); False keeps one loop each.
- `factor`: True (default) splits a scatter that is not injective and has reduction
  variables of its own (`O(n, m, 2 * h + kh, 2 * w + kw) +=! I(n, c, h, w) * W1(c, m,
  kh, kw)`) into its contraction over them into a scratch tensor, register-tiled like a
  matmul, and the scatter of that tensor (`compiler/cpu/factor.py`); False keeps the
  reduction inside the partial scatter.
- `gather`: what the gather pass does with an affine scatter (a gradient's
  `I_grad(n, c, 2 * h + kh, 2 * w + kw) += ...`): `"full"` rewrites every one as a
  gather (one writer per output element: parallel over the whole output); `"auto"`
  (default) keeps as a *partial scatter* each reduction whose left-hand side has plain
  variables (`n`, `c`: a whole subscript each) and whose gather would need
  divisibility reasoning (a stride or dilation: floor-divided ranges, case splits,
  seconds of isl time), which then runs in parallel over the plain variables and
  sequentially inside, accumulating in memory; `"partial"` keeps every reduction
  scatter with plain variables (`compiler/poly/partial.py`).
- `per_statement`: overrides of the per-statement fields (`PER_STATEMENT`: innermost,
  unroll, block, tile, register_tile, vector_bits) for single statements, as
  `((index, Options(...)), ...)`; `index` counts the statements of the def the schedule
  receives (the def's own, in textual order, unless the gather pass split a scatter),
  from 0; an override's other fields must stay at their defaults (they apply to the
  whole def). `Options(tile=(), per_statement=((1, Options(innermost=None)),))`: no
  tiling anywhere, statement 1 in the literal order. `()` (default): none.
- `threads`: the number of threads each statement's outermost parallel loop runs on
  (the CPU runtime's native pool, when the loop has enough work:
  `compiler.cpu.llvm_parallel`); None means one per core (`os.cpu_count()`, read
  once by `compiler.cpu.runtime`).

`Options` are the CPU ("llvm") target's options; another target declares its own
options class (`compiler.codegen.target`).

A leaf module (imports only the diagnostics), so every layer may read it. Options
travel as a value; environment variables are read only by the CLI (STYLE.md rule 16).
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace

from compiler.diagnostics import OptionsError

AUTO = "auto"
MAX_FACTOR = 16
MAX_LANES = 64
MAX_TILE = 1 << 20
VECTOR_BITS = (128, 256, 512)
GATHER_MODES = ("full", AUTO, "partial")
# the fields `Options.per_statement` may set for one statement (the schedule reads them
# per statement; the others apply to the whole def)
PER_STATEMENT = ("innermost", "unroll", "block", "tile", "register_tile", "vector_bits")


@dataclass(frozen=True, slots=True)
class Options:
    """How to compile and run a def on a native target (frozen; validated when made).

    Every default leaves the choice to the CPU model (`compiler/cpu/cpu_model.py`); the
    module doc and the documentation's "Schedule options" page say what each field does.

    Attributes:
        threads (int | None): threads for each statement's outermost parallel loop;
            None: every core (`os.cpu_count()`).
        innermost (str | None): `"auto"` (the model picks, per reduction statement, an
            output variable to run below the reduction loops), None (the literal order),
            or an index variable's name.
        unroll (int | None): unroll-and-jam factor of the innermost reduction loop,
            1..16 (1: off); None: the model's.
        block (int | None): register blocking of an output loop, 1..16; None: the
            model's.
        tile (tuple[int, ...] | None): cache tile sizes, one per loop of a statement's
            nest, outermost first; `()`: off; None: the model's.
        register_tile (int | None): lanes of a register tile, 1..64 (1: off); None: the
            model's.
        fuse (bool): fuse adjacent loop nests with equal bounds.
        gather (str): `"auto"`, `"full"` or `"partial"`: what the gather pass does
            with an affine scatter of a gradient.
        vector_bits (int | None): 128, 256 or 512, the vector width the model sizes
            tiles for; None: the host's.
        merge (bool): merge adjacent loops that walk whole, contiguous dimensions in
            every access (`h, w` -> `hw`) before the CPU model's choices.
        factor (bool): split a scatter's contraction (`O(2 * h + kh) +=! I(c, h) *
            W(c, kh)`) into a scratch tensor that the scatter then adds (`cpu.factor`).
        per_statement (tuple[tuple[int, Options], ...]): per-statement overrides of
            the `PER_STATEMENT` fields, by statement index (see the module doc).

    Raises:
        OptionsError: a value out of range or of the wrong type, with a hint.

    Example:
        ```python
        k = compiler.define(src, options=compiler.Options(threads=1, innermost=None))
        ```
    """

    threads: int | None = None
    innermost: str | None = AUTO
    unroll: int | None = None
    block: int | None = None
    tile: tuple[int, ...] | None = None
    register_tile: int | None = None  # lanes of the register tile (cpu/regtile.py)
    fuse: bool = True  # fuse sibling loops with equal bounds (compiler/loops/fuse.py)
    gather: str = AUTO  # "auto" | "full" | "partial": scatters (poly/partial.py)
    vector_bits: int | None = None  # vector register width the CPU model assumes
    merge: bool = True  # merge adjacent whole-dimension loops (compiler/cpu/merge.py)
    factor: bool = True  # a scatter's contraction into a scratch tensor (cpu/factor.py)
    per_statement: tuple[tuple[int, Options], ...] = ()  # (statement, overrides)

    def __post_init__(self) -> None:
        t = self.threads
        if t is not None and (isinstance(t, bool) or not isinstance(t, int) or t < 1):
            raise OptionsError(
                f"Options.threads must be a positive int or None, got {t!r}",
                hint="Options(threads=None) uses every core",
            )
        if self.innermost is not None and (
            not isinstance(self.innermost, str) or not self.innermost.isidentifier()
        ):
            raise OptionsError(
                f"Options.innermost must be 'auto', None or an index variable's name, "
                f"got {self.innermost!r}",
                hint="Options(innermost='auto') lets the CPU model choose",
            )
        for field in ("unroll", "block"):
            _check_factor(field, getattr(self, field))
        _check_factor("register_tile", self.register_tile, MAX_LANES)
        if not isinstance(self.merge, bool):
            raise OptionsError(
                f"Options.merge must be True or False, got {self.merge!r}",
                hint="Options(merge=False) keeps one loop per index variable",
            )
        if not isinstance(self.factor, bool):
            raise OptionsError(
                f"Options.factor must be True or False, got {self.factor!r}",
                hint="Options(factor=False) keeps a scatter's reduction inside it",
            )
        if not isinstance(self.fuse, bool):
            raise OptionsError(
                f"Options.fuse must be True or False, got {self.fuse!r}",
                hint="Options(fuse=False) keeps one loop nest per statement",
            )
        _check_tile(self.tile)
        if self.gather not in GATHER_MODES:
            raise OptionsError(
                f"Options.gather must be one of {', '.join(map(repr, GATHER_MODES))}, "
                f"got {self.gather!r}",
                hint="Options(gather='full') rewrites every affine scatter as a gather",
            )
        v = self.vector_bits
        if v is not None and (type(v) is not int or v not in VECTOR_BITS):
            raise OptionsError(
                f"Options.vector_bits must be None or one of "
                f"{', '.join(map(str, VECTOR_BITS))}, got {v!r}",
                hint="Options(vector_bits=None) reads the host's vector width",
            )
        if self.per_statement != ():
            _check_per_statement(self.per_statement)

    def for_statement(self, index: int) -> Options:
        """The options statement `index` is scheduled with: these, with the
        `PER_STATEMENT` fields of its `per_statement` entry (if any), and no entries."""
        if not self.per_statement:
            return self
        found = dict(self.per_statement).get(index)
        base = replace(self, per_statement=())
        if found is None:
            return base
        return replace(base, **{f: getattr(found, f) for f in PER_STATEMENT})


def _check_per_statement(value: object) -> None:
    hint = "Options(per_statement=((1, Options(innermost=None)),)) reorders statement 1 only"
    if not isinstance(value, tuple) or not all(
        isinstance(e, tuple)
        and len(e) == 2
        and type(e[0]) is int
        and e[0] >= 0
        and isinstance(e[1], Options)
        for e in value
    ):
        raise OptionsError(
            f"Options.per_statement must be a tuple of (statement index, Options) pairs, "
            f"got {value!r}",
            hint=hint,
        )
    indices = [k for k, _ in value]
    if len(set(indices)) != len(indices):
        raise OptionsError(f"Options.per_statement names a statement twice: {indices}", hint=hint)
    for k, o in value:
        if o.per_statement:
            raise OptionsError(
                f"Options.per_statement: the entry of statement {k} has entries of its own",
                hint=hint,
            )
        whole = [
            f.name
            for f in fields(Options)
            if f.name not in PER_STATEMENT and getattr(o, f.name) != f.default
        ]
        if whole:
            raise OptionsError(
                f"Options.per_statement: the entry of statement {k} sets "
                f"{', '.join(whole)}, which apply to the whole def",
                hint=f"set {whole[0]} on the outer Options; entries take only "
                f"{', '.join(PER_STATEMENT)}",
            )


def _check_factor(field: str, value: object, limit: int = MAX_FACTOR) -> None:
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= limit:
        raise OptionsError(
            f"Options.{field} must be None or an int in 1..{limit}, got {value!r}",
            hint=f"Options({field}=1) turns it off; None lets the model choose",
        )


def _check_tile(value: object) -> None:
    if value is None:
        return
    if not isinstance(value, tuple) or not all(
        isinstance(t, int) and not isinstance(t, bool) and 1 <= t <= MAX_TILE for t in value
    ):
        raise OptionsError(
            f"Options.tile must be None or a tuple of ints in 1..{MAX_TILE}, got {value!r}",
            hint="Options(tile=()) turns tiling off; Options(tile=(64, 256, 128)) tiles "
            "matmul's m, k, n loops",
        )


def as_options(value: object) -> Options:
    """`value` as Options: None gives the defaults; anything else is an OptionsError."""
    if value is None:
        return Options()
    if isinstance(value, Options):
        return value
    raise OptionsError(
        f"options= must be a compiler.options.Options, got {type(value).__name__}",
        hint="pass options=Options(threads=2)",
    )


__all__ = [
    "AUTO",
    "GATHER_MODES",
    "MAX_FACTOR",
    "MAX_TILE",
    "PER_STATEMENT",
    "Options",
    "as_options",
]
