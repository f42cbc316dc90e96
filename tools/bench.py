"""Benchmarks: tcc kernels against NumPy and PyTorch (CPU), measured in the same run.

    python -m tools.bench [--threads N] [--repeat R] [--only NAME ...] [--target llvm]
                          [--small] [--json FILE]

Every case is a TC def, a NumPy reference and (when torch is installed) a PyTorch
reference. Each system runs with the same thread count (OpenBLAS / OMP / MKL
variables are set before NumPy is imported; `torch.set_num_threads`; tcc's
`Options(threads=...)`). After one warm-up call each, the systems are called in
turn, `--repeat` rounds, so that noise from a shared machine hits them alike; the
table gives medians (and minimums) in milliseconds, the ratios tcc/NumPy and
tcc/PyTorch (below 1 means tcc is faster) and their geometric means, and the compile
latency (parse to callable, plus the first call's excess over a steady call). Every
tcc result is checked against the NumPy reference before it is timed.
`--small` shrinks every case (a smoke run for tests).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

_THREAD_VARS = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")


@dataclass(frozen=True)
class Case:
    name: str
    source: str
    sizes: dict[str, int]  # full size
    small: dict[str, int]  # --small
    inputs: Callable[[Any, dict[str, int]], tuple[Any, ...]]  # (rng, sizes) -> arrays
    numpy: Callable[..., Any]
    torch: Callable[..., Any] | None = None


def _f32(rng: Any, *shape: int) -> Any:
    return rng.standard_normal(shape, dtype="float32")


def _conv_numpy(i: Any, w: Any) -> Any:
    import numpy as np

    kh, kw = w.shape[2], w.shape[3]
    win = np.lib.stride_tricks.sliding_window_view(i, (kh, kw), axis=(2, 3))
    return np.einsum("nchwij,mcij->nmhw", win, w, optimize=True)


def _torch_conv(i: Any, w: Any) -> Any:
    import torch.nn.functional as F

    return F.conv2d(i, w)


MATMUL = "def mm(float(M, K) A, float(K, N) B) -> (C) {\n    C(m, n) +=! A(m, k) * B(k, n)\n}"
CONV = "def conv2d(float(N, C, H, W) I, float(M, C, KH, KW) W1) -> (O) {\n    O(n, m, h, w) +=! I(n, c, h + kh, w + kw) * W1(m, c, kh, kw)\n}"


def _conv_case(name: str, n: int, c: int, hw: int, m: int, k: int) -> Case:
    def inputs(rng: Any, s: dict[str, int]) -> tuple[Any, ...]:
        return _f32(rng, s["N"], s["C"], s["H"], s["H"]), _f32(rng, s["M"], s["C"], s["K"], s["K"])

    return Case(
        name,
        CONV,
        {"N": n, "C": c, "H": hw, "M": m, "K": k},
        {"N": 2, "C": 2, "H": 6, "M": 3, "K": k},
        inputs,
        _conv_numpy,
        _torch_conv,
    )


IGRAD = (
    "def conv_igrad(float(N, M, HO, WO) G, float(M, C, KH, KW) W1) -> (IG) {\n"
    "    IG(n, c, h + kh, w + kw) +=! G(n, m, h, w) * W1(m, c, kh, kw)\n}"
)
WGRAD = (
    "def conv_wgrad(float(N, C, H, W) I, float(N, M, HO, WO) G) -> (WG) {\n"
    "    WG(m, c, kh, kw) +=! G(n, m, h, w) * I(n, c, h + kh, w + kw)\n}"
)


def _igrad_numpy(g: Any, w: Any) -> Any:
    import numpy as np

    kh, kw = w.shape[2], w.shape[3]
    gp = np.pad(g, ((0, 0), (0, 0), (kh - 1, kh - 1), (kw - 1, kw - 1)))
    win = np.lib.stride_tricks.sliding_window_view(gp, (kh, kw), axis=(2, 3))
    return np.einsum("nmhwij,mcij->nchw", win, w[:, :, ::-1, ::-1], optimize=True)


def _igrad_torch(g: Any, w: Any) -> Any:
    import torch

    n, _, ho, wo = g.shape
    size = (n, w.shape[1], ho + w.shape[2] - 1, wo + w.shape[3] - 1)
    return torch.nn.grad.conv2d_input(size, w, g)


def _wgrad_numpy(i: Any, g: Any) -> Any:
    import numpy as np

    win = np.lib.stride_tricks.sliding_window_view(i, g.shape[2:], axis=(2, 3))
    return np.einsum("ncklhw,nmhw->mckl", win, g, optimize=True)


def _wgrad_torch(i: Any, g: Any) -> Any:
    import torch

    kh, kw = i.shape[2] - g.shape[2] + 1, i.shape[3] - g.shape[3] + 1
    return torch.nn.grad.conv2d_weight(i, (g.shape[1], i.shape[1], kh, kw), g)


def _grad_cases() -> tuple[Case, ...]:
    def igrad_in(rng: Any, s: dict[str, int]) -> tuple[Any, ...]:
        ho = s["H"] - s["K"] + 1
        return _f32(rng, s["N"], s["M"], ho, ho), _f32(rng, s["M"], s["C"], s["K"], s["K"])

    def wgrad_in(rng: Any, s: dict[str, int]) -> tuple[Any, ...]:
        ho = s["H"] - s["K"] + 1
        return _f32(rng, s["N"], s["C"], s["H"], s["H"]), _f32(rng, s["N"], s["M"], ho, ho)

    sizes = {"N": 32, "C": 4, "H": 56, "M": 16, "K": 3}
    small = {"N": 2, "C": 2, "H": 6, "M": 3, "K": 3}
    return (
        Case("conv2d igrad N32 C4 56^2 M16 3x3", IGRAD, sizes, small, igrad_in,
             _igrad_numpy, _igrad_torch),
        Case("conv2d wgrad N32 C4 56^2 M16 3x3", WGRAD, sizes, small, wgrad_in,
             _wgrad_numpy, _wgrad_torch),
    )  # fmt: skip


def _softmax_numpy(x: Any) -> Any:
    e = x - x.max(axis=1, keepdims=True)
    e = __import__("numpy").exp(e)
    return e / e.sum(axis=1, keepdims=True)


def _layernorm_numpy(x: Any) -> Any:
    mean = x.mean(axis=1, keepdims=True)
    var = ((x - mean) ** 2).mean(axis=1, keepdims=True)
    return (x - mean) / __import__("numpy").sqrt(var + 1e-5)


def _maxpool_numpy(x: Any) -> Any:
    n, c, h, w = x.shape
    return x[:, :, : h // 2 * 2, : w // 2 * 2].reshape(n, c, h // 2, 2, w // 2, 2).max(axis=(3, 5))


def _group_conv_numpy(i: Any, w: Any) -> Any:
    import numpy as np

    kh, kw = w.shape[3], w.shape[4]
    win = np.lib.stride_tricks.sliding_window_view(i, (kh, kw), axis=(3, 4))
    return np.einsum("ngchwij,gmcij->ngmhw", win, w, optimize=True)


def _torch_group_conv(i: Any, w: Any) -> Any:
    import torch.nn.functional as F

    n, g, c, h, wd = i.shape
    out = F.conv2d(i.reshape(n, g * c, h, wd), w.reshape(-1, c, w.shape[3], w.shape[4]), groups=g)
    return out.reshape(n, g, w.shape[1], out.shape[2], out.shape[3])


def _cases() -> tuple[Case, ...]:
    import numpy as np

    def mm_in(rng: Any, s: dict[str, int]) -> tuple[Any, ...]:
        return _f32(rng, s["M"], s["K"]), _f32(rng, s["K"], s["N"])

    def bmm_in(rng: Any, s: dict[str, int]) -> tuple[Any, ...]:
        return _f32(rng, s["B"], s["M"], s["K"]), _f32(rng, s["B"], s["K"], s["N"])

    def rows(rng: Any, s: dict[str, int]) -> tuple[Any, ...]:
        return (_f32(rng, s["N"], s["D"]),)

    def image(rng: Any, s: dict[str, int]) -> tuple[Any, ...]:
        return (_f32(rng, s["N"], s["C"], s["H"], s["H"]),)

    def gconv_in(rng: Any, s: dict[str, int]) -> tuple[Any, ...]:
        return (
            _f32(rng, s["N"], s["G"], s["C"], s["H"], s["H"]),
            _f32(rng, s["G"], s["M"], s["C"], 3, 3),
        )

    return (
        Case(
            "matmul 512^3",
            MATMUL,
            {"M": 512, "K": 512, "N": 512},
            {"M": 5, "K": 7, "N": 6},
            mm_in,
            np.matmul,
            lambda a, b: a @ b,
        ),
        Case(
            "matmul 1024^3",
            MATMUL,
            {"M": 1024, "K": 1024, "N": 1024},
            {"M": 9, "K": 4, "N": 10},
            mm_in,
            np.matmul,
            lambda a, b: a @ b,
        ),
        Case(
            "batched matmul 32x128^3",
            "def bmm(float(B, M, K) X, float(B, K, N) Y) -> (Z) {\n"
            "    Z(b, m, n) +=! X(b, m, k) * Y(b, k, n)\n}",
            {"B": 32, "M": 128, "K": 128, "N": 128},
            {"B": 2, "M": 3, "K": 4, "N": 5},
            bmm_in,
            np.matmul,
            lambda a, b: a @ b,
        ),
        _conv_case("conv2d N8 C16 32^2 M16 3x3", 8, 16, 32, 16, 3),
        _conv_case("conv2d N32 C4 56^2 M16 1x1", 32, 4, 56, 16, 1),
        _conv_case("conv2d N32 C4 56^2 M16 3x3", 32, 4, 56, 16, 3),
        Case(
            "group conv N8 G4 C8 28^2 M8 3x3",
            "def gconv(float(N, G, C, H, W) I, float(G, M, C, KH, KW) W1) -> (O) {\n"
            "    O(n, g, m, h, w) +=! I(n, g, c, h + kh, w + kw) * W1(g, m, c, kh, kw)\n}",
            {"N": 8, "G": 4, "C": 8, "H": 28, "M": 8},
            {"N": 2, "G": 2, "C": 2, "H": 5, "M": 2},
            gconv_in,
            _group_conv_numpy,
            _torch_group_conv,
        ),
        Case(
            "softmax 1024x1024",
            "def softmax(float(N, D) X) -> (Y, mx, s) {\n"
            "    mx(n) max=! X(n, d)\n"
            "    Y(n, d) = exp(X(n, d) - mx(n))\n"
            "    s(n) +=! Y(n, d)\n"
            "    Y(n, d) = Y(n, d) / s(n)\n}",
            {"N": 1024, "D": 1024},
            {"N": 3, "D": 5},
            rows,
            _softmax_numpy,
            lambda x: x.softmax(1),
        ),
        Case(
            "layernorm 1024x1024",
            "def layernorm(float(N, D) X) -> (Y, mean, var) {\n"
            "    mean(n) +=! X(n, d) / D\n"
            "    var(n) +=! (X(n, d) - mean(n)) * (X(n, d) - mean(n)) / D\n"
            "    Y(n, d) = (X(n, d) - mean(n)) / sqrt(var(n) + 1e-5)\n}",
            {"N": 1024, "D": 1024},
            {"N": 3, "D": 5},
            rows,
            _layernorm_numpy,
            lambda x: __import__("torch").nn.functional.layer_norm(x, x.shape[1:]),
        ),
        Case(
            "maxpool 2x2/2 N32 C16 64^2",
            "def maxpool(float(N, C, H, W) I) -> (O) {\n"
            "    O(n, c, h, w) max=! I(n, c, 2 * h + kh, 2 * w + kw) where kh in 0:2, kw in 0:2\n}",
            {"N": 32, "C": 16, "H": 64},
            {"N": 2, "C": 2, "H": 6},
            image,
            _maxpool_numpy,
            lambda x: __import__("torch").nn.functional.max_pool2d(x, 2),
        ),
        Case(
            "exp-then-contract 256^3",
            "def expmm(float(M, K) A, float(K, N) B) -> (C) {\n"
            "    C(m, n) +=! exp(A(m, k)) * B(k, n)\n}",
            {"M": 256, "K": 256, "N": 256},
            {"M": 4, "K": 3, "N": 5},
            mm_in,
            lambda a, b: np.exp(a) @ b,
            lambda a, b: a.exp() @ b,
        ),
        *_grad_cases(),
    )


def _time_call(fn: Callable[[], Any]) -> float:
    start = time.perf_counter()
    fn()
    return (time.perf_counter() - start) * 1e3


@dataclass
class Row:
    name: str
    tcc: list[float]
    numpy: list[float]
    torch: list[float]
    compile_ms: float
    max_error: float

    def median(self, which: str) -> float | None:
        times = getattr(self, which)
        return statistics.median(times) if times else None


def _run_case(case: Case, args: argparse.Namespace, torch: Any) -> Row:
    import numpy as np

    import compiler
    from compiler.options import Options

    sizes = case.small if args.small else case.sizes
    rng = np.random.default_rng(0)
    arrays = case.inputs(rng, sizes)
    start = time.perf_counter()
    kernel = compiler.define(case.source, target=args.target, options=Options(threads=args.threads))
    first = _time_call(lambda: kernel(*arrays))
    define_ms = (time.perf_counter() - start) * 1e3 - first
    expected = case.numpy(*arrays)
    got = kernel(*arrays)[0]
    if got.shape != expected.shape:
        raise SystemExit(f"bench: {case.name}: tcc shape {got.shape} != numpy {expected.shape}")
    error = float(np.max(np.abs(got - expected) / (1 + np.abs(expected)), initial=0.0))
    t_args = tuple(torch.from_numpy(a) for a in arrays) if torch and case.torch else ()
    runners: dict[str, Callable[[], Any]] = {
        "tcc": lambda: kernel(*arrays),
        "numpy": lambda: case.numpy(*arrays),
    }
    if t_args:
        runners["torch"] = lambda: case.torch(*t_args)  # type: ignore[misc]
    for fn in runners.values():
        fn()  # warm-up
    times: dict[str, list[float]] = {k: [] for k in ("tcc", "numpy", "torch")}
    for _ in range(args.repeat):
        for name, fn in runners.items():
            times[name].append(_time_call(fn))
    compile_ms = define_ms + max(0.0, first - statistics.median(times["tcc"]))
    return Row(case.name, times["tcc"], times["numpy"], times["torch"], compile_ms, error)


def _fmt(x: float | None) -> str:
    return "-" if x is None else f"{x:.3f}" if x < 10 else f"{x:.1f}"


def _ratio(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None or b == 0 else a / b


def format_table(rows: Sequence[Row], threads: int) -> str:
    head = (
        f"{'kernel':34} {'tcc ms':>9} {'numpy ms':>9} {'torch ms':>9} "
        f"{'tcc/np':>7} {'tcc/torch':>9} {'compile ms':>10} {'max err':>8}"
    )
    lines = [f"threads={threads}; medians of interleaved runs", head]
    ratios: dict[str, list[float]] = {"numpy": [], "torch": []}
    for r in rows:
        t, n, p = r.median("tcc"), r.median("numpy"), r.median("torch")
        rn, rp = _ratio(t, n), _ratio(t, p)
        for key, val in (("numpy", rn), ("torch", rp)):
            if val is not None:
                ratios[key].append(val)
        lines.append(
            f"{r.name:34} {_fmt(t):>9} {_fmt(n):>9} {_fmt(p):>9} {_fmt(rn):>7} "
            f"{_fmt(rp):>9} {r.compile_ms:>10.0f} {r.max_error:>8.1e}"
        )

    def geo(xs: list[float]) -> str:
        return _fmt(math.exp(statistics.fmean(math.log(x) for x in xs))) if xs else "-"

    lines.append(
        f"{'geometric mean':34} {'':>9} {'':>9} {'':>9} {geo(ratios['numpy']):>7} {geo(ratios['torch']):>9}"
    )
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tools.bench", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--repeat", type=int, default=15)
    parser.add_argument("--only", nargs="*", default=None, help="substrings of case names")
    parser.add_argument("--target", default="llvm", choices=("llvm", "interp", "cuda"))
    parser.add_argument("--small", action="store_true", help="tiny sizes (smoke test)")
    parser.add_argument("--no-torch", action="store_true", help="skip PyTorch even if installed")
    parser.add_argument("--json", metavar="FILE")
    args = parser.parse_args(argv)
    if args.threads < 1 or args.repeat < 1:
        parser.error("--threads and --repeat must be at least 1")
    for var in _THREAD_VARS:  # before NumPy / torch load their thread pools
        os.environ[var] = str(args.threads)
    torch = None
    if not args.no_torch:
        try:
            import torch

            torch.set_num_threads(args.threads)
        except ImportError:
            print("bench: torch is not installed: PyTorch columns left empty", file=sys.stderr)
    from compiler import TCError

    cases = [c for c in _cases() if not args.only or any(s in c.name for s in args.only)]
    rows: list[Row] = []
    for i, case in enumerate(cases, 1):
        print(f"[{i}/{len(cases)}] {case.name}", file=sys.stderr, flush=True)
        try:
            rows.append(_run_case(case, args, torch))
        except TCError as err:
            print(f"bench: {case.name}: {err.render()}", file=sys.stderr)
            return 1
    print(format_table(rows, args.threads))
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump([r.__dict__ for r in rows], f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
