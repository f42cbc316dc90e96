"""The autograd side of TC layers: the `torch.autograd.Function` eager calls go through,
and the gradient helpers it shares with the custom operator (`compiler.torch.ops`).

    TCFunction.apply(layer, reorder, *tensors)         -> outputs (differentiable)
    input_gradients(layer, inputs, outputs, grads, needed, reorder) -> one tensor or None per input
    batched_call(layer, in_dims, tensors)              -> outputs of one batched call

Backward: `GradientRunner` (`compiler.torch.grad`) on the needed inputs, outside
autograd; under `create_graph=True` the gradient def's own TC layer, so it is
differentiable again. Forward mode (`torch.func.jvp`, `forward_ad`, `jacfwd`): the
tangent def's own TC layer (`TCLayer.tangent_layer`). `torch.func.vmap`: one call of the
batched def's layer (`TCLayer.batched_layer`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import torch

from compiler.diagnostics import OptionsError, TCError
from compiler.torch.convert import array_to_tensor, device_tensor, on_device, tensor_to_array

if TYPE_CHECKING:  # pragma: no cover
    from compiler.torch import TCLayer

ReorderFunction = Callable[[list[torch.Tensor]], Sequence[torch.Tensor]]


class TCFunction(torch.autograd.Function):
    """Forward: the TC kernel. Backward: `GradientRunner` on the needed inputs; under
    `create_graph=True`, the gradient kernel as a TC layer of its own (so it is
    differentiable again). Forward mode (`torch.func.jvp`, `forward_ad`): `Kernel.jvp`."""

    @staticmethod
    def forward(
        layer: TCLayer, reorder: ReorderFunction | None, *tensors: torch.Tensor
    ) -> tuple[torch.Tensor, ...]:
        return layer.run(tensors)

    @staticmethod
    def setup_context(ctx: Any, inputs: tuple[Any, ...], output: Any) -> None:
        layer, reorder, *tensors = inputs
        ctx.layer, ctx.reorder = layer, reorder
        ctx.n_inputs = len(tensors)
        ctx.on_device = on_device(layer.kernel.target, layer.kernel.ranged.checked.inputs, tensors)
        ctx.save_for_backward(*tensors, *output)
        ctx.save_for_forward(*tensors)
        ctx.set_materialize_grads(False)  # an unused output's gradient stays None
        infos = layer.kernel.ranged.checked.outputs
        ctx.mark_non_differentiable(
            *(o for o, t in zip(output, infos, strict=True) if not t.dtype.is_float)
        )

    @staticmethod
    def backward(ctx: Any, *grad_outputs: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        if not torch.is_grad_enabled():
            with torch.no_grad():
                return _gradients(ctx, *grad_outputs)
        # create_graph=True: a differentiable backward (dense cotangents)
        layer: TCLayer = ctx.layer
        saved = ctx.saved_tensors
        inputs, outputs = saved[: ctx.n_inputs], saved[ctx.n_inputs :]
        out_infos = layer.kernel.ranged.checked.outputs
        grads = [
            g if g is not None and t.dtype.is_float else torch.zeros_like(o)
            for g, t, o in zip(grad_outputs, out_infos, outputs, strict=True)
        ]
        if ctx.reorder is not None:
            grads = list(ctx.reorder(list(grads)))
        needed = ctx.needs_input_grad[2:]
        results = differentiable_backward(layer, inputs, outputs, grads, needed)
        return (None, None, *results)

    @staticmethod
    def vmap(
        info: Any, in_dims: tuple[Any, ...], layer: TCLayer, reorder: Any, *tensors: Any
    ) -> tuple[tuple[torch.Tensor, ...], tuple[int, ...]]:
        """`torch.func.vmap`: one call of the batched def (`compiler.batch`), whose
        batch dimension leads every output."""
        outputs = batched_call(layer, in_dims[2:], tensors)
        return outputs, (0,) * len(outputs)

    @staticmethod
    def jvp(ctx: Any, *tangents: Any) -> tuple[torch.Tensor, ...]:
        layer: TCLayer = ctx.layer
        if layer.kernel.backward is not None:
            raise TCError(
                f"forward-mode AD through layer '{layer.name}': its gradient is the "
                f"hand-written def '{layer.kernel.backward}', which forward mode cannot use",
                hint="define the layer without backward= for forward-mode AD",
            )
        if ctx.on_device and layer.kernel.target == "cuda":
            raise TCError(
                f"forward-mode AD through layer '{layer.name}' on CUDA tensors is not "
                "supported yet (Kernel.jvp runs on NumPy arrays)",
                hint="use reverse mode (backward, torch.autograd.grad), or CPU tensors",
            )
        infos = layer.kernel.ranged.checked.inputs
        inputs = ctx.saved_tensors[: ctx.n_inputs]
        wrt = tuple(
            k
            for k, (info, t) in enumerate(zip(infos, tangents[2:], strict=True))
            if t is not None and info.dtype.is_float
        )
        outputs = layer.kernel.ranged.checked.outputs
        if not wrt:
            return tuple(None for _ in outputs)
        # The tangent def's own layer: torch.func sees TC layers all the way down, so
        # jacfwd (vmap of this rule) batches the tangent def and hessian differentiates it.
        tlayer, names = layer.tangent_layer(tuple(infos[k].name for k in wrt))
        results = tlayer(*inputs, *(tangents[2 + k].contiguous() for k in wrt))
        by_name = dict(zip(tlayer.outputs, results, strict=True))
        return tuple(
            by_name[names[t.name]] if t.name in names and t.dtype.is_float else None
            for t in outputs
        )


def batched_call(
    layer: TCLayer, in_dims: Sequence[int | None], tensors: Sequence[Any]
) -> tuple[torch.Tensor, ...]:
    """The outputs of `layer` mapped over the dimensions `in_dims` of `tensors` (None:
    not mapped), by one call of its batched layer (batch first in every output)."""
    flags, args = batch_first(in_dims, tensors)
    if not any(flags):
        return tuple(layer(*tensors))
    return tuple(layer.batched_layer(flags)(*args))


def batch_first(
    in_dims: Sequence[int | None], tensors: Sequence[Any]
) -> tuple[tuple[bool, ...], list[Any]]:
    """Which inputs are mapped, and the tensors with each mapped dimension moved first
    (what the batched def, `TCLayer.batched_layer`, takes)."""
    flags = tuple(d is not None for d in in_dims)
    args = [t if d is None else t.movedim(d, 0) for t, d in zip(tensors, in_dims, strict=True)]
    return flags, args


def differentiable_backward(
    layer: TCLayer,
    inputs: Sequence[torch.Tensor],
    outputs: Sequence[torch.Tensor],
    grads: Sequence[torch.Tensor],
    needed: Sequence[bool],
) -> tuple[torch.Tensor | None, ...]:
    """The input gradients as outputs of the gradient def's own TC layer."""
    if layer.kernel.backward is not None:
        raise TCError(
            f"create_graph=True through layer '{layer.name}': its gradient is the "
            f"hand-written def '{layer.kernel.backward}', which tcc cannot differentiate "
            "as a backward",
            hint="define the layer without backward= for double backward",
        )
    infos = layer.kernel.ranged.checked.inputs
    if not any(need and t.dtype.is_float for t, need in zip(infos, needed, strict=True)):
        return (None,) * len(infos)
    # Every float input's gradient, whichever are needed now: one gradient layer (and
    # one compile of its own gradient, and so on) per layer instead of one per subset
    # of inputs that double backward happens to ask for (gradgradcheck asks for many).
    wanted = tuple(t.name for t in infos if t.dtype.is_float)
    glayer = layer.gradient_layer(wanted)
    by_name = dict(zip(layer.outputs, outputs, strict=True))
    params = glayer.inputs
    read = params[len(inputs) : len(params) - len(grads)]
    args = [*inputs, *(by_name[p] for p in read), *(g.contiguous() for g in grads)]
    results = glayer(*args)
    found = dict(zip(wanted, results, strict=False))
    return tuple(found.get(t.name) if need else None for t, need in zip(infos, needed, strict=True))


