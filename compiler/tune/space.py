"""The search space: one entry per field of a target's Options dataclass.

    ctx = SpaceContext.of(ranged, sizes)           # what the def offers: variables, depth, sizes
    space = Space.for_options(Options, ctx)        # one FieldSpace per dataclass field
    opts = space.sample(rng)                       # a random Options
    opts = space.mutate(opts, rng)                 # change one or two fields
    opts = space.crossover(a, b, rng)              # each field from either parent

The space is derived from `dataclasses.fields(options_type)`: every field gets the entry
`FIELDS[options_type.__name__][field]` when there is one, and is left at its default
(`Fixed`) otherwise, so a field added to Options is searched as soon as it has an entry
here (and never breaks the tuner before). `Space.fixed` names the fields left alone.

Entries (CPU `Options`, see `compiler/options.py` for what each field means):

- `threads`: None (one per core) or 1, 2, 4, ... up to the core count;
- `innermost`: "auto" (the model), None (the literal order), or a left-hand-side variable;
- `unroll`, `block`: None (the model) or a factor from 1 to 16;
- `tile`: None (the model), () (no tiling) or one size per loop of the deepest nest,
  each 1 (untiled) or a size up to the largest size parameter (and 512): powers of two
  and their 1.5-multiples (4, 6, 8, 12, 16, 24, ...), and the size parameters' own
  values (a tile of 14 over a row of 14, of 196 over a merged 14 x 14 map);
- `fuse`: True or False (loop fusion, `compiler/loops/fuse.py`).
- `register_tile`: None (the model), 1 (off) or 8, 16, 32 lanes;
- `gather`: "auto" or "partial" (every reduction scatter with plain variables as a
  partial scatter); not "full", whose gathers of strided scatters cost seconds of isl.
- `vector_bits`: None (the host's) or 128, 256, 512: the vector width the CPU model
  sizes its register tiles for (other tile shapes than the host's model picks).
- `merge`: True or False (loop merging, `compiler/cpu/merge.py`).
- `factor`: True or False (a scatter's contraction into a scratch tensor,
  `compiler/cpu/factor.py`).
- `per_statement`: in a def of two or more statements, `()` half of the time, else
  entries for one or two statements, each setting one or two of the per-statement
  fields (`compiler.options.PER_STATEMENT`) drawn from their entries here with that
  statement's variables and depth (`PerStatement`); a mutation changes one field of
  an entry, or adds or drops an entry.

A field without an entry whose default is a bool is searched over True and False (a
switch added to Options enters the space at once); any other is left at its default.

Every value an entry produces is valid for its field (Options' own checks pass), so a
sampled candidate never fails at construction; whether it helps is for the timing.
"""

from __future__ import annotations

import dataclasses
import os
import random
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from compiler.options import AUTO, PER_STATEMENT, Options


@dataclass(frozen=True)
class SpaceContext:
    """What the def and its sizes offer the space: variable names, nest depth, sizes."""

    lhs_vars: tuple[str, ...] = ()
    depth: int = 1
    max_extent: int = 1
    cores: int = 1
    extents: tuple[int, ...] = ()  # the size parameters' values
    # per statement: (its left-hand-side variables, its nest depth)
    statements: tuple[tuple[tuple[str, ...], int], ...] = ()

    @staticmethod
    def of(ranged: Any, sizes: Mapping[str, int], cores: int | None = None) -> SpaceContext:
        stmts = ranged.checked.stmts
        lhs: list[str] = []
        for facts in stmts:
            lhs += [v for v in facts.index_vars if v not in lhs]
        depths = [max(len(f.index_vars) + len(f.reduction_vars), 1) for f in stmts]
        return SpaceContext(
            lhs_vars=tuple(lhs),
            depth=max(depths, default=1),
            max_extent=max((int(v) for v in sizes.values()), default=1),
            cores=cores or os.cpu_count() or 1,
            extents=tuple(sorted({int(v) for v in sizes.values()})),
            statements=tuple((tuple(f.index_vars), d) for f, d in zip(stmts, depths, strict=True)),
        )

    def statement(self, k: int) -> SpaceContext:
        """The context of statement `k` alone (its variables and depth)."""
        lhs, depth = self.statements[k]
        return dataclasses.replace(self, lhs_vars=lhs, depth=depth, statements=())


class FieldSpace(Protocol):
    """How to draw and perturb one field's value."""

    def sample(self, rng: random.Random, ctx: SpaceContext) -> Any: ...

    def mutate(self, value: Any, rng: random.Random, ctx: SpaceContext) -> Any: ...


@dataclass(frozen=True)
class Choice:
    """A field with a finite list of values (from the context); a mutation moves to a
    neighbour in the list half of the time (factors are ordered), else anywhere."""

    values: Callable[[SpaceContext], tuple[Any, ...]]

    def sample(self, rng: random.Random, ctx: SpaceContext) -> Any:
        return rng.choice(self.values(ctx))

    def mutate(self, value: Any, rng: random.Random, ctx: SpaceContext) -> Any:
        values = self.values(ctx)
        if value in values and len(values) > 1 and rng.random() < 0.5:
            i = values.index(value) + rng.choice((-1, 1))
            return values[min(max(i, 0), len(values) - 1)]
        return rng.choice(values)


