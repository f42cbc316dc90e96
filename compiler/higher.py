"""Forward mode and second order for kernels: the tangent TC, jvp, and hvp.

    jvp(source, name=None, *, constants=None, wrt=None) -> str      (compiler.jvp)
    kernel_jvp(kernel, arrays, tangents)          -> (outputs, output_tangents)
    kernel_hvp(kernel, arrays, vectors, grad_outputs) -> one H·v per input

The tangent def comes from the pipeline's `grad` pass with `jvp=True`
(`compiler.autodiff.jvp_def`); it stays IR from autodiff to code, as the gradient.
A None tangent is a symbolic zero: the tangent def is derived for the inputs with
a tangent only (one compiled tangent kernel per such subset, kept on the kernel).

`kernel_hvp` is forward-over-reverse: the jvp of the gradient def. The gradient def
reads the forward outputs as parameters, so their tangents (the forward's jvp)
enter as tangents of those parameters; the output adjoints `grad_outputs` are
constants (zero tangent). The result is `d/dt vjp(x + t v, grad_outputs)` at t=0,
i.e. H v for a scalar loss with `grad_outputs=(1,)`.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from compiler import pipeline
from compiler.diagnostics import ShapeError, TCError
from compiler.frontend.checked import RangedDef
from compiler.frontend.printer import print_def
from compiler.interp.expr import NP_DTYPE

if TYPE_CHECKING:
    from compiler.kernel import Kernel

_LOCK = threading.Lock()


def jvp(
    source: str,
    name: str | None = None,
    *,
    constants: Mapping[str, object] | None = None,
    wrt: Iterable[str] | None = None,
) -> str:
    """The tangent def of def `name` of `source`, as TC text (it re-parses)."""
    from compiler.templates import substitute

    text = source if constants is None else substitute(source, constants)
    tangent = pipeline.run(text, name, upto="grad", jvp=True, wrt=wrt)
    return print_def(tangent.checked.definition) + "\n"


def tangent_ranged(ranged: RangedDef, wrt: Iterable[str] | None = None) -> tuple[RangedDef, dict]:
    """The tangent def of a ranged def (checked and ranged, in memory) and, per
    forward tensor with a tangent, the tangent tensor's name."""
    from compiler.autodiff import jvp_def
    from compiler.frontend.scopes import name_supply

    ctx = pipeline.PassContext()
    tangent = jvp_def(ranged, wrt=wrt, names=name_supply(ranged.checked.definition))
    result = pipeline.run_from(tangent.definition, ctx, start="check", upto="ranges")
    return pipeline.check_generated(result), dict(tangent.tangents)


def _tangent_kernel(kernel: Kernel, wrt: tuple[str, ...]) -> tuple[Kernel, dict]:
    """The compiled tangent kernel of `kernel` for the inputs `wrt`, kept on it."""
    from compiler.kernel import define_ranged

    with _LOCK:
        found = kernel.__dict__.setdefault("_tangent_kernels", {}).get(wrt)
    if found is None:
        ranged, names = tangent_ranged(kernel.ranged, wrt)
        cache = getattr(kernel, "cache", True)
        compiled = define_ranged(ranged, target=kernel.target, options=kernel.options, cache=cache)
        found = (compiled, names)
        with _LOCK:
            kernel.__dict__["_tangent_kernels"][wrt] = found
    return found


