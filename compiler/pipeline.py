"""The compiler's table of contents: every pass, in order, in one place.

    text --parse--> Module --select--> Def --check--> CheckedDef --ranges--> RangedDef
         --gather--> RangedDef --schedule--> Schedule --lower--> loops.Function
         --codegen--> CompiledFunction
         (later: --grad--> before gather)

Each pass is a plain function of one argument (its input IR) returning a new IR
object; `run` calls any prefix of the list and lets a caller observe every
intermediate result (to print it with `--dump-after`, time it with `--time-passes`,
or verify it in tests).

Ordering:
- `check` before `ranges`: range inference relies on the normalised def (0-d tensors
  as `Access`, index vs reduction variables sorted out).
- `ranges` before everything else: later passes (autodiff, the interpreter, isl
  statement building) read the explicit `where` ranges it writes back.
- `gather` after `ranges` (and after autodiff, which produces the scatters it
  rewrites), before scheduling: it reads the explicit ranges, and everything after it
  may assume one writer per output element except in `gather.remaining_scatters`.
- `schedule` after `gather`: it marks a statement's outer loops parallel only where
  its left-hand side is injective, so the fewer scatters remain, the more runs parallel.
- `lower` after `schedule`: isl builds the loops from the schedule's bands and marks.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from compiler.frontend.diagnostics import OptionsError


@dataclass(frozen=True, slots=True)
class Pass:
    name: str
    run: Callable[[Any], Any]
    doc: str


def _parse(source: tuple[str, str]) -> Any:
    from compiler.frontend.parser import parse

    text, filename = source
    return parse(text, filename)


def _check(definition: Any) -> Any:
    from compiler.frontend.check import check_def

    return check_def(definition)


def _ranges(checked: Any) -> Any:
    from compiler.poly.ranges import infer_ranges

    return infer_ranges(checked)


def _gather(ranged: Any) -> Any:
    from compiler.poly.gather import scatter_to_gather

    return scatter_to_gather(ranged)


def _schedule(ranged: Any) -> Any:
    from compiler.poly.schedule import schedule

    return schedule(ranged)


def _lower(sched: Any) -> Any:
    from compiler.poly.astgen import lower_schedule

    return lower_schedule(sched).function


def _codegen(function: Any) -> Any:
    from compiler.codegen.runtime import compile_function

    return compile_function(function)


# The pass list. `select` is filled in by `run` (it needs the entry-point name).
PASSES: tuple[Pass, ...] = (
    Pass("parse", _parse, "source text -> Module (lexer + recursive-descent parser)"),
    Pass("select", lambda module: module, "Module -> the entry-point Def"),
    Pass("check", _check, "Def -> CheckedDef (names, types, reductions, builtins)"),
    Pass("ranges", _ranges, "CheckedDef -> RangedDef (TC range inference with isl)"),
    # Ordering: gather after ranges (see the module doc).
    Pass("gather", _gather, "RangedDef -> RangedDef (affine scatters rewritten as gathers)"),
    # Ordering: schedule after gather, lower after schedule (see the module doc).
    Pass("schedule", _schedule, "RangedDef -> Schedule (nests, bands, parallel marks)"),
    Pass("lower", _lower, "Schedule -> loops.Function (isl AST build -> loop IR)"),
    Pass("codegen", _codegen, "loops.Function -> CompiledFunction (LLVM IR, O3, JIT)"),
)
PASS_NAMES: tuple[str, ...] = tuple(p.name for p in PASSES)

Observer = Callable[[str, Any, float], None]


def run(
    text: str,
    name: str | None = None,
    *,
    filename: str = "<string>",
    upto: str = PASS_NAMES[-1],
    observe: Observer | None = None,
) -> Any:
    """Run the passes from `parse` up to and including `upto`; return its result.

    `observe(pass_name, result, seconds)` is called after every pass.
    """
    if upto not in PASS_NAMES:
        raise OptionsError(f"unknown pass '{upto}'; passes are: {', '.join(PASS_NAMES)}")
    value: Any = (text, filename)
    for p in PASSES:
        start = time.perf_counter()
        value = value.get(name) if p.name == "select" else p.run(value)
        if observe is not None:
            observe(p.name, value, time.perf_counter() - start)
        if p.name == upto:
            break
    return value
