"""Procedurally generated programming tasks graded in the sandbox ("code").

The model reads a task stated in words with one worked example and writes a
Python program that reads stdin and writes stdout; the program is graded by
running it on the row's tests inside :mod:`aligntrain.sandbox` (never in this
process: nothing a model wrote is executed, ``eval``-ed or compiled here).

Text format [choice]. The prompt is two Python comment lines, the task and its
example (``input -> output``); the completion is the program, two lines in one
style (read the input, print one expression), then a blank line (``STOP_TEXT``
= "\\n\\n", where a sampler stops)::

    prompt:     "# sum of the even numbers\\n# 3 14 2 7 -> 16\\n"
    completion: "a=list(map(int,input().split()))\\nprint(sum(x for x in a if x%2==0))\\n\\n"

so prompt + completion is itself a valid Python file. Every input is one line:
``INPUT_KINDS`` "ints" (3-5 integers 0-19), "word" (3-7 lowercase letters),
"words" (2-4 words of 2-5 letters); the first program line reads it
(``READ_LINES``). The longest example (prompt + completion) has at most
``MAX_EXAMPLE_CHARS`` = 120 characters, as ``arith``'s, so a tiny model with a
128-token context (the character tokenizer adds BOS and EOS) holds a whole one.

Task families and levels [choice] (``FAMILIES``; {k} is a parameter the task
states, drawn per task)::

    level  what it asks                                   families
    1      one operation, one value out                   sum, max, min, count of numbers; reverse, upper
                                                          case, length, vowels of a word; number of words,
                                                          last word
    2      one operation over every element, or one       sort, reverse order, multiply/add {k}, count above
           with a parameter {k}                           {k}, F for multiples of {k} (fizzbuzz-like); sort
                                                          words, words longer than {k}; count a letter,
                                                          repeat {k} times
    3      a composition of two operations                sum of evens, largest minus smallest, sum of
                                                          squares, sum above {k}, sort descending; reverse
                                                          each word, upper-case initials, longest word length

Tests [choice]: ``TESTS_PER_ROW`` = 5 (stdin, expected stdout) pairs per row;
the first is the prompt's example, the other four are hidden from the prompt.
Expected outputs come from reference solutions in Python (``Family.solve``),
written independently of the gold program text. The example's output is never
empty; hidden tests may have an empty output. A prompt determines its row: the
hidden inputs are drawn from a random stream seeded by a hash of the prompt, so
``validate_row`` rebuilds a row from its prompt and compares every field. The
tests travel in the row's ``answer`` field as JSON (``[[stdin, stdout], ...]``,
``tests_of``): the shared row format (:mod:`aligntrain.problems.rows`) stays
the same for every problem, and parquet round trips keep plain strings.

Splits disjoint by construction (as in ``arith``): every prompt belongs to one
partition ("train" 80 %, "validation" 10 %, "test" 10 %) by a salted BLAKE2b
hash of the prompt text (``partition_of``), independent of seed, level and
sizes; splits hold unique prompts and the pretraining corpus (solved tasks:
prompt + gold program) draws only train-partition prompts. Ids hash the
prompt: "code-L<level>-<16 hex digits>".

Grading [choice] (``SandboxGraded.grade_batch``, shared with the contest problems): the program is the completion's
text before the first ``STOP_TEXT`` (all of it when there is none); an empty one
is no program (reward 0, no class). Programs run in a ``SandboxPool`` (at most
``max_workers`` at a time, by default one per core) under the options'
``timeout_s`` and ``memory_mb``. The reward is 1/0 (all tests pass) or, with
``reward_mode: fraction``, the fraction of tests passed (continuous: best-of-N).
The behaviour class (AlphaCode's clustering for majority vote) is the program's
normalised stdout on every test input, ``None`` (JSON ``null``) for a test that
did not end normally; ``None`` as a whole when no test ended normally. A test
the sandbox could not run (``sandbox_error``) is retried once; if it fails
again the completion is unscorable (reward NaN; docs/code.md).
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import os
import random
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Literal

from pydantic import Field, PrivateAttr, StrictInt

from aligntrain.options import Options, Real
from aligntrain.problems import rows, splits
from aligntrain.sandbox import SandboxPool, SandboxUnavailable, TestResult

# The sandbox's own comparison rule, so that a passed test and a matching class element always agree.
from aligntrain.sandbox._supervisor import _normalize
from aligntrain.validation import check_choices, check_int

logger = logging.getLogger(__name__)

NAME = "code"
SPLITS = splits.SPLITS
SPLIT_FRACTIONS = splits.SPLIT_FRACTIONS
STOP_TEXT = "\n\n"
MAX_EXAMPLE_CHARS = 120
TESTS_PER_ROW = 5
VOWELS = "aeiou"
CONSONANTS = "bcdfghjklmnpqrstvwxyz"
#: a test's stdout beyond this many bytes is an ``output_limit`` (the expected outputs have < 40)
MAX_OUTPUT_BYTES = 64 << 10
#: MiB of files a program may write under /tmp (it needs none)
TMP_MB = 8
#: a behaviour class longer than this (a program that prints a lot) is stored as its hash
MAX_CLASS_CHARS = 256

# Salt of the split hash; changing it re-partitions every prompt (a new dataset).
_SPLIT_SALT = b"aligntrain/code/split/v1:"
# Salt of the hidden tests' seed; changing it draws new hidden tests for every prompt.
_TESTS_SALT = b"aligntrain/code/tests/v1:"
# Rejection sampling gives up after this many draws in a row without a new prompt of the partition.
_MAX_FRUITLESS_DRAWS = 50_000
_PROMPT = re.compile(r"# (?P<task>[A-Za-z0-9 ,]+)\n# (?P<input>[a-z0-9 ]+) -> (?P<output>[A-Za-z0-9 ]+)\n")

CodeRow = dict[str, Any]
"""One task, keys ``rows.ROW_FIELDS``: id, level, prompt, completion (gold program +
STOP_TEXT), answer (the tests as JSON, ``tests_of``)."""


# ---------------------------------------------------------------------------
# Inputs


@dataclass(frozen=True)
class InputKind:
    """One kind of input line: how it is drawn, its form, how a reference solution reads it."""

    read_line: str  # the gold program's first line
    form: re.Pattern[str]  # fullmatch of a prompt's example input
    sample_example: Callable[[random.Random], str]  # short: it is in the context
    sample_hidden: Callable[[random.Random], str]  # wider (edge cases too): it never is
    parse: Callable[[str], Any]


def _word(rng: random.Random, low: int, high: int) -> str:
    # Vowels at 40 % so that vowel counts and letter counts vary.
    return "".join(rng.choice(VOWELS if rng.random() < 0.4 else CONSONANTS) for _ in range(rng.randint(low, high)))


INPUT_KINDS: dict[str, InputKind] = {
    "ints": InputKind(
        "a=list(map(int,input().split()))",
        re.compile(r"(?:[0-9] ){2,3}[0-9]"),
        lambda rng: " ".join(str(rng.randint(0, 9)) for _ in range(rng.randint(3, 4))),
        lambda rng: " ".join(str(rng.randint(0, 19)) for _ in range(rng.randint(1, 8))),
        lambda line: [int(token) for token in line.split()],
    ),
    "word": InputKind(
        "s=input()",
        re.compile(r"[a-z]{3,6}"),
        lambda rng: _word(rng, 3, 6),
        lambda rng: _word(rng, 1, 10),
        lambda line: line,
    ),
    "words": InputKind(
        "w=input().split()",
        re.compile(r"(?:[a-z]{2,5} ){1,2}[a-z]{2,5}"),
        lambda rng: " ".join(_word(rng, 2, 5) for _ in range(rng.randint(2, 3))),
        lambda rng: " ".join(_word(rng, 1, 7) for _ in range(rng.randint(1, 5))),
        lambda line: line.split(),
    ),
}
READ_LINES = {kind: spec.read_line for kind, spec in INPUT_KINDS.items()}


# ---------------------------------------------------------------------------
# Task families


def _spaced(values: Iterable[Any]) -> str:
    """What ``print(*values)`` writes, without the newline."""
    return " ".join(str(value) for value in values)


@dataclass(frozen=True)
class Family:
    """One kind of task: its words, its gold program's second line, and a reference solution.

    ``task`` and ``program`` are templates with ``{k}`` for the parameter (one of
    ``parameters``; a family without one has ``(None,)``). ``solve(value, k)``
    takes the parsed input and returns the expected output line.
    """

    name: str
    level: int
    kind: str
    task: str
    program: str
    solve: Callable[[Any, Any], str]
    parameters: tuple[Any, ...] = (None,)

    def task_text(self, k: Any) -> str:
        return self.task.format(k=k)

    def gold_program(self, k: Any) -> str:
        """The two-line gold program (no trailing newline)."""
        return f"{INPUT_KINDS[self.kind].read_line}\n{self.program.format(k=k)}"


FAMILIES: tuple[Family, ...] = (
    # level 1: one operation, one value out
    Family("sum", 1, "ints", "sum of the numbers", "print(sum(a))", lambda a, k: str(sum(a))),
    Family("max", 1, "ints", "largest number", "print(max(a))", lambda a, k: str(max(a))),
    Family("min", 1, "ints", "smallest number", "print(min(a))", lambda a, k: str(min(a))),
    Family("count", 1, "ints", "how many numbers", "print(len(a))", lambda a, k: str(len(a))),
    Family("reverse", 1, "word", "reverse the text", "print(s[::-1])", lambda s, k: s[::-1]),
    Family("upper", 1, "word", "text in upper case", "print(s.upper())", lambda s, k: s.upper()),
    Family("length", 1, "word", "length of the text", "print(len(s))", lambda s, k: str(len(s))),
    Family(
        "vowels",
        1,
        "word",
        "count the vowels",
        "print(sum(c in 'aeiou' for c in s))",
        lambda s, k: str(sum(ch in VOWELS for ch in s)),
    ),
    Family("num_words", 1, "words", "number of words", "print(len(w))", lambda w, k: str(len(w))),
    Family("last_word", 1, "words", "last word", "print(w[-1])", lambda w, k: w[-1]),
    # level 2: one operation over every element, or one with a parameter
    Family("sort", 2, "ints", "sort the numbers", "print(*sorted(a))", lambda a, k: _spaced(sorted(a))),
    Family("backwards", 2, "ints", "numbers in reverse order", "print(*a[::-1])", lambda a, k: _spaced(reversed(a))),
    Family(
        "times",
        2,
        "ints",
        "multiply each number by {k}",
        "print(*[x*{k} for x in a])",
        lambda a, k: _spaced(x * k for x in a),
        tuple(range(2, 10)),
    ),
    Family(
        "plus",
        2,
        "ints",
        "add {k} to each number",
        "print(*[x+{k} for x in a])",
        lambda a, k: _spaced(x + k for x in a),
        tuple(range(1, 10)),
    ),
    Family(
        "count_above",
        2,
        "ints",
        "how many numbers are above {k}",
        "print(sum(x>{k} for x in a))",
        lambda a, k: str(len([x for x in a if x > k])),
        tuple(range(2, 8)),
    ),
    Family(
        "fizz",
        2,
        "ints",
        "F for multiples of {k}",
        "print(*['F' if x%{k}==0 else x for x in a])",
        lambda a, k: _spaced("F" if x % k == 0 else x for x in a),
        tuple(range(2, 6)),
    ),
    Family("sort_words", 2, "words", "sort the words", "print(*sorted(w))", lambda w, k: _spaced(sorted(w))),
    Family(
        "long_words",
        2,
        "words",
        "words longer than {k} letters",
        "print(*[x for x in w if len(x)>{k}])",
        lambda w, k: _spaced(x for x in w if len(x) > k),
        (2, 3, 4),
    ),
    Family(
        "count_letter",
        2,
        "word",
        "count the letter {k}",
        "print(s.count('{k}'))",
        lambda s, k: str(s.count(k)),
        tuple(VOWELS),
    ),
    Family("repeat", 2, "word", "repeat the text {k} times", "print(s*{k})", lambda s, k: s * k, (2, 3)),
    # level 3: a composition of two operations
    Family(
        "sum_even",
        3,
        "ints",
        "sum of the even numbers",
        "print(sum(x for x in a if x%2==0))",
        lambda a, k: str(sum(x for x in a if x % 2 == 0)),
    ),
    Family("spread", 3, "ints", "largest minus smallest", "print(max(a)-min(a))", lambda a, k: str(max(a) - min(a))),
    Family(
        "squares", 3, "ints", "sum of the squares", "print(sum(x*x for x in a))", lambda a, k: str(sum(x**2 for x in a))
    ),
    Family(
        "sum_above",
        3,
        "ints",
        "sum of the numbers above {k}",
        "print(sum(x for x in a if x>{k}))",
        lambda a, k: str(sum(x for x in a if x > k)),
        tuple(range(2, 8)),
    ),
    Family(
        "sort_down",
        3,
        "ints",
        "sort the numbers, largest first",
        "print(*sorted(a)[::-1])",
        lambda a, k: _spaced(sorted(a, reverse=True)),
    ),
    Family(
        "reverse_each",
        3,
        "words",
        "reverse each word",
        "print(*[x[::-1] for x in w])",
        lambda w, k: _spaced(x[::-1] for x in w),
    ),
    Family(
        "initials",
        3,
        "words",
        "first letters in upper case",
        "print(''.join(x[0] for x in w).upper())",
        lambda w, k: "".join(x[0] for x in w).upper(),
    ),
    Family(
        "longest",
        3,
        "words",
        "length of the longest word",
        "print(max(len(x) for x in w))",
        lambda w, k: str(max(len(x) for x in w)),
    ),
)
LEVELS = tuple(sorted({family.level for family in FAMILIES}))
FAMILIES_BY_LEVEL: dict[int, tuple[Family, ...]] = {
    level: tuple(family for family in FAMILIES if family.level == level) for level in LEVELS
}


def _task_index(families: Sequence[Family]) -> dict[str, tuple[Family, Any]]:
    """Task text -> (family, parameter): how a prompt is read back; ValueError if two tasks read alike."""
    index: dict[str, tuple[Family, Any]] = {}
    for family in families:
        for k in family.parameters:
            text = family.task_text(k)
            if text in index:
                raise ValueError(f"families {index[text][0].name!r} and {family.name!r} both state {text!r}")
            index[text] = (family, k)
    return index


_TASKS = _task_index(FAMILIES)


# ---------------------------------------------------------------------------
# One task: prompt, tests, row


def expected_output(family: Family, k: Any, line: str) -> str:
    """The reference solution's stdout for the input ``line`` (with its newline)."""
    return family.solve(INPUT_KINDS[family.kind].parse(line), k) + "\n"


