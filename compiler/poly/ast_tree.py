"""The AST of one nest as a small tree of loop-IR nodes: from isl's AST builder, or,
for a box, built directly.

Requires: isl's AST of a nest (`poly.astgen.build_ast`), or a nest's domain, the size
context and the order of its loops.
Ensures: a `Tree` (`For`, `If`, `Block`, `Mark`, `User`) whose bounds and arguments
are loop-IR expressions. `from_isl(node)` converts isl's AST. `box_tree(...)` gives,
for a domain that is a box under the context, the tree isl builds for it, and None
for any other domain (the caller then asks isl).

Why: isl's AST builder took 5 to 15 ms a nest even for a box (a conv2d gradient: 9
nests, 70 ms of a front end of 0.47 s before LLVM can start). A box domain is one
basic set without existential variables or equalities, each of its constraints on one
loop variable with coefficient 1 or -1 and the sizes, exactly one lower and one upper
bound for each variable. isl builds for it the loops in band order with those
bounds, and the statement called with the loop variables, when no loop is a single
iteration (isl writes its value instead; such a domain is left to isl). The domain's
constraints on the sizes alone that the context does not imply (a version of a
statement chosen by the sizes, `cpu.pad`) become one `If` around the loops, its
condition isl's expression of them; a loop that may not run needs no guard, its
bounds keep it from running. The bound expressions are isl's own (its AST expression
builder), so a box's loops are the ones isl's AST gives (tests compare them on
every nest of the examples' defs and gradients).

Example: `{ S[m, k] : 0 <= m < M and 0 <= k < K }` in the order `(m, k)` with a mark
after `m` is `For(m, 0, M, Mark(For(k, 0, K, User((m, k)))))`.
"""

from __future__ import annotations

from dataclasses import dataclass

import islpy as isl

from compiler import loops as L
from compiler.diagnostics import InternalError, RangeError
from compiler.poly.lower_expr import I64, const


@dataclass(frozen=True)
class For:
    var: str
    lo: L.Expr
    hi: L.Expr  # exclusive
    step: int
    body: Tree


@dataclass(frozen=True)
class If:
    cond: L.Expr
    then: Tree
    otherwise: Tree | None


@dataclass(frozen=True)
class Block:
    children: tuple[Tree, ...]


@dataclass(frozen=True)
class Mark:
    """The `reduce` mark: a register accumulator around its child. `values`: each
    domain variable fixed where the mark stands (the outer band's), as an expression
    of the enclosing loops valid for the whole child. The child's statements may say
    less: under a branch isl writes what it knows there (`y == 0` ? `S(0, l, i)`)."""

    child: Tree
    values: tuple[tuple[str, L.Expr], ...] = ()


@dataclass(frozen=True)
class User:
    """The statement at the instance whose loop variables are `args` (domain order)."""

    args: tuple[L.Expr, ...]


Tree = For | If | Block | Mark | User


def first_user(tree: Tree) -> User | None:
    """The first statement in `tree` (program order)."""
    if isinstance(tree, User):
        return tree
    if isinstance(tree, For):
        return first_user(tree.body)
    if isinstance(tree, If):
        return first_user(tree.then)
    if isinstance(tree, Mark):
        return first_user(tree.child)
    for child in tree.children:
        found = first_user(child)
        if found is not None:
            return found
    return None


# ------------------------------------------------------------------ from isl


def from_isl(node: isl.AstNode) -> Tree:
    """isl's AST `node` as a Tree."""
    kind = node.get_type()
    if kind == isl.ast_node_type.for_:
        return _for(node)
    if kind == isl.ast_node_type.if_:
        otherwise = from_isl(node.if_get_else_node()) if node.if_has_else_node() else None
        cond = _truth(ast_expr(node.if_get_cond()))
        return If(cond, from_isl(node.if_get_then_node()), otherwise)
    if kind == isl.ast_node_type.block:
        children = node.block_get_children()
        return Block(tuple(from_isl(children.get_at(k)) for k in range(children.n_ast_node())))
    if kind == isl.ast_node_type.mark:
        return _mark(node)
    if kind == isl.ast_node_type.user:
        call = node.user_get_expr()
        return User(tuple(ast_expr(call.get_op_arg(k)) for k in range(1, call.get_op_n_arg())))
    raise InternalError(f"unexpected isl AST node {node.to_C_str()}")


