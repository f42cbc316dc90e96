"""Gradient checks of generated float64 programs.

For every target: `Kernel.vjp` against central finite differences of the ORACLE (one
random direction per float input, so a wrong gradient of one input is not hidden by
another's), with random symbolic-zero cotangents (None for some outputs); and the
dot-product test <jvp(t), c> == <t, vjp(c)> on the kernel itself. Data within reach of
a kink or tie (the oracle's `gap`) is redrawn; a program whose data keeps landing on one
is skipped.
"""

from __future__ import annotations

import warnings

import numpy as np

from tools import fuzz_run
from tools.fuzz_ir import Invalid, Program, evaluate
from tools.fuzz_run import Outcome, _failure, make_inputs, signature

STEP = 1e-6
NOISE = "(noise)"  # the key in `fd` of the finite differences' rounding bound
MIN_GAP = 1e-3


def _seeded(p: Program, inputs: dict, cots: list) -> list[np.ndarray]:
    """The oracle's outputs that have a cotangent, each times its cotangent elementwise
    (an element left at a `max=!` identity (+-inf) is a constant: 0)."""
    vals = evaluate(p, dict(p.sizes), inputs).values
    out = []
    for o, c in zip(p.outputs, cots, strict=True):
        if c is not None:
            keep = np.isfinite(vals[o])
            out.append(np.where(keep, c, 0.0) * np.where(keep, vals[o], 0.0))
    return out


def _difference(p: Program, up: dict, down: dict, cots: list) -> float:
    """`<c, f(up) - f(down)>`, differenced element by element before summing: a huge
    output (a product of many terms) would otherwise swallow the others' changes in
    the rounding of one total (seed 22680: a loss of 4e17, its O part lost)."""
    pairs = zip(_seeded(p, up, cots), _seeded(p, down, cots), strict=True)
    return float(sum(np.sum(a - b) for a, b in pairs))


def _data(p: Program, seed: int) -> tuple[dict, dict, bool] | None:
    """Inputs away from kinks and ties (float64), the oracle's outputs there, and
    whether the program computes a float32 value (a builtin of a float literal)."""
    for attempt in range(4):
        inputs = make_inputs(p, seed * 7 + attempt, exact=False)
        try:
            exp = evaluate(p, dict(p.sizes), inputs)
        except Invalid:
            continue
        if exp.gap > MIN_GAP:
            return inputs, exp.values, exp.float32
    return None


def check_gradients(p: Program, seed: int, targets: tuple) -> list[Outcome]:
    if p.dtype != "double":
        return []
    got = _data(p, seed)
    if got is None:
        return [Outcome("ok", "grad-skipped", "", "data near a kink")]
    inputs, values, float32 = got
    # <jvp(t), c> and <t, vjp(c)> come from two kernels: a float32 value (`acos(0.7)`,
    # TC's type of a float literal's builtin) may differ by an ulp of float32 between
    # them (vector and scalar builtins; seed 50010), else by double rounding
    pairing = 32 * float(np.finfo(np.float32).eps) if float32 else 1e-8
    rng = np.random.default_rng(seed + 99)
    cots = [
        None if len(p.outputs) > 1 and rng.random() < 0.3 else rng.standard_normal(values[o].shape)
        for o in p.outputs
    ]
    if all(c is None for c in cots):
        cots[0] = rng.standard_normal(values[p.outputs[0]].shape)
    floats = [t.name for t in p.inputs if t.dtype == "double"]
    dirs = {n: rng.standard_normal(inputs[n].shape) for n in floats}
    fd = {}
    for n in floats:
        try:
            up = dict(inputs, **{n: inputs[n] + STEP * dirs[n]})
            down = dict(inputs, **{n: inputs[n] - STEP * dirs[n]})
            fd[n] = _difference(p, up, down, cots) / (2 * STEP)
        except Invalid:
            return [Outcome("ok", "grad-skipped", "", "finite difference left the domain")]
    # the differences' rounding: each output element is evaluated to a few ulps, so
    # `<c, f(up) - f(down)>` carries up to about `ulps * eps * sum |c * f|` of noise, over
    # `2 * STEP` (seed 40464: a derivative of 5e-5 beside outputs of 6 had 1.4e-9)
    magnitude = sum(
        float(np.abs(c * values[o]).sum())
        for c, o in zip(cots, p.outputs, strict=True)
        if c is not None
    )
    noise = 16 * np.finfo(np.float64).eps * magnitude / (2 * STEP)
    fd[NOISE] = noise if np.isfinite(noise) else 0.0  # never a bound that passes anything
    args = [inputs[t.name] for t in p.inputs]
    outcomes = []
    for target in targets:
        outcomes += _check_target(p, seed, target, args, cots, dirs, fd, pairing)
    return outcomes


