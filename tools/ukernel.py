"""The packed micro-kernel's register tile shapes, measured in isolation on this CPU.

    python -m tools.ukernel [--shapes 8x2 6x4 8x3 ...] [--rounds 30] [--lda 512]

Each shape `RxV` is the inner loop of a packed matmul tile (`cpu.pack`): R rows of A
broadcast one element at a time, V vectors of a B panel (256 steps, contiguous), R * V
vector accumulators kept in registers across the steps, over 128 rows of A (`lda`
floats apart) against one panel, the panel and the A tile resident in cache. The LLVM
IR is written here (fused multiply-adds on the host's widest float vectors) and goes
through the same O3 pipeline as tcc's parts (`cpu.llvm.pass_builder`). The first
line is the host's FMA peak (independent FMA chains, no loads). The shapes run in
turn, round after round, and the report gives each one's median GFLOP/s and its median
ratio to the first shape, round by round: on a shared machine the speed of a core
swings by 1.5x between minutes (a busy hyperthread sibling), and only the paired
ratios stay put.

What it showed (AVX-512, Emerald Rapids, 1 thread): the peak was 161-166 GFLOP/s; in a
fast spell 8x2 (tcc's tile until then: 16 accumulators, 10 loads per 16 FMAs) ran 163, 6x4 173,
8x3 167-173; in a slow spell 8x2 108, 6x4 120 (1.11x), 8x3 120 (1.09x), 4x4 117
(1.07x), 12x2 112 (1.04x), 14x2 112 (1.02x); another slow spell 6x4 1.17x, 8x3 1.16x,
4x4 1.11x. What sets them apart is broadcasts per FMA (0.5 for 8x2, 12x2 and 14x2;
0.25-0.33 for the others), and only in slow spells: the FMA peak loop itself did not
slow down then. In the whole matmul kernel (2 threads, same process, paired rounds
against 8x32) a 4x64 tile ran 0.89-1.09x (512^3 1.005, 1024^3 0.998, 768^3 0.997,
97x331x211 1.089) and an 8x48 tile 0.95-1.60x: not a gain worth the wider panels.
Over 128-step panels (32 KiB again) the 4x64 tile did gain, 5-11% at 512^3-1024^3,
and is tcc's AVX-512 tile now (`cpu_registers.packed_lanes`).
"""

from __future__ import annotations

import argparse
import ctypes
import statistics
import time
from collections.abc import Callable

import numpy as np

STEPS = (
    256  # reduction steps of one panel (`cpu_registers.PACKED_STEPS` was 256 with 32-lane tiles)
)
ROWS = 128  # rows of A a panel meets (`cpu_registers.PACKED_ROWS`)


def _attributes() -> str:
    import llvmlite.binding as llvm

    return (
        f'attributes #0 = {{ "target-cpu"="{llvm.get_host_cpu_name()}" '
        f'"target-features"="{llvm.get_host_cpu_features().flatten()}" '
        '"min-legal-vector-width"="512" "prefer-vector-width"="512" }'
    )


