"""PyTorch layers from TC defs: forward on tensors, backward through autograd.

    import compiler.torch as tct
    conv = tct.define(src, "conv2d")                           # target="llvm"
    conv = tct.define(src, "conv2d", target="cuda")            # CUDA tensors
    (O,) = conv(I, W1, B)                                      # tensors in, a tuple out
    O.sum().backward()                                         # I.grad, W1.grad, B.grad

    conv = tct.define(src, "conv2d", backward="conv2d_grad")   # a hand-written gradient
    infer = tct.define(src, "conv2d", training=False)          # inference only
    layer = tct.Layer(src, "conv2d", params={"W1": (4, 3, 3, 3), "B": (4,)})  # nn.Module

`define` compiles the def once (`compiler.kernel.Kernel`) and returns a `TCLayer`.
Calling it converts each tensor without copying (`compiler.torch.convert`), runs
the kernel and returns one tensor per output sharing the kernel's result memory.
Compiling shows a progress line on stderr when it is a terminal and the work takes
over a second (the define, the first call, the first backward).

`training=None` (the default, automatic) and `training=True` make a training layer:
when autograd is recording and some input requires grad, the
call goes through a `torch.autograd.Function`: the forward saves its inputs and
outputs; the backward (`compiler.torch.grad`) runs the AD-derived gradient kernel for
exactly the inputs whose `ctx.needs_input_grad` is set, or the user's `backward=` def
(TC's convention: forward inputs, optionally forward outputs, then output gradients;
outputs: the input gradients in order). `reorder_function` maps the list of output
gradient tensors before they reach a `backward=` def (for layers with temporary
outputs whose gradients the backward def does not take), as in TC's Python API; it
may be given to `define` or to each call. Integer inputs get no gradient; integer
outputs are marked non-differentiable. Under `create_graph=True` the backward is
itself a TC layer (the gradient def's), so gradients of gradients, Hessian-vector
products and `gradgradcheck` work to any order; forward-mode AD (`torch.func.jvp`,
`torch.autograd.forward_ad`) runs the tangent def (`Kernel.jvp`). A layer with a
hand-written `backward=` def supports neither: both raise a TCError. A `backward=`
def is checked when the layer is defined: a float input whose gradient it does not
return is a TCError naming it. `training=False` makes an inference layer: it never
records autograd, and a call on an input that requires grad while grad mode is on is a
TCError (its gradient would be lost), as is forward-mode AD through it.

Devices (`compiler.torch.convert`): a layer defined with `target="cuda"` takes CUDA
tensors and keeps them on the GPU, forward and backward: the kernels read the tensors'
memory and write fresh CUDA tensors, launched on torch's current stream (autograd runs
the backward on the forward's stream), and the gradient kernels take the saved tensors
and the incoming gradients as they are. It also takes CPU tensors (the NumPy path:
copies to the GPU and back); a mix of CPU and CUDA tensors is a TCError. A CUDA tensor
given to a layer of target "llvm", "interp" or "cuda-emulated" is a TCError saying to
define the layer with target="cuda". On target "cuda-emulated" CPU tensors take the
device path (host memory is the emulated device's), which is how CI tests it.
Double backward (`create_graph=True`) runs the gradient layer on the device too;
forward-mode AD on CUDA tensors is a TCError (Kernel.jvp runs on NumPy arrays).

Under `torch.no_grad()` / `torch.inference_mode()`, or when no input requires grad,
the kernel runs directly and the outputs have no `grad_fn`. Under torch.compile and
torch.export a TC layer call is its custom operator (`compiler.torch.ops`: a fake
kernel from tcc's shape inference, the gradient def as its autograd formula), so
Dynamo traces it without a graph break; only a call with a per-call
`reorder_function=` is a graph break (`torch.compiler.disable`). `torch.func.vmap`
runs the batched def once (`TCLayer.batched_layer`). Importing this module does not
import Dynamo (seconds), only a call that torch.compile traces does. `dtype=`
instantiates a `float` def for float64 (`compiler.retype`). TorchScript is not
supported. Without PyTorch, importing this module is an ImportError that says
`pip install torch==2.13.0`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager, nullcontext
from typing import Any

try:
    import torch
except ImportError as err:  # pragma: no cover - exercised by a test that hides torch
    raise ImportError(
        "compiler.torch needs PyTorch, which is not installed: pip install torch==2.13.0 "
        "(or pip install -e '.[torch]')"
    ) from err


from compiler.diagnostics import OptionsError, TCError
from compiler.kernel import Kernel, _target_options
from compiler.torch.autograd import TCFunction
from compiler.torch.convert import (
    array_to_tensor,
    device_tensor,
    on_device,
    tensor_to_array,
    torch_dtype,
)
from compiler.torch.grad import GradientRunner
from compiler.torch.ops import layer_ops

ReorderFunction = Callable[[list[torch.Tensor]], Sequence[torch.Tensor]]


def define(
    source: str,
    name: str | None = None,
    *,
    training: bool | None = None,
    backward: str | None = None,
    constants: Mapping[str, object] | None = None,
    options: object = None,
    target: str = "llvm",
    reorder_function: ReorderFunction | None = None,
    dtype: torch.dtype | None = None,
) -> TCLayer:
    """Compile a TC def into a layer called on PyTorch tensors, differentiable by autograd.

    The def is parsed, checked and given its ranges now; native code is compiled on the
    first call (and the gradient's on the first backward), with a progress line on a
    terminal when that takes over a second. Calling the layer converts each tensor
    without copying, runs the kernel and returns one tensor per output.

    Args:
        source (str): TC source text with one or more defs.
        name (str | None): The def to compile. Defaults to None: the only def of
            `source` (more than one is a TCError that lists them).
        training (bool | None): Whether calls take part in autograd. Defaults to None
            (automatic): a call goes through autograd whenever grad mode is on and some
            input requires grad, or under forward-mode AD or a torch.func transform; the
            gradient def is derived and compiled on the first backward. Otherwise the
            kernel runs directly and the outputs have no `grad_fn`. True is the same.
            False makes an inference-only layer: a call on an input that requires grad
            while grad mode is on raises TCError instead of losing its gradient (call
            it under `torch.no_grad()` or on detached tensors).
        backward (str | None): A hand-written gradient def of the same source to use
            instead of tcc's AD. Defaults to None. Its parameters are the forward
            inputs, optionally the forward outputs, then one gradient per forward
            output (or the list `reorder_function` returns), in that order; its
            outputs are the gradients of the forward inputs in input order, one for
            every float input at least (an integer input before the last float input
            needs an output at its position, which is ignored). For
            `def mm(float(M,K) A, float(K,N) B) -> (C)`:
            `def mm_grad(float(M,K) A, float(K,N) B, float(M,N) C_grad) -> (A_grad, B_grad)`.
            Checked now; such a layer supports neither double backward nor forward mode.
        constants (Mapping[str, object] | None): Values for `{name}` placeholders in
            `source` (TC's str.format templates). Defaults to None.
        options (object): `compiler.Options` for target "llvm", `CudaOptions` for the
            CUDA targets, or "tuned" (the `compiler.autotune` winner per input size).
            Defaults to None: the target's defaults.
        target (str): "llvm" (native CPU code, the default), "interp" (the NumPy
            reference), "cuda" (takes CUDA tensors and keeps them on the GPU) or
            "cuda-emulated".
        reorder_function (Callable[[list[torch.Tensor]], Sequence[torch.Tensor]] | None):
            Maps the list of output gradients to the list the `backward=` def takes
            (for temporary outputs whose gradients it does not take). Only with
            `backward=`; it may also be given to each call. Defaults to None.
        dtype (torch.dtype | None): Instantiate a def written with `float` for another
            float type: with `torch.float64`, every float32 type, cast and literal of
            the source becomes float64 (`compiler.retype`), so the layer takes and
            returns float64 tensors (`Layer.double()` does this for a module).
            Defaults to None: the types as written.

    Returns:
        TCLayer: `layer(*tensors)` returns a tuple with one tensor per output, in
        declaration order.

    Raises:
        ParseError: The source does not parse.
        SemanticError: The def is ill-formed (names, types).
        RangeError: An index's range cannot be inferred.
        OptionsError: Unknown target or options, `training` not None/True/False,
            `backward=` with `training=False`, or `reorder_function=` without `backward=`.
        TCError: The `backward=` def is missing, takes the wrong number of parameters, or
            does not return the gradient of every float input.
        ShapeError: A `backward=` output is not of its input's type and rank.

    Calls raise ShapeError for tensors of the wrong count, dtype, rank or sizes, and
    TCError for a tensor that requires grad on a `training=False` layer or a CUDA
    tensor on a CPU target.

    Example:
        >>> import torch
        >>> import compiler.torch as tct
        >>> src = "def mm(float(M,K) A, float(K,N) B) -> (C) { C(m,n) +=! A(m,k) * B(k,n) }"
        >>> mm = tct.define(src)
        >>> a = torch.randn(3, 4, requires_grad=True)
        >>> (c,) = mm(a, torch.randn(4, 5))
        >>> c.sum().backward()
        >>> a.grad.shape
        torch.Size([3, 4])
    """
    return TCLayer(
        source,
        name,
        training=training,
        backward=backward,
        constants=constants,
        options=options,
        target=target,
        reorder_function=reorder_function,
        dtype=dtype,
    )


class TCLayer:
    """A compiled TC def called on PyTorch tensors; made by `define`, which documents
    the arguments (`TCLayer(...)` takes the same).

    Attributes:
        kernel (compiler.Kernel): The compiled forward def.
        name (str): The def's name.
        training (bool | None): As given to `define` (None: automatic).
        inputs (tuple[str, ...]): The def's input names, in parameter order.
        outputs (tuple[str, ...]): The def's output names, in declaration order.
    """

    def __init__(
        self,
        source: str,
        name: str | None = None,
        *,
        training: bool | None = None,
        backward: str | None = None,
        constants: Mapping[str, object] | None = None,
        options: object = None,
        target: str = "llvm",
        reorder_function: ReorderFunction | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        if dtype is not None:
            source, constants = _retyped(source, constants, dtype), None
        self.dtype = dtype
        if training not in (None, True, False):
            raise OptionsError(
                f"training= must be None (automatic), True or False, got {training!r}"
            )
        if backward is not None and training is False:
            raise OptionsError(
                "backward= needs a training layer, but training=False (inference only)",
                hint="drop training=False (autograd is automatic) or pass training=True",
            )
        _check_reorder(reorder_function, backward)
        tuned = isinstance(options, str) and options == "tuned"  # compiler.tune.tuned
        self.options = _target_options(target, None if tuned else options)
        with _progress(f"defining layer '{name}'" if name else "defining a layer"):
            self.kernel = (_tuned_kernel if tuned else Kernel)(
                source,
                name,
                constants=constants,
                target=target,
                **({} if tuned else {"options": self.options}),
                backward=backward,
            )
        self.name = self.kernel.name
        self.training = training
        self.reorder_function = reorder_function
        self.gradients = GradientRunner(self.kernel, self.options)
        self.ops = layer_ops(self)  # its custom operators (compiler.torch.ops)
        if backward is not None:
            n_out = len(self.kernel.ranged.checked.outputs)
            # reorder_function may also come with each call: any count 1..n_out may fit.
            counts = range(1, n_out + 1) if reorder_function is None else (None,)
            self.gradients.check_user_signature(*counts)

    def __repr__(self) -> str:
        mode = {None: "automatic", True: "training", False: "inference"}[self.training]
        return f"<TCLayer {self.name} target={self.kernel.target!r} {mode}>"

    @property
    def inputs(self) -> tuple[str, ...]:
        """The def's input names, in parameter order."""
        return tuple(t.name for t in self.kernel.ranged.checked.inputs)

    @property
    def outputs(self) -> tuple[str, ...]:
        """The def's output names, in declaration order."""
        return tuple(t.name for t in self.kernel.ranged.checked.outputs)

    def __call__(
        self, *tensors: Any, reorder_function: ReorderFunction | None = None
    ) -> tuple[torch.Tensor, ...]:
        """Run the def on `tensors`, one per input in parameter order.

        Args:
            *tensors (torch.Tensor | int | float): One per input; Python numbers are
                accepted for 0-d inputs. Each must have the declared dtype (float32
                for `float`, float64 for `double`, ...) and rank.
            reorder_function (Callable | None): Overrides `define`'s for this call.

        Returns:
            tuple[torch.Tensor, ...]: One tensor per output, in declaration order;
            differentiable when the layer is a training layer and autograd records.

        Raises:
            ShapeError: Wrong number of tensors, dtype, rank or sizes.
            TCError: On a `training=False` layer, an input that requires grad while
                grad mode is on, or forward-mode AD; a CUDA tensor on a CPU target.
        """
        # torch.compile: Dynamo does not trace into tcc (native code, NumPy); the call is
        # a graph break, run eagerly, instead of a trace attempt and a warning on every
        # call. The disabled entry is made on first use: importing Dynamo costs seconds.
        if torch.compiler.is_compiling():
            if reorder_function is None:  # the layer's custom operator: no graph break
                return self._op_call(tensors)
            return _untraced_call()(self, tensors, reorder_function)
        return self._call(tensors, reorder_function)

    @property
    def op(self) -> Any:
        """The layer's forward custom operator, `torch.ops.tcc.<def>_<digest>.default`
        (`compiler.torch.ops`): what torch.compile and torch.export see. Registered on
        first use; calling it directly runs the kernel with the layer's autograd."""
        return self.ops.forward

    def _op_call(self, tensors: Sequence[Any]) -> tuple[torch.Tensor, ...]:
        """A call through the custom operator (traced by torch.compile / export)."""
        infos = self.kernel.ranged.checked.inputs
        if len(tensors) != len(infos):
            self.kernel(*tensors)  # the kernel's own error names every parameter
        if self.training is False and torch.is_grad_enabled() and _any_requires_grad(tensors):
            self._refuse_autograd(tensors)
        like = next((t for t in tensors if isinstance(t, torch.Tensor)), None)
        device = like.device if like is not None else None
        args = [
            t
            if isinstance(t, torch.Tensor)
            else torch.tensor(t, dtype=torch_dtype(info.dtype), device=device)
            for info, t in zip(infos, tensors, strict=True)
        ]
        result = self.ops.forward(*args)
        return (result,) if isinstance(result, torch.Tensor) else tuple(result)

    def _call(
        self, tensors: Sequence[Any], reorder_function: ReorderFunction | None
    ) -> tuple[torch.Tensor, ...]:
        reorder = reorder_function or self.reorder_function
        _check_reorder(reorder, self.kernel.backward)
        recording = torch.is_grad_enabled() and _any_requires_grad(tensors)
        if self.training is False:
            if recording:
                self._refuse_autograd(tensors)
            return self.run(tensors)
        if recording or _any_transformed(tensors):
            like = next((t for t in tensors if isinstance(t, torch.Tensor)), None)
            args = [self._as_tensor(i, t, like) for i, t in enumerate(tensors)]
            return tuple(TCFunction.apply(self, reorder, *args))
        return self.run(tensors)

    def run(self, tensors: Sequence[Any]) -> tuple[torch.Tensor, ...]:
        """The forward kernel on tensors, outside autograd."""
        infos = self.kernel.ranged.checked.inputs
        if len(tensors) != len(infos):
            self.kernel(*tensors)  # the kernel's own error names every parameter
        if _any_transformed(tensors):
            raise TCError(
                f"layer '{self.name}' was called under forward-mode AD or a torch.func "
                "transform, which needs a training layer, but training=False",
                self.kernel.ranged.checked.definition.span,
                hint="drop training=False (autograd is then automatic)",
            )
        with self._first_compile("forward", f"compiling layer '{self.name}'"):
            if on_device(self.kernel.target, infos, tensors):  # CUDA tensors stay on the GPU
                args = [device_tensor(t, v) for t, v in zip(infos, tensors, strict=True)]
                return tuple(self.kernel(*args))
            arrays = [tensor_to_array(t, v) for t, v in zip(infos, tensors, strict=True)]
            return tuple(array_to_tensor(a) for a in self.kernel(*arrays))

    def _first_compile(self, key: object, label: str) -> AbstractContextManager[object]:
        """A progress line (on a terminal, after a second) for the first call of kind
        `key` (the forward; the backward for one set of inputs), which compiles."""
        done: set[object] = self.__dict__.setdefault("_compiled", set())
        if key in done:
            return nullcontext()
        done.add(key)
        return _progress(label)

    def _refuse_autograd(self, tensors: Sequence[Any]) -> None:
        """The TCError for an inference layer called on a tensor that requires grad
        (its gradient would silently be lost)."""
        infos = self.kernel.ranged.checked.inputs
        names = [
            t.name
            for t, v in zip(infos, tensors, strict=False)
            if isinstance(v, torch.Tensor) and v.requires_grad
        ]
        if not names:
            return  # too many arguments: `run` raises the kernel's error about the count
        first = next(t for t in infos if t.name == names[0])
        raise TCError(
            f"layer '{self.name}' was defined with training=False (inference only), but "
            f"{_inputs_phrase(names)} grad: autograd would get no gradient through it",
            first.span,
            hint="drop training=False (autograd is then automatic), or call the layer "
            "under torch.no_grad() / on detached tensors",
        )

    def gradient_layer(self, wanted: tuple[str, ...]) -> TCLayer:
        """The derived gradient def for the inputs `wanted`, as a training layer (the
        backward under `create_graph=True`; its own backward is the second order)."""
        cache = self.__dict__.setdefault("_gradient_layers", {})
        if wanted not in cache:
            kernel = self.gradients.derived_kernel(wanted)
            glayer = TCLayer.__new__(TCLayer)
            glayer.options, glayer.kernel, glayer.name = self.options, kernel, kernel.name
            glayer.training, glayer.reorder_function = True, None
            glayer.gradients = GradientRunner(kernel, self.options)
            glayer.ops = layer_ops(glayer)
            cache[wanted] = glayer
        return cache[wanted]

    def tangent_layer(self, wrt: tuple[str, ...]) -> tuple[TCLayer, dict[str, str]]:
        """The layer of the tangent def (forward mode) for the inputs `wrt` and, per
        forward output with a tangent, its tangent output's name. Its parameters are
        the forward inputs, then the tangents of `wrt`; it is a training layer, so
        forward mode composes with reverse mode and with vmap (`torch.func.jacfwd`,
        `hessian`)."""
        cache = self.__dict__.setdefault("_tangent_layers", {})
        if wrt not in cache:
            from compiler.frontend.printer import print_def
            from compiler.higher import tangent_ranged

            ranged, names = tangent_ranged(self.kernel.ranged, wrt)
            text = print_def(ranged.checked.definition)
            options = None if isinstance(self.options, str) else self.options
            tlayer = TCLayer(text, ranged.name, options=options, target=self.kernel.target)
            cache[wrt] = (tlayer, dict(names))
        return cache[wrt]

    def batched_layer(self, batched: tuple[bool, ...]) -> TCLayer:
        """The layer of the batched def (`compiler.batch.batch_def`) for the inputs
        flagged in `batched`: what `torch.func.vmap` over this layer calls, once per
        batch. Derived gradients (a `backward=` def is not batched: its layer's vmap
        under autograd differentiates the batched def instead)."""
        cache = self.__dict__.setdefault("_batched_layers", {})
        if batched not in cache:
            from compiler.batch import batch_def
            from compiler.frontend.printer import print_def

            text = print_def(batch_def(self.kernel.ranged, batched))
            options = None if isinstance(self.options, str) else self.options
            cache[batched] = TCLayer(
                text, self.name, training=self.training, options=options, target=self.kernel.target
            )
        return cache[batched]

    def _as_tensor(self, position: int, value: Any, like: torch.Tensor | None) -> torch.Tensor:
        """Python numbers (0-d inputs) as tensors, so autograd can save them (on the
        device of the other tensors, `like`, for a CUDA target)."""
        if isinstance(value, torch.Tensor) or position >= len(self.inputs):
            return value
        info = self.kernel.ranged.checked.inputs[position]
        array = tensor_to_array(info, value)
        device = like.device if like is not None and self.kernel.target == "cuda" else None
        return torch.as_tensor(array, dtype=torch_dtype(info.dtype), device=device)


def _retyped(source: str, constants: Mapping[str, object] | None, dtype: Any) -> str:
    """`source` (its templates filled in) with float32 instantiated as `dtype`."""
    from compiler.frontend.ast import ScalarType
    from compiler.retype import retype_source
    from compiler.templates import substitute

    types = {
        torch.float64: ScalarType.FLOAT64,
        torch.float32: ScalarType.FLOAT32,
        torch.float16: ScalarType.FLOAT16,
    }
    if dtype not in types:
        raise OptionsError(
            f"dtype= must be torch.float64, torch.float32 or torch.float16, got {dtype!r}"
        )
    text = source if constants is None else substitute(source, constants)
    return retype_source(text, types[dtype])


def _progress(label: str) -> AbstractContextManager[object]:
    """`compiler.progress.Progress` for a layer's compile: shown only when stderr is a
    terminal and the work takes over a second (looked up here, so tests can swap it)."""
    from compiler import progress

    return progress.Progress(f"tcc: {label}")


def _inputs_phrase(names: Sequence[str]) -> str:
    """`input 'A' requires` or `inputs 'A', 'B' require`."""
    listed = ", ".join(repr(n) for n in names)
    return f"inputs {listed} require" if len(names) > 1 else f"input {listed} requires"


_UNTRACED: list[Callable[..., tuple[torch.Tensor, ...]]] = []


def _untraced_call() -> Callable[..., tuple[torch.Tensor, ...]]:
    """`TCLayer._call` behind `torch.compiler.disable` (which imports Dynamo: only a
    call that torch.compile traces makes it)."""
    if not _UNTRACED:
        _UNTRACED.append(torch.compiler.disable(TCLayer._call))
    return _UNTRACED[0]


def _any_requires_grad(values: Sequence[Any]) -> bool:
    return any(isinstance(v, torch.Tensor) and v.requires_grad for v in values)


def _tuned_kernel(*args: Any, **kwargs: Any) -> Kernel:
    from compiler.tune.tuned import TunedKernel

    return TunedKernel(*args, **kwargs)


def _any_transformed(values: Sequence[Any]) -> bool:
    """A dual tensor (forward-mode AD) or a torch.func transform's wrapper among `values`."""
    from torch.autograd import forward_ad

    dual = forward_ad._current_level >= 0  # inside a dual_level(): look for tangents
    wrapped = torch._C._functorch.is_functorch_wrapped_tensor
    for v in values:
        if not isinstance(v, torch.Tensor):
            continue
        if wrapped(v) or (dual and forward_ad.unpack_dual(v).tangent is not None):
            return True
    return False


def _check_reorder(reorder: object, backward: str | None) -> None:
    if reorder is None:
        return
    if not callable(reorder):
        raise OptionsError(
            f"reorder_function= must be callable, got {type(reorder).__name__}",
            hint="pass a function from the list of output gradients to the list the "
            "backward def takes",
        )
    if backward is None:
        raise OptionsError(
            "reorder_function= applies to a user-supplied backward= def; the derived "
            "gradient takes one gradient per output",
            hint='pass backward="name_of_the_backward_def", or drop reorder_function=',
        )


__all__ = ["TCLayer", "define"]

from compiler.torch.module import Layer  # noqa: E402  (the nn.Module wrapper)

__all__ += ["Layer"]