def annotate_marks(build: isl.AstBuild) -> tuple[isl.AstBuild, object]:
    """`build` that gives each mark node its `Mark.values` (as an annotation), and the
    callback's handle (keep it alive while `build` builds)."""
    return build.set_after_each_mark(_annotated)


def _annotated(node: isl.AstNode, build: isl.AstBuild) -> isl.AstNode:
    """The mark `node` with the domain variables that the schedule so far fixes, each
    as isl's expression of it at the mark (where only the enclosing loops are known),
    and the condition under which the enclosing loops' iteration has instances.

    The condition: isl lets an iteration of a loop outside the mark run with no
    instance inside (the guard it hoists out of several pieces is a hull of theirs),
    and the accumulator's store at the mark then writes an element the statement
    never writes, past the output's end too (fuzz seed 71871: `y` up to `5 * M - 5`
    where the domain stops at `3 * N + 2 * M - 9`). isl's expression of the set of
    iterations with instances, simplified by what the build knows there (the bounds
    and guards it generates: `build_ast` turns off `exploit_nested_bounds`, under
    which isl leaves out of an outer loop a bound that only its inner loops enforce),
    is 1 when the loops already run exactly those."""
    back = isl.Map.from_union_map(build.get_schedule()).reverse()  # [loops] -> S[vars]
    n = back.dim(isl.dim_type.out)
    values = []
    for k in range(n):
        one = back.project_out(isl.dim_type.out, k + 1, n - k - 1)
        one = one.project_out(isl.dim_type.out, 0, k)
        if one.is_single_valued():
            value = build.expr_from_pw_aff(isl.PwMultiAff.from_map(one).get_at(0))
            values.append((back.get_dim_name(isl.dim_type.out, k), value))
    guard = build.expr_from_set(back.domain())
    return node.set_annotation(isl.Id("values", user=(tuple(values), guard)))


def _mark(node: isl.AstNode) -> Tree:
    try:
        values, guard = node.get_annotation().user
    except isl.Error:  # built without `annotate_marks`
        values, guard = (), None
    mark = Mark(from_isl(node.mark_get_node()), tuple((n, ast_expr(v)) for n, v in values))
    if guard is None:
        return mark
    condition = _truth(ast_expr(guard))
    if isinstance(condition, L.Const) and condition.value:
        return mark
    return If(condition, mark, None)


def _for(node: isl.AstNode) -> For:
    var = node.for_get_iterator().get_id().get_name()
    cond = node.for_get_cond()
    if cond.get_op_type() not in (isl.ast_expr_op_type.le, isl.ast_expr_op_type.lt) or (
        ast_expr(cond.get_op_arg(0)) != L.VarRef(var)
    ):
        raise InternalError(f"unexpected loop condition {cond.to_C_str()}")
    hi = ast_expr(cond.get_op_arg(1))
    if cond.get_op_type() == isl.ast_expr_op_type.le:
        hi = simplify(L.Bin(L.BinOp.ADD, hi, const(1, I64)))
    step = int(node.for_get_inc().get_val().to_python())
    return For(var, ast_expr(node.for_get_init()), hi, step, from_isl(node.for_get_body()))


_BIN = {
    isl.ast_expr_op_type.add: L.BinOp.ADD,
    isl.ast_expr_op_type.sub: L.BinOp.SUB,
    isl.ast_expr_op_type.mul: L.BinOp.MUL,
    isl.ast_expr_op_type.div: L.BinOp.DIV,  # exact division
    isl.ast_expr_op_type.eq: L.BinOp.EQ,
    isl.ast_expr_op_type.le: L.BinOp.LE,
    isl.ast_expr_op_type.lt: L.BinOp.LT,
    isl.ast_expr_op_type.ge: L.BinOp.GE,
    isl.ast_expr_op_type.gt: L.BinOp.GT,
    isl.ast_expr_op_type.and_: L.BinOp.AND,
    isl.ast_expr_op_type.and_then: L.BinOp.AND,
    isl.ast_expr_op_type.or_: L.BinOp.OR,
    isl.ast_expr_op_type.or_else: L.BinOp.OR,
}
_LOGIC = (
    isl.ast_expr_op_type.and_,
    isl.ast_expr_op_type.and_then,
    isl.ast_expr_op_type.or_,
    isl.ast_expr_op_type.or_else,
)
_FLOOR = (isl.ast_expr_op_type.fdiv_q, isl.ast_expr_op_type.pdiv_q)
_MOD = (isl.ast_expr_op_type.pdiv_r, isl.ast_expr_op_type.zdiv_r)


