"""[ext] The def's where clause as isl sees it: the context of the sizes.

    def gru(float(N, G) gates, float(N, H) h) -> (O) where G >= 4 * H { ... }

Requires: a `CheckedDef` (its `definition.where` holds comparisons of integer affine
          expressions of the sizes: `frontend.size_conditions` checked them).
Ensures:  `stated_context(checked)` is the set of sizes (all >= 1) that satisfy every
          stated condition, the context range inference works in: a read in bounds
          for those sizes needs no warning and no run-time check, and bounds simplify
          under it (`min(G - 3 * H, H)` is `H` when G >= 4 * H). Conditions that hold
          for no sizes together are a RangeError at the first condition that empties
          the set. `stated_preconditions(checked)` are the conditions as
          `Precondition`s without a read, which every call checks first
          (`shapes.check_preconditions`).
          `clause_hint(ok)` suggests stating a relation a warning says a read needs.
"""

from __future__ import annotations

import islpy as isl

from compiler.diagnostics import RangeError
from compiler.frontend.ast import Compare, Expr, Logical, LogicOp
from compiler.frontend.checked import CheckedDef, Precondition
from compiler.frontend.printer import print_expr
from compiler.poly.isl_bridge import NotAffine, condition_to_set, params_space


def stated_context(checked: CheckedDef) -> isl.Set:
    """The sizes (each >= 1) that satisfy every condition of the def's where clause."""
    space = params_space(checked.size_params)
    context = space.context.params()
    for k, cond in enumerate(checked.definition.where):
        try:
            holds = condition_to_set(cond, space).params()
        except NotAffine as e:  # frontend.check rejects these; kept as a clear error
            raise RangeError(
                f"the condition `{print_expr(cond)}` is not affine in the sizes", cond.span
            ) from e
        narrowed = context & holds
        if narrowed.is_empty():
            raise _contradiction(cond, k, (space.context.params() & holds).is_empty())
        context = narrowed
    return context


def _contradiction(cond: Expr, k: int, alone: bool) -> RangeError:
    shown = print_expr(cond)
    if alone or k == 0:
        return RangeError(
            f"the def's where clause condition `{shown}` holds for no sizes (sizes are at least 1)",
            cond.span,
            "state a relation that some sizes satisfy, e.g. `where G >= 4 * H`",
        )
    return RangeError(
        f"the def's where clause condition `{shown}` contradicts the conditions before it: "
        "together they hold for no sizes",
        cond.span,
        "remove or correct one of the conditions",
    )


def stated_preconditions(checked: CheckedDef) -> tuple[Precondition, ...]:
    """The def's where clause, one `Precondition` (without a read) per condition."""
    return tuple(Precondition(cond, None) for cond in checked.definition.where)


def clause_hint(ok: Expr) -> str | None:
    """`state it as `where A >= B, C > 1` ...`, for a relation the def's where clause can
    state (a conjunction of comparisons); None for one it cannot (`A > B || C > 1`)."""
    parts = _conjuncts(ok)
    if parts is None:
        return None
    clause = ", ".join(print_expr(p) for p in parts)
    return (
        f"state it as `where {clause}` after the output list to check it once per call and "
        "silence this"
    )


def _conjuncts(e: Expr) -> list[Expr] | None:
    if isinstance(e, Compare):
        return [e]
    if isinstance(e, Logical) and e.op is LogicOp.AND:
        lhs, rhs = _conjuncts(e.lhs), _conjuncts(e.rhs)
        return None if lhs is None or rhs is None else lhs + rhs
    return None
