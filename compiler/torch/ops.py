"""tcc layers as PyTorch custom operators (`torch.library`): what torch.compile,
torch.export and AOTAutograd see.

    ops = layer_ops(layer)            # made once per layer, on first use
    ops.forward(*tensors)             # torch.ops.tcc.<def>_<digest>(...)
    ops.qualname                      # "tcc::<def>_<digest>"

Every `TCLayer` has two operators in the `tcc` namespace, registered when first asked
for (`TCLayer.op`, or the first call that torch.compile or torch.export traces):

- `tcc::<def>_<digest>(Tensor <input>, ...) -> Tensor | (Tensor, ...)`: the forward
  kernel, one tensor argument per input of the def (0-d inputs are 0-d tensors), one
  result per output, in declaration order. Its fake (meta) kernel is tcc's shape
  inference (`compiler.shapes`): the output shapes and dtypes follow from the input
  shapes alone, so tracing never runs the kernel. Outputs are fresh tensors (no
  aliasing, no mutation of the inputs). Its autograd formula is the layer's backward.
- `tcc::<def>_<digest>_backward(Tensor <input>, ..., Tensor <output>, ...,
  Tensor? <output>_grad, ..., int[] needed) -> Tensor[]`: the gradients of the inputs
  at the positions `needed` (float inputs), in order, from the derived gradient def
  (or the `backward=` def). A None cotangent is a symbolic zero (the gradient kernel
  compiled without it). Under `create_graph=True` the backward instead calls the
  gradient def's own layer (and so its own operator), which is differentiable again.

`<digest>` is the first 12 hex digits of the SHA-256 of the source text, the def's
name, the target, the options and the `backward=` def: the same layer definition
gets the same name in every process (so an exported program runs in a process that
defined the same layer), and two different layers never share one.

Sizes under torch.compile: the fake kernel reads the input sizes as integers, so a
dynamic (symbolic) size is specialised to its value (a guard), and a new size
recompiles. A per-call `reorder_function=` is a Python callable that no operator can
take: such a call stays a graph break.
"""

from __future__ import annotations

import hashlib
import keyword
import threading
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import torch

from compiler.shapes import bind_sizes, output_shapes
from compiler.torch.convert import torch_dtype

if TYPE_CHECKING:  # pragma: no cover
    from compiler.torch import TCLayer

NAMESPACE = "tcc"
_LIBRARY: list[torch.library.Library] = []
_LOCK = threading.Lock()
_REGISTERED: dict[str, LayerOps] = {}
# names a schema cannot use for an argument
_RESERVED = {"self", "out", "Tensor", "int", "float", "bool", "str", "None", "Scalar"}


def _library() -> torch.library.Library:
    if not _LIBRARY:
        _LIBRARY.append(torch.library.Library(NAMESPACE, "FRAGMENT"))
    return _LIBRARY[0]


def op_basename(layer: TCLayer) -> str:
    """`<def>_<digest>`: the operator's name without the namespace (module doc)."""
    kernel = layer.kernel
    key = "\0".join(
        (kernel.text, kernel.name, kernel.target, repr(layer.options), str(kernel.backward))
    )
    digest = hashlib.sha256(key.encode()).hexdigest()[:12]
    return f"{kernel.name}_{digest}"


def _arg(name: str) -> str:
    """A TC tensor name as a schema argument name."""
    return f"{name}_" if name in _RESERVED or keyword.iskeyword(name) else name


