"""Forward + backward benchmark: tcc's `Kernel.vjp` against PyTorch autograd, same process.

    python -m tools.gradbench [--threads 2] [--repeat 15] [--only conv2d ...] [--dense]

For each case (the examples' conv2d, softmax, layernorm, matmul at issue 11's sizes)
one "call" is the forward and the input gradients for a random cotangent of the main
output: tcc runs `k(*x)` then `k.vjp(*x, grad_outputs=(g, None, ...))` (`--dense`:
dense zero arrays for the other outputs, as before symbolic zeros existed); torch runs
the same layer under autograd and `torch.autograd.grad`. After a warm-up (and a check
that both give the same gradients), the systems alternate, `--repeat` rounds, so a
shared machine's noise hits both alike (OMP_WAIT_POLICY=PASSIVE unless set: the two
OpenMP runtimes must not spin against each other); the table gives medians and minimums in ms,
and the gradient's compile time (autodiff, gather, lower, LLVM: first vjp minus a
steady one).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


def _cases() -> dict[str, tuple[str, Callable[[Any], list[Any]], Callable[..., Any]]]:
    """name -> (TC source, inputs(rng), torch forward of the main output)."""
    import torch.nn.functional as F

    def conv(rng: Any) -> list[Any]:
        return [
            rng.standard_normal(s, dtype="float32")
            for s in ((8, 16, 32, 32), (16, 16, 3, 3), (16,))
        ]

    def rows(rng: Any) -> list[Any]:
        return [rng.standard_normal((256, 1024), dtype="float32")]

    def norm(rng: Any) -> list[Any]:
        return [rng.standard_normal(s, dtype="float32") for s in ((256, 1024), (1024,), (1024,))]

    def mm(rng: Any) -> list[Any]:
        return [rng.standard_normal((512, 512), dtype="float32") for _ in range(2)]

    def ln(x: Any, g: Any, b: Any) -> Any:
        return F.layer_norm(x, (x.shape[-1],), g, b, eps=1e-5)

    return {
        "conv2d": ((EXAMPLES / "conv2d.tc").read_text(), conv, F.conv2d),
        "softmax": ((EXAMPLES / "softmax.tc").read_text(), rows, lambda x: x.softmax(dim=1)),
        "layernorm": ((EXAMPLES / "layernorm.tc").read_text(), norm, ln),
        "matmul": ((EXAMPLES / "matmul.tc").read_text(), mm, lambda a, b: a @ b),
    }


def _bench(name: str, case: tuple, threads: int, repeat: int, dense: bool) -> str:
    import numpy as np
    import torch

    import compiler
    from compiler.options import Options

    source, make, torch_fn = case
    rng = np.random.default_rng(0)
    xs = make(rng)
    k = compiler.define(source, options=Options(threads=threads))
    outs = k(*xs)
    g = rng.standard_normal(outs[0].shape, dtype="float32")
    rest = [np.zeros_like(o) if dense else None for o in outs[1:]]

    def tcc() -> Any:
        k(*xs)
        return k.vjp(*xs, grad_outputs=(g, *rest))

    tx = [torch.from_numpy(x.copy()).requires_grad_(True) for x in xs]
    tg = torch.from_numpy(g)

    def ref() -> Any:
        return torch.autograd.grad(torch_fn(*tx), tx, tg)

    began = time.perf_counter()
    first = tcc()
    first_s = time.perf_counter() - began
    for a, b in zip(first, ref(), strict=True):
        scale = float(np.abs(b.numpy()).max()) or 1.0
        err = float(np.abs(a - b.numpy()).max()) / scale
        if err > 1e-3:
            raise SystemExit(f"{name}: tcc and torch gradients differ (relative {err:.2e})")
    times: dict[str, list[float]] = {"tcc": [], "torch": []}
    for _ in range(repeat):
        for label, fn in (("tcc", tcc), ("torch", ref)):
            t0 = time.perf_counter()
            fn()
            times[label].append((time.perf_counter() - t0) * 1e3)
    med = {k_: statistics.median(v) for k_, v in times.items()}
    low = {k_: min(v) for k_, v in times.items()}
    compile_s = first_s - med["tcc"] / 1e3
    return (
        f"{name:10s} tcc {med['tcc']:8.2f} (min {low['tcc']:7.2f})  torch {med['torch']:7.2f} "
        f"(min {low['torch']:6.2f})  ratio {med['tcc'] / med['torch']:5.1f}x  "
        f"first-call compile {compile_s:5.2f} s"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.gradbench", description=__doc__)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeat", type=int, default=15)
    parser.add_argument("--only", nargs="*")
    parser.add_argument("--dense", action="store_true")
    args = parser.parse_args(argv)
    for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ[var] = str(args.threads)
    # Two OpenMP runtimes (torch's, tcc's libgomp) share the cores: spinning idle
    # threads of one starve the other on a loaded machine (torch conv2d 500 ms, not 15).
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    import torch

    torch.set_num_threads(args.threads)
    cases = _cases()
    for name in args.only or cases:
        print(_bench(name, cases[name], args.threads, args.repeat, args.dense), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
