"""The gradient stages of tools.corpus: every differentiable float kernel of the corpus
gets its gradient derived (reverse AD, then scatter -> gather) and checked in float64.

    run_grad(text, entry)                  -> GradReport   (stage `grad`, target="interp")
    run_grad_llvm(text, entry, report)     -> GradReport   (stage `grad-llvm`)
    run_backward(text, entry)              -> str | None   (stage `backward`: a user def)

The def is rebuilt with every float type made float64 (`compiler.gradcheck.as_float64`)
and run at the manifest's shapes. A full finite-difference gradcheck costs two forward
calls per input element, too many there, so the check is directional: a random
cotangent `c` per output and, for each float input in turn, a random direction `t`;
`<vjp(c), t>` must equal the central difference
`<c, f(x + eps t) - f(x - eps t)> / (2 eps)` (`eps` = 1e-6 times the input's scale)
within `RTOL` of the magnitude of the products summed (`sum |vjp(c) t|`), so that
cancellation in the sum cannot hide an error. When every input has at most
`FULL_CHECK_ELEMENTS` elements, `compiler.gradcheck.gradcheck` checks every element too.

Inputs (`tools.corpus_interp._input`, seeded per entry): integer inputs follow the
manifest's `input_values` (index ranges); float inputs are drawn in float64 from a
standard normal (no ties for `max=` / `min=`), except explicit data and scalar
arguments (kept), "positive" notes (uniform in [0.5, 1.5)) and integer-valued floats
("integers in [0, M) stored as float": the integer plus 0.5, so that `x +- eps` stays
in the same integer cell when cast to an index). A def whose output is not finite on
normal inputs is checked on positive ones. Outputs are not pre-initialised (`out=`):
the gradient is that of the def starting from zeroed outputs, as `Kernel.vjp` defines.

Through the reference evaluator the gradient runs in scatter form, as autodiff writes
it (`ScatterForm`): the evaluator masks a gather's non-rectangular ranges out of a
large box, which takes minutes on the corpus's convolutions, and the scatter form is
independent of the gather pass. Where one forward call through the evaluator takes
more than `INTERP_FORWARD_CAP` seconds (a handful of matmuls and convolutions at the
manifest's shapes; the vjp costs 5-20 forward calls there) the evaluator's check is
not run and the report lists the entry; llvm still checks it. `grad-llvm` runs the
same points through target="llvm" (`Kernel.vjp`: gather form, native code): the same
checks, and its vjp must equal the evaluator's (rtol `AGREE_RTOL`). The `backward`
stage checks a source's own `<def>_grad` (TC's backward convention) the same way.

Judging (tools.corpus): a def with no float input, or whose gradient autodiff rejects
with a TCError ("cannot differentiate ..."), has no gradient: the stage is skipped
with the reason (`NotApplicable`). A failed check raises `GradcheckError`; an affine
scatter left after the gather pass (only data-dependent ones may remain, and those the
pass kept at its isl budget, with a `GatherBudgetWarning`, or as a partial scatter
under the CPU's default `Options.gather`, reported as such) raises `InternalError`;
both are unexpected.
"""

from __future__ import annotations

import dataclasses
import re
import time
import warnings
import zlib
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from compiler.diagnostics import InternalError, TCError
from compiler.gradcheck import GradcheckError, as_float64, gradcheck
from tools.corpus_interp import SKIPPED_CATEGORIES, _from_note, _input

RTOL = 1e-6  # directional check, relative to sum |vjp(c) * t|
EPS = 1e-6  # relative step of the central difference
FULL_CHECK_ELEMENTS = 64  # every input at most this big: a full elementwise gradcheck
FULL_ATOL, FULL_RTOL = 1e-6, 1e-5
INTERP_FORWARD_CAP = 1.0  # seconds: slower forwards skip the interp gradient check
AGREE_RTOL = 1e-9  # llvm's vjp against interp's, relative to the largest magnitude

