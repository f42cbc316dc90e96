"""The target seam: the registry, options per target, loop kinds a back end rejects."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest

from compiler.codegen.target import (
    Artefact,
    Target,
    check_loop_kinds,
    check_options,
    get_target,
    prepare,
    register_target,
    target_names,
)
from compiler.cpu import compile_function
from compiler.diagnostics import InternalError, OptionsError
from compiler.loops import Function, LoopKind
from compiler.options import Options
from tests.codegen.kit import F32, add, buf, c, func, load, loop, out, store


def _inc(kind: LoopKind = LoopKind.PARALLEL) -> Function:
    A, Out = buf("A", F32, "N"), out("O", F32, "N")
    body = store(Out, ("i",), add(load(A, "i"), c(1.0, F32)))
    return func("inc", [A, Out], "N", loop("i", 0, "N", body, kind=kind))


def test_llvm_is_registered_with_the_cpu_options() -> None:
    target = get_target("llvm")
    assert isinstance(target, Target)
    assert target.name == "llvm" and target.options_type is Options
    assert "llvm" in target_names()
    assert LoopKind.GPU_BLOCK not in target.loop_kinds
    assert check_options(target, None) == Options()
    with pytest.raises(OptionsError, match="takes Options"):
        check_options(target, object())


def test_unknown_target_is_an_options_error_with_a_suggestion() -> None:
    with pytest.raises(OptionsError, match="unknown code-generation target 'llvn'") as err:
        get_target("llvn")
    assert "llvm" in err.value.render()


def test_compile_then_load_runs_the_function() -> None:
    target = get_target("llvm")
    f = prepare(target, _inc(), Options())
    artefact = target.compile(f, Options())
    assert isinstance(artefact.code, bytes) and artefact.code
    run = target.load(artefact)
    a = np.arange(7, dtype=np.float32)
    o = np.zeros(7, np.float32)
    run({"A": a, "O": o}, {"N": 7})
    np.testing.assert_array_equal(o, a + 1)


@pytest.mark.parametrize("kind", [LoopKind.GPU_BLOCK, LoopKind.GPU_THREAD])
def test_the_cpu_target_rejects_gpu_loops(kind: LoopKind) -> None:
    with pytest.raises(InternalError, match=f"does not implement {kind.value} loops"):
        prepare(get_target("llvm"), _inc(kind), Options())
    with pytest.raises(InternalError, match=f"{kind.value} loops are not implemented"):
        compile_function(_inc(kind))  # the emitter itself never ignores one


@dataclass(frozen=True)
class _EchoOptions:
    scale: float = 1.0


@dataclass(frozen=True)
class _EchoTarget:
    """A toy target: 'compiles' to the Function's name, 'runs' by copying A to O."""

    name: str = "echo-test"
    options_type: type = _EchoOptions
    loop_kinds: frozenset[LoopKind] = frozenset({LoopKind.SERIAL})

    def passes(self, options: Any) -> tuple[Any, ...]:
        return (_serialise,)

    def compile(self, function: Function, options: Any) -> Artefact:
        return Artefact(self.name, function, function.name.encode(), {"scale": options.scale})

    def load(self, artefact: Artefact) -> Any:
        def run(arrays: dict[str, np.ndarray]) -> None:
            arrays["O"][...] = arrays["A"] * artefact.metadata["scale"]

        return run


def _serialise(f: Function) -> Function:
    return _inc(LoopKind.SERIAL) if f.name == "inc" else f


def test_registering_a_target_takes_a_few_lines() -> None:
    target = register_target(_EchoTarget(), replace=True)
    assert get_target("echo-test") is target
    options = check_options(target, _EchoOptions(2.0))
    f = prepare(target, _inc(), options)  # its pass turned the parallel loop serial
    check_loop_kinds(target, f)
    run = target.load(target.compile(f, options))
    arrays = {"A": np.ones(3, np.float32), "O": np.zeros(3, np.float32)}
    run(arrays)
    np.testing.assert_array_equal(arrays["O"], [2.0, 2.0, 2.0])
    with pytest.raises(InternalError, match="registered already"):
        register_target(_EchoTarget(loop_kinds=frozenset()))
    with pytest.raises(InternalError, match="not a Target"):
        register_target(object())  # type: ignore[arg-type]
