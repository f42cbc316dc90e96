"""The compiler's table of contents: every pass, in order, in one place.

    text --parse--> Module --select--> Def --check--> CheckedDef --ranges--> RangedDef
         --gather--> RangedDef
         (later: --grad--> before gather, --schedule--> --astgen--> loop IR --codegen-->)

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


# The pass list. `select` is filled in by `run` (it needs the entry-point name).
PASSES: tuple[Pass, ...] = (
    Pass("parse", _parse, "source text -> Module (lexer + recursive-descent parser)"),
    Pass("select", lambda module: module, "Module -> the entry-point Def"),
    Pass("check", _check, "Def -> CheckedDef (names, types, reductions, builtins)"),
    Pass("ranges", _ranges, "CheckedDef -> RangedDef (TC range inference with isl)"),
    # Ordering: gather after ranges (see the module doc).
    Pass("gather", _gather, "RangedDef -> RangedDef (affine scatters rewritten as gathers)"),
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
