"""Competitive programming from the hub ("code_contests"): CodeContests and TACO, graded in the sandbox.

Tang et al. (arXiv 2503.19595, §6 and App. A.4) train on CodeContests (Li et al.,
2022: AlphaCode's data set) with a ±1 reward for a Python program that passes
every test of the problem, evaluate on CodeContests valid / test and on TACO
(Li et al., 2023) easy / hard. This module reads both data sets in their hub
schemas (docs/data.md; :mod:`aligntrain.problems.hub` for sources, fetching at a
pinned commit, splitting) and grades completions exactly as the embedded
``code`` problem does (:class:`aligntrain.problems.code.SandboxGraded`: the
program runs in :mod:`aligntrain.sandbox` on every test, reward 0/1 or the
fraction passed, behaviour classes for majority vote).

Data sets:

* ``deepmind/code_contests`` (format ``CodeContests``), splits train (13,328),
  valid (117), test (165), files ``data/<split>-*.parquet``; columns used:
  ``name``, ``description`` (the statement, examples included),
  ``public_tests`` / ``private_tests`` / ``generated_tests`` (each
  ``{input: [str], output: [str]}``), ``solutions`` (``{language: [int],
  solution: [str]}``, language a class label: 0 unknown, 1 PYTHON (2), 2 CPP,
  3 PYTHON3, 4 JAVA), ``difficulty`` (class label: 0 UNKNOWN_DIFFICULTY,
  1 EASY .. 5 HARDEST, 6 EXTERNAL, 7.. the Codeforces letters A..V),
  ``cf_rating`` (int, 0 for non-Codeforces problems).
* ``BAAI/TACO`` (format ``TACO``), config ``ALL``, splits train (25,443) and test
  (1,000), files ``ALL/<split>-*.parquet`` (the parquet conversion of the
  repository); every column a string: ``question``, ``solutions`` (a JSON list
  of Python programs), ``input_output`` (JSON ``{"inputs": [...], "outputs":
  [...]}``, with ``"fn_name"`` for call-based problems), ``difficulty`` (EASY,
  MEDIUM, MEDIUM_HARD, HARD, VERY_HARD, UNKNOWN_DIFFICULTY), ``name``.

Rows [choice]:

* prompt: the statement, a blank line, then ``INSTRUCTION`` (write a Python 3
  program reading stdin and writing stdout, in one ```python block) and a
  newline. An instruct model gets it as one user turn (``model.chat_template``).
* completion (the SFT target): the data set's first Python 3 solution
  (CodeContests: language 3; Python 2 solutions do not run under Python 3;
  TACO: the first of its list), CRLF made LF, in a ```python fence:
  ``"```python\\n<program>\\n```\\n"``; "" when the problem has none. Train and
  validation rows need one (the warm-up trains on train's and measures its
  loss on validation's; the pretraining corpus): problems without are dropped
  from them (counted) and kept, with completion "", in test, which is graded
  by its tests alone. The gold programs are not run at load: one that fails
  its own tests (Python 2 idioms, ``from fractions import gcd``, problems with
  several right outputs) is not detected.
* answer: the tests as JSON ``[[stdin, stdout], ...]`` (``code.tests_of``):
  CodeContests' public, then private, then the first ``max_generated_tests``
  generated tests; TACO's ``input_output`` pairs (an input or output given as a
  list of lines is joined with newlines); exact duplicates dropped, then at
  most ``max_tests`` kept (None: all). A problem with no test is skipped.
* level: CodeContests' Codeforces problems (``cf_rating`` > 0) by rating:
  ≤ 1200 → 1, ≤ 1600 → 2, ≤ 2000 → 3, ≤ 2400 → 4, above → 5 (the data set card
  recommends ``cf_rating`` over ``difficulty`` for Codeforces); the others by
  ``difficulty`` EASY..HARDEST → 1..5; TACO's EASY 1, MEDIUM 2, MEDIUM_HARD 3,
  HARD 4, VERY_HARD 5 (Tang's TACO *easy* / *hard* splits are levels [1] / [4]
  of TACO test); anything unrated (UNKNOWN_DIFFICULTY, EXTERNAL, a Codeforces
  letter without a rating) is level 0.
* id: ``code_contests-<cc|taco>-L<level>-<16 hex digits>``, the hex a BLAKE2b
  hash of the statement.

Split sizes: ``generate_splits`` checks each size asked for against the problems
that qualify (a Python 3 gold and ``min_train_tests`` tests for train, a gold for
validation, the levels asked for) before drawing; too few stop the load with one
ValueError naming, per split, ``problem.<split>_size``, the count that qualifies,
the files read and the problems excluded by reason. Test, and validation when it
has its own source, are checked before train is read.

Skipped (counted in the log): TACO's call-based problems (``fn_name``: the
program is a function called with arguments, which the stdin/stdout sandbox
path does not grade) and problems without tests. Not done: Tang's
decontamination of CodeContests train against TACO test (Zheng et al., 2024);
only exact statement matches with the study's test split are removed
(:mod:`aligntrain.problems.hub`, "Splits"). Per-problem time and memory limits
are not used: ``timeout_s`` and ``memory_mb`` hold for every test.

Extracting the program from a model completion [choice]
(:func:`extract_fenced_program`): the last ```python (or ```python3, ```py)
block; else the last bare ``` block; else the whole completion. A block
still open at the end (the sampler stopped inside it) runs to the end.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any, ClassVar

from pydantic import Field, StrictInt

from aligntrain.options import Real
from aligntrain.problems import rows
from aligntrain.problems.code import SandboxGraded, tests_of
from aligntrain.problems.hub import (
    SPLITS,
    DataRowError,
    Format,
    HubProblem,
    SkipRow,
    Source,
    hub_patterns,
    text_field,
)
from aligntrain.validation import check_choices, check_int

logger = logging.getLogger(__name__)

NAME = "code_contests"
LEVELS = (0, 1, 2, 3, 4, 5)
INSTRUCTION = (
    "Write a Python 3 program that reads the input from standard input and writes the answer to standard "
    "output. Give the whole program in one ```python code block."
)

CODE_CONTESTS = Format(
    "CodeContests",
    (
        "name",
        "description",
        "public_tests",
        "private_tests",
        "generated_tests",
        "difficulty",
        "solutions",
        "cf_rating",
    ),
    "data/{split}-*.parquet",
    key="name",
)
TACO = Format("TACO", ("question", "solutions", "input_output", "difficulty"), "{subset}/{split}-*.parquet", key="name")

#: deepmind/code_contests, pinned (main as public code pins it; check it on the hub before a paper run)
CODE_CONTESTS_DATASET, CODE_CONTESTS_REVISION = "deepmind/code_contests", "802411c3010cb00d1b05bad57ca77365a3c699d6"
#: BAAI/TACO, pinned: the commit "Convert dataset to Parquet" (before it, the repository held a loading script)
TACO_DATASET, TACO_REVISION = "BAAI/TACO", "1257571d3ae21509282a69a0e34d85cb6d85b594"

#: CodeContests' ``solutions.language`` class label of Python 3
PYTHON3 = 3
#: CodeContests' ``difficulty`` class labels that are a level (the others: 0 unknown, 6 external, 7.. letters)
CODE_CONTESTS_DIFFICULTY = {1: 1, 2: 2, 3: 3, 4: 4, 5: 5}
#: upper bounds of the Codeforces rating of levels 1..4 (level 5 above)
CF_RATING_BOUNDS = (1200, 1600, 2000, 2400)
TACO_DIFFICULTY = {"UNKNOWN_DIFFICULTY": 0, "EASY": 1, "MEDIUM": 2, "MEDIUM_HARD": 3, "HARD": 4, "VERY_HARD": 5}
#: the id's tag of each format
_TAGS = {"CodeContests": "cc", "TACO": "taco"}
#: a split's problems that qualify, how many were loaded, and the excluded ones counted by reason
Qualifying = tuple[list[dict[str, Any]], int, dict[str, int]]

_FENCE_OPEN = r"^[ \t]*```[ \t]*{lang}[ \t]*\n"
_FENCE_BODY = r"(?P<body>.*?)(?:^[ \t]*```|\Z)"
_PYTHON_BLOCK = re.compile(_FENCE_OPEN.format(lang=r"(?:python3?|py)") + _FENCE_BODY, re.DOTALL | re.M | re.I)
_BARE_BLOCK = re.compile(_FENCE_OPEN.format(lang="") + _FENCE_BODY, re.DOTALL | re.M)


def extract_fenced_program(completion: str) -> str | None:
    """The program of a completion (module docstring); None when it is blank."""
    if not isinstance(completion, str):
        raise ValueError(f"completion must be a str, got {type(completion).__name__}")
    for block in (_PYTHON_BLOCK, _BARE_BLOCK):
        # The last block: an instruct model that corrects itself writes the corrected program last.
        bodies = [match["body"] for match in block.finditer(completion) if match["body"].strip()]
        if bodies:
            return bodies[-1].rstrip("\n")
    return completion if completion.strip() else None


def format_prompt(statement: str) -> str:
    """The statement, a blank line, ``INSTRUCTION`` and a newline."""
    return f"{statement.strip()}\n\n{INSTRUCTION}\n"


def gold_completion(program: str | None) -> str:
    """``"```python\\n<program>\\n```\\n"`` (CRLF made LF); "" without a program."""
    if program is None:
        return ""
    return f"```python\n{program.replace(chr(13) + chr(10), chr(10)).strip(chr(10))}\n```\n"


def usable_solution(program: Any) -> bool:
    """A program the fence can hold: a non-blank str with no ``` of its own."""
    return isinstance(program, str) and bool(program.strip()) and "```" not in program


