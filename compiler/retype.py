"""A def written with `float` instantiated for another float type.

    retype_source(text, ScalarType.FLOAT64) -> str

Every `float` (float32) of every def of `text` -- tensor types of inputs and typed
outputs, casts `float(...)`, and float literals (float32 by TC's rule) -- becomes
`to`, so `def f(float(N) A) -> (O) { O(i) = A(i) * 0.5 }` runs in float64 as if it had
been written with `double`: `compiler.torch.define(..., dtype=torch.float64)` and
`Layer.double()` use it. Other types (`double`, `half`, integers) are kept. The
result is TC text (it re-parses); comments are not kept.
"""

from __future__ import annotations

import dataclasses

from compiler.frontend.ast import Cast, Const, Def, Expr, Param, ScalarType
from compiler.frontend.parser import parse
from compiler.frontend.printer import print_module
from compiler.frontend.visit import Mutator


def retype_source(text: str, to: ScalarType, filename: str = "<string>") -> str:
    """`text` with every float32 type and literal as `to` (module doc)."""
    if to is ScalarType.FLOAT32:
        return text
    module = parse(text, filename)
    defs = tuple(_retype_def(d, to) for d in module.defs)
    return print_module(dataclasses.replace(module, defs=defs))


def _retype_def(d: Def, to: ScalarType) -> Def:
    mutator = _Retype(to)
    return dataclasses.replace(
        mutator.definition(d),
        params=tuple(_retype_param(p, to) for p in d.params),
        outputs=tuple(_retype_param(p, to) for p in d.outputs),
    )


def _retype_param(p: Param, to: ScalarType) -> Param:
    return dataclasses.replace(p, dtype=to) if p.dtype is ScalarType.FLOAT32 else p


class _Retype(Mutator):
    def __init__(self, to: ScalarType) -> None:
        super().__init__()
        self.to = to

    def mutate_Const(self, e: Const) -> Expr:
        return dataclasses.replace(e, dtype=self.to) if e.dtype is ScalarType.FLOAT32 else e

    def mutate_Cast(self, e: Cast) -> Expr:
        e = self.generic(e)
        return dataclasses.replace(e, dtype=self.to) if e.dtype is ScalarType.FLOAT32 else e