def tile_ir(rows: int, vectors: int, lanes: int) -> str:
    """`void k(ptr A, i64 lda, ptr panel, ptr C, i64 reps)`: `reps` times, every block
    of `rows` rows of the 128 against the panel, the tile's accumulators loaded from
    and stored to C around the steps."""
    vec = f"<{lanes} x float>"
    width = vectors * lanes
    blocks = ROWS // rows
    out = [
        "define void @k(ptr noalias %A, i64 %lda, ptr noalias %P, ptr noalias %C, i64 %reps) #0 {",
        "entry:\n  br label %rep",
        "rep:\n  %r = phi i64 [0, %entry], [%r1, %done_m]\n  br label %mb",
        "mb:\n  %m = phi i64 [0, %rep], [%m1, %done_k]",
    ]
    acc = [(i, v) for i in range(rows) for v in range(vectors)]
    for i, v in acc:
        out += _vector_load(f"c{i}_{v}", "C", "m", rows * width, i * width + v * lanes, vec)
    out.append("  br label %kl\nkl:\n  %k = phi i64 [0, %mb], [%k1, %kl]")
    out += [f"  %a{i}_{v} = phi {vec} [%c{i}_{v}, %mb], [%n{i}_{v}, %kl]" for i, v in acc]
    for v in range(vectors):
        out += _vector_load(f"b{v}", "P", "k", width, v * lanes, vec)
    for i in range(rows):
        out += [
            f"  %ra{i} = mul i64 %m, {rows}",
            f"  %rb{i} = add i64 %ra{i}, {i}",
            f"  %rc{i} = mul i64 %rb{i}, %lda",
            f"  %ro{i} = add i64 %rc{i}, %k",
            f"  %rp{i} = getelementptr float, ptr %A, i64 %ro{i}",
            f"  %s{i} = load float, ptr %rp{i}",
            f"  %e{i} = insertelement {vec} poison, float %s{i}, i32 0",
            f"  %x{i} = shufflevector {vec} %e{i}, {vec} poison, <{lanes} x i32> zeroinitializer",
        ]
        out += [
            f"  %n{i}_{v} = call {vec} @llvm.fma.v{lanes}f32({vec} %x{i}, {vec} %b{v}, "
            f"{vec} %a{i}_{v})"
            for v in range(vectors)
        ]
    out.append(f"  %k1 = add i64 %k, 1\n  %kc = icmp slt i64 %k1, {STEPS}")
    out.append("  br i1 %kc, label %kl, label %done_k\ndone_k:")
    out += [f"  store {vec} %n{i}_{v}, ptr %c{i}_{v}.p, align 64" for i, v in acc]
    out += [
        f"  %m1 = add i64 %m, 1\n  %mc = icmp slt i64 %m1, {blocks}",
        "  br i1 %mc, label %mb, label %done_m",
        "done_m:\n  %r1 = add i64 %r, 1\n  %rc = icmp slt i64 %r1, %reps",
        "  br i1 %rc, label %rep, label %exit\nexit:\n  ret void\n}",
        f"declare {vec} @llvm.fma.v{lanes}f32({vec}, {vec}, {vec})",
        _attributes(),
    ]
    return "\n".join(out)


def _vector_load(name: str, base: str, var: str, scale: int, offset: int, vec: str) -> list[str]:
    """`%<name> = load vec` from `%<base>` at float index `%<var> * scale + offset`
    (its address `%<name>.p`, which the tile's stores reuse)."""
    return [
        f"  %{name}.s = mul i64 %{var}, {scale}",
        f"  %{name}.o = add i64 %{name}.s, {offset}",
        f"  %{name}.p = getelementptr float, ptr %{base}, i64 %{name}.o",
        f"  %{name} = load {vec}, ptr %{name}.p, align 64",
    ]


def peak_ir(lanes: int, chains: int = 16) -> str:
    """`float peak(i64 n)`: n steps of `chains` independent FMA chains."""
    vec = f"<{lanes} x float>"
    out = ["define float @peak(i64 %n) #0 {", "entry:\n  br label %loop"]
    out.append("loop:\n  %i = phi i64 [0, %entry], [%i1, %loop]")
    out += [f"  %a{c} = phi {vec} [zeroinitializer, %entry], [%b{c}, %loop]" for c in range(chains)]
    one = ", ".join(["float 1.5"] * lanes)
    out += [
        f"  %b{c} = call {vec} @llvm.fma.v{lanes}f32({vec} %a{c}, {vec} <{one}>, {vec} <{one}>)"
        for c in range(chains)
    ]
    out.append("  %i1 = add i64 %i, 1\n  %c = icmp slt i64 %i1, %n")
    out.append("  br i1 %c, label %loop, label %done\ndone:")
    total = "%b0"
    for c in range(1, chains):
        out.append(f"  %t{c} = fadd {vec} {total}, %b{c}")
        total = f"%t{c}"
    out += [
        f"  %e = extractelement {vec} {total}, i32 0\n  ret float %e\n}}",
        f"declare {vec} @llvm.fma.v{lanes}f32({vec}, {vec}, {vec})",
        _attributes(),
    ]
    return "\n".join(out)


