"""Same-process timings of the kernels of issue 10 against PyTorch (and NumPy).

    python -m tools.kernels_bench [--threads T] [--cpu] [CASE ...]

Each case runs tcc (`target="llvm"`), torch (`torch.set_num_threads(T)`) and, where it
has one, NumPy, in blocks of 7 calls per system, 3 rounds, and prints the medians and
the ratios. `--cpu` measures process CPU time instead of wall time: on a machine shared
with other jobs, wall time mostly measures the scheduler (use it with `--threads 1`).
Set OPENBLAS_NUM_THREADS before starting Python for a fair NumPy column.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from functools import partial
from typing import Any

import numpy as np

CONV = (
    "def conv(float(N, C, H, W) I, float(M, C, KH, KW) W1{bias_in}) -> (O) {{\n"
    "    O(n, m, h, w) +=! I(n, c, {s}h + kh, {s}w + kw) * W1(m, c, kh, kw){bias}\n}}"
)
SOFTMAX = (
    "def softmax(float(N, D) X) -> (Y, mx, s) {\n    mx(n) max=! X(n, d)\n"
    "    Y(n, d) = exp(X(n, d) - mx(n))\n    s(n) +=! Y(n, d)\n    Y(n, d) = Y(n, d) / s(n)\n}"
)


def _cases(torch: Any) -> dict[str, tuple[str, list[tuple[int, ...]], Callable, Callable | None]]:
    F = torch.nn.functional

    def conv(stride: int, bias: bool) -> str:
        s = f"{stride} * " if stride > 1 else ""
        return CONV.format(
            s=s,
            bias_in=", float(M) B" if bias else "",
            bias="\n    O(n, m, h, w) = O(n, m, h, w) + B(m)" if bias else "",
        )

    return {
        "expmv": (
            "def f(float(M, K) A, float(K) b) -> (C) { C(m) +=! exp(A(m, k)) * b(k) }",
            [(4096, 4096), (4096,)],
            lambda a, b: a.exp() @ b,
            lambda a, b: np.exp(a) @ b,
        ),
        "softmax": (SOFTMAX, [(256, 1024)], lambda x: x.softmax(1), None),
        "matmul512": (
            "def mm(float(M, K) A, float(K, N) B) -> (C) { C(m, n) +=! A(m, k) * B(k, n) }",
            [(512, 512), (512, 512)],
            lambda a, b: a @ b,
            lambda a, b: a @ b,
        ),
        "matmul1024": (
            "def mm(float(M, K) A, float(K, N) B) -> (C) { C(m, n) +=! A(m, k) * B(k, n) }",
            [(1024, 1024), (1024, 1024)],
            lambda a, b: a @ b,
            lambda a, b: a @ b,
        ),
        "conv16": (conv(1, False), [(8, 16, 32, 32), (16, 16, 3, 3)], F.conv2d, None),
        "conv32bias": (
            conv(1, True),
            [(8, 32, 28, 28), (32, 32, 3, 3), (32,)],
            F.conv2d,
            None,
        ),
        "conv_s2": (
            conv(2, False),
            [(8, 16, 33, 33), (32, 16, 3, 3)],
            lambda i, w: F.conv2d(i, w, stride=2),
            None,
        ),
        "linear_relu": (
            "def lin(float(B, I) X, float(O, I) W, float(O) bias) -> (Y) {\n"
            "    Y(b, o) +=! X(b, i) * W(o, i)\n    Y(b, o) = fmax(Y(b, o) + bias(o), 0)\n}",
            [(128, 512), (256, 512), (256,)],
            lambda x, w, b: torch.relu(F.linear(x, w, b)),
            None,
        ),
    }


def main(argv: list[str] | None = None) -> None:
    import torch

    import compiler
    from compiler.options import Options

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--cpu", action="store_true", help="process CPU time, not wall time")
    parser.add_argument("cases", nargs="*")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    clock = time.process_time if args.cpu else time.perf_counter
    cases = _cases(torch)
    rng = np.random.default_rng(0)

    def median_ms(fn: Callable[[], Any]) -> float:
        times = []
        for _ in range(7):
            start = clock()
            fn()
            times.append((clock() - start) * 1e3)
        return statistics.median(times)

    for name in args.cases or list(cases):
        source, shapes, torch_fn, numpy_fn = cases[name]
        arrays = [rng.standard_normal(s).astype(np.float32) for s in shapes]
        kernel = compiler.define(source, target="llvm", options=Options(threads=args.threads))
        kernel(*arrays)
        tensors = [torch.from_numpy(a) for a in arrays]
        systems: dict[str, Callable[[], Any]] = {
            "tcc": partial(kernel, *arrays),
            "torch": partial(torch_fn, *tensors),
        }
        if numpy_fn is not None:
            systems["numpy"] = partial(numpy_fn, *arrays)
        rounds: dict[str, list[float]] = {k: [] for k in systems}
        for _ in range(3):
            for key, fn in systems.items():
                rounds[key].append(median_ms(fn))
        m = {k: statistics.median(v) for k, v in rounds.items()}
        ratios = "  ".join(f"tcc/{k} {m['tcc'] / m[k]:.2f}" for k in m if k != "tcc")
        cols = "  ".join(f"{k} {v:8.3f} ms" for k, v in m.items())
        print(f"{name:12s} {cols}  {ratios}", flush=True)


if __name__ == "__main__":
    main()