# Entries whose gradient's gather pass should not be run: their gradient is checked
# in scatter form through interp only, and `grad-llvm` is skipped with this reason.
# (inf_weird_conv.tc was here: the pass now stops at its isl budget and keeps that
# scatter, serial; such a scatter is reported as kept, not as unexpected.)
GATHER_TOO_SLOW: dict[tuple[str, str], str] = {}


class NotApplicable(Exception):  # noqa: N818 (a verdict, not an error)
    """Raised by a stage that does not apply to an entry (e.g. `grad` of a def with no
    float input): the stage is skipped with this reason, shown in the report when
    `informative`, and the later stages still run."""

    def __init__(self, reason: str, *, informative: bool = True) -> None:
        super().__init__(reason)
        self.reason = reason
        self.informative = informative


@dataclasses.dataclass(frozen=True)
class Scatter:
    """A statement of the gradient (gather form) that still scatters."""

    statement: str
    data_dependent: bool
    budget: bool = False  # affine, kept by the gather pass at its isl budget (serial)
    partial: bool = False  # affine, a partial scatter (parallel over its plain variables)


@dataclasses.dataclass(frozen=True)
class Point:
    """Where the gradient is checked: float64 inputs, directions, cotangents, and the
    reference evaluator's vjp there."""

    args: tuple[np.ndarray, ...]
    tangents: tuple[np.ndarray | None, ...]  # None: an integer input
    cotangents: tuple[np.ndarray, ...]
    vjp: tuple[np.ndarray | None, ...] | None  # None: not computed (interp too slow)


@dataclasses.dataclass(frozen=True)
class GradReport:
    """What the gradient stages found for one entry."""

    float_inputs: tuple[str, ...]
    statements: int  # statements of the gradient def (gather form; -1: not run)
    scatters: tuple[Scatter, ...] | None  # None: the gather pass was not run
    checks: tuple[str, ...]  # what passed, e.g. "interp: directional (2 inputs)"
    point: Point | None = None
    notes: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {
            "float_inputs": list(self.float_inputs),
            "statements": self.statements,
            "scatters": None
            if self.scatters is None
            else [dataclasses.asdict(s) for s in self.scatters],
            "checks": list(self.checks),
            "notes": list(self.notes),
        }


# ------------------------------------------------------------------ the stages


def run_grad(text: str, entry: Mapping[str, Any]) -> GradReport:
    """Derive the gradient of `entry` and check it through the reference evaluator."""
    from compiler.kernel import define

    if entry.get("category") in SKIPPED_CATEGORIES or "inputs" not in entry:
        raise NotApplicable("not run (negative, unmerged or no inputs)", informative=False)
    forward = as_float64(define(text, entry["def"], target="interp"))
    floats = tuple(t.name for t in forward.ranged.checked.inputs if t.dtype.is_float)
    if not floats:
        raise NotApplicable("no gradient: no float input", informative=False)
    scatter_text = _derive(forward)
    reference = ScatterForm(forward, scatter_text)
    point, notes, seconds = _point(reference, entry)
    if seconds > INTERP_FORWARD_CAP:
        checks = [f"interp: not run (a forward call takes {seconds:.1f} s)"]
    else:
        point = dataclasses.replace(point, vjp=_vjp(reference, point.args, point.cotangents))
        checks = [_directional(reference, point, "interp (scatter form)", reuse=True)]
    slow = GATHER_TOO_SLOW.get((entry["file"], entry["def"]))
    if slow is not None:
        return GradReport(floats, -1, None, tuple(checks), point, (*notes, slow))
    gathered, gave_up = _gather(scatter_text)
    notes = (*notes, *gave_up)
    if _small(point):
        checks.append(_full(forward, point, "interp"))
    return GradReport(
        floats,
        len(gathered.checked.stmts),
        _scatters(gathered, gave_up),
        tuple(checks),
        point,
        notes,
    )


