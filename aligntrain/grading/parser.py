"""Whitelist tokenizer and recursive-descent parser: answer text -> answer class.

Nothing here calls ``eval``, ``sympify``, ``parse_expr`` or a LaTeX-to-sympy
converter: the tokenizer accepts only the tokens listed in ``_TOKEN`` and
``_COMMANDS``, and the parser builds every sympy object itself (module
:mod:`aligntrain.grading.scalar`). The grammar is in :func:`parse_answer`;
the answer kinds and their classes are in the docstring of
:mod:`aligntrain.grading`.
"""

from __future__ import annotations

import re
from fractions import Fraction

import sympy

from aligntrain.grading import functions, scalar
from aligntrain.grading.equations import equation, negated
from aligntrain.grading.intervals import MAX_INTERVALS, interval_union
from aligntrain.grading.items import KINDS, Item, scalar_kind
from aligntrain.grading.lists import MAX_ITEMS, plus_minus_item, set_class
from aligntrain.grading.scalar import (
    MAX_EXPONENT,
    MAX_ROOT_INDEX,
    DeadlineExceeded,
    Node,
    Unparseable,
    canonical_scalar,
    check_deadline,
)
from aligntrain.grading.text import MAX_TEXT_TOKEN, UNIT_WORDS, WORDS, is_unit

MAX_NUMBER_DIGITS = 40
"""Digits (both sides of the decimal point together, separators not counted) in one number."""

MAX_GROUP_DEPTH = 20
"""Deepest nesting of groups ( ``(...)``, ``\\left(...\\right)``, ``{...}`` arguments ) accepted."""

MAX_RADICALS = 4
"""Most roots (``\\sqrt`` and fractional exponents) in one answer (each adds a generator that expansion and radsimp
multiply out)."""

MAX_LOGARITHMS = 4
"""Most ``\\log`` and ``\\ln`` in one answer (a log that is not rational is a generator, like a root)."""

_ASCII_WHITESPACE = " \t\r\n\f\v"
_TEXT_COMMANDS = ("text", "textbf", "textrm", "textnormal", "textit", "mbox", "mathrm", "mathbf", "textup")
# One token: a number, a text group, a LaTeX command, or one symbol. A number is
# decimal ("17", "17.", "17.5", ".5") or has strict thousands grouping ("1,000",
# "1{,}000", "1,\!000", "1\,000", "12,345,678.5": first group 1-3 digits not starting with
# 0, then groups of exactly 3). Explicit [0-9] and [A-Za-z]: the \d and \w
# classes, str.isdigit and int() accept other scripts' digits ("١٧").
_TOKEN = re.compile(
    r"[ \t\r\n\f\v]*(?:"
    r"([1-9][0-9]{0,2}(?:(?:,\\!|,|\{,\}|\\,)[0-9]{3})+(?![0-9])(?:\.[0-9]*)?|[0-9]+(?:\.[0-9]*)?|\.[0-9]+)"
    r"|\\(?:" + "|".join(_TEXT_COMMANDS) + r")[ \t]*\{([A-Za-z0-9 ().,'\-]{0," + str(MAX_TEXT_TOKEN) + r"})\}"
    r"|(\\begin\{[pbv]?matrix\}|\\end\{[pbv]?matrix\}|\\\\|\\[A-Za-z]+|\\[%{}$!,;: ])"
    r"|(\*\*|[-+*/^()\[\]{}$%,=&_!]|[A-Za-z])"
    r")"
)
_SPACING = frozenset({"\\!", "\\,", "\\;", "\\:", "\\ ", "\\quad", "\\qquad", "\\displaystyle"})
_MATRIX_BEGIN = frozenset({"\\begin{pmatrix}", "\\begin{bmatrix}", "\\begin{vmatrix}", "\\begin{matrix}"})
_MATRIX_END = frozenset(token.replace("begin", "end") for token in _MATRIX_BEGIN)
_FRACTION_COMMANDS = frozenset({"\\frac", "\\dfrac", "\\tfrac"})
_BINOMIAL_COMMANDS = frozenset({"\\binom", "\\dbinom", "\\tbinom"})
_LOG_COMMANDS = frozenset({"\\log", "\\ln"})
_PRODUCT_OPERATORS = frozenset({"*", "/", "\\cdot", "\\times"})
_COMMANDS = (
    _FRACTION_COMMANDS
    | _SPACING
    | {"\\sqrt", "\\pi", "\\cdot", "\\times", "\\left", "\\right", "\\boxed", "\\%", "\\$", "\\{", "\\}"}
    | {"\\infty", "\\cup", "\\pm", "\\circ", "\\degree", "\\\\"}
    | _BINOMIAL_COMMANDS
    | _LOG_COMMANDS
    | {"\\choose", "\\overline", "\\in"}
    | _MATRIX_BEGIN
    | _MATRIX_END
)
_PERCENT_SIGNS = frozenset({"%", "\\%"})
_ITEM_ENDS = (None, ",", "}", "$", "\\}")
_TEXT = "\\text"  # the token kind of a text group: ("\\text", content)


