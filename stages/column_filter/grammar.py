"""The rule language of ``column_filter``: a tokenizer and a recursive-descent parser to a
small tree, with the types checked while parsing. Never Python ``eval``: a rule comes
from a config file, and a config is data, not code.

Precedence, lowest first (as in Python, and chained comparisons mean what Python means)::

    rule       := or
    or         := and ("or" and)*
    and        := not ("and" not)*
    not        := "not" not | comparison
    comparison := sum (("<" | "<=" | ">" | ">=" | "==" | "!=") sum)*
    sum        := product (("+" | "-") product)*
    product    := unary (("*" | "/") unary)*
    unary      := "-" unary | NUMBER | COLUMN | "(" or ")"

A rule is boolean: comparisons, ``and``/``or``/``not`` of them, or a bare column (a bool
column such as ``is_duplicate``). Numbers and arithmetic are numeric; a number where a
boolean is wanted, or a comparison where a number is wanted (``(a < b) + 1``), is an
error at load, with its position. A column's own type is known only at run time.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

COMPARISONS = ("<=", ">=", "==", "!=", "<", ">")
KEYWORDS = ("and", "or", "not")
# Longest first: "<=" before "<". A column is a name with dots allowed after its first
# character (``meta.score``, ``minhash_sim0.8``); a number is decimal, with a fraction or
# an exponent or both.
_TOKEN = re.compile(
    r"\s*(?:(?P<number>(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?)"
    r"|(?P<name>[A-Za-z_][A-Za-z0-9_.]*)"
    r"|(?P<op><=|>=|==|!=|<|>|\+|-|\*|/|\(|\)))"
)


# What a writer of another language most likely meant.
_HINTS = {"=": " (equality is ==)", "!": " (not equal is !=, negation is not)", "&": " (use and)", "|": " (use or)"}


class RuleSyntaxError(ValueError):
    """A rule that does not parse: the message names the position and shows the rule."""

    def __init__(self, message: str, text: str, position: int):
        super().__init__(f"{message} at position {position}: {text!r}")
        self.position = position


@dataclass(frozen=True)
class Token:
    kind: str  # "number", "name", "op", "end"
    text: str
    position: int


def tokenize(text: str) -> list[Token]:
    """The tokens of ``text``, ending with an ``end`` token at its length."""
    tokens, position = [], 0
    while True:
        match = _TOKEN.match(text, position)
        if match is None or match.lastgroup is None:
            rest = len(text) - len(text[position:].lstrip())
            if rest == len(text):
                return [*tokens, Token("end", "", len(text))]
            char = text[rest]
            raise RuleSyntaxError(f"unknown character {char!r}{_HINTS.get(char, '')}", text, rest)
        kind = match.lastgroup
        tokens.append(Token(kind, match.group(kind), match.start(kind)))
        position = match.end()


# The tree. Numeric nodes: Number, Column (numeric), Negate, Arithmetic. Boolean nodes:
# Compare, Not, Logic, and a Column used as a boolean.


@dataclass(frozen=True)
class Number:
    value: float


@dataclass(frozen=True)
class Column:
    name: str
    boolean: bool  # used where a boolean is wanted (a bool column), else as a number


@dataclass(frozen=True)
class Negate:
    operand: object


@dataclass(frozen=True)
class Arithmetic:
    op: str  # + - * /
    left: object
    right: object


@dataclass(frozen=True)
class Compare:
    """``operands[0] ops[0] operands[1] ops[1] operands[2] ...``: each adjacent pair holds."""

    ops: tuple[str, ...]
    operands: tuple[object, ...]


@dataclass(frozen=True)
class Not:
    operand: object


@dataclass(frozen=True)
class Logic:
    op: str  # "and" or "or"
    operands: tuple[object, ...]


# How deep a rule's tree may be: far past any real rule, and short of Python's recursion
# limit in the parser and in every walk of the tree (``columns``, the evaluation).
MAX_DEPTH = 64


def _children(node: object) -> tuple:
    if isinstance(node, (Negate, Not)):
        return (node.operand,)
    if isinstance(node, Arithmetic):
        return (node.left, node.right)
    if isinstance(node, (Compare, Logic)):
        return node.operands
    return ()


def columns(node: object) -> list[str]:
    """The columns ``node`` reads, in the order they first appear."""
    if isinstance(node, Column):
        return [node.name]
    return list(dict.fromkeys(name for child in _children(node) for name in columns(child)))


def _depth(node: object) -> int:
    """The depth of a tree, walked without recursion (the tree may be too deep for it)."""
    deepest, stack = 0, [(node, 1)]
    while stack:
        node, depth = stack.pop()
        deepest = max(deepest, depth)
        stack += [(child, depth + 1) for child in _children(node)]
    return deepest


def parse(text: str) -> object:
    """The tree of a rule, or RuleSyntaxError naming what is wrong and where."""
    too_deep = RuleSyntaxError(f"the rule nests deeper than {MAX_DEPTH} levels of operators", text, 0)
    try:
        tree = _Parser(text).rule()
    except RecursionError:
        raise too_deep from None
    if _depth(tree) > MAX_DEPTH:
        raise too_deep
    return tree


class _Parser:
    def __init__(self, text: str):
        self.text = text
        self.tokens = tokenize(text)
        self.at = 0
        self.open_parens = 0

    def peek(self) -> Token:
        return self.tokens[self.at]

    def take(self) -> Token:
        token = self.tokens[self.at]
        self.at += 1
        return token

    def error(self, message: str, token: Token) -> RuleSyntaxError:
        return RuleSyntaxError(message, self.text, token.position)

    def is_op(self, *ops: str) -> bool:
        token = self.peek()
        return token.kind == "op" and token.text in ops

    def is_keyword(self, word: str) -> bool:
        token = self.peek()
        return token.kind == "name" and token.text == word

    def rule(self) -> object:
        if self.peek().kind == "end":
            raise self.error("empty rule", self.peek())
        start = self.peek()
        node = self.boolean(self.logic_or(), start)
        token = self.peek()
        if token.kind != "end":
            if token.text == ")":
                raise self.error("unbalanced ')'", token)
            raise self.error(f"unexpected {_describe(token)}", token)
        return node

    def boolean(self, node: object, token: Token) -> object:
        """``node`` where a boolean is wanted: a column becomes a bool column."""
        if isinstance(node, Column):
            return Column(node.name, boolean=True)
        if not isinstance(node, (Compare, Not, Logic)):
            raise self.error("a number where a condition is wanted (compare it: x > 0)", token)
        return node

    def number(self, node: object, token: Token) -> object:
        """``node`` where a number is wanted."""
        if isinstance(node, (Compare, Not, Logic)):
            raise self.error("a condition where a number is wanted", token)
        return node

    def logic(self, op: str, operand) -> object:
        starts, nodes = [self.peek()], [operand()]
        while self.is_keyword(op):
            self.take()
            starts.append(self.peek())
            nodes.append(operand())
        if len(nodes) == 1:
            return nodes[0]
        return Logic(op, tuple(self.boolean(node, start) for node, start in zip(nodes, starts)))

    def logic_or(self) -> object:
        return self.logic("or", self.logic_and)

    def logic_and(self) -> object:
        return self.logic("and", self.logic_not)

    def logic_not(self) -> object:
        if self.is_keyword("not"):
            self.take()
            token = self.peek()
            return Not(self.boolean(self.logic_not(), token))
        return self.comparison()

    def comparison(self) -> object:
        starts, operands, ops = [self.peek()], [self.sum()], []
        while self.is_op(*COMPARISONS):
            ops.append(self.take().text)
            starts.append(self.peek())
            operands.append(self.sum())
        if not ops:
            return operands[0]
        return Compare(tuple(ops), tuple(self.number(node, start) for node, start in zip(operands, starts)))

    def binary(self, ops: tuple[str, ...], operand) -> object:
        token = self.peek()
        node = operand()
        while self.is_op(*ops):
            op = self.take().text
            right_token = self.peek()
            right = operand()
            node = Arithmetic(op, self.number(node, token), self.number(right, right_token))
        return node

    def sum(self) -> object:
        return self.binary(("+", "-"), self.product)

    def product(self) -> object:
        return self.binary(("*", "/"), self.unary)

    def unary(self) -> object:
        token = self.take()
        if token.kind == "op" and token.text == "-":
            operand_token = self.peek()
            return Negate(self.number(self.unary(), operand_token))
        if token.kind == "number":
            return Number(float(token.text))
        if token.kind == "name":
            if token.text in KEYWORDS:
                raise self.error(f"'{token.text}' where a value is wanted", token)
            return Column(token.text, boolean=False)
        if token.kind == "op" and token.text == "(":
            self.open_parens += 1
            if self.open_parens > MAX_DEPTH:
                raise self.error(f"parentheses nest deeper than {MAX_DEPTH} levels", token)
            node = self.logic_or()
            self.open_parens -= 1
            if not self.is_op(")"):
                raise self.error("unbalanced '(' (no matching ')')", token)
            self.take()
            return node
        if token.kind == "end":
            raise self.error("the rule ends where a value is wanted", token)
        raise self.error(f"unexpected {_describe(token)}", token)


def _describe(token: Token) -> str:
    if token.kind == "end":
        return "end of rule"
    return f"{token.kind} {token.text!r}" if token.kind != "op" else repr(token.text)
