"""Range inference on the TC corpus's `test_inference.cc` cases (reads the corpus
deliberately; skipped where /work/shared/corpus/tc is absent).

Expected mins/extents are TC's symbolic strings from the manifest, evaluated with a
tiny evaluator at a few size assignments. tcc differs from TC on purpose in one way:
an output's shape is `hi` (= min + extent), not the extent, and an output index that
is negative for every size is an error (TC wrote out of bounds). Those cases say so.
"""

from __future__ import annotations

import ast as pyast
import json
import re
from pathlib import Path

import pytest

from compiler.diagnostics import RangeError, SemanticError
from compiler.frontend.check import check_def
from compiler.frontend.parser import parse
from compiler.poly.ranges import infer_ranges
from compiler.shapes import eval_bound_expr

CORPUS = Path("/work/shared/corpus/tc")
pytestmark = pytest.mark.skipif(not CORPUS.is_dir(), reason="TC corpus not available")

# TC min is negative for every size here: tcc rejects the def (RangeError).
NEGATIVE_MIN = {"inf_shift1d_plus.tc"}
# `where i in 8:4`: TC silently gives extent -4; tcc reports the empty range.
EMPTY_WHERE = {"inf_empty_where.tc"}


def _manifest() -> list[dict]:
    if not CORPUS.is_dir():
        return []
    return json.loads((CORPUS / "manifest.json").read_text())


def _evaluate(text: str, sizes: dict[str, int]) -> int:
    """TC's printed bound: + - * / (floor, as Halide), min, max, names, integers."""
    tree = pyast.parse(text.strip(), mode="eval").body

    def ev(n: pyast.AST) -> int:
        if isinstance(n, pyast.Constant):
            return int(n.value)
        if isinstance(n, pyast.Name):
            return sizes[n.id]
        if isinstance(n, pyast.UnaryOp) and isinstance(n.op, pyast.USub):
            return -ev(n.operand)
        if isinstance(n, pyast.BinOp):
            a, b = ev(n.left), ev(n.right)
            ops = {pyast.Add: a + b, pyast.Sub: a - b, pyast.Mult: a * b}
            return a // b if isinstance(n.op, pyast.Div) else ops[type(n.op)]
        if isinstance(n, pyast.Call) and n.func.id in ("min", "max"):  # type: ignore[attr-defined]
            return (min if n.func.id == "min" else max)(*(ev(a) for a in n.args))  # type: ignore[attr-defined]
        raise ValueError(f"cannot evaluate {pyast.dump(n)}")

    return ev(tree)


def _split(vector: str) -> list[str]:
    return [part for part in re.split(r"[;]", vector.strip().strip("[]")) if part.strip()]


def _size_assignments(entry: dict) -> list[dict[str, int]]:
    base = dict(entry.get("size_params", {}))
    bigger = {k: v + 3 for k, v in base.items()}
    return [base, bigger, {k: v * 2 + 1 for k, v in base.items()}]


INFERENCE = [e for e in _manifest() if "expected_inference" in e and e["file"].startswith("inf_")]
NEGATIVES = [e for e in _manifest() if str(e.get("expected_error", "")).startswith("tc2halide")]


@pytest.mark.parametrize("entry", INFERENCE, ids=lambda e: e["file"])
def test_expected_inference(entry: dict) -> None:
    src = (CORPUS / entry["file"]).read_text()
    if entry["file"] in NEGATIVE_MIN | EMPTY_WHERE:
        with pytest.raises(RangeError):
            infer_ranges(check_def(parse(src).get(entry["def"])))
        return
    ranged = infer_ranges(check_def(parse(src).get(entry["def"])))
    expected = entry["expected_inference"]
    for output, mins in expected["output_mins"].items():
        extents = expected["output_extents"][output]
        if extents.startswith("same as "):
            extents = expected["output_extents"][extents.removeprefix("same as ")]
        bounds = ranged.bounds_of(output)
        for sizes in _size_assignments(entry):
            for dim, (lo_text, ext_text) in enumerate(
                zip(_split(mins), _split(extents), strict=True)
            ):
                lo = eval_bound_expr(bounds[dim].lo, sizes)
                hi = eval_bound_expr(bounds[dim].hi, sizes)
                want_lo = _evaluate(lo_text, sizes)
                want_extent = _evaluate(ext_text, sizes)
                assert lo == want_lo, f"{output}[{dim}] min at {sizes}"
                # tcc's shape is hi = min + extent (TC allocated `extent` elements)
                assert hi - lo == want_extent, f"{output}[{dim}] extent at {sizes}"


@pytest.mark.parametrize("entry", NEGATIVES, ids=lambda e: e["file"])
def test_inference_negatives(entry: dict) -> None:
    src = (CORPUS / entry["file"]).read_text()
    try:
        checked = check_def(parse(src).get(entry["def"]))
    except SemanticError:
        return  # rejected earlier by tcc's stricter checker: also a failure, with a span
    if "Required precondition will not be checked" in entry["expected_error"]:
        ranged = infer_ranges(checked)
        assert ranged.warnings, "expected an unprovable-precondition warning"
        assert "checked at run time" in ranged.warnings[0].message
    else:
        with pytest.raises(RangeError):
            infer_ranges(checked)