def format_prompt(family: Family, k: Any, example: str) -> str:
    """ "# <task>\\n# <example input> -> <example output>\\n"."""
    return f"# {family.task_text(k)}\n# {example} -> {expected_output(family, k, example).rstrip(chr(10))}\n"


def hidden_inputs(family: Family, prompt: str, example: str) -> list[str]:
    """The ``TESTS_PER_ROW`` - 1 hidden input lines of a prompt: distinct, none equal to the example.

    Drawn from a stream seeded by a salted hash of the prompt, so the prompt determines them.
    """
    seed = hashlib.blake2b(_TESTS_SALT + prompt.encode("ascii"), digest_size=8).digest()
    rng = random.Random(seed)
    lines: list[str] = []
    while len(lines) < TESTS_PER_ROW - 1:
        line = INPUT_KINDS[family.kind].sample_hidden(rng)
        if line != example and line not in lines:
            lines.append(line)
    return lines


def make_row(family: Family, k: Any, example: str) -> CodeRow:
    """The row of the task (``family``, ``k``) whose prompt shows ``example`` (an input line)."""
    prompt = format_prompt(family, k, example)
    inputs = [example, *hidden_inputs(family, prompt, example)]
    tests = [[line + "\n", expected_output(family, k, line)] for line in inputs]
    return {
        "id": row_id(prompt, family.level),
        "level": family.level,
        "prompt": prompt,
        "completion": family.gold_program(k) + STOP_TEXT,
        "answer": json.dumps(tests),
    }


