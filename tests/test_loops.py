"""The loop IR: dtypes, visitor/mutator identity, verify's rules, printing, the interpreter."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from compiler.diagnostics import InternalError, ShapeError
from compiler.loops import (
    Alloc,
    Assign,
    BinOp,
    Block,
    Call,
    Cast,
    DType,
    FloorDiv,
    For,
    If,
    Let,
    Load,
    Local,
    Max,
    Min,
    Mod,
    Mutator,
    Role,
    Select,
    StmtMutator,
    VarRef,
    Visitor,
    print_expr,
    print_function,
    run_function,
    verify,
)
from tests.codegen.kit import (
    F32,
    I32,
    I64,
    add,
    bin_,
    buf,
    c,
    func,
    load,
    loop,
    mul,
    out,
    pfor,
    store,
    sub,
    v,
)
from tests.codegen.test_llvm import matmul


def conv_with_temp() -> object:
    Img, Wt = buf("I", F32, "H"), buf("W", F32, "K")
    Out, T = out("O", F32, sub(add("H", "K"), 1)), buf("T", F32, "H", role=Role.TEMP)
    acc = v("acc", F32)
    lo, hi = Max(c(0), add(sub("y", "H"), 1)), add(Min(sub("K", 1), v("y")), 1)
    guarded = Select(bin_(BinOp.GE, sub("y", "k"), 0), load(T, sub("y", "k")), c(0.0, F32))
    body = Local("acc", F32, c(0.0, F32), Block((
        loop("k", lo, hi, Assign("acc", add(acc, mul(guarded, load(Wt, "k")))), step=2),
        If(bin_(BinOp.GT, acc, c(0.0, F32)), store(Out, ("y",), acc), store(Out, ("y",), c(0.0, F32))),
    )))  # fmt: skip
    relu = loop(
        "h", 0, "H", Let("x", Call("tanh", (load(Img, "h"),)), store(T, ("h",), v("x", F32)))
    )
    return func(
        "conv1d",
        [Img, Wt, Out],
        "H K",
        Alloc(T, Block((relu, pfor("y", 0, add(sub("H", 1), "K"), body)))),
    )


def test_golden_prints(golden: object) -> None:
    golden.check("loops/matmul.txt", print_function(matmul(F32)))
    golden.check("loops/conv1d.txt", print_function(conv_with_temp()))


def test_printer_parenthesises_by_precedence() -> None:
    assert print_expr(mul(add("a", "b"), "c")) == "(a + b) * c"
    assert print_expr(sub("a", sub("b", "c"))) == "a - (b - c)"
    assert print_expr(sub(sub("a", "b"), "c")) == "a - b - c"
    assert print_expr(Cast(I32, add("a", c(-1)))) == "int32(a + -1)"
    assert print_expr(FloorDiv(v("a"), c(3, I64))) == "floordiv(a, 3)"


def test_dtypes_are_computed_from_children() -> None:
    x = load(buf("A", DType.FLOAT16, "N"), "i")
    assert x.dtype is DType.FLOAT16 and add(x, x).dtype is DType.FLOAT16
    assert bin_(BinOp.LT, x, x).dtype is DType.BOOL
    assert Cast(DType.UINT8, x).dtype is DType.UINT8 and Mod(v("a"), v("b")).dtype is I64
    assert DType.from_numpy(np.float32) is F32 and DType.UINT16.np == np.uint16
    assert DType.BOOL.bits == 1 and DType.INT16.bits == 16 and not DType.UINT8.is_signed


def test_mutator_keeps_unchanged_subtrees_identical() -> None:
    f = matmul(F32)
    assert Mutator().mutate(f) is f

    class RenameK(Mutator):
        def mutate_VarRef(self, node: VarRef) -> VarRef:
            return VarRef("kk") if node.name == "k" else node

        def mutate_For(self, node: For) -> For:
            node = self.generic_mutate(node)
            return (
                For("kk", node.lo, node.hi, node.step, node.body, node.kind)
                if node.var == "k"
                else node
            )

    g = RenameK().mutate(f)
    assert g is not f and g.buffers is f.buffers
    verify(g)
    assert "for (kk = 0; kk < K; kk += 1)" in print_function(g)
    # the store C[i, j] = acc under the reduction did not change: the same object
    assert g.body.body.body.body.stmts[1] is f.body.body.body.body.stmts[1]


def test_a_statement_mutator_leaves_expressions_alone() -> None:
    f = matmul(F32)
    seen: list[str] = []

    class Serial(StmtMutator):
        def mutate_VarRef(self, node: VarRef) -> VarRef:  # never reached
            seen.append(node.name)
            return VarRef("x")

        def mutate_For(self, node: For) -> For:
            node = self.generic_mutate(node)
            return For(node.var, node.lo, node.hi, node.step, node.body)

    g = Serial().mutate(f.body)
    assert not seen and g is not f.body
    assert "parallel" not in print_function(dataclasses.replace(f, body=g))
    # the loop bounds are the very same expression objects
    assert g.hi is f.body.hi and g.body.hi is f.body.body.hi


def test_visitor_reaches_every_load() -> None:
    names: list[str] = []

    class Loads(Visitor):
        def visit_Load(self, node: Load) -> None:
            names.append(node.buffer.name)
            self.generic_visit(node)

    Loads().visit(conv_with_temp())
    assert sorted(names) == ["I", "T", "W"]


A, OUT = buf("A", F32, "N"), out("O", F32, "N")


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (store(OUT, ("j",), load(A, "j")), "j is read but not bound"),
        (
            loop("i", 0, "N", store(OUT, ("i", "i"), load(A, "i"))),
            "1 dimensions but is indexed with 2",
        ),
        (loop("i", 0, "N", store(OUT, ("i",), add(load(A, "i"), c(1)))), "different dtypes"),
        (loop("i", 0, "N", Assign("i", c(0))), "not an enclosing Local"),
        (loop("i", 0, "N", store(OUT, ("i",), c(1.0, DType.FLOAT64))), "should be float32"),
        (loop("i", 0, "N", loop("i", 0, "N", store(OUT, ("i",), load(A, "i")))), "bound twice"),
        (loop("i", 0, "N", store(OUT, ("i",), Call("exp", (c(1),)))), "needs float"),
        (store(buf("Z", F32, 1, role=Role.OUT), (0,), c(0.0, F32)), "Z is not a parameter"),
        (loop("i", 0, "N", store(OUT, ("i",), c(300, DType.INT8))), "does not fit"),
        (loop("i", 0, v("x", F32), store(OUT, ("i",), c(0.0, F32))), "x is read but not bound"),
        (  # a load's index (checked once, as a child of the load)
            loop("i", 0, "N", store(OUT, ("i",), Load(A, (c(1.0, F32),)))),
            "index of A should be int64, found float32",
        ),
    ],
)
def test_verify_rejects(body: object, message: str) -> None:
    with pytest.raises(InternalError, match=message):
        verify(func("bad", [A, OUT], "N", body))


def test_verify_checks_a_shared_subexpression_again_in_another_scope() -> None:
    # one Load object read inside the loop (i bound) and after it (i unbound): verify
    # remembers the checks of an expression until a name leaves the scope
    read = load(A, "i")
    ok = loop("i", 0, "N", Block((store(OUT, ("i",), read), store(OUT, ("i",), read))))
    verify(func("shared", [A, OUT], "N", ok))
    bad = Block((ok, store(OUT, (c(0),), read)))
    with pytest.raises(InternalError, match="i is read but not bound"):
        verify(func("shared", [A, OUT], "N", bad))
    x = v("x", F32)
    mutable = Local("x", F32, c(0.0, F32), store(OUT, (c(0),), x))
    with pytest.raises(InternalError, match="x is read but not bound"):
        verify(func("after", [A, OUT], "N", Block((mutable, store(OUT, (c(0),), x)))))
    # checked outside a loop, read again inside it (a new name bound): still valid
    outer = load(A, c(0))
    inner = loop("i", 0, "N", store(OUT, ("i",), outer))
    verify(func("inner", [A, OUT], "N", Block((store(OUT, (c(0),), outer), inner))))


def test_node_invariants() -> None:
    with pytest.raises(InternalError, match="arguments"):
        Call("pow", (c(1.0, F32),))
    with pytest.raises(InternalError, match="positive"):
        For("i", c(0), c(4), 0, store(OUT, ("i",), c(0.0, F32)))


def test_interpreter_wraps_integers_and_catches_out_of_bounds_reads() -> None:
    A8, O8 = buf("A", DType.INT8, "N"), out("O", DType.INT8, "N")
    f = func(
        "wrap",
        [A8, O8],
        "N",
        loop("i", 0, "N", store(O8, ("i",), add(load(A8, "i"), c(100, DType.INT8)))),
    )
    o = np.zeros(2, np.int8)
    run_function(f, {"A": np.array([100, -100], np.int8), "O": o}, {"N": 2})
    assert o.tolist() == [-56, 0]
    g = func("oob", [A, OUT], "N", loop("i", 0, "N", store(OUT, ("i",), load(A, add("i", 1)))))
    with pytest.raises(InternalError, match="out of bounds"):
        run_function(g, {"A": np.zeros(3, np.float32), "O": np.zeros(3, np.float32)}, {"N": 3})
    with pytest.raises(ShapeError, match="needs shape"):
        run_function(g, {"A": np.zeros(3, np.float32), "O": np.zeros(4, np.float32)}, {"N": 3})


def test_conv_with_temp_strided_reduction_runs_the_same_everywhere() -> None:
    from tests.codegen.kit import run_both

    img = np.linspace(-1, 1, 9).astype(np.float32)
    w = np.array([0.5, -1.0, 2.0, 0.25], np.float32)
    t = np.tanh(img.astype(np.float64)).astype(np.float32)
    expected = np.zeros(12, np.float32)
    for y in range(12):
        total = np.float32(0)
        for k in range(max(0, y - 8), min(3, y) + 1, 2):
            total += t[y - k] * w[k]
        expected[y] = max(total, 0)
    arrays = {"I": img, "W": w, "O": np.zeros(12, np.float32)}
    mine, theirs = run_both(conv_with_temp(), arrays, {"H": 9, "K": 4})
    np.testing.assert_allclose(mine["O"], expected, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(theirs["O"], expected, rtol=1e-5, atol=1e-6)
