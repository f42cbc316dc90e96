"""`compiler.define`: compile TC source once, call it on NumPy arrays many times.

    k = define(source, name=None, *, constants=None, target="llvm", options=None,
               backward=None, cache=True)
    C, = k(A, B)                      # one array per output, in declaration order
    k(A, B, out=(C,))                 # accumulate into caller data (`C(i) += ...`)
    k.output_shapes(A, B)             # {'C': (M, N)}

At define time the source is formatted with `constants` (TC's `str.format`
templates: `{name}` placeholders, `{{` and `}}` for literal braces), then
`compiler.pipeline` parses, checks and gives it explicit ranges, once; the native
target lowers it through the same pipeline (`compiler.runtime.native`). A gradient kernel
is made from the pipeline's IR (`define_ranged`), never from printed text. At call
time the arguments are validated against the signature -- count, rank, dtype,
sizes -- and every mismatch is a `ShapeError` that points at the parameter's
declaration. Inputs are
never converted silently: a float64 array for a `float` parameter is an error
whose hint shows the `astype` to write. Non-contiguous arrays are copied; Python
numbers are accepted for 0-d inputs.

Outputs start zeroed, unless `out=` gives them (a sequence in declaration order,
or a dict by name); then the results are written into the given arrays, which are
also returned. A def whose first write to an output accumulates (`+=` without
`!`, or an `=` that reads the output) adds to that starting value: called without
`out=` for it, it emits a `TCWarning` naming the output.

Targets: `"llvm"` (the default: native code through isl and LLVM, see
`compiler.runtime.native`), `"interp"` (the NumPy reference evaluator, the oracle), and
`"cuda"` / `"cuda-emulated"` (`compiler.runtime.cuda`; options: `CudaOptions`; device
arrays in, device arrays out: `compiler.runtime.cuda_device`). `options` is a `compiler.options.Options`. `backward` names a
def of the same source that replaces the AD-derived gradient (`k.vjp`, `k.grad`).
"""

from __future__ import annotations

import functools
import threading
import warnings
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from compiler import pipeline
from compiler.arguments import as_input, scalar_input
from compiler.diagnostics import OptionsError, ShapeError, did_you_mean
from compiler.frontend.ast import AssignOp
from compiler.frontend.checked import RangedDef, StmtFacts
from compiler.frontend.parser import parse
from compiler.frontend.printer import print_def
from compiler.interp import evaluate
from compiler.interp.domain import tensors_read
from compiler.interp.expr import NP_DTYPE
from compiler.options import Options, as_options
from compiler.outputs import check_output_sizes, given_outputs
from compiler.runtime.callplan import MAX_PLANS, CallPlan, make_plan, signature
from compiler.shapes import output_shapes
from compiler.templates import substitute

TARGETS = ("interp", "llvm", "cuda", "cuda-emulated")
AVAILABLE_TARGETS = TARGETS
CUDA_TARGETS = ("cuda", "cuda-emulated")  # compiler.runtime.cuda; options: CudaOptions


# Gradient kernels by (text, name, backward, target, options, cache): see Kernel.grad.
_GRADS: dict[tuple[Any, ...], tuple[Any, Kernel]] = {}
_GRADS_LOCK = threading.Lock()


class TCWarning(UserWarning):
    """A warning about a TC def or a call of it (e.g. accumulating into zeros)."""


def define(
    source: str,
    name: str | None = None,
    *,
    constants: Mapping[str, object] | None = None,
    target: str = "llvm",
    options: object = None,
    backward: object = None,
    cache: object = True,
) -> Kernel:
    """Compile def `name` (or the only def) of `source` for `target`.

    `cache` (native targets): True reuses code compiled before, in this process and on
    disk under `compiler.cpu.cache.default_cache_dir()`; a directory caches there;
    None caches in memory only; False compiles afresh. `options="tuned"`: per input
    size, the winner of `compiler.autotune` if cached, else the default (compiler.tune)."""
    if isinstance(options, str) and options == "tuned":
        from compiler.tune.tuned import TunedKernel

        return TunedKernel(
            source, name, constants=constants, target=target, backward=backward, cache=cache
        )
    return Kernel(
        source,
        name,
        constants=constants,
        target=target,
        options=options,
        backward=backward,
        cache=cache,
    )


