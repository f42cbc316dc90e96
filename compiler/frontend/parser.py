"""The TC parser: tokens -> `ast.Module`, by recursive descent.

The grammar is the one at the top of `compiler.frontend.ast`. Expressions are parsed
by precedence climbing, with TC's precedence table (`tc/lang/lexer.h`), lowest first:

    ?:  (right-associative)   ||   &&   == != < <= > >=   + -   * / %   unary - !

Comparisons share one level and are left-associative, as in TC (`a < b < c` is
`(a < b) < c`). A unary operator binds tighter than every binary one (`-a * b` is
`(-a) * b`). The `<=>` annotation comes before the `where` clauses, as in TC.

tcc's dialect (see DESIGN.md) is accepted: left-hand side indices may be expressions
(affine `I_grad(n, c, h + kh) += ...`, or data-dependent `O(A(i)) += ...`; `check`
decides which are legal), and a range constraint may constrain an expression
(`where h - kh in 0:HO`). The left-hand side must still mention an index variable:
`C(0) = ...` is an error, as it is in TC. A def may state relations of its sizes
after its outputs (`-> (O) where G >= 4 * H {`); `check` accepts only comparisons of
sizes there.

Example::

    parse("def f(float(N) A) -> (B) { B(i) = A(i) * 2 }")
    == Module((Def("f", (Param("A", FLOAT32, (Var("N"),)),), (Param("B", None, None),),
              (Stmt(Access("B", (Var("i"),)), AssignOp.ASSIGN,
                    Binary(BinOp.MUL, Access("A", (Var("i"),)), Const(2, INT32))),)),))
"""

from __future__ import annotations

from collections.abc import Callable

from compiler.diagnostics import ParseError
from compiler.frontend import ast
from compiler.frontend.builtins import ARITY
from compiler.frontend.lexer import Token, TokenKind, tokenize
from compiler.frontend.source import Source, Span

MAX_DEPTH = 200
"""Deepest expression nesting accepted; deeper input is a ParseError, never a crash."""

_INT64_MAX = 2**63 - 1
_INT32_MAX = 2**31 - 1

_ASSIGN_OPS: dict[TokenKind, ast.AssignOp] = {
    TokenKind.ASSIGN: ast.AssignOp.ASSIGN,
    TokenKind.PLUS_EQ: ast.AssignOp.PLUS,
    TokenKind.TIMES_EQ: ast.AssignOp.TIMES,
    TokenKind.MIN_EQ: ast.AssignOp.MIN,
    TokenKind.MAX_EQ: ast.AssignOp.MAX,
    TokenKind.PLUS_EQ_B: ast.AssignOp.PLUS_INIT,
    TokenKind.TIMES_EQ_B: ast.AssignOp.TIMES_INIT,
    TokenKind.MIN_EQ_B: ast.AssignOp.MIN_INIT,
    TokenKind.MAX_EQ_B: ast.AssignOp.MAX_INIT,
}

# Binary precedence, as in TC: higher binds tighter. '?' is handled with them.
_PREC_TERNARY = 1
_PREC_UNARY = 7
_BINARY: dict[TokenKind, tuple[int, ast.BinOp | ast.CmpOp | ast.LogicOp]] = {
    TokenKind.OR: (2, ast.LogicOp.OR),
    TokenKind.AND: (3, ast.LogicOp.AND),
    TokenKind.EQ: (4, ast.CmpOp.EQ),
    TokenKind.NE: (4, ast.CmpOp.NE),
    TokenKind.LT: (4, ast.CmpOp.LT),
    TokenKind.LE: (4, ast.CmpOp.LE),
    TokenKind.GT: (4, ast.CmpOp.GT),
    TokenKind.GE: (4, ast.CmpOp.GE),
    TokenKind.PLUS: (5, ast.BinOp.ADD),
    TokenKind.MINUS: (5, ast.BinOp.SUB),
    TokenKind.STAR: (6, ast.BinOp.MUL),
    TokenKind.SLASH: (6, ast.BinOp.DIV),
    TokenKind.PERCENT: (6, ast.BinOp.MOD),
}
_UNARY: dict[TokenKind, ast.UnaryOp] = {
    TokenKind.MINUS: ast.UnaryOp.NEG,
    TokenKind.NOT: ast.UnaryOp.NOT,
}
# Tokens a dimension may start with (`N`, `3`, `(H - KH) / 2 + 1`, `max(3, N)`, `-K + H`).
_DIM_START = (
    TokenKind.IDENT,
    TokenKind.INT,
    TokenKind.LPAREN,
    TokenKind.MIN,
    TokenKind.MAX,
    TokenKind.MINUS,
)

