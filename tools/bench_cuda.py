"""GPU benchmarks: tcc's target="cuda" against PyTorch CUDA, in the same process.

    python -m tools.bench_cuda [--repeat R] [--json FILE]
    python -m tools.bench_cuda --sweep [--json FILE]   tcc under CudaOptions variants (SWEEP)

Cases: conv2d N8 C16 32^2 M16 3x3 forward and forward+backward, matmul 4096^3, and the
fused sum_j exp(A(i, j)) * b(j) at 4096^2 and 65536x256. Inputs are torch CUDA tensors, so tcc runs
on device memory (no copies). Each call is timed with CUDA events on torch's current
stream; after warm-up calls the systems alternate in blocks (BLOCK calls of one, then
of the other), `--repeat` calls of each in all; the table gives medians (and minimums)
in milliseconds and tcc/torch (below 1: tcc is faster). Every
tcc result is checked against torch's before it is timed. Needs a GPU and torch.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from collections.abc import Callable
from typing import Any

CONV = (
    "def conv2d(float(N, C, H, W) I, float(M, C, KH, KW) W1, float(M) B) -> (O) {\n"
    "    O(n, m, h, w) +=! I(n, c, h + kh, w + kw) * W1(m, c, kh, kw)\n"
    "    O(n, m, h, w) = O(n, m, h, w) + B(m)\n}"
)
MATMUL = "def matmul(float(M, K) A, float(K, N) B) -> (C) { C(m, n) +=! A(m, k) * B(k, n) }"
EXPSUM = "def expsum(float(M, N) A, float(N) b) -> (C) { C(i) +=! exp(A(i, j)) * b(j) }"


BLOCK = 5  # calls of one system before the other's


def _time(fn: Callable[[], Any], torch: Any) -> float:
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    fn()
    end.record()
    end.synchronize()
    return float(start.elapsed_time(end))


def _grad_args(k: Any, inputs: tuple[Any, ...], outputs: tuple[Any, ...], seeds: tuple) -> list:
    """The gradient kernel's arguments: forward inputs, outputs it reads, output grads."""
    by_name = {t.name: a for t, a in zip(k._inputs, inputs, strict=True)}
    by_name |= {t.name: a for t, a in zip(k._outputs, outputs, strict=True)}
    by_name |= {f"{t.name}_grad": g for t, g in zip(k._outputs, seeds, strict=True)}
    return [by_name[t.name] for t in k.grad._inputs]


def cases(
    torch: Any, options: Any = None
) -> list[tuple[str, Callable[[], Any], Callable[[], Any], Callable]]:
    """(name, tcc call, torch call, pick the results to compare) of each case; `options`:
    the CudaOptions of tcc's kernels (None: the defaults)."""
    import compiler

    F = torch.nn.functional
    dev = "cuda"
    g = torch.Generator(device=dev).manual_seed(0)

    def randn(*shape: int) -> Any:
        return torch.randn(*shape, device=dev, generator=g)

    found = []
    conv = compiler.define(CONV, target="cuda", options=options)
    x, W, B = randn(8, 16, 32, 32), randn(16, 16, 3, 3), randn(16)
    dO = randn(8, 16, 30, 30)
    found.append(("conv2d N8 C16 32^2 M16 3x3 fwd", lambda: conv(x, W, B)[0],
                  lambda: F.conv2d(x, W, B), lambda a, b: (a, b)))  # fmt: skip

    def tcc_fb() -> Any:
        (out,) = conv(x, W, B)
        return conv.grad(*_grad_args(conv, (x, W, B), (out,), (dO,)))

    It, Wt, Bt = (t.clone().requires_grad_() for t in (x, W, B))

    def torch_fb() -> Any:
        out = F.conv2d(It, Wt, Bt)
        return torch.autograd.grad(out, (It, Wt, Bt), dO)

    found.append(("conv2d N8 C16 32^2 M16 3x3 fwd+bwd", tcc_fb, torch_fb,
                  lambda a, b: (a[0], b[0])))  # fmt: skip
    mm = compiler.define(MATMUL, target="cuda", options=options)
    A, Bm = randn(4096, 4096), randn(4096, 4096)
    found.append(("matmul 4096^3", lambda: mm(A, Bm)[0], lambda: A @ Bm,
                  lambda a, b: (a, b)))  # fmt: skip
    es = compiler.define(EXPSUM, target="cuda", options=options)
    Ae, be = randn(4096, 4096) * 0.1, randn(4096)
    found.append(("sum_j exp(A(i,j))*b(j) 4096^2", lambda: es(Ae, be)[0],
                  lambda: torch.exp(Ae) @ be, lambda a, b: (a, b)))  # fmt: skip
    At, bt = randn(65536, 256) * 0.1, randn(256)
    found.append(("sum_j exp(A(i,j))*b(j) 65536x256", lambda: es(At, bt)[0],
                  lambda: torch.exp(At) @ bt, lambda a, b: (a, b)))  # fmt: skip
    return found