def level_of_rating(rating: int) -> int:
    """Level 1..5 of a Codeforces rating (``CF_RATING_BOUNDS``)."""
    return 1 + sum(rating > bound for bound in CF_RATING_BOUNDS)


def _int(record: Mapping[str, Any], field: str, where: str, *, default: int | None = None) -> int:
    value = record.get(field)
    if value is None and default is not None:
        return default
    if not isinstance(value, int) or isinstance(value, bool):
        raise DataRowError(f"{where}: field {field!r} must be an int, got {type(value).__name__} {value!r}")
    return value


def _str_lists(record: Mapping[str, Any], field: str, keys: tuple[str, str], where: str) -> tuple[list, list]:
    """The two parallel lists ``record[field][keys[0]]``, ``record[field][keys[1]]`` (equal lengths)."""
    value = record.get(field)
    if not isinstance(value, Mapping) or not all(isinstance(value.get(key), list) for key in keys):
        shown = type(value).__name__ if not isinstance(value, Mapping) else sorted(value)
        raise DataRowError(f"{where}: field {field!r} must be {{{keys[0]}: [...], {keys[1]}: [...]}}, got {shown}")
    first, second = value[keys[0]], value[keys[1]]
    if len(first) != len(second):
        raise DataRowError(
            f"{where}: field {field!r} has {len(first)} {keys[0]} but {len(second)} {keys[1]} (must be pairs)"
        )
    return first, second


