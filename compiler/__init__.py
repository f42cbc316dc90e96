"""tcc: a compiler toolkit for the Tensor Comprehensions language.

Public API (see README.md)::

    compiler.define(source, name=None, *, constants=None, target="interp")  -> Kernel
    compiler.infer_shapes(source, name, input_shapes)                      -> {output: shape}
    compiler.pipeline.run(text, name, upto="ranges")                       -> any pass's result

Every pass is importable from its own module (`compiler.frontend.parser.parse`,
`compiler.frontend.check.check_def`, `compiler.poly.ranges.infer_ranges`, ...).
"""

from __future__ import annotations

from typing import Any

from compiler.frontend.diagnostics import (
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
    "OptionsError",
    "ParseError",
    "RangeError",
    "SemanticError",
    "ShapeError",
    "TCError",
    "define",
    "grad",
    "gradcheck",
    "infer_shapes",
    "jvp",
]
__version__ = "0.1.0"


def define(source: str, name: str | None = None, **kwargs: Any) -> Any:
    """Compile a TC def into a callable `Kernel` (see `compiler.kernel.define`)."""
    from compiler.kernel import define as _define

    return _define(source, name, **kwargs)


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
