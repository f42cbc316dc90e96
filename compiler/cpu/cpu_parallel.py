"""The CPU target's loop pass: which parallel loops run on threads.

Requires: a verified Function. Ensures: the same Function where a For keeps the kind
`parallel` only if no parallel loop and no Local encloses it; every other parallel loop
becomes `serial` (the loop IR marks what *may* run in parallel; this pass decides what
*does* on a CPU: one level of threads, no accumulator shared between threads). The
LLVM emitter outlines each remaining parallel loop (`cpu.llvm_parallel`); sibling
parallel loops (the nests of several statements, or loops isl split off) each become
one parallel region, run one after the other by the single native entry. A parallel
loop inside serial loops is one region per iteration of theirs: the grain rule keeps
small ones on the caller; `cpu.pack` builds such nests on purpose (the threads copy a
shared panel, then compute from it, once per reduction tile).

Example: `for i (parallel) { for j (parallel) { ... } }`  ==>  `for i (parallel) { for j
(serial) { ... } }`; a def of three statements keeps three top-level parallel loops
(unless `loops.fuse` made them one: softmax's three row statements run as one loop).
"""

from __future__ import annotations

from typing import Any

from compiler.loops import For, Function, Local, LoopKind, StmtMutator


def run(f: Function) -> Function:
    """`f` with only the outermost, accumulator-free parallel loops left parallel."""
    return _Outermost().mutate(f)


def parallel_loops(f: Function) -> list[For]:
    """The loops that `run(f)` leaves parallel, in program order."""
    found: list[For] = []

    class _Find(StmtMutator):
        def mutate_For(self, loop: For) -> For:
            if loop.kind is LoopKind.PARALLEL:
                found.append(loop)
            return self.generic_mutate(loop)

    _Find().mutate(run(f))
    return found


class _Outermost(StmtMutator):
    def __init__(self) -> None:
        self.depth = 0  # enclosing parallel loops and Locals

    def mutate_For(self, loop: For) -> Any:
        if loop.kind is not LoopKind.PARALLEL:
            return self.generic_mutate(loop)
        if self.depth:
            loop = For(loop.var, loop.lo, loop.hi, loop.step, loop.body, LoopKind.SERIAL)
        return self._inside(loop)

    def mutate_Local(self, local: Local) -> Any:
        return self._inside(local)

    def _inside(self, node: Any) -> Any:
        self.depth += 1
        try:
            return self.generic_mutate(node)
        finally:
            self.depth -= 1


__all__ = ["parallel_loops", "run"]