def sample_task(level: int, rng: random.Random) -> tuple[Family, Any, str]:
    """A random task of ``level``: family uniform, parameter uniform, an informative example (``is_informative``)."""
    if level not in FAMILIES_BY_LEVEL:
        raise ValueError(f"level must be one of {LEVELS}, got {level!r}")
    family = rng.choice(FAMILIES_BY_LEVEL[level])
    k = rng.choice(family.parameters)
    while True:
        example = INPUT_KINDS[family.kind].sample_example(rng)
        if is_informative(family, k, example):
            return family, k, example


def is_informative(family: Family, k: Any, example: str) -> bool:
    """Whether ``example`` shows the task at work: its output is not empty and not the input itself."""
    output = expected_output(family, k, example).rstrip("\n")
    return bool(output) and output != example


def tests_of(row: Mapping[str, Any]) -> list[tuple[str, str]]:
    """The row's (stdin, expected stdout) tests, the example first."""
    return [(stdin, stdout) for stdin, stdout in json.loads(row["answer"])]


def row_id(prompt: str, level: int) -> str:
    """Stable id from the prompt text: "code-L<level>-<16 hex digits>"."""
    digest = rows.text_digest(prompt)
    return f"{NAME}-L{level}-{digest}"


def partition_of(prompt: str) -> str:
    """The split that owns ``prompt``: a salted hash of the text alone (``splits.partition_of``)."""
    return splits.partition_of(prompt, _SPLIT_SALT)


