"""Procedurally generated multi-step integer arithmetic ("arith").

Built for a tiny character-level model trained from scratch on CPU: texts are
short (a whole example is at most 53 characters, under the
``MAX_EXAMPLE_CHARS`` = 120 budget) over a 21-character alphabet
(``ALPHABET``: digits, ``+ - * = ? # :``, ``Q A``, space, newline).

Text format [choice]. The prompt ends where generation starts; the completion is
one line: the expression rewritten after each step, joined by "=", then the
answer after ``grading.ANSWER_MARKER``, then a newline (``STOP_TEXT``, where a
sampler stops)::

    prompt:     "Q: 47+83*6-29=?\\nA: "
    completion: "47+498-29=545-29=516 #### 516\\n"

Direct-answer form [choice] (the option ``answer_format: direct``, DCO Table 1's
setting, where continued CE lowers pass@k at large k): the completion is the
answer alone after the marker, no worked steps; the prompt is the same::

    prompt:     "Q: 47+83*6-29=?\\nA: "
    completion: "#### 516\\n"

The default ``answer_format: worked`` gives the worked rows above, byte for byte
what they were before the option existed.

Steps follow operator precedence: the leftmost "*" first, then "+"/"-" left to
right, one operation per step, each intermediate expression written out in full
(so the model copies the untouched part and computes one operation). Only the
leading term of an intermediate expression can be negative ("3-8+4" ->
"-5+4" -> "-1").

Difficulty levels [choice]: each level adds one ingredient (more steps for
errors to compound, 2-digit operands, products, a 4th operand)::

    level  operands        operators  factor right of *  max *  distinct questions  example
    1      0-199, 0-9      + -        -                  0      4,000               147+8
    2      3 of 0-9        + - *      2-9                2      7,840               7*8-3
    3      3 of 0-99       + -        -                  0      4,000,000           42+31-93
    4      3 of 0-99       + - *      2-9                1      4,320,000           69*5-77
    5      4 of 0-99       + - *      2-9                2      899,840,000         35*9-63*7

Measured spread (a 350k-parameter character GPT trained 6,000 steps of 32
texts on ``pretrain_corpus(60000)`` plus 5,000 train rows, ~7 min on one CPU
thread; 100 test questions per level, 4 samples at temperature 1): pass@1 =
0.96, 0.88, 0.51, 0.43, 0.10 for levels 1-5 (greedy 0.99, 0.95, 0.64, 0.55,
0.14). The longest example (prompt + completion) has 53 characters: level 5,
"Q: 10-99-99+10=?\\nA: -89-99+10=-188+10=-178 #### -178\\n".

Splits disjoint by construction [choice]: every question text is assigned to
exactly one partition ("train" 80 %, "validation" 10 %, "test" 10 %) by a salted
BLAKE2b hash of the question text alone (``partition_of``). The assignment does
not depend on the seed, the level or the requested sizes, so no question can sit
in two splits, in any run, and the pretraining corpus (drawn only from the
"train" partition) can never contain a validation or test question. The seed
only chooses which questions of a partition are sampled. A split holds unique
questions (rejection sampling); asking a level for more than its partition holds raises
ValueError. The small levels bound the sizes: level 1 has about 3,200 / 400 /
400 questions in train / validation / test, level 2 about 6,270 / 780 / 780.

Pretraining corpus [choice]: full worked examples (prompt + completion) of
train-partition questions, levels uniform, drawn i.i.d. (repeats allowed), plus
a fraction ``drill_fraction`` of *drills*: one operation taken from a random step
of a random train-partition worked example, posed as its own two-operand
question (e.g. "Q: 545-29=?\\nA: 516 #### 516\\n"), hash-filtered to the train
partition like everything else. Drills teach the single-step arithmetic at the
magnitudes the traces need (including a negative left operand) in isolation.
With ``answer_format: direct`` the corpus is the same draws written in the direct
form (examples and drills "Q: 545-29=?\\nA: #### 516\\n"): the base model never sees
a worked step, as the fine-tuning rows show none.
"""

from __future__ import annotations

import os
import random
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Literal

from pydantic import Field

from aligntrain import grading
from aligntrain.grading import ANSWER_MARKER
from aligntrain.options import Options
from aligntrain.problems import rows, splits
from aligntrain.validation import check_choices, check_int, check_probability

NAME = "arith"
SPLITS = splits.SPLITS
SPLIT_FRACTIONS = splits.SPLIT_FRACTIONS
STOP_TEXT = "\n"
MAX_EXAMPLE_CHARS = 120
ALPHABET = frozenset("0123456789+-*=?#: QA\n")
ROW_FIELDS = rows.ROW_FIELDS
#: completion forms: the worked chain before the answer (default), or the answer alone
ANSWER_FORMATS = ("worked", "direct")
AnswerFormat = Literal["worked", "direct"]

