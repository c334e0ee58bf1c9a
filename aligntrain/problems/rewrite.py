"""Step-verified arithmetic rewriting ("rewrite"): a small formal system for step-wise DCO.

DCO ("Rethinking Fine-Tuning when Scaling Test-Time Compute: Limiting Confidence
Improves Mathematical Reasoning", Chen et al. 2025, arXiv:2502.07154) §5.3 trains a
prover one tactic at a time: at proof state s the model writes a tactic t with
confidence p_s = π(t | s), a proof assistant checks it and returns the next
state, and a proof is complete when no goal is left. DCO_step puts DCO's factor
F(N_step, p_s) (DCO eq. 4) on each step's cross-entropy; naive DCO puts
F(N, Π_s p_s) on the whole proof (docs/math.md §2.8). This module is an
embedded stand-in for the proof assistant: exact, fast and CPU-only, so the
step-wise objectives can be studied without Lean.

The formal system [choice]
--------------------------

- **State**: an integer expression over ``+ - *`` with parentheses, written
  canonically (no spaces, no leading zeros, the fewest parentheses that keep its
  tree: a right operand of the same precedence is always parenthesised, so
  ``"7-(2+3)"`` and ``"7-2+3"`` are different trees). Every operation is binary and
  left-associative; ``*`` binds tighter than ``+`` and ``-``.
- **Goal**: a statement ``E = v`` with v the value of E. The proof starts in the
  state E and is complete when the state is the number v (``is_proved``).
- **Tactic**: one line ``eval <a><op><b>=<c>`` with a, b, c non-negative integer
  literals (canonical, at most ``MAX_LITERAL_DIGITS`` digits) and op one of
  ``+ - *``. It applies when the state has a *redex* ``a op b`` (an operation whose
  two operands are numbers) and c is its value; it replaces the leftmost such
  redex by c (``check_step``). Example from ``"2*3+4*5"``: ``eval 2*3=6`` gives
  ``"6+4*5"``; ``eval 4*5=20`` gives ``"2*3+20"``; ``eval 3+4=7`` is invalid
  (``3+4`` is not an operation of the tree), and so is ``eval 2*3=5``.
- **Invalid**: a tactic that does not apply yields ``Invalid(reason)``, never an
  exception. Every rewrite keeps the value of the state, so a proof that reaches a
  number has reached v.

Safety: the checker never evaluates model text. Tactics and states are read by
whitelist tokenizers (digits, the three operators, parentheses; for tactics the
keyword ``eval``, ``=`` and one space) and a recursive-descent parser with bounded
length (``MAX_TACTIC_CHARS``, ``MAX_STATE_CHARS``, ``MAX_PROOF_CHARS``), nesting
(``MAX_NESTING``), literal size and proof length (``MAX_PROOF_STEPS``); the
arithmetic is Python integer arithmetic on at most 6-digit operands.

Text format [choice]
--------------------

A proof row poses the goal; its completion is the gold proof, tactics joined by
``"; "`` on one line, then a newline (``STOP_TEXT``)::

    prompt:     "Prove: 2*3+4*5 = 26\\nProof: "
    completion: "eval 2*3=6; eval 4*5=20; eval 6+20=26\\n"

A step row ("state → next tactic", one per gold step) is the same text cut
before step s: the prompt is the goal and the s tactics already applied (they
fix the state), the completion the next tactic and its terminator::

    prompt:     "Prove: 2*3+4*5 = 26\\nProof: eval 2*3=6; "
    completion: "eval 4*5=20; "

So each step row's prompt + completion is the next step row's prompt, and the
proof row's prompt + completion is the last step row's: by the chain rule the
proof row's log-probability is the sum of its step rows' log-probabilities, i.e.
the whole-proof confidence is the product of the step confidences (exactly for
the embedded character tokenizer). Hence ``pass_at_n`` on proof rows is naive
DCO and ``dco_step`` on step rows is DCO_step (``aligntrain.objectives.StepDCO``).
The state is fixed by the goal and the tactics so far rather than printed (as a
Lean proof script fixes its state); every intermediate value is in the tactics
(``eval 2*3=6``). [choice] A prompt of the current state alone, as LeanDojo's,
would make the whole-proof confidence a product over separate rows, which no
single row's ℓ gives.

TRL appends EOS to every completion: a model trained on proof rows samples whole
proofs through the ordinary rollouts, while one trained on step rows ends each
tactic with EOS (as a Lean tactic generation does) and needs a driver that
appends the tactic and asks for the next: the search at test time, not part of
this module (``valid_tactics``, ``check_step`` and ``format_prompt`` are its parts).

Levels [choice]: tree shapes, wide or narrow, short or long
------------------------------------------------------------

A level fixes the shape of the expression's tree; a proof has one step per
operation whatever the order. "Width" is the number of valid tactics at the
start; "proofs" the number of orders (linear extensions of the tree)::

    level  shape                          steps  width  proofs  search tree     example
    1      a∘b                            1      1      1       trivial         49-5
    2      (a∘b)∘(c∘d)                    3      2      2       wide, short     39*5+(87+64)
    3      ((a∘b)∘c)∘d                    3      1      1       narrow, short   (91-41-24)*9
    4      balanced, 8 numbers            7      4      80      wide, long      74-11+(65-10)-(84+84-18*9)
    5      ((((((a∘b)∘c)∘d)∘e)∘f)∘g)∘h    7      1      1       narrow, long    (55+76-25-22)*9+1+78+42

Lengths (5,000 goals per level): completions reach 15, 49, 51, 118 and 131
characters at levels 1-5, whole examples 179 characters; with the character
tokenizer, rollouts of levels 4-5 need ``max_new_tokens`` of about 140 (the
study default of 96 cuts them).

(Widths and proof counts count distinct tactics: two equal redexes, as in
``3*4+3*4``, are one tactic.) The numbers are 0-99, except that the right operand
of ``*`` is always a single number 2-9; an operation whose right operand is a
sub-expression is ``+`` or ``-``. At most ``max_products`` ``*`` per goal (1 at
level 1, else 2), and every sub-expression's value lies in [0, ``MAX_VALUE``], so no
state ever holds a negative number. ``max_value`` (a problem option) lowers that
bound, and the numbers with it (0 to min(99, max_value)): every value a proof
writes is then at most ``max_value``, so its arithmetic is a small table a small
model can learn (pipelines/dco_step uses 60). The gold proof rewrites the leftmost
redex first. Levels 2/3 and 4/5 pair a wide and a narrow tree of the same proof length:
DCO §5.3's trade-off (a large N_step favours short proofs in wide trees, a small
one long proofs in narrow trees) can be read at equal length.

Splits [choice]
---------------

Goals are drawn by ``aligntrain.problems.splits.unique_rows``: a goal belongs to
the split its expression's salted hash names (``partition_of``), whatever the
seed, level or sizes; a split holds distinct goals. One rule is added for train:
a goal is train's only if every state its gold proof passes through that is not
yet a number also hashes to train. So no validation or test goal appears in a
train row, neither as a goal nor as an intermediate state of a gold proof (an
RL policy's own proofs on train goals may still visit other states). The same
holds for the pretraining corpus, drawn from train's goals only. ``sizes`` count
goals; with ``train_rows: steps`` each train goal gives one row per gold step
(its steps adjacent, in order), validation and test always hold proof rows.
"""