def _check_target(p, seed, target, args, cots, dirs, fd, pairing) -> list[Outcome]:  # noqa: ANN001
    """The vjp outcome on `target`, then (unless it failed) the dot-product test's."""
    grad = _check_vjp(p, seed, target, args, cots, dirs, fd)
    if isinstance(grad, Outcome):
        return [grad]
    kernel, dot_vjp = grad
    if target == "cuda-emulated":  # Kernel.jvp is host-only
        return [Outcome("ok", f"grad-{target}")]
    tangents = [dirs.get(t.name) for t in p.inputs]
    return [
        Outcome("ok", f"grad-{target}"),
        _check_jvp(kernel, target, args, cots, tangents, dot_vjp, pairing),
    ]


def _check_vjp(p, seed, target, args, cots, dirs, fd) -> Outcome | tuple:  # noqa: ANN001
    name = f"grad-{target}"
    fuzz_run.announce(name)
    try:
        kernel, opts = fuzz_run.compile_for(p, target, seed)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            grads = kernel.vjp(*args, grad_outputs=cots)
    except Exception as e:  # noqa: BLE001 - every exception is an outcome
        return _failure(name, e)
    by_name = dict(zip((t.name for t in p.inputs), grads, strict=True))
    dot_vjp = 0.0
    for n, d in dirs.items():
        g = by_name[n]
        if g is None:
            g = np.zeros_like(d)
        g = np.asarray(g, dtype=np.float64)
        if g.shape != d.shape:
            return Outcome("wrong", name, signature("wrong", name, None, f"{n}_grad shape"),
                           f"{n}_grad shape {g.shape}, expected {d.shape}")  # fmt: skip
        a, b = float(np.vdot(g, d)), fd[n]
        dot_vjp += a
        scale = max(abs(a), abs(b), float(np.abs(g).sum() * np.abs(d).max()) * 1e-3, 1e-6)
        if not abs(a - b) <= 1e-5 * scale + fd[NOISE]:
            return Outcome("wrong", name, signature("wrong", name, None, f"{n}_grad"),
                           f"<{n}_grad, t> = {a!r}, finite differences of the oracle {b!r} "
                           f"{opts}".strip())  # fmt: skip
    return kernel, dot_vjp


def _check_jvp(kernel, target, args, cots, tangents, dot_vjp, pairing) -> Outcome:  # noqa: ANN001
    name = f"jvp-{target}"
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            _, touts = kernel.jvp(*args, tangents=tangents)
    except Exception as e:  # noqa: BLE001
        return _failure(name, e)
    dot_jvp = sum(
        float(np.vdot(c, np.asarray(t, dtype=np.float64)))
        for c, t in zip(cots, touts, strict=True)
        if c is not None and t is not None
    )
    if not abs(dot_jvp - dot_vjp) <= pairing * max(1.0, abs(dot_jvp), abs(dot_vjp)):
        return Outcome("wrong", name, signature("wrong", name, None, "dot-product"),
                       f"<jvp(t), c> = {dot_jvp!r}, <t, vjp(c)> = {dot_vjp!r}")  # fmt: skip
    return Outcome("ok", name)