class Kernel:
    """A compiled TC def: call it with one array per input (made by `compiler.define`).

    Args:
        source (str): TC source text with one or more defs.
        name (str | None): the def to compile; None: the only one.
        constants (Mapping[str, object] | None): values for `{name}` placeholders.
        target (str): `"llvm"`, `"interp"`, `"cuda"` or `"cuda-emulated"`.
        options (Options | CudaOptions | str | None): schedule options for the target,
            `"tuned"` for the autotuner's cached winners (llvm).
        backward (str | None): a def of `source` to use as the gradient instead of AD.
        cache (bool | str | os.PathLike | None): the compile cache (llvm).

    Attributes:
        name (str): the def's name.
        target (str): the target it runs on.
        ranged (RangedDef): the checked def with explicit ranges (the pipeline's IR).

    Example:
        ```python
        k = compiler.define(open("examples/matmul.tc").read())
        (C,) = k(A, B)                                   # NumPy in, NumPy out
        dA, dB = k.vjp(A, B, grad_outputs=(np.ones_like(C),))
        print(k.grad_source)                             # the gradient def as TC
        ```
    """

    def __init__(
        self,
        source: str,
        name: str | None = None,
        *,
        constants: Mapping[str, object] | None = None,
        target: str = "llvm",
        options: object = None,
        backward: object = None,
        cache: object = True,
    ) -> None:
        _check_target(target, options, backward)
        text = source if constants is None else substitute(source, constants)
        if backward is not None:
            parse(text).get(backward)  # a missing backward def is an error now
        self._source: str | None = source
        self._text: str | None = text
        self.constants, self.backward = constants, backward
        ranged = (
            _ranged(text, name)
            if name is None or isinstance(name, str)
            else pipeline.run(text, name, upto="ranges")  # the error about the name
        )
        self._setup(ranged, target, options, cache)

    def _setup(self, ranged: RangedDef, target: str, options: object, cache: object) -> None:
        """The define-time work after range inference: signature facts, native code."""
        self.cache = _resolve_cache(cache)
        self.target = target
        self.ranged: RangedDef = ranged
        self.name = ranged.name
        checked = ranged.checked
        self._inputs = checked.inputs
        self._outputs = checked.outputs
        self._accumulating = _accumulating_outputs(checked.stmts)
        self.options: Any = _target_options(target, options)
        self._native = (
            _compile_native(ranged, self.options, self.cache) if target == "llvm" else None
        )
        if target in CUDA_TARGETS:
            self._native = _compile_cuda(self.ranged, self.options, target)
        self._plans: dict[tuple[Any, ...], CallPlan] = {}  # per input signature

    @property
    def text(self) -> str:
        """The def's TC source with constants filled in (for a kernel made from IR,
        a gradient, printed from that IR on first use)."""
        if self._text is None:
            self._text = print_def(self.ranged.checked.definition) + "\n"
        return self._text

    @property
    def source(self) -> str:
        """The source as given to `define` (printed from the IR, as `text`, for a
        kernel made from IR)."""
        return self._source if self._source is not None else self.text

    def __repr__(self) -> str:
        return f"<Kernel {self.name} target={self.target!r}>"

    def info(self) -> dict[str, Any]:
        """How this kernel runs: `target`, `runtime` (the thread pool: "gomp", "python",
        or "interp" for the reference evaluator), `threads`, `parallel_loops` (regions
        that may run on threads), `native_calls_per_run`, `notes`; on "llvm" also
        `choice_points` and `compiles` (`runtime.native`: code the sizes decide)."""
        if self._native is None:
            return {
                "name": self.name,
                "target": self.target,
                "runtime": "interp",
                "threads": 1,
                "parallel_loops": 0,
                "native_calls_per_run": 0,
                "notes": [],
            }
        return {"name": self.name, **self._native.info()}

    # Gradients (compiler.backward): derived by compiler.autodiff, or backward=.
    @property
    def grad_source(self) -> str:
        """The gradient def as TC text (the backward= def when one was given)."""
        from compiler.backward import gradient_source

        return gradient_source(self)

    @functools.cached_property
    def grad(self) -> Kernel:
        """The gradient def, compiled for the same target (shared by equal kernels:
        deriving it runs autodiff and isl, which a second define should not repeat)."""
        from compiler.backward import gradient_kernel

        source = self.ranged.checked.definition if self.backward is None else self.text
        key = (source, self.name, self.backward, self.target, self.options, id(self.cache))
        with _GRADS_LOCK:
            found = _GRADS.get(key)
        if found is None or found[0] is not self.cache:
            found = (self.cache, gradient_kernel(self))
            with _GRADS_LOCK:
                _GRADS[key] = found
                while len(_GRADS) > 256:
                    del _GRADS[next(iter(_GRADS))]
        return found[1]

    def vjp(self, *arrays: Any, grad_outputs: Sequence[Any]) -> tuple[np.ndarray | None, ...]:
        """The vector-Jacobian product: one gradient per input, given one output
        gradient per output.

        On a CUDA target with device arrays everything stays on the device
        (`compiler.backward`).

        Args:
            *arrays: the inputs, as for a call.
            grad_outputs (Sequence[np.ndarray | float | None]): one cotangent per output,
                of its shape and dtype; None is a symbolic zero.

        Returns:
            tuple[np.ndarray | None, ...]: one gradient per input, of its shape; None for
                an integer input.

        Raises:
            ShapeError: an input or a cotangent of the wrong count, rank, dtype or size.
            TCError: the def cannot be differentiated (e.g. `lgamma`).

        Example:
            ```python
            (O,) = k(I, W1, B)
            dI, dW1, dB = k.vjp(I, W1, B, grad_outputs=(np.ones_like(O),))
            ```
        """
        from compiler.backward import vjp

        return vjp(self, arrays, grad_outputs)

    def jvp(
        self, *arrays: Any, tangents: Sequence[Any]
    ) -> tuple[tuple[np.ndarray, ...], tuple[np.ndarray | None, ...]]:
        """The Jacobian-vector product, by forward mode (`compiler.higher`).

        Args:
            *arrays: the inputs, as for a call (NumPy arrays).
            tangents (Sequence[np.ndarray | None]): one tangent per input, of its shape;
                None is zero.

        Returns:
            tuple[tuple[np.ndarray, ...], tuple[np.ndarray | None, ...]]: the outputs and
                one tangent per output.

        Example:
            ```python
            (O,), (dO,) = k.jvp(I, W1, B, tangents=(dI, None, dB))
            ```
        """
        from compiler.higher import kernel_jvp
        from compiler.runtime.cuda_device import host_only

        host_only(self, "jvp", [*arrays, *tangents])
        return kernel_jvp(self, arrays, tangents)

    def hvp(
        self, *arrays: Any, vectors: Sequence[Any], grad_outputs: Sequence[Any]
    ) -> tuple[np.ndarray | None, ...]:
        """The derivative of `vjp(*arrays, grad_outputs=...)` along `vectors`,
        forward-over-reverse: the Hessian-vector product H·v for a scalar output.

        Args:
            *arrays: the inputs (NumPy arrays).
            vectors (Sequence[np.ndarray | None]): one direction per input; None is zero.
            grad_outputs (Sequence[np.ndarray | float | None]): one cotangent per output.

        Returns:
            tuple[np.ndarray | None, ...]: one array per input (None for an integer input).

        Example:
            ```python
            hI, hW1, hB = k.hvp(I, W1, B, vectors=(dI, W1, dB), grad_outputs=(G,))
            ```
        """
        from compiler.higher import kernel_hvp
        from compiler.runtime.cuda_device import host_only

        host_only(self, "hvp", [*arrays, *vectors, *grad_outputs])
        return kernel_hvp(self, arrays, vectors, grad_outputs)

    def output_shapes(self, *arrays: Any) -> dict[str, tuple[int, ...]]:
        """The shape of every output for these inputs, by name."""
        key = signature(arrays)
        plan = self._plans.get(key) if key is not None else None
        if plan is not None:
            return dict(plan.output_shapes)
        if self.target in CUDA_TARGETS and self._on_device(arrays):
            from compiler.runtime.cuda_device import device_output_shapes

            return device_output_shapes(self, arrays, scalar_input)
        _, sizes = self._bind(arrays)
        return output_shapes(self.ranged, sizes)

    def __call__(self, *arrays: Any, out: Any = None) -> tuple[np.ndarray, ...]:
        """Run the def.

        Args:
            *arrays: one array per input, in declaration order: NumPy arrays of the
                declared dtypes (`float` is float32), Python numbers for 0-d inputs, or
                device arrays on a CUDA target.
            out (Sequence[np.ndarray] | Mapping[str, np.ndarray] | None): arrays to write
                the outputs into and return instead (in output order, or by name); a def
                that accumulates (`+=` without `!`) adds to their values.

        Returns:
            tuple[np.ndarray, ...]: one array per output, in declaration order.

        Raises:
            ShapeError: a wrong count, rank, dtype or size, naming the parameter; an
                indirect read out of bounds.

        Example:
            ```python
            (C,) = k(A, B)
            k(A, B, out=(C,))  # C += A B for a def written with `+=`
            ```
        """
        if self.target in CUDA_TARGETS and self._on_device(arrays, out):
            from compiler.runtime.cuda_device import device_call

            return device_call(self, arrays, out, scalar_input)  # stays on the device
        key = signature(arrays) if self.target == "llvm" else None
        if key is not None:
            plan = self._plans.get(key)
            if plan is not None and out is None:  # checked before: only allocate and run
                if self._accumulating:
                    self._warn_accumulating({})
                return plan.run(arrays)
            if plan is not None:  # out= arrays the code may write in place
                given = given_outputs(self.name, self._outputs, out, plan.output_shapes)
                into = plan.into(arrays, [given.get(t.name) for t in self._outputs])
                if into is not None:
                    self._warn_accumulating(given)
                    return plan.run(arrays, into)
        inputs, sizes = self._bind(arrays)
        shapes = output_shapes(self.ranged, sizes)
        check_output_sizes(self._outputs, shapes)
        given = given_outputs(self.name, self._outputs, out, shapes)
        self._warn_accumulating(given)
        if key is not None:
            self._remember_plan(key, sizes, shapes)
        results = self._evaluate(inputs, sizes, given, shapes)
        returned = []
        for info in self._outputs:
            if info.name in given:
                np.copyto(given[info.name], results[info.name])
                returned.append(given[info.name])
            else:
                returned.append(results[info.name])
        return tuple(returned)

    def _on_device(self, arrays: Sequence[Any], out: Any = None) -> bool:
        """Whether this call (a CUDA target) takes the device path
        (`compiler.runtime.cuda_device`): some argument is a device array."""
        from compiler.runtime.cuda_device import uses_device

        given = list(out.values()) if isinstance(out, Mapping) else out
        return uses_device(self, [*arrays, *(given if isinstance(given, list | tuple) else ())])

    def _warn_accumulating(self, given: Mapping[str, np.ndarray]) -> None:
        for output in self._accumulating:
            if output not in given:
                warnings.warn(
                    f"def '{self.name}' accumulates into output '{output}' (its first write "
                    f"is not an `op!` initialisation), which starts at zero; pass out= to "
                    f"accumulate into your own data",
                    TCWarning,
                    stacklevel=3,
                )

    def _remember_plan(
        self, key: tuple[Any, ...], sizes: Mapping[str, int], shapes: Mapping[str, Any]
    ) -> None:
        """Keep the call plan of this signature (`compiler.runtime.callplan`), at most MAX_PLANS."""
        outputs = [(t.name, np.dtype(NP_DTYPE[t.dtype])) for t in self._outputs]
        plan = make_plan(self._native, [t.name for t in self._inputs], outputs, sizes, shapes)
        if plan is None:
            return
        while len(self._plans) >= MAX_PLANS:
            self._plans.pop(next(iter(self._plans)), None)
        self._plans[key] = plan

    def _evaluate(
        self,
        inputs: dict[str, np.ndarray],
        sizes: dict[str, int],
        given: Mapping[str, np.ndarray],
        shapes: Mapping[str, tuple[int, ...]],
    ) -> dict[str, np.ndarray]:
        """Fresh output arrays (starting from `given`, else zeros), computed by the target."""
        if self._native is None:
            return evaluate(self.ranged, inputs, sizes, given)
        outputs = {}
        for t in self._outputs:
            dtype = np.dtype(NP_DTYPE[t.dtype])
            start = given.get(t.name)
            outputs[t.name] = (
                np.zeros(shapes[t.name], dtype) if start is None else np.array(start, dtype=dtype)
            )
        self._native.run(inputs, sizes, outputs)
        return outputs

    # ------------------------------------------------------------ validation

    def _bind(self, arrays: Sequence[Any]) -> tuple[dict[str, np.ndarray], dict[str, int]]:
        if len(arrays) != len(self._inputs):
            names = ", ".join(t.name for t in self._inputs) or "none"
            raise ShapeError(
                f"def '{self.name}' takes {len(self._inputs)} input(s) ({names}), "
                f"got {len(arrays)}",
                self.ranged.checked.definition.span,
                hint="pass one array per input, in parameter order; outputs go in out=",
            )
        inputs = {t.name: as_input(t, a) for t, a in zip(self._inputs, arrays, strict=True)}
        sizes = _bind_sizes(self.ranged, {k: v.shape for k, v in inputs.items()})
        return inputs, sizes


