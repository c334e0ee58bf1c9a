"""MATH competition problems ("math"): Hendrycks et al.'s MATH and its MATH-500 test subset, from the hub.

Data sets (docs/data.md; module :mod:`aligntrain.problems.hub` for sources,
loading, splitting and grading):

* ``EleutherAI/hendrycks_math`` (format ``MATH``), one config per subject
  (``SUBJECTS``), splits train (7,500) and test (5,000), files
  ``<subject>/<split>-*.parquet``; columns ``problem``, ``level`` ("Level 1"
  .. "Level 5"), ``type`` (the subject, e.g. "Counting & Probability"),
  ``solution`` (worked solution, the answer in the last ``\\boxed{...}``).
* ``HuggingFaceH4/MATH-500`` (format ``MATH-500``), split test (500 of the MATH
  test problems), file ``test.jsonl``; columns ``problem``, ``solution``,
  ``answer``, ``subject``, ``level`` (int 1..5), ``unique_id``
  ("test/precalculus/807.json").

Defaults [choice]: train on MATH train (all seven subjects), test on MATH-500
(disjoint from MATH train: it is drawn from MATH test), validation carved from
train. Both revisions are pinned commits.

Rows: level = the MATH level; the gold answer is the content of the last
``\\boxed{...}`` (or ``\\fbox{...}``, or ``\\boxed 5`` without braces) of the
solution, braces balanced (:func:`last_boxed`), or MATH-500's ``answer``
column; the gold completion is the solution followed by ``"\\n#### <answer>\\n"``
(the boxed answer stays in the solution text). Ids are
``math-<subject>-L<level>-<hash>``. MATH's few rows with level "Level ?" are
skipped (counted). Rows whose gold today's grader cannot parse (tuples,
intervals, text, units, ...: docs/data.md lists the forms) are ungradable
(``ungradable`` option: dropped by default).

Targets [choice] (the option ``target``): ``solution`` (the default) gives the
rows above. ``answer`` (CAT §3.1's Pass@N targets, "just answers"; DCO Table 1's
direct answers) cuts the completion of every train and validation row to the
answer line alone, ``"#### <answer>\\n"`` (:func:`~aligntrain.problems.hub.answer_line`,
the line that ends a solution row: the grader reads it back as the gold). The
prompts, ids, levels, gold answers and the rows of each split are the same as
under ``solution`` (a row is kept or dropped as ungradable on its solution
form), and test rows keep their solutions: evaluation samples from the prompts
and grades the sampled answer line as before. The pretraining corpus, drawn
from the train rows, is answer-only too. ``validate_row`` then takes either
form (a row does not name its split).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar, Literal

from pydantic import Field

from aligntrain.problems.hub import (
    SPLITS,
    DataRowError,
    Format,
    HubProblem,
    SkipRow,
    Source,
    answer_line,
    int_field,
    make_row,
    text_field,
)

NAME = "math"
LEVELS = (1, 2, 3, 4, 5)
#: MATH's subject names (``type``, MATH-500's ``subject``) -> the hub config of ``EleutherAI/hendrycks_math``
SUBJECTS = {
    "Algebra": "algebra",
    "Counting & Probability": "counting_and_probability",
    "Geometry": "geometry",
    "Intermediate Algebra": "intermediate_algebra",
    "Number Theory": "number_theory",
    "Prealgebra": "prealgebra",
    "Precalculus": "precalculus",
}

MATH = Format("MATH", ("problem", "level", "type", "solution"), "{subset}/{split}-*.parquet")
MATH_500 = Format(
    "MATH-500", ("problem", "solution", "answer", "subject", "level", "unique_id"), "{split}.jsonl", key="unique_id"
)

#: EleutherAI/hendrycks_math, pinned (the parquet conversion with one config per subject)
MATH_DATASET, MATH_REVISION = "EleutherAI/hendrycks_math", "21a5633873b6a120296cce3e2df9d5550074f4a3"
#: HuggingFaceH4/MATH-500, pinned
MATH_500_DATASET, MATH_500_REVISION = "HuggingFaceH4/MATH-500", "6e4ed1a2a79af7d8630a6b768ec859cb5af4d3be"

#: training targets (``target``): the worked solution then the answer line (default), or the answer line alone
TARGETS = ("solution", "answer")
Target = Literal["solution", "answer"]
#: the splits whose completions ``target: answer`` cuts to the answer line (test rows keep their solutions)
ANSWER_TARGET_SPLITS = ("train", "validation")

_LEVEL = re.compile(r"Level ([1-5])")
_BOX_COMMANDS = ("\\boxed", "\\fbox")


def last_boxed(text: str) -> str | None:
    """The content of the last ``\\boxed{...}`` or ``\\fbox{...}`` of ``text``, braces balanced, stripped.

    ``\\boxed 5`` (a space, no braces: a few MATH solutions) gives the text up to
    the next ``$``. None when there is no box, its braces never close, or it is empty.
    """
    at, command = max((text.rfind(command), command) for command in _BOX_COMMANDS)
    if at < 0:
        return None
    rest = text[at + len(command) :].lstrip(" ")
    if not rest.startswith("{"):
        spaced = text[at + len(command) :].startswith(" ")
        return (rest.split("$", 1)[0].strip() or None) if spaced else None
    depth = 0
    for position, char in enumerate(rest):
        depth += {"{": 1, "}": -1}.get(char, 0)
        if depth == 0:
            return rest[1:position].strip() or None
    return None


def answer_only(row: Mapping[str, Any]) -> dict[str, Any]:
    """``row`` with its completion cut to the answer line alone (``target: answer``), every other field the same."""
    return {**row, "completion": answer_line(row["answer"])}


def is_answer_only(row: Mapping[str, Any]) -> bool:
    """True when ``row``'s completion is exactly the answer line of its gold answer."""
    answer, completion = row.get("answer"), row.get("completion")
    return isinstance(answer, str) and isinstance(completion, str) and completion == answer_line(answer)