class ScatterForm:
    """A float64 forward kernel whose vjp runs the gradient def in scatter form (as
    autodiff writes it, before the gather pass) through the reference evaluator: fast
    there, where a gather's non-rectangular ranges are masked out of a large box, and
    independent of the gather pass, which target="llvm" then checks against it."""

    def __init__(self, forward: Any, scatter_text: str) -> None:
        from compiler.kernel import Kernel

        self.forward = forward
        self.name = forward.name
        self.ranged = forward.ranged
        self.backward = Kernel(scatter_text, target="interp")

    def __call__(self, *arrays: Any) -> tuple[np.ndarray, ...]:
        return self.forward(*arrays)

    def vjp(self, *arrays: Any, grad_outputs: Sequence[Any]) -> tuple[np.ndarray | None, ...]:
        checked = self.ranged.checked
        params = [t.name for t in self.backward.ranged.checked.inputs]
        values = {t.name: a for t, a in zip(checked.inputs, arrays, strict=True)}
        if any(t.name in params for t in checked.outputs):
            values |= {t.name: o for t, o in zip(checked.outputs, self(*arrays), strict=True)}
        values |= {f"{t.name}_grad": g for t, g in zip(checked.outputs, grad_outputs, strict=True)}
        names = [t.name for t in self.backward.ranged.checked.outputs]
        results = dict(zip(names, self.backward(*(values[p] for p in params)), strict=True))
        return tuple(results.get(f"{t.name}_grad") for t in checked.inputs)


def run_grad_llvm(text: str, entry: Mapping[str, Any], report: GradReport | None) -> GradReport:
    """The same checks through target="llvm", whose vjp must equal interp's."""
    from compiler.kernel import define

    if report is None or report.point is None:
        raise NotApplicable("no gradient", informative=False)
    if report.scatters is None:
        raise NotApplicable(f"llvm gradient not checked: {report.notes[-1]}")
    kernel = as_float64(define(text, entry["def"], target="llvm"))
    point = report.point
    checks = [_directional(kernel, point, "llvm")]
    if point.vjp is not None:
        _agree(kernel, point)
        checks.append("llvm: vjp == interp's")
    if _small(point):
        checks.append(_full(kernel, point, "llvm"))
    return dataclasses.replace(report, checks=report.checks + tuple(checks))


def user_backward(text: str, entry: Mapping[str, Any]) -> str | None:
    """The def `<name>_grad` of the same source, TC's convention for a backward def."""
    from compiler.frontend.parser import parse

    name = f"{entry['def']}_grad"
    return name if any(d.name == name for d in parse(text).defs) else None


def run_backward(text: str, entry: Mapping[str, Any]) -> str:
    """Check the source's own backward def (`<name>_grad`) like a derived gradient,
    through both targets; the checks that passed, as one line."""
    from compiler.kernel import define

    if entry.get("category") in SKIPPED_CATEGORIES or "inputs" not in entry:
        raise NotApplicable("not run", informative=False)
    backward = user_backward(text, entry)
    if backward is None:
        raise NotApplicable("no backward def in the source", informative=False)
    reference = as_float64(define(text, entry["def"], target="interp", backward=backward))
    _signature(reference, backward)
    point, _, _ = _point(reference, entry)
    point = dataclasses.replace(point, vjp=_vjp(reference, point.args, point.cotangents))
    checks = [_directional(reference, point, "interp", reuse=True)]
    fast = as_float64(define(text, entry["def"], target="llvm", backward=backward))
    checks.append(_directional(fast, point, "llvm"))
    _agree(fast, point)
    return f"backward def '{backward}': " + "; ".join(checks)


# ------------------------------------------------------------------ derivation


def _derive(kernel: Any) -> str:
    """The gradient def in scatter form; NotApplicable when autodiff rejects the def
    (a user-level TCError: "cannot differentiate ...")."""
    from compiler.backward import GradForm, gradient_text

    try:
        return gradient_text(kernel.ranged, form=GradForm.SCATTER)
    except TCError as err:
        message = err.diagnostics[0].message.splitlines()[0]
        raise NotApplicable(f"no gradient: {message}") from None