class LayerOps:
    """The forward and backward operators of one layer (module doc)."""

    def __init__(self, layer: TCLayer, basename: str) -> None:
        self.layer = layer
        self.basename = basename
        self.qualname = f"{NAMESPACE}::{basename}"
        checked = layer.kernel.ranged.checked
        self.inputs = checked.inputs
        self.outputs = checked.outputs
        self._define()

    @property
    def forward(self) -> Any:
        """The forward operator, `torch.ops.tcc.<basename>.default`."""
        return getattr(torch.ops.tcc, self.basename).default

    @property
    def backward(self) -> Any:
        """The backward operator, `torch.ops.tcc.<basename>_backward.default`."""
        return getattr(torch.ops.tcc, f"{self.basename}_backward").default

    def _define(self) -> None:
        lib = _library()
        ins = ", ".join(f"Tensor {_arg(t.name)}" for t in self.inputs)
        n_out = len(self.outputs)
        result = "Tensor" if n_out == 1 else "(" + ", ".join(["Tensor"] * n_out) + ")"
        lib.define(f"{self.basename}({ins}) -> {result}")
        outs = ", ".join(f"Tensor {_arg('out_' + t.name)}" for t in self.outputs)
        grads = ", ".join(f"Tensor? {_arg(t.name + '_grad_in')}" for t in self.outputs)
        lib.define(f"{self.basename}_backward({ins}, {outs}, {grads}, int[] needed) -> Tensor[]")
        for key in ("CPU", "CUDA"):
            lib.impl(self.basename, self._run_forward, key)
            lib.impl(f"{self.basename}_backward", self._run_backward, key)
        torch.library.register_fake(self.qualname, self._fake_forward, lib=lib)
        torch.library.register_fake(f"{self.qualname}_backward", self._fake_backward, lib=lib)
        torch.library.register_autograd(
            self.qualname, _autograd_backward, setup_context=self._setup_context, lib=lib
        )
        torch.library.register_vmap(self.qualname, self._vmap, lib=lib)

    def _vmap(self, info: Any, in_dims: tuple[Any, ...], *tensors: Any) -> tuple[Any, Any]:
        """`torch.func.vmap` of the operator: one call of the batched def's operator."""
        from compiler.torch.autograd import batch_first

        flags, args = batch_first(in_dims, tensors)
        result = self.layer.batched_layer(flags).ops.forward(*args)
        dims = 0 if isinstance(result, torch.Tensor) else (0,) * len(result)
        return result, dims

    # ------------------------------------------------------------------ forward

    def _run_forward(self, *tensors: torch.Tensor) -> Any:
        results = self.layer.run(tensors)
        # fresh tensors: a result sharing memory with an input would be an alias the
        # schema does not declare
        return results[0] if len(results) == 1 else tuple(results)

    def _fake_forward(self, *tensors: torch.Tensor) -> Any:
        ranged = self.layer.kernel.ranged
        shapes = {
            t.name: tuple(int(d) for d in v.shape)
            for t, v in zip(self.inputs, tensors, strict=True)
        }
        sizes = bind_sizes(ranged, shapes)  # a ShapeError at trace time, as at run time
        found = output_shapes(ranged, sizes)
        device = tensors[0].device if tensors else torch.device("cpu")
        results = tuple(
            torch.empty(found[t.name], dtype=torch_dtype(t.dtype), device=device)
            for t in self.outputs
        )
        return results[0] if len(results) == 1 else results

    def _setup_context(self, ctx: Any, inputs: tuple[Any, ...], output: Any) -> None:
        outputs = (output,) if isinstance(output, torch.Tensor) else tuple(output)
        ctx.ops = self
        ctx.n_inputs = len(inputs)
        ctx.save_for_backward(*inputs, *outputs)
        ctx.set_materialize_grads(False)
        ctx.mark_non_differentiable(
            *(o for o, t in zip(outputs, self.outputs, strict=True) if not t.dtype.is_float)
        )

    # ------------------------------------------------------------------ backward

    def _split(self, args: Sequence[Any]) -> tuple[list[Any], list[Any], list[Any], list[int]]:
        n_in, n_out = len(self.inputs), len(self.outputs)
        inputs = list(args[:n_in])
        outputs = list(args[n_in : n_in + n_out])
        grads = list(args[n_in + n_out : n_in + 2 * n_out])
        return inputs, outputs, grads, list(args[-1])

    def _run_backward(self, *args: Any) -> list[torch.Tensor]:
        from compiler.torch.autograd import input_gradients

        inputs, outputs, grads, needed = self._split(args)
        mask = [k in needed for k in range(len(inputs))]
        with torch.no_grad():
            results = input_gradients(self.layer, inputs, outputs, grads, mask)
        return [
            results[k] if results[k] is not None else torch.zeros_like(inputs[k]) for k in needed
        ]

    def _fake_backward(self, *args: Any) -> list[torch.Tensor]:
        inputs, _, _, needed = self._split(args)
        return [torch.empty_like(inputs[k]) for k in needed]


def _autograd_backward(ctx: Any, *grads: torch.Tensor | None) -> tuple[torch.Tensor | None, ...]:
    """The operator's autograd formula: the backward operator, or under
    `create_graph=True` the gradient def's own (differentiable) layer."""
    from compiler.torch.autograd import differentiable_backward

    ops: LayerOps = ctx.ops
    saved = ctx.saved_tensors
    inputs, outputs = saved[: ctx.n_inputs], saved[ctx.n_inputs :]
    needed = [
        k
        for k, (t, need) in enumerate(zip(ops.inputs, ctx.needs_input_grad, strict=True))
        if need and t.dtype.is_float
    ]
    if not needed:
        return (None,) * len(inputs)
    if torch.is_grad_enabled():  # create_graph=True: dense cotangents, differentiable
        dense = [
            g if g is not None and t.dtype.is_float else torch.zeros_like(o)
            for g, t, o in zip(grads, ops.outputs, outputs, strict=True)
        ]
        mask = [k in needed for k in range(len(inputs))]
        return differentiable_backward(ops.layer, inputs, outputs, dense, mask)
    cotangents = [g if t.dtype.is_float else None for g, t in zip(grads, ops.outputs, strict=True)]
    results = ops.backward(*inputs, *outputs, *cotangents, needed)
    found = dict(zip(needed, results, strict=True))
    return tuple(found.get(k) for k in range(len(inputs)))


def layer_ops(layer: TCLayer) -> LayerOps:
    """The operators of `layer`, registered on first use (one pair per distinct layer
    definition in the process: layers defined alike share them)."""
    basename = op_basename(layer)
    with _LOCK:
        found = _REGISTERED.get(basename)
        if found is None:
            found = _REGISTERED[basename] = LayerOps(layer, basename)
    return found