def _test_text(value: Any, field: str, where: str) -> str:
    # TACO gives a few stdin/stdout tests as lists of lines (the APPS layout it inherits).
    if isinstance(value, list) and all(isinstance(line, str) for line in value):
        return "\n".join(value)
    if not isinstance(value, str):
        raise DataRowError(f"{where}: field {field!r} holds a {type(value).__name__}, not a str (or a list of lines)")
    return value


def code_contests_tests(record: Mapping[str, Any], where: str, max_generated: int | None) -> list[list[str]]:
    """Public, private, then the first ``max_generated`` generated tests of a CodeContests record."""
    tests = []
    for field in ("public_tests", "private_tests", "generated_tests"):
        inputs, outputs = _str_lists(record, field, ("input", "output"), where)
        pairs = [[_test_text(i, field, where), _test_text(o, field, where)] for i, o in zip(inputs, outputs)]
        tests += pairs[:max_generated] if field == "generated_tests" and max_generated is not None else pairs
    return tests


def taco_tests(record: Mapping[str, Any], where: str) -> list[list[str]]:
    """The stdin/stdout tests of a TACO record; :class:`SkipRow` for a call-based one (``fn_name``)."""
    text = text_field(record, "input_output", where)
    try:
        spec = json.loads(text)
    except json.JSONDecodeError as err:
        raise DataRowError(f"{where}: field 'input_output' is not JSON: {err}") from None
    if not isinstance(spec, Mapping):
        raise DataRowError(f"{where}: field 'input_output' must be a JSON object, got {type(spec).__name__}")
    if spec.get("fn_name"):
        raise SkipRow("TACO call-based problem (fn_name): the sandbox grades stdin/stdout programs")
    inputs, outputs = _str_lists({"input_output": spec}, "input_output", ("inputs", "outputs"), where)
    return [
        [_test_text(i, "input_output", where), _test_text(o, "input_output", where)] for i, o in zip(inputs, outputs)
    ]


