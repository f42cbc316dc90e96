"""tcc: a compiler toolkit for the Tensor Comprehensions language.

Public API (the documentation's "Python API" page, docs/api.md)::

    compiler.define(source, name=None, *, constants=None, target="llvm", options=None,
                    backward=None, cache=True)                         -> Kernel
    compiler.autotune(source, name, *inputs, budget=60, cache=True)        -> TuneResult
    compiler.infer_shapes(source, name, input_shapes)                      -> {output: shape}
    compiler.pipeline.run(text, name, upto="ranges")                       -> any pass's result

Every pass is importable from its own module (`compiler.frontend.parser.parse`,
`compiler.frontend.check.check_def`, `compiler.poly.ranges.infer_ranges`, ...).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from compiler.diagnostics import (
    InternalError,
    OptionsError,
    ParseError,
    RangeError,
    SemanticError,
    ShapeError,
    TCError,
)

__all__ = [
    "InternalError",
    "Kernel",
    "Options",
    "OptionsError",
    "ParseError",
    "RangeError",
    "SemanticError",
    "ShapeError",
    "TCError",
    "autotune",
    "define",
    "grad",
    "gradcheck",
    "infer_shapes",
    "jvp",
]
__version__ = "0.1.0"


def define(
    source: str,
    name: str | None = None,
    *,
    constants: Mapping[str, object] | None = None,
    target: str = "llvm",
    options: object = None,  # Options | CudaOptions | "tuned" | None: see the docstring
    backward: str | None = None,
    cache: bool | str | os.PathLike[str] | None = True,
) -> Kernel:
    """Compile def `name` of `source` into a callable `Kernel`.

    The def is parsed, checked and given explicit ranges at once, so every error of the
    def surfaces here; native code for the sizes a call runs is compiled at the first
    call (and kept in the compile cache).

    Args:
        source (str): TC source text with one or more defs.
        name (str | None): the def to compile; None: the only def (several defs without
            a name are an error that lists them).
        constants (Mapping[str, object] | None): values for `{name}` placeholders in
            `source` (TC's `constants=`, Python's `str.format`: literal braces are
            written `{{` and `}}`).
        target (str): `"llvm"` (native CPU code, the default), `"interp"` (the NumPy
            reference evaluator), `"cuda"` (NVRTC and the driver API, needs a GPU) or
            `"cuda-emulated"` (the same CUDA C through g++, on the CPU).
        options (Options | CudaOptions | str | None): schedule options: an `Options`
            for `"llvm"`, a `CudaOptions` for the CUDA targets, `"tuned"` for the
            autotuner's cached winner per input shape (`compiler.autotune`), None for
            the defaults.
        backward (str | None): a def of `source` to use as the gradient (`k.vjp`,
            `k.grad`) instead of tcc's AD; its parameters are the forward inputs,
            optionally the forward outputs, then one gradient per output.
        cache (bool | str | os.PathLike | None): the compile cache (llvm): True keeps
            compiled code in memory and on disk (`$XDG_CACHE_HOME/tcc`), a directory
            keeps it there, None in memory only, False nowhere.

    Returns:
        Kernel: call it with one array per input; it returns one array per output.

    Raises:
        ParseError: the source is not TC.
        SemanticError: a name, type or reduction error.
        RangeError: a range cannot be inferred, or is empty.
        OptionsError: a bad target or option.

    Example:
        ```python
        import numpy as np
        import compiler

        k = compiler.define("def mm(float(M,K) A, float(K,N) B) -> (C) { C(m,n) +=! A(m,k) * B(k,n) }")
        (C,) = k(np.ones((2, 3), np.float32), np.ones((3, 4), np.float32))  # C == 3
        ```

    A define that takes over a second shows a progress line on stderr when it is a
    terminal.
    """
    from compiler import progress
    from compiler.kernel import define as _define

    with progress.Progress(f"tcc: compiling '{name}'" if name else "tcc: compiling the def"):
        return _define(
            source,
            name,
            constants=constants,
            target=target,
            options=options,
            backward=backward,
            cache=cache,
        )


def autotune(source: str, name: str | None = None, *inputs: Any, **kwargs: Any) -> Any:
    """Search def `name`'s schedule `Options` for these example inputs and cache the winner.

    Every candidate is compiled, run and compared with the default's outputs (and the
    reference evaluator's on small inputs) before it is timed; a failing one is never
    chosen. `define(source, name, options="tuned")` then uses the winner for inputs of
    these shapes. The keyword arguments are those of `compiler.tune.autotune.autotune`:
    `budget` (seconds, `"90s"`, `"2m"`; default 60), `candidates` (int), `seed`,
    `grad` (tune the gradient def), `executor` (None: local worker processes,
    `"ray"` or a `compiler.tune.RayExecutor`), `timeout_s`, `cache`, `progress`,
    `constants`, `target`.

    Returns:
        TuneResult: `options`, `time_ms`, `default_ms`, `speedup`, `trials` and
            `summary()`.

    Example:
        ```python
        result = compiler.autotune(src, "mm", A, B, candidates=6)
        k = compiler.define(src, "mm", options="tuned")
        ```
    """
    from compiler.tune.autotune import autotune as _autotune

    return _autotune(source, name, *inputs, **kwargs)


def infer_shapes(source: str, name: str | None, input_shapes: Any) -> dict[str, tuple[int, ...]]:
    """The output shapes of def `name` for the given input shapes, without compiling.

    Args:
        source (str): TC source text.
        name (str | None): the def; None: the only one.
        input_shapes (Mapping[str, Sequence[int]]): every input's shape, by name.

    Returns:
        dict[str, tuple[int, ...]]: every output's shape, by name.

    Raises:
        ShapeError: a size that two inputs disagree on, or a rank that does not match.

    Example:
        ```python
        compiler.infer_shapes(src, "matmul", {"A": (3, 4), "B": (4, 5)})  # {"C": (3, 5)}
        ```
    """
    from compiler.shapes import infer_shapes as _infer_shapes

    return _infer_shapes(source, name, input_shapes)


def grad(source: str, name: str | None = None, **kwargs: Any) -> str:
    """The gradient def `<name>_grad` of def `name`, as TC text in tcc's dialect.

    It takes the forward inputs, the forward outputs it reads and one `<out>_grad` per
    output, and returns one `<in>_grad` per float input; the text compiles again, so
    gradients nest (`compiler.grad(compiler.grad(src), "f_grad")`).

    Args:
        source (str): TC source text.
        name (str | None): the def; None: the only one.
        **kwargs: `form` (`"gather"`, the default: after the gather pass, one writer per
            element; `"scatter"`: as AD emits it), `wrt` (the inputs to differentiate;
            None: every float input), `outputs` (the outputs that carry a cotangent,
            the loss: a name, names, or `"Y,aux"`; the others get no `<out>_grad`
            parameter; None: every output), `constants`.

    Returns:
        str: the gradient def.

    Raises:
        TCError: a construct AD does not support (`lgamma`, non-affine subscripts), naming
            it.

    Example:
        ```python
        print(compiler.grad(open("examples/conv2d.tc").read(), form="scatter"))
        ```
    """
    from compiler.backward import grad as _grad

    return _grad(source, name, **kwargs)


def jvp(source: str, name: str | None = None, **kwargs: Any) -> str:
    """The tangent def `<name>_jvp` of def `name` (forward mode), as TC text.

    It takes the inputs and one `<in>_dot` per input with a tangent, and returns the
    outputs and one `<T>_dot` per tensor that depends on them.

    Args:
        source (str): TC source text.
        name (str | None): the def; None: the only one.
        **kwargs: `wrt` (the inputs with a tangent; None: every float input),
            `constants`.

    Returns:
        str: the tangent def.

    Example:
        ```python
        print(compiler.jvp(open("examples/softmax.tc").read()))
        ```
    """
    from compiler.higher import jvp as _jvp

    return _jvp(source, name, **kwargs)


# Imported eagerly: a lazy import of the submodule `compiler.gradcheck` would
# replace this package attribute with the module.
from compiler.gradcheck import gradcheck  # noqa: E402
from compiler.kernel import Kernel  # noqa: E402
from compiler.options import Options  # noqa: E402  (also makes `compiler.options` usable)
