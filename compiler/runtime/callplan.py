"""Per-signature call plans: the Python work of a native Kernel call, done once.

A `Kernel` call validates its arguments (count, rank, dtype, sizes: `Kernel._bind`),
binds the size parameters, computes the output shapes and lays out the native
arguments. All of that depends only on the inputs' shapes and dtypes, so the first call
with a new signature builds a `CallPlan`, and a later call whose arrays have the same
shapes and dtypes (and are C-contiguous NumPy arrays) only allocates the outputs and
makes one native call. An output the program overwrites before reading it
(`loops.overwrite`, e.g. the init nest of `C(m, n) +=! ...`) is allocated
uninitialised when the plan's outputs hold `OVERWRITE_BYTES` or more (below that,
zeroing costs less than finding out, once per program); the others are zeroed.
A call with `out=` runs the plan too, writing the given arrays in place, unless a copy
is needed for the same result (`CallPlan.into`):

    plan = make_plan(program, input_names, output_names, sizes, shapes)
    outputs = plan.run(arrays)          # a tuple in declaration order
    outputs = plan.run(arrays, plan.into(arrays, given))   # out=, unless into() is None

`signature(arrays)` is the plan's key, or None when the arrays do not qualify (then
the full checks run, and raise the same ShapeErrors as ever). A Kernel keeps at most
`MAX_PLANS` plans (the oldest is dropped first).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from compiler.runtime.native import NativeProgram

MAX_PLANS = 32
OVERWRITE_BYTES = 1 << 18  # outputs' bytes from which a plan asks what is overwritten
_NDARRAY = np.ndarray


def signature(arrays: Sequence[Any]) -> tuple[Any, ...] | None:
    """(shape, dtype) per array, or None unless all are C-contiguous ndarrays."""
    key = []
    for a in arrays:
        if type(a) is not _NDARRAY or not a.flags.c_contiguous:
            return None
        key.append((a.shape, a.dtype))
    return tuple(key)


@dataclass(frozen=True)
class CallPlan:
    """One signature's call (see the module doc)."""

    program: NativeProgram
    output_shapes: Mapping[str, tuple[int, ...]]
    outputs: tuple[tuple[tuple[int, ...], np.dtype[Any]], ...]  # shape, dtype per output
    allocate: tuple[Callable[..., np.ndarray], ...]  # per output: np.empty or np.zeros
    slots: tuple[int, ...]  # per buffer: index into (inputs..., outputs..., error buffer)
    sizes: tuple[int, ...]
    threads: int
    checked: bool  # whether the program reports read errors
    names: tuple[str, ...]  # of inputs and outputs, in the order of the slots' values
    call: Callable[..., None]

    def run(
        self, arrays: Sequence[np.ndarray], into: Sequence[np.ndarray | None] | None = None
    ) -> tuple[np.ndarray, ...]:
        """The outputs computed from `arrays` (the plan's signature): fresh arrays
        (zeroed unless overwritten), or where `into` (from `into()`) gives one, that
        array, written in place from its contents."""
        news = zip(self.allocate, self.outputs, into or [None] * len(self.outputs), strict=True)
        outs = [new(*out) if given is None else given for new, out, given in news]
        values = [*arrays, *outs]
        if self.checked:
            error = np.zeros(2, np.int64)
            values.append(error)
        self.call(*[values[i] for i in self.slots], *self.sizes, self.threads)
        if self.checked and error[0]:
            raise self.program.read_error(error, dict(zip(self.names, values, strict=False)))
        return tuple(outs)

    def into(
        self, arrays: Sequence[np.ndarray], given: Sequence[np.ndarray | None]
    ) -> Sequence[np.ndarray | None] | None:
        """`given` (validated `out=` arrays, None for outputs not given) if the code may
        write them in place with the result of copying their contents in and the
        results back out: the program reports no read errors (none can stop it
        half-way), and each array is C-contiguous and shares no memory with an input
        or another output. Else None (the Kernel then copies)."""
        if self.checked:
            return None
        arrays_given = [g for g in given if g is not None]
        for k, g in enumerate(arrays_given):
            if not g.flags.c_contiguous:
                return None
            others = [*arrays, *arrays_given[k + 1 :]]
            if any(np.may_share_memory(g, other) for other in others):
                return None
        return given


def make_plan(
    program: NativeProgram,
    inputs: Sequence[str],
    outputs: Sequence[tuple[str, np.dtype[Any]]],
    sizes: Mapping[str, int],
    shapes: Mapping[str, tuple[int, ...]],
) -> CallPlan | None:
    """The plan for one signature, or None if the program's buffers are not all inputs,
    outputs and the error buffer."""
    from compiler.poly.astgen import ERROR_BUFFER

    names = (*inputs, *(name for name, _ in outputs))
    index = {name: k for k, name in enumerate(names)}
    index[ERROR_BUFFER] = len(names)
    f = program.function
    if any(b.name not in index for b in f.buffers) or any(n not in sizes for n in f.size_params):
        return None
    values = tuple(int(sizes[n]) for n in f.size_params)
    layout = tuple((tuple(shapes[name]), np.dtype(dtype)) for name, dtype in outputs)
    nbytes = sum(int(np.prod(shape)) * dtype.itemsize for shape, dtype in layout)
    overwritten = (
        program.code.overwritten(dict(zip(f.size_params, values, strict=True)))
        if nbytes >= OVERWRITE_BYTES
        else frozenset()
    )
    return CallPlan(
        program=program,
        output_shapes=dict(shapes),
        outputs=layout,
        allocate=tuple(np.empty if name in overwritten else np.zeros for name, _ in outputs),
        slots=tuple(index[b.name] for b in f.buffers),
        sizes=values,
        threads=program.threads,
        checked=bool(program.lowered.checks),
        names=names,
        call=program.code.for_sizes(values).bind(),  # the versions these sizes take
    )


__all__ = ["MAX_PLANS", "OVERWRITE_BYTES", "CallPlan", "make_plan", "signature"]
