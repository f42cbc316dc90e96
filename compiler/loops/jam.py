"""Unroll-and-jam on the loop IR: a pure `Stmt -> Stmt` transform.

Requires: a loop nest of one statement whose instances for distinct values of the
jammed variable either write distinct elements, or add to the same element in the
variable's order with nothing else reading that element (what `cpu.cpu_model`
checks before it asks for a jam: an injective left-hand side, no reads of the output).
Ensures:  `unroll_and_jam(stmt, var, factor)` runs the same instances: every loop over
`var` becomes a main loop with step `factor * step`, whose body holds `factor` copies
of the original body (`var`, `var + step`, ...) pushed down through the inner loops
whose bounds do not use `var` (and through blocks and ifs that do not, and through a
Local accumulator, which becomes one Local per copy: `acc_<var>0`, `acc_<var>1`, ...),
followed by a remainder loop with the original body. Each element still gets its contributions in
the same order. The loop kind (parallel) is kept on both loops.

Worked example, factor 2:

    for m in 0:M parallel                      for m in 0:(M // 2) * 2 step 2 parallel
      for k in 0:K                               for k in 0:K
        for n in 0:N                  ==>          for n in 0:N
          C[m,n] = C[m,n] + A[m,k]*B[k,n]            C[m,n] = C[m,n] + A[m,k]*B[k,n]
                                                     C[m+1,n] = C[m+1,n] + A[m+1,k]*B[k,n]
                                               for m in (M // 2) * 2:M parallel
                                                 ... the original body
"""

from __future__ import annotations

import dataclasses

from compiler import loops as L

I64 = L.DType.INT64


def unroll_and_jam(stmt: L.Stmt, var: str, factor: int) -> L.Stmt:
    """`stmt` with every loop over `var` unrolled by `factor` and jammed (module doc)."""
    if factor <= 1:
        return stmt
    return _Jammer(var, factor).mutate(stmt)


def jam_copies(stmt: L.Stmt, var: str, offsets: list[int]) -> L.Stmt:
    """`stmt` for `var + o`, each `o` of `offsets`, jammed as the main loop's body is
    (copies pushed down through the loops, blocks, ifs and Locals that allow it). The
    caller guarantees what the module doc requires of the copies."""
    return _Jammer(var, len(offsets))._jam(stmt, offsets, [{} for _ in offsets])


class _Jammer(L.Mutator):
    def __init__(self, var: str, factor: int) -> None:
        self.var = var
        self.factor = factor

    def mutate_For(self, node: L.For) -> L.Stmt:
        if node.var != self.var:
            return self.generic_mutate(node)
        u, s = self.factor, node.step
        zero = node.lo == L.Const(0, I64)
        extent = node.hi if zero else L.Bin(L.BinOp.SUB, node.hi, node.lo)
        if s != 1:
            extent = L.FloorDiv(L.Bin(L.BinOp.ADD, extent, L.Const(s - 1, I64)), L.Const(s, I64))
        trips = L.Max(extent, L.Const(0, I64))
        blocks = L.Bin(L.BinOp.MUL, L.FloorDiv(trips, L.Const(u, I64)), L.Const(u * s, I64))
        split = blocks if zero else L.Bin(L.BinOp.ADD, node.lo, blocks)
        offsets = [k * s for k in range(u)]
        renames: list[dict[str, str]] = [{} for _ in offsets]
        body = self._jam(node.body, offsets, renames)
        main = dataclasses.replace(node, hi=split, step=u * s, body=body)
        rest = dataclasses.replace(node, lo=split)
        return L.Block((main, rest))

    def _jam(self, s: L.Stmt, offsets: list[int], renames: list[dict[str, str]]) -> L.Stmt:
        if isinstance(s, L.For) and not self._uses(s.lo, s.hi):
            return dataclasses.replace(s, body=self._jam(s.body, offsets, renames))
        if isinstance(s, L.Block):
            return L.Block(tuple(self._jam(c, offsets, renames) for c in s.stmts))
        if isinstance(s, L.If) and not self._uses(s.cond):
            then = self._jam(s.then, offsets, renames)
            otherwise = None if s.otherwise is None else self._jam(s.otherwise, offsets, renames)
            return L.If(s.cond, then, otherwise)
        if isinstance(s, L.Local):  # one accumulator per copy (register-form jams)
            names = [f"{s.var}_{self.var}{k}" for k in range(len(offsets))]
            inner = [{**r, s.var: n} for r, n in zip(renames, names, strict=True)]
            body = self._jam(s.body, offsets, inner)
            for k in reversed(range(len(offsets))):
                init = _shift(rename_locals(s.init, renames[k]), self.var, offsets[k])
                body = L.Local(names[k], s.dtype, init, body)
            return body
        return L.Block(
            tuple(
                _shift(rename_locals(s, r), self.var, k)
                for k, r in zip(offsets, renames, strict=True)
            )
        )

    def _uses(self, *exprs: L.Expr) -> bool:
        found: list[bool] = []
        var = self.var

        class _Find(L.Visitor):
            def visit_VarRef(self, node: L.VarRef) -> None:
                if node.name == var:
                    found.append(True)

        for e in exprs:
            _Find().visit(e)
        return bool(found)


def rename_locals(s: L.Node, names: dict[str, str]) -> L.Node:
    """`s` with the Locals in `names` renamed (their reads and assignments)."""
    if not names:
        return s

    class _Rename(L.Mutator):
        def mutate_VarRef(self, node: L.VarRef) -> L.Expr:
            return dataclasses.replace(node, name=names[node.name]) if node.name in names else node

        def mutate_Assign(self, node: L.Assign) -> L.Stmt:
            node = self.generic_mutate(node)
            return dataclasses.replace(node, var=names.get(node.var, node.var))

    return _Rename().mutate(s)


def _shift(s: L.Stmt, var: str, offset: int) -> L.Stmt:
    """`s` with `var` replaced by `var + offset`."""
    if offset == 0:
        return s
    shifted = L.Bin(L.BinOp.ADD, L.VarRef(var), L.Const(offset, I64))

    class _Shift(L.Mutator):
        def mutate_VarRef(self, node: L.VarRef) -> L.Expr:
            return shifted if node.name == var else node

    return _Shift().mutate(s)


__all__ = ["jam_copies", "rename_locals", "unroll_and_jam"]
