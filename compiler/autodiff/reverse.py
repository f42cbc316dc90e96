"""Statement-level reverse-mode AD: a ranged TC def -> its gradient def, TC to TC.

Requires: a `RangedDef` (every statement carries `where v in lo:hi` for each of its
          variables), so no isl is needed here.
Ensures:  `grad_def(ranged)` returns a new `Def` named `<name>_grad`:
          - params: the forward inputs, then the forward outputs the gradient reads,
            then one `<out>_grad` per forward output (with the output's shape);
          - outputs: one `<in>_grad` per differentiable (float) input, declared with
            the input's type and dims, then the extra tensors the gradient needs
            (`T_v<k>` recomputed versions, `T_v<k>_grad` / `T_grad_acc` adjoints of
            intermediates, `T_tmp<k>` auxiliary reductions);
          - statements: the recomputed versions, then, for the forward statements in
            reverse order, one scatter statement per read of a differentiable tensor:
            `X_grad(<read's subscripts>) += <adjoint> * <partial>` with the forward
            statement's ranges. The first write of a gradient tensor is `+=!`.
          The def prints as TC that re-parses, checks and infers ranges (tcc's dialect:
          affine and data-dependent left-hand sides). The input is not modified.
          Every name above is asked of the compilation's `compiler.names.NameSupply`:
          when the def already uses it, the gradient gets a fresh one (`A_grad_1`,
          `z0_1`), so gradients nest (`f_grad_grad`) and never capture a user's name.

Worked example (matmul)::

    C(m, n) +=! A(m, k) * B(k, n) where m in 0:M, n in 0:N, k in 0:K
  ==>
    def matmul_grad(float(M, K) A, float(K, N) B, float(M, N) C_grad)
        -> (float(M, K) A_grad, float(K, N) B_grad) {
        A_grad(m, k) +=! C_grad(m, n) * B(k, n) where m in 0:M, n in 0:N, k in 0:K
        B_grad(k, n) +=! C_grad(m, n) * A(m, k) where m in 0:M, n in 0:N, k in 0:K
    }

Reductions: `+=`: the adjoint flows unchanged. `max=` / `min=`: to the elements equal
to the result (`O_grad(i) * (X(i, j) == O(i) ? 1 : 0)`): as PyTorch without ties; on
a tie *every* tied element receives the full adjoint. `*=!`: the product of the other
terms, exact with zeros (auxiliary reductions count the zeros and multiply the
non-zero terms). `*=` without `!` (into the previous contents, over the whole output):
the previous version times that; its adjoint times the product of the terms.
Scalar rules (`compiler.autodiff.rules`) and symbolic zeros (`algebra`) keep the
statements minimal; a zero gradient emits nothing, and an input with no contribution
gets `X_grad(...) = 0`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable

from compiler.autodiff import algebra as al
from compiler.autodiff.backprop import Guard, IndexDefault, backprop, has_read
from compiler.autodiff.copies import propagate_copies
from compiler.autodiff.merge import merge_contributions
from compiler.autodiff.pass_through import PassThrough
from compiler.autodiff.products import (
    exact_partial,
    first_write,
    reduced,
    terms,
)
from compiler.autodiff.quotient import split_quotient
from compiler.autodiff.reuse import Saved, reuse_forward, saved_outputs
from compiler.autodiff.rewrite import locate
from compiler.autodiff.versions import (
    Versions,
    analyse,
    full_box,
    plain_vars,
    recompute,
    writes_box,
)
from compiler.diagnostics import InternalError, TCError
from compiler.frontend.ast import (
    Access,
    AssignOp,
    Binary,
    BinOp,
    Cast,
    Const,
    Def,
    Expr,
    Param,
    RangeConstraint,
    ScalarType,
    Stmt,
    Unary,
    UnaryOp,
    Var,
)
from compiler.frontend.checked import RangedDef
from compiler.frontend.printer import print_expr
from compiler.frontend.scopes import is_constant, name_supply, stmt_names, walk
from compiler.frontend.source import Span
from compiler.frontend.types import INDEX_TYPE, expr_type, promote
from compiler.names import NameSupply


def grad_def(
    ranged: RangedDef,
    *,
    wrt: Iterable[str] | None = None,
    names: NameSupply | None = None,
    zeros: Iterable[str] = (),
) -> Def:
    """The gradient def of `ranged` (see the module docstring). `names` is the
    compilation's supply, seeded with the def's names (default: a new one). `zeros`
    names outputs whose cotangent is zero (symbolic zeros, as JAX's): they get no
    `<out>_grad` parameter, and the statements only they would feed are not emitted."""
    supply = names if names is not None else name_supply(ranged.checked.definition)
    from compiler.autodiff.clamps import split_clamps  # reads through min/max: pieces

    split = split_clamps(ranged)
    zero = _zeros(ranged, zeros)
    reverse = _Reverse(split.ranged, wrt, supply, zero, split.reads_before, split.originals)
    return merge_contributions(propagate_copies(reverse.run(), keep=len(reverse.wrt)))


class _Reverse(PassThrough):
    """One gradient derivation: the forward's versions and the statements emitted."""

    def __init__(
        self,
        ranged: RangedDef,
        wrt: Iterable[str] | None,
        names: NameSupply,
        zeros: frozenset[str] = frozenset(),
        reads_before: tuple[int, ...] = (),
        originals: tuple[Stmt, ...] = (),
    ) -> None:
        self.ranged = ranged
        self.zeros = zeros
        self.checked = ranged.checked
        self.wrt = wrt_inputs(ranged, wrt)
        # The signature's names first (they are the gradient's interface), then the rest.
        self.names = names
        self.def_name = names.fresh(f"{ranged.name}_grad")
        self.out_adjoint = {t.name: names.fresh(f"{t.name}_grad") for t in self.checked.outputs}
        self.in_grad = {n: names.fresh(f"{n}_grad") for n in self.wrt}
        self.v: Versions = analyse(ranged, names, reads_before)
        self.types: dict[str, ScalarType] = {t.name: t.dtype for t in self.checked.tensors}
        self.types |= dict.fromkeys(self.checked.size_params, INDEX_TYPE)
        self.types |= dict.fromkeys(self.v.fresh_sizes, INDEX_TYPE)
        for t in self.v.writes:
            for k in range(1, self.v.final(t)):
                self.types[self.v.name(t, k)] = self.v.dtype(t)
        self.adjoint: dict[tuple[str, int], str] = {}
        self.started: set[str] = set()
        self.extra: list[Param] = []
        self.stmts: list[Stmt] = []
        self.needed: set[tuple[str, int]] = set()
        self.active = self._activity()
        self.tmp_count = 0
        self.span: Span = ranged.checked.definition.span
        self.pending_copy: dict[str, str] = {}
        self.zero_started: set[str] = set()  # accumulators of a zero cotangent
        # (target, version) of a product -> its (count, nonzero, zeros) reductions
        self.products: dict[tuple[str, int], tuple[Access, Access, Access]] = {}
        self.ties: dict[int, str] = {}  # a clamp group's first piece -> its tie count
        self.results: dict[int, str] = {}  # ... -> its result as compared (`_result`)
        self.originals = originals  # per statement, the statement it is a piece of

    # ------------------------------------------------------------------ driver

    def run(self) -> Def:
        for out in self.checked.outputs:
            if out.name not in self.zeros:
                self.adjoint[(out.name, self.v.final(out.name))] = self.out_adjoint[out.name]
        forward = self.v.stmts
        for index in reversed(range(len(forward))):
            self._statement(index, forward[index])
        for name in self.wrt:
            if self.in_grad[name] not in self.started:
                idx, where = full_box(self.v, name)
                zero = Const(0, ScalarType.INT32)
                stmt = Stmt(Access(self.in_grad[name], idx), AssignOp.ASSIGN, zero, where)
                self.stmts.append(locate(stmt, self._span(name)))
        # Ordering: after every contribution is emitted, before the recomputed versions
        # are chosen (a reused output is read as it is; nothing of it is recomputed).
        self.stmts = reuse_forward(self.stmts, self._saved())
        head, written = recompute(self.v, self.needed)
        versions = [
            Param(self.v.name(t, k), self.v.dtype(t), self.v.dims(t), span=self._span(t))
            for t, k in written
        ]
        return self._assemble(head + self.stmts, versions)

    def _assemble(self, stmts: list[Stmt], versions: list[Param]) -> Def:
        inputs = self.checked.definition.params
        read = _names_read(stmts)
        outputs_read = tuple(
            Param(t.name, t.dtype, self.v.dims(t.name), span=t.span)
            for t in self.checked.outputs
            if t.name in read
        )
        grads_in = tuple(
            Param(self.out_adjoint[t.name], t.dtype, self.v.dims(t.name), span=t.span)
            for t in self.checked.outputs
            if t.name not in self.zeros
        )
        grads_out = tuple(
            Param(self.in_grad[t.name], t.dtype, tuple(t.dims or ()), span=t.span)
            for t in self.checked.inputs
            if t.name in self.wrt
        )
        params = (*inputs, *outputs_read, *grads_in)
        outputs = (*grads_out, *versions, *self.extra)
        _check_unique(params + outputs)
        span = self.checked.definition.span
        where = self.checked.definition.where  # the same sizes: the same preconditions
        return Def(self.def_name, params, outputs, tuple(stmts), where, span=span)

    def _span(self, tensor: str) -> Span:
        """Where `tensor` is declared (what a diagnostic about its gradient points at)."""
        return self.checked.tensor(tensor).span

    def _saved(self) -> list[Saved]:
        """Forward outputs written once by `=`, whose values the gradient may read back."""
        stmts = []
        for index, stmt in enumerate(self.v.stmts):
            if stmt.op is AssignOp.ASSIGN and self.v.final(stmt.lhs.name) == 1:
                try:
                    stmts.append(self.v.versioned_reads(stmt, index))
                except TCError:
                    continue  # reads an output before it is written: not a candidate
        outputs = {t.name for t in self.checked.outputs}
        return saved_outputs(stmts, outputs, self.checked.size_params)

    # --------------------------------------------------------------- activity

    def _activity(self) -> set[tuple[str, int]]:
        """Versions that depend on a differentiable input (only they get adjoints)."""
        active: set[tuple[str, int]] = set()
        for index, stmt in enumerate(self.v.stmts):
            target, k = stmt.lhs.name, self.v.written(index)
            reads = {e.name for e in walk(stmt.rhs) if isinstance(e, Access)}
            live = bool(reads & set(self.wrt)) or any(
                (name, self.v.read_version(name, index)) in active
                for name in reads
                if name in self.v.writes
            )
            if live or (self.v.accumulates(index) and (target, k - 1) in active):
                active.add((target, k))
        return active

    # ------------------------------------------------------------- statements

    def _statement(self, index: int, forward: Stmt) -> None:
        target, k = forward.lhs.name, self.v.written(index)
        adjoint = self.adjoint.get((target, k))
        if adjoint is None or (target, k) not in self.active:
            return
        stmt = self.v.versioned_reads(forward, index)
        if adjoint in self.pending_copy:
            # Added after the other contributions: the last write of the accumulator
            # then covers its whole shape, so range inference bounds its reads by it.
            idx, where = full_box(self.v, target)
            self._emit(Access(adjoint, idx), Access(self.pending_copy.pop(adjoint), idx), where)
        elif adjoint in self.zero_started:
            self._cover(adjoint, target)
        self.span = forward.span  # generated statements point at their forward statement
        seed_access = Access(adjoint, stmt.lhs.args, span=stmt.lhs.span)
        self.types[adjoint] = self.v.dtype(target)
        seed = self._seed(index, stmt, target, k, seed_access)
        quotient = split_quotient(stmt)
        if quotient is None:
            parts = [(stmt, stmt.rhs, seed)]
        else:  # the divisor's adjoint from the sum's result (`autodiff.quotient`)
            (fraction, where), result = quotient, Access(self.v.name(target, k), stmt.lhs.args)
            self._need(target, k)
            outer = dataclasses.replace(stmt, where=where)  # the divisor's terms: over v
            minus = al.neg(al.div(al.mul(seed, result), fraction.rhs))
            parts = [(stmt, fraction.lhs, al.div(seed, fraction.rhs)), (outer, fraction.rhs, minus)]
        for part, expr, part_seed in parts:
            for read, contribution, guards in backprop(expr, part_seed, (), self.types):
                self._contribute(index, part, read, contribution, guards)
        if k > 1 and (target, k - 1) in self.active:
            self._pass_through(index, stmt, target, k, adjoint)

    def _cover(self, adjoint: str, target: str) -> None:
        """A zero cotangent's accumulator, about to be read over the whole output: its
        contributions may write only part of it (`Y(i) = X(i) where i in 0:N - 1`
        reads part of `X`), so add zero over the whole shape last, unless one of them
        already wrote all of it (range inference bounds its reads by its writes)."""
        dims = self.v.dims(target)
        if any(s.lhs.name == adjoint and writes_box(s, dims) for s in self.stmts):
            return
        idx, where = full_box(self.v, target)
        self._emit(Access(adjoint, idx), Const(0, ScalarType.INT32), where)

    def _seed(self, index: int, stmt: Stmt, target: str, k: int, adjoint: Access) -> Expr:
        base = stmt.op.base
        if base in (AssignOp.ASSIGN, AssignOp.PLUS):
            return adjoint
        if base in (AssignOp.MAX, AssignOp.MIN):
            last = k == self.v.written(self._group(index)[-1])
            name = self._result(index, target) if last else self.v.name(target, k)
            result = Access(name, stmt.lhs.args, span=stmt.lhs.span)
            self._need(target, k)
            hit = al.indicator(al.eq(stmt.rhs, result))
            seed = al.mul(adjoint, hit) or adjoint
            ties = self._tie_count(index, stmt, target)
            return seed if ties is None else al.div(seed, ties)
        if not stmt.op.init:
            return self._times_seed(stmt, target, k, adjoint)
        return self._product_seed(stmt, target, k, adjoint)

    def _times_seed(self, stmt: Stmt, target: str, k: int, adjoint: Access) -> Expr:
        """`*=` without '!': `O_k = O_(k-1) * prod_r x_r`, so `d x_r` is `O_(k-1)` times
        the product of the other terms (1 when the statement reduces over nothing:
        `NonLin(b, c, t) *= sigmoid(...)`). Differentiated where it multiplies every
        element of an output an earlier statement wrote, or part of it through plain
        index variables (a clamp's piece: the pass-through keeps the adjoint where it
        does not multiply, `_times_pass_through`)."""
        if k == 1:
            raise first_write(stmt, target)
        if not self.v.covers_box(stmt) and plain_vars(stmt.lhs) is None:
            raise TCError(
                f"cannot differentiate `*=` without '!' over part of '{target}' (its "
                "left-hand side must be plain index variables over the whole output): "
                "not supported yet",
                stmt.span,
                hint="multiply by the previous value explicitly with `=` over the part",
            )
        previous = Access(self.v.name(target, k - 1), stmt.lhs.args, span=stmt.lhs.span)
        self._need(target, k - 1)
        seed = self._product_seed(stmt, target, k, adjoint) if reduced(stmt) else adjoint
        return al.mul(seed, previous) or seed

    def _product_seed(self, stmt: Stmt, target: str, k: int, adjoint: Access) -> Expr:
        """d(prod_r x_r)/d x_r = the product of the other terms, exact with zero terms
        and to differentiate again (`autodiff.products`)."""
        rhs = stmt.rhs
        counted, factor, zero = terms(rhs)
        count = self._tmp(target, stmt, AssignOp.PLUS_INIT, counted, True)
        nonzero = self._tmp(target, stmt, AssignOp.TIMES_INIT, factor)
        zeros = self._tmp(target, stmt, AssignOp.PLUS_INIT, zero)
        self.products[(target, k)] = (count, nonzero, zeros)  # `_times_pass_through`
        return al.mul(adjoint, exact_partial(rhs, count, nonzero, zeros)) or adjoint

    def _tmp(
        self,
        target: str,
        stmt: Stmt,
        op: AssignOp,
        rhs: Expr,
        count: bool = False,
        start: tuple[tuple[Expr, ...], Expr, tuple] | None = None,
    ) -> Access:
        """An auxiliary reduction over `stmt`'s left-hand side: an int32 `count`, else
        of the target's type. With `start = (subscripts, value, where)` the reduction
        starts from `value` over `where` (`T(subscripts) = value where ...` then
        `T op rhs`, `op` without its '!'), so it has an element wherever `where` does,
        even one with no term."""
        name = self._fresh_tmp(target, ScalarType.INT32 if count else None)
        access = Access(name, stmt.lhs.args)
        if start is not None:
            idx, value, where = start
            first = Stmt(Access(name, idx), AssignOp.ASSIGN, value, where)
            self.stmts.append(locate(first, self.span))
            op = op.base
        self.stmts.append(locate(Stmt(access, op, rhs, stmt.where), self.span))
        return access

    def _fresh_tmp(self, target: str, dtype: ScalarType | None = None) -> str:
        """A new auxiliary output `<target>_tmp<k>` of `dtype` (the target's if None)."""
        self.tmp_count += 1
        name = self.names.fresh(f"{target}_tmp{self.tmp_count}")
        self.extra.append(Param(name, None, None, span=self._span(target)))
        self.types[name] = dtype or self.v.dtype(target)
        return name

    def _need(self, tensor: str, version: int) -> None:
        if version < self.v.final(tensor):
            self.needed.add((tensor, version))

    # ---------------------------------------------------------- contributions

    def _contribute(
        self, index: int, stmt: Stmt, read: Access, value: Expr, guards: tuple[Guard, ...]
    ) -> None:
        tensor, version = self._origin(read.name, index)
        grad = self._grad_tensor(tensor, version)
        if grad is None:
            return
        for arg in read.args:
            bad = _non_affine(arg)
            if bad is not None:
                raise TCError(
                    f"cannot differentiate the read of '{read.name}': its subscript "
                    f"`{print_expr(arg)}` is not affine (`{print_expr(bad)}`), so its gradient "
                    f"would be a scatter into '{grad}' at a non-affine index: not supported",
                    arg.span,
                    hint="bind the subscript to an index variable with a where clause, "
                    "or read through an index tensor",
                )
        for cond, taken in reversed(guards):
            value = al.select(cond, value, None) if taken else al.select(cond, None, value)  # type: ignore[assignment]
        self._need_reads(value, index)  # the guards' reads too (`O_v1(i) < B(i) ? ...`)
        extra = self._guard_ranges(tensor, read) if guards else ()
        where = stmt.where + tuple(c for c in extra if c not in stmt.where)
        self._emit(Access(grad, read.args, span=read.span), value, where)

    def _origin(self, name: str, index: int) -> tuple[str, int]:
        # Only `name` itself and `T` of `T_v<k>` can be its tensor: checking those,
        # not every written tensor, keeps long defs linear (5000 statements).
        base, _, k = name.rpartition("_v")
        candidates = [t for t in (name, base if k.isdigit() else None) if t in self.v.writes]
        if len(candidates) > 1:  # both written: the order of the full loop it replaces
            candidates.sort(key=list(self.v.writes).index)
        for tensor in candidates:
            version = self.v.read_version(tensor, index)
            if self.v.name(tensor, version) == name:
                return tensor, version
        return name, 0

    def _need_reads(self, expr: Expr, index: int) -> None:
        for e in walk(expr):
            if isinstance(e, Access):
                tensor, version = self._origin(e.name, index)
                if version > 0:
                    self._need(tensor, version)

    def _grad_tensor(self, tensor: str, version: int) -> str | None:
        """The tensor accumulating the adjoint of (tensor, version), created on demand."""
        if version == 0:
            return self.in_grad.get(tensor)
        if (tensor, version) not in self.active:
            return None
        existing = self.adjoint.get((tensor, version))
        if version < self.v.final(tensor):
            if existing is None:
                existing = self.names.fresh(f"{self.v.name(tensor, version)}_grad")
                self._declare(existing, tensor)
            self.adjoint[(tensor, version)] = existing
            return existing
        adjoint = self.out_adjoint.get(tensor)
        if existing is None and tensor in self.zeros:  # a zero cotangent: its first
            existing = self.names.fresh(f"{adjoint}_acc")  # contribution starts the sum
            self._declare(existing, tensor)
            self.adjoint[(tensor, version)] = existing
            self.zero_started.add(existing)
        elif existing == adjoint:  # the caller's adjoint is immutable: accumulate
            existing = self.names.fresh(f"{adjoint}_acc")  # into a copy, added last
            self._declare(existing, tensor)  # (see _statement)
            self.pending_copy[existing] = adjoint
            self.adjoint[(tensor, version)] = existing
        return existing

    def _declare(self, name: str, tensor: str) -> None:
        self.extra.append(
            Param(name, self.v.dtype(tensor), self.v.dims(tensor), span=self._span(tensor))
        )
        self.types[name] = self.v.dtype(tensor)

    def _emit(self, lhs: Access, value: Expr, where: tuple) -> None:
        target_type = self.types.get(lhs.name)
        if target_type is not None:
            value_type = expr_type(value, self._env(where))
            if promote(value_type, target_type) is not target_type:
                value = Cast(target_type, value)
        scope = self.names.scope(stmt_names(Stmt(lhs, AssignOp.ASSIGN, value, where)))
        lhs, where = _constant_subscripts_as_vars(lhs, where, scope)
        op = AssignOp.PLUS if lhs.name in self.started else AssignOp.PLUS_INIT
        self.started.add(lhs.name)
        self.stmts.append(locate(Stmt(lhs, op, value, where), self.span))

    def _env(self, where: tuple) -> dict[str, ScalarType]:
        env = dict(self.types)
        for clause in where:
            if isinstance(clause, RangeConstraint):
                for e in walk(clause.expr):
                    if isinstance(e, Var):
                        env[e.name] = INDEX_TYPE
        return IndexDefault(env)

    def _guard_ranges(self, tensor: str, read: Access) -> tuple[RangeConstraint, ...]:
        """Under a `c ? ... : ...` branch, the read's subscripts may leave the tensor
        where the branch is not taken: keep the scatter in bounds (exactly the points
        where the forward read happens, since the forward never reads out of bounds)."""
        dims = self.v.dims(tensor)
        out = []
        for arg, dim in zip(read.args, dims, strict=True):
            if any(isinstance(e, Access) for e in walk(arg)):
                continue
            out.append(RangeConstraint(arg, Const(0, ScalarType.INT32), dim))
        return tuple(out)


def _constant_subscripts_as_vars(
    lhs: Access, where: tuple, scope: NameSupply
) -> tuple[Access, tuple]:
    """`b_grad(0) += ...` -> `b_grad(z0) += ... where z0 in 0:1`: TC's left-hand
    sides take index expressions, not bare integers. `z0` is fresh in the statement's
    `scope` (`z0_1` when the statement already uses `z0`)."""
    args, extra = [], []
    for k, arg in enumerate(lhs.args):
        if isinstance(arg, Const):
            var = Var(scope.fresh(f"z{k}"))
            one = Const(arg.value + 1, ScalarType.INT32)
            extra.append(RangeConstraint(var, Const(arg.value, ScalarType.INT32), one))
            args.append(var)
        else:
            args.append(arg)
    if not extra:
        return lhs, where
    return Access(lhs.name, tuple(args)), (*where, *extra)


def _non_affine(expr: Expr) -> Expr | None:
    """The part of a read's subscript that `frontend.check` rejects on a left-hand side
    (a product of variables, `%` or `/` by a non-constant, a float), or None. As there,
    a tensor read, or a call or cast of one, is an opaque term: its gradient is a
    data-dependent scatter."""
    if isinstance(expr, Const):
        return expr if expr.dtype.is_float else None
    if isinstance(expr, (Var, Access)):
        return None
    if isinstance(expr, Unary) and expr.op is UnaryOp.NEG:
        return _non_affine(expr.operand)
    if not isinstance(expr, Binary):
        return None if not isinstance(expr, Unary) and has_read(expr) else expr
    if expr.op in (BinOp.ADD, BinOp.SUB):
        return _non_affine(expr.lhs) or _non_affine(expr.rhs)
    if expr.op is BinOp.MUL:
        if not (is_constant(expr.lhs) or is_constant(expr.rhs)):
            return expr
        return _non_affine(expr.lhs) or _non_affine(expr.rhs)
    divisor = expr.rhs
    if expr.op in (BinOp.DIV, BinOp.MOD) and isinstance(divisor, Const):
        if divisor.dtype.is_integral and divisor.value > 0:
            return _non_affine(expr.lhs)
    return expr


# ---------------------------------------------------------------- helpers


def wrt_inputs(
    ranged: RangedDef, wrt: Iterable[str] | None, action: str = "differentiate with respect to"
) -> tuple[str, ...]:
    """The float inputs named by `wrt` (None: every float input), in parameter order;
    a TCError for a name that is not an input or not a float (`action` says what)."""
    inputs = {t.name: t for t in ranged.checked.inputs}
    if wrt is None:
        return tuple(n for n, t in inputs.items() if t.dtype.is_float)
    names = tuple(wrt)
    for name in names:
        info = inputs.get(name)
        if info is None:
            raise TCError(f"wrt names '{name}', which is not an input of def '{ranged.name}'")
        if not info.dtype.is_float:
            raise TCError(
                f"cannot {action} '{name}': it is {info.dtype.value}, not a floating-point input"
            )
    return tuple(n for n in inputs if n in names)


def _zeros(ranged: RangedDef, zeros: Iterable[str]) -> frozenset[str]:
    names = frozenset(zeros)
    outputs = {t.name for t in ranged.checked.outputs}
    for name in sorted(names - outputs):
        raise TCError(f"zeros names '{name}', which is not an output of def '{ranged.name}'")
    return names


def _names_read(stmts: list[Stmt]) -> set[str]:
    names: set[str] = set()
    for s in stmts:
        for root in (s.rhs, *s.lhs.args):
            names |= {e.name for e in walk(root) if isinstance(e, Access)}
    return names


def _check_unique(params: tuple[Param, ...]) -> None:
    """Every name came from the supply, so a duplicate is a compiler bug."""
    seen: set[str] = set()
    for p in params:
        if p.name in seen:
            raise InternalError(f"the gradient def declares '{p.name}' twice")
        seen.add(p.name)


__all__ = ["grad_def"]
