"""tools.same_code: digests of the generated code, equal for equal code, and a diff
that names what changed."""

from __future__ import annotations

import json
from pathlib import Path

from tools.same_code import _diff, digests

SRC = "def f(float(N) A) -> (O) { O(i) = A(i) * 2.0 }"


def test_digests_are_deterministic_and_tell_codes_apart() -> None:
    a = digests(None, SRC, {"N": 5}, 0, grad=True)
    assert a == digests(None, SRC, {"N": 5}, 0, grad=True)
    assert {"t1", "t2", "rand", "cuda", "grad", "grad-t1"} <= set(a)
    assert not any(v.startswith("error") for v in a.values())
    b = digests(None, SRC.replace("2.0", "3.0"), {"N": 5}, 0, grad=True)
    assert a["t1"] != b["t1"] and a["cuda"] != b["cuda"]


def test_an_error_is_a_digest_and_the_diff_names_the_changed_part(tmp_path: Path) -> None:
    bad = digests(None, "def f(float(N) A) -> (O) { O(i) = B(i) }", {"N": 5}, 0, grad=False)
    assert next(iter(bad.values())).startswith("error")
    one, two = tmp_path / "one.json", tmp_path / "two.json"
    one.write_text(json.dumps({"seed 1": {"t1": "x", "cuda": "y"}}))
    two.write_text(json.dumps({"seed 1": {"t1": "x", "cuda": "z"}}))
    assert _diff(str(one), str(one)) == 0
    assert _diff(str(one), str(two)) == 1
    assert _diff(str(one), str(tmp_path / "missing.json")) == 2
