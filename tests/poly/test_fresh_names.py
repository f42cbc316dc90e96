"""Names the poly passes invent (snapshot loops, gather's outer indices) never
capture a size or index of the def (compiler.names.NameSupply)."""

from __future__ import annotations

import numpy as np

import compiler

SNAPSHOT = """def f(float(s0, s1) A) -> (O) {
    O(i, j) = A(i, j)
    O(i, j) = O(s0 - 1 - i, s1 - 1 - j) + O(i, j)
}"""


def test_snapshot_loops_skip_size_names() -> None:
    """The copy loops of an in-place update were `s0, s1`: with sizes named so, the
    loop IR bound `s0` twice (an InternalError)."""
    a = np.arange(12, dtype=np.float32).reshape(3, 4)
    want = compiler.define(SNAPSHOT, target="interp")(a)[0]
    got = compiler.define(SNAPSHOT, cache=False)(a)[0]
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(want, np.full((3, 4), 11.0))


def test_gather_outer_names_skip_the_defs_names() -> None:
    """Gather names a rewritten output dimension `y`, `x`, ...: here `y` and `x` are
    sizes and `z` a tensor, so it must pick other names, and the result is right."""
    src = "def f(float(y, x) z) -> (O) { O(i + j) +=! z(i, j) }"
    a = np.arange(12, dtype=np.float64).reshape(3, 4)
    k = compiler.define(src.replace("float", "double"), cache=False)
    want = compiler.define(src.replace("float", "double"), target="interp")(a)[0]
    np.testing.assert_allclose(k(a)[0], want)
    gathered = compiler.pipeline.run(src, upto="gather").checked.definition
    lhs = gathered.stmts[-1].lhs.args[0]
    assert lhs.name not in {"x", "y", "z", "i", "j"}