# ---------------------------------------------------------------------------
# Splits and pretraining corpus


def generate_split(split: str, n: int, levels: Sequence[int] = LEVELS, seed: int = 0) -> list[CodeRow]:
    """``n`` rows with unique prompts of the ``split`` partition, shuffled.

    Levels get equal shares (the first ``n % len(levels)`` levels one more).
    Deterministic in (split, n, levels, seed); each (split, level) has its own
    random stream, so changing one level's share leaves the others' tasks.
    """
    return splits.unique_rows(
        NAME,
        split,
        n,
        levels,
        seed,
        known_levels=LEVELS,
        draw=sample_task,
        text_of=lambda task: format_prompt(*task),
        partition=partition_of,
        row_of=lambda task, level, rng: make_row(*task),
        max_fruitless=_MAX_FRUITLESS_DRAWS,
        noun="tasks",
    )


def generate_splits(
    sizes: Mapping[str, int], levels: Sequence[int] = LEVELS, seed: int = 0
) -> dict[str, list[CodeRow]]:
    """One ``generate_split`` per entry of ``sizes`` (e.g. {"train": 2000, "test": 200})."""
    splits.check_sizes(sizes)
    return {split: generate_split(split, n, levels, seed) for split, n in sizes.items()}


def pretrain_corpus(n: int, seed: int = 0, levels: Sequence[int] = LEVELS) -> list[str]:
    """``n`` solved tasks (prompt + gold program + STOP_TEXT) of train-partition prompts.

    Each text's level is uniform over ``levels``; repeats allowed.
    """
    n = check_int(n, "n", minimum=0)
    levels = check_choices(levels, "levels", LEVELS)
    rng = random.Random(f"{NAME}:pretrain:{seed}")
    texts: list[str] = []
    while len(texts) < n:
        family, k, example = sample_task(rng.choice(levels), rng)
        prompt = format_prompt(family, k, example)
        if partition_of(prompt) == "train":
            texts.append(prompt + family.gold_program(k) + STOP_TEXT)
    return texts


