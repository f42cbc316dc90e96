"""Arithmetic operation counts of a def at concrete sizes (for `tcc run --bench`).

    count_flops(ranged, sizes) -> int

Per statement: the number of points of its iteration domain (isl counts them
exactly, with the sizes fixed) times the operations of one instance: every `+ - * /
%`, unary minus, builtin call, comparison and ternary of the right-hand side and of
the lets, outside tensor subscripts (index arithmetic is not counted), plus one for
the reduction (`+=`, `*=`, `min=`, `max=`) or an accumulating `=`, none for a plain
copy. Matmul counts 2 * M * N * K. `where exists` filters and data-dependent reads do
not shrink the count: it is the work of the domain the ranges state.
"""

from __future__ import annotations

from collections.abc import Mapping

import islpy as isl

from compiler.frontend.ast import (
    Access,
    AssignOp,
    Binary,
    Call,
    Compare,
    Expr,
    Let,
    Logical,
    Select,
    Unary,
)
from compiler.frontend.checked import RangedDef, StmtFacts
from compiler.frontend.scopes import children
from compiler.poly.build import domain_of
from compiler.poly.isl_bridge import StmtSpace

_COUNTED = (Binary, Call, Compare, Logical, Select, Unary)


def count_flops(ranged: RangedDef, sizes: Mapping[str, int]) -> int:
    """Arithmetic operations of one call of `ranged` at `sizes` (see the module doc)."""
    return sum(_points(f, ranged, sizes) * ops_per_instance(f) for f in ranged.checked.stmts)


def ops_per_instance(facts: StmtFacts) -> int:
    stmt = facts.stmt
    ops = _ops(stmt.rhs) + sum(_ops(c.value) for c in stmt.where if isinstance(c, Let))
    return ops + (0 if stmt.op is AssignOp.ASSIGN else 1)


def _ops(e: Expr) -> int:
    if isinstance(e, Access):
        return 0  # subscripts are index arithmetic
    return int(isinstance(e, _COUNTED)) + sum(_ops(c) for c in children(e))


def _points(facts: StmtFacts, ranged: RangedDef, sizes: Mapping[str, int]) -> int:
    params = ranged.checked.size_params
    domain = domain_of(facts.stmt, StmtSpace(facts.all_vars, params), "S")
    for k, name in enumerate(params):
        domain = domain.fix_val(
            isl.dim_type.param, k, isl.Val.int_from_si(domain.get_ctx(), int(sizes[name]))
        )
    return int(domain.count_val().to_python())


__all__ = ["count_flops", "ops_per_instance"]