from __future__ import annotations

import functools
import random
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Literal, Union

from pydantic import Field

from aligntrain.grading import Verdict
from aligntrain.options import Options
from aligntrain.problems import rows, splits
from aligntrain.validation import check_choices, check_int

NAME = "rewrite"
STOP_TEXT = "\n"
SEPARATOR = "; "
KEYWORD = "eval"
ROW_FIELDS = rows.ROW_FIELDS

#: largest value of any sub-expression of a generated goal (the default of the ``max_value`` option)
MAX_VALUE = 99_999
#: smallest ``max_value``: a goal of any level still has a ``*`` (2-9 times a number) that fits
MIN_MAX_VALUE = 18
#: longest integer literal the parsers accept (in a state or a tactic)
MAX_LITERAL_DIGITS = 6
MAX_STATE_CHARS = 256
MAX_TACTIC_CHARS = 64
MAX_NESTING = 32
MAX_PROOF_STEPS = 64
MAX_PROOF_CHARS = 4096

RowForm = Literal["proofs", "steps"]
ROW_FORMS = ("proofs", "steps")

# Salt of the split hash; changing it re-partitions every goal (a new data set).
_SPLIT_SALT = b"aligntrain/rewrite/split/v1:"
# A partition that is no split: a goal hashed to train whose gold proof leaves train.
_UNUSABLE = "unusable"
_MAX_FRUITLESS_DRAWS = 50_000

_STEP_ID = re.compile(r"-s[0-9]+$")  # a step row's id: its proof row's, then "-s<step>" (row_id)
_PRECEDENCE = {"+": 1, "-": 1, "*": 2}
_EXPRESSION_TOKEN = re.compile(r"[0-9]+|[-+*()]")
_EXPRESSION_ALPHABET = re.compile(r"[0-9()+*-]*")
_TACTIC_TOKEN = re.compile(r"eval|[0-9]+|[-+*]|=| ")
_TACTIC_ALPHABET = re.compile(r"(?:eval|[0-9]|[-+*]|=| )*")
_CANONICAL_LITERAL = re.compile(rf"0|[1-9][0-9]{{0,{MAX_LITERAL_DIGITS - 1}}}")
_PROMPT = re.compile(
    rf"Prove: (?P<expression>[0-9()+*-]{{1,{MAX_STATE_CHARS}}}) = (?P<value>[0-9]{{1,{MAX_LITERAL_DIGITS}}})\n"
    r"Proof: (?P<done>(?:[^\n;]+; )*)"
)