def tokenize(text: str) -> list[str | tuple[str, str]]:
    """Whitelist tokens of ``text``; a text group is the pair ``("\\text", content)``."""
    stripped = UNIT_WORDS.sub("", text.strip(_ASCII_WHITESPACE))  # str.strip() would also strip unicode spaces
    tokens: list[str | tuple[str, str]] = []
    position = 0
    while position < len(stripped):
        match = _TOKEN.match(stripped, position)
        if match is None or match.end() == position:
            raise Unparseable
        number, text_content, command, symbol = match.groups()
        position = match.end()
        if number is not None:
            digits = number.replace("{,}", "").replace("\\!", "").replace("\\,", "").replace(",", "")
            if len(digits) - digits.count(".") > MAX_NUMBER_DIGITS:
                raise Unparseable
            if len(number) > 1 and _is_digits(number) and _takes_one_digit(tokens):
                tokens.extend((number[0], number[1:]))  # LaTeX reads one character: "\\frac12" is \\frac{1}{2}
            else:
                tokens.append(digits)
        elif text_content is not None:
            tokens.append((_TEXT, text_content))
        elif command is not None:
            if command not in _COMMANDS:
                raise Unparseable
            if command not in _SPACING:
                tokens.append(command)
        elif symbol is not None:
            tokens.append(symbol)
        else:  # only whitespace matched: trailing blanks were stripped, so this cannot loop
            raise Unparseable
    if tokens.count("\\sqrt") > MAX_RADICALS or sum(map(tokens.count, _LOG_COMMANDS)) > MAX_LOGARITHMS:
        raise Unparseable
    return _drop_degree_signs(tokens)


def _takes_one_digit(tokens: list) -> bool:
    """True after a command whose unbraced argument is one character: ``\\frac``, ``\\binom``, ``\\log_``."""
    return bool(tokens) and (
        tokens[-1] in _FRACTION_COMMANDS or tokens[-1] in _BINOMIAL_COMMANDS or tokens[-2:] == ["\\log", "_"]
    )


def _drop_degree_signs(tokens: list) -> list:
    """``^\\circ``, ``^{\\circ}`` and ``\\degree`` are dropped [choice: a degree answer is its number]."""
    out: list = []
    index = 0
    while index < len(tokens):
        if tokens[index : index + 2] == ["^", "\\circ"]:
            index += 2
        elif tokens[index : index + 4] == ["^", "{", "\\circ", "}"]:
            index += 4
        elif tokens[index] == "\\degree":
            index += 1
        else:
            out.append(tokens[index])
            index += 1
    return out


