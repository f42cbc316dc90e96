"""tcc: a compiler toolkit for the Tensor Comprehensions language.

Public API (see README.md)::

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
    options: Options | None = None,
    backward: str | None = None,
    cache: bool | str | os.PathLike[str] | None = True,
) -> Kernel:
    """Compile def `name` of `source` (the only def when None) into a callable `Kernel`.

    `constants` fills `{name}` placeholders (TC's str.format templates); `target` is
    "llvm" (native, the default) or "interp" (the NumPy reference evaluator);
    `options` a `compiler.Options` (threads, schedule) for llvm; `backward` names a
    def of the same source to use as the gradient instead of tcc's AD; `cache` (llvm):
    True reuses compiled code in memory and on disk, a directory caches there, None in
    memory only, False never. See `compiler.kernel` and `Kernel.__call__`. A define
    that takes over a second shows a progress line on stderr when it is a terminal."""
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
    """Search def `name`'s schedule Options for these inputs (see `compiler.tune.autotune`)."""
    from compiler.tune.autotune import autotune as _autotune

    return _autotune(source, name, *inputs, **kwargs)


def infer_shapes(source: str, name: str | None, input_shapes: Any) -> dict[str, tuple[int, ...]]:
    """Output shapes of def `name` for the given input shapes (see `compiler.shapes`)."""
    from compiler.shapes import infer_shapes as _infer_shapes

    return _infer_shapes(source, name, input_shapes)


def grad(source: str, name: str | None = None, **kwargs: Any) -> str:
    """The gradient def of def `name` as TC text (see `compiler.backward.grad`);
    `form="scatter"` gives autodiff's raw scatter form."""
    from compiler.backward import grad as _grad

    return _grad(source, name, **kwargs)


def jvp(source: str, name: str | None = None, **kwargs: Any) -> str:
    """The tangent def (forward mode) of def `name` as TC text (see `compiler.higher.jvp`)."""
    from compiler.higher import jvp as _jvp

    return _jvp(source, name, **kwargs)


# Imported eagerly: a lazy import of the submodule `compiler.gradcheck` would
# replace this package attribute with the module.
from compiler.gradcheck import gradcheck  # noqa: E402
from compiler.kernel import Kernel  # noqa: E402
from compiler.options import Options  # noqa: E402  (also makes `compiler.options` usable)
