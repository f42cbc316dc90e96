"""Reverse-mode automatic differentiation, TC to TC.

    grad_def(ranged: RangedDef, *, wrt=None) -> ast.Def     (reverse.py)
    jvp_def(ranged: RangedDef, *, wrt=None) -> TangentDef   (forward.py)

`rules.py` holds the derivative rules of the builtins, `algebra.py` the constructors
with symbolic zeros, `versions.py` the versions of tensors written several times and
their recomputation, `simplify.py` (with `normal.py`) the last step of both modes
(folded indices, like terms, merged contributions, shared subexpressions),
`rewrite.py` renaming and let inlining. This package imports only `compiler.frontend`
(STYLE.md rule 1): its input already carries explicit ranges.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from compiler.autodiff import forward, reverse
from compiler.autodiff.forward import TangentDef
from compiler.autodiff.simplify import simplify
from compiler.frontend.ast import Def
from compiler.frontend.checked import RangedDef


def grad_def(ranged: RangedDef, **kwargs: Any) -> Def:
    """`reverse.grad_def`, simplified (`simplify.simplify`)."""
    return simplify(reverse.grad_def(ranged, **kwargs))


def jvp_def(ranged: RangedDef, **kwargs: Any) -> TangentDef:
    """`forward.jvp_def`, its def simplified (`simplify.simplify`)."""
    tangent = forward.jvp_def(ranged, **kwargs)
    return dataclasses.replace(tangent, definition=simplify(tangent.definition))


__all__ = ["TangentDef", "grad_def", "jvp_def"]