_RANGE_HINT = "ranges are written lo:hi, e.g. `where i in 0:N`"


def parse(text: str, filename: str = "<string>") -> ast.Module:
    """Parse TC source text into a Module. Raises ParseError on bad input."""
    source = Source(filename, text)
    return _Parser(tokenize(source), source).module()


def parse_expr(text: str) -> ast.Expr:
    """Parse one TC expression (for tests and tools)."""
    source = Source("<expr>", text)
    parser = _Parser(tokenize(source), source)
    expr = parser.expr()
    parser.expect(TokenKind.EOF, "the end of the expression")
    _check_height(expr)
    return expr


class _Parser:
    """One pass over a token list. Every method consumes what it parsed."""

    def __init__(self, tokens: list[Token], source: Source) -> None:
        self.tokens = tokens
        self.source = source
        self.pos = 0
        self.depth = 0

    # ------------------------------------------------------------ token helpers

    @property
    def cur(self) -> Token:
        return self.tokens[self.pos]

    def peek(self, offset: int = 1) -> Token:
        return self.tokens[min(self.pos + offset, len(self.tokens) - 1)]

    def advance(self) -> Token:
        token = self.tokens[self.pos]
        if token.kind is not TokenKind.EOF:
            self.pos += 1
        return token

    def accept(self, kind: TokenKind) -> Token | None:
        return self.advance() if self.cur.kind is kind else None

    def expect(self, kind: TokenKind, what: str | None = None, hint: str | None = None) -> Token:
        if self.cur.kind is kind:
            return self.advance()
        raise self.error(what or kind.value, hint)

    def error(self, what: str, hint: str | None = None) -> ParseError:
        """'expected <what> but found <current token>' at the current token."""
        token = self.cur
        span = token.span
        if token.kind is TokenKind.EOF and self.pos > 0:
            # point just after the last token rather than at trailing blank lines
            end = self.tokens[self.pos - 1].span.end
            span = Span(self.source, end, end)
        return ParseError(f"expected {what} but found {token.describe()}", span, hint)

    def span_from(self, start: Span) -> Span:
        """From `start` to the end of the last consumed token."""
        return Span(self.source, start.start, self.tokens[self.pos - 1].span.end)

    # ---------------------------------------------------------- defs and params

    def module(self) -> ast.Module:
        defs: list[ast.Def] = []
        while self.cur.kind is not TokenKind.EOF:
            if self.cur.kind is not TokenKind.DEF:
                raise self.error(
                    "'def'", "a TC source is a sequence of `def name(...) -> (...) {...}`"
                )
            defs.append(self.definition())
        return ast.Module(tuple(defs), span=Span(self.source, 0, len(self.source.text)))

    def definition(self) -> ast.Def:
        start = self.expect(TokenKind.DEF).span
        name = self.expect(TokenKind.IDENT, "a def name").text
        params = self.param_list(self.param)
        self.expect(TokenKind.ARROW, "'->' before the outputs")
        outputs = self.param_list(self.output)
        where = self.size_conditions() if self.accept(TokenKind.WHERE) else ()
        self.expect(TokenKind.LBRACE, "'{' to open the def body", self._body_hint(where))
        stmts: list[ast.Stmt] = []
        while not self.accept(TokenKind.RBRACE):
            if self.cur.kind is not TokenKind.IDENT:
                raise self.error("a statement or '}'", self._stmt_hint())
            stmts.append(self.statement())
        return ast.Def(name, params, outputs, tuple(stmts), where, span=self.span_from(start))

    def size_conditions(self) -> tuple[ast.Expr, ...]:
        """[ext] The def's where clause after `where`: `G >= 4 * H, N > 1`. Any
        expression parses; `frontend.check` accepts only comparisons of sizes."""
        conditions: list[ast.Expr] = []
        while True:
            if self.cur.kind in (TokenKind.LBRACE, TokenKind.COMMA, TokenKind.EOF):
                raise self.error(
                    "a condition on the sizes", "write e.g. `where G >= 4 * H` before '{'"
                )
            condition = self.expr()
            _check_height(condition)
            conditions.append(condition)
            if not self.accept(TokenKind.COMMA):
                return tuple(conditions)

    def _body_hint(self, where: tuple[ast.Expr, ...]) -> str | None:
        """Why a def's where clause did not end at '{'."""
        if not where:
            return None
        if self.cur.kind is TokenKind.IN:
            return (
                "the def's where clause relates sizes (`where G >= 4 * H`); an index "
                "variable's range goes in a statement's where clause (`O(i) = ... where "
                "i in 0:N`)"
            )
        if self.cur.kind is TokenKind.ASSIGN:
            return "a condition compares sizes: equality is written `==`"
        return "the def's where clause separates its conditions with ','"

    def _stmt_hint(self) -> str | None:
        if self.cur.kind is TokenKind.EOF:
            return "a '}' is missing at the end of the def"
        if self.cur.kind is TokenKind.WHERE:
            return "where clauses are separated by ','"
        return None

    def param_list(self, parse_item: Callable[[], ast.Param]) -> tuple[ast.Param, ...]:
        self.expect(TokenKind.LPAREN)
        items: list[ast.Param] = []
        if self.cur.kind is not TokenKind.RPAREN:
            items.append(parse_item())
            while self.accept(TokenKind.COMMA):
                items.append(parse_item())
        self.expect(TokenKind.RPAREN, "',' or ')'")
        return tuple(items)

    def param(self) -> ast.Param:
        if self.cur.kind is TokenKind.IDENT:
            raise self.error(
                "a type",
                f"inputs need a type, e.g. `float(N) {self.cur.text}` or `int32 {self.cur.text}`",
            )
        start = self.expect(TokenKind.TYPE, "a type").span
        dtype = ast.TYPE_NAMES[start.text]
        dims = self.dims() if self.cur.kind is TokenKind.LPAREN else ()
        name = self.expect(TokenKind.IDENT, "a parameter name").text
        return ast.Param(name, dtype, dims, span=self.span_from(start))

    def output(self) -> ast.Param:
        if self.cur.kind is TokenKind.IDENT:
            token = self.advance()
            return ast.Param(token.text, None, None, span=token.span)
        start = self.expect(TokenKind.TYPE, "an output name or a type").span
        dtype = ast.TYPE_NAMES[start.text]
        dims = self.dims() if self.cur.kind is TokenKind.LPAREN else ()
        name = self.expect(TokenKind.IDENT, "an output name").text
        return ast.Param(name, dtype, dims, span=self.span_from(start))

    def dims(self) -> tuple[ast.Expr, ...]:
        """`(N, 3, H - KH + 1)`: size names, integers, or integer expressions of them
        (a gradient's `<out>_grad` has the output's shape; `frontend.check` checks
        which expressions are allowed)."""
        self.expect(TokenKind.LPAREN)
        dims: list[ast.Expr] = []
        while True:
            token = self.cur
            if token.kind not in _DIM_START:
                raise self.error("a size name or an integer")
            dim = self.expr()
            dims.append(dim)
            if not self.accept(TokenKind.COMMA):
                break
        self.expect(TokenKind.RPAREN, "',' or ')'")
        return tuple(dims)

    # --------------------------------------------------------------- statements

    def statement(self) -> ast.Stmt:
        name = self.expect(TokenKind.IDENT, "a tensor name")
        indices: tuple[ast.Expr, ...] = ()
        if self.cur.kind is TokenKind.LPAREN:
            indices = self.args()
            for index in indices:
                _check_height(index)
            _check_lhs_indices(indices)
        lhs = ast.Access(name.text, indices, span=self.span_from(name.span))
        op_token = self.cur
        if op_token.kind not in _ASSIGN_OPS:
            hint = _op_hint(op_token)
            if name.text == "for" and op_token.kind is TokenKind.IDENT:
                hint = "TC has no `for` loops: each statement already ranges over its indices"
            raise self.error("an assignment operator (=, +=, +=!, *=, min=, max=, ...)", hint)
        self.advance()
        rhs = self.expr()
        _check_height(rhs)
        equivalent = self.equivalent() if self.cur.kind is TokenKind.EQUIVALENT else None
        where: list[ast.WhereClause] = []
        if self.accept(TokenKind.WHERE):
            where.append(self.where_clause())
            while self.accept(TokenKind.COMMA):
                where.append(self.where_clause())
        return ast.Stmt(
            lhs,
            _ASSIGN_OPS[op_token.kind],
            rhs,
            tuple(where),
            equivalent,
            span=self.span_from(name.span),
        )

    def equivalent(self) -> ast.Access:
        self.expect(TokenKind.EQUIVALENT)
        name = self.cur
        if name.kind not in (TokenKind.IDENT, TokenKind.MIN, TokenKind.MAX, TokenKind.TYPE):
            raise self.error("the name of an equivalent operation after '<=>'")
        self.advance()
        if self.cur.kind is not TokenKind.LPAREN:
            raise self.error("'(' after the equivalent operation's name")
        args = self.args()
        for arg in args:
            _check_height(arg)
        return ast.Access(name.text, args, span=self.span_from(name.span))

    def where_clause(self) -> ast.WhereClause:
        start = self.cur.span
        if self.cur.kind is TokenKind.IDENT and self.peek().kind is TokenKind.ASSIGN:
            name = self.advance().text
            self.advance()
            value = self.expr()
            _check_height(value)
            return ast.Let(name, value, span=self.span_from(start))
        if self.accept(TokenKind.EXISTS):
            expr = self.expr()
            _check_height(expr)
            return ast.Exists(expr, span=self.span_from(start))
        if self.cur.kind in (TokenKind.EOF, TokenKind.RBRACE, TokenKind.COMMA):
            raise self.error("a where clause (`i in lo:hi`, `x = expr` or `exists expr`)")
        expr = self.expr()
        hint = None
        if isinstance(expr, ast.Compare):
            hint = (
                "a range is written `i in lo:hi` (lo inclusive, hi exclusive), not as a comparison"
            )
        self.expect(TokenKind.IN, "'in' (a range `i in lo:hi`), '=' or 'exists'", hint)
        lo = self.expr()
        hint = _RANGE_HINT if self.cur.kind in (TokenKind.FLOAT, TokenKind.IN) else None
        self.expect(TokenKind.COLON, "':' between the bounds of the range", hint)
        hi = self.expr()
        for part in (expr, lo, hi):
            _check_height(part)
        return ast.RangeConstraint(expr, lo, hi, span=self.span_from(start))

    # -------------------------------------------------------------- expressions

    def expr(self, min_prec: int = 0) -> ast.Expr:
        """The longest expression whose operators bind tighter than `min_prec`."""
        self.depth += 1
        if self.depth > MAX_DEPTH:
            raise ParseError(
                f"expression nested too deeply (more than {MAX_DEPTH} levels)",
                self.cur.span,
                hint="split it into several statements",
            )
        start = self.cur.span
        try:
            if self.cur.kind in _UNARY:
                op_token = self.advance()
                operand = self.expr(_PREC_UNARY)
                lhs: ast.Expr = ast.Unary(
                    _UNARY[op_token.kind], operand, span=self.span_from(start)
                )
            else:
                lhs = self.primary()
            return self.binary_tail(lhs, start, min_prec)
        finally:
            self.depth -= 1

    def binary_tail(self, lhs: ast.Expr, start: Span, min_prec: int) -> ast.Expr:
        """Binary operators and `?:` after `lhs`, whose text begins at `start`
        (which may be a '(' before `lhs`'s own span)."""
        while True:
            kind = self.cur.kind
            if kind is TokenKind.QUESTION and _PREC_TERNARY > min_prec:
                self.advance()
                then = self.expr()
                self.expect(TokenKind.COLON, "':' in a conditional `c ? a : b`")
                # right-associative: the else branch may itself be a conditional
                otherwise = self.expr(_PREC_TERNARY - 1)
                lhs = ast.Select(lhs, then, otherwise, span=self.span_from(start))
                continue
            if kind not in _BINARY or _BINARY[kind][0] <= min_prec:
                return lhs
            prec, op = _BINARY[kind]
            self.advance()
            rhs = self.expr(prec)
            lhs = _make_binary(op, lhs, rhs, self.span_from(start))

    def primary(self) -> ast.Expr:
        token = self.cur
        kind = token.kind
        if kind in (TokenKind.INT, TokenKind.FLOAT):
            return self.number()
        if kind is TokenKind.LPAREN:
            self.advance()
            inner = self.expr()
            self.expect(TokenKind.RPAREN, "')'")
            return inner
        if kind is TokenKind.TYPE:
            self.advance()
            self.expect(
                TokenKind.LPAREN, f"'(' after '{token.text}' (a cast is written `{token.text}(x)`)"
            )
            operand = self.expr()
            self.expect(TokenKind.RPAREN, "')' to close the cast")
            return ast.Cast(ast.TYPE_NAMES[token.text], operand, span=self.span_from(token.span))
        if kind in (TokenKind.MIN, TokenKind.MAX):
            self.advance()
            if self.cur.kind is not TokenKind.LPAREN:
                raise self.error(f"'(' after '{token.text}'", f"write `{token.text}(a, b)`")
            args = self.args()
            if len(args) != 2:
                raise ParseError(
                    f"'{token.text}' takes 2 arguments but got {len(args)}",
                    self.span_from(token.span),
                    hint=f"write `{token.text}({token.text}(a, b), c)` for more",
                )
            return ast.Call(token.text, args, span=self.span_from(token.span))
        if kind is TokenKind.IDENT:
            self.advance()
            if self.cur.kind is not TokenKind.LPAREN:
                return ast.Var(token.text, span=token.span)
            args = self.args()
            node = ast.Call if token.text in ARITY else ast.Access
            return node(token.text, args, span=self.span_from(token.span))
        raise self.error("an expression", _expr_hint(token))

    def args(self) -> tuple[ast.Expr, ...]:
        """`( expr, ... )`, possibly empty."""
        self.expect(TokenKind.LPAREN)
        args: list[ast.Expr] = []
        if self.cur.kind is not TokenKind.RPAREN:
            args.append(self.expr())
            while self.accept(TokenKind.COMMA):
                args.append(self.expr())
        self.expect(TokenKind.RPAREN, "',' or ')'")
        return tuple(args)

    def number(self) -> ast.Const:
        token = self.advance()
        if token.kind is TokenKind.INT:
            digits = token.text.lstrip("0")
            # (compared as text first: Python refuses int() of > 4300 digits)
            if len(digits) > len(str(_INT64_MAX)) or int(token.text) > _INT64_MAX:
                shown = token.text if len(token.text) <= 40 else f"{token.text[:20]}..."
                raise ParseError(
                    f"integer literal {shown} ({len(token.text)} digits) does not fit in 64 bits",
                    token.span,
                    hint=f"the largest integer literal is {_INT64_MAX}",
                )
            value = int(token.text)
            # [tcc] a literal beyond int32 is an int64 (TC's int32 would wrap it)
            dtype = ast.ScalarType.INT32 if value <= _INT32_MAX else ast.ScalarType.INT64
            return ast.Const(value, dtype, span=token.span)
        number = float(token.text)
        if number == float("inf"):
            raise ParseError(f"number {token.text} is too large for a float", token.span)
        return ast.Const(number, ast.ScalarType.FLOAT32, span=token.span)


