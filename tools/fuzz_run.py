"""Running a generated program on tcc's targets and judging each outcome.

    outcomes = check_program(p, seed, targets=("interp", "llvm"), exact=True, grad=False)

Only the public API is the system under test (`compiler.define`, `compiler.infer_shapes`,
`Kernel.vjp` / `Kernel.jvp`; the tuner's option space for random `Options`). Each
`Outcome` is one of: ok, wrong (a value, shape or dtype differs from the oracle), crash
(an exception that is no `TCError`), rejected (a `TCError` on a valid program),
unsupported (a `TCError` for a construct the README lists as unsupported), hang (set by
the driver when a program runs past its time).
"""

from __future__ import annotations

import random
import re
import traceback
import warnings
from dataclasses import dataclass

import numpy as np

from tools.fuzz_ir import FLOATS, INTS, Expected, Program, evaluate, ival, show_program

TARGETS = ("interp", "llvm", "llvm-t2", "llvm-rand", "cuda-emulated")
# Constructs tcc rejects by design (docs: the language page's builtins, gradients): no
# gradient of lgamma/tgamma or non-affine scatters, builtins only some targets implement.
UNSUPPORTED = re.compile(
    r"lgamma|tgamma|non-affine|not affine|`\*=` without|\*= without"
    r"|is not supported by the native targets|is not supported by the reference evaluator"
)


@dataclass(frozen=True)
class Outcome:
    kind: str  # ok | wrong | crash | rejected | unsupported | hang
    target: str
    signature: str = ""
    detail: str = ""


def make_inputs(p: Program, seed: int, exact: bool) -> dict[str, np.ndarray]:
    """Input arrays in tcc's dtypes: dyadic k/4 (exact) or normal (inexact) floats,
    index tensors within the extent they index."""
    rng = np.random.default_rng(seed)
    sizes, bounds = dict(p.sizes), dict(p.bounds)
    out = {}
    for t in p.inputs:
        shape = tuple(sizes[d.name] if hasattr(d, "name") else int(d.value) for d in t.dims)
        if t.dtype in INTS:
            top = ival(bounds[t.name], {}, sizes)
            out[t.name] = rng.integers(0, top, size=shape).astype(INTS[t.dtype])
        elif exact:
            out[t.name] = (rng.integers(-8, 9, size=shape) / 4).astype(FLOATS[t.dtype])
        else:
            out[t.name] = rng.standard_normal(shape).astype(FLOATS[t.dtype])
    return out


# Called with a target's name before it runs (the fuzzer's worker sends it to the
# parent, which then blames a process that dies, a segfault, on that target).
ANNOUNCE: list = []


def announce(target: str) -> None:
    for hook in ANNOUNCE:
        hook(target)


def signature(kind: str, target: str, exc: BaseException | None = None, what: str = "") -> str:
    """A failure's group: kind, target, and the exception's type + normalised first line."""
    if exc is None:
        return f"{kind}:{target}:{what}"
    first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    first = re.sub(r"^<[^>]*>:\d+:\d+: ", "", first)
    first = re.sub(r"'[^']*'|`[^`]*`", "'_'", first)
    first = re.sub(r"\b[A-Za-z_]*\d+[A-Za-z_\d]*\b|\d+", "#", first)[:100]
    return f"{kind}:{target}:{type(exc).__name__}: {first}"


def _failure(target: str, exc: BaseException) -> Outcome:
    from compiler import TCError

    if isinstance(exc, TCError):
        kind = "unsupported" if UNSUPPORTED.search(str(exc)) else "rejected"
    else:
        kind = "crash"
    tb = traceback.format_exception(exc)[-6:]
    return Outcome(kind, target, signature(kind, target, exc), "".join(tb)[-1500:])


def _options(target: str, ranged: object, p: Program, seed: int) -> object:
    """The Options of a CPU target; `llvm-rand`'s are drawn from the tuner's space of
    `ranged` (the ranged def) at the program's sizes."""
    from compiler.options import Options
    from compiler.tune.space import Space, SpaceContext

    if target == "llvm":
        return Options(threads=1)
    if target == "llvm-t2":
        return Options(threads=2)
    ctx = SpaceContext.of(ranged, dict(p.sizes), cores=2)
    return Space.for_options(Options, ctx).sample(random.Random(seed))