# ---------------------------------------------------------------------------
# Validation and parquet I/O


def validate_row(row: Mapping[str, Any]) -> None:
    """Raise ValueError naming the row's id and the bad field if ``row`` is malformed.

    Checks the fields and types, that the prompt states a known task with a
    well-formed example of non-empty output, that the level is the task's, and
    that id, completion and answer (the tests) are exactly the ones the prompt
    determines.
    """
    bad = rows.check_row_shape(row, NAME, FAMILIES_BY_LEVEL)
    match = _PROMPT.fullmatch(row["prompt"])
    if match is None:
        raise bad("prompt", f"is not of the form '# <task>\\n# <input> -> <output>\\n': {row['prompt']!r}")
    if match["task"] not in _TASKS:
        raise bad("prompt", f"states no known task: {match['task']!r}")
    family, k = _TASKS[match["task"]]
    if row["level"] != family.level:
        raise bad("level", f"is {row['level']}, but task {match['task']!r} is of level {family.level}")
    if not INPUT_KINDS[family.kind].form.fullmatch(match["input"]):
        raise bad("prompt", f"example input {match['input']!r} is not a {family.kind!r} input of the generator")
    if not is_informative(family, k, match["input"]):
        raise bad("prompt", f"example {match['input']!r} shows nothing: its output is empty or the input itself")
    expected = make_row(family, k, match["input"])
    for field in ("prompt", "id", "completion", "answer"):
        if row[field] != expected[field]:
            raise bad(field, f"is {row[field]!r}, the prompt's task determines {expected[field]!r}")


def save_rows(rows_: Iterable[Mapping[str, Any]], path: str | os.PathLike[str]) -> None:
    """Validate every row, then write parquet atomically."""
    rows.save_rows(rows_, path, validate_row)


def load_rows(path: str | os.PathLike[str]) -> list[CodeRow]:
    """Read rows written by ``save_rows``; every row is validated (ValueError names its id)."""
    return rows.load_rows(path, validate_row)


# ---------------------------------------------------------------------------
# Grading: programs, behaviour classes