@dataclass(frozen=True)
class Fixed:
    """A field the tuner leaves at its default."""

    default: Any

    def sample(self, rng: random.Random, ctx: SpaceContext) -> Any:
        return self.default

    def mutate(self, value: Any, rng: random.Random, ctx: SpaceContext) -> Any:
        return value


def _powers(limit: int, start: int = 2) -> tuple[int, ...]:
    out, p = [], start
    while p <= limit:
        out.append(p)
        p *= 2
    return tuple(out)


def tile_sizes(ctx: SpaceContext, limit: int = 512) -> tuple[int, ...]:
    """1, then 4, 6, 8, 12, 16, 24, ... up to the largest size (and `limit`), and every
    size parameter's value in that range."""
    top = min(max(ctx.max_extent, 2), limit)
    sizes = {1, *(v for v in ctx.extents if 2 <= v <= top)}
    for p in _powers(top, 4):
        sizes.add(p)
        if p * 3 // 2 <= top:
            sizes.add(p * 3 // 2)
    return tuple(sorted(sizes))


@dataclass(frozen=True)
class TileSpace:
    """`tile`: None, (), or one size per loop (1 untiled, else one of `tile_sizes`)."""

    def sizes(self, ctx: SpaceContext) -> tuple[int, ...]:
        return tile_sizes(ctx)

    def sample(self, rng: random.Random, ctx: SpaceContext) -> Any:
        r = rng.random()
        if r < 0.2:
            return None
        if r < 0.35:
            return ()
        return tuple(rng.choice(self.sizes(ctx)) for _ in range(ctx.depth))

    def mutate(self, value: Any, rng: random.Random, ctx: SpaceContext) -> Any:
        if not value or rng.random() < 0.2:
            return self.sample(rng, ctx)
        tile = list(value) + [1] * (ctx.depth - len(value))
        i = rng.randrange(len(tile))
        sizes = self.sizes(ctx)
        j = sizes.index(tile[i]) if tile[i] in sizes else 0
        tile[i] = sizes[min(max(j + rng.choice((-1, 1)), 0), len(sizes) - 1)]
        return tuple(tile)


def _threads(ctx: SpaceContext) -> tuple[Any, ...]:
    return (None, 1, *_powers(ctx.cores))


def _innermost(ctx: SpaceContext) -> tuple[Any, ...]:
    return (AUTO, None, *ctx.lhs_vars)


_FACTORS = (None, 1, 2, 4, 8, 16)


@dataclass(frozen=True)
class PerStatement:
    """`per_statement`: entries `(k, Options(...))` for some statements of the def, each
    setting a few of `PER_STATEMENT`'s fields from their own entries in `FIELDS` (with
    statement k's context); sorted by k, so equal choices are equal Options."""

    share: float = 0.5  # of samples with entries (the rest: none)

    def _fields(self, ctx: SpaceContext) -> tuple[str, ...]:
        known = FIELDS["Options"]
        return tuple(f for f in PER_STATEMENT if f in known) if len(ctx.statements) > 1 else ()

    def _entry(self, k: int, rng: random.Random, ctx: SpaceContext, base: Any = None) -> Any:
        names = self._fields(ctx)
        sub = ctx.statement(k)
        chosen = rng.sample(names, k=min(len(names), rng.choice((1, 1, 2))))
        changes = {n: FIELDS["Options"][n].sample(rng, sub) for n in chosen}
        return Options(**changes) if base is None else dataclasses.replace(base, **changes)

    def sample(self, rng: random.Random, ctx: SpaceContext) -> Any:
        if not self._fields(ctx) or rng.random() >= self.share:
            return ()
        n = len(ctx.statements)
        picked = sorted(rng.sample(range(n), k=min(n, rng.choice((1, 1, 2)))))
        return tuple((k, self._entry(k, rng, ctx)) for k in picked)

    def mutate(self, value: Any, rng: random.Random, ctx: SpaceContext) -> Any:
        if not self._fields(ctx):
            return ()
        if not value:
            return self.sample(rng, ctx) or self.sample(rng, ctx)
        entries = dict(value)
        r = rng.random()
        free = [k for k in range(len(ctx.statements)) if k not in entries]
        if r < 0.25:
            del entries[rng.choice(sorted(entries))]
        elif r < 0.5 and free:
            k = rng.choice(free)
            entries[k] = self._entry(k, rng, ctx)
        else:
            k = rng.choice(sorted(entries))
            entries[k] = self._entry(k, rng, ctx, entries[k])
        return tuple(sorted(entries.items(), key=lambda e: e[0]))


# Options type name -> field name -> its space. Add an entry when a field is added.
FIELDS: dict[str, dict[str, FieldSpace]] = {
    "Options": {
        "threads": Choice(_threads),
        "innermost": Choice(_innermost),
        "unroll": Choice(lambda ctx: _FACTORS),
        "block": Choice(lambda ctx: _FACTORS[:5]),
        "tile": TileSpace(),
        "register_tile": Choice(lambda ctx: (None, 1, 8, 16, 32)),
        "fuse": Choice(lambda ctx: (True, False)),
        # not "full": a strided scatter's full gather can keep isl busy for seconds
        "gather": Choice(lambda ctx: (AUTO, "partial")),
        "vector_bits": Choice(lambda ctx: (None, 128, 256, 512)),
        "merge": Choice(lambda ctx: (True, False)),
        "factor": Choice(lambda ctx: (True, False)),
        "per_statement": PerStatement(),
    },
}
_SWITCH = Choice(lambda ctx: (True, False))  # a bool field without an entry


@dataclass(frozen=True)
class Space:
    """The product of one FieldSpace per field of `options_type`."""

    options_type: type
    fields: tuple[tuple[str, FieldSpace], ...]
    ctx: SpaceContext

    @staticmethod
    def for_options(options_type: type, ctx: SpaceContext) -> Space:
        known = FIELDS.get(options_type.__name__, {})
        default = options_type()
        fields = tuple(
            (f.name, known.get(f.name) or _unknown(getattr(default, f.name)))
            for f in dataclasses.fields(options_type)
        )
        return Space(options_type, fields, ctx)

    @property
    def fixed(self) -> tuple[str, ...]:
        """The fields the search leaves at their defaults (no entry in FIELDS)."""
        return tuple(name for name, s in self.fields if isinstance(s, Fixed))

    @property
    def searched(self) -> tuple[str, ...]:
        return tuple(name for name, s in self.fields if not isinstance(s, Fixed))

    def sample(self, rng: random.Random) -> Any:
        return self.options_type(**{n: s.sample(rng, self.ctx) for n, s in self.fields})

    def mutate(self, options: Any, rng: random.Random) -> Any:
        names = self.searched
        if not names:
            return options
        changes = {}
        for name in rng.sample(names, k=min(len(names), rng.choice((1, 1, 2)))):
            space = dict(self.fields)[name]
            changes[name] = space.mutate(getattr(options, name), rng, self.ctx)
        return dataclasses.replace(options, **changes)

    def crossover(self, a: Any, b: Any, rng: random.Random) -> Any:
        return self.options_type(
            **{n: getattr(a if rng.random() < 0.5 else b, n) for n, _ in self.fields}
        )


def _unknown(default: Any) -> FieldSpace:
    return _SWITCH if isinstance(default, bool) else Fixed(default)


def _to_json(value: Any) -> Any:
    if dataclasses.is_dataclass(value):
        return options_to_json(value)
    if isinstance(value, tuple):
        return [_to_json(v) for v in value]
    return value


def options_to_json(options: Any) -> dict[str, Any]:
    """The fields of an Options value as JSON data (tuples as lists; `per_statement`'s
    entries as `[k, {fields}]`)."""
    return {f.name: _to_json(getattr(options, f.name)) for f in dataclasses.fields(options)}


def _from_json(options_type: type, value: Any) -> Any:
    if isinstance(value, dict):
        return options_from_json(options_type, value)
    if isinstance(value, list):
        return tuple(_from_json(options_type, v) for v in value)
    return value


def options_from_json(options_type: type, data: Mapping[str, Any]) -> Any:
    """The inverse of `options_to_json`; a TypeError/ValueError (OptionsError) when the
    data does not fit `options_type` (a stale entry: a field renamed or removed)."""
    names = {f.name for f in dataclasses.fields(options_type)}
    unknown = set(data) - names
    if unknown:
        raise TypeError(f"unknown Options field(s): {', '.join(sorted(unknown))}")
    return options_type(**{k: _from_json(options_type, v) for k, v in data.items()})


def describe(options: Any) -> str:
    """`Options(...)` with the fields that differ from the default, for reports."""
    default = type(options)()
    parts = [
        f"{f.name}={_describe(getattr(options, f.name))}"
        for f in dataclasses.fields(options)
        if getattr(options, f.name) != getattr(default, f.name)
    ]
    return f"{type(options).__name__}({', '.join(parts)})"


def _describe(value: Any) -> str:
    if dataclasses.is_dataclass(value):
        return describe(value)
    if isinstance(value, tuple) and value and isinstance(value[0], tuple):
        return "(" + ", ".join(f"({k}, {_describe(o)})" for k, o in value) + ",)"
    return repr(value)


__all__ = [
    "FIELDS",
    "Choice",
    "FieldSpace",
    "Fixed",
    "PerStatement",
    "Space",
    "SpaceContext",
    "TileSpace",
    "describe",
    "tile_sizes",
    "options_from_json",
    "options_to_json",
]