# ------------------------------------------------------------------ define time


def _check_target(target: str, options: object, backward: object) -> None:
    if target not in TARGETS:
        raise OptionsError(
            f"unknown target '{target}'; expected one of {', '.join(TARGETS)}",
            hint=did_you_mean(str(target), TARGETS),
        )
    if target not in AVAILABLE_TARGETS:
        raise OptionsError(
            f"target '{target}' is not available yet",
            hint="use target='llvm' (native CPU code, the default) or 'interp' (the NumPy "
            "reference evaluator, slow)",
        )
    _target_options(target, options)
    if backward is not None and not isinstance(backward, str):
        raise OptionsError(
            f"backward= names a def of the same source, got {type(backward).__name__}",
            hint='pass backward="name_of_the_backward_def"',
        )


def _target_options(target: str, options: object) -> Any:
    if target in CUDA_TARGETS:
        from compiler.cuda.cuda_options import as_cuda_options

        return as_cuda_options(options)
    return as_options(options)


def _compile_cuda(ranged: RangedDef, options: Any, target: str) -> Any:
    from compiler.runtime.cuda import compile_cuda

    program = compile_cuda(ranged, options, emulated=target == "cuda-emulated")
    program.prepare()  # g++ or NVRTC now; no GPU for target "cuda" is an error here
    return program


