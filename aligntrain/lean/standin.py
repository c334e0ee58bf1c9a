"""A stand-in Lean verifier: a rule-based prover over a toy propositional goal language.

It has :class:`~aligntrain.lean.verifier.LeanVerifier`'s interface, so the data,
the search and the tests can run where Lean is not installed. It is deterministic,
needs no process, and never evaluates model text: tactics, terms, statements and
states are read by whitelist tokenizers and recursive-descent parsers with bounded
length and nesting. Its goals print as Lean 4 prints them (hypotheses, then
``⊢ target``; consecutive hypotheses of one type share a line): a toy theorem reads
as a Lean 4 theorem, and its traced steps as LeanDojo's (no Lean checked this here).

The toy language [choice]
-------------------------

- **Formulas**: proposition variables (identifiers declared ``p q : Prop``),
  ``True``, and ``∧ ∨ → ↔`` with Lean's precedences (``∧`` 35, ``∨`` 30, ``→`` 25,
  right-associative; ``↔`` 20, not associative), parentheses where a tree needs
  them (``format_formula`` writes the fewest).
- **Statements**: ``theorem NAME (p q : Prop) (h : p ∧ q) : q ∧ p := by``, an optional
  ``sorry`` after ``by``; every binder is ``(names : Prop)`` or ``(names : formula)``.
  A theorem without a statement starts from its ``initial_state`` (a state text).
- **States**: goals separated by a blank line; a goal is lines ``names : Prop`` or
  ``names : formula``, then ``⊢ formula``. Variables must be declared before use.
- **Tactics** (each acts on the first goal):
  ``intro h₁ h₂ …`` (``A → B``), ``constructor`` (``A ∧ B`` gives goals A, B;
  ``A ↔ B`` gives ``A → B``, ``B → A``; closes ``True``), ``left`` / ``right``
  (``A ∨ B``), ``exact TERM``, ``apply TERM`` (a term of type ``A₁ → … → target``
  leaves goals A₁ …), ``assumption``, ``trivial`` (``True`` or an assumption),
  ``rcases h with ⟨a, b⟩`` / ``obtain ⟨a, b⟩ := h`` (``h : A ∧ B``, or ``A ↔ B`` giving
  ``a : A → B``, ``b : B → A``), ``rcases h with a | b`` (``h : A ∨ B``: two goals).
- **Terms**: a hypothesis ``h``, projections ``h.1 h.2 h.left h.right h.mp h.mpr``,
  application ``f a`` (``f : A → B``), the anonymous constructor ``⟨a, b⟩`` (for
  ``∧`` and ``↔``, checked against the goal), parentheses.

Departures from Lean [choice]: a new hypothesis may not reuse a name in the
context (Lean would shadow it as ``h✝``); goals carry no ``case`` tags; one tactic
per step (no ``;`` or ``<;>`` sequences, no ``·`` focusing). Anything outside the
whitelist is a :class:`~aligntrain.lean.verifier.TacticError`, never an exception.
"""

from __future__ import annotations

import itertools
import re
from dataclasses import dataclass
from typing import Union

from aligntrain.lean.verifier import (
    DEFAULT_TIMEOUT_S,
    LeanState,
    ProofFinished,
    StepResult,
    TacticError,
    Theorem,
    screen_tactic,
)

MAX_STATE_CHARS = 8192
MAX_NESTING = 32
MAX_NAME_CHARS = 24
PROP = "Prop"
TRUE = "True"

Formula = Union[str, tuple[str, "Formula", "Formula"]]  # noqa: UP007 - a recursive alias needs the string form
"""A variable name or ``True``, or (connective, left, right)."""

Hypothesis = tuple[str, Union[str, Formula]]  # noqa: UP007
"""(name, ``PROP`` for a proposition variable, else its formula)."""


@dataclass(frozen=True)
class Goal:
    hypotheses: tuple[Hypothesis, ...]
    target: Formula


