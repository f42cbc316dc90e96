"""Which `Let`s the LLVM emitter computes with scalar libm calls only.

    exact_reads(body) -> the variables `body` reads where a value must round alike

A float comparison's operands and a `max`/`min` candidate are emitted under
`MathEmitter.scalar_math` (docs/internals/numerics.md): a gradient finds a
`max=`'s winners by recomputing the candidate and comparing it with the forward's
result, so the same value must have the same bits wherever it is computed. A
`where` let used there must round alike too: its value is emitted when the let is
bound, outside the comparison, where libmvec's vector variant (which may differ from
the scalar call in the last bit) would otherwise be taken. `exact_reads` is the set of
variables read in such operands anywhere in `body`, closed over the values of the
lets inside it (a let read by an exact let is exact too); the emitter binds a let
whose name is in it under `scalar_math`.
"""

from __future__ import annotations

from compiler.loops import Bin, Let, Max, Min, Node, var_names, walk


def exact_reads(body: Node) -> set[str]:
    """The variables read in float comparison operands and min/max candidates in `body`,
    with what the lets of `body` that are among them read (module doc)."""
    found: set[str] = set()
    lets: list[Let] = []
    for n in walk(body):
        if isinstance(n, Bin) and n.op.is_compare and n.a.dtype.is_float:
            found |= var_names(n.a, n.b)
        elif isinstance(n, (Min, Max)) and n.dtype.is_float:
            found |= var_names(n.a, n.b)
        elif isinstance(n, Let):
            lets.append(n)
    changed = True
    while changed:
        changed = False
        for let in lets:
            if let.var in found:
                new = var_names(let.value) - found
                if new:
                    found |= new
                    changed = True
    return found