def _gather(scatter_text: str) -> tuple[Any, tuple[str, ...]]:
    """The gradient def after the gather pass (a RangedDef), and the messages of the
    statements the pass kept as scatters at its isl budget."""
    import warnings

    from compiler import pipeline
    from compiler.poly.gather import GatherBudgetWarning

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", GatherBudgetWarning)
        gathered = pipeline.run(scatter_text, filename="<gradient>", upto="gather")
    gave_up = tuple(str(w.message) for w in caught if issubclass(w.category, GatherBudgetWarning))
    return gathered, gave_up


def _scatters(grad_ranged: Any, gave_up: Sequence[str] = ()) -> tuple[Scatter, ...]:
    """The gradient's remaining scatters; raise unless each is data-dependent or one
    the gather pass kept at its isl budget (named in `gave_up`)."""
    from compiler.frontend.printer import print_expr, print_stmt
    from compiler.options import Options
    from compiler.poly.gather import WriteKind, remaining_scatters, write_kind
    from compiler.poly.partial import keep_partial

    found = []
    params = grad_ranged.checked.size_params
    for k in remaining_scatters(grad_ranged):
        facts = grad_ranged.checked.stmts[k]
        dependent = write_kind(facts) is WriteKind.DATA_DEPENDENT
        lhs = f"`{print_expr(facts.stmt.lhs)} {facts.stmt.op.value} ...`"
        kept = not dependent and any(lhs in message for message in gave_up)
        partial = not dependent and not kept and keep_partial(facts, params, Options().gather)
        text = print_stmt(grad_ranged.checked.definition.stmts[k])
        found.append(Scatter(text, dependent, kept, partial))
    affine = [s.statement for s in found if not s.data_dependent and not s.budget and not s.partial]
    if affine:
        raise InternalError(
            f"{len(affine)} affine scatter(s) remain after the gather pass: {affine[0]}"
        )
    return tuple(found)


def _signature(kernel: Any, backward: str) -> None:
    """A backward def must take the inputs, optionally the outputs, then one gradient
    per output (TC's training convention); otherwise it cannot be checked."""
    checked = kernel.ranged.checked
    n_in, n_out = len(checked.inputs), len(checked.outputs)
    n_params = len(kernel.grad.ranged.checked.inputs)
    if n_params not in (n_in + n_out, n_in + 2 * n_out):
        raise NotApplicable(
            f"backward def '{backward}' not checked: it takes {n_params} parameter(s), "
            f"not the {n_in} input(s), optionally the {n_out} output(s), then {n_out} "
            f"output gradient(s) of '{kernel.name}'"
        )


# ------------------------------------------------------------------ inputs


def _point(kernel: Any, entry: Mapping[str, Any]) -> tuple[Point, tuple[str, ...], float]:
    """Inputs, directions and cotangents (no vjp yet), notes, and the seconds one
    forward call took there."""
    notes: tuple[str, ...] = ()
    args = _inputs(kernel, entry, positive=False)
    start = time.perf_counter()
    outputs = _forward(kernel, args)
    seconds = time.perf_counter() - start
    if not _finite(outputs):
        args = _inputs(kernel, entry, positive=True)
        outputs = _forward(kernel, args)
        notes = ("checked on positive inputs (the output is not finite on normal ones)",)
        if not _finite(outputs):
            raise NotApplicable(
                "gradient not checked: the output is not finite on normal or positive inputs"
            )
    rng = np.random.default_rng(_seed(entry, "directions"))
    tangents = tuple(rng.standard_normal(a.shape) if a.dtype == np.float64 else None for a in args)
    cotangents = tuple(
        rng.standard_normal(o.shape) if o.dtype == np.float64 else np.zeros(o.shape, o.dtype)
        for o in outputs
    )
    return Point(args, tangents, cotangents, None), notes, seconds


