"""The def a CPU schedule pass made: the input def's statements rewritten, with the
pass's scratch tensors declared as outputs (`cpu.pad`'s pads, `cpu.factor`'s partial
sums), checked again.

Requires: `ranged`, the def the pass read; `stmts`, its new statements; `outputs`, the
scratch tensors (declared with type and shape); `bounds`, every output's index ranges
(the input def's and the scratch tensors').
Ensures:  `rechecked(...)` is the new `RangedDef` (same warnings and preconditions), or
an `InternalError` naming the pass (`what`) and printing the def: a pass's rewrite
that does not check is a bug of the pass, never the user's.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from compiler.diagnostics import InternalError, TCError
from compiler.frontend.ast import Param, Stmt
from compiler.frontend.check import check_def
from compiler.frontend.checked import Bound, RangedDef
from compiler.frontend.printer import print_def


def rechecked(
    ranged: RangedDef,
    stmts: Sequence[Stmt],
    outputs: Sequence[Param],
    bounds: Sequence[tuple[str, tuple[Bound, ...]]],
    what: str,
) -> RangedDef:
    checked = ranged.checked
    definition = dataclasses.replace(
        checked.definition,
        outputs=checked.definition.outputs + tuple(outputs),
        stmts=tuple(stmts),
    )
    try:
        again = check_def(definition)
    except TCError as e:
        raise InternalError(f"the {what} does not check:\n{print_def(definition)}\n{e}") from e
    return RangedDef(again, tuple(bounds), ranged.warnings, ranged.preconditions)


__all__ = ["rechecked"]