def ast_expr(e: isl.AstExpr) -> L.Expr:
    """An isl AST expression (iterators and sizes are int64) as loop IR."""
    kind = e.get_type()
    if kind == isl.ast_expr_type.int:
        value = int(e.get_val().to_python())
        if not -(2**63) <= value < 2**63:
            raise RangeError(
                f"a loop bound is the constant {value}, which does not fit in 64 bits",
                hint="sizes and index values are 64-bit integers; use smaller constants",
            )
        return const(value, I64)
    if kind == isl.ast_expr_type.id:
        return L.VarRef(e.get_id().get_name())
    op = e.get_op_type()
    args = [ast_expr(e.get_op_arg(k)) for k in range(e.get_op_n_arg())]
    if op == isl.ast_expr_op_type.minus:
        return L.Unary(L.UnaryOp.NEG, args[0])
    if op in (isl.ast_expr_op_type.min, isl.ast_expr_op_type.max):
        combine = L.Min if op == isl.ast_expr_op_type.min else L.Max
        result = args[0]
        for a in args[1:]:
            result = combine(result, a)
        return result
    if op in (isl.ast_expr_op_type.select, isl.ast_expr_op_type.cond):
        return L.Select(_truth(args[0]), args[1], args[2])
    if op in _FLOOR:
        return L.FloorDiv(args[0], args[1])
    if op in _MOD:
        return L.Mod(args[0], args[1])
    if op in _LOGIC:
        return L.Bin(_BIN[op], _truth(args[0]), _truth(args[1]))
    if op in _BIN:
        return simplify(L.Bin(_BIN[op], args[0], args[1]))
    raise InternalError(f"unexpected isl AST expression {e.to_C_str()}")


def _truth(e: L.Expr) -> L.Expr:
    """A condition as a bool: isl writes one that always holds as the integer 1
    (`j >= 2 * x || 1`), and the loop IR has no int operand of `||`."""
    if isinstance(e, L.Const) and e.dtype is not L.DType.BOOL:
        return const(bool(e.value), L.DType.BOOL)
    return e


def simplify(e: L.Expr) -> L.Expr:
    """Fold `x - c + c`, `x + 0` and constant arithmetic (readable loop bounds)."""
    if not (isinstance(e, L.Bin) and e.op in (L.BinOp.ADD, L.BinOp.SUB)):
        return e
    a, b = e.a, e.b
    if isinstance(a, L.Const) and isinstance(b, L.Const):
        value = int(a.value) + int(b.value) if e.op is L.BinOp.ADD else int(a.value) - int(b.value)
        return const(value, I64)
    if not isinstance(b, L.Const):
        return e
    k = int(b.value) if e.op is L.BinOp.ADD else -int(b.value)
    if isinstance(a, L.Bin) and a.op in (L.BinOp.ADD, L.BinOp.SUB) and isinstance(a.b, L.Const):
        k += int(a.b.value) if a.op is L.BinOp.ADD else -int(a.b.value)
        a = a.a
    if k == 0:
        return a
    return L.Bin(L.BinOp.ADD, a, const(k, I64)) if k > 0 else L.Bin(L.BinOp.SUB, a, const(-k, I64))


# ------------------------------------------------------------------ boxes