def _inputs(kernel: Any, entry: Mapping[str, Any], *, positive: bool) -> tuple[np.ndarray, ...]:
    rng = np.random.default_rng(_seed(entry, "inputs"))
    shapes = entry.get("inputs", {})
    args = []
    for info in kernel.ranged.checked.inputs:
        shape = tuple(shapes.get(info.name, ()))
        if info.dtype.is_float:
            args.append(_float_input(info.name, shape, entry, rng, positive))
        else:
            args.append(_input(info.name, shape, entry, rng))
    return tuple(args)


def _float_input(
    name: str,
    shape: tuple[int, ...],
    entry: Mapping[str, Any],
    rng: np.random.Generator,
    positive: bool,
) -> np.ndarray:
    note = entry.get("input_values", {}).get(name)
    if isinstance(note, list) or (not shape and name in entry.get("scalar_args", {})):
        return _input(name, shape, entry, rng).astype(np.float64)
    if isinstance(note, str) and re.search(r"integers in \[", note):
        value = _from_note(note, shape, np.dtype(np.float64), entry.get("size_params", {}), rng)
        if value is not None:
            return value + 0.5
    if positive or (isinstance(note, str) and "positive" in note.lower()):
        return rng.random(shape) + 0.5
    return rng.standard_normal(shape)


def _seed(entry: Mapping[str, Any], what: str) -> int:
    return zlib.crc32(f"{entry['file']}:{entry['def']}:{what}".encode())


def _small(point: Point) -> bool:
    return all(a.size <= FULL_CHECK_ELEMENTS for a in point.args)


# ------------------------------------------------------------------ checks


def _forward(kernel: Any, args: Sequence[np.ndarray]) -> tuple[np.ndarray, ...]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # accumulating outputs start at zero: intended
        with np.errstate(all="ignore"):
            return kernel(*args)


def _vjp(
    kernel: Any, args: Sequence[np.ndarray], cotangents: Sequence[np.ndarray]
) -> tuple[np.ndarray | None, ...]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with np.errstate(all="ignore"):
            return kernel.vjp(*args, grad_outputs=tuple(cotangents))


def _finite(outputs: Sequence[np.ndarray]) -> bool:
    return all(bool(np.isfinite(o).all()) for o in outputs if o.dtype.kind == "f")


def _directional(kernel: Any, point: Point, target: str, *, reuse: bool = False) -> str:
    """Check <vjp(c), t> against the central difference, one float input at a time
    (the vjp is the point's when `kernel` is the one that computed it)."""
    grads = point.vjp if reuse else _vjp(kernel, point.args, point.cotangents)
    assert grads is not None
    names = [t.name for t in kernel.ranged.checked.inputs]
    worst = 0.0
    for pos, tangent in enumerate(point.tangents):
        if tangent is None:
            continue
        grad = np.zeros_like(tangent) if grads[pos] is None else np.asarray(grads[pos])
        analytic = float(np.sum(grad * tangent))
        numeric = _central(kernel, point, pos)
        scale = float(np.sum(np.abs(grad * tangent)))
        error = abs(analytic - numeric)
        if not error <= RTOL * scale + 1e-12:
            raise GradcheckError(
                f"{target}: directional gradcheck failed for input '{names[pos]}' of def "
                f"'{kernel.name}': <vjp(c), t> = {analytic!r}, central difference "
                f"{numeric!r} (sum |vjp(c) t| = {scale:g}, rtol {RTOL:g})"
            )
        worst = max(worst, error / scale if scale else 0.0)
    count = sum(t is not None for t in point.tangents)
    return f"{target}: directional ({count} input(s), worst relative error {worst:.1e})"


def _central(kernel: Any, point: Point, pos: int) -> float:
    x, t = point.args[pos], point.tangents[pos]
    assert t is not None
    eps = EPS * max(1.0, float(np.sqrt(np.mean(x * x))) if x.size else 1.0)
    sides = []
    for sign in (1.0, -1.0):
        args = list(point.args)
        args[pos] = x + sign * eps * t
        sides.append(_forward(kernel, args))
    total = 0.0
    for c, plus, minus in zip(point.cotangents, *sides, strict=True):
        if plus.dtype.kind == "f":
            total += float(np.sum(c * (plus - minus)))
    return total / (2 * eps)