_ENGINES: list[object] = []  # keep the code alive


def _jit(text: str, symbol: str, signature: object) -> Callable[..., object]:
    import llvmlite.binding as llvm

    from compiler.cpu.llvm import _new_target_machine, pass_builder, target_machine

    module = llvm.parse_assembly(text)
    module.triple = target_machine().triple
    pb = pass_builder(_new_target_machine(), "compute")
    pb.getModulePassManager().run(module, pb)
    engine = llvm.create_mcjit_compiler(module, _new_target_machine())
    engine.finalize_object()
    _ENGINES.append(engine)
    return signature(engine.get_function_address(symbol))  # type: ignore[operator]


def _aligned(n: int) -> np.ndarray:
    raw = np.full(n + 64, 1e-3, np.float32)
    start = (-raw.ctypes.data % 256) // 4
    return raw[start : start + n]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m tools.ukernel", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--shapes", nargs="+", default=["8x2", "6x4", "8x3", "4x4", "12x2", "14x2"],
                        help="rows x vectors of each tile (the first is the reference)")  # fmt: skip
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--lda", type=int, default=512, help="floats between rows of A")
    args = parser.parse_args(argv)
    from compiler.cpu.cpu_registers import host_vector_bits

    lanes = host_vector_bits() // 32
    shapes = []
    for s in args.shapes:
        try:
            rows, vectors = (int(x) for x in s.lower().split("x"))
        except ValueError:
            parser.error(f"--shapes: '{s}' is not ROWSxVECTORS (e.g. 8x2)")
        if not (1 <= rows <= ROWS and 1 <= vectors <= 8):
            parser.error(f"--shapes: '{s}': rows 1-{ROWS}, vectors 1-8")
        shapes.append((rows, vectors))
    if args.lda < STEPS:
        parser.error(f"--lda must be at least {STEPS}")
    peak = _jit(peak_ir(lanes), "peak", ctypes.CFUNCTYPE(ctypes.c_float, ctypes.c_int64))
    steps = 5_000_000
    peak(1000)
    start = time.perf_counter()
    peak(steps)
    print(f"FMA peak: {16 * steps * lanes * 2 / (time.perf_counter() - start) / 1e9:.1f} GFLOP/s"
          f" ({lanes} float lanes, 1 thread)")  # fmt: skip
    width = max(v for _, v in shapes) * lanes
    a, panel, c = _aligned(ROWS * args.lda), _aligned(STEPS * width), _aligned(ROWS * width)
    sig = ctypes.CFUNCTYPE(
        None, ctypes.c_void_p, ctypes.c_int64, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64
    )
    kernels = {s: _jit(tile_ir(*s, lanes), "k", sig) for s in shapes}
    reps = 50
    rates: dict[tuple[int, int], list[float]] = {s: [] for s in shapes}
    for _ in range(args.rounds):
        for (rows, vectors), kernel in kernels.items():
            flops = 2 * (ROWS // rows) * rows * STEPS * vectors * lanes * reps
            start = time.perf_counter()
            kernel(a.ctypes.data, args.lda, panel.ctypes.data, c.ctypes.data, reps)
            rates[(rows, vectors)].append(flops / (time.perf_counter() - start) / 1e9)
    first = rates[shapes[0]]
    print(f"{'tile':>6} {'acc':>4} {'loads/FMA':>9} {'GFLOP/s':>8} {'vs ' + args.shapes[0]:>8}")
    for (rows, vectors), got in rates.items():
        ratio = statistics.median(x / y for x, y in zip(got, first, strict=True))
        loads = (rows + vectors) / (rows * vectors)
        print(
            f"{rows}x{vectors:<4} {rows * vectors:>4} {loads:>9.2f} {statistics.median(got):>8.1f} {ratio:>8.2f}"
        )


if __name__ == "__main__":
    main()
