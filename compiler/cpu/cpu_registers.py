"""The vector registers of the host, as the CPU schedule model sizes register tiles.

Requires: `Options` (its `vector_bits`, else the host's: `host_vector_bits`).
Ensures:  `vector_bits(options)`, and from it the rows of a register tile
(`tile_rows`), the accumulators and lanes of a packed panel's tile (`packed_vectors`,
`packed_lanes`), the fewest rows for which transposed panels pay (`panel_rows`) and
the cache tile of a packed nest (`packed_cache_tile`); `cpu.cpu_model`,
`poly.schedule` and `cpu.tiling` use them. Each figure is a measurement, named where
it is set.
"""

from __future__ import annotations

import functools

from compiler.options import Options

BLOCK = 4  # register-blocking factor of an output loop
ACCUMULATORS = 8  # vector accumulators of a register tile: FMA latency x FMA units
PACKED_ACCUMULATORS = 16  # the same for a packed panel's tile with 32 vector registers
PACKED_ACCUMULATORS_16 = 12  # ... and with 16 (AVX2): 12 + 2 panel vectors + 1 broadcast
MAX_BLOCK = 8  # the most rows the model gives a register tile
MAX_TILE_ELEMENTS = 256  # block x lanes of one register tile (its scalar locals)
PANEL_ROWS = 256  # transposed panels pay from this many rows (`panel_rows`)
PANEL_ROWS_16 = 64  # ... with 16 vector registers (AVX2)
PACKED_ROWS = 128  # rows of the output per cache tile of a packed nest (`packed_cache_tile`)
PACKED_STEPS = 128  # reduction steps per cache tile of a packed nest: a 64-lane panel is 32 KiB
PACKED_ROW_VECTORS = 4  # vectors a row of a packed panel's tile with 32 vector registers
PACKED_ROW_VECTORS_16 = 2  # ... and with 16 (AVX2)
PACKED_ROWS_16 = 48  # ... with 16 vector registers (AVX2)
PACKED_STEPS_16 = 384  # ... with AVX2: a 16-lane panel is 24 KiB


def vector_bits(options: Options) -> int:
    """The vector register width the model sizes tiles for: `Options.vector_bits`, or
    the host's."""
    return options.vector_bits if options.vector_bits is not None else host_vector_bits()


@functools.cache
def host_vector_bits() -> int:
    """512 on a host with AVX-512 (the LLVM back end's functions ask for 512-bit
    vectors there, `cpu.llvm_emit`), 256 with AVX or AVX2, else 128."""
    import llvmlite.binding as llvm

    features = llvm.get_host_cpu_features()
    if features.get("avx512f"):
        return 512
    return 256 if features.get("avx") else 128


