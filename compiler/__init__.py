"""tcc: a compiler toolkit for the Tensor Comprehensions language.

The public API (see README.md). Passes are importable from their modules
(`compiler.frontend.parser.parse`, `compiler.frontend.check.check_module`, ...);
`compiler.pipeline` lists them in order.
"""

from __future__ import annotations

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
]
__version__ = "0.1.0"