def _make_binary(
    op: ast.BinOp | ast.CmpOp | ast.LogicOp, lhs: ast.Expr, rhs: ast.Expr, span: Span
) -> ast.Expr:
    if isinstance(op, ast.BinOp):
        return ast.Binary(op, lhs, rhs, span=span)
    if isinstance(op, ast.CmpOp):
        return ast.Compare(op, lhs, rhs, span=span)
    return ast.Logical(op, lhs, rhs, span=span)


def _op_hint(token: Token) -> str | None:
    if token.kind is TokenKind.EQ:
        return "assignment is written `=`"
    if token.kind in (TokenKind.MIN, TokenKind.MAX):
        return f"the reduction operator is written `{token.text}=` without a space"
    return None


def _expr_hint(token: Token) -> str | None:
    if token.kind is TokenKind.WHERE:
        return "the right-hand side of a statement comes before `where`"
    if token.kind is TokenKind.RPAREN:
        return "an argument is missing"
    return None


def _check_lhs_indices(indices: tuple[ast.Expr, ...]) -> None:
    """Left-hand side indices must mention at least one index variable.

    TC allows only index variables; tcc's dialect allows any expression (affine
    `h + kh`, constants next to variables as in `O(n, 0, m)`, data-dependent `O(A(i))`),
    which `check` then types. An LHS with only constants (`C(0)`) iterates over nothing
    and is rejected here, with TC's message.
    """
    if not indices or any(_mentions_var(index) for index in indices):
        return
    first = indices[0]
    found = (
        f"number '{first.span.text}'" if isinstance(first, ast.Const) else f"'{first.span.text}'"
    )
    raise ParseError(
        f"expected an index variable but found {found}",
        first.span,
        hint="left-hand side indices must use index variables; to write one element, "
        "use a variable with a one-element range, e.g. `C(i) = ... where i in 0:1`",
    )


def _mentions_var(expr: ast.Expr) -> bool:
    stack = [expr]
    while stack:
        node = stack.pop()
        if isinstance(node, ast.Var):
            return True
        stack.extend(_children(node))
    return False


def _check_height(expr: ast.Expr) -> None:
    """Reject trees deeper than MAX_DEPTH (e.g. `a + a + ... + a` with 1000 terms),
    so that recursive passes after the parser cannot overflow the Python stack."""
    stack: list[tuple[ast.Expr, int]] = [(expr, 1)]
    while stack:
        node, height = stack.pop()
        if height > MAX_DEPTH:
            raise ParseError(
                f"expression nested too deeply (more than {MAX_DEPTH} levels)",
                node.span,
                hint="split it into several statements",
            )
        stack.extend((child, height + 1) for child in _children(node))


def _children(node: ast.Expr) -> tuple[ast.Expr, ...]:
    if isinstance(node, (ast.Access, ast.Call)):
        return node.args
    if isinstance(node, (ast.Binary, ast.Compare, ast.Logical)):
        return (node.lhs, node.rhs)
    if isinstance(node, (ast.Unary, ast.Cast)):
        return (node.operand,)
    if isinstance(node, ast.Select):
        return (node.cond, node.then, node.otherwise)
    return ()
