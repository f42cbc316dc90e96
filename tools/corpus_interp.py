"""The `interp` stage of tools.corpus: run an entry through `compiler.kernel.define`.

Inputs are random (seeded per entry), shaped and typed as the manifest says
(`inputs`, `dtypes`, `scalar_args`), and follow its `input_values` notes where
they constrain values: explicit data, "ones", "zeros", "all 1.5", "randperm(N)",
"integers in [lo, hi)" with bounds written in size parameters, "0/1 values",
"positive values". Integer inputs without a note get values in {0, 1}, which is
in range for any index. Outputs named in `preinitialized_outputs` are passed in
with `out=`. Negative and unmerged-PR entries are not run.

A run that raises a TCError fails the stage. An output shape that differs from
the manifest's `outputs` is recorded as a warning, not a failure: tcc sizes an
output by the upper bound of its index range (`compiler.frontend.checked`), where
the manifest gives TC's extent, so ranges that start above 0 legitimately differ.
"""

from __future__ import annotations

import re
import warnings
import zlib
from collections.abc import Mapping
from typing import Any

import numpy as np

SKIPPED_CATEGORIES = frozenset({"negative", "unmerged_pr"})


def run_interp(
    text: str, entry: Mapping[str, Any]
) -> tuple[dict[str, tuple[int, ...]], tuple[str, ...]]:
    """Run `entry` of the corpus on random inputs: its output shapes and notes."""
    from compiler.kernel import define

    kernel = define(text, entry["def"])
    rng = np.random.default_rng(zlib.crc32(f"{entry['file']}:{entry['def']}".encode()))
    args = [
        _input(name, tuple(shape), entry, rng) for name, shape in entry.get("inputs", {}).items()
    ]
    shapes = kernel.output_shapes(*args)
    out = {
        name: rng.standard_normal(shapes[name]).astype(
            np.dtype(entry.get("output_dtypes", {}).get(name, "float32"))
        )
        for name in entry.get("preinitialized_outputs", {})
    }
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # accumulating without out= is the entry's choice
        results = kernel(*args, out=out or None)
    names = [t.name for t in kernel.ranged.checked.outputs]
    got = {name: tuple(r.shape) for name, r in zip(names, results, strict=True)}
    notes = tuple(
        f"interp: output '{name}' has shape {got.get(name)}, the manifest says {tuple(shape)}"
        for name, shape in entry.get("outputs", {}).items()
        if got.get(name) != tuple(shape)
    )
    return got, notes


def _input(
    name: str, shape: tuple[int, ...], entry: Mapping[str, Any], rng: np.random.Generator
) -> np.ndarray:
    dtype = np.dtype(entry.get("dtypes", {}).get(name, "float32"))
    if not shape and name in entry.get("scalar_args", {}):
        return np.asarray(entry["scalar_args"][name], dtype=dtype)
    spec = entry.get("input_values", {}).get(name)
    if isinstance(spec, list):
        return np.asarray(spec, dtype=dtype).reshape(shape)
    if isinstance(spec, str):
        value = _from_note(spec, shape, dtype, entry.get("size_params", {}), rng)
        if value is not None:
            return value
    if np.issubdtype(dtype, np.integer):
        return rng.integers(0, 2, size=shape).astype(dtype)
    return rng.standard_normal(shape).astype(dtype)


def _from_note(
    note: str,
    shape: tuple[int, ...],
    dtype: np.dtype,
    sizes: Mapping[str, int],
    rng: np.random.Generator,
) -> np.ndarray | None:
    lowered = note.lower()
    if lowered.startswith("ones"):
        return np.ones(shape, dtype)
    if lowered.startswith("zeros"):
        return np.zeros(shape, dtype)
    if match := re.match(r"all ([\d.]+)", lowered):
        return np.full(shape, float(match.group(1)), dtype)
    if match := re.match(r"randperm\((\d+)\)", lowered):
        return rng.permutation(int(match.group(1))).astype(dtype).reshape(shape)
    if match := re.search(r"integers in \[([^,\]]+),\s*([^)\]]+)([)\]])", note):
        lo = _size_expr(match.group(1), sizes)
        hi = _size_expr(match.group(2), sizes) + (1 if match.group(3) == "]" else 0)
        if lo is not None and hi is not None and lo < hi:
            return rng.integers(lo, hi, size=shape).astype(dtype)
    if "0/1" in lowered:
        return rng.integers(0, 2, size=shape).astype(dtype)
    if "positive" in lowered:
        return (rng.random(shape) + 0.1).astype(dtype)
    return None


def _size_expr(text: str, sizes: Mapping[str, int]) -> int | None:
    """An integer expression of sizes like `E-1-D` (only + and - of names and ints)."""
    total, sign = 0, 1
    for token in re.findall(r"[A-Za-z_]\w*|\d+|[+-]|\S", text.split("=")[0]):
        if token in "+-":
            sign = 1 if token == "+" else -1
        elif token.isdigit():
            total += sign * int(token)
        elif token in sizes:
            total += sign * int(sizes[token])
        else:
            return None
    return total
