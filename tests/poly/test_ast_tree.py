"""A box's loops built without isl's AST builder (`poly.ast_tree.box_tree`) are the
loops isl builds, and every other domain is left to isl."""

from __future__ import annotations

from pathlib import Path

import islpy as isl
import pytest

from compiler import pipeline
from compiler.cuda.gpu_lower import lower_gpu
from compiler.poly import ast_tree, astgen
from compiler.poly.ast_tree import For, Mark, User, box_tree

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = sorted((ROOT / "examples").glob("*.tc"))

CONTEXT = isl.Set("[N, K] -> { : 0 < N <= 1000 and 0 < K <= 1000 }")
POSITIVE = isl.Set("[N, K] -> { : N > 0 and K > 0 }")


def _isl_tree(domain: str, order: tuple[str, ...]) -> ast_tree.Tree:
    """isl's AST of `domain` in `order`, through the same builder as `build_ast`."""
    d = isl.Set(domain).gist_params(CONTEXT)
    sched = isl.Schedule.from_domain(isl.UnionSet.from_set(d))
    node = sched.get_root().child(0)
    node = node.insert_partial_schedule(astgen._band(d, order))
    ids = isl.IdList.alloc(isl.DEFAULT_CONTEXT, len(order))
    for name in order:
        ids = ids.add(isl.Id(name))
    build = isl.AstBuild.from_context(POSITIVE).set_iterators(ids)
    return ast_tree.from_isl(build.node_from_schedule(node.get_schedule()))


@pytest.mark.parametrize(
    "domain, order",
    [
        ("[N, K] -> { S[i, k] : 0 <= i < N and 0 <= k < K }", ("i", "k")),
        ("[N, K] -> { S[i, k] : 0 <= i < N and 0 <= k < K }", ("k", "i")),
        ("[N, K] -> { S[i, k] : 0 <= i <= N + K and 0 <= k < K }", ("i", "k")),
        ("[N, K] -> { S[i, k] : K - 1 <= i < N + K - 1 and 2 <= k < K + 2 }", ("k", "i")),
        ("[N, K] -> { S[i] : -3 <= i < N }", ("i",)),
        # loops that may not run: isl writes no guard, the bounds keep them from running
        ("[N, K] -> { S[i] : 0 <= i < N - K }", ("i",)),
        ("[N, K] -> { S[i, k] : 0 <= i < N and 0 <= k < K - N }", ("i", "k")),
        # conditions on the sizes alone that the context does not imply: one guard
        ("[N, K] -> { S[i] : 0 <= i < N and K >= 3 }", ("i",)),
        ("[N, K] -> { S[i, k] : 0 <= i < N and 0 <= k < K and 3K >= 2N + 5 }", ("k", "i")),
        ("[N, K] -> { S[i] : 0 <= i < N and K >= 3 and N <= 2K + 1 }", ("i",)),
        # ...and those it implies: none
        ("[N, K] -> { S[i] : 0 <= i < N and K <= 1000 }", ("i",)),
    ],
)
def test_a_box_is_the_tree_isl_builds(domain: str, order: tuple[str, ...]) -> None:
    tree = box_tree(isl.Set(domain), CONTEXT, POSITIVE, order, None)
    assert tree is not None
    assert tree == _isl_tree(domain, order)


def test_the_mark_sits_before_its_loop() -> None:
    domain = isl.Set("[N, K] -> { S[i, k] : 0 <= i < N and 0 <= k < K }")
    tree = box_tree(domain, CONTEXT, POSITIVE, ("i", "k"), 1)
    assert isinstance(tree, For) and isinstance(tree.body, Mark)
    inner = tree.body.child
    assert isinstance(inner, For) and inner.var == "k" and isinstance(inner.body, User)
    assert isinstance(box_tree(domain, CONTEXT, POSITIVE, ("i", "k"), 0), Mark)


@pytest.mark.parametrize(
    "domain, why",
    [
        ("[N, K] -> { S[i, k] : 0 <= i < N and 0 <= k <= i }", "a bound on another loop"),
        ("[N, K] -> { S[i, k] : 0 <= i < N and k = K }", "an equality"),
        ("[N, K] -> { S[i] : 0 <= 2i < N }", "a coefficient of 2"),
        ("[N, K] -> { S[i] : 0 <= i < N and 0 <= i < K }", "two upper bounds"),
        ("[N, K] -> { S[i] : 0 <= i < N or N + 5 <= i < N + 9 }", "two pieces"),
        ("[N, K] -> { S[i] : exists (e : i = 2e and 0 <= i < N) }", "a stride"),
        ("[N, K] -> { S[i] : K <= i <= K }", "a single iteration"),
    ],
)
def test_any_other_domain_is_left_to_isl(domain: str, why: str) -> None:
    assert (
        box_tree(
            isl.Set(domain),
            CONTEXT,
            POSITIVE,
            ("i", "k")[: isl.Set(domain).dim(isl.dim_type.set)],
            None,
        )
        is None
    ), why


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.stem)
def test_every_nest_of_the_examples_lowers_as_through_isl(
    path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each nest of each example and its gradient: the tree `nest_tree` gives (built
    directly for boxes) equals the conversion of isl's AST; most nests are boxes."""
    seen = {"box": 0, "nests": 0}
    nest_tree = astgen.nest_tree
    box = ast_tree.box_tree

    def counted_box(*args: object) -> ast_tree.Tree | None:
        tree = box(*args)  # type: ignore[arg-type]
        seen["box"] += tree is not None
        return tree

    def compared(nest, context, tiled):  # type: ignore[no-untyped-def]
        before = seen["box"]
        tree = nest_tree(nest, context, tiled)
        # a box's inner loops run in every outer iteration or in none (their bounds are
        # sizes alone): the box is isl's tree as isl builds it exploiting nested bounds,
        # without the guards it adds otherwise (`astgen.build_ast`, fuzz seed 71871)
        boxed = seen["box"] > before
        want = ast_tree.from_isl(
            astgen.build_ast(nest, context, tiled, exploit=True if boxed else None)
        )
        if nest.accumulate:  # both under the same guard (`ast_tree.nonempty_guard`)
            positive = astgen._positive_sizes(context)
            want = ast_tree.nonempty_guard(want, nest.domain, context, positive)
        assert tree == want
        seen["nests"] += 1
        return tree

    monkeypatch.setattr(ast_tree, "box_tree", counted_box)
    monkeypatch.setattr(astgen, "nest_tree", compared)
    source = path.read_text()
    pipeline.run(source, upto="lower")
    gradient = pipeline.run(source, upto="gather", grad=True)
    pipeline.lower(gradient)
    lower_gpu(gradient)  # the CUDA target's nests, through the same trees
    assert seen["nests"] > 0
    if path.stem in ("conv2d", "matmul", "softmax"):
        assert seen["box"] > 0