def extract_program(completion: str) -> str | None:
    """The program of a completion: the text before the first STOP_TEXT (all of it if none); None if blank."""
    if not isinstance(completion, str):
        raise ValueError(f"completion must be a str, got {type(completion).__name__}")
    program = completion.split(STOP_TEXT, 1)[0]
    return program if program.strip() else None


def behaviour_key(outputs: Sequence[str | None]) -> str:
    """The hashable, parquet-storable key of a behaviour: one entry per test, in test order.

    Each entry is a stdout, normalised as the sandbox compares outputs (lines
    without trailing whitespace, no trailing empty lines), or None for a run that
    did not end normally. The key is the JSON list, or "blake2b:<hex>" of it when
    longer than ``MAX_CLASS_CHARS`` (a pool then stays small whatever a program prints).
    """
    normalised = [None if out is None else "\n".join(_normalize(out)) for out in outputs]
    text = json.dumps(normalised, ensure_ascii=False, separators=(",", ":"))
    if len(text) <= MAX_CLASS_CHARS:
        return text
    return "blake2b:" + hashlib.blake2b(text.encode("utf-8"), digest_size=16).hexdigest()


@dataclass(frozen=True)
class CodeGrade:
    """One graded completion: the program (None: none written), its behaviour class
    (None: it ran normally on no test), correct = every test passed, the reward, and
    each test's sandbox status (empty when there was no program)."""

    answer: str | None
    answer_class: str | None
    correct: bool
    reward: float
    statuses: tuple[str, ...] = ()


# Statuses of a run that ended normally: its stdout is the program's answer to the input.
_NORMAL_END = frozenset({"passed", "failed"})


def grade_results(
    program: str, tests: Sequence[tuple[str, str]], results: Sequence[TestResult], mode: str
) -> CodeGrade:
    """The grade of ``program`` from its sandbox results on ``tests`` (``mode``: all_tests or fraction)."""
    statuses = tuple(result.status for result in results)
    if "sandbox_error" in statuses:  # the program's behaviour is unknown, not wrong
        return CodeGrade(program, None, False, math.nan, statuses)
    passed = sum(result.passed for result in results)
    correct = passed == len(tests)
    reward = float(correct) if mode == "all_tests" else passed / len(tests)
    if not any(status in _NORMAL_END for status in statuses):
        return CodeGrade(program, None, correct, reward, statuses)
    # A passed test's class entry is the expected output itself (the stdout kept is truncated).
    outputs = [
        expected if result.passed else (result.stdout if result.status in _NORMAL_END else None)
        for (_, expected), result in zip(tests, results, strict=True)
    ]
    return CodeGrade(program, behaviour_key(outputs), correct, reward, statuses)


# ---------------------------------------------------------------------------
# Sandbox grading, shared by every problem whose completions are programs