PRECEDENCE = {"∧": 35, "∨": 30, "→": 25, "↔": 20}
_RIGHT_ASSOCIATIVE = {"∧", "∨", "→"}
_NAME = rf"[A-Za-z_][A-Za-z0-9_'₀-₉]{{0,{MAX_NAME_CHARS - 1}}}"
_NAME_RE = re.compile(_NAME)
_KEYWORDS = {"theorem", "lemma", "by", "fun", "at", "with", "Prop", "True", "False", "sorry", "Type"}
_FORMULA_TOKEN = re.compile(rf"\s*(?:({_NAME})|([()∧∨→↔]))")
_TERM_TOKEN = re.compile(rf"\s*(?:({_NAME})|\.(1|2|left|right|mp|mpr)(?![\w'])|([⟨⟩,()]))")
_FIELDS = {"1": 0, "left": 0, "mp": 0, "2": 1, "right": 1, "mpr": 1}
_FIELDS_OF = {"∧": ("1", "2", "left", "right"), "↔": ("1", "2", "mp", "mpr")}


class _Unreadable(ValueError):
    pass


# ---------------------------------------------------------------------------
# Formulas


def format_formula(formula: Formula) -> str:
    """Lean's text of ``formula``: spaces around connectives, the fewest parentheses that keep the tree."""
    if isinstance(formula, str):
        return formula
    connective, left, right = formula
    precedence = PRECEDENCE[connective]
    left_text, right_text = format_formula(left), format_formula(right)
    if not isinstance(left, str) and PRECEDENCE[left[0]] <= precedence:
        left_text = f"({left_text})"
    if not isinstance(right, str):
        right_precedence = PRECEDENCE[right[0]]
        if right_precedence < precedence or (right_precedence == precedence and connective not in _RIGHT_ASSOCIATIVE):
            right_text = f"({right_text})"
    return f"{left_text} {connective} {right_text}"


def _tokens(text: str, pattern: re.Pattern[str]) -> list[str]:
    """``text`` cut into the tokens of ``pattern`` (whitespace between them dropped); _Unreadable otherwise."""
    tokens, at = [], 0
    while at < len(text):
        if text[at:].isspace():
            break
        match = pattern.match(text, at)
        if match is None:
            raise _Unreadable(f"has {text[at:].lstrip()[:12]!r}, outside the toy language")
        tokens.append(match.group(0).strip())
        at = match.end()
    return tokens


class _Cursor:
    """A position in a token list, for the two recursive-descent parsers below."""

    def __init__(self, tokens: list[str]) -> None:
        self.tokens, self.at = tokens, 0

    def peek(self) -> str | None:
        return self.tokens[self.at] if self.at < len(self.tokens) else None

    def take(self) -> str:
        token = self.peek()
        if token is None:
            raise _Unreadable("ends too early")
        self.at += 1
        return token

    def finished(self, parsed, what: str):
        """``parsed``, once every token is read; else the first token left over is named."""
        if self.peek() is not None:
            raise _Unreadable(f"has {self.peek()!r} after a complete {what}")
        return parsed


class _FormulaParser(_Cursor):
    """iff := implication ("↔" implication)?; implication := disjunction ("→" implication)?;
    disjunction := conjunction ("∨" disjunction)?; conjunction := atom ("∧" conjunction)?;
    atom := name | "(" iff ")"."""

    _LEVELS = ("→", "∨", "∧")

    def __init__(self, tokens: list[str], variables: set[str]) -> None:
        super().__init__(tokens)
        self.variables = variables

    def iff(self, depth: int) -> Formula:
        left = self.level(0, depth)
        if self.peek() == "↔":
            self.take()
            right = self.level(0, depth)
            if self.peek() == "↔":
                raise _Unreadable("chains '↔' without parentheses")
            return ("↔", left, right)
        return left

    def level(self, index: int, depth: int) -> Formula:
        if index == len(self._LEVELS):
            return self.atom(depth)
        connective = self._LEVELS[index]
        left = self.level(index + 1, depth)
        if self.peek() == connective:
            self.take()
            return (connective, left, self.level(index, depth))
        return left

    def atom(self, depth: int) -> Formula:
        token = self.take()
        if token == "(":
            if depth >= MAX_NESTING:
                raise _Unreadable(f"nests parentheses deeper than {MAX_NESTING}")
            formula = self.iff(depth + 1)
            if self.take() != ")":
                raise _Unreadable("has an unclosed parenthesis")
            return formula
        if token == TRUE:
            return TRUE
        if _NAME_RE.fullmatch(token) and token not in _KEYWORDS:
            if token not in self.variables:
                raise _Unreadable(f"uses {token!r}, not a declared proposition")
            return token
        raise _Unreadable(f"has {token!r} where a proposition belongs")