def parse_answer(text: str, deadline: float, nested: bool = False) -> tuple[str, str, bool]:
    """The kind (one of ``KINDS``), class string and ``math_only`` flag of ``text``.

    Raises ``Unparseable`` / ``DeadlineExceeded``. ``math_only``: the text uses a form marked
    [math] below, which the original grader refused, so scope "number" leaves it without a class
    (arith and GSM8K grade exactly as before).

    Grammar (ASCII whitespace between tokens; spacing commands ``\\!``,
    ``\\,``, ``\\;``, ``\\quad`` ... are ignored; trailing unit words and
    degree signs are dropped before parsing)::

        answer   := "$" inner "$" | inner
        inner    := "\\boxed" "{" member "}" | member
        member   := letter "\\in" list | list               # [math] "x \\in [2, 5]": the set (interval, set)
        list     := "\\{" items "\\}" | items            # braces: a set
        items    := item ("," item)*                     # 2+ items: an unordered list
        item     := words | choice | matrix | base | union | infinity | scalar_item
        infinity := ["+" | "-"] "\\infty"                   # [math] alone as an item: class "oo" / "-oo"
        words    := text group or letter runs only        -> "text:<letters, lower case>"
        choice   := A-Z | "(" A-Z ")" | text group holding one of those  -> "choice:<letter>"
        matrix   := "\\begin{pmatrix}" row ("\\\\" row)* "\\end{pmatrix}"  (bmatrix, vmatrix, matrix)
        row      := expr ("&" expr)*
        base     := [0-9]+ "_" ( [0-9]+ | "{" [0-9]+ "}" )   # a numeral in base 2..36
        union    := bracket ("\\cup" bracket)*
        bracket  := open bound "," bound close             # an interval, or a tuple when both ends are ( )
                  | "(" expr ("," expr)+ ")"               # a tuple (ordered pair, ...)
        open     := "(" | "[" | "\\left(" | "\\left["     close := ")" | "]" | "\\right)" | "\\right]"
        bound    := expr | ["+" | "-"] "\\infty"
        scalar_item := ["\\$"] pm ["=" pm] [unit]           # unit: "%", "\\%", a text group
        pm       := ["\\pm"] expr ["\\pm" expr]            # a +- b: the two values
        expr     := term (("+" | "-") term)*
        term     := signed (("*" | "/" | "\\cdot" | "\\times") signed)*
        signed   := ("+" | "-")* product
        product  := power power_r*                         # juxtaposition: "2\\sqrt{3}", "3x", "2(x+1)"
        power_r  := power starting with "\\sqrt", "\\pi", a letter, "(", "\\left(", "\\log", "\\ln", "\\binom"
                  | [math] a factorial after a factorial ("4!2!" is 4! 2!)
        power    := primary ["!"] [("^" | "**") exponent]  # [math] "5!": n <= MAX_FACTORIAL
        exponent := int | "{" int "}" | "(" int ")"       # |value| <= MAX_EXPONENT
                  | "{" expr "}" | "(" expr ")"           # [math] any rational value (below)
        primary  := number ["\\overline" digits]           # [math] "0.1\\overline{6}": a repeating decimal
                  | "\\pi" | letter | "(" expr ")" | "\\left" "(" expr "\\right" ")"
                  | ("\\frac" | "\\dfrac" | "\\tfrac") arg arg
                  | "\\sqrt" ["[" [0-9]+ "]"] "{" expr "}"  # [math] \\sqrt{-a} = i \\sqrt{a}
                  | ("\\binom" | "\\dbinom" | "\\tbinom") arg arg | "{" expr "\\choose" expr "}"   # [math]
                  | "\\log" ["_" arg] log_arg | "\\ln" log_arg    # [math] base 10 / e
        arg      := "{" expr "}" | one digit | letter | "\\pi"   # [math] unbraced: "\\tfrac12", "\\binom52"
        log_arg  := "{" expr "}" | power                   # an unbraced argument may not be followed by
                                                           # a letter, root, pi or "(" ("\\ln 2\\pi": ambiguous)
        digits   := "{" [0-9]+ "}" | one digit
        letter   := [a-z] | [A-Z]                          # "i" is the imaginary unit

    Powers [math]: a rational base takes any integer exponent whose result fits
    ``functions.MAX_POWER_BITS`` ("2^{10}", "(2^3)^3"); any other base keeps the
    bounds of the original grammar; an exponent p/q (q <= MAX_ROOT_INDEX, counted
    as a root) is the q-th root raised to p, the real root as for ``\\sqrt[q]``
    ("x^{1/3}" is "\\sqrt[3]{x}", "(-8)^{1/3}" is -2, "(-4)^{1/2}" is 2i).

    Equations: a lone "v = e" (v one letter not in e) is e's class; a list
    whose items are all "v = e" for one letter v is the list of the e; other
    equations are "eq:" and their normalised polynomial (module docstring).
    """
    parser = _Parser(tokenize(text), deadline, nested)
    kind, answer_class = parser.parse()
    return kind, answer_class, parser.math_only


