"""The fuzzer's `llvm-rand` target draws its Options from the autotuner's whole space
(`compiler/tune/space.py`): every Options field, the recently added ones included,
takes more than one value over the seeds (a field the space leaves fixed fails here)."""

from __future__ import annotations

import dataclasses

from compiler.options import Options
from tools import fuzz_run
from tools.fuzz_gen import generate


def test_every_options_field_is_drawn_with_several_values() -> None:
    p = next(q for q in (generate(s) for s in range(50)) if len(q.stmts) >= 2)
    kernel, _ = fuzz_run.compile_for(p, "llvm", 0)
    drawn = [fuzz_run._options("llvm-rand", kernel.ranged, p, seed) for seed in range(200)]
    for f in dataclasses.fields(Options):
        values = {repr(getattr(o, f.name)) for o in drawn}
        assert len(values) >= 2, f"Options.{f.name} is never varied by llvm-rand: {values}"
