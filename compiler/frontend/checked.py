"""Resolved facts about a def: what `frontend.check` proves and `poly.ranges` adds.

These are the contracts between the front end and every later layer:

    check.check_def(Def)          -> CheckedDef   names, types, index vs reduction vars
    poly.ranges.infer_ranges(...) -> RangedDef    every variable gets an explicit range

A `CheckedDef.definition` is the parsed def *normalised*: a name that refers to a
0-d tensor (a scalar parameter `float a`, or a 0-d output) is an `Access(name, ())`,
never a `Var`, so later passes only meet `Var`s that are index variables, size
parameters or let bindings.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from compiler.diagnostics import Diagnostic, TCError
from compiler.frontend.ast import Access, Def, Expr, ScalarType, Stmt
from compiler.frontend.source import NO_SPAN, Span


class Role(enum.Enum):
    INPUT = "input"
    OUTPUT = "output"


@dataclass(frozen=True, slots=True)
class TensorInfo:
    """A parameter or output. `dims` is None for an output whose shape is inferred."""

    name: str
    role: Role
    dtype: ScalarType
    rank: int
    dims: tuple[Expr, ...] | None  # Var, Const, or an integer expression of sizes
    span: Span = NO_SPAN


@dataclass(frozen=True, slots=True)
class StmtFacts:
    """One statement with its variables sorted by role.

    `index_vars`: variables of the left-hand side, in order of first appearance.
    `reduction_vars`: other index variables (right-hand side, where clauses), in
    order of first appearance. `lets`: names bound by `where x = ...`, in order.
    """

    stmt: Stmt
    index_vars: tuple[str, ...]
    reduction_vars: tuple[str, ...]
    lets: tuple[str, ...] = ()

    @property
    def all_vars(self) -> tuple[str, ...]:
        return self.index_vars + self.reduction_vars


@dataclass(frozen=True, slots=True)
class CheckedDef:
    definition: Def
    tensors: tuple[TensorInfo, ...]  # inputs in parameter order, then outputs
    size_params: tuple[str, ...]  # in order of first appearance in the signature
    stmts: tuple[StmtFacts, ...]
    warnings: tuple[Diagnostic, ...] = ()

    @property
    def name(self) -> str:
        return self.definition.name

    @property
    def inputs(self) -> tuple[TensorInfo, ...]:
        return tuple(t for t in self.tensors if t.role is Role.INPUT)

    @property
    def outputs(self) -> tuple[TensorInfo, ...]:
        return tuple(t for t in self.tensors if t.role is Role.OUTPUT)

    def tensor(self, name: str) -> TensorInfo:
        for t in self.tensors:
            if t.name == name:
                return t
        raise TCError(f"no tensor named '{name}' in def '{self.name}'")


@dataclass(frozen=True, slots=True)
class Bound:
    """A half-open range [lo, hi) whose ends are TC expressions of the size
    parameters (and, for non-rectangular domains, of outer index variables)."""

    lo: Expr
    hi: Expr


@dataclass(frozen=True, slots=True)
class Precondition:
    """A relation of the sizes that every call checks (`shapes.bind_sizes`); `cond` is
    an expression of the size parameters alone.

    With `access` None, a condition of the def's where clause [ext] (`-> (O) where
    G >= 4 * H {`), which range inference assumed; these come first. Otherwise a
    relation that keeps `access` in bounds, which range inference could not prove
    (`G >= 4 * H` for `gates(n, 3 * H + j) where j in 0:H`), exact for every size that
    satisfies the stated conditions. For a read of an output, in bounds means inside
    what earlier statements wrote (its extent so far), which may be less than the
    output's shape."""

    cond: Expr
    access: Access | None = None


@dataclass(frozen=True, slots=True)
class RangedDef:
    """A checked def after range inference.

    `checked.definition` carries, in every statement, one `RangeConstraint` per
    index and reduction variable (`where i in lo:hi`), so the def is self-contained
    TC and later passes (autodiff, interp) need no isl. `output_bounds[name]` gives,
    per dimension, the range of indices written to that output: the output's shape
    is `hi` of each dimension (tcc indexes outputs by the index value itself, so a
    range that starts above 0 leaves the leading elements at the initial value).
    """

    checked: CheckedDef
    output_bounds: tuple[tuple[str, tuple[Bound, ...]], ...]
    warnings: tuple[Diagnostic, ...] = ()
    preconditions: tuple[Precondition, ...] = ()  # checked at every call

    @property
    def name(self) -> str:
        return self.checked.name

    def bounds_of(self, output: str) -> tuple[Bound, ...]:
        for name, bounds in self.output_bounds:
            if name == output:
                return bounds
        raise TCError(f"'{output}' is not an output of def '{self.name}'")
