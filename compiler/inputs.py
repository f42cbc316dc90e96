"""Random inputs for a def, as `tcc run` and `tcc gradcheck` draw them.

    random_inputs(ranged, shapes, rng, *, positive=(), ranges={}, float64=False)
        -> {input name: array}
    index_extents(ranged, shapes) -> {int input: the extent it indexes}

Float inputs are standard normal (`positive`: uniform in [0.5, 2); `ranges[name] =
(lo, hi)`: uniform in [lo, hi)). An integer input used as a subscript
(`L(m, int32(Codes(n, m)))`, `A(idx(i))`) is drawn uniformly over the extent it
indexes (the smallest one when it indexes several); other integer inputs uniformly
in [0, 10); `ranges` overrides both. Shapes are the inputs' shapes; output extents
come from range inference at the sizes they bind.
"""

from __future__ import annotations

from collections.abc import Collection, Iterator, Mapping

import numpy as np

from compiler.diagnostics import OptionsError
from compiler.frontend.ast import Access, Cast, Exists, Expr, Let, RangeConstraint
from compiler.frontend.checked import RangedDef
from compiler.frontend.scopes import walk
from compiler.interp.expr import NP_DTYPE
from compiler.shapes import bind_sizes, output_shapes

POSITIVE = (0.5, 2.0)
SMALL_INTS = (0, 10)


def random_inputs(
    ranged: RangedDef,
    shapes: Mapping[str, tuple[int, ...]],
    rng: np.random.Generator,
    *,
    positive: Collection[str] = (),
    ranges: Mapping[str, tuple[float, float]] | None = None,
    float64: bool = False,
) -> dict[str, np.ndarray]:
    """One array per input of `ranged`, of the given shapes (see the module doc)."""
    ranges = dict(ranges or {})
    inputs = ranged.checked.inputs
    names = {t.name for t in inputs}
    for name in (*positive, *ranges):
        if name not in names:
            raise OptionsError(
                f"'{name}' is not an input of def '{ranged.name}'",
                hint=f"its inputs are {', '.join(sorted(names)) or 'none'}",
            )
    for name, (lo, hi) in ranges.items():
        if not lo < hi:
            raise OptionsError(f"empty range {lo}:{hi} for '{name}': expected lo < hi")
    extents = index_extents(ranged, shapes)
    arrays: dict[str, np.ndarray] = {}
    for t in inputs:
        shape = tuple(shapes[t.name])
        if t.dtype.is_float:
            dtype = np.float64 if float64 else NP_DTYPE[t.dtype]
            if t.name in ranges:
                value = rng.uniform(*ranges[t.name], size=shape)
            elif t.name in positive:
                value = rng.uniform(*POSITIVE, size=shape)
            else:
                value = rng.standard_normal(shape)
            arrays[t.name] = np.asarray(value, dtype=dtype)
        else:
            if t.name in positive:
                lo, hi = 1, SMALL_INTS[1]
            else:
                lo, hi = ranges.get(t.name, (0, extents.get(t.name, SMALL_INTS[1])))
            lo, hi = int(np.ceil(lo)), int(np.ceil(hi))
            if hi <= lo:  # indexes an empty extent: any value is out of range
                hi = lo + 1
            info = np.iinfo(NP_DTYPE[t.dtype])
            lo, hi = max(lo, int(info.min)), min(hi, int(info.max) + 1)
            arrays[t.name] = rng.integers(lo, hi, size=shape).astype(NP_DTYPE[t.dtype])
    return arrays


def index_extents(ranged: RangedDef, shapes: Mapping[str, tuple[int, ...]]) -> dict[str, int]:
    """For each integer input that is a whole subscript (possibly cast), the smallest
    extent it indexes."""
    ints = {t.name for t in ranged.checked.inputs if not t.dtype.is_float}
    if not ints:
        return {}
    all_shapes = dict(shapes)
    all_shapes.update(output_shapes(ranged, bind_sizes(ranged, shapes)))
    extents: dict[str, int] = {}
    for access in _accesses(ranged):
        shape = all_shapes.get(access.name)
        if shape is None or len(shape) != len(access.args):
            continue
        for arg, extent in zip(access.args, shape, strict=True):
            inner = _uncast(arg)
            if isinstance(inner, Access) and inner.name in ints:
                extents[inner.name] = min(extents.get(inner.name, extent), int(extent))
    return extents


def _uncast(e: Expr) -> Expr:
    while isinstance(e, Cast):
        e = e.operand
    return e


def _accesses(ranged: RangedDef) -> Iterator[Access]:
    for facts in ranged.checked.stmts:
        stmt = facts.stmt
        roots: list[Expr] = [stmt.lhs, stmt.rhs]
        for c in stmt.where:
            if isinstance(c, Let):
                roots.append(c.value)
            elif isinstance(c, Exists):
                roots.append(c.expr)
            elif isinstance(c, RangeConstraint):
                roots.extend((c.expr, c.lo, c.hi))
        for root in roots:
            yield from (n for n in walk(root) if isinstance(n, Access))


__all__ = ["index_extents", "random_inputs"]