# Salt of the split hash; changing it re-partitions every question (a new dataset).
_SPLIT_SALT = b"aligntrain/arith/split/v1:"
# Rejection sampling gives up after this many draws in a row without a new
# question of the partition (the level's share of the partition is exhausted).
_MAX_FRUITLESS_DRAWS = 50_000

_QUESTION = re.compile(r"(?:0|[1-9][0-9]*)(?:[-+*](?:0|[1-9][0-9]*))*")
_PROMPT = re.compile(r"Q: (?P<question>[0-9+\-*]+)=\?\nA: ")


ArithRow = dict[str, Any]
"""One example, keys ``ROW_FIELDS``: id (str), level (int), prompt, completion,
answer (str). ``prompt + completion`` is the full training text."""


@dataclass(frozen=True)
class LevelSpec:
    """How questions of one difficulty level are drawn (see the module table)."""

    operand_ranges: tuple[tuple[int, int], ...]  # inclusive range per position
    operators: str
    factor_range: tuple[int, int]  # inclusive; replaces the range of an operand right of "*"
    max_products: int

    @property
    def n_operands(self) -> int:
        return len(self.operand_ranges)


LEVEL_SPECS: dict[int, LevelSpec] = {
    1: LevelSpec(((0, 199), (0, 9)), "+-", (2, 9), 0),
    2: LevelSpec(((0, 9),) * 3, "+-*", (2, 9), 2),
    3: LevelSpec(((0, 99),) * 3, "+-", (2, 9), 0),
    4: LevelSpec(((0, 99),) * 3, "+-*", (2, 9), 1),
    5: LevelSpec(((0, 99),) * 4, "+-*", (2, 9), 2),
}
LEVELS = tuple(sorted(LEVEL_SPECS))


# ---------------------------------------------------------------------------
# One question: generation, step-by-step solution, text


def sample_question(level: int, rng: random.Random) -> str:
    """A random question of ``level``, e.g. "47+83*6-29" (no spaces, no leading zeros)."""
    spec = _level_spec(level)
    while True:
        operators = [rng.choice(spec.operators) for _ in range(spec.n_operands - 1)]
        if operators.count("*") <= spec.max_products:
            break
    operands = [rng.randint(*spec.operand_ranges[0])]
    for operator, operand_range in zip(operators, spec.operand_ranges[1:]):
        operands.append(rng.randint(*(spec.factor_range if operator == "*" else operand_range)))
    return _format_expression(operands, operators)


def solution_steps(question: str) -> list[str]:
    """The expression after each operation, ending with the value.

    "47+83*6-29" -> ["47+498-29", "545-29", "516"]: leftmost "*" first, then
    "+"/"-" left to right (operator precedence, so the last step is the value).
    """
    return [expression for expression, _ in _solve(question)]


def _solve(question: str) -> list[tuple[str, tuple[int, str, int]]]:
    """Each step's resulting expression with the operation (left, operator, right) it did."""
    values, operators = _parse_question(question)
    steps = []
    while operators:
        at = operators.index("*") if "*" in operators else 0
        left, operator, right = values[at], operators[at], values[at + 1]
        values[at : at + 2] = [{"*": left * right, "+": left + right, "-": left - right}[operator]]
        del operators[at]
        steps.append((_format_expression(values, operators), (left, operator, right)))
    return steps


def format_prompt(question: str) -> str:
    """The text the model is conditioned on: "Q: <question>=?\\nA: "."""
    return f"Q: {question}=?\nA: "


def worked_completion(question: str) -> str:
    """Gold completion: steps joined by "=", the marker, the answer, STOP_TEXT."""
    steps = solution_steps(question)
    return f"{'='.join(steps)} {ANSWER_MARKER} {steps[-1]}{STOP_TEXT}"


def direct_completion(question: str) -> str:
    """Direct-answer completion: the marker and the answer alone, STOP_TEXT ("#### 516\\n")."""
    return f"{ANSWER_MARKER} {solution_steps(question)[-1]}{STOP_TEXT}"


def completion_of(question: str, answer_format: AnswerFormat = "worked") -> str:
    """The gold completion of ``question`` in ``answer_format`` (worked steps, or the answer alone)."""
    if answer_format == "worked":
        return worked_completion(question)
    if answer_format == "direct":
        return direct_completion(question)
    raise ValueError(f"answer_format must be one of {ANSWER_FORMATS}, got {answer_format!r}")


def row_id(question: str, level: int) -> str:
    """Stable id from the question text: "arith-L<level>-<16 hex digits>"."""
    digest = rows.text_digest(question)
    return f"{NAME}-L{level}-{digest}"


