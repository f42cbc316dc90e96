"""`Options.per_statement`: one statement's schedule changes, the others' do not, and the
results equal the reference evaluator's (odd sizes)."""

from __future__ import annotations

import numpy as np
import pytest

from compiler import pipeline
from compiler.diagnostics import OptionsError
from compiler.kernel import Kernel
from compiler.loops import print_stmt
from compiler.loops.ir import Block, Role, Store, walk
from compiler.options import Options

MLP = """def mlp(float(M, K) X, float(N, K) W, float(P, N) V) -> (H, Y) {
    H(m, n) +=! X(m, k) * W(n, k)
    Y(m, p) +=! H(m, n) * V(p, n)
}"""

# Statement 1 in the literal order, untiled: its loops differ from the model's.
OTHER = Options(innermost=None, register_tile=1, tile=())


def _pieces(options: Options) -> dict[str, list[str]]:
    """The printed top-level loop nests of the lowered def, by the outputs they write
    (a packing copy writes a temporary only: it goes with the next nest's output)."""
    ranged = Kernel(MLP, "mlp", target="interp").ranged
    body = pipeline.lower(ranged, options).function.body
    stmts = body.stmts if isinstance(body, Block) else (body,)
    out: dict[str, list[str]] = {}
    for s in stmts:
        written = sorted(
            {n.buffer.name for n in walk(s) if isinstance(n, Store) and n.buffer.role is Role.OUT}
        )
        out.setdefault(",".join(written), []).append(print_stmt(s))
    return out


def test_an_entry_changes_only_its_statement() -> None:
    default = _pieces(Options(fuse=False))
    whole = _pieces(Options(fuse=False, innermost=None, register_tile=1, tile=()))
    mixed = _pieces(Options(fuse=False, per_statement=((1, OTHER),)))
    assert set(mixed) == {"H", "Y"}
    assert default["Y"] != whole["Y"]  # the entry does change statement 1's loops
    assert mixed["H"] == default["H"]  # statement 0 keeps the model's loops
    assert mixed["Y"] == whole["Y"]  # statement 1 gets the entry's


def test_for_statement_merges_only_per_statement_fields() -> None:
    o = Options(threads=1, tile=(), per_statement=((1, Options(unroll=2, tile=(8,))),))
    assert o.for_statement(0) == Options(threads=1, tile=())
    assert o.for_statement(1) == Options(threads=1, unroll=2, tile=(8,))


@pytest.mark.parametrize("sizes", [(1, 1, 1, 1), (7, 5, 13, 3), (17, 31, 11, 29)])
def test_per_statement_results_equal_the_reference(sizes: tuple[int, ...]) -> None:
    m, k, n, p = sizes
    rng = np.random.default_rng(sum(sizes))
    x = rng.standard_normal((m, k)).astype(np.float32)
    w = rng.standard_normal((n, k)).astype(np.float32)
    v = rng.standard_normal((p, n)).astype(np.float32)
    ref = Kernel(MLP, "mlp", target="interp")(x, w, v)
    for entries in (
        ((1, OTHER),),
        ((0, OTHER), (1, Options(innermost="p", unroll=3, block=3, tile=(5, 7, 3)))),
        ((0, Options(register_tile=8, block=2, vector_bits=128)),),
    ):
        got = Kernel(MLP, "mlp", options=Options(per_statement=entries), cache=False)(x, w, v)
        for a, b in zip(got, ref, strict=True):
            np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-4)


def test_bad_entries_are_errors() -> None:
    with pytest.raises(OptionsError, match="whole def"):
        Options(per_statement=((0, Options(threads=2)),))
    with pytest.raises(OptionsError, match="twice"):
        Options(per_statement=((0, Options()), (0, Options(unroll=2))))
    with pytest.raises(OptionsError, match="pairs"):
        Options(per_statement=((-1, Options()),))
    with pytest.raises(OptionsError, match="statement 2, but the def has 2"):
        Kernel(MLP, "mlp", options=Options(per_statement=((2, OTHER),)), cache=False)