def parse_formula(text: str, variables: set[str]) -> Formula:
    """The formula of ``text`` over the proposition ``variables``; ValueError naming what is wrong."""
    if len(text) > MAX_STATE_CHARS:
        raise ValueError(f"formula longer than {MAX_STATE_CHARS} characters")
    try:
        parser = _FormulaParser(_tokens(text, _FORMULA_TOKEN), variables)
        return parser.finished(parser.iff(0), "formula")
    except _Unreadable as err:
        raise ValueError(f"formula {text.strip()[:80]!r} {err}") from None


# ---------------------------------------------------------------------------
# Goals, states, statements


def format_goal(goal: Goal) -> str:
    """Lean's text of a goal: consecutive hypotheses of one type on one line, then ``⊢ target``."""
    lines = []
    for kind, group in itertools.groupby(goal.hypotheses, key=lambda hypothesis: hypothesis[1]):
        names = " ".join(name for name, _ in group)
        lines.append(f"{names} : {kind if kind == PROP else format_formula(kind)}")
    return "\n".join([*lines, f"⊢ {format_formula(goal.target)}"])


def _declare(hypotheses: list[Hypothesis], names: list[str], kind_text: str, where: str) -> None:
    """Append ``names : kind_text`` to ``hypotheses`` (checked names, the kind parsed over the variables so far)."""
    if not names:
        raise ValueError(f"{where}: a hypothesis line needs names before ':'")
    for name in names:
        if not _NAME_RE.fullmatch(name) or name in _KEYWORDS:
            raise ValueError(f"{where}: {name[:30]!r} is not a name")
        if any(name == known for known, _ in hypotheses):
            raise ValueError(f"{where}: {name!r} is declared twice")
    variables = {known for known, kind in hypotheses if kind == PROP}
    try:
        kind = PROP if kind_text.strip() == PROP else parse_formula(kind_text, variables)
    except ValueError as err:
        raise ValueError(f"{where}: {err}") from None
    hypotheses.extend((name, kind) for name in names)


def parse_goal(text: str) -> Goal:
    """The goal of a goal text (hypothesis lines, then ``⊢ target``); ValueError naming what is wrong."""
    lines = text.split("\n")
    if not lines[-1].startswith("⊢ "):
        raise ValueError(f"goal {text[:60]!r} does not end with a line '⊢ <target>'")
    hypotheses: list[Hypothesis] = []
    for line in lines[:-1]:
        names, colon, kind = line.partition(" : ")
        if not colon:
            raise ValueError(f"goal line {line[:60]!r} is not '<names> : <type>'")
        _declare(hypotheses, names.split(" "), kind, f"goal line {line[:60]!r}")
    variables = {name for name, kind in hypotheses if kind == PROP}
    return Goal(tuple(hypotheses), parse_formula(lines[-1][2:], variables))


def parse_state(text: str) -> tuple[Goal, ...]:
    """The goals of a state text (goals separated by a blank line); ValueError naming what is wrong."""
    if not isinstance(text, str) or not text.strip():
        raise ValueError("a state is a non-empty text")
    if len(text) > MAX_STATE_CHARS:
        raise ValueError(f"state longer than {MAX_STATE_CHARS} characters")
    return tuple(parse_goal(goal) for goal in text.strip("\n").split("\n\n"))