def make_row(question: str, level: int, answer_format: AnswerFormat = "worked") -> ArithRow:
    """The row of one question (the question must fit ``level``); the completion in ``answer_format``."""
    steps = solution_steps(question)
    return {
        "id": row_id(question, level),
        "level": level,
        "prompt": format_prompt(question),
        "completion": completion_of(question, answer_format),
        "answer": steps[-1],
    }


def partition_of(question: str) -> str:
    """The split that owns ``question``: a salted hash of the text alone (``splits.partition_of``)."""
    return splits.partition_of(question, _SPLIT_SALT)


# ---------------------------------------------------------------------------
# Splits and pretraining corpus


def generate_split(
    split: str, n: int, levels: Sequence[int] = LEVELS, seed: int = 0, answer_format: AnswerFormat = "worked"
) -> list[ArithRow]:
    """``n`` rows of unique questions from the ``split`` partition, shuffled.

    Levels get equal shares (the first ``n % len(levels)`` levels one more).
    Deterministic in (split, n, levels, seed); each (split, level) has its own
    random stream, so changing one level's share leaves the others' questions.
    ``answer_format`` changes only the completions (the questions, ids and order are the same).
    """
    return splits.unique_rows(
        NAME,
        split,
        n,
        levels,
        seed,
        known_levels=LEVELS,
        draw=sample_question,
        text_of=str,
        partition=partition_of,
        row_of=lambda question, level, rng: make_row(question, level, answer_format),
        max_fruitless=_MAX_FRUITLESS_DRAWS,
        noun="questions",
    )


def generate_splits(
    sizes: Mapping[str, int], levels: Sequence[int] = LEVELS, seed: int = 0, answer_format: AnswerFormat = "worked"
) -> dict[str, list[ArithRow]]:
    """One ``generate_split`` per entry of ``sizes`` (e.g. {"train": 4000, "test": 500})."""
    splits.check_sizes(sizes)
    return {split: generate_split(split, n, levels, seed, answer_format) for split, n in sizes.items()}


def pretrain_corpus(
    n: int,
    seed: int = 0,
    levels: Sequence[int] = LEVELS,
    drill_fraction: float = 0.2,
    answer_format: AnswerFormat = "worked",
) -> list[str]:
    """``n`` pretraining texts (prompt + completion), all from the train partition.

    Each text is a drill with probability ``drill_fraction`` and otherwise an
    example of a uniform level (see the module docstring), its completion in
    ``answer_format`` (the same draws in either form). Repeats allowed.
    """
    completion_of("0+0", answer_format)  # an unknown format fails before any draw
    n = check_int(n, "n", minimum=0)
    check_probability(drill_fraction, "drill_fraction")
    levels = check_choices(levels, "levels", LEVELS)
    rng = random.Random(f"{NAME}:pretrain:{seed}")
    texts: list[str] = []
    while len(texts) < n:
        question = sample_question(rng.choice(levels), rng)
        if partition_of(question) != "train":
            continue
        if rng.random() < drill_fraction:
            question = _drill_from(question, rng)
            if partition_of(question) != "train":
                continue
        texts.append(format_prompt(question) + completion_of(question, answer_format))
    return texts


def _drill_from(question: str, rng: random.Random) -> str:
    """One operation of ``question``'s solution, as a two-operand question."""
    left, operator, right = rng.choice(_solve(question))[1]
    return _format_expression([left, right], [operator])


# ---------------------------------------------------------------------------
# Validation and parquet I/O


def validate_row(row: Mapping[str, Any], answer_format: AnswerFormat = "worked") -> None:
    """Raise ValueError naming the row's id and the bad field if ``row`` is malformed.

    Checks the fields and types, that the prompt holds a question of the row's
    level, and that id, completion and answer are exactly the ones that
    question determines (the completion in ``answer_format``).
    """
    bad = rows.check_row_shape(row, NAME, LEVEL_SPECS)
    level = row["level"]
    prompt_match = _PROMPT.fullmatch(row["prompt"])
    if prompt_match is None:
        raise bad("prompt", f"is not of the form 'Q: <question>=?\\nA: ': {row['prompt']!r}")
    question = prompt_match["question"]
    misfit = _level_misfit(question, level)
    if misfit:
        # Blame the label if another level fits the question, else the question.
        fitting = [other for other in LEVELS if _level_misfit(question, other) is None]
        if fitting:
            raise bad("level", f"is {level}, but question {question!r} is of level {fitting}: {misfit}")
        raise bad("prompt", f"question {question!r} fits no level (level {level}: {misfit})")
    expected = make_row(question, int(level), answer_format)
    for field in ("id", "answer", "completion"):
        if row[field] != expected[field]:
            raise bad(field, f"is {row[field]!r}, the question determines {expected[field]!r}")


