"""The `llvm` stage of tools.corpus: target="llvm" must equal target="interp".

The same random inputs as the `interp` stage (`tools.corpus_interp`) run through
both targets and every output is compared (rtol 1e-4 for a float32 output, 1e-10 for float64).
A float32 output's absolute tolerance is 1e-4 of its largest finite magnitude: a
float32 sum of thousands of terms that cancels to a small element differs with the
order of its terms alone (conv_reorder_old_api's `d_W1`, 12544 terms of about 250 in
all: the CUDA warp reduction's sum was 7 times closer to the float64 value than the
evaluator's, and 1e-3 away from it). The float64 variant checks to 1e-10.
A def whose float inputs are all float32 runs a second time with them declared
float64 (`double`), when that variant still checks; otherwise float32 only.
"""

from __future__ import annotations

import dataclasses
import warnings
import zlib
from collections.abc import Mapping
from typing import Any

import numpy as np

from compiler.diagnostics import InternalError, TCError
from compiler.frontend.ast import ScalarType
from compiler.frontend.parser import parse
from compiler.frontend.printer import print_def
from tools.corpus_interp import _input


def run_llvm(
    text: str, entry: Mapping[str, Any], target: str = "llvm", options: Any = None
) -> tuple[str, ...]:
    """Compare `target` (llvm, or cuda-emulated for tools.corpus_cuda) with interp on
    `entry`, compiled with `options` (None: the target's defaults); raise on a mismatch;
    notes for the report."""
    notes = []
    _compare(text, entry, float64=False, target=target, options=options)
    wide = _as_float64(text, entry["def"])
    if wide is not None:
        try:
            _compare(wide, entry, float64=True, target=target, options=options)
        except TCError as err:
            notes.append(f"{target}: float64 variant not run: {err.message}")
    return tuple(notes)


def _as_float64(text: str, name: str) -> str | None:
    definition = parse(text).get(name)
    floats = [p for p in definition.params if p.dtype.is_float]
    if not floats or any(p.dtype is not ScalarType.FLOAT32 for p in floats):
        return None
    params = tuple(
        dataclasses.replace(p, dtype=ScalarType.FLOAT64) if p.dtype.is_float else p
        for p in definition.params
    )
    return print_def(dataclasses.replace(definition, params=params))


def _compare(
    text: str, entry: Mapping[str, Any], *, float64: bool, target: str, options: Any = None
) -> None:
    from compiler.kernel import define

    ref = define(text, entry["def"])
    fast = define(text, entry["def"], target=target, options=options)
    rng = np.random.default_rng(zlib.crc32(f"{entry['file']}:{entry['def']}".encode()))
    args = []
    for t, (name, shape) in zip(
        ref.ranged.checked.inputs, entry.get("inputs", {}).items(), strict=False
    ):
        a = _input(name, tuple(shape), entry, rng)
        args.append(a.astype(np.dtype(t.dtype.value)) if float64 and a.dtype.kind == "f" else a)
    shapes = ref.output_shapes(*args)
    out = {
        name: rng.standard_normal(shapes[name]).astype(
            np.dtype(ref.ranged.checked.tensor(name).dtype.value)
        )
        for name in entry.get("preinitialized_outputs", {})
    }
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        want = ref(*args, out={k: v.copy() for k, v in out.items()} or None)
        got = fast(*args, out={k: v.copy() for k, v in out.items()} or None)
    names = [t.name for t in ref.ranged.checked.outputs]
    for name, w, g in zip(names, want, got, strict=True):
        if w.shape != g.shape or w.dtype != g.dtype:
            raise InternalError(
                f"{target}: output '{name}' is {g.dtype}{g.shape}, interp {w.dtype}{w.shape}"
            )
        rtol = 1e-10 if w.dtype == np.float64 else 1e-4
        atol = rtol * _scale(w) if w.dtype == np.float32 else rtol
        if not np.allclose(g, w, rtol=rtol, atol=atol, equal_nan=True):
            worst = float(np.max(np.abs(g.astype(np.float64) - w.astype(np.float64))))
            raise InternalError(
                f"{target} differs from interp in output '{name}'"
                f"{' (float64 variant)' if float64 else ''}: max abs difference {worst:g}"
            )


def _scale(a: np.ndarray) -> float:
    """max(1, the largest finite magnitude of `a`)."""
    finite = np.abs(a[np.isfinite(a)])
    return max(1.0, float(finite.max())) if finite.size else 1.0