def parse_statement(text: str) -> tuple[str, Goal]:
    """(name, first goal) of ``theorem NAME (binders) : formula := by [sorry]``; ValueError otherwise."""
    if not isinstance(text, str) or len(text) > MAX_STATE_CHARS:
        raise ValueError(f"a statement is a text of at most {MAX_STATE_CHARS} characters")
    head = re.match(rf"\s*(?:theorem|lemma)\s+({_NAME})", text)
    if head is None:
        raise ValueError(f"statement {text[:60]!r} does not start with 'theorem <name>'")
    at, hypotheses = head.end(), []
    while True:
        rest = text[at:].lstrip()
        at = len(text) - len(rest)
        if not rest.startswith("("):
            break
        depth, end = 0, None
        for offset, char in enumerate(rest):
            depth += {"(": 1, ")": -1}.get(char, 0)
            if depth == 0:
                end = offset
                break
        if end is None:
            raise ValueError(f"statement {text[:60]!r} has an unclosed binder")
        names, colon, kind = rest[1:end].partition(":")
        if not colon:
            raise ValueError(f"binder {rest[: end + 1][:60]!r} is not '(<names> : <type>)'")
        _declare(hypotheses, names.split(), kind, f"binder {rest[: end + 1][:60]!r}")
        at += end + 1
    tail = re.fullmatch(r":\s*(?P<target>.+?)\s*:=\s*by(?:\s+sorry)?\s*", text[at:].lstrip(), re.S)
    if tail is None:
        raise ValueError(f"statement {text[:60]!r} does not end with ': <formula> := by'")
    variables = {name for name, kind in hypotheses if kind == PROP}
    return head[1], Goal(tuple(hypotheses), parse_formula(tail["target"], variables))


# ---------------------------------------------------------------------------
# Terms


class _TermParser(_Cursor):
    """term := postfix+ (application); postfix := primary field*;
    primary := name | "⟨" term "," term "⟩" | "(" term ")"."""

    def term(self, depth: int) -> tuple:
        parts = [self.postfix(depth)]
        while self.peek() is not None and self.peek() not in (")", "⟩", ",") and not self.peek().startswith("."):
            parts.append(self.postfix(depth))
        return parts[0] if len(parts) == 1 else ("app", parts[0], tuple(parts[1:]))

    def postfix(self, depth: int) -> tuple:
        term = self.primary(depth)
        while (self.peek() or "").startswith("."):
            term = ("field", term, self.take()[1:])
        return term

    def primary(self, depth: int) -> tuple:
        token = self.take()
        if token in ("(", "⟨"):
            if depth >= MAX_NESTING:
                raise _Unreadable(f"nests deeper than {MAX_NESTING}")
            first = self.term(depth + 1)
            if token == "(":
                if self.take() != ")":
                    raise _Unreadable("has an unclosed parenthesis")
                return first
            if self.take() != ",":
                raise _Unreadable("has an anonymous constructor without two parts")
            second = self.term(depth + 1)
            if self.take() != "⟩":
                raise _Unreadable("has an unclosed '⟨'")
            return ("pair", first, second)
        if _NAME_RE.fullmatch(token) and token not in _KEYWORDS:
            return ("name", token)
        raise _Unreadable(f"has {token!r} where a term belongs")


def _parse_term(text: str) -> tuple:
    try:
        parser = _TermParser(_tokens(text, _TERM_TOKEN))
        return parser.finished(parser.term(0), "term")
    except _Unreadable as err:
        raise _Unreadable(f"term {text.strip()[:40]!r} {err}") from None


def _context(goal: Goal) -> dict[str, Formula]:
    return {name: kind for name, kind in goal.hypotheses if kind != PROP}


def _infer(term: tuple, goal: Goal) -> Formula:
    """The type of ``term`` in ``goal``'s context; _Unreadable naming why it has none."""
    kind = term[0]
    if kind == "name":
        name = term[1]
        if any(name == known for known, sort in goal.hypotheses if sort == PROP):
            raise _Unreadable(f"{name!r} is a proposition, not a proof")
        if name not in _context(goal):
            raise _Unreadable(f"unknown identifier {name!r}")
        return _context(goal)[name]
    if kind == "field":
        base, field = _infer(term[1], goal), term[2]
        if isinstance(base, str) or field not in _FIELDS_OF.get(base[0], ()):
            raise _Unreadable(f"'.{field}' does not apply to a proof of {format_formula(base)}")
        _, left, right = base
        if base[0] == "∧":
            return (left, right)[_FIELDS[field]]
        return ("→", left, right) if _FIELDS[field] == 0 else ("→", right, left)
    if kind == "app":
        function = _infer(term[1], goal)
        for argument in term[2]:
            if isinstance(function, str) or function[0] != "→":
                raise _Unreadable(f"a proof of {format_formula(function)} is not a function")
            _check(argument, function[1], goal)
            function = function[2]
        return function
    raise _Unreadable("an anonymous constructor ⟨…⟩ needs the goal's type: use it with exact")