def _compile_native(ranged: RangedDef, options: Options, cache: Any) -> Any:
    from compiler.runtime.native import compile_native

    return compile_native(ranged, options, cache=cache)


def _resolve_cache(value: object) -> Any:
    from compiler.cpu.cache import resolve_cache

    return resolve_cache(value)


def define_ranged(
    ranged: RangedDef, *, target: str = "llvm", options: object = None, cache: object = True
) -> Kernel:
    """A Kernel for a def that is already IR (a gradient from the pipeline's `grad`
    pass): no text is printed or parsed; `Kernel.text` prints it when asked."""
    _check_target(target, options, None)
    kernel = Kernel.__new__(Kernel)
    kernel._source = kernel._text = None
    kernel.constants = kernel.backward = None
    kernel._setup(ranged, target, options, cache)
    return kernel


@functools.lru_cache(maxsize=256)
def _ranged(text: str, name: str | None) -> RangedDef:
    """The pipeline up to `ranges` (pure, so remembered: a second define of the same
    text skips isl; errors are raised again each time, lru_cache keeps no exceptions)."""
    return pipeline.run(text, name, upto="ranges")


def _accumulating_outputs(stmts: Sequence[StmtFacts]) -> tuple[str, ...]:
    """Outputs whose first write combines with (or reads) the previous contents."""
    first: dict[str, StmtFacts] = {}
    for facts in stmts:
        first.setdefault(facts.stmt.lhs.name, facts)
    result = []
    for name, facts in first.items():
        op = facts.stmt.op
        reads_itself = name in tensors_read(facts.stmt.rhs)
        if (op.is_reduction and not op.init) or (op is AssignOp.ASSIGN and reads_itself):
            result.append(name)
    return tuple(result)


def _bind_sizes(ranged: RangedDef, shapes: Mapping[str, tuple[int, ...]]) -> dict[str, int]:
    from compiler.shapes import bind_sizes

    return dict(bind_sizes(ranged, shapes))


__all__ = ["Kernel", "TCWarning", "define", "define_ranged", "substitute"]