Tree = Union[int, tuple[str, "Tree", "Tree"]]  # noqa: UP007 - a recursive alias needs the string form
"""An expression: a non-negative int, or (operator, left, right)."""

Shape = Union[None, tuple["Shape", "Shape"]]  # noqa: UP007
"""A tree's shape: None for a number, (left, right) for an operation."""

RewriteRow = dict[str, Any]
"""One row, keys ``ROW_FIELDS``: id, level, prompt, completion, answer (the goal's value as text)."""


@dataclass(frozen=True)
class Invalid:
    """The result of a tactic that does not apply (or of unreadable text), with the reason."""

    reason: str


@dataclass(frozen=True)
class ProofCheck:
    """A proof replayed tactic by tactic from its goal.

    ``states``: the start and each state reached (one more per tactic that applied);
    ``failure``: why the first tactic that did not apply failed (None: all applied);
    ``proved``: every tactic applied and the last state is the goal's number.
    """

    states: tuple[str, ...]
    failure: Invalid | None
    proved: bool


@dataclass(frozen=True)
class LevelSpec:
    shape: Shape
    max_products: int


def _chain(operations: int) -> Shape:
    shape: Shape = (None, None)
    for _ in range(operations - 1):
        shape = (shape, None)
    return shape


def _balanced(depth: int) -> Shape:
    return None if depth == 0 else (_balanced(depth - 1), _balanced(depth - 1))


LEVEL_SPECS: dict[int, LevelSpec] = {
    1: LevelSpec(_chain(1), 1),
    2: LevelSpec(_balanced(2), 2),
    3: LevelSpec(_chain(3), 2),
    4: LevelSpec(_balanced(3), 2),
    5: LevelSpec(_chain(7), 2),
}
LEVELS = tuple(sorted(LEVEL_SPECS))


# ---------------------------------------------------------------------------
# Expressions: print, read, evaluate


def format_expression(tree: Tree) -> str:
    """The canonical text of ``tree`` (the fewest parentheses that keep the tree)."""
    if isinstance(tree, int):
        return str(tree)
    operator, left, right = tree
    left_text, right_text = format_expression(left), format_expression(right)
    if not isinstance(left, int) and _PRECEDENCE[left[0]] < _PRECEDENCE[operator]:
        left_text = f"({left_text})"
    if not isinstance(right, int) and _PRECEDENCE[right[0]] <= _PRECEDENCE[operator]:
        right_text = f"({right_text})"
    return f"{left_text}{operator}{right_text}"


class _Malformed(ValueError):
    pass


class _Parser:
    """Recursive descent over whitelisted tokens: expression := term (("+"|"-") term)*,
    term := factor ("*" factor)*, factor := literal | "(" expression ")"."""

    def __init__(self, tokens: list[str]) -> None:
        self.tokens = tokens
        self.at = 0

    def peek(self) -> str | None:
        return self.tokens[self.at] if self.at < len(self.tokens) else None

    def take(self) -> str:
        token = self.peek()
        if token is None:
            raise _Malformed("ends too early")
        self.at += 1
        return token

    def expression(self, depth: int) -> Tree:
        tree = self.term(depth)
        while self.peek() in ("+", "-"):
            operator = self.take()
            tree = (operator, tree, self.term(depth))
        return tree

    def term(self, depth: int) -> Tree:
        tree = self.factor(depth)
        while self.peek() == "*":
            self.take()
            tree = ("*", tree, self.factor(depth))
        return tree

    def factor(self, depth: int) -> Tree:
        token = self.take()
        if token == "(":
            if depth >= MAX_NESTING:
                raise _Malformed(f"nests parentheses deeper than {MAX_NESTING}")
            tree = self.expression(depth + 1)
            if self.take() != ")":
                raise _Malformed("has an unclosed parenthesis")
            return tree
        if _CANONICAL_LITERAL.fullmatch(token):
            return int(token)
        if token[0].isdigit():
            raise _Malformed(f"has the number {token[:12]!r}: no leading zeros, at most {MAX_LITERAL_DIGITS} digits")
        raise _Malformed(f"has {token!r} where a number or '(' belongs")


def _whitelist_tokens(text: str, alphabet: re.Pattern[str], token: re.Pattern[str]) -> list[str] | None:
    """``text`` split into tokens of ``token``; None unless ``alphabet`` (a run of tokens) matches all of it."""
    if alphabet.fullmatch(text) is None:
        return None
    return token.findall(text)