def python3_solution(record: Mapping[str, Any], where: str) -> str | None:
    """The first usable Python 3 solution of a CodeContests record (language ``PYTHON3``), None if none."""
    languages, solutions = _str_lists(record, "solutions", ("language", "solution"), where)
    for language, solution in zip(languages, solutions):
        if language == PYTHON3 and usable_solution(solution):
            return solution
    return None


def taco_solution(record: Mapping[str, Any], where: str) -> str | None:
    """The first usable program of TACO's ``solutions`` (a JSON list), None if none."""
    text = record.get("solutions")
    if not isinstance(text, str):
        raise DataRowError(f"{where}: field 'solutions' must be a str (a JSON list), got {type(text).__name__}")
    if not text.strip():
        return None
    try:
        solutions = json.loads(text)
    except json.JSONDecodeError as err:
        raise DataRowError(f"{where}: field 'solutions' is not JSON: {err}") from None
    if not isinstance(solutions, list):
        raise DataRowError(f"{where}: field 'solutions' must be a JSON list, got {type(solutions).__name__}")
    return next((solution for solution in solutions if usable_solution(solution)), None)


def _counts(counts: Mapping[str, int]) -> str:
    """``"reason: count; ..."`` in the order given."""
    return "; ".join(f"{reason}: {count}" for reason, count in counts.items()) or "none"


def _unique(tests: list[list[str]]) -> list[list[str]]:
    seen, kept = set(), []
    for test in tests:  # generated tests repeat the public ones at times: each runs once
        if tuple(test) not in seen:
            seen.add(tuple(test))
            kept.append(test)
    return kept


