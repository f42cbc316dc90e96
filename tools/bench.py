"""Benchmarks: tcc kernels against NumPy and PyTorch (CPU), measured in the same run.

    python -m tools.bench [--threads N] [--repeat BLOCKS] [--block CALLS] [--only NAME ...]
                          [--target llvm] [--extra] [--layers] [--no-backward] [--small] [--json FILE]

Every case is a TC def, a NumPy reference and (when torch is installed) a PyTorch
reference. Each system runs with the same thread count (OpenBLAS / OMP / MKL
variables are set before NumPy is imported; `torch.set_num_threads`; tcc's
`Options(threads=...)`).

Fairness: torch and tcc share one libgomp (torch bundles `libgomp.so.1`, the soname
tcc loads), so `--wait-policy` (default passive: idle threads sleep, which on a shared,
loaded machine is an order of magnitude faster than spinning) applies to both; passive
also sets `OPENBLAS_THREAD_TIMEOUT=4` (NumPy's OpenBLAS threads sleep when idle instead
of spinning for about 0.1 s, which the next system's block paid for). Systems
are interleaved in *blocks*: `--block` calls (default 7) of one
system, then the same number of the next, `--repeat` rounds (default 7). A block's
figure is the median of its calls, so the first call after a switch (which pays for
the other runtime's threads still spinning, or its caches) does not decide it; the
table gives the median of the blocks in milliseconds. Calling the systems
alternately call by call charged one runtime's idle-spinning threads to the next.

Rows: `fwd` (a forward call) and, unless `--no-backward`, `fwd+bwd`: tcc's forward
call plus its gradient kernel (`Kernel.grad`, fed the forward's outputs, as
`Kernel.vjp` does) against PyTorch's forward plus `backward()` (autograd), with
gradient 1-filled-random on the case's main output and 0 on auxiliary outputs. The
`call` cases time tiny inputs (the per-call overhead); for them a `vjp` row times
`Kernel.vjp` itself. Ratios tcc/NumPy and tcc/PyTorch (below 1: tcc is faster) and
their geometric means per row kind end the table, with the compile latency (define
to callable, plus the first call's excess over a steady call) and the largest
relative error: the forward against NumPy, the gradients against PyTorch's.
`--small` shrinks every case (a smoke run for tests); `--extra` adds more cases,
`--layers` a suite of training layers (`tools/bench_layers.py`).
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
    output: int = 0  # which output the references compute (the others are auxiliary)
    call: bool = False  # a per-call overhead case (tiny inputs): adds a `vjp` row


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


SOFTMAX = (
    "def softmax(float(N, D) X) -> (Y, mx, s) {\n"
    "    mx(n) max=! X(n, d)\n"
    "    s(n) +=! exp(X(n, d) - mx(n))\n"
    "    Y(n, d) = exp(X(n, d) - mx(n)) / s(n)\n}"
)
LAYERNORM = (
    "def layernorm(float(N, D) X) -> (Y, mean, var) {\n"
    "    mean(n) +=! X(n, d) / D\n"
    "    var(n) +=! (X(n, d) - mean(n)) * (X(n, d) - mean(n)) / D\n"
    "    Y(n, d) = (X(n, d) - mean(n)) / sqrt(var(n) + 1e-5)\n}"
)
ATTENTION = (
    "def attention(float(B, T, E) Q, float(B, T, E) K, float(B, T, E) V) -> (S, mx, P, l, O) {\n"
    "    S(b, i, j) +=! Q(b, i, e) * K(b, j, e)\n"
    "    mx(b, i) max=! S(b, i, j)\n"
    "    P(b, i, j) = exp(S(b, i, j) - mx(b, i))\n"
    "    l(b, i) +=! P(b, i, j)\n"
    "    O(b, i, e) +=! P(b, i, j) * V(b, j, e) / l(b, i)\n}"
)
CONV_BIAS = (
    "def conv_bias(float(N, C, H, W) I, float(M, C, KH, KW) W1, float(M) Bias) -> (T, O) {\n"
    "    T(n, m, h, w) +=! I(n, c, h + kh, w + kw) * W1(m, c, kh, kw)\n"
    "    O(n, m, h, w) = T(n, m, h, w) + Bias(m)\n}"
)
CONV_S2 = (
    "def conv_s2(float(N, C, H, W) I, float(M, C, KH, KW) W1) -> (O) {\n"
    "    O(n, m, h, w) +=! I(n, c, 2 * h + kh, 2 * w + kw) * W1(m, c, kh, kw)\n}"
)
CONV_T2 = (
    "def conv_t2(float(N, C, H, W) I, float(C, M, KH, KW) W1) -> (O) {\n"
    "    O(n, m, 2 * h + kh, 2 * w + kw) +=! I(n, c, h, w) * W1(c, m, kh, kw)\n}"
)
LINEAR_RELU = (
    "def linear_relu(float(B, I) X, float(O, I) W, float(O) b) -> (Y, Z) {\n"
    "    Y(n, o) +=! X(n, i) * W(o, i)\n"
    "    Z(n, o) = fmax(Y(n, o) + b(o), 0)\n}"
)
EXPMV = "def expmv(float(M, N) A, float(N) b) -> (C) {\n    C(i) +=! exp(A(i, j)) * b(j)\n}"
ADD1 = "def add1(float(N) A) -> (B) {\n    B(i) = A(i) + 1\n}"


def _np_softmax(x: Any) -> Any:
    import numpy as np

    e = np.exp(x - x.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def _np_layernorm(x: Any) -> Any:
    import numpy as np

    mean = x.mean(axis=1, keepdims=True)
    var = ((x - mean) ** 2).mean(axis=1, keepdims=True)
    return (x - mean) / np.sqrt(var + 1e-5)


def _np_conv(i: Any, w: Any, stride: int = 1) -> Any:
    import numpy as np

    kh, kw = w.shape[2], w.shape[3]
    win = np.lib.stride_tricks.sliding_window_view(i, (kh, kw), axis=(2, 3))
    win = win[:, :, ::stride, ::stride]
    return np.einsum("nchwij,mcij->nmhw", win, w, optimize=True)


def _np_conv_transpose(i: Any, w: Any, stride: int = 2) -> Any:
    """`torch.nn.functional.conv_transpose2d(i, w, stride=stride)` in NumPy."""
    import numpy as np

    (n, _, h, wd), (_, m, kh, kw) = i.shape, w.shape
    out = np.zeros((n, m, stride * (h - 1) + kh, stride * (wd - 1) + kw), np.float32)
    for a in range(kh):
        for b in range(kw):
            part = np.einsum("nchw,cm->nmhw", i, w[:, :, a, b], optimize=True)
            rows = slice(a, a + stride * (h - 1) + 1, stride)
            cols = slice(b, b + stride * (wd - 1) + 1, stride)
            out[:, :, rows, cols] += part
    return out


def _torch_f() -> Any:
    import torch.nn.functional as F

    return F


def _suite() -> tuple[Case, ...]:
    import numpy as np

    def mm_in(rng: Any, s: dict[str, int]) -> tuple[Any, ...]:
        return _f32(rng, s["M"], s["K"]), _f32(rng, s["K"], s["N"])

    def rows(rng: Any, s: dict[str, int]) -> tuple[Any, ...]:
        return (_f32(rng, s["N"], s["D"]),)

    def qkv(rng: Any, s: dict[str, int]) -> tuple[Any, ...]:
        return tuple(_f32(rng, s["B"], s["T"], s["E"]) for _ in range(3))

    def conv_in(rng: Any, s: dict[str, int]) -> tuple[Any, ...]:
        return _f32(rng, s["N"], s["C"], s["H"], s["H"]), _f32(rng, s["M"], s["C"], 3, 3)

    def conv_bias_in(rng: Any, s: dict[str, int]) -> tuple[Any, ...]:
        return (*conv_in(rng, s), _f32(rng, s["M"]))

    def linear_in(rng: Any, s: dict[str, int]) -> tuple[Any, ...]:
        return _f32(rng, s["B"], s["I"]), _f32(rng, s["O"], s["I"]), _f32(rng, s["O"])

    def expmv_in(rng: Any, s: dict[str, int]) -> tuple[Any, ...]:
        return _f32(rng, s["M"], s["N"]) * np.float32(0.1), _f32(rng, s["N"])

    def vec(rng: Any, s: dict[str, int]) -> tuple[Any, ...]:
        return (_f32(rng, s["N"]),)

    def attention_np(q: Any, k: Any, v: Any) -> Any:
        return _np_softmax(q @ k.transpose(0, 2, 1)) @ v

    def attention_torch(q: Any, k: Any, v: Any) -> Any:
        return (q @ k.transpose(1, 2)).softmax(-1) @ v

    def conv_s2_torch(i: Any, w: Any) -> Any:
        return _torch_f().conv2d(i, w, stride=2)

    def conv_bias_torch(i: Any, w: Any, b: Any) -> Any:
        return _torch_f().conv2d(i, w, b)

    def linear_relu_torch(x: Any, w: Any, b: Any) -> Any:
        return _torch_f().linear(x, w, b).relu()

    return (
        Case("call: add1 N=4", ADD1, {"N": 4}, {"N": 4}, vec, lambda a: a + 1,
             lambda a: a + 1, call=True),
        Case("call: softmax 2x4", SOFTMAX, {"N": 2, "D": 4}, {"N": 2, "D": 4}, rows,
             _np_softmax, lambda x: x.softmax(1), call=True),
        Case("softmax 256x1024", SOFTMAX, {"N": 256, "D": 1024}, {"N": 3, "D": 5}, rows,
             _np_softmax, lambda x: x.softmax(1)),
        Case("layernorm 256x1024", LAYERNORM, {"N": 256, "D": 1024}, {"N": 3, "D": 5}, rows,
             _np_layernorm,
             lambda x: _torch_f().layer_norm(x, x.shape[1:])),
        Case("attention B8 T128 E64", ATTENTION, {"B": 8, "T": 128, "E": 64},
             {"B": 2, "T": 3, "E": 4}, qkv, attention_np, attention_torch, output=4),
        Case("conv2d N8 C16 32^2 M16 3x3", CONV, {"N": 8, "C": 16, "H": 32, "M": 16, "K": 3},
             {"N": 2, "C": 2, "H": 6, "M": 3, "K": 3}, _conv_case("", 1, 1, 1, 1, 3).inputs,
             _conv_numpy, _torch_conv),
        Case("conv2d+bias N8 C32 28^2 M32 3x3", CONV_BIAS, {"N": 8, "C": 32, "H": 28, "M": 32},
             {"N": 2, "C": 2, "H": 6, "M": 3}, conv_bias_in,
             lambda i, w, b: _np_conv(i, w) + b[None, :, None, None], conv_bias_torch,
             output=1),
        Case("conv2d stride 2 N8 C16 33^2 M32 3x3", CONV_S2,
             {"N": 8, "C": 16, "H": 33, "M": 32}, {"N": 2, "C": 2, "H": 7, "M": 3}, conv_in,
             lambda i, w: _np_conv(i, w, 2), conv_s2_torch),
        Case("linear+relu 128x512->256", LINEAR_RELU, {"B": 128, "I": 512, "O": 256},
             {"B": 3, "I": 5, "O": 4}, linear_in,
             lambda x, w, b: np.maximum(x @ w.T + b, 0), linear_relu_torch, output=1),
        Case("matmul 512^3", MATMUL, {"M": 512, "K": 512, "N": 512}, {"M": 5, "K": 7, "N": 6},
             mm_in, np.matmul, lambda a, b: a @ b),
        Case("matmul 1024^3", MATMUL, {"M": 1024, "K": 1024, "N": 1024},
             {"M": 9, "K": 4, "N": 10}, mm_in, np.matmul, lambda a, b: a @ b),
        Case("sum_j exp(A(i,j))*b(j) 4096^2", EXPMV, {"M": 4096, "N": 4096},
             {"M": 5, "N": 7}, expmv_in, lambda a, b: np.exp(a) @ b,
             lambda a, b: a.exp() @ b),
    )  # fmt: skip


def _cases(extra: bool = False, layers: bool = False) -> tuple[Case, ...]:
    """The benchmark suite (issue 10's cases and issue 46's slow-shape families,
    `tools/bench_shapes.py`); with `extra` the older extra cases, with `layers` the
    training-layer suite (`tools/bench_layers.py`)."""
    from tools import bench_layers, bench_shapes

    return (
        _suite()
        + bench_shapes.shape_cases()
        + (bench_layers.extra_cases() if extra else ())
        + (bench_layers.layer_cases() if layers else ())
    )


def _time_call(fn: Callable[[], Any]) -> float:
    start = time.perf_counter()
    fn()
    return (time.perf_counter() - start) * 1e3


def measure(
    runners: dict[str, Callable[[], Any]], blocks: int, block: int
) -> dict[str, list[float]]:
    """Per system, one figure per block: the median of `block` consecutive calls; the
    systems take turns block by block, `blocks` rounds (see the module doc)."""
    times: dict[str, list[float]] = {name: [] for name in runners}
    for _ in range(blocks):
        for name, fn in runners.items():
            calls = [_time_call(fn) for _ in range(block)]
            times[name].append(statistics.median(calls))
    return times


@dataclass
class Row:
    name: str
    kind: str  # fwd | fwd+bwd | vjp
    tcc: list[float]
    numpy: list[float]
    torch: list[float]
    compile_ms: float
    max_error: float | None

    def median(self, which: str) -> float | None:
        times = getattr(self, which)
        return statistics.median(times) if times else None


def _relative_error(got: Any, want: Any) -> float:
    import numpy as np

    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    if got.shape != want.shape:
        raise SystemExit(f"bench: shape {got.shape} != reference {want.shape}")
    return float(np.max(np.abs(got - want) / (1 + np.abs(want)), initial=0.0))


def _run_case(case: Case, args: argparse.Namespace, torch: Any) -> list[Row]:
    import numpy as np

    import compiler
    from compiler.options import Options

    sizes = case.small if args.small else case.sizes
    arrays = case.inputs(np.random.default_rng(0), sizes)
    start = time.perf_counter()
    kernel = compiler.define(case.source, target=args.target, options=Options(threads=args.threads))
    first = _time_call(lambda: kernel(*arrays))
    define_ms = (time.perf_counter() - start) * 1e3 - first
    error = _relative_error(kernel(*arrays)[case.output], case.numpy(*arrays))
    t_args = tuple(torch.from_numpy(a) for a in arrays) if torch and case.torch else ()
    runners: dict[str, Callable[[], Any]] = {
        "tcc": lambda: kernel(*arrays),
        "numpy": lambda: case.numpy(*arrays),
    }
    if t_args:
        runners["torch"] = lambda: case.torch(*t_args)  # type: ignore[misc]
    for fn in runners.values():
        fn()  # warm-up
    times = measure(runners, args.repeat, args.block)
    compile_ms = define_ms + max(0.0, first - statistics.median(times["tcc"]))
    rows = [Row(case.name, "fwd", times["tcc"], times["numpy"], times.get("torch", []),
                compile_ms, error)]  # fmt: skip
    if not args.no_backward:
        rows += _backward_rows(case, kernel, arrays, args, torch)
    return rows


def _backward_rows(
    case: Case, kernel: Any, arrays: tuple[Any, ...], args: argparse.Namespace, torch: Any
) -> list[Row]:
    """fwd+bwd (and, for call cases, vjp) rows: tcc's forward + gradient kernel against
    torch's forward + autograd backward, gradients compared with torch's."""
    import numpy as np

    start = time.perf_counter()
    grad = kernel.grad
    compile_ms = (time.perf_counter() - start) * 1e3
    outs = kernel(*arrays)
    rng = np.random.default_rng(1)
    g_outs = tuple(
        rng.standard_normal(o.shape).astype(o.dtype) if k == case.output else np.zeros_like(o)
        for k, o in enumerate(outs)
    )
    inputs = [t.name for t in kernel.ranged.checked.inputs]
    outputs = [t.name for t in kernel.ranged.checked.outputs]
    params = [t.name for t in grad.ranged.checked.inputs]
    names = [t.name for t in grad.ranged.checked.outputs]

    def tcc() -> dict[str, Any]:
        forward = kernel(*arrays)
        by_name = dict(zip(inputs, arrays, strict=True)) | dict(zip(outputs, forward, strict=True))
        by_name |= {f"{o}_grad": g for o, g in zip(outputs, g_outs, strict=True)}
        return dict(zip(names, grad(*[by_name[p] for p in params]), strict=True))

    runners: dict[str, Callable[[], Any]] = {"tcc": tcc}
    error = None
    if torch and case.torch:
        leaves = [torch.from_numpy(a.copy()).requires_grad_(True) for a in arrays]
        g_main = torch.from_numpy(g_outs[case.output])

        def torch_fwd_bwd() -> list[Any]:
            for t in leaves:
                t.grad = None
            case.torch(*leaves).backward(g_main)  # type: ignore[misc]
            return [t.grad for t in leaves]

        runners["torch"] = torch_fwd_bwd
        want = torch_fwd_bwd()
        got = tcc()
        error = max(
            _relative_error(got[f"{n}_grad"], w.numpy()) for n, w in zip(inputs, want, strict=True)
        )
    for fn in runners.values():
        fn()
    if case.call:
        runners["vjp"] = lambda: kernel.vjp(*arrays, grad_outputs=g_outs)
        runners["vjp"]()
    times = measure(runners, args.repeat, args.block)
    rows = [Row(case.name, "fwd+bwd", times["tcc"], [], times.get("torch", []), compile_ms, error)]
    if case.call:
        rows.append(Row(case.name, "vjp", times["vjp"], [], times.get("torch", []), 0.0, None))
    return rows


def _fmt(x: float | None) -> str:
    if x is None:
        return "-"
    return f"{x:.4f}" if x < 0.1 else f"{x:.3f}" if x < 10 else f"{x:.1f}"


def _ratio(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None or b == 0 else a / b


def _geo(xs: list[float]) -> str:
    return _fmt(math.exp(statistics.fmean(math.log(x) for x in xs))) if xs else "-"


def format_table(rows: Sequence[Row], threads: int) -> str:
    head = (
        f"{'kernel':36} {'kind':7} {'tcc ms':>9} {'numpy ms':>9} {'torch ms':>9} "
        f"{'tcc/np':>7} {'tcc/torch':>9} {'compile ms':>10} {'max err':>8}"
    )
    policy = os.environ.get("OMP_WAIT_POLICY", "default")
    spin = os.environ.get("GOMP_SPINCOUNT")
    policy += f"; GOMP_SPINCOUNT={spin}" if spin is not None else ""
    lines = [f"threads={threads}; OMP_WAIT_POLICY={policy}; medians of interleaved blocks", head]
    ratios: dict[tuple[str, str], list[float]] = {}
    for r in rows:
        t, n, p = r.median("tcc"), r.median("numpy"), r.median("torch")
        rn, rp = _ratio(t, n), _ratio(t, p)
        for key, val in (("numpy", rn), ("torch", rp)):
            if val is not None and not r.name.startswith("call"):
                ratios.setdefault((r.kind, key), []).append(val)
        err = "-" if r.max_error is None else f"{r.max_error:.1e}"
        lines.append(
            f"{r.name:36} {r.kind:7} {_fmt(t):>9} {_fmt(n):>9} {_fmt(p):>9} {_fmt(rn):>7} "
            f"{_fmt(rp):>9} {r.compile_ms:>10.0f} {err:>8}"
        )
    for kind in ("fwd", "fwd+bwd"):
        if any(k == kind for k, _ in ratios):
            lines.append(
                f"{'geometric mean (no call rows)':36} {kind:7} {'':>9} {'':>9} {'':>9} "
                f"{_geo(ratios.get((kind, 'numpy'), [])):>7} "
                f"{_geo(ratios.get((kind, 'torch'), [])):>9}"
            )
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tools.bench", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--repeat", type=int, default=7, help="blocks per system")
    parser.add_argument("--block", type=int, default=7, help="consecutive calls per block")
    parser.add_argument("--only", nargs="*", default=None, help="substrings of case names")
    parser.add_argument("--target", default="llvm", choices=("llvm", "interp", "cuda"))
    parser.add_argument("--extra", action="store_true", help="add the extra cases")
    parser.add_argument(
        "--layers", action="store_true", help="add the training-layer suite (tools/bench_layers.py)"
    )
    parser.add_argument("--no-backward", action="store_true", help="forward rows only")
    parser.add_argument("--small", action="store_true", help="tiny sizes (smoke test)")
    parser.add_argument("--no-torch", action="store_true", help="skip PyTorch even if installed")
    parser.add_argument(
        "--wait-policy",
        default="passive",
        choices=("passive", "active"),
        help="OMP_WAIT_POLICY of the libgomp torch and tcc share",
    )
    parser.add_argument(
        "--spin-count",
        type=int,
        metavar="N",
        help="GOMP_SPINCOUNT for both (idle threads spin N rounds, then sleep; set, it "
        "overrides the policy's: docs/internals/targets.md)",
    )
    parser.add_argument("--json", metavar="FILE")
    args = parser.parse_args(argv)
    if args.threads < 1 or args.repeat < 1 or args.block < 1:
        parser.error("--threads, --repeat and --block must be at least 1")
    for var in _THREAD_VARS:  # before NumPy / torch load their thread pools
        os.environ[var] = str(args.threads)
    # torch and tcc share one libgomp (same soname): one wait policy for both
    os.environ["OMP_WAIT_POLICY"] = args.wait_policy
    if args.spin_count is not None:
        if args.spin_count < 0:
            parser.error("--spin-count must be at least 0")
        os.environ["GOMP_SPINCOUNT"] = str(args.spin_count)
    # NumPy's OpenBLAS spins its idle threads for about 0.1 s after each call (measured:
    # 60 ms of CPU in a 0.2 s sleep after a 512^3 matmul), which the next system's whole
    # block paid for; with the passive policy its threads sleep at once, as the others do
    if args.wait_policy == "passive":
        os.environ.setdefault("OPENBLAS_THREAD_TIMEOUT", "4")
    torch = None
    if not args.no_torch:
        try:
            import torch

            torch.set_num_threads(args.threads)
        except ImportError:
            print("bench: torch is not installed: PyTorch columns left empty", file=sys.stderr)
    from compiler import TCError

    cases = [
        c
        for c in _cases(args.extra, args.layers)
        if not args.only or any(s in c.name for s in args.only)
    ]
    rows: list[Row] = []
    for i, case in enumerate(cases, 1):
        print(f"[{i}/{len(cases)}] {case.name}", file=sys.stderr, flush=True)
        try:
            rows.extend(_run_case(case, args, torch))
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