def parse_expression(text: str) -> Tree:
    """The tree of a canonical expression; ValueError naming what is wrong otherwise.

    Reads only whitelisted tokens (digits and ``+ - * ( )``), at most
    ``MAX_STATE_CHARS`` characters; the text must be the tree's canonical form.
    """
    if not isinstance(text, str):
        raise ValueError(f"an expression must be a str, got {type(text).__name__}")
    if not 0 < len(text) <= MAX_STATE_CHARS:
        raise ValueError(f"an expression has 1 to {MAX_STATE_CHARS} characters, got {len(text)}")
    tokens = _whitelist_tokens(text, _EXPRESSION_ALPHABET, _EXPRESSION_TOKEN)
    if tokens is None:
        raise ValueError(f"expression {text!r} has a character outside '0-9+-*()'")
    parser = _Parser(tokens)
    try:
        tree = parser.expression(0)
        if parser.peek() is not None:
            raise _Malformed(f"has {parser.peek()!r} after a complete expression")
    except _Malformed as err:
        raise ValueError(f"expression {text!r} {err}") from None
    if format_expression(tree) != text:
        raise ValueError(f"expression {text!r} is not canonical: {format_expression(tree)!r}")
    return tree


def evaluate(tree: Tree) -> int:
    """The value of a trusted tree (one this module built or parsed)."""
    if isinstance(tree, int):
        return tree
    operator, left, right = tree
    return _apply(operator, evaluate(left), evaluate(right))


def _apply(operator: str, a: int, b: int) -> int:
    return a + b if operator == "+" else a - b if operator == "-" else a * b


def _operations(tree: Tree) -> list[tuple[str, Tree, Tree]]:
    """Every operation node of ``tree``, left to right (in-order)."""
    if isinstance(tree, int):
        return []
    return [*_operations(tree[1]), tree, *_operations(tree[2])]


def _shape(tree: Tree) -> Shape:
    return None if isinstance(tree, int) else (_shape(tree[1]), _shape(tree[2]))


# ---------------------------------------------------------------------------
# The verifier: tactics, steps, proofs


def parse_tactic(tactic: object) -> tuple[str, int, int, int] | Invalid:
    """(op, a, b, c) of ``"eval <a><op><b>=<c>"``, or Invalid; never raises."""
    if not isinstance(tactic, str):
        return Invalid(f"a tactic is text, got {type(tactic).__name__}")
    if not tactic:
        return Invalid("empty tactic")
    if len(tactic) > MAX_TACTIC_CHARS:
        return Invalid(f"tactic longer than {MAX_TACTIC_CHARS} characters")
    tokens = _whitelist_tokens(tactic, _TACTIC_ALPHABET, _TACTIC_TOKEN)
    if tokens is None:
        return Invalid(f"tactic {tactic!r} has a character outside the tactic alphabet")
    if (
        len(tokens) != 7
        or tokens[:2] != [KEYWORD, " "]
        or tokens[3] not in _PRECEDENCE
        or tokens[5] != "="
        or not all(tokens[i][0].isdigit() for i in (2, 4, 6))
    ):
        return Invalid(f"tactic {tactic!r} is not of the form 'eval <a><op><b>=<c>'")
    for i in (2, 4, 6):
        if not _CANONICAL_LITERAL.fullmatch(tokens[i]):
            return Invalid(f"tactic {tactic!r}: no leading zeros, at most {MAX_LITERAL_DIGITS} digits a number")
    return tokens[3], int(tokens[2]), int(tokens[4]), int(tokens[6])


def _rewrite_leftmost(tree: Tree, redex: tuple[str, int, int], value: int) -> Tree | None:
    """``tree`` with its leftmost operation ``redex`` (two number operands) replaced by ``value``; None if none."""
    if isinstance(tree, int):
        return None
    operator, left, right = tree
    if isinstance(left, int) and isinstance(right, int):
        return value if (operator, left, right) == redex else None
    new_left = _rewrite_leftmost(left, redex, value)
    if new_left is not None:
        return (operator, new_left, right)
    new_right = _rewrite_leftmost(right, redex, value)
    return None if new_right is None else (operator, left, new_right)


def check_step(state: str, tactic: object) -> str | Invalid:
    """The state after ``tactic``, or ``Invalid(reason)`` when it does not apply.

    ``state`` is a canonical expression (ValueError otherwise: a caller's bug);
    ``tactic`` any object: text that is not a tactic applying to ``state`` gives
    Invalid, never an exception. Applying ``eval a∘b=c`` needs an operation
    ``a∘b`` with two number operands in the state and c its value; the leftmost
    such operation becomes c.
    """
    tree = parse_expression(state)
    parsed = parse_tactic(tactic)
    if isinstance(parsed, Invalid):
        return parsed
    operator, a, b, c = parsed
    if _apply(operator, a, b) != c:
        return Invalid(f"{a}{operator}{b} is {_apply(operator, a, b)}, not {c}")
    rewritten = _rewrite_leftmost(tree, (operator, a, b), c)
    if rewritten is None:
        return Invalid(f"state {state!r} has no operation {a}{operator}{b} on two numbers")
    return format_expression(rewritten)