def tile_rows(lanes: int, floats: int, block: int | None, vectors: int = ACCUMULATORS) -> int:
    """The rows (jammed block) of a register tile `lanes` wide: `Options.block`, else
    enough rows that the tile has `vectors` vectors of `floats` float32 lanes
    (BLOCK = 4 rows of 16 lanes with AVX2, 8 with AVX-512: with 4 rows of one 512-bit
    vector, 4 FMA chains kept the two FMA units half busy; measured, 2 threads,
    conv2d N8 C16 32^2 M16 3x3 0.41 -> 0.30 ms, torch 0.29); at most
    `MAX_TILE_ELEMENTS` accumulators in all (a tile's locals nest in the loop IR)."""
    if block is None:
        block = min(MAX_BLOCK, max(BLOCK, -(-vectors * floats // lanes)))
    return max(1, min(block, MAX_TILE_ELEMENTS // lanes))


def packed_vectors(floats: int) -> int:
    """The vector accumulators of a packed panel's tile, for vectors of `floats`
    float32 lanes: `PACKED_ACCUMULATORS` (16 of AVX-512's 32 registers: 4 rows of 64
    lanes, `packed_lanes`; 8 rows of 32 lanes before), `PACKED_ACCUMULATORS_16` (12 of
    AVX2's 16: 6 rows of 16 lanes; the other 3 hold two panel vectors and a broadcast
    row element; measured on an AMD EPYC (Zen 3), float32 matmul 512^3 against NumPy,
    2 threads 1.56x -> 1.27x, 1 thread 1.58x -> 1.18x; 1024^3, 2 threads 1.88x ->
    1.69x), else `ACCUMULATORS`."""
    if floats >= 16:
        return PACKED_ACCUMULATORS
    return PACKED_ACCUMULATORS_16 if floats == 8 else ACCUMULATORS


def packed_lanes(floats: int) -> int:
    """The lanes (columns) of a packed panel's tile, for vectors of `floats` float32
    lanes: `PACKED_ROW_VECTORS` vectors a row with AVX-512 (4 rows of 64 lanes for its
    16 accumulators; a row of 4 vectors loads 4 panel vectors and broadcasts 4 row
    elements per 16 FMAs where 8 rows of 32 lanes broadcast 8), with the panel's
    `PACKED_STEPS` halved to 128 so that its 64 lanes still fit a 48 KiB L1 in 32 KiB.
    Measured, 2 threads, same process, paired rounds of 8x32/256 against 4x64/128,
    float32 against torch (medians of the rounds' ratios), forward / gradient:
    512^3 1.39 / 1.37 -> 1.27 / 1.32 and 1.35 / 1.30 -> 1.21 / 1.24; 1024^3 1.35 /
    1.43 -> 1.29 / 1.35; 256x1024x1024 1.30 / 1.46 -> 1.17 / 1.34; but 97x331x211 1.91 /
    1.88 -> 2.06 / 1.96 and 128x512x256 1.52 / 1.40 -> 1.46 / 1.48 (a 64-wide tile leaves
    wider remainder columns, 128 steps twice the parallel regions). 4x64 with 256 steps
    (a 64 KiB panel) ran as 8x32 (0.89-1.09x); 6x64 tiles ran slower (1.50 against
    1.39 at 512^3 with 128 steps). `PACKED_ROW_VECTORS_16` with AVX2 (Zen 3
    measurements at `packed_vectors`)."""
    if floats >= 16:
        return PACKED_ROW_VECTORS * floats
    return PACKED_ROW_VECTORS_16 * floats


def panel_rows(options: Options) -> int:
    """The fewest rows for which transposed panels pay (`cpu.alternatives.RowsCheck`):
    `PANEL_ROWS_16` with AVX2, whose 6-row tile reads each packed element more often
    for its copy (measured, Zen 3, 2 threads, float32 linear+relu against torch, dot
    tile / panels: 128x512->256 1.77x / 1.34x, 64x512->256 1.42x / 1.33x, but
    32x1024->1024 0.76x / 0.88x); else `PANEL_ROWS` (measured with AVX-512)."""
    return PANEL_ROWS_16 if vector_bits(options) == 256 else PANEL_ROWS


def packed_cache_tile(options: Options) -> tuple[int, int]:
    """(rows, steps): the cache tile of a packed nest (`cpu.tiling`), `PACKED_ROWS_16`
    rows of the output by `PACKED_STEPS_16` reduction steps with AVX2, else
    `PACKED_ROWS` by `PACKED_STEPS` (measured with AVX-512). With AVX2 a 16-lane panel
    of 384 steps (24 KiB) still stays in a 32 KiB L1 beside the rows it meets, and
    fewer rows keep the rows' pages within the L1 TLB's reach when a row is 4 KiB or
    more. Measured on an AMD EPYC (Zen 3), 2 threads, same process, medians of blocks,
    float32 matmul M x K x N against NumPy, rows:steps 128:256 / 48:256 / 48:384 /
    96:384: 512^3 1.21 / 1.28 / 1.02 / 0.98; 1024^3 1.31 / 1.29 / 1.22 / 1.24;
    1000^3 1.67 / 1.52 / 1.34 / 1.44; 256x1024x1024 1.33 / 1.31 / 1.19 / 1.21;
    2048x256x2048 1.48 / 1.43 / 1.20 / 1.24; 64x4096x64 2.16 / 2.44 / 1.94 / 1.78;
    1 thread, 1536^3: 1.44 / 1.30 / 1.06 (36 rows: 1.01); 512 steps (32 KiB) ran
    1.16-1.35."""
    if vector_bits(options) == 256:
        return PACKED_ROWS_16, PACKED_STEPS_16
    return PACKED_ROWS, PACKED_STEPS