def compile_for(p: Program, target: str, seed: int) -> tuple[object, str]:
    """The kernel for `target` and a description of its options. Only the target's own
    kernel is compiled: `llvm-rand` draws its options from the ranged def alone."""
    import compiler
    from compiler import pipeline

    text = show_program(p)
    if target == "interp" or target == "cuda-emulated":
        return compiler.define(text, "f", target=target, cache=None), ""
    ranged = pipeline.run(text, "f", upto="ranges") if target == "llvm-rand" else None
    opts = _options(target, ranged, p, seed)
    kernel = compiler.define(text, "f", options=opts, cache=None)
    return kernel, "Options(threads=1)" if target == "llvm" else repr(opts)


def compare(name: str, got: np.ndarray, exp: Expected) -> str | None:
    """None if `got` matches the oracle's output `name` (shape, dtype, values), else a
    description."""
    want, tol, stable = exp.values[name], exp.tol[name], exp.stable[name]
    if got.shape != want.shape:
        return f"{name}: shape {got.shape}, expected {want.shape}"
    dtype = np.dtype(FLOATS[exp.dtypes[name]])
    if got.dtype != dtype:
        return f"{name}: dtype {got.dtype}, expected {dtype}"
    g = got.astype(np.float64)
    with np.errstate(invalid="ignore"):
        err = np.where(stable & (g != want), np.abs(g - want), 0.0)
    err = np.where(np.isnan(g) & stable, np.inf, err)
    tol = np.maximum(tol, _unrepresentable(want, dtype))
    bad = err > tol
    if not bad.any():
        return None
    at = np.unravel_index(np.argmax(np.where(bad, err - tol, -1.0)), want.shape)
    return (
        f"{name}{tuple(int(a) for a in at)}: expected {want[at]!r} got {g[at]!r} "
        f"(tol {tol[at]:.3g}, {int(bad.sum())} of {bad.size} elements differ)"
    )


def _unrepresentable(want: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """Per element, one unit in the last place of `dtype` where the oracle's value
    (computed in float64) is not a value of `dtype`, else 0: the final rounding alone
    may then go either way, whatever error bound the oracle derived (a product that
    outgrows float32's 24 bits; a value below its smallest subnormal, which is 0)."""
    if dtype == np.float64:
        return np.zeros(want.shape)
    with np.errstate(over="ignore", invalid="ignore"):
        rounded = want.astype(dtype)
        ulp = np.spacing(np.abs(rounded)).astype(np.float64)
    return np.where(np.isfinite(want) & (rounded.astype(np.float64) != want), ulp, 0.0)


def check_forward(p: Program, seed: int, targets: tuple, exact: bool) -> list[Outcome]:
    import compiler

    inputs = make_inputs(p, seed, exact)
    sizes = dict(p.sizes)
    exp = evaluate(p, sizes, {k: v.astype(np.float64) for k, v in inputs.items()})
    args = [inputs[t.name] for t in p.inputs]
    outcomes = []
    try:
        shapes = compiler.infer_shapes(
            show_program(p), "f", {k: v.shape for k, v in inputs.items()}
        )
        want = {o: exp.values[o].shape for o in p.outputs}
        if {k: tuple(v) for k, v in shapes.items()} != want:
            what = "infer_shapes"
            outcomes.append(Outcome("wrong", "shapes", signature("wrong", "shapes", None, what),
                                    f"infer_shapes {shapes}, expected {want}"))  # fmt: skip
    except Exception as e:  # noqa: BLE001 - every exception is an outcome
        outcomes.append(_failure("shapes", e))
    for target in targets:
        announce(target)
        try:
            kernel, opts = compile_for(p, target, seed)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                got = kernel(*args)
        except Exception as e:  # noqa: BLE001
            outcomes.append(_failure(target, e))
            continue
        for name, arr in zip(p.outputs, got, strict=True):
            bad = compare(name, np.asarray(arr), exp)
            if bad:
                sig = signature("wrong", target, None, name)
                outcomes.append(Outcome("wrong", target, sig, f"{bad} {opts}".strip()))
                break
        else:
            outcomes.append(Outcome("ok", target))
    return outcomes