def subject_slug(record: Mapping[str, Any], field: str, where: str) -> str:
    """The hub config name of the row's subject (``field``: MATH's ``type``, MATH-500's ``subject``)."""
    subject = text_field(record, field, where)
    if subject not in SUBJECTS:
        raise DataRowError(f"{where}: field {field!r} must be a MATH subject {sorted(SUBJECTS)}, got {subject!r}")
    return SUBJECTS[subject]


class MathProblem(HubProblem):
    """MATH competition problems (EleutherAI/hendrycks_math, HuggingFaceH4/MATH-500): boxed answers, rewards 0/1."""

    name: ClassVar[str] = NAME
    levels: ClassVar[tuple[int, ...]] = LEVELS
    formats: ClassVar[dict[str, Format]] = {"MATH": MATH, "MATH-500": MATH_500}
    default_format: ClassVar[str] = "MATH"
    #: MATH's answer kinds: intervals, tuples, sets, expressions, equations, text, matrices, ... (docs/grading.md)
    grading_scope: ClassVar[str] = "math"

    train: Source = Field(
        Source(dataset=MATH_DATASET, revision=MATH_REVISION, subsets=tuple(SUBJECTS.values()), split="train"),
        description="Source of the train split (default: MATH train, all subjects).",
    )
    test: Source = Field(
        Source(dataset=MATH_500_DATASET, revision=MATH_500_REVISION, split="test", format="MATH-500"),
        description="Source of the test split (default: MATH-500).",
    )
    target: Target = Field(
        "solution",
        description="Completions of the train and validation rows: 'solution' (the worked solution, then "
        "'#### <answer>'; the default rows, unchanged) or 'answer' (only '#### <answer>', no solution: CAT's "
        "Pass@N targets, DCO Table 1's direct answers). Prompts, ids, splits and the test rows are the same "
        "either way.",
    )

    def to_row(self, fmt: Format, record: Mapping[str, Any], where: str) -> dict[str, Any]:
        """A MATH or MATH-500 record as a row (module docstring)."""
        problem = text_field(record, "problem", where)
        solution = text_field(record, "solution", where)
        if fmt is MATH_500:
            level = int_field(record, "level", where, LEVELS)
            subject = subject_slug(record, "subject", where)
            answer = text_field(record, "answer", where).strip()
        else:
            level_text = text_field(record, "level", where)
            if level_text == "Level ?":
                raise SkipRow("MATH level 'Level ?' (no level)")
            match = _LEVEL.fullmatch(level_text)
            if match is None:
                raise DataRowError(f"{where}: field 'level' must be 'Level 1' .. 'Level 5', got {level_text!r}")
            level = int(match[1])
            subject = subject_slug(record, "type", where)
            answer = last_boxed(solution)
            if answer is None:
                raise DataRowError(f"{where}: field 'solution' has no \\boxed{{...}} answer with balanced braces")
        return make_row(f"{NAME}-{subject}", level, problem, solution, answer)

    def load_splits(self, splits: Sequence[str] = SPLITS) -> dict[str, list[dict[str, Any]]]:
        """:meth:`HubProblem.load_splits`, the train and validation completions per ``target`` (module docstring)."""
        loaded = super().load_splits(splits)
        if self.target == "solution":
            return loaded
        return {
            split: [answer_only(row) for row in split_rows] if split in ANSWER_TARGET_SPLITS else split_rows
            for split, split_rows in loaded.items()
        }

    def validate_row(self, row: Mapping[str, Any]) -> None:
        """:meth:`HubProblem.validate_row`; with ``target: answer`` the completion may also be the answer line alone.

        Both forms pass then (the train and validation rows are answer-only, the
        test rows keep their solutions, and a row does not name its split); an
        answer-only row gets every other check of a solution row.
        """
        if self.target == "answer" and is_answer_only(row):
            row = {**row, "completion": "\n" + row["completion"]}  # the answer line after an empty solution
        super().validate_row(row)
