"""poly.astgen: golden loop nests, structure (parallel outer loop, register
accumulation, exact non-rectangular bounds) and verification of every lowering."""

from __future__ import annotations

from pathlib import Path

import pytest

from compiler import loops as L
from compiler.cpu.model import lower, lower_kernel
from compiler.frontend.check import check_def
from compiler.frontend.parser import parse
from compiler.options import Options
from compiler.poly.astgen import ERROR_BUFFER
from compiler.poly.ranges import infer_ranges

# one register tile per nest: no versions for fewer rows than its block (conftest)
pytestmark = pytest.mark.usefixtures("no_few_rows")

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"

GOLDEN = {
    "matmul": (EXAMPLES / "matmul.tc").read_text(),
    "conv2d_bias": (EXAMPLES / "conv2d.tc").read_text(),
    "strided_conv": (EXAMPLES / "strided_conv.tc").read_text(),
    "softmax": (EXAMPLES / "softmax.tc").read_text(),
    "non_rectangular": "def f(float(N) A) -> (O) { O(i) +=! A(j) where i in 0:N, j in 0:i + 1 }",
    "init_and_reduction": "def f(float(N, K) A) -> (O) { O(i) max=! A(i - 1, k) }",
    "scatter": "def f(float(N) A, float(K) W) -> (O) { O(i + k) +=! A(i) * W(k) }",
    "indirect": "def f(float(V, D) E, int32(N) idx) -> (O) { O(n, d) = E(idx(n), d) }",
    "step_two": "def f(float(N) A) -> (O) { O(i) +=! A(j) where i in 0:N, j in 0:N, (j - i) % 2 in 0:1 }",
}


LITERAL = Options(innermost=None)


def _lower(src: str, options: Options | None = None) -> L.Function:
    return lower(infer_ranges(check_def(parse(src).get())), options)


@pytest.mark.parametrize("name", sorted(GOLDEN))
def test_golden_loop_nest(name: str, golden) -> None:  # noqa: ANN001
    f = _lower(GOLDEN[name])
    L.verify(f)
    golden.check(f"lowering/{name}.txt", L.print_function(f) + "\n")


@pytest.mark.parametrize("name", ["matmul", "conv2d_bias"])
def test_golden_literal_order(name: str, golden) -> None:  # noqa: ANN001
    f = _lower(GOLDEN[name], LITERAL)
    L.verify(f)
    golden.check(f"lowering/{name}_literal.txt", L.print_function(f) + "\n")


def _loops(s: L.Stmt) -> list[L.For]:
    found: list[L.For] = []

    class _V(L.Visitor):
        def visit_For(self, node: L.For) -> None:
            found.append(node)
            self.generic_visit(node)

    _V().visit(s)
    return found


def test_outer_loop_is_parallel_and_reduction_is_in_a_register() -> None:
    f = _lower(GOLDEN["matmul"], LITERAL)
    assert isinstance(f.body, L.For) and f.body.kind is L.LoopKind.PARALLEL
    assert [lp.kind for lp in _loops(f.body)[1:]] == [L.LoopKind.SERIAL] * 2
    inner = f.body.body
    assert isinstance(inner, L.For) and isinstance(inner.body, L.Local)
    block = inner.body.body
    assert isinstance(block, L.Block) and isinstance(block.stmts[-1], L.Store)


def test_scatter_has_no_parallel_loop() -> None:
    f = _lower(GOLDEN["scatter"])
    assert all(lp.kind is L.LoopKind.SERIAL for lp in _loops(f.body)[1:])


def test_non_rectangular_bound_reads_the_outer_variable() -> None:
    f = _lower(GOLDEN["non_rectangular"])
    inner = [lp for lp in _loops(f.body) if lp.var == "j"]
    assert inner and "i" in L.print_expr(inner[0].hi)


def test_indirect_read_gets_an_error_buffer_and_a_check() -> None:
    lowered = lower_kernel(infer_ranges(check_def(parse(GOLDEN["indirect"]).get())))
    assert lowered.function.buffers[-1].name == ERROR_BUFFER
    assert [(c.access.name, c.dim) for c in lowered.checks] == [("E", 0)]


def test_every_example_verifies() -> None:
    for path in sorted(EXAMPLES.glob("*.tc")):
        for d in parse(path.read_text()).defs:
            L.verify(lower(infer_ranges(check_def(d))))