def is_proved(state: object, goal: int) -> bool:
    """True when ``state`` is the number ``goal`` (the proof of ``E = goal`` is complete)."""
    return isinstance(state, str) and bool(_CANONICAL_LITERAL.fullmatch(state)) and int(state) == goal


def valid_tactics(state: str) -> list[str]:
    """Every distinct tactic that applies to ``state``, left to right (the search tree's children)."""
    tactics: list[str] = []
    for operator, left, right in _operations(parse_expression(state)):
        if isinstance(left, int) and isinstance(right, int):
            value = _apply(operator, left, right)
            tactic = f"{KEYWORD} {left}{operator}{right}={value}"
            if 0 <= value and len(str(value)) <= MAX_LITERAL_DIGITS and tactic not in tactics:
                tactics.append(tactic)
    return tactics


def gold_proof(expression: str) -> list[str]:
    """The gold tactics of ``expression``: the leftmost operation on two numbers first, until a number is left.

    ValueError if the expression is not canonical or a step's value cannot be written
    (negative, or more than ``MAX_LITERAL_DIGITS`` digits).
    """
    return [tactic for tactic, _ in _gold_steps(expression)]


@functools.lru_cache(maxsize=1 << 14)
def _gold_steps(expression: str) -> tuple[tuple[str, str], ...]:
    """(tactic, state after it) of each gold step; cached (splits, rows and checks all need it)."""
    tree, steps = parse_expression(expression), []
    while not isinstance(tree, int):
        operator, a, b = next((op, x, y) for op, x, y in _operations(tree) if isinstance(x, int) and isinstance(y, int))
        value = _apply(operator, a, b)
        if not 0 <= value < 10**MAX_LITERAL_DIGITS:
            raise ValueError(
                f"expression {expression!r}: the step {a}{operator}{b} gives {value}, not a state's number"
            )
        tree = _rewrite_leftmost(tree, (operator, a, b), value)
        steps.append((f"{KEYWORD} {a}{operator}{b}={value}", format_expression(tree)))
    return tuple(steps)


def check_proof(expression: str, goal: int, tactics: Sequence[object]) -> ProofCheck:
    """Replay ``tactics`` from the state ``expression``; stops at the first one that does not apply."""
    states = [expression]
    if len(tactics) > MAX_PROOF_STEPS:
        return ProofCheck(tuple(states), Invalid(f"more than {MAX_PROOF_STEPS} tactics"), False)
    for tactic in tactics:
        after = check_step(states[-1], tactic)
        if isinstance(after, Invalid):
            return ProofCheck(tuple(states), after, False)
        states.append(after)
    return ProofCheck(tuple(states), None, is_proved(states[-1], goal))


def split_proof(text: object) -> list[str] | Invalid:
    """The tactics of a proof line: the text up to its first newline, split at ``"; "``."""
    if not isinstance(text, str):
        return Invalid(f"a proof is text, got {type(text).__name__}")
    if len(text) > MAX_PROOF_CHARS:
        return Invalid(f"proof longer than {MAX_PROOF_CHARS} characters")
    return text.split(STOP_TEXT, 1)[0].split(SEPARATOR)


# ---------------------------------------------------------------------------
# Text and rows


def format_prompt(expression: str, value: int, done: Sequence[str] = ()) -> str:
    """The goal and the tactics already applied: "Prove: E = v\\nProof: t1; t2; "."""
    return f"Prove: {expression} = {value}\nProof: " + "".join(t + SEPARATOR for t in done)


def parse_prompt(prompt: str) -> tuple[str, int, list[str]]:
    """(expression, value, tactics already applied) of a prompt; ValueError if it is not one."""
    match = _PROMPT.fullmatch(prompt) if isinstance(prompt, str) else None
    if match is None:
        raise ValueError(
            f"prompt is not of the form 'Prove: <expression> = <value>\\nProof: <tactic>; ...': {prompt!r}"
        )
    done = match["done"]
    return match["expression"], int(match["value"]), done[: -len(SEPARATOR)].split(SEPARATOR) if done else []


def proof_completion(tactics: Sequence[str]) -> str:
    """A whole proof: the tactics joined by ``"; "``, then ``STOP_TEXT``."""
    return SEPARATOR.join(tactics) + STOP_TEXT


def step_completion(tactics: Sequence[str], index: int) -> str:
    """Step ``index`` (0-based) of a proof: the tactic, then ``"; "``, or ``STOP_TEXT`` after the last."""
    return tactics[index] + (STOP_TEXT if index == len(tactics) - 1 else SEPARATOR)


