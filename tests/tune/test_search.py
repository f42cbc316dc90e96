"""The search space (derived from the Options fields) and the evolutionary search."""

from __future__ import annotations

import dataclasses
import random
from dataclasses import dataclass

from compiler.options import Options
from compiler.tune.search import Evolution
from compiler.tune.space import (
    Space,
    SpaceContext,
    options_from_json,
    options_to_json,
)

CTX = SpaceContext(lhs_vars=("m", "n"), depth=3, max_extent=100, cores=4)


def test_every_options_field_is_searched() -> None:
    space = Space.for_options(Options, CTX)
    assert space.searched == tuple(f.name for f in dataclasses.fields(Options))
    assert space.fixed == ()


def test_samples_are_valid_options_and_cover_the_choices() -> None:
    space = Space.for_options(Options, CTX)
    rng = random.Random(0)
    samples = [space.sample(rng) for _ in range(300)]
    assert all(isinstance(s, Options) for s in samples)  # construction validated each
    assert {s.innermost for s in samples} == {"auto", None, "m", "n"}
    assert {s.threads for s in samples} == {None, 1, 2, 4}
    tiles = [s.tile for s in samples if s.tile]
    assert tiles and all(len(t) == 3 and max(t) <= CTX.max_extent for t in tiles)
    sizes = {x for t in tiles for x in t}
    assert {6, 12, 24, 48, 96} <= sizes  # not only powers of two
    assert None in {s.tile for s in samples} and () in {s.tile for s in samples}


def test_a_field_without_an_entry_stays_at_its_default() -> None:
    @dataclass(frozen=True)
    class Options:  # the same name as the CPU Options: its entries apply
        threads: int | None = None
        vector_width: int = 8  # no entry: fixed

    space = Space.for_options(Options, CTX)
    assert space.fixed == ("vector_width",)
    rng = random.Random(1)
    samples = [space.mutate(space.sample(rng), rng) for _ in range(50)]
    assert {s.vector_width for s in samples} == {8}
    assert len({s.threads for s in samples}) > 1


def test_options_json_round_trip() -> None:
    o = Options(threads=2, innermost="n", unroll=8, block=None, tile=(16, 1, 64))
    assert options_from_json(Options, options_to_json(o)) == o
    assert options_to_json(o)["tile"] == [16, 1, 64]


def _drive(seed: int) -> list[Options]:
    """Three generations with times that depend only on the candidates."""
    evo = Evolution(Space.for_options(Options, CTX), seed)
    tried = evo.first(Options(), 6)
    for gen in range(3):
        for o in tried[-6:]:
            evo.record(o, None if o.threads == 2 else float(hash(repr(o)) % 997))
        if gen < 2:
            tried += evo.propose(6)
    return tried


def test_search_is_deterministic_under_a_seed() -> None:
    a, b, c = _drive(0), _drive(0), _drive(1)
    assert a == b
    assert a != c
    assert a[0] == Options() and len(set(a)) == len(a) == 18  # the default first, no repeats


def test_failed_candidates_are_never_parents() -> None:
    evo = Evolution(Space.for_options(Options, CTX), 3, restart=0.0)
    fast_but_failed = Options(threads=1, innermost="m", unroll=16, block=8, tile=(64, 64, 64))
    evo.record(Options(), 5.0)
    evo.record(fast_but_failed, None)
    assert [t[2] for t in evo.timed] == [Options()]
    children = evo.propose(20)
    # every child is one or two mutations away from the only parent, the default
    for child in children:
        changed = [
            f.name
            for f in dataclasses.fields(Options)
            if getattr(child, f.name) != getattr(Options(), f.name)
        ]
        assert 1 <= len(changed) <= 2