class CodeContestsProblem(SandboxGraded, HubProblem):
    """Competitive programming (deepmind/code_contests, BAAI/TACO): Python programs graded on every test in the
    sandbox, rewards 0/1 (or the fraction of tests passed); the module docstring has the details."""

    name: ClassVar[str] = NAME
    levels: ClassVar[tuple[int, ...]] = LEVELS
    formats: ClassVar[dict[str, Format]] = {"CodeContests": CODE_CONTESTS, "TACO": TACO}
    default_format: ClassVar[str] = "CodeContests"

    train: Source = Field(
        Source(dataset=CODE_CONTESTS_DATASET, revision=CODE_CONTESTS_REVISION, split="train"),
        description="Source of the train split (default: CodeContests train).",
    )
    validation: Source | None = Field(
        Source(dataset=CODE_CONTESTS_DATASET, revision=CODE_CONTESTS_REVISION, split="valid"),
        description="Source of the validation split (default: CodeContests valid); None: carved from `train`.",
    )
    test: Source = Field(
        Source(dataset=CODE_CONTESTS_DATASET, revision=CODE_CONTESTS_REVISION, split="test"),
        description="Source of the test split (default: CodeContests test).",
    )
    # Contest tests are larger than the `code` problem's one-line inputs, and Python is slow next to
    # the C++ the time limits were set for.
    timeout_s: Real = Field(4.0, gt=0, le=60, description="Wall-clock (and CPU) seconds per test run.")
    memory_mb: StrictInt = Field(1024, ge=64, le=16384, description="Address space per program process, in MiB.")
    max_generated_tests: StrictInt | None = Field(
        None, ge=0, description="CodeContests: at most this many of a problem's generated tests (None: all)."
    )
    max_tests: StrictInt | None = Field(
        None, ge=1, description="At most this many tests per problem, in order (None: all)."
    )
    min_train_tests: StrictInt = Field(
        1, ge=1, description="Train problems with fewer tests are dropped (Tang App. A.4 drops those under 5)."
    )

    def extract_program(self, completion: str) -> str | None:
        """The fenced program of a completion (:func:`extract_fenced_program`)."""
        return extract_fenced_program(completion)

    def to_row(self, fmt: Format, record: Mapping[str, Any], where: str) -> dict[str, Any]:
        """A CodeContests or TACO record as a row (module docstring)."""
        if fmt is TACO:
            statement = text_field(record, "question", where)
            difficulty = text_field(record, "difficulty", where)
            if difficulty not in TACO_DIFFICULTY:
                raise DataRowError(
                    f"{where}: field 'difficulty' must be one of {list(TACO_DIFFICULTY)}, got {difficulty!r}"
                )
            level = TACO_DIFFICULTY[difficulty]
            tests = taco_tests(record, where)
            solution = taco_solution(record, where)
        else:
            statement = text_field(record, "description", where)
            rating = _int(record, "cf_rating", where, default=0)
            difficulty = _int(record, "difficulty", where)
            level = level_of_rating(rating) if rating > 0 else CODE_CONTESTS_DIFFICULTY.get(difficulty, 0)
            tests = code_contests_tests(record, where, self.max_generated_tests)
            solution = python3_solution(record, where)
        tests = _unique(tests)[: self.max_tests]
        if not tests:
            raise SkipRow("no tests")
        return {
            "id": f"{NAME}-{_TAGS[fmt.name]}-L{level}-{rows.text_digest(statement.strip())}",
            "level": level,
            "prompt": format_prompt(statement),
            "completion": gold_completion(solution),
            "answer": json.dumps(tests),
        }

    def ungradable_reason(self, row: Mapping[str, Any]) -> str | None:
        """None: every row with tests is graded by running them (a gold program is not needed)."""
        return None

    def requirements(self, split: str) -> dict[str, Callable[[Mapping[str, Any]], bool]]:
        """What a problem of ``split`` needs, keyed by the reason a problem without it is excluded: a gold
        program in train and validation (their completions are trained on, or their loss measured),
        ``min_train_tests`` tests in train; test keeps every problem (graded by its tests alone)."""
        if split == "test":
            return {}
        needs = {"no Python 3 solution": lambda row: bool(row["completion"])}
        if split == "train" and self.min_train_tests > 1:  # every row has a test (to_row skips the others)
            minimum = self.min_train_tests
            needs[f"fewer than {minimum} tests"] = lambda row: len(tests_of(row)) >= minimum
        return needs

    def _qualifying(self, splits: Sequence[str]) -> dict[str, Qualifying]:
        """Per split of :meth:`HubProblem.load_splits`: the rows meeting :meth:`requirements`, how many it
        loaded, and the excluded ones counted by reason (every reason, 0 included; logged when any)."""
        result = {}
        for split, loaded in super().load_splits(splits).items():
            needs = self.requirements(split)
            kept, excluded = [], dict.fromkeys(needs, 0)
            for row in loaded:
                reason = next((why for why, met in needs.items() if not met(row)), None)
                if reason is None:
                    kept.append(row)
                else:
                    excluded[reason] += 1
            if len(kept) < len(loaded):
                dropped = len(loaded) - len(kept)
                logger.warning(
                    "%s %s: dropped %d of %d problems: %s", self.name, split, dropped, len(loaded), _counts(excluded)
                )
            result[split] = (kept, len(loaded), excluded)
        return result

    def load_splits(self, splits: Sequence[str] = SPLITS) -> dict[str, list[dict[str, Any]]]:
        """:meth:`HubProblem.load_splits`, each split keeping the problems that meet :meth:`requirements`
        (counts logged)."""
        return {split: kept for split, (kept, _, _) in self._qualifying(splits).items()}

    def generate_splits(
        self, sizes: Mapping[str, int], levels: Sequence[int], seed: int
    ) -> dict[str, list[dict[str, Any]]]:
        """:meth:`HubProblem.generate_splits` (the same rows), each size checked first against the problems
        that qualify (:meth:`_check_sizes`).

        Why, the tracker's issue: "tang_codecontests' split sizes (8 000 / 64 / 165) are not checked against
        how many problems have a Python 3 gold and enough tests. If too few qualify, the load fails late."
        (HubProblem's check came after every split was read, one split at a time, naming neither the params
        key nor why problems were excluded.) Test, and validation when it has a source of its own, are
        small: they are read and checked first, so a size they cannot fill fails before train's files
        (7.6 GB for CodeContests) are read; they are read again with train.
        """
        levels = check_choices(levels, "levels", self.levels)
        sizes = {split: check_int(n, f"sizes[{split!r}]", minimum=0) for split, n in sizes.items()}
        small = [s for s in sizes if s == "test" or (s == "validation" and self.validation is not None)]
        if small and len(small) < len(sizes):
            self._check_sizes({split: sizes[split] for split in small}, levels, self._qualifying(small))
        pools = self._check_sizes(sizes, levels, self._qualifying(list(sizes)))
        return {split: self.draw(pools[split], n, split, seed) for split, n in sizes.items()}

    def _check_sizes(
        self, sizes: Mapping[str, int], levels: Sequence[int], qualifying: Mapping[str, Qualifying]
    ) -> dict[str, list[dict[str, Any]]]:
        """The qualifying rows of ``levels`` per split; one ValueError naming every size they cannot fill:
        the params key, the size, the count that qualifies, the split's files and the exclusions by reason."""
        pools, short = {}, []
        for split, n in sizes.items():
            kept, loaded, excluded = qualifying[split]
            pools[split] = [row for row in kept if row["level"] in levels]
            if n > len(pools[split]):
                excluded = {**excluded, f"not at levels {list(levels)}": len(kept) - len(pools[split])}
                short.append(
                    f"  problem.{split}_size = {n}, but {len(pools[split])} of the {loaded} problems of split "
                    f"{split} qualify ({self._origin(split)}); excluded: {_counts(excluded)}. "
                    f"Ask for at most {len(pools[split])}."
                )
        if short:
            raise ValueError(
                f"{self.name}: too few problems qualify for the split sizes asked for (problems without tests, "
                "duplicates and those in another split are left out before these counts; the log has them):\n"
                + "\n".join(short)
            )
        return pools

    def _origin(self, split: str) -> str:
        """Where ``split``'s problems are read from, for messages: the source and its files."""
        source = self.sources().get(split, self.train)
        carved = "" if split in self.sources() else "carved from the train source: "
        files = "" if source.parquet else f", files {hub_patterns(source, self.format_of(source))}"
        return f"{carved}{source.describe()}{files}"

    def validate_row(self, row: Mapping[str, Any]) -> None:
        """Raise ValueError naming the row's id and the bad field if ``row`` is malformed.

        Fields and types (``rows.check_row_shape``), the prompt frame, the id (this
        problem's prefix, the level, the hash of the statement), the tests (a
        non-empty JSON list of [stdin, stdout] strings), and a completion that is
        "" or one fenced program.
        """
        bad = rows.check_row_shape(row, self.name, self.levels)
        prompt, tail = row["prompt"], f"\n\n{INSTRUCTION}\n"
        statement = prompt.removesuffix(tail)
        if statement == prompt or not statement.strip():
            raise bad("prompt", f"is not of the form '<statement>\\n\\n{INSTRUCTION}\\n': {prompt[:60]!r}")
        expected_end = f"-L{row['level']}-{rows.text_digest(statement)}"
        if not (row["id"].startswith(f"{self.name}-") and row["id"].endswith(expected_end)):
            raise bad("id", f"is not '{self.name}-<cc|taco>{expected_end}' (the level and the hash of the statement)")
        try:
            tests = json.loads(row["answer"])
        except json.JSONDecodeError as err:
            raise bad("answer", f"is not JSON: {err}") from None
        pairs = isinstance(tests, list) and all(
            isinstance(t, list) and len(t) == 2 and all(isinstance(x, str) for x in t) for t in tests
        )
        if not tests or not pairs:
            raise bad("answer", "must be a non-empty JSON list of [stdin, stdout] string pairs")
        completion = row["completion"]
        if completion and gold_completion(extract_fenced_program(completion)) != completion:
            raise bad("completion", f"must be '' or one program in a ```python fence: {completion[:60]!r}")