def row_id(expression: str, level: int) -> str:
    """Stable id of a goal's proof row: "rewrite-L<level>-<16 hex digits>"; step s adds "-s<s>"."""
    digest = rows.text_digest(expression)
    return f"{NAME}-L{level}-{digest}"


def proof_row(expression: str, level: int) -> RewriteRow:
    """The whole-proof row of a goal (naive DCO, CE on proofs, evaluation)."""
    value = evaluate(parse_expression(expression))
    return {
        "id": row_id(expression, level),
        "level": level,
        "prompt": format_prompt(expression, value),
        "completion": proof_completion(gold_proof(expression)),
        "answer": str(value),
    }


def step_rows(expression: str, level: int) -> list[RewriteRow]:
    """One "state → next tactic" row per gold step, in proof order (DCO_step)."""
    value = evaluate(parse_expression(expression))
    tactics = gold_proof(expression)
    return [
        {
            "id": f"{row_id(expression, level)}-s{index}",
            "level": level,
            "prompt": format_prompt(expression, value, tactics[:index]),
            "completion": step_completion(tactics, index),
            "answer": str(value),
        }
        for index in range(len(tactics))
    ]


# ---------------------------------------------------------------------------
# Goals, levels, splits, pretraining corpus


def sample_expression(level: int, rng: random.Random, max_value: int = MAX_VALUE) -> str:
    """A random goal expression of ``level`` (see the module's level table) whose every number and
    sub-expression's value lies in [0, ``max_value``]; its numbers are drawn from 0 to min(99, max_value)."""
    spec = _level_spec(level)
    largest = min(99, _check_max_value(max_value))
    while True:
        tree = _sample_tree(spec.shape, rng, largest)
        if _misfit(tree, spec, max_value) is None:
            return format_expression(tree)


def _check_max_value(max_value: object) -> int:
    value = check_int(max_value, "max_value", minimum=MIN_MAX_VALUE)
    if value > MAX_VALUE:
        raise ValueError(f"max_value must be at most {MAX_VALUE}, got {value}")
    return value


def _sample_tree(shape: Shape, rng: random.Random, largest: int) -> Tree:
    if shape is None:
        return rng.randint(0, largest)
    left = _sample_tree(shape[0], rng, largest)
    if shape[1] is None:
        operator = rng.choice("+-*")
        return (operator, left, rng.randint(2, 9) if operator == "*" else rng.randint(0, largest))
    return (rng.choice("+-"), left, _sample_tree(shape[1], rng, largest))


def _misfit(tree: Tree, spec: LevelSpec, max_value: int = MAX_VALUE) -> str | None:
    """Why ``tree`` cannot have been drawn with ``spec`` (None if it can)."""
    if _shape(tree) != spec.shape:
        return "its tree has another shape"
    operations = _operations(tree)
    if sum(operator == "*" for operator, _, _ in operations) > spec.max_products:
        return f"more than {spec.max_products} '*'"
    for operator, left, right in operations:
        if operator == "*" and not (isinstance(right, int) and 2 <= right <= 9):
            return "a '*' whose right operand is not a number 2-9"
        numbers = [left] if operator == "*" else [left, right]  # the right operand of "*" is checked above
        for number in numbers:
            if isinstance(number, int) and not 0 <= number <= 99:
                return f"the number {number} is outside 0-99"
        value = evaluate((operator, left, right))
        if not 0 <= value <= max_value:
            return f"a sub-expression has the value {value}, outside 0-{max_value}"
    return None


def level_of(expression: str) -> int | None:
    """The level whose goals include ``expression`` (None: none do; a goal fits at most one level)."""
    tree = parse_expression(expression)
    fitting = [level for level, spec in LEVEL_SPECS.items() if _misfit(tree, spec) is None]
    return fitting[0] if fitting else None


def _owner(text: str) -> str:
    return splits.partition_of(text, _SPLIT_SALT)


def partition_of(expression: str) -> str:
    """The split that owns the goal ``expression``, from its salted hash; ``"unusable"`` for a goal
    hashed to train whose gold proof passes through a state (not yet a number) owned by another split."""
    owner = _owner(expression)
    if owner != "train":
        return owner
    for _, state in _gold_steps(expression):
        if not _CANONICAL_LITERAL.fullmatch(state) and _owner(state) != "train":
            return _UNUSABLE
    return owner


