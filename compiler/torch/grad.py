"""The backward pass of a TC training layer, on NumPy arrays: only the gradients asked for.

    runner = GradientRunner(kernel, options)
    runner.input_gradients(inputs, outputs, grad_outputs, needed)  -> one array or None per input

Two sources of gradients, as in TC's training layers:

- derived (no `backward=`): `compiler.backward.gradient_ranged(ranged, wrt=needed)`
  differentiates with respect to the inputs autograd needs only, so an input whose
  gradient is not needed costs neither compilation nor run time. One gradient kernel
  is compiled per distinct set of needed inputs and cached on the runner.
  Its parameters are matched by name (`I`, `O`, `O_grad`); the saved forward outputs
  are passed, never recomputed.
- user-supplied (`backward="name"`, a def of the same source): its parameters are the
  forward inputs, optionally the forward outputs, then the output gradients (after
  `reorder_function`, if any, so there may be fewer than outputs); its outputs are the
  gradients of the forward inputs in order, one for each float input at least (checked
  at define time: a missing one is a TCError, never a silent None). It always computes
  every gradient it declares; the unneeded ones are dropped.

The arrays are NumPy arrays, or, on the device path of a CUDA layer
(`compiler.torch.convert.on_device`), the tensors themselves (the gradient kernels run
on them and return tensors on their device). Integer inputs never get a gradient (None). A gradient whose shape or dtype differs
from its input's is a ShapeError naming the backward def.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from compiler.backward import check_backward_def, gradient_ranged
from compiler.diagnostics import InternalError, ShapeError
from compiler.kernel import Kernel, define_ranged

MAX_SPECIALISED = 2  # gradient kernels compiled for exact requests before the general one


class GradientRunner:
    """Computes input gradients of one forward kernel (see the module doc)."""

    def __init__(self, kernel: Kernel, options: Any) -> None:
        """`options`: the layer's (`Options`, or `CudaOptions` on a CUDA target)."""
        self.kernel = kernel
        self.options = options
        self._derived: dict[tuple[tuple[str, ...], tuple[str, ...]], Kernel] = {}
        self._user: Kernel | None = None

    # ------------------------------------------------------------ user backward

    def user_kernel(self) -> Kernel:
        """The compiled `backward=` def (compiled on first use)."""
        if self._user is None:
            k = self.kernel
            self._user = Kernel(k.text, k.backward, target=k.target, options=self.options)
        return self._user

    def check_user_signature(self, *counts: int | None) -> None:
        """A TCError unless the backward def takes the inputs, optionally the outputs,
        then n output gradients for some n in `counts` (None: any number), and returns
        the gradient of every float input in input order
        (`compiler.backward.check_backward_def`)."""
        check_backward_def(self.kernel.ranged.checked, self.user_kernel().ranged.checked, counts)

    # -------------------------------------------------------------- gradients

    def input_gradients(
        self,
        inputs: Sequence[Any],
        outputs: Sequence[np.ndarray],
        grad_outputs: Sequence[np.ndarray | None],
        needed: Sequence[bool],
    ) -> tuple[np.ndarray | None, ...]:
        """One gradient per forward input: an array where `needed` and the input is
        a float tensor, else None."""
        infos = self.kernel.ranged.checked.inputs
        wanted = tuple(
            t.name for t, need in zip(infos, needed, strict=True) if need and t.dtype.is_float
        )
        if not wanted:
            return (None,) * len(infos)
        if self.kernel.backward is not None:
            grads = self._user_gradients(inputs, outputs, grad_outputs)
        else:
            grads = self._derived_gradients(wanted, inputs, outputs, grad_outputs)
        return tuple(grads[i] if t.name in wanted else None for i, t in enumerate(infos))

    def derived_kernel(self, wanted: tuple[str, ...], zeros: tuple[str, ...] = ()) -> Kernel:
        """The derived gradient kernel (compiled once) for the `wanted` inputs, with the outputs `zeros` given
        symbolic zero cotangents (no parameter, no statement they alone feed)."""
        key = (wanted, zeros)
        if key not in self._derived:
            gradient = gradient_ranged(self.kernel.ranged, wrt=wanted, zeros=zeros)  # IR
            self._derived[key] = define_ranged(
                gradient, target=self.kernel.target, options=self.options
            )
        return self._derived[key]

    def _derived_key(
        self, wanted: tuple[str, ...], zeros: tuple[str, ...]
    ) -> tuple[tuple[str, ...], tuple[str, ...]]:
        """The gradient kernel to run for `wanted` inputs and `zeros` outputs: one
        compiled for exactly that, else one already compiled that covers it (more
        inputs, fewer zero cotangents: dense zeros are passed), else, once requests
        have varied (double backward and gradgradcheck ask for many combinations),
        the general one (every float input, no symbolic zeros) that serves them all."""
        if (wanted, zeros) in self._derived:
            return wanted, zeros
        for w, z in self._derived:
            if set(wanted) <= set(w) and set(z) <= set(zeros):
                return w, z
        if len(self._derived) >= MAX_SPECIALISED:
            checked = self.kernel.ranged.checked
            floats = tuple(t.name for t in checked.inputs if t.dtype.is_float)
            ints = tuple(
                t.name for t in checked.outputs if t.name in zeros and not t.dtype.is_float
            )
            return floats, ints
        return wanted, zeros

    def _derived_gradients(
        self,
        wanted: tuple[str, ...],
        inputs: Sequence[Any],
        outputs: Sequence[np.ndarray],
        grad_outputs: Sequence[np.ndarray | None],
    ) -> list[np.ndarray | None]:
        checked = self.kernel.ranged.checked
        zeros = tuple(
            t.name for t, g in zip(checked.outputs, grad_outputs, strict=True) if g is None
        )
        wanted, zeros = self._derived_key(wanted, zeros)
        grad_outputs = [
            _zeros_like(o) if g is None else g
            for t, o, g in zip(checked.outputs, outputs, grad_outputs, strict=True)
            if t.name not in zeros
        ]
        backward = self.derived_kernel(wanted, zeros)
        # Parameters: the inputs, the outputs it reads, one adjoint per output; its
        # first outputs: one gradient per wanted input (names from the name supply).
        by_name: dict[str, Any] = dict(zip((t.name for t in checked.outputs), outputs, strict=True))
        params = [t.name for t in backward.ranged.checked.inputs]
        read = params[len(inputs) : len(params) - len(grad_outputs)]
        missing = [p for p in read if p not in by_name]
        if missing:
            raise InternalError(f"gradient def of '{checked.name}' takes unknown {missing}")
        results = backward(*inputs, *(by_name[p] for p in read), *grad_outputs)
        grads = dict(zip(wanted, results, strict=False))
        return [grads.get(t.name) for t in checked.inputs]

    def _user_gradients(
        self,
        inputs: Sequence[Any],
        outputs: Sequence[np.ndarray],
        grad_outputs: Sequence[np.ndarray],
    ) -> list[np.ndarray | None]:
        self.check_user_signature(len(grad_outputs))
        backward = self.user_kernel()
        n_params = len(backward.ranged.checked.inputs)
        with_outputs = n_params != len(inputs) + len(grad_outputs)
        args = [*inputs, *(outputs if with_outputs else ()), *grad_outputs]
        results = list(backward(*args))
        infos = self.kernel.ranged.checked.inputs
        grads: list[np.ndarray | None] = []
        for i, info in enumerate(infos):
            if i >= len(results) or not info.dtype.is_float:
                grads.append(None)
                continue
            self._check_gradient(i, results[i], np.shape(inputs[i]))
            grads.append(results[i])
        return grads

    def _check_gradient(self, position: int, grad: np.ndarray, shape: tuple[int, ...]) -> None:
        info = self.kernel.ranged.checked.inputs[position]
        out = self.user_kernel().ranged.checked.outputs[position]
        if tuple(grad.shape) != tuple(shape):
            raise ShapeError(
                f"backward def '{self.kernel.backward}' output '{out.name}' (the gradient of "
                f"input '{info.name}') has shape {tuple(grad.shape)}, expected {tuple(shape)}",
                out.span,
            )
        if out.dtype is not info.dtype:
            raise ShapeError(
                f"backward def '{self.kernel.backward}' output '{out.name}' is "
                f"{out.dtype.value}, but input '{info.name}' is {info.dtype.value}",
                out.span,
                hint="declare the gradient with the input's type",
            )


def _zeros_like(value: Any) -> Any:
    """Zeros like a NumPy array or a tensor (a CUDA tensor's stay on its device)."""
    if isinstance(value, np.ndarray):
        return np.zeros_like(value)
    return value.new_zeros(value.shape)


__all__ = ["GradientRunner"]
