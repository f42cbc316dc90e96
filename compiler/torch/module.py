"""`compiler.torch.Layer`: a TC def as a `torch.nn.Module` holding its weights.

    layer = Layer(src, "conv2d", params={"W1": (4, 3, 3, 3), "B": torch.zeros(4)})
    O = layer(I)                    # I fills the inputs not in params, in declared order
    torch.optim.SGD(layer.parameters(), lr=0.1)

The rule for arguments: each input of the def named in `params` is an
`nn.Parameter` of the module (registered under the input's name) and is passed in the
position the def declares it; `forward(*tensors)` takes the *other* inputs, in the
order the def declares them. So for `def conv2d(I, W1, B)` with params W1 and B,
`layer(I)` calls the def as `conv2d(I, W1, B)`; with params W1 only, `layer(I, B)`.

A params value is a tensor (copied into a new Parameter: the module owns its weights;
pass an `nn.Parameter` to share one) or a shape (a tuple of ints, initialised
uniformly in +-1/sqrt(fan_in), fan_in the product of all dimensions but the first, or
the one dimension of a vector, from torch's global generator, so `torch.manual_seed`
makes it reproducible). A parameter must be a float input, its dtype and rank those
the def declares. `forward` returns the output tensor for a one-output def, else a
tuple in declaration order. `training=None` (the default, automatic) makes the layer
differentiable whenever autograd records; the other keywords are those of
`compiler.torch.define`.

On the GPU: define it with `target="cuda"` and move it as any module
(`layer.cuda()` / `layer.to("cuda")`), or give CUDA tensors as params; then call it
on CUDA tensors (see `compiler.torch` for the device rules).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import torch
from torch import nn

from compiler.diagnostics import ShapeError, TCError, did_you_mean
from compiler.frontend.checked import TensorInfo
from compiler.torch.convert import check_device, torch_dtype


class Layer(nn.Module):
    """A TC def as a `torch.nn.Module` that holds some of its inputs as trainable
    `nn.Parameter`s.

    Each input of the def named in `params` is a parameter of the module, registered
    under the input's name (`layer.W1`) and passed at the position the def declares;
    `forward(*tensors)` takes the other inputs, in declared order. For
    `def conv2d(I, W1, B)` with params W1 and B, `layer(I)` runs `conv2d(I, W1, B)`.

    Attributes:
        tc (TCLayer): The compiled def (`compiler.torch.define`).
        param_names (tuple[str, ...]): The inputs held as parameters, in declared order.
        argument_names (tuple[str, ...]): The inputs `forward` takes, in declared order.

    Example:
        >>> import torch
        >>> from compiler.torch import Layer
        >>> src = "def lin(float(B,K) X, float(N,K) W) -> (Y) { Y(b,n) +=! X(b,k) * W(n,k) }"
        >>> layer = Layer(src, params={"W": (5, 4)})
        >>> y = layer(torch.randn(2, 4))
        >>> y.sum().backward()
        >>> tuple(layer.W.grad.shape)
        (5, 4)
    """

    def __init__(
        self,
        source: str,
        name: str | None = None,
        *,
        params: Mapping[str, Any] | None = None,
        training: bool | None = None,
        **kwargs: Any,
    ) -> None:
        """Compile the def and create its parameters.

        Args:
            source (str): TC source text with one or more defs.
            name (str | None): The def to compile. Defaults to None: the only def.
            params (Mapping[str, torch.Tensor | tuple[int, ...]] | None): The inputs to
                hold as parameters, by name. A tensor is copied into a new
                `nn.Parameter` (the module owns its weights; pass an `nn.Parameter` to
                share one); a shape (a tuple of ints) is initialised uniformly in
                +-1/sqrt(fan_in), fan_in being the product of all dimensions but the
                first (the one dimension of a vector), from torch's global generator,
                so `torch.manual_seed` makes it reproducible. Defaults to None: no
                parameters.
            training (bool | None): As for `compiler.torch.define`. Defaults to None
                (automatic: autograd records whenever an input or a parameter
                requires grad and grad mode is on). False makes the module
                inference-only: call it under `torch.no_grad()` (its parameters
                require grad, so a call with grad mode on raises TCError).
            **kwargs: The other keywords of `compiler.torch.define`: `backward`,
                `constants`, `options`, `target`, `reorder_function`.

        Raises:
            TCError: `params` names something that is not an input of the def, or an
                integer input; any error of `compiler.torch.define`.
            ShapeError: A parameter tensor is not of the declared dtype and rank, or a
                shape is not a tuple of the declared rank of non-negative ints.
        """
        super().__init__()
        from compiler.torch import define

        self.tc = define(source, name, training=training, **kwargs)
        self._define_args = (source, name, training, kwargs)
        infos = {t.name: t for t in self.tc.kernel.ranged.checked.inputs}
        params = dict(params or {})
        for key in params:
            if key not in infos:
                raise TCError(
                    f"params names '{key}', which is not an input of def '{self.tc.name}' "
                    f"(inputs: {', '.join(infos)})",
                    self.tc.kernel.ranged.checked.definition.span,
                    hint=did_you_mean(key, list(infos)),
                )
        self.param_names = tuple(n for n in infos if n in params)
        self.argument_names = tuple(n for n in infos if n not in params)
        for key in self.param_names:
            parameter = _make_parameter(infos[key], params[key], self.tc.kernel.target)
            self.register_parameter(key, parameter)

    def _apply(self, fn: Any, recurse: bool = True) -> Layer:
        """nn.Module's conversions (`.double()`, `.half()`, `.to(dtype)`): when they
        change the parameters' float dtype, the def is instantiated for it
        (`define(..., dtype=)`), so the module keeps working in the new precision."""
        super()._apply(fn, recurse)
        dtypes = {p.dtype for p in self.parameters(recurse=False)}
        declared = {
            torch_dtype(t.dtype)
            for t in self.tc.kernel.ranged.checked.inputs
            if t.name in self.param_names
        }
        if len(dtypes) == 1 and dtypes != declared:
            from compiler.torch import define

            source, name, training, kwargs = self._define_args
            (dtype,) = dtypes
            self.tc = define(source, name, training=training, **{**kwargs, "dtype": dtype})
        return self

    def extra_repr(self) -> str:
        return f"def={self.tc.name}, arguments=({', '.join(self.argument_names)})"

    def forward(self, *tensors: Any) -> torch.Tensor | tuple[torch.Tensor, ...]:
        """Run the def on `tensors` (the inputs not held as parameters, in declared
        order) and the parameters.

        Returns:
            torch.Tensor | tuple[torch.Tensor, ...]: The output tensor of a one-output
            def, else one tensor per output in declaration order.

        Raises:
            ShapeError: Not one tensor per argument input, or a tensor of the wrong
                dtype, rank or sizes.
        """
        if len(tensors) != len(self.argument_names):
            raise ShapeError(
                f"layer '{self.tc.name}' takes {len(self.argument_names)} tensor(s) "
                f"({', '.join(self.argument_names) or 'none'}), got {len(tensors)}; "
                f"its parameters ({', '.join(self.param_names)}) are held by the module",
                self.tc.kernel.ranged.checked.definition.span,
            )
        given = dict(zip(self.argument_names, tensors, strict=True))
        args = [given[n] if n in given else getattr(self, n) for n in self.tc.inputs]
        outputs = self.tc(*args)
        return outputs[0] if len(outputs) == 1 else outputs


def _make_parameter(info: TensorInfo, value: Any, target: str) -> nn.Parameter:
    if not info.dtype.is_float:
        raise TCError(
            f"input '{info.name}' is declared {info.dtype.value}; only float inputs can be "
            f"trainable parameters",
            info.span,
        )
    dtype = torch_dtype(info.dtype)
    if isinstance(value, torch.Tensor):
        check_device(info, value, "parameter", target)
        if value.dtype != dtype or value.dim() != info.rank:
            raise ShapeError(
                f"parameter '{info.name}' is declared {info.dtype.value} with rank "
                f"{info.rank}, got a {str(value.dtype).removeprefix('torch.')} tensor of "
                f"shape {tuple(value.shape)}",
                info.span,
            )
        if isinstance(value, nn.Parameter):
            return value
        return nn.Parameter(value.detach().clone())
    shape = _shape(info, value)
    fan_in = math.prod(shape[1:]) if len(shape) > 1 else (shape[0] if shape else 1)
    bound = 1.0 / math.sqrt(max(fan_in, 1))
    data = torch.empty(shape, dtype=dtype).uniform_(-bound, bound)
    return nn.Parameter(data)


def _shape(info: TensorInfo, value: Any) -> tuple[int, ...]:
    ok = isinstance(value, Sequence) and all(
        isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in value
    )
    if not ok or len(value) != info.rank:
        raise ShapeError(
            f"params['{info.name}'] must be a tensor or a shape of {info.rank} non-negative "
            f"int(s), got {value!r}",
            info.span,
        )
    return tuple(value)


__all__ = ["Layer"]
