"""The target seam: what a back end declares, and the registry that finds it by name.

A target turns a loop-IR Function (`compiler.loops`) into something that runs:

    target = get_target("llvm")
    f = prepare(target, function, options)      # the target's own passes + loop-kind check
    artefact = target.compile(f, options)       # cacheable: bytes + JSON-able metadata
    run = target.load(artefact)                 # a callable on NumPy arrays

A target declares
- `name`: the string users pass as `target=`;
- `options_type`: its options class (a frozen dataclass, validated when made). The
  CPU target's is `compiler.options.Options`; a GPU target declares its own;
- `loop_kinds`: the `LoopKind`s its code generator implements. `prepare` rejects a
  Function with any other kind (an `InternalError` naming the loop), and the code
  generator itself raises on one too, never ignoring it silently;
- `passes(options)`: the target-only passes on the loop IR, each a pure
  `Function -> Function`, run in order by `prepare` (the CPU target's decides which
  parallel loops run on threads: `compiler.cpu.cpu_parallel`);
- `compile(function, options) -> Artefact` and `load(artefact) -> callable`.

Registering a new target is a few lines in its own module, e.g. cuda/cuda.py:

    @dataclass(frozen=True)
    class CudaTarget:
        name: str = "cuda"
        options_type: type = CudaOptions
        loop_kinds: frozenset[LoopKind] = frozenset({LoopKind.SERIAL, LoopKind.GPU_BLOCK,
                                                     LoopKind.GPU_THREAD})
        def passes(self, options): return (map_to_blocks,)
        def compile(self, function, options): return Artefact(self.name, function, ptx, {})
        def load(self, artefact): return CudaFunction(artefact)

    register_target(CudaTarget())

and one line in `_BUILTIN` below (name -> module), so that `get_target("cuda")` imports
the module on first use. Targets are looked up by name only; nothing else in the
compiler branches on a target's name.
"""

from __future__ import annotations

import importlib
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from compiler.diagnostics import InternalError, OptionsError, did_you_mean
from compiler.loops import For, Function, LoopKind, Node
from compiler.loops.ir import walk_stmts

LoopPass = Callable[[Function], Function]


@dataclass(frozen=True)
class Artefact:
    """What `Target.compile` produces: the Function it was compiled from (after the
    target's passes), the code as bytes, and JSON-able metadata (e.g. IR text)."""

    target: str
    function: Function
    code: bytes
    metadata: Mapping[str, Any] = field(default_factory=dict)


@runtime_checkable
class Target(Protocol):
    """A back end (see the module doc)."""

    name: str
    options_type: type
    loop_kinds: frozenset[LoopKind]

    def passes(self, options: Any) -> tuple[LoopPass, ...]: ...

    def compile(self, function: Function, options: Any) -> Artefact: ...

    def load(self, artefact: Artefact) -> Callable[..., Any]: ...


# name -> the module whose import registers it (imported on first use)
_BUILTIN: dict[str, str] = {"llvm": "compiler.cpu.cpu"}
_TARGETS: dict[str, Target] = {}
_LOCK = threading.RLock()


def register_target(target: Target, *, replace: bool = False) -> Target:
    """Make `target` available as `get_target(target.name)`; returns it."""
    if not isinstance(target, Target):
        raise InternalError(f"not a Target: {target!r} (see compiler.codegen.target)")
    with _LOCK:
        if target.name in _TARGETS and not replace and _TARGETS[target.name] is not target:
            raise InternalError(f"a target named '{target.name}' is registered already")
        _TARGETS[target.name] = target
    return target


def get_target(name: str) -> Target:
    """The registered target called `name`; an OptionsError for an unknown name."""
    with _LOCK:
        found = _TARGETS.get(name)
        module = _BUILTIN.get(name) if found is None else None
    if module is not None:
        importlib.import_module(module)
        with _LOCK:
            found = _TARGETS.get(name)
    if found is None:
        names = target_names()
        raise OptionsError(
            f"unknown code-generation target '{name}'; known: {', '.join(names)}",
            hint=did_you_mean(str(name), names),
        )
    return found


def target_names() -> tuple[str, ...]:
    """Every target name: registered or importable on first use."""
    with _LOCK:
        return tuple(sorted(set(_TARGETS) | set(_BUILTIN)))


def check_options(target: Target, options: Any) -> Any:
    """`options` if they are the target's options type (None: its defaults)."""
    if options is None:
        return target.options_type()
    if not isinstance(options, target.options_type):
        raise OptionsError(
            f"target '{target.name}' takes {target.options_type.__name__}, got "
            f"{type(options).__name__}",
            hint=f"pass options={target.options_type.__name__}(...)",
        )
    return options


def check_loop_kinds(target: Target, f: Function) -> None:
    """Raise InternalError if `f` has a loop of a kind `target` does not implement."""
    for loop in loops_of(f):
        if loop.kind not in target.loop_kinds:
            raise InternalError(
                f"target '{target.name}' does not implement {loop.kind.value} loops "
                f"(loop '{loop.var}' of {f.name})"
            )


def prepare(target: Target, f: Function, options: Any) -> Function:
    """`f` after `target`'s own passes, its loop kinds checked."""
    for run in target.passes(options):
        f = run(f)
    check_loop_kinds(target, f)
    return f


def loops_of(node: Node) -> list[For]:
    """Every For in `node`, outermost first."""
    return [n for n in walk_stmts(node) if isinstance(n, For)]


__all__ = [
    "Artefact",
    "LoopPass",
    "Target",
    "check_loop_kinds",
    "check_options",
    "get_target",
    "loops_of",
    "prepare",
    "register_target",
    "target_names",
]
