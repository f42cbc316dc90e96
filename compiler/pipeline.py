"""The compiler's driver: every pass, in order, in one place; `run` runs them.

    text --parse--> Module --select--> Def --check--> CheckedDef --ranges--> RangedDef
         --grad--> RangedDef (the gradient def; only when asked) --gather--> RangedDef
         --schedule--> Schedule --lower--> Lowered (loops.Function, checks, notes)
         --codegen--> NativeProgram (LLVM, JIT; what `Kernel` runs on the CPU)

    run(text, name=None, *, upto="codegen", grad=False, options=None, ...) -> result
    run_from(ir, ctx, start="gather", upto="lower")                        -> result

Every pass is a function `(ir, ctx) -> ir` of its input IR and the `PassContext`
(the options, the target, the compilation's name supply, the diagnostics collected
so far). `run` calls a prefix of the list; `run_from` goes on from an intermediate
result (a `Kernel` holds the `RangedDef` and lowers it later; a gradient is derived
from the forward's `RangedDef`). `observe(pass_name, result, seconds)` sees every
intermediate result: the CLI prints them (`tcc compile --dump-after PASS|all`) and
times them (`--time-passes`). Nothing else chains passes by hand.

The gradient is a pass: autodiff's `Def` is checked and ranged in memory (never
printed and re-parsed); its statements carry the spans of the forward statements
they come from, so its diagnostics point into the user's source.

Ordering:
- `check` before `ranges`: range inference relies on the normalised def (0-d tensors
  as `Access`, index vs reduction variables sorted out).
- `ranges` before everything else: later passes (autodiff, the interpreter, isl
  statement building) read the explicit `where` ranges it writes back.
- `grad` after `ranges` (autodiff needs no isl: the ranges are explicit), before
  `gather`: it produces the scatters (`I_grad(h + kh) += ...`) that gather rewrites.
- `gather` after `ranges` and `grad`, before scheduling: it reads the explicit
  ranges, and everything after it may assume one writer per output element except in
  `gather.remaining_scatters`.
- `schedule` after `gather`: it marks a statement's outer loops parallel only where
  its left-hand side is injective, so the fewer scatters remain, the more runs parallel;
  and it pads the gathers that pass leaves clamped (`cpu.pad`: scratch copies of the
  loops, so the def that `--grad` prints and autodiff differentiates has no pads).
- `lower` after `schedule`: isl builds the loops from the schedule's bands and marks.
"""

from __future__ import annotations

import threading
import time
import warnings
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from compiler.diagnostics import Diagnostic, OptionsError
from compiler.names import NameSupply
from compiler.options import Options


@dataclass
class PassContext:
    """What one compilation's passes share. Mutable on purpose: the name supply and
    the diagnostics grow as passes run; one context per compilation, never shared."""

    options: Options = field(default_factory=Options)
    target: str = "llvm"
    filename: str = "<string>"
    entry: str | None = None  # the def to compile (None: the only one)
    grad: bool = False  # run the `grad` pass (else it passes its input through)
    wrt: tuple[str, ...] | None = None  # the inputs to differentiate (None: every float)
    zeros: tuple[str, ...] = ()  # outputs whose cotangent is zero (no `<out>_grad` param)
    order: int = 1  # with grad: how many times (2: the gradient of the gradient)
    jvp: bool = False  # the `grad` pass then gives the tangent def (forward mode)
    names: NameSupply | None = None  # seeded with the def's names by `select`
    diagnostics: list[Diagnostic] = field(default_factory=list)  # warnings, in order

    def supply(self, definition: Any) -> NameSupply:
        """The name supply, seeded with `definition`'s names on first use."""
        if self.names is None:
            from compiler.frontend.scopes import name_supply

            self.names = name_supply(definition)
        return self.names


@dataclass(frozen=True, slots=True)
class Pass:
    name: str
    run: Callable[[Any, PassContext], Any]
    doc: str


def _parse(text: str, ctx: PassContext) -> Any:
    from compiler.frontend.parser import parse

    return parse(text, ctx.filename)


def _select(module: Any, ctx: PassContext) -> Any:
    definition = module.get(ctx.entry)
    ctx.supply(definition)
    return definition


def _check(definition: Any, ctx: PassContext) -> Any:
    from compiler.frontend.check import check_def

    checked = check_def(definition)
    ctx.diagnostics.extend(checked.warnings)
    return checked


def _ranges(checked: Any, ctx: PassContext) -> Any:
    from compiler.poly.ranges import infer_ranges

    ranged = infer_ranges(checked)
    ctx.diagnostics.extend(ranged.warnings)
    return ranged


