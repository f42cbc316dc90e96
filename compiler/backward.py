"""Gradients of kernels: the gradient TC, the compiled gradient kernel, and vjp.

    grad(source, name=None, *, constants=None, wrt=None, form="gather", outputs=None) -> str
    cotangent_zeros(definition, outputs)          -> tuple    (outputs without a cotangent)
    gradient_source(kernel)                       -> str      (Kernel.grad_source)
    gradient_kernel(kernel)                       -> Kernel   (Kernel.grad)
    vjp(kernel, arrays, grad_outputs)             -> tuple    (Kernel.vjp)

The gradient def comes from the pipeline's `grad` pass (`compiler.autodiff.grad_def`,
scatter form), then its `gather` pass (`form="scatter"` keeps the raw form). It stays
IR in memory from autodiff to code; it is printed only for `grad`, `grad_source`
and `tcc compile --grad`. A kernel defined
with `backward="name"` uses that def of the same source instead, with TC's training
convention: its parameters are the forward inputs, then (optionally) the forward
outputs, then one gradient per forward output; its outputs are the gradients of the
forward inputs, in order, one for each float input at least (`check_backward_def`: a
missing gradient is a TCError naming it, never a silent None).

`vjp` on a CUDA target with device arrays (`compiler.runtime.cuda_device`: all arrays
on the device, or all NumPy; None cotangents are zeros either way) never leaves the
device: the forward outputs the gradient reads are computed there and passed on, the
dense zeros a `backward=` def takes are allocated there, and the gradients come back
as device arrays of the inputs' kind (torch CUDA tensors for torch inputs, else
`DeviceArray`s). In emulation ("cuda-emulated") the device is host memory.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np

from compiler import pipeline
from compiler.diagnostics import OptionsError, ShapeError, TCError
from compiler.frontend.ast import Def
from compiler.frontend.checked import CheckedDef, RangedDef
from compiler.frontend.parser import parse
from compiler.frontend.printer import print_def
from compiler.interp.expr import NP_DTYPE
from compiler.kernel import CUDA_TARGETS, Kernel
from compiler.options import Options


class GradForm(enum.Enum):
    """The form of a printed gradient def."""

    SCATTER = "scatter"  # straight from autodiff: `I_grad(h + kh) += ...`
    GATHER = "gather"  # after poly.gather, where that pass exists


def grad(
    source: str,
    name: str | None = None,
    *,
    constants: Mapping[str, object] | None = None,
    wrt: Iterable[str] | None = None,
    form: str = "gather",
    outputs: Iterable[str] | str | None = None,
) -> str:
    """The gradient def of def `name` of `source`, as TC text. `outputs`: the outputs
    that carry a cotangent (the loss; None: every output); the others get none, so
    the def has no `<out>_grad` parameter for them (`cotangent_zeros`)."""
    from compiler.templates import substitute

    upto = "gather" if _form(form) is GradForm.GATHER else "grad"
    text = source if constants is None else substitute(source, constants)
    zeros: tuple[str, ...] = ()
    if outputs is not None:
        zeros = cotangent_zeros(parse(text).get(name), outputs)
    ctx = pipeline.PassContext(
        entry=name, grad=True, wrt=None if wrt is None else tuple(wrt), zeros=zeros
    )
    gradient = pipeline.run(text, upto=upto, ctx=ctx)
    return _printed(gradient) if upto == "gather" else print_def(gradient.checked.definition) + "\n"


def cotangent_zeros(definition: Def, outputs: Iterable[str] | str) -> tuple[str, ...]:
    """The outputs of `definition` with a zero cotangent when only `outputs` carry one
    (a name, or names; each may be a comma-separated list: `"Y,rowsum"`), in output
    order. A TCError at the def for a name that is not an output (listing them) or
    for no name at all."""
    given = [outputs] if isinstance(outputs, str) else list(outputs)
    names = [n.strip() for item in given for n in item.split(",") if n.strip()]
    declared = [p.name for p in definition.outputs]
    listed = ", ".join(declared)
    for name in names:
        if name not in declared:
            raise TCError(
                f"'{name}' is not an output of def '{definition.name}'; its outputs are {listed}",
                definition.span,
                hint="name the outputs that carry a cotangent (the loss)",
            )
    if not names:
        raise TCError(
            f"no output named to carry a cotangent; the outputs of def "
            f"'{definition.name}' are {listed}",
            definition.span,
        )
    return tuple(n for n in declared if n not in names)


def _form(form: str) -> GradForm:
    try:
        return GradForm(form)
    except ValueError:
        raise OptionsError(
            f"unknown gradient form '{form}'; expected 'scatter' or 'gather'"
        ) from None


def gradient_ranged(
    ranged: RangedDef,
    *,
    wrt: Iterable[str] | None = None,
    form: GradForm = GradForm.GATHER,
    zeros: Iterable[str] = (),
) -> RangedDef:
    """The gradient of a ranged def, as a ranged def (IR in memory: the `grad` pass,
    then, in gather form, the `gather` pass). `zeros`: outputs with a zero cotangent."""
    return pipeline.gradient(ranged, wrt=wrt, form=form.value, zeros=zeros)


def gradient_text(
    ranged: RangedDef,
    *,
    wrt: Iterable[str] | None = None,
    form: GradForm = GradForm.GATHER,
    zeros: Iterable[str] = (),
) -> str:
    """The gradient of a ranged def, printed as TC (`zeros`: as `gradient_ranged`)."""
    gradient = gradient_ranged(ranged, wrt=wrt, form=form, zeros=zeros)
    if form is GradForm.GATHER:
        return _printed(gradient)
    return print_def(gradient.checked.definition) + "\n"


# ----------------------------------------------------------------- kernels


def gradient_source(kernel: Kernel) -> str:
    """The gradient def of a kernel: the user's backward def, or the derived one
    (printed from the compiled gradient's IR)."""
    if kernel.backward is not None:
        return print_def(parse(kernel.text).get(kernel.backward)) + "\n"
    compiled = kernel.__dict__.get("grad")  # Kernel.grad, when already derived
    if compiled is not None:
        return _printed(compiled.ranged)
    return gradient_text(kernel.ranged)


def _printed(gradient: RangedDef) -> str:
    """A gradient def in gather form as TC: the strided scatters the CPU runs as
    partial scatters (its schedule choice) printed as their gathers
    (`poly.gather.printed_form`)."""
    from compiler.poly.gather import printed_form

    return print_def(printed_form(gradient).checked.definition) + "\n"


def gradient_kernel(kernel: Kernel) -> Kernel:
    """The gradient def compiled for the kernel's target (the derived one goes from
    autodiff to code as IR, never as text)."""
    from compiler.kernel import Kernel, define_ranged

    cache = getattr(kernel, "cache", True)
    cache = False if cache is None else cache  # the kernel was defined with cache=False
    # the CUDA targets' options (block sizes, atomics) apply to the gradient too; of
    # the CPU's, the thread count, the whole-def switches and the vector width do, while
    # the schedule knobs (tiles, lanes, blocks) were chosen for the forward def's statements
    options = kernel.options if kernel.target.startswith("cuda") else None
    if isinstance(kernel.options, Options):
        given = kernel.options
        options = Options(
            threads=given.threads,
            fuse=given.fuse,
            merge=given.merge,
            factor=given.factor,
            gather=given.gather,
            vector_bits=given.vector_bits,
        )
    if kernel.backward is not None:
        return Kernel(
            kernel.text, kernel.backward, target=kernel.target, options=options, cache=cache
        )
    return define_ranged(
        gradient_ranged(kernel.ranged), target=kernel.target, options=options, cache=cache
    )


def check_backward_def(
    forward: CheckedDef, backward: CheckedDef, counts: Sequence[int | None] = (None,)
) -> None:
    """A TCError unless the hand-written `backward` def fits `forward` (TC's training
    convention): its parameters are the forward inputs, optionally the forward outputs,
    then n output gradients for some n in `counts` (None: any number, which a
    `reorder_function` decides); its outputs are the gradients of the inputs in input
    order, at least up to the last float input (an integer input's position holds an
    output that is ignored), each of its input's type and rank.

        def mm(float(M,K) A, float(K,N) B) -> (C)
        def mm_grad(float(M,K) A, float(K,N) B, float(M,N) C_grad) -> (A_grad, B_grad)
    """
    n_in, n_out = len(forward.inputs), len(forward.outputs)
    n_params = len(backward.inputs)
    fits = [n is None or n_params in (n_in + n, n_in + n_out + n) for n in counts]
    wanted = " or ".join("some" if n is None else str(n) for n in counts)
    example = _backward_signature(forward, backward.name)
    if not any(fits):
        raise TCError(
            f"backward def '{backward.name}' has {n_params} parameter(s); expected the "
            f"{n_in} input(s) of '{forward.name}', optionally its {n_out} output(s), then "
            f"{wanted} output gradient(s)",
            backward.definition.span,
            hint=f"declare it as {example}; with temporary outputs, pass "
            "reorder_function= to choose the gradients the backward def takes",
        )
    floats = [i for i, t in enumerate(forward.inputs) if t.dtype.is_float]
    missing = [forward.inputs[i].name for i in floats if i >= len(backward.outputs)]
    if missing:
        names = ", ".join(f"'{n}'" for n in missing)
        raise TCError(
            f"backward def '{backward.name}' has {len(backward.outputs)} output(s), so it "
            f"produces no gradient for input(s) {names} of '{forward.name}': its outputs "
            "must be the gradients of the inputs, in input order",
            backward.definition.span,
            hint=f"declare it as {example}",
        )
    for i in floats:
        _check_gradient_output(forward, backward, i)


def _check_gradient_output(forward: CheckedDef, backward: CheckedDef, position: int) -> None:
    info, out = forward.inputs[position], backward.outputs[position]
    if out.dtype is not info.dtype or out.rank != info.rank:
        raise ShapeError(
            f"backward def '{backward.name}' output '{out.name}' (the gradient of input "
            f"'{info.name}') is {out.dtype.value} of rank {out.rank}, but input "
            f"'{info.name}' is {info.dtype.value} of rank {info.rank}",
            out.span,
            hint="declare the gradient with its input's type and shape",
        )


def _backward_signature(forward: CheckedDef, name: str) -> str:
    """`def mm_grad(A, B, [C,] C_grad) -> (A_grad, B_grad)`: what a backward def takes."""
    inputs = [t.name for t in forward.inputs]
    outputs = [t.name for t in forward.outputs]
    last = max((i for i, t in enumerate(forward.inputs) if t.dtype.is_float), default=-1)
    grads = [
        f"{t.name}_grad" if t.dtype.is_float else f"{t.name}_ignored"
        for t in forward.inputs[: last + 1]
    ]
    params = ", ".join(inputs) + ", [" + ", ".join(outputs) + ",] "
    params += ", ".join(f"{o}_grad" for o in outputs)
    return f"def {name}({params}) -> ({', '.join(grads)})"


def vjp(kernel: Kernel, arrays: Sequence[Any], grad_outputs: Sequence[Any]) -> tuple[Any, ...]:
    """One gradient per input of `kernel` (None for an integer input): the
    vector-Jacobian product with `grad_outputs`, one array per output."""
    checked = _Checked.of(kernel)
    outputs = checked.outputs
    if isinstance(grad_outputs, np.ndarray) or len(grad_outputs) != len(outputs):
        names = ", ".join(t.name for t in outputs)
        raise ShapeError(
            f"grad_outputs= needs one array per output of def '{kernel.name}' ({names})",
            hint="pass grad_outputs=(dO, ...) as a tuple, in output order",
        )
    device = _device_like(kernel, arrays, grad_outputs)
    shapes = kernel.output_shapes(*arrays)
    for info, g in zip(outputs, grad_outputs, strict=True):
        if g is None:
            continue  # a symbolic zero
        shape = tuple(np.shape(g)) if device is None else _device_shape(g)
        if shape != shapes[info.name]:
            raise ShapeError(
                f"grad_outputs for '{info.name}' has shape {shape}, expected "
                f"{shapes[info.name]} (the shape of the output)",
                info.span,
            )
    zeros = tuple(t.name for t, g in zip(outputs, grad_outputs, strict=True) if g is None)
    if kernel.backward is not None:  # a user's def takes every cotangent: dense zeros
        grad_outputs = [
            _dense(t, g, shapes, kernel, device) for t, g in zip(outputs, grad_outputs, strict=True)
        ]
        zeros = ()
    backward = _zero_gradient_kernel(kernel, zeros) if zeros else kernel.grad
    grad_outputs = [g for g in grad_outputs if g is not None]
    params = _Checked.of(backward).params
    values = _backward_arguments(kernel, checked, arrays, grad_outputs, params)
    ordered = list(backward(*values))
    if kernel.backward is not None:
        return tuple(
            ordered[i] if i < len(ordered) and f else None for i, f in enumerate(checked.floats)
        )
    # The derived gradient's outputs start with one gradient per float input, in
    # order (their names come from the name supply: `A_grad`, or `A_grad_1`).
    floats = iter(ordered)
    return tuple(next(floats) if f else None for f in checked.floats)


def _device_shape(array: Any) -> tuple[int, ...]:
    from compiler.runtime.cuda_device import array_shape

    return array_shape(array)


class _Checked:
    """What `vjp` reads of a kernel's checked def on every call (of the forward kernel,
    and `params` of its gradient kernel), computed once per kernel: `CheckedDef.inputs`
    and `.outputs` build their tuples anew each time (softmax's vjp on 2x4 spent a
    fifth of its time there)."""

    __slots__ = ("floats", "inputs", "outputs", "params")

    def __init__(self, kernel: Kernel) -> None:
        checked = kernel.ranged.checked
        self.inputs, self.outputs = checked.inputs, checked.outputs
        self.floats = tuple(t.dtype.is_float for t in self.inputs)
        self.params = tuple(t.name for t in self.inputs)

    @staticmethod
    def of(kernel: Kernel) -> _Checked:
        found = kernel.__dict__.get("_vjp_checked")
        if found is None:
            found = kernel.__dict__["_vjp_checked"] = _Checked(kernel)
        return found


def _device_like(kernel: Kernel, arrays: Sequence[Any], grad_outputs: Sequence[Any]) -> Any:
    """For a vjp on device arrays (a CUDA target; `runtime.cuda_device`'s rule: all
    arrays on the device or none), an array like them to make zeros like; else None."""
    if kernel.target not in CUDA_TARGETS:
        return None
    from compiler.runtime.cuda_device import is_device_array, is_torch, uses_device

    values = [*arrays, *grad_outputs]
    if not uses_device(kernel, values):
        return None
    emulated = kernel.target == "cuda-emulated"
    found = [v for v in values if v is not None and is_device_array(v, emulated)]
    return next((v for v in found if is_torch(v)), found[0])


def _dense(
    info: Any, g: Any, shapes: Mapping[str, tuple[int, ...]], kernel: Kernel, like: Any
) -> Any:
    """`g`, or zeros of the output's shape (on the device, like `like`, when given)."""
    if g is not None:
        return g
    dtype = np.dtype(NP_DTYPE[info.dtype])
    if like is None:
        return np.zeros(shapes[info.name], dtype=dtype)
    from compiler.runtime.cuda_device import device_zeros

    return device_zeros(shapes[info.name], dtype, like, kernel._native.device_module()[0])


def _zero_gradient_kernel(kernel: Kernel, zeros: tuple[str, ...]) -> Kernel:
    """The gradient kernel for zero cotangents of the outputs `zeros` (symbolic zeros:
    the statements only they feed are not emitted), remembered per kernel."""
    from compiler.kernel import define_ranged

    cache = kernel.__dict__.setdefault("_zero_grads", {})
    found = cache.get(zeros)
    if found is None:
        ranged = gradient_ranged(kernel.ranged, zeros=zeros)
        target, compile_cache = kernel.target, getattr(kernel, "cache", True)
        options = kernel.options if target.startswith("cuda") else None  # as gradient_kernel
        found = cache[zeros] = define_ranged(
            ranged, target=target, options=options, cache=compile_cache
        )
    return found


def _backward_arguments(
    kernel: Kernel,
    checked: _Checked,
    arrays: Sequence[Any],
    grad_outputs: Sequence[Any],
    params: Sequence[str],
) -> list[Any]:
    n_in, n_out = len(checked.inputs), len(checked.outputs)
    needs_outputs = kernel.backward is None and any(t.name in params for t in checked.outputs)
    if kernel.backward is not None:
        if not kernel.__dict__.get("_backward_fits"):  # checked once per kernel
            check_backward_def(kernel.ranged.checked, kernel.grad.ranged.checked, (n_out,))
            kernel.__dict__["_backward_fits"] = True
        needs_outputs = len(params) == n_in + 2 * n_out
    forward = kernel(*arrays) if needs_outputs else ()
    if kernel.backward is not None:
        return [*arrays, *forward, *grad_outputs]
    # The derived gradient's parameters: the inputs, the forward outputs it reads (by
    # their own names), then one adjoint per output in order (names from the supply).
    outputs = {t.name: o for t, o in zip(checked.outputs, forward, strict=False)}
    read = params[n_in : len(params) - len(grad_outputs)]
    return [*arrays, *(outputs[p] for p in read), *grad_outputs]


__all__ = [
    "GradForm",
    "check_backward_def",
    "cotangent_zeros",
    "grad",
    "gradient_kernel",
    "gradient_ranged",
    "gradient_source",
    "gradient_text",
    "vjp",
]