def generate_split(
    split: str,
    n: int,
    levels: Sequence[int] = LEVELS,
    seed: int = 0,
    train_rows: RowForm = "proofs",
    max_value: int = MAX_VALUE,
) -> list[RewriteRow]:
    """Rows of ``n`` distinct goals of the ``split`` partition, levels in equal shares, shuffled.

    Proof rows, except train with ``train_rows="steps"``: each goal's step rows, in proof order.
    Every value a goal's proof writes is at most ``max_value`` (``sample_expression``).
    Deterministic in (split, n, levels, seed, train_rows, max_value).
    """
    if train_rows not in ROW_FORMS:
        raise ValueError(f"train_rows must be one of {ROW_FORMS}, got {train_rows!r}")
    max_value = _check_max_value(max_value)
    goals = splits.unique_rows(
        NAME,
        split,
        n,
        levels,
        seed,
        known_levels=LEVELS,
        draw=functools.partial(sample_expression, max_value=max_value),
        text_of=lambda expression: expression,
        partition=partition_of,
        row_of=lambda expression, level, _rng: proof_row(expression, level),
        max_fruitless=_MAX_FRUITLESS_DRAWS,
        noun="goals",
    )
    if split != "train" or train_rows == "proofs":
        return goals
    return [step for goal in goals for step in step_rows(parse_prompt(goal["prompt"])[0], goal["level"])]


def generate_splits(
    sizes: Mapping[str, int],
    levels: Sequence[int] = LEVELS,
    seed: int = 0,
    train_rows: RowForm = "proofs",
    max_value: int = MAX_VALUE,
) -> dict[str, list[RewriteRow]]:
    """One ``generate_split`` per entry of ``sizes`` (goals per split, e.g. {"train": 4000, "test": 500})."""
    splits.check_sizes(sizes)
    return {split: generate_split(split, n, levels, seed, train_rows, max_value) for split, n in sizes.items()}


def pretrain_corpus(n: int, seed: int = 0, levels: Sequence[int] = LEVELS, max_value: int = MAX_VALUE) -> list[str]:
    """``n`` whole worked proofs (prompt + completion) of train goals, levels uniform, repeats allowed;
    every value a proof writes is at most ``max_value``."""
    n = check_int(n, "n", minimum=0)
    levels = check_choices(levels, "levels", LEVELS)
    max_value = _check_max_value(max_value)
    rng = random.Random(f"{NAME}:pretrain:{seed}")
    texts: list[str] = []
    while len(texts) < n:
        expression = sample_expression(rng.choice(levels), rng, max_value)
        if partition_of(expression) == "train":
            row = proof_row(expression, level_of(expression))
            texts.append(row["prompt"] + row["completion"])
    return texts


# ---------------------------------------------------------------------------
# Validation and grading


def validate_row(row: Mapping[str, Any]) -> None:
    """Raise ValueError naming the row's id and the bad field if ``row`` is malformed.

    A row is a goal's proof row or one of its step rows; everything but the form is
    determined by the goal: level, value, the tactics already applied, the completion, the id.
    """
    bad = rows.check_row_shape(row, NAME, LEVEL_SPECS)
    try:
        expression, value, done = parse_prompt(row["prompt"])
        tree = parse_expression(expression)
    except ValueError as err:
        raise bad("prompt", str(err)) from None
    level = level_of(expression)
    if level is None:
        raise bad("prompt", f"goal {expression!r} fits no level")
    if level != row["level"]:
        raise bad("level", f"is {row['level']}, but goal {expression!r} is of level {level}")
    if value != evaluate(tree):
        raise bad("prompt", f"states {expression} = {value}, but its value is {evaluate(tree)}")
    if row["answer"] != str(value):
        raise bad("answer", f"is {row['answer']!r}, the goal's value is {str(value)!r}")
    gold = gold_proof(expression)
    if len(done) >= len(gold) or done != gold[: len(done)]:
        raise bad("prompt", f"applies {done}, not a proper start of the gold proof {gold}")
    expected = {f"{row_id(expression, level)}-s{len(done)}": step_completion(gold, len(done))}
    if not done:
        expected[row_id(expression, level)] = proof_completion(gold)
    if row["id"] not in expected:
        raise bad("id", f"is {row['id']!r}, the goal determines one of {sorted(expected)}")
    if row["completion"] != expected[row["id"]]:
        raise bad("completion", f"is {row['completion']!r}, the goal determines {expected[row['id']]!r}")


def grade(completion: str, row: Mapping[str, Any]) -> Verdict:
    """Replay the row's applied tactics, then the completion's (up to its first newline).

    Correct when every tactic applies and the proof ends at the goal's number. Any
    completion text gives a grade, never an exception. The verdict's ``answer`` is the state the
    proof ended in (None: a tactic failed); its ``answer_class`` the goal's value when proved.
    """
    expression, value, done = parse_prompt(row["prompt"])
    tactics = split_proof(completion)
    if isinstance(tactics, Invalid):
        return Verdict(None, None, False)
    check = check_proof(expression, value, [*done, *tactics])
    if check.failure is not None:
        return Verdict(None, None, False)
    return Verdict(check.states[-1], str(value) if check.proved else None, check.proved)


def _level_spec(level: int) -> LevelSpec:
    if level not in LEVEL_SPECS:
        raise ValueError(f"level must be one of {LEVELS}, got {level!r}")
    return LEVEL_SPECS[level]