def _check(term: tuple, expected: Formula, goal: Goal) -> None:
    """_Unreadable unless ``term`` proves ``expected`` in ``goal``'s context."""
    if term[0] == "pair":
        if isinstance(expected, str) or expected[0] not in ("∧", "↔"):
            raise _Unreadable(f"⟨…⟩ does not prove {format_formula(expected)}")
        _, left, right = expected
        parts = (left, right) if expected[0] == "∧" else (("→", left, right), ("→", right, left))
        _check(term[1], parts[0], goal)
        _check(term[2], parts[1], goal)
        return
    found = _infer(term, goal)
    if found != expected:
        raise _Unreadable(f"type mismatch: the term proves {format_formula(found)}, not {format_formula(expected)}")


# ---------------------------------------------------------------------------
# Tactics

_TACTICS = {
    "intro": re.compile(rf"intro((?: +{_NAME})+)"),
    "bare": re.compile(r"constructor|left|right|assumption|trivial"),
    "exact": re.compile(r"(exact|apply) +(\S.*)", re.S),
    "rcases_pair": re.compile(rf"rcases +({_NAME}) +with +⟨ *({_NAME}) *, *({_NAME}) *⟩"),
    "obtain_pair": re.compile(rf"obtain +⟨ *({_NAME}) *, *({_NAME}) *⟩ *:= *({_NAME})"),
    "rcases_or": re.compile(rf"rcases +({_NAME}) +with +({_NAME}) *\| *({_NAME})"),
}


def _fresh(goal: Goal, names: list[str], freed: str | None = None) -> None:
    taken = {name for name, _ in goal.hypotheses if name != freed}
    for name in names:
        if name in _KEYWORDS:
            raise _Unreadable(f"{name!r} is a keyword, not a name")
        if name in taken:
            raise _Unreadable(f"{name!r} is already in the context (the stand-in does not shadow)")
        taken.add(name)


def _apply_tactic(goal: Goal, tactic: str) -> list[Goal]:
    """The goals that replace ``goal`` after ``tactic``; _Unreadable naming why it does not apply."""
    target = goal.target
    if match := _TACTICS["intro"].fullmatch(tactic):
        names = match[1].split()
        _fresh(goal, names)
        hypotheses = list(goal.hypotheses)
        for name in names:
            if isinstance(target, str) or target[0] != "→":
                raise _Unreadable(f"intro: the goal {format_formula(target)} is not an implication")
            hypotheses.append((name, target[1]))
            target = target[2]
        return [Goal(tuple(hypotheses), target)]
    if _TACTICS["bare"].fullmatch(tactic):
        return _bare(goal, tactic)
    if match := _TACTICS["exact"].fullmatch(tactic):
        term = _parse_term(match[2])
        if match[1] == "exact":
            _check(term, target, goal)
            return []
        found, premises = _infer(term, goal), []
        while found != target:
            if isinstance(found, str) or found[0] != "→":
                raise _Unreadable(f"apply: the term's conclusion does not match the goal {format_formula(target)}")
            premises.append(found[1])
            found = found[2]
        return [Goal(goal.hypotheses, premise) for premise in premises]
    for form in ("rcases_pair", "obtain_pair", "rcases_or"):
        if match := _TACTICS[form].fullmatch(tactic):
            source, first, second = (match[3], match[1], match[2]) if form == "obtain_pair" else match.groups()
            return _rcases(goal, source, first, second, pair=form != "rcases_or")
    raise _Unreadable(f"unknown tactic {tactic[:40]!r} (the stand-in knows {', '.join(_TACTIC_NAMES)})")


_TACTIC_NAMES = ("intro", "constructor", "left", "right", "exact", "apply", "assumption", "trivial", "rcases", "obtain")


