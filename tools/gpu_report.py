"""A GPU performance report without a GPU: each CUDA kernel of a def at given sizes.

    python -m tools.gpu_report FILE [--grad] [--entry NAME] --shape NAME=d0,d1,...
                               [--gpu H100|H200] [--json]

For every kernel the sizes launch (`runtime.cuda`'s choice among a phase's variants):
its blocks and threads (the launch expressions at the sizes; threads: the band's
iterations), registers, spills, static shared memory and occupancy (NVRTC's own
ptxas -v for sm_90), the hot loop's SASS instruction mix (cuobjdump -sass on NVRTC's
cubin, where cuobjdump is installed: the innermost loop with the most FFMAs, its FFMA
share and global loads per FFMA), FLOPs and compulsory bytes (`cuda.cuda_report`), and
a roofline estimate of its time on the named GPU with what bounds it. The figures are a model's estimate,
not a measurement. Needs the `cuda` extra (NVRTC; no GPU); the `cuda-dev` extra adds
cuobjdump for the instruction mix.

`--shape` gives each input tensor's shape (the sizes follow from the def's
declarations; with `--grad`, the forward's inputs suffice).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import shutil
import subprocess
import sys
import tempfile
from dataclasses import asdict
from pathlib import Path
from typing import Any

from compiler.cuda.cuda_report import (
    PEAKS,
    Mix,
    Resources,
    kernel_work,
    occupancy,
    parse_ptxas,
    parse_sass,
    roofline,
)
from compiler.diagnostics import TCError

ARCH = "sm_90"


class ReportError(Exception):
    """The report cannot be made (a missing tool, a size no shape gives)."""


def tool_path(name: str) -> str:
    """The path of a CUDA tool (`cuobjdump`): NVIDIA's wheel's (the version of the NVRTC
    wheel), else the one on PATH."""
    spec = importlib.util.find_spec("nvidia")
    for root in list(spec.submodule_search_locations or []) if spec else []:
        for candidate in sorted(Path(root).glob(f"cu*/bin/{name}")):
            return str(candidate)
    found = shutil.which(name)
    if found:
        return found
    raise ReportError(
        f"{name} not found: pip install 'tcc[cuda-dev]' (nvidia-cuda-nvcc, -cuobjdump)"
    )


def _run(args: list[str]) -> str:
    """The output of a CUDA tool (stdout and stderr); a ReportError where it fails."""
    done = subprocess.run(args, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise ReportError(f"{Path(args[0]).name} failed: {done.stderr.strip()[:400]}")
    return done.stdout + done.stderr


def compile_program(
    path: Path, entry: str | None, grad: bool, loss: list[str] | None = None
) -> tuple[Any, Any]:
    """The `CudaProgram` of def `entry` of `path` (its gradient with `grad`, the outputs
    `loss` carrying the cotangents: None, every output), and the def's `RangedDef`."""
    from compiler.backward import grad as gradient
    from compiler.frontend.check import check_def
    from compiler.frontend.parser import parse
    from compiler.poly.ranges import infer_ranges
    from compiler.runtime.cuda import compile_cuda

    text = path.read_text()
    if grad:
        text, entry = gradient(text, entry, outputs=loss), None
    ranged = infer_ranges(check_def(parse(text).get(entry)))
    return compile_cuda(ranged), ranged


def sizes_of(program: Any, shapes: dict[str, list[int]]) -> dict[str, int]:
    """The size parameters, read from the input shapes whose dimensions are sizes."""
    from compiler import loops as L

    env: dict[str, int] = {}
    for b in program.gpu.buffers:
        dims = shapes.get(b.name)
        if dims is None:
            continue
        if len(dims) != len(b.shape):
            raise ReportError(
                f"--shape {b.name}: {len(dims)} dimensions, the def has {len(b.shape)}"
            )
        for d, value in zip(b.shape, dims, strict=True):
            if isinstance(d, L.VarRef):
                env[d.name] = value
    missing = [n for n in program.gpu.size_params if n not in env]
    if missing:
        raise ReportError(f"no --shape gives the size(s) {', '.join(missing)}")
    return {n: env[n] for n in program.gpu.size_params}


def device_facts(program: Any, kernels: list[Any]) -> tuple[dict[str, Resources], dict[str, Mix]]:
    """ptxas's resources and the SASS hot loops of `kernels`, compiled by NVRTC (its
    own ptxas reports the resources: a ptxas on PATH may be older than the NVRTC wheel
    and refuse its PTX version)."""
    from compiler.cuda.cuda import emit_cuda
    from compiler.cuda.cuda_driver import compile_with_ptxas_info

    sub = type(program.gpu)(program.gpu.name, program.gpu.buffers, program.gpu.size_params,
                            tuple(kernels))  # fmt: skip
    source = emit_cuda(sub, fast_math=False)
    cubin, ptxas = compile_with_ptxas_info(source, arch=ARCH)
    try:
        cuobjdump = tool_path("cuobjdump")
    except ReportError:
        return parse_ptxas(ptxas), {}  # no SASS: the rows say so (`render`)
    with tempfile.TemporaryDirectory() as tmp:
        cubin_path = Path(tmp, "k.cubin")
        cubin_path.write_bytes(cubin)
        sass = _run([cuobjdump, "-sass", str(cubin_path)])
    return parse_ptxas(ptxas), parse_sass(sass)