SWEEP = [
    {},  # the defaults
    {"warp_outputs": 0},  # no warp reductions
    {"warp_outputs": 1 << 24},  # warp reductions for bands of up to 16M outputs
    {"thread_tile": (1, 1)},  # no thread tiles
    {"tile_threads": 1},  # thread tiles on every band they apply to
    {"tile_threads": 4096},
    {"thread_tile": (8, 8)},
    {"thread_tile": (16, 4)},
    {"thread_tile": (4, 8), "block": 128},
    {"block": 128},
    {"block": 512},
]


def sweep(torch: Any, repeat: int) -> list[dict]:
    """Every case's tcc median under each `SWEEP` variant of CudaOptions (the first:
    the defaults), after torch's median once."""
    from compiler.cuda.cuda_options import CudaOptions

    rows: list[dict] = []
    for k, variant in enumerate(SWEEP):
        for name, tcc_fn, torch_fn, pick in cases(torch, CudaOptions(**variant)):
            got, want = pick(tcc_fn(), torch_fn())
            torch.testing.assert_close(got, want, rtol=2e-3, atol=2e-3)
            systems = {"tcc": tcc_fn} if k else {"torch": torch_fn, "tcc": tcc_fn}
            for system, fn in systems.items():
                for _ in range(2):
                    fn()
                ms = statistics.median(_time(fn, torch) for _ in range(repeat))
                rows.append({"case": name, "system": system, "options": str(variant), "ms": ms})
                print(f"{system:5s} {str(variant):58s} {name:36s} {ms:9.3f} ms", flush=True)
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeat", type=int, default=20)
    parser.add_argument("--sweep", action="store_true", help="tcc under CudaOptions variants")
    parser.add_argument("--json", metavar="FILE")
    args = parser.parse_args(argv)
    import torch

    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    print(f"device: {torch.cuda.get_device_name()}, torch {torch.__version__}, TF32 off")
    if args.sweep:
        rows = sweep(torch, min(args.repeat, 7))
        if args.json:
            with open(args.json, "w", encoding="utf-8") as fh:
                json.dump(rows, fh, indent=1)
        return 0
    rows = []
    for name, tcc_fn, torch_fn, pick in cases(torch):
        got, want = pick(tcc_fn(), torch_fn())
        torch.testing.assert_close(got, want, rtol=2e-3, atol=2e-3)
        for _ in range(3):
            tcc_fn(), torch_fn()
        times: dict[str, list[float]] = {"tcc": [], "torch": []}
        for start in range(0, args.repeat, BLOCK):
            for system, fn in (("tcc", tcc_fn), ("torch", torch_fn)):
                times[system] += [_time(fn, torch) for _ in range(min(BLOCK, args.repeat - start))]
        med = {k: statistics.median(v) for k, v in times.items()}
        row = {"case": name, **{f"{k}_ms": med[k] for k in med},
               **{f"{k}_min_ms": min(v) for k, v in times.items()},
               "tcc/torch": med["tcc"] / med["torch"]}  # fmt: skip
        rows.append(row)
        print(f"{name:40s} tcc {med['tcc']:9.3f} ms (min {row['tcc_min_ms']:.3f})  "
              f"torch {med['torch']:9.3f} ms (min {row['torch_min_ms']:.3f})  "
              f"tcc/torch {row['tcc/torch']:7.2f}")  # fmt: skip
    if args.json:
        with open(args.json, "w", encoding="utf-8") as fh:
            json.dump(rows, fh, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