def box_tree(
    domain: isl.Set, context: isl.Set, positive: isl.Set, order: tuple[str, ...], mark: int | None
) -> Tree | None:
    """The Tree isl builds for `domain` (its context `context`, its expressions under
    `positive`) with loops in `order` and the `reduce` mark before loop number `mark`
    (None: no mark), when `domain` is a box (module doc); else None."""
    box = _box_bounds(domain, context, order)
    if box is None:
        return None
    bounds, guard = box
    outer = isl.AstBuild.from_context(positive)
    build = outer if guard is None else isl.AstBuild.from_context(positive & guard)
    tree: Tree = User(
        tuple(
            L.VarRef(domain.get_dim_name(isl.dim_type.set, k))
            for k in range(domain.dim(isl.dim_type.set))
        )
    )
    for k in reversed(range(len(order))):
        lower, upper = bounds[order[k]]
        lo = ast_expr(build.expr_from_pw_aff(isl.PwAff.from_aff(lower)))
        hi = simplify(
            L.Bin(
                L.BinOp.ADD,
                ast_expr(build.expr_from_pw_aff(isl.PwAff.from_aff(upper))),
                const(1, I64),
            )
        )
        values = tuple((v, L.VarRef(v)) for v in order[: k + 1])
        tree = For(order[k], lo, hi, 1, Mark(tree, values) if mark == k + 1 else tree)
    tree = Mark(tree) if mark == 0 else tree
    if guard is None:
        return tree
    return If(_truth(ast_expr(outer.expr_from_set(guard))), tree, None)


def nonempty_guard(tree: Tree, domain: isl.Set, context: isl.Set, positive: isl.Set) -> Tree:
    """`tree` under the sizes for which `domain` is not empty, where `context` does not
    imply them. For a nest with a `reduce` mark: the loops outside the mark load and
    store the accumulator, and isl lets an outer loop run iterations whose inner loops
    are empty (no statement instance runs there). With a bound that only the inner
    loops imply dropped (`i1 < N - 1` beside `i1 < M` and `M <= k2 < N`), such
    iterations ran past the output's end (fuzz seed 61918, M > N - 1)."""
    nonempty, implied = domain.params(), context.params()
    if implied.is_subset(nonempty):
        return tree
    guard = nonempty.gist(implied)
    build = isl.AstBuild.from_context(positive)
    return If(_truth(ast_expr(build.expr_from_set(guard))), tree, None)


def _box_bounds(
    domain: isl.Set, context: isl.Set, order: tuple[str, ...]
) -> tuple[dict[str, tuple[isl.Aff, isl.Aff]], isl.Set | None] | None:
    """Each loop variable's lower and upper bound (affine in the sizes alone) of a box
    `domain`, and the conditions on the sizes alone that `context` does not imply (a
    set of parameters; None: no guard); None for any other domain."""
    n = domain.dim(isl.dim_type.set)
    names = [domain.get_dim_name(isl.dim_type.set, k) for k in range(n)]
    if sorted(order) != sorted(names) or len(set(names)) != n:
        return None
    pieces = domain.get_basic_sets()
    if len(pieces) != 1 or pieces[0].dim(isl.dim_type.div) != 0:
        return None
    sizes_only: list[isl.Constraint] = []
    lower: dict[int, list[isl.Aff]] = {}
    upper: dict[int, list[isl.Aff]] = {}
    for c in pieces[0].get_constraints():
        on = [k for k in range(n) if not c.get_coefficient_val(isl.dim_type.set, k).is_zero()]
        if not on:
            sizes_only.append(c)
            continue
        if len(on) != 1 or c.is_equality():
            return None
        k = on[0]
        coef = c.get_coefficient_val(isl.dim_type.set, k)
        if not (coef.is_one() or coef.is_negone()):
            return None
        bound = c.get_bound(isl.dim_type.set, k).project_domain_on_params()
        (lower if coef.is_one() else upper).setdefault(k, []).append(bound)
    if any(len(lower.get(k, ())) != 1 or len(upper.get(k, ())) != 1 for k in range(n)):
        return None
    if any(lower[k][0].plain_is_equal(upper[k][0]) for k in range(n)):
        return None  # a single iteration
    guard = None
    if sizes_only:  # conditions on the sizes alone: the nest runs under those that the
        # context does not imply (a version chosen by the sizes: `cpu.pad`)
        conditions = isl.BasicSet.universe(pieces[0].get_space())
        for c in sizes_only:
            conditions = conditions.add_constraint(c)
        params, implied = isl.Set.from_basic_set(conditions).params(), context.params()
        if not implied.is_subset(params):
            guard = params.gist(implied)
    return {names[k]: (lower[k][0], upper[k][0]) for k in range(n)}, guard


__all__ = [
    "Block",
    "For",
    "If",
    "Mark",
    "Tree",
    "User",
    "annotate_marks",
    "ast_expr",
    "box_tree",
    "first_user",
    "from_isl",
    "nonempty_guard",
    "simplify",
]