def report(program: Any, env: dict[str, int], gpu: str = "H200") -> list[dict[str, Any]]:
    """One row per kernel these sizes launch, in launch order (module doc)."""
    peak = PEAKS[gpu]
    running = [(k, g) for k in program.gpu.kernels if (g := program.grid(k, env))[0]]
    resources, mixes = device_facts(program, [k for k, _ in running])
    rows = []
    for kernel, grid in running:
        buffers = {b.name: b for b in program.gpu.buffers_of(kernel)}
        work = kernel_work(kernel.body, buffers, env)
        res = resources.get(kernel.name)
        mix = mixes.get(kernel.name)
        wide = any(b.dtype.value == "float64" for b in buffers.values())
        seconds, bound = roofline(work, peak, float64=wide)
        rows.append({
            "kernel": kernel.name, "phase": kernel.phase, "variant": kernel.variant or "plain",
            "mode": kernel.mode, "reason": kernel.reason, "blocks": grid[0] * grid[1] * grid[2],
            "grid": list(grid), "block": kernel.block, "threads": work.threads,
            "registers": res.registers if res else None,
            "spill_bytes": res.spill_stores + res.spill_loads if res else None,
            "shared_bytes": res.shared if res else None,
            "occupancy": occupancy(res, kernel.block, peak) if res else None,
            "hot_loop": None if mix is None else {
                **asdict(mix), "ffma_share": mix.ffma_share, "loads_per_ffma": mix.loads_per_ffma},
            "flops": work.flops, "bytes": work.bytes, "gpu": peak.name,
            "estimate_ms": seconds * 1e3, "bound": bound,
        })  # fmt: skip
    return rows


def render(rows: list[dict[str, Any]], def_flops: int | None = None) -> str:
    """The rows as a text table, with the total estimate (and the def's exact FLOPs,
    `poly.flops`, beside the kernels' loop-IR count)."""
    head = f"{'kernel':<26} {'blocks':>8} {'threads':>10} {'regs':>4} {'spill':>5} {'occ':>4} "
    head += f"{'ffma%':>5} {'ldg/ffma':>8} {'GFLOP':>8} {'MB':>8} {'est ms':>8}  bound"
    lines = [head]
    for r in rows:
        hot = r["hot_loop"] or {}
        lpf = hot.get("loads_per_ffma")
        share = f"{hot['ffma_share'] * 100:>4.0f}%" if hot else "-"
        lines.append(
            f"{r['kernel']:<26} {r['blocks']:>8} {r['threads']:>10} {r['registers'] or '-':>4} "
            f"{r['spill_bytes'] if r['spill_bytes'] is not None else '-':>5} "
            f"{(r['occupancy'] or 0) * 100:>3.0f}% {share:>5} "
            f"{'-' if lpf is None else f'{lpf:.2f}':>8} {r['flops'] / 1e9:>8.3f} "
            f"{r['bytes'] / 1e6:>8.2f} {r['estimate_ms']:>8.4f}  {r['bound']}"
        )
    if rows and all(r["hot_loop"] is None for r in rows):
        lines.append("(no SASS instruction mix: cuobjdump not found; pip install 'tcc[cuda-dev]')")
    total = sum(r["estimate_ms"] for r in rows)
    gpu = rows[0]["gpu"] if rows else "-"
    lines.append(f"total estimate on {gpu}: {total:.4f} ms (a roofline model, not a timing)")
    if def_flops is not None:
        counted = sum(r["flops"] for r in rows) / 1e9
        lines.append(
            f"FLOPs: {def_flops / 1e9:.3f} G exact for the def (isl), {counted:.3f} G in the kernels' loop IR"
        )
    return "\n".join(lines)


def _shape(text: str) -> tuple[str, list[int]]:
    name, _, dims = text.partition("=")
    try:
        return name.strip(), [int(d) for d in dims.split(",") if d.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"--shape {text!r}: expected NAME=d0,d1,...") from None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tools.gpu_report", description=__doc__.split("\n")[0]
    )
    parser.add_argument("file", type=Path)
    parser.add_argument("--entry", help="the def (default: the only one)")
    parser.add_argument("--grad", action="store_true", help="the def's gradient")
    parser.add_argument(
        "--loss",
        metavar="OUT[,OUT]",
        help="with --grad: the outputs that carry a cotangent (default: every output)",
    )
    parser.add_argument(
        "--shape", type=_shape, action="append", default=[], metavar="NAME=d0,d1,..."
    )
    parser.add_argument("--gpu", choices=sorted(PEAKS), default="H200")
    parser.add_argument("--json", action="store_true", help="the rows as JSON")
    args = parser.parse_args(argv)
    try:
        if args.loss and not args.grad:
            raise ReportError("--loss needs --grad")
        loss = args.loss.split(",") if args.loss else None
        program, ranged = compile_program(args.file, args.entry, args.grad, loss)
        env = sizes_of(program, dict(args.shape))
        rows = report(program, env, args.gpu)
    except (ReportError, TCError) as err:
        print(f"gpu_report: {err}", file=sys.stderr)
        return 1
    from compiler.poly.flops import count_flops

    exact = count_flops(ranged, env)
    text = json.dumps({"kernels": rows, "def_flops": exact}, indent=1)
    print(text if args.json else render(rows, exact))
    return 0


if __name__ == "__main__":
    sys.exit(main())