def kernel_jvp(
    kernel: Kernel, arrays: Sequence[Any], tangents: Sequence[Any]
) -> tuple[tuple[np.ndarray, ...], tuple[np.ndarray | None, ...]]:
    """The outputs of `kernel` at `arrays` and their tangents given one tangent per
    input (None: zero). An output's tangent is None when it is not a float."""
    checked = kernel.ranged.checked
    inputs, outputs = checked.inputs, checked.outputs
    if isinstance(tangents, np.ndarray) or len(tangents) != len(inputs):
        names = ", ".join(t.name for t in inputs)
        raise ShapeError(
            f"tangents= needs one array (or None) per input of def '{kernel.name}' ({names})",
            hint="pass tangents=(dA, None, ...) as a tuple, in input order",
        )
    wrt: list[str] = []
    for info, value, t in zip(inputs, arrays, tangents, strict=False):
        if t is None:
            continue
        if not info.dtype.is_float:
            raise ShapeError(
                f"input '{info.name}' is {info.dtype.value}: it has no tangent; pass None",
                info.span,
            )
        if tuple(np.shape(t)) != tuple(np.shape(value)):
            raise ShapeError(
                f"the tangent of '{info.name}' has shape {tuple(np.shape(t))}, expected "
                f"{tuple(np.shape(value))} (the shape of the input)",
                info.span,
            )
        wrt.append(info.name)
    given = [
        np.asarray(t, dtype=NP_DTYPE[i.dtype])
        for i, t in zip(inputs, tangents, strict=True)
        if t is not None
    ]
    tangent, names = _tangent_kernel(kernel, tuple(wrt))
    results = tangent(*arrays, *given)
    by_name = {t.name: r for t, r in zip(tangent.ranged.checked.outputs, results, strict=True)}
    values = tuple(by_name[t.name] for t in outputs)
    dots = tuple(
        None
        if not t.dtype.is_float
        else by_name[names[t.name]]
        if t.name in names
        else np.zeros_like(by_name[t.name])
        for t in outputs
    )
    return values, dots


def kernel_hvp(
    kernel: Kernel, arrays: Sequence[Any], vectors: Sequence[Any], grad_outputs: Sequence[Any]
) -> tuple[np.ndarray | None, ...]:
    """Forward-over-reverse: the derivative of `kernel.vjp(*arrays, grad_outputs=...)`
    along `vectors` (one per input, None: zero); one array per input (None for an
    integer input)."""
    if kernel.backward is not None:
        raise TCError(
            f"hvp of def '{kernel.name}' needs the derived gradient; its gradient is the "
            f"hand-written def '{kernel.backward}'",
            hint="define the kernel without backward= to use hvp",
        )
    checked = kernel.ranged.checked
    outputs, out_dots = kernel_jvp(kernel, arrays, vectors)
    _check_grad_outputs(kernel, outputs, grad_outputs)
    backward = kernel.grad
    params = backward.ranged.checked.inputs
    n_in, n_out = len(checked.inputs), len(checked.outputs)
    forward = dict(zip((t.name for t in checked.outputs), outputs, strict=True))
    dots = dict(zip((t.name for t in checked.outputs), out_dots, strict=True))
    values: list[Any] = [*arrays]
    tangents: list[Any] = list(vectors)
    for p in params[n_in : len(params) - n_out]:  # the forward outputs the gradient reads
        values.append(forward[p.name])
        tangents.append(dots[p.name])
    values.extend(grad_outputs)
    tangents.extend([None] * n_out)
    _, grad_dots = kernel_jvp(backward, values, tangents)
    floats = iter(grad_dots)
    return tuple(next(floats) if t.dtype.is_float else None for t in checked.inputs)


def _check_grad_outputs(kernel: Kernel, outputs: Sequence[Any], grad_outputs: Any) -> None:
    infos = kernel.ranged.checked.outputs
    if isinstance(grad_outputs, np.ndarray) or len(grad_outputs) != len(infos):
        names = ", ".join(t.name for t in infos)
        raise ShapeError(
            f"grad_outputs= needs one array per output of def '{kernel.name}' ({names})",
            hint="pass grad_outputs=(dO, ...) as a tuple, in output order",
        )
    for info, out, g in zip(infos, outputs, grad_outputs, strict=True):
        if tuple(np.shape(g)) != tuple(out.shape):
            raise ShapeError(
                f"grad_outputs for '{info.name}' has shape {tuple(np.shape(g))}, expected "
                f"{tuple(out.shape)} (the shape of the output)",
                info.span,
            )


__all__ = ["jvp", "kernel_hvp", "kernel_jvp", "tangent_ranged"]
