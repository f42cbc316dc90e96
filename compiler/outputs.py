"""The outputs of a Kernel call: their sizes, and the `out=` arrays a caller gives.

    check_output_sizes(outputs, shapes)               # a ShapeError past any allocation
    given_outputs(def_name, outputs, out, shapes)     # {output name: its out= array}

`outputs` are the def's output TensorInfos in declaration order, `shapes` their shapes
for the call's sizes. `out=` is a sequence in output order (None for an output not
given) or a dict by name; each array must be a writeable NumPy array of the output's
shape and dtype. Every error is a `ShapeError` naming the output, at its declaration.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from compiler.diagnostics import ShapeError, did_you_mean
from compiler.frontend.checked import TensorInfo
from compiler.interp.expr import NP_DTYPE

MAX_OUTPUT_BYTES = 2**47  # beyond any process's address space on today's 64-bit CPUs


def check_output_sizes(
    outputs: Sequence[TensorInfo], shapes: Mapping[str, tuple[int, ...]]
) -> None:
    """A ShapeError for an output larger than `MAX_OUTPUT_BYTES`."""
    for info in outputs:
        shape = shapes[info.name]
        nbytes = np.dtype(NP_DTYPE[info.dtype]).itemsize
        for extent in shape:
            nbytes *= extent
        if nbytes > MAX_OUTPUT_BYTES:
            raise ShapeError(
                f"output '{info.name}' would have shape {shape}: {nbytes} bytes, more than "
                "any process can allocate",
                info.span,
                hint="check the input shapes: the output's shape follows from the sizes",
            )


def given_outputs(
    def_name: str,
    outputs: Sequence[TensorInfo],
    out: Any,
    shapes: Mapping[str, tuple[int, ...]],
) -> dict[str, np.ndarray]:
    """The arrays `out=` gives (none for `out=None`), by output name, validated."""
    if out is None:
        return {}
    names = [t.name for t in outputs]
    if isinstance(out, Mapping):
        for key in out:
            if key not in names:
                raise ShapeError(
                    f"out= names '{key}', which is not an output of def '{def_name}' "
                    f"(outputs: {', '.join(names)})",
                    hint=did_you_mean(str(key), names),
                )
        pairs = {k: v for k, v in out.items() if v is not None}
    elif isinstance(out, (tuple, list)):
        if len(out) != len(names):
            raise ShapeError(
                f"out= has {len(out)} array(s) but def '{def_name}' has "
                f"{len(names)} output(s) ({', '.join(names)})",
                hint="give one array per output in declaration order, or a dict by name",
            )
        pairs = {n: v for n, v in zip(names, out, strict=True) if v is not None}
    else:
        raise ShapeError(
            f"out= must be a tuple/list of arrays or a dict by output name, "
            f"got {type(out).__name__}"
        )
    infos = {t.name: t for t in outputs}
    return {k: _as_output(infos[k], v, shapes[k]) for k, v in pairs.items()}


def _as_output(info: TensorInfo, value: Any, shape: tuple[int, ...]) -> np.ndarray:
    expected = np.dtype(NP_DTYPE[info.dtype])
    if not isinstance(value, np.ndarray):
        raise ShapeError(
            f"out= for output '{info.name}' must be a NumPy array, got {type(value).__name__}",
            info.span,
        )
    if tuple(value.shape) != shape:
        raise ShapeError(
            f"out= for output '{info.name}' has shape {tuple(value.shape)}, expected {shape}",
            info.span,
            hint="Kernel.output_shapes(*inputs) gives every output's shape",
        )
    if value.dtype != expected:
        raise ShapeError(
            f"out= for output '{info.name}' has dtype {value.dtype}, expected {expected.name}",
            info.span,
            hint=f"allocate it with dtype=np.{expected.name}",
        )
    if not value.flags.writeable:
        raise ShapeError(f"out= for output '{info.name}' is read-only", info.span)
    return value


__all__ = ["MAX_OUTPUT_BYTES", "check_output_sizes", "given_outputs"]