def _grad(ranged: Any, ctx: PassContext) -> Any:
    from compiler.autodiff import grad_def, jvp_def

    if not (ctx.grad or ctx.jvp):
        return ranged
    for k in range(ctx.order if ctx.grad else 0):
        wrt = ctx.wrt if k == 0 else None
        zeros = ctx.zeros if k == 0 else ()
        if k > 0:  # the supply of the def now differentiated (its statements' locals)
            ctx.names = None
        names = ctx.supply(ranged.checked.definition)
        gradient = grad_def(ranged, wrt=wrt, names=names, zeros=zeros)
        # Ordering: the gradient def is checked and ranged like any def (in memory).
        ranged = check_generated(_ranges(_check(gradient, ctx), ctx))
    if ctx.jvp:
        wrt = None if ctx.grad else ctx.wrt
        if ctx.grad:
            ctx.names = None
        tangent = jvp_def(ranged, wrt=wrt, names=ctx.supply(ranged.checked.definition))
        ranged = check_generated(_ranges(_check(tangent.definition, ctx), ctx))
    return ranged


def check_generated(ranged: Any) -> Any:
    """`ranged`, a def AD generated, after the gather pass's check of its `=` scatters
    (`poly.gather.check_assignments`): on every target, the interp one included (which
    would keep one of the values), an `=` that writes an element twice is an error."""
    from compiler.poly.gather import check_assignments

    check_assignments(ranged)
    return ranged


def _gather(ranged: Any, ctx: PassContext) -> Any:
    from compiler.poly.gather import scatter_to_gather

    return scatter_to_gather(ranged, mode=ctx.options.gather)


def _schedule(ranged: Any, ctx: PassContext) -> Any:
    """The CPU schedule: clamped gathers read zero-padded scratch copies (`cpu.pad`),
    a decision on the loop level that the def (and `--grad`) never shows."""
    from compiler.cpu.model import schedule

    return schedule(ranged, ctx.options, pad=True)


def _lower(sched: Any, ctx: PassContext) -> Any:
    """The loops, with a note per statement that is still a scatter (how it runs)."""
    import dataclasses

    from compiler.loops.collapse import collapse
    from compiler.loops.fuse import fuse
    from compiler.loops.keep_terms import keep_terms
    from compiler.poly.astgen import lower_schedule
    from compiler.poly.schedule import scatter_notes

    lowered = lower_schedule(sched)
    if ctx.options.fuse:
        lowered = dataclasses.replace(lowered, function=keep_terms(fuse(lowered.function)))
    lowered = dataclasses.replace(lowered, function=collapse(lowered.function))
    return dataclasses.replace(lowered, notes=scatter_notes(sched))


def _codegen(lowered: Any, ctx: PassContext) -> Any:
    from compiler.runtime.native import compile_lowered

    return compile_lowered(lowered, ctx.options)


# The pass list.
PASSES: tuple[Pass, ...] = (
    Pass("parse", _parse, "source text -> Module (lexer + recursive-descent parser)"),
    Pass("select", _select, "Module -> the entry-point Def; seeds the name supply"),
    Pass("check", _check, "Def -> CheckedDef (names, types, reductions, builtins)"),
    Pass("ranges", _ranges, "CheckedDef -> RangedDef (TC range inference with isl)"),
    # Ordering: grad after ranges, before gather (see the module doc).
    Pass(
        "grad",
        _grad,
        "RangedDef -> the gradient's RangedDef (reverse-mode AD, scatter form; "
        "`order` times), or the tangent def's (`jvp`: forward mode)",
    ),
    Pass("gather", _gather, "RangedDef -> RangedDef (affine scatters rewritten as gathers)"),
    # Ordering: schedule after gather, lower after schedule (see the module doc).
    Pass("schedule", _schedule, "RangedDef -> Schedule (nests, bands, parallel marks)"),
    Pass("lower", _lower, "Schedule -> Lowered (isl AST build -> loops.Function)"),
    Pass("codegen", _codegen, "Lowered -> NativeProgram (LLVM IR, O3, JIT)"),
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
    grad: bool = False,
    wrt: Iterable[str] | None = None,
    order: int = 1,
    jvp: bool = False,
    options: Options | None = None,
    ctx: PassContext | None = None,
) -> Any:
    """Run the passes from `parse` up to and including `upto`; return its result.

    `grad=True` runs the `grad` pass (the result is then the gradient's; `order=2`
    the gradient's gradient); `jvp=True` gives the tangent def (of the gradient,
    with `grad`: forward-over-reverse); `ctx`
    (else one made from the other arguments) receives the diagnostics."""
    if ctx is None:
        ctx = PassContext(
            options=options if options is not None else Options(),
            filename=filename,
            entry=name,
            grad=grad,
            wrt=None if wrt is None else tuple(wrt),
            order=order,
            jvp=jvp,
        )
    return run_from(text, ctx, start="parse", upto=upto, observe=observe)