class SandboxGraded(Options):
    """Grading by running each completion's program on its row's tests in the sandbox.

    The base of ``code`` (this module) and of the contest problems
    (:mod:`aligntrain.problems.code_contests`): the reward (all tests, or the
    fraction passed), the behaviour class (AlphaCode's clustering, ``grade_results``),
    the retry of ``sandbox_error`` runs and the options of the sandbox live here
    once. A subclass says how a program is read out of a completion
    (``extract_program``) and keeps its tests in the row's ``answer`` field as
    ``tests_of`` reads them.
    """

    #: RL grades a batch of programs at once, in parallel in the sandbox pool
    batched_rewards: ClassVar[bool] = True
    #: a behaviour class needs the row's tests: ``answer_class(completion)`` alone cannot give one
    answer_class_needs_row: ClassVar[bool] = True

    reward_mode: Literal["all_tests", "fraction"] = Field(
        "all_tests",
        description="all_tests: reward 1 when every test passes, else 0 (pass@k, majority vote); "
        "fraction: the fraction of tests passed (continuous: best-of-N, max@k).",
    )
    timeout_s: Real = Field(2.0, gt=0, le=60, description="Wall-clock (and CPU) seconds per test run.")
    memory_mb: StrictInt = Field(256, ge=64, le=16384, description="Address space per program process, in MiB.")
    max_workers: StrictInt | None = Field(
        None, ge=1, description="Programs run at the same time (None: one per CPU core)."
    )

    _pool: SandboxPool | None = PrivateAttr(None)

    @property
    def binary_rewards(self) -> bool:
        """True with ``reward_mode: all_tests`` (0/1 rewards), False with ``fraction``."""
        return self.reward_mode == "all_tests"

    def extract_program(self, completion: str) -> str | None:
        """The program of ``completion`` (None: it wrote none); the ``code`` problem's rule by default."""
        return extract_program(completion)

    def sandbox(self) -> SandboxPool:
        """The sandbox pool, started on first use; SandboxUnavailable naming this problem if it cannot isolate."""
        if self._pool is None:
            try:
                self._pool = SandboxPool(
                    max_workers=self.max_workers,
                    timeout_s=self.timeout_s,
                    memory_mb=self.memory_mb,
                    max_output_bytes=MAX_OUTPUT_BYTES,
                    tmp_mb=TMP_MB,
                )
            except SandboxUnavailable as err:
                raise SandboxUnavailable(
                    f"problem {self.name!r} runs model-written programs only inside the sandbox "
                    f"(docs/sandbox.md), and it cannot work on this machine: {err}"
                ) from None
        return self._pool

    def grade_batch(self, completions: Sequence[str], rows_: Sequence[Mapping[str, Any]]) -> list[CodeGrade]:
        """Grade every (completion, row) pair: the programs run in parallel in the sandbox pool.

        A program whose run met a ``sandbox_error`` is run once more; if it meets
        one again its reward is NaN (unscorable) and a warning names the row.
        """
        if len(completions) != len(rows_):
            raise ValueError(f"{len(completions)} completions for {len(rows_)} rows")
        programs = [self.extract_program(completion) for completion in completions]
        tests = [tests_of(row) for row in rows_]
        grades: list[CodeGrade | None] = [None] * len(programs)
        pending = [i for i, program in enumerate(programs) if program is not None]
        for i, program in enumerate(programs):
            if program is None:
                grades[i] = CodeGrade(None, None, False, 0.0)
        pool = self.sandbox() if pending else None
        for attempt in range(2):
            if not pending:
                break
            results = pool.map([(programs[i], tests[i]) for i in pending])
            retry = []
            for i, result in zip(pending, results, strict=True):
                grades[i] = grade_results(programs[i], tests[i], result, self.reward_mode)
                if math.isnan(grades[i].reward):
                    retry.append(i)
                    if attempt:
                        why = next(r.detail for r in result if r.status == "sandbox_error")
                        logger.warning("row %r: the sandbox failed twice, unscorable: %s", rows_[i].get("id"), why)
            pending = retry
        return grades

    def grade(self, completion: str, row: Mapping[str, Any]) -> CodeGrade:
        """Program, behaviour class, correctness and reward of one completion (run in the sandbox)."""
        return self.grade_batch([completion], [row])[0]

    def reward(self, completion: str, row: Mapping[str, Any]) -> float:
        """1.0/0.0 (all tests pass) or the fraction of tests passed, as ``reward_mode`` says."""
        return self.grade(completion, row).reward

    def gold_class(self, row: Mapping[str, Any]) -> str:
        """The behaviour class of a program that passes every test: the expected outputs' key."""
        return behaviour_key([expected for _, expected in tests_of(row)])

    def answer_class(self, completion: str) -> str | None:
        """Not available: a program's behaviour class needs the row's tests; ``grade(completion, row)`` has it."""
        raise ValueError(
            f"problem {self.name!r}: a program's behaviour class is its output on the row's tests; "
            "use grade(completion, row).answer_class (RL rules that need answer classes are refused for this problem)"
        )


# ---------------------------------------------------------------------------
# Problem object (what aligntrain.problems.get_problem("code") returns)


class CodeProblem(SandboxGraded, rows.RowStore):
    """Small programs over integers, strings and lists, graded by running their tests in the sandbox.

    Rewards 0/1 by default (pass@k, majority vote over behaviour classes), or the
    fraction of tests passed (best-of-N). The module docstring has the details.
    """

    name: ClassVar[str] = NAME
    levels: ClassVar[tuple[int, ...]] = LEVELS
    stop_text: ClassVar[str] = STOP_TEXT

    def generate_splits(self, sizes: Mapping[str, int], levels: Sequence[int], seed: int) -> dict[str, list[CodeRow]]:
        return generate_splits(sizes, levels, seed)

    def pretrain_corpus(self, n: int, seed: int) -> list[str]:
        return pretrain_corpus(n, seed)

    def validate_row(self, row: Mapping[str, Any]) -> None:
        validate_row(row)