def _full(kernel: Any, point: Point, target: str) -> str:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            gradcheck(kernel, *point.args, atol=FULL_ATOL, rtol=FULL_RTOL)
        except GradcheckError as err:
            raise GradcheckError(f"{target}: full {err.diagnostics[0].message}") from None
    return f"{target}: full gradcheck"


def _agree(kernel: Any, point: Point, target: str = "llvm") -> None:
    """The kernel's vjp must equal the reference evaluator's at the same point."""
    got = _vjp(kernel, point.args, point.cotangents)
    names = [t.name for t in kernel.ranged.checked.inputs]
    for name, g, w in zip(names, got, point.vjp, strict=True):
        if (g is None) != (w is None):
            raise InternalError(f"{target} and interp disagree on whether '{name}' has a gradient")
        if g is None or w is None:
            continue
        limit = AGREE_RTOL * max(1.0, float(np.max(np.abs(w), initial=0.0)))
        worst = float(np.max(np.abs(np.asarray(g) - w), initial=0.0))
        if not worst <= limit:
            raise InternalError(
                f"{target}'s gradient of '{name}' differs from interp's: max abs difference "
                f"{worst:g} (limit {limit:g})"
            )


# ------------------------------------------------------------------ report


def format_gradients(results: Sequence[Any]) -> str:
    """The gradient summary of a corpus run (`tools.corpus.EntryResult`s)."""
    by_stage = [{r.stage: r for r in res.stages} for res in results]
    with_gradient = [res for res in results if res.gradient is not None]
    passed = {
        name: sum(1 for s in by_stage if name in s and s[name].status.value == "passed")
        for name in ("grad", "grad-llvm", "backward")
    }
    interp = sum(1 for r in with_gradient if r.gradient.checks[0].startswith("interp (scatter"))
    capped = [r for r in with_gradient if r.gradient.checks[0].startswith("interp: not run")]
    lines = [
        f"gradients: {len(with_gradient)} entries have one; checked in float64 through "
        f"interp: {interp}, through llvm: {passed['grad-llvm']}; "
        f"user backward defs checked: {passed['backward']}"
    ]
    if capped:
        lines.append(
            f"interp gradient check not run (a forward call takes over {INTERP_FORWARD_CAP} s; "
            f"llvm checks these): " + ", ".join(f"{r.file} [{r.entry_point}]" for r in capped)
        )
    missing = [
        (res, s["grad"].message)
        for res, s in zip(results, by_stage, strict=True)
        if "grad" in s and s["grad"].message.startswith(("no gradient:", "gradient not"))
    ]
    if missing:
        lines.append(f"no gradient, or not checked ({len(missing)}):")
        lines += [f"  {res.file} [{res.entry_point}]: {why}" for res, why in missing]
    scatters = [(res, sc) for res in with_gradient for sc in res.gradient.scatters or ()]
    lines.append(f"scatters left in gradients after the gather pass ({len(scatters)}):")
    lines += [
        f"  {res.file} [{res.entry_point}]: {_scatter_kind(sc)}: {sc.statement}"
        for res, sc in scatters
    ]
    return "\n".join(lines)


def _scatter_kind(sc: Scatter) -> str:
    if sc.data_dependent:
        return "data-dependent"
    if sc.partial:
        return "affine, a partial scatter (parallel over its plain variables)"
    return (
        "affine, kept at the gather pass's isl budget (serial)"
        if sc.budget
        else ("AFFINE (unexpected)")
    )


__all__ = [
    "GradReport",
    "Point",
    "Scatter",
    "format_gradients",
    "run_backward",
    "run_grad",
    "run_grad_llvm",
    "user_backward",
]