def run_from(
    value: Any,
    ctx: PassContext,
    *,
    start: str,
    upto: str = PASS_NAMES[-1],
    observe: Observer | None = None,
) -> Any:
    """Run the passes from `start` up to and including `upto` on `value`, the input
    of `start` (e.g. a `RangedDef` for `start="grad"` or `"gather"`)."""
    first, last = _position(start), _position(upto)
    if first > last:
        raise OptionsError(f"pass '{start}' comes after pass '{upto}'")
    for p in PASSES[first : last + 1]:
        if p.name == "grad" and not (ctx.grad or ctx.jvp):
            continue
        began = time.perf_counter()
        try:
            value = p.run(value, ctx)
        except Exception as e:
            # an isl failure is a compiler bug: a poly pass names the statement it
            # was on (poly.failures), what still escapes it names the pass here
            from compiler.poly.failures import isl_failure

            failure = isl_failure(e, f"pass '{p.name}'")
            if failure is None:
                raise
            raise failure from e
        if observe is not None:
            observe(p.name, value, time.perf_counter() - began)
    return value


def _position(name: str) -> int:
    if name not in PASS_NAMES:
        raise OptionsError(f"unknown pass '{name}'; passes are: {', '.join(PASS_NAMES)}")
    return PASS_NAMES.index(name)


def lower(ranged: Any, options: Options | None = None) -> Any:
    """What the CPU runs for a `RangedDef`: gather, schedule and lower with `options`
    (the same passes, in the same order, as `run`)."""
    ctx = PassContext(options=options if options is not None else Options())
    return run_from(ranged, ctx, start="gather", upto="lower")


def gradient(
    ranged: Any,
    *,
    wrt: Iterable[str] | None = None,
    form: str = "gather",
    zeros: Iterable[str] = (),
) -> Any:
    """The gradient's `RangedDef` of a forward `RangedDef`: the `grad` pass, then
    (`form="gather"`) the `gather` pass. `zeros`: outputs with a zero cotangent.

    Derived once per process for equal arguments and gather budget (the last 64): the
    IR is immutable, and the same def defined again (on another target, a module built
    twice) would otherwise be derived anew (0.05-1 s a def). A remembered derivation
    warns again what the gather pass warned when it ran (`GatherBudgetWarning`)."""
    from compiler.poly import gather

    key = (ranged, None if wrt is None else tuple(wrt), form, tuple(zeros), gather.MAX_OPERATIONS)
    with _GRADIENTS_LOCK:
        found = _GRADIENTS.get(key)
    if found is not None:
        for message in found[1]:
            warnings.warn(message, gather.GatherBudgetWarning, stacklevel=2)
        return found[0]
    said: list[str] = []
    token = gather.GAVE_UP.set(said)  # a context variable: per thread
    try:
        ctx = PassContext(grad=True, wrt=key[1], zeros=key[3])
        result = run_from(ranged, ctx, start="grad", upto="gather" if form == "gather" else "grad")
    finally:
        gather.GAVE_UP.reset(token)
    with _GRADIENTS_LOCK:
        _GRADIENTS[key] = (result, tuple(said))
        while len(_GRADIENTS) > 64:
            del _GRADIENTS[next(iter(_GRADIENTS))]
    return result


# pipeline.gradient's derivations: key -> (the gradient's RangedDef, gather's give-ups)
_GRADIENTS: dict[tuple[Any, ...], tuple[Any, tuple[str, ...]]] = {}
_GRADIENTS_LOCK = threading.Lock()


def dump(result: Any) -> str:
    """A pass's result as text, for `--dump-after` (TC for the TC-level IRs)."""
    from compiler.frontend.printer import print_def, print_module

    kind = type(result).__name__
    if kind == "Module":
        return print_module(result)
    if kind == "Def":
        return print_def(result) + "\n"
    if kind in ("CheckedDef", "RangedDef"):
        checked = result if kind == "CheckedDef" else result.checked
        return print_def(checked.definition) + "\n"
    if kind == "Schedule":
        return _dump_schedule(result)
    if kind == "Lowered":
        from compiler.loops import print_function

        notes = "".join(f"// {note}\n" for note in result.notes)
        return notes + print_function(result.function) + "\n"
    compiled = getattr(result, "compiled", result)
    if hasattr(compiled, "ir"):
        return str(compiled.ir())
    return repr(result) + "\n"


def _dump_schedule(sched: Any) -> str:
    lines = []
    for nest in sched.nests:
        marks = [m for m in ("parallel", "accumulate", "snapshot") if getattr(nest, m)]
        marks += [f"companion S{c.index}" for c in nest.companions]
        lines.append(
            f"nest {nest.kind.name.lower()} S{nest.index}: outer ({', '.join(nest.outer)}) "
            f"inner ({', '.join(nest.inner)}){' ' + ' '.join(marks) if marks else ''}"
        )
    if sched.scratch:  # the nests are then those of the padded def (cpu.pad)
        lines.append(f"scratch: {', '.join(sched.scratch)}")
    return "\n".join(lines) + "\n"


__all__ = [
    "PASSES",
    "PASS_NAMES",
    "Pass",
    "PassContext",
    "check_generated",
    "dump",
    "gradient",
    "lower",
    "run",
    "run_from",
]
