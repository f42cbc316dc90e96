"""Reverse-mode automatic differentiation, TC to TC.

    grad_def(ranged: RangedDef, *, wrt=None) -> ast.Def     (reverse.py)
    jvp_def(ranged: RangedDef, *, wrt=None) -> TangentDef   (forward.py)

`rules.py` holds the derivative rules of the builtins, `algebra.py` the constructors
with symbolic zeros, `versions.py` the versions of tensors written several times and
their recomputation, `rewrite.py` renaming and let inlining. This package imports
only `compiler.frontend` (STYLE.md rule 1): its input already carries explicit ranges.
"""

from __future__ import annotations

from compiler.autodiff.forward import TangentDef, jvp_def
from compiler.autodiff.reverse import grad_def

__all__ = ["TangentDef", "grad_def", "jvp_def"]