# ---------------------------------------------------------------------------
# Problem object (what aligntrain.problems.get_problem("rewrite") returns)


class RewriteProblem(rows.RowStore, Options):
    """Step-verified arithmetic rewriting (DCO §5.3 stand-in): tactic proofs checked step by step, rewards 0/1."""

    name: ClassVar[str] = NAME
    binary_rewards: ClassVar[bool] = True
    levels: ClassVar[tuple[int, ...]] = LEVELS
    stop_text: ClassVar[str] = STOP_TEXT
    #: a completion's class needs the goal it proves (the row): grade() has it
    answer_class_needs_row: ClassVar[bool] = True

    train_rows: RowForm = Field(
        "proofs",
        description="Form of the train rows: 'proofs' (one whole-proof row per goal: CE on proofs, naive DCO "
        "with pass_at_n) or 'steps' (one 'state -> next tactic' row per gold step: step-wise CE, dco_step). "
        "Validation and test always hold proof rows; sizes count goals.",
    )

    max_value: int = Field(
        MAX_VALUE,
        ge=MIN_MAX_VALUE,
        le=MAX_VALUE,
        description="Largest number any state of a goal's gold proof holds: the goal's numbers (then drawn from "
        "0 to min(99, max_value)) and every sub-expression's value. A smaller bound makes each tactic's "
        "arithmetic a small table; the levels' tree shapes are unchanged.",
    )

    def generate_splits(self, sizes: Mapping[str, int], levels: Sequence[int], seed: int) -> dict[str, list]:
        return generate_splits(sizes, levels, seed, self.train_rows, self.max_value)

    def step_rows_of(self, rows_: Sequence[Mapping[str, Any]]) -> list[RewriteRow]:
        """Each proof row's gold step rows, in order (a step row is kept as it is): what ``dco_step`` trains on."""
        steps: list[RewriteRow] = []
        for row in rows_:
            if _STEP_ID.search(row["id"]):  # already a step row (step 0's prompt is the proof row's)
                steps.append(dict(row))
            else:
                steps.extend(step_rows(parse_prompt(row["prompt"])[0], row["level"]))
        return steps

    def pretrain_corpus(self, n: int, seed: int) -> list[str]:
        return pretrain_corpus(n, seed, max_value=self.max_value)

    def reward(self, completion: str, row: Mapping[str, Any]) -> float:
        """1.0 if the completion completes the row's proof, else 0.0."""
        return grade(completion, row).reward

    def grade(self, completion: str, row: Mapping[str, Any]) -> Verdict:
        return grade(completion, row)

    def gold_class(self, row: Mapping[str, Any]) -> str:
        """The goal's value as text (the class of every complete proof)."""
        return str(parse_prompt(row["prompt"])[1])

    def answer_class(self, completion: str) -> str | None:
        """Not available: whether a proof proves anything depends on the row's goal; ``grade`` has it."""
        raise ValueError(
            f"problem {self.name!r}: a proof's class depends on the goal it proves; use "
            "grade(completion, row).answer_class (RL rules that need answer classes are refused for this problem)"
        )

    def validate_row(self, row: Mapping[str, Any]) -> None:
        validate_row(row)

    def check_step(self, state: str, tactic: object) -> str | Invalid:
        """The state after ``tactic``, or Invalid (module function ``check_step``)."""
        return check_step(state, tactic)

    def is_proved(self, state: object, goal: int) -> bool:
        """True when ``state`` is the number ``goal`` (module function ``is_proved``)."""
        return is_proved(state, goal)

    # ------------------------------------------- the test-time search (aligntrain.rollouts.search)

    #: a tactic ends at the separator, or at the newline after a proof's last one
    tactic_stops: ClassVar[tuple[str, ...]] = (SEPARATOR, STOP_TEXT)
    max_search_steps: ClassVar[int] = MAX_PROOF_STEPS

    def search_start(self, row: Mapping[str, Any]) -> tuple[str, int] | None:
        """(the state after the row's applied tactics, the goal's value); None if one does not apply."""
        expression, value, done = parse_prompt(row["prompt"])
        replay = check_proof(expression, value, done)
        return None if replay.failure is not None else (replay.states[-1], value)

    def search_prompt(self, row: Mapping[str, Any], state: tuple[str, int], tactics: Sequence[str]) -> str:
        """The row's prompt with the attempt's tactics so far, each ended by the separator (a step row's prompt)."""
        return row["prompt"] + "".join(tactic + SEPARATOR for tactic in tactics)

    def search_step(self, state: tuple[str, int], tactic: str) -> tuple[tuple[str, int] | None, bool]:
        after = check_step(state[0], tactic)
        if isinstance(after, Invalid):
            return None, False
        return (after, state[1]), is_proved(after, state[1])

    def proof_text(self, tactics: Sequence[str]) -> str:
        return proof_completion(tactics)