def _bare(goal: Goal, tactic: str) -> list[Goal]:
    target = goal.target
    if tactic in ("assumption", "trivial"):
        if target == TRUE and tactic == "trivial":
            return []
        if target in _context(goal).values():
            return []
        raise _Unreadable(f"{tactic}: no hypothesis proves {format_formula(target)}")
    if tactic == "constructor":
        if target == TRUE:
            return []
        if not isinstance(target, str) and target[0] in ("∧", "↔"):
            _, left, right = target
            parts = (left, right) if target[0] == "∧" else (("→", left, right), ("→", right, left))
            return [Goal(goal.hypotheses, part) for part in parts]
        raise _Unreadable(f"constructor: the goal {format_formula(target)} is not ∧, ↔ or True")
    if isinstance(target, str) or target[0] != "∨":
        raise _Unreadable(f"{tactic}: the goal {format_formula(target)} is not a disjunction")
    return [Goal(goal.hypotheses, target[1] if tactic == "left" else target[2])]


def _rcases(goal: Goal, source: str, first: str, second: str, pair: bool) -> list[Goal]:
    context = _context(goal)
    if source not in context:
        raise _Unreadable(f"unknown hypothesis {source!r}")
    _fresh(goal, [first, second], freed=source)
    kind = context[source]
    wanted = ("∧", "↔") if pair else ("∨",)
    if isinstance(kind, str) or kind[0] not in wanted:
        raise _Unreadable(f"rcases: {source} : {format_formula(kind)} is not {' or '.join(wanted)}")
    _, left, right = kind
    kept = tuple(hypothesis for hypothesis in goal.hypotheses if hypothesis[0] != source)
    if pair:
        parts = (left, right) if kind[0] == "∧" else (("→", left, right), ("→", right, left))
        return [Goal((*kept, (first, parts[0]), (second, parts[1])), goal.target)]
    return [Goal((*kept, (first, left)), goal.target), Goal((*kept, (second, right)), goal.target)]


# ---------------------------------------------------------------------------
# The verifier


class StandinVerifier:
    """:class:`~aligntrain.lean.verifier.LeanVerifier` over the toy language (module docstring).

    Proof-state numbers count up from 0 per verifier, as the REPL's do; a state is
    read back from its goal texts, so any state this verifier printed can be stepped
    again (search trees branch from it).
    """

    def __init__(self, timeout_s: float = DEFAULT_TIMEOUT_S) -> None:
        self.timeout_s = timeout_s  # every call is a bounded parse: nothing here can run long
        self._next_state = itertools.count()

    def _state(self, goals: list[Goal] | tuple[Goal, ...]) -> LeanState:
        return LeanState(next(self._next_state), tuple(format_goal(goal) for goal in goals))

    def start(self, theorem: Theorem) -> LeanState | TacticError:
        """The first state of ``theorem``: from its statement, else from its ``initial_state``."""
        try:
            if theorem.statement is not None:
                return self._state([parse_statement(theorem.statement)[1]])
            if theorem.initial_state is not None:
                return self._state(parse_state(theorem.initial_state))
        except ValueError as err:
            return TacticError(f"theorem {theorem.name!r} is not in the stand-in's toy language: {err}")
        return TacticError(f"theorem {theorem.name!r} has neither a statement nor an initial state")

    def step(self, state: LeanState, tactic: object) -> StepResult:
        """The state after ``tactic`` on the first goal of ``state``, ProofFinished, or TacticError."""
        if not isinstance(state, LeanState):
            raise ValueError(f"a state is a LeanState, got {type(state).__name__}")
        goals = parse_state(state.text)  # a state this verifier printed reads back; another is a caller's bug
        screened = screen_tactic(tactic)
        if isinstance(screened, TacticError):
            return screened
        try:
            replaced = _apply_tactic(goals[0], screened.strip())
        except _Unreadable as err:
            return TacticError(str(err))
        remaining = [*replaced, *goals[1:]]
        if not remaining:
            return ProofFinished(next(self._next_state))
        return self._state(remaining)

    def close(self) -> None:
        """Nothing to end: the stand-in runs no process."""