def _gradients(ctx: Any, *grad_outputs: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
    """The input gradients of an autograd backward (tcc's kernels run on arrays: outside
    autograd), with None for the layer and reorder arguments of `TCFunction.apply`."""
    saved = ctx.saved_tensors
    results = input_gradients(
        ctx.layer,
        saved[: ctx.n_inputs],
        saved[ctx.n_inputs :],
        grad_outputs,
        ctx.needs_input_grad[2:],
        ctx.reorder,
    )
    return (None, None, *results)


def input_gradients(
    layer: TCLayer,
    inputs: Sequence[torch.Tensor],
    outputs: Sequence[torch.Tensor],
    grad_outputs: Sequence[torch.Tensor | None],
    needed: Sequence[bool],
    reorder: ReorderFunction | None = None,
) -> tuple[torch.Tensor | None, ...]:
    """One gradient tensor per input of `layer` (None where not `needed` or not float),
    from the saved inputs and outputs and the output gradients (None: no gradient reached
    that output, a symbolic zero for the derived gradient; a `backward=` def or
    `reorder` gets dense zeros). Runs outside autograd; shared by the autograd
    Function and the custom operator (`compiler.torch.ops`)."""
    in_infos = layer.kernel.ranged.checked.inputs
    out_infos = layer.kernel.ranged.checked.outputs
    dense = layer.kernel.backward is not None or reorder is not None
    grads = [
        g if g is not None and t.dtype.is_float else torch.zeros_like(o) if dense else None
        for g, t, o in zip(grad_outputs, out_infos, outputs, strict=True)
    ]
    if reorder is not None:
        grads = list(reorder(list(grads)))
    needed = tuple(needed)
    first = layer._first_compile(("backward", needed), f"compiling the gradient of '{layer.name}'")
    if on_device(layer.kernel.target, in_infos, inputs):  # on the GPU, as they are
        with first:
            return layer.gradients.input_gradients(
                [device_tensor(t, v) for t, v in zip(in_infos, inputs, strict=True)],
                [device_tensor(t, v, "output") for t, v in zip(out_infos, outputs, strict=True)],
                [None if g is None else _grad_tensor(g, i) for i, g in enumerate(grads)],
                needed,
            )
    grad_arrays = [_grad_array(g, i) for i, g in enumerate(grads)]
    with first:
        results = layer.gradients.input_gradients(
            [tensor_to_array(t, v) for t, v in zip(in_infos, inputs, strict=True)],
            [tensor_to_array(t, v, "output") for t, v in zip(out_infos, outputs, strict=True)],
            grad_arrays,
            needed,
        )
    return tuple(None if r is None else array_to_tensor(r) for r in results)


def _grad_array(grad: Any, position: int) -> Any:
    """An output gradient as a contiguous CPU array (autograd may hand us expanded views),
    or None for a symbolic zero."""
    return None if grad is None else _grad_tensor(grad, position).numpy()


def _grad_tensor(grad: Any, position: int) -> torch.Tensor:
    """An output gradient as a contiguous tensor on its device (autograd may hand us
    expanded views)."""
    if not isinstance(grad, torch.Tensor):
        raise OptionsError(
            f"reorder_function returned a {type(grad).__name__} at position {position}; "
            f"expected a tensor"
        )
    return grad.detach().contiguous()