def save_rows(
    rows_: Iterable[Mapping[str, Any]], path: str | os.PathLike[str], answer_format: AnswerFormat = "worked"
) -> None:
    """Validate every row, then write parquet atomically."""
    rows.save_rows(rows_, path, lambda row: validate_row(row, answer_format))


def load_rows(path: str | os.PathLike[str], answer_format: AnswerFormat = "worked") -> list[ArithRow]:
    """Read rows written by ``save_rows``; every row is validated (ValueError names its id)."""
    return rows.load_rows(path, lambda row: validate_row(row, answer_format))


# ---------------------------------------------------------------------------
# Problem object (what aligntrain.problems.get_problem("arith") returns)


class ArithProblem(rows.RowStore, Options):
    """Verifiable arithmetic in five levels: exact answers, rewards 0/1 (pass@k, majority vote)."""

    name: ClassVar[str] = NAME
    binary_rewards: ClassVar[bool] = True
    levels: ClassVar[tuple[int, ...]] = LEVELS
    stop_text: ClassVar[str] = STOP_TEXT

    answer_format: AnswerFormat = Field(
        "worked",
        description="Completion form: 'worked' (the expression rewritten after each step, then '#### <answer>'; "
        "the default rows, unchanged) or 'direct' (only '#### <answer>', no steps: DCO Table 1's direct-answer "
        "setting). The pretraining corpus is written in the same form.",
    )

    def generate_splits(self, sizes: Mapping[str, int], levels: Sequence[int], seed: int) -> dict[str, list[ArithRow]]:
        return generate_splits(sizes, levels, seed, self.answer_format)

    def pretrain_corpus(self, n: int, seed: int) -> list[str]:
        return pretrain_corpus(n, seed, answer_format=self.answer_format)

    def reward(self, completion: str, row: Mapping[str, Any]) -> float:
        """1.0 if the completion's answer equals the row's gold answer, else 0.0."""
        return 1.0 if grading.is_correct(completion, row["answer"]) else 0.0

    def grade(self, completion: str, row: Mapping[str, Any]) -> grading.Verdict:
        """Answer text, answer class, correctness and reward of one completion."""
        return grading.grade(completion, row["answer"])

    def gold_class(self, row: Mapping[str, Any]) -> str:
        """The answer class of the row's gold answer."""
        gold = grading.canonical_answer(row["answer"])
        if gold is None:
            raise ValueError(f"row {row.get('id')!r}: field 'answer' {row['answer']!r} is not a parseable answer")
        return gold

    def answer_class(self, completion: str) -> str | None:
        """The completion's canonical answer (None: no parseable answer)."""
        return grading.canonical_answer(grading.extract_answer(completion))

    def validate_row(self, row: Mapping[str, Any]) -> None:
        validate_row(row, self.answer_format)


# ---------------------------------------------------------------------------
# Helpers


def _level_spec(level: int) -> LevelSpec:
    if level not in LEVEL_SPECS:
        raise ValueError(f"level must be one of {LEVELS}, got {level!r}")
    return LEVEL_SPECS[level]


def _parse_question(question: str) -> tuple[list[int], list[str]]:
    """Operands and operators of a trusted expression; a leading "-" is a negative first operand."""
    sign = -1 if question.startswith("-") else 1
    body = question[1:] if sign < 0 else question
    if not _QUESTION.fullmatch(body):
        raise ValueError(f"question must look like '47+83*6-29', got {question!r}")
    operands = [int(token) for token in re.findall(r"[0-9]+", body)]
    operands[0] *= sign
    return operands, re.findall(r"[-+*]", body)


def _format_expression(operands: Sequence[int], operators: Sequence[str]) -> str:
    return str(operands[0]) + "".join(f"{op}{value}" for op, value in zip(operators, operands[1:]))


def _level_misfit(question: str, level: int) -> str | None:
    """Why ``question`` cannot have been drawn at ``level`` (None if it can)."""
    if question.startswith("-") or not _QUESTION.fullmatch(question):
        return "malformed expression"
    spec = LEVEL_SPECS[level]
    operands, operators = _parse_question(question)
    if len(operands) != spec.n_operands:
        return f"{len(operands)} operands, level has {spec.n_operands}"
    if any(operator not in spec.operators for operator in operators):
        return f"operators outside {spec.operators!r}"
    if operators.count("*") > spec.max_products:
        return f"more than {spec.max_products} '*'"
    for index, value in enumerate(operands):
        is_factor = index > 0 and operators[index - 1] == "*"
        low, high = spec.factor_range if is_factor else spec.operand_ranges[index]
        if not low <= value <= high:
            return f"operand {value} outside {low}-{high}"
    return None