class _Parser:
    """Recursive descent over the grammar of :func:`parse_answer`."""

    def __init__(self, tokens: list, deadline: float, nested: bool) -> None:
        self._tokens = tokens
        self._position = 0
        self._depth = 0
        self._deadline = deadline
        self._nested = nested
        self._allow_infinity = False
        self._radicals = tokens.count("\\sqrt")
        self.math_only = False  # a [math] form was read (parse_answer)

    # -- token helpers -------------------------------------------------------

    def _peek(self, offset: int = 0):
        index = self._position + offset
        return self._tokens[index] if index < len(self._tokens) else None

    def _take(self):
        token = self._peek()
        if token is None:
            raise Unparseable
        self._position += 1
        return token

    def _accept(self, token: str) -> bool:
        if self._peek() != token:
            return False
        self._position += 1
        return True

    def _expect(self, token: str) -> None:
        if not self._accept(token):
            raise Unparseable

    def _enter(self) -> None:
        self._depth += 1
        if self._depth > MAX_GROUP_DEPTH:
            raise Unparseable

    # -- answer level ----------------------------------------------------------

    def parse(self) -> tuple[str, str]:
        in_dollars = self._accept("$")
        if self._accept("\\boxed"):
            self._expect("{")
            answer_class = self._member()
            self._expect("}")
        else:
            answer_class = self._member()
        if in_dollars:
            self._expect("$")
        if self._position != len(self._tokens):
            raise Unparseable
        return answer_class

    def _member(self) -> tuple[str, str]:
        if _is_letter(self._peek()) and self._peek(1) == "\\in":
            # "x \\in [2, 5]" is its set [choice: the variable's name is not graded, as in "x = 5"]
            self._position += 2
            self.math_only = True
            kind, answer_class = self._list()
            if kind not in ("interval", "tuple", "set"):  # a tuple: "(2, 5)" is also the open interval
                raise Unparseable
            return kind, answer_class
        return self._list()

    def _list(self) -> tuple[str, str]:
        words = self._words()
        if words is not None:
            return "text", words
        closing = None
        if self._peek() == "\\left" and self._peek(1) == "\\{":
            self._position += 2
            closing = ("\\right", "\\}")
        elif self._accept("\\{"):
            closing = ("\\}",)
        if closing is not None:
            items = self._items()
            for token in closing:
                self._expect(token)
            return "set", set_class(items)
        items = self._items()
        if len(items) == 1:
            item = items[0]
            if item.kind == "assignment":  # "x = 5" -> 5, "y = 2x+3" -> 2x+3
                return item.nodes, item.value
            return ("set" if item.kind == "pm" else item.kind), item.answer_class
        return "set", set_class(items)

    def _items(self) -> list[Item]:
        starts = [self._position]
        items = [self._item()]
        while self._accept(","):
            starts.append(self._position)
            items.append(self._item())
            if len(items) > MAX_ITEMS:
                raise Unparseable
        if len(items) > 1:
            # [choice] "1,00", "0,001", "1, 000": an item that is an integer with a
            # leading zero reads as a broken digit grouping, not a list: no class.
            for start in starts:
                token = self._tokens[start]
                if isinstance(token, str) and len(token) > 1 and token[0] == "0" and _is_digits(token):
                    raise Unparseable
        return items

    def _words(self) -> str | None:
        """The whole (rest of the) answer as words: letter runs or text groups, one at least 2 letters."""
        end = self._position
        letters: list[str] = []
        while end < len(self._tokens):
            token = self._tokens[end]
            if isinstance(token, tuple) and WORDS.fullmatch(token[1].strip()):
                letters.append(token[1])
            elif isinstance(token, str) and len(token) == 1 and token.isascii() and token.isalpha():
                letters.append(token)
            else:
                break
            end += 1
        closing = self._tokens[end:]
        if not letters or closing not in ([], ["}"], ["$"], ["}", "$"]):
            return None
        joined = "".join(character for character in "".join(letters) if character.isalpha()).lower()
        if len(joined) < 2:
            return None
        self._position = end
        return "text:" + joined

    def _item(self) -> Item:
        check_deadline(self._deadline)
        token = self._peek()
        if isinstance(token, tuple):
            return self._text_item()
        choice = self._choice()
        if choice is not None:
            return choice
        if token in _MATRIX_BEGIN:
            return self._matrix()
        if token in ("(", "[", "\\left"):
            start, depth, math_only = self._position, self._depth, self.math_only
            bracket = self._bracket()
            if bracket is not None:
                return bracket
            self._position, self._depth, self.math_only = start, depth, math_only
        if isinstance(token, str) and token[0].isdigit() and self._peek(1) == "_":
            return self._base_numeral()
        infinity = self._infinity()
        if infinity is not None:
            return infinity
        return self._scalar_item()

    def _infinity(self) -> Item | None:
        """``\\infty``, ``+\\infty`` or ``-\\infty`` alone as an item [math]; inside sums it has no class."""
        offset = 1 if self._peek() in ("+", "-") else 0
        if self._peek(offset) != "\\infty" or self._peek(offset + 1) not in _ITEM_ENDS:
            return None
        negative = self._peek() == "-"
        self._position += offset + 1
        self.math_only = True
        return Item("number", "-oo" if negative else "oo")

    def _text_item(self) -> Item:
        content = self._take()[1].strip()
        if WORDS.fullmatch(content):
            letters = "".join(character for character in content if character.isalpha())
            if len(letters) == 1 and letters.isupper():
                return Item("choice", "choice:" + letters)
            return Item("text", "text:" + letters.lower())
        if self._nested:
            raise Unparseable
        # A text group holding mathematics ("\\text{(B)}", "\\text{5}"): parse its content once.
        kind, answer_class, math_only = parse_answer(content, self._deadline, nested=True)
        self.math_only |= math_only
        return Item(kind, answer_class)

    def _choice(self) -> Item | None:
        """A multiple-choice letter: "B" or "(B)" alone as an item."""
        token = self._peek()
        enders = _ITEM_ENDS
        if isinstance(token, str) and len(token) == 1 and "A" <= token <= "Z" and self._peek(1) in enders:
            self._position += 1
            return Item("choice", "choice:" + token)
        letter = self._peek(1)
        if (
            token == "("
            and isinstance(letter, str)
            and len(letter) == 1
            and "A" <= letter <= "Z"
            and self._peek(2) == ")"
            and self._peek(3) in enders
        ):
            self._position += 3
            return Item("choice", "choice:" + letter)
        return None

    def _matrix(self) -> Item:
        begin = self._take()
        rows: list[list[str]] = [[]]
        count = 0
        while True:
            rows[-1].append(canonical_scalar(self._expr().value, self._deadline))
            count += 1
            if count > MAX_ITEMS:
                raise Unparseable
            if self._accept("&"):
                continue
            if self._accept("\\\\"):
                if self._peek() in _MATRIX_END:
                    break
                rows.append([])
                continue
            break
        self._expect(begin.replace("begin", "end"))
        if len({len(row) for row in rows}) != 1:
            raise Unparseable
        return Item("matrix", "matrix[" + ", ".join("[" + ", ".join(row) + "]" for row in rows) + "]")

    def _base_numeral(self) -> Item:
        digits = self._take()
        self._expect("_")
        braced = self._accept("{")
        base_token = self._take()
        if braced:
            self._expect("}")
        if not (isinstance(base_token, str) and _is_digits(base_token) and _is_digits(digits)):
            raise Unparseable
        base = int(base_token)
        if not 2 <= base <= 36 or any(int(digit) >= base for digit in digits):
            raise Unparseable
        return Item("base", f"{digits.lstrip('0') or '0'}_{base}")

    def _open(self) -> tuple[str, bool] | None:
        had_left = self._accept("\\left")
        token = self._peek()
        if token not in ("(", "["):
            return None
        self._position += 1
        return token, had_left

    def _close(self, had_left: bool) -> str | None:
        if had_left and not self._accept("\\right"):
            return None
        token = self._peek()
        if token not in (")", "]"):
            return None
        self._position += 1
        return token

    def _bracket(self) -> Item | None:
        """An interval, a union of intervals or a tuple; None when the text is not one (then re-read as a scalar)."""
        parts = [self._one_bracket()]
        if parts[0] is None:
            return None
        while self._accept("\\cup"):
            part = self._one_bracket()
            if part is None or len(part[1]) != 2:
                raise Unparseable
            parts.append(part)
            if len(parts) > MAX_INTERVALS:
                raise Unparseable
        if self._peek() not in (None, ",", "}", "$", "\\}", "\\right"):
            return None
        if len(parts) == 1:
            (opener, closer), nodes = parts[0]
            infinite = any(node.value.has(sympy.oo, -sympy.oo) for node in nodes)
            if opener == "(" and closer == ")" and not infinite:
                classes = [canonical_scalar(node.value, self._deadline) for node in nodes]
                return Item("tuple", "(" + ", ".join(classes) + ")")
            if len(nodes) != 2:
                raise Unparseable
        return interval_union(parts, self._deadline)

    def _one_bracket(self):
        opened = self._open()
        if opened is None:
            return None
        opener, had_left = opened
        self._enter()
        self._allow_infinity = True
        try:
            nodes = [self._expr()]
            if not self._accept(","):
                return None
            nodes.append(self._expr())
            while self._accept(","):
                nodes.append(self._expr())
                if len(nodes) > MAX_ITEMS:
                    raise Unparseable
        finally:
            self._allow_infinity = False
        closer = self._close(had_left)
        if closer is None:
            return None
        self._depth -= 1
        return (opener, closer), nodes

    def _scalar_item(self) -> Item:
        self._accept("\\$")  # a currency sign [choice: dropped]
        nodes = self._plus_minus()
        values = [node.value for node in nodes]
        if self._accept("="):
            right = self._plus_minus()
            item = equation(nodes, right, self._deadline)
        elif len(values) == 2:
            item = plus_minus_item(values, self._deadline)
        else:
            answer_class = canonical_scalar(values[0], self._deadline)
            item = Item(scalar_kind(values[0], answer_class), answer_class, value=values[0])
        if self._peek() in _PERCENT_SIGNS:
            self._take()  # [choice] a percent sign is dropped ("25\\%" is 25)
        elif isinstance(self._peek(), tuple) and is_unit(self._peek()[1]):
            self._take()  # a unit in a text group ("5\\text{ cm}") [choice: dropped]
        return item

    def _plus_minus(self) -> list[Node]:
        """One value, or the two values of "a \\pm b" / "\\pm b" (sums through ``scalar.add``: bounded)."""
        if self._accept("\\pm"):
            node = self._expr()
            return [node, negated(node)]
        node = self._expr()
        if self._accept("\\pm"):
            other = self._expr()
            return [scalar.add(node, other), scalar.add(node, negated(other))]
        return [node]

    # -- scalar expressions (the original grammar, with letters) -----------------

    def _expr(self) -> Node:
        node = self._term()
        while self._peek() in ("+", "-"):
            negate = self._take() == "-"
            operand = self._term()
            node = scalar.add(node, operand._replace(value=-operand.value) if negate else operand)
        return node

    def _term(self) -> Node:
        node = self._signed()
        while self._peek() in _PRODUCT_OPERATORS:
            operator = self._take()
            operand = self._signed()
            node = scalar.divide(node, operand) if operator == "/" else scalar.multiply(node, operand)
        return node

    def _signed(self) -> Node:
        negative = False
        while self._peek() in ("+", "-"):
            negative ^= self._take() == "-"
        node = self._product()
        return node._replace(value=-node.value) if negative else node

    def _implicit_factor_follows(self) -> bool:
        token = self._peek()
        if token in ("\\sqrt", "\\pi", "(") or token in _LOG_COMMANDS or token in _BINOMIAL_COMMANDS:
            return True
        if token == "\\left":
            return self._peek(1) == "("
        if self._tokens[self._position - 1] == "!" and _is_digits(token) and self._peek(1) == "!":
            return True  # [math] "4!2!" is 4! 2! (a number after a number needs an operator otherwise)
        return isinstance(token, str) and len(token) == 1 and token.isascii() and token.isalpha()

    def _product(self) -> Node:
        node = self._power()
        while self._implicit_factor_follows():
            node = scalar.multiply(node, self._power())
        return node

    def _power(self) -> Node:
        base = self._primary()
        if self._accept("!"):
            self.math_only = True
            base = Node(functions.factorial(base.value))
        if self._peek() in ("^", "**"):
            self._take()
            return self._raise(base, *self._exponent())
        return base

    def _exponent(self) -> tuple[sympy.Rational, bool]:
        """The exponent's value, and whether it has the original form (a signed integer literal, maybe in {} or ())."""
        token = self._peek()
        closing = {"{": "}", "(": ")"}.get(token) if isinstance(token, str) else None
        if closing is None:
            return sympy.Integer(self._integer(allow_sign=True)), True
        offset = 1
        while self._peek(offset) in ("+", "-"):
            offset += 1
        if isinstance(self._peek(offset), str) and _is_digits(self._peek(offset)) and self._peek(offset + 1) == closing:
            self._take()  # the original form, read as before (no group depth)
            exponent = self._integer(allow_sign=True)
            self._expect(closing)
            return sympy.Integer(exponent), True
        self._take()
        value = self._group((closing,)).value  # [math] "2^{1/2}", "2^{10^{2}}": bounded by _raise
        if not value.is_Rational:
            raise Unparseable  # [choice] symbolic exponents ("2^n", "e^{i\\pi}") are not graded
        return value, False

    def _raise(self, base: Node, exponent: sympy.Rational, literal: bool) -> Node:
        if exponent.q != 1:  # [math] x^{p/q}: the q-th root (counted as one) raised to p
            self.math_only = True
            self._radicals += 1
            if exponent.q > MAX_ROOT_INDEX or self._radicals > MAX_RADICALS or base.value.has(sympy.I):
                raise Unparseable
            base, exponent, literal = self._root(base, int(exponent.q)), sympy.Integer(exponent.p), False
        value = int(exponent)
        original = literal and abs(value) <= MAX_EXPONENT and base.degree * max(1, abs(value)) <= MAX_EXPONENT
        if base.value.is_Rational and not original:
            # [math] a rational's power folds to one rational: its size, not the degree, is what to bound.
            self.math_only = True
            return Node(functions.rational_power(base.value, value))
        self.math_only |= not literal
        return scalar.power(base, value)

    def _root(self, radicand: Node, index: int) -> Node:
        """The real root, and [math] the square root of a negative number as i times a real root."""
        if index == 2 and radicand.value.is_extended_negative:
            self.math_only = True
            return scalar.multiply(Node(sympy.I), scalar.root(negated(radicand), 2))
        return scalar.root(radicand, index)

    def _integer(self, allow_sign: bool) -> int:
        negative = False
        while allow_sign and self._peek() in ("+", "-"):
            negative ^= self._take() == "-"
        token = self._take()
        if not isinstance(token, str) or not _is_digits(token):
            raise Unparseable
        return -int(token) if negative else int(token)

    def _group(self, closing: tuple[str, ...]) -> Node:
        self._enter()
        node = self._expr()
        for token in closing:
            self._expect(token)
        self._depth -= 1
        return node

    def _primary(self) -> Node:
        check_deadline(self._deadline)
        token = self._take()
        if not isinstance(token, str):
            raise Unparseable
        if token == "(":
            return self._group((")",))
        if token == "\\left":
            self._expect("(")
            return self._group(("\\right", ")"))
        if token in _FRACTION_COMMANDS:
            numerator = self._argument()
            return scalar.divide(numerator, self._argument())
        if token in _BINOMIAL_COMMANDS:
            self.math_only = True
            top = self._argument()
            return Node(functions.binomial(top.value, self._argument().value))
        if token == "{":  # [math] "{5 \\choose 2}"; any other braced group at this level has no class
            self._enter()
            top = self._expr()
            self._expect("\\choose")
            bottom = self._group(("}",))
            self._depth -= 1
            self.math_only = True
            return Node(functions.binomial(top.value, bottom.value))
        if token in _LOG_COMMANDS:
            return self._logarithm(token)
        if token == "\\sqrt":
            index = 2
            if self._accept("["):
                index = self._integer(allow_sign=False)
                self._expect("]")
                if not 2 <= index <= MAX_ROOT_INDEX:
                    raise Unparseable
            self._expect("{")
            radicand = self._group(("}",))
            if radicand.value.has(sympy.I):
                raise Unparseable  # [choice] roots of complex numbers are not graded
            return self._root(radicand, index)
        if token == "\\pi":
            return Node(sympy.pi)
        if token == "\\infty" and self._allow_infinity:
            return Node(sympy.oo)
        if token[0] in "0123456789.":
            if self._accept("\\overline"):
                return self._repeating_decimal(token)
            # Fraction("17.5") is exact (stdlib parsing of a token the number regex matched).
            value = Fraction(token.removesuffix("."))
            return Node(sympy.Rational(value.numerator, value.denominator))
        if len(token) == 1 and token.isascii() and token.isalpha():
            if token == "i":
                return Node(sympy.I)  # [choice] i is the imaginary unit
            if (
                self._peek() == "("
                and self._tokens[self._position - 2 : self._position - 1]
                and _is_letter(self._tokens[self._position - 2])
            ):
                raise Unparseable  # a letter run before "(" reads as a function call ("sqrt(4)", "f(x)")
            return Node(sympy.Symbol(token))
        raise Unparseable

    def _argument(self) -> Node:
        """A braced group, or [math] one digit, letter or ``\\pi`` unbraced (as LaTeX reads it)."""
        if self._accept("{"):
            return self._group(("}",))
        token = self._peek()
        if isinstance(token, str) and ((len(token) == 1 and _is_digits(token)) or _is_letter(token) or token == "\\pi"):
            self.math_only = True
            return self._primary()
        raise Unparseable

    def _logarithm(self, command: str) -> Node:
        """[math] ``\\log_b x`` (``\\log x``: base 10 [choice]) and ``\\ln x`` of positive rationals."""
        self.math_only = True
        base = sympy.Integer(10) if command == "\\log" else None
        if command == "\\log" and self._accept("_"):
            base = self._argument().value
        if self._peek() == "{":
            argument = self._argument()
        else:
            delimited = self._peek() in ("(", "\\left")
            argument = self._power()
            follower = self._peek()
            if not delimited and (follower in ("\\sqrt", "\\pi", "(", "\\left") or _is_letter(follower)):
                raise Unparseable  # "\\ln 2\\pi", "\\log_2 8x": where the argument ends is ambiguous
        return Node(functions.logarithm(argument.value, base))

    def _repeating_decimal(self, number: str) -> Node:
        """[math] "0.\\overline{3}" = 1/3, "0.1\\overline{6}" = 1/6: the digits in the group repeat."""
        self.math_only = True
        if self._accept("{"):
            repeated = self._take()
            self._expect("}")
        else:
            repeated = self._take()
            if not (isinstance(repeated, str) and len(repeated) == 1):
                raise Unparseable
        if not (isinstance(repeated, str) and _is_digits(repeated)) or "." not in number:
            raise Unparseable
        if len(number) - 1 + len(repeated) > MAX_NUMBER_DIGITS:
            raise Unparseable
        return Node(functions.repeating_decimal(number, repeated))


def _is_digits(token: str) -> bool:
    return bool(token) and all("0" <= character <= "9" for character in token)


def _is_letter(token) -> bool:
    return isinstance(token, str) and len(token) == 1 and token.isascii() and token.isalpha()


__all__ = [
    "MAX_GROUP_DEPTH",
    "MAX_INTERVALS",
    "MAX_LOGARITHMS",
    "MAX_ITEMS",
    "MAX_NUMBER_DIGITS",
    "MAX_RADICALS",
    "KINDS",
    "DeadlineExceeded",
    "Unparseable",
    "parse_answer",
    "tokenize",
]
