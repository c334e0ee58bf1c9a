"""Grade-school math word problems ("gsm8k"): GSM8K from the hub.

Data set (docs/data.md; :mod:`aligntrain.problems.hub` for sources, loading,
splitting and grading): ``openai/gsm8k``, config ``main`` (``socratic`` has
the same problems with sub-questions in the solutions), splits train (7,473)
and test (1,319), files ``<config>/<split>-*.parquet``; columns ``question``
and ``answer``: the worked solution, with calculator annotations
(``<<48/2=24>>``), then a last line ``"#### <final answer>"`` (the number, at
times with thousands separators: ``#### 1,600``).

Rows [choice]: one level (1): GSM8K has no difficulty labels. The gold answer
is the text after the last ``####``, thousands separators removed ("1,600" ->
"1600"; the grader reads both as one class). The gold completion is the
solution, calculator annotations stripped (``annotations: strip``, the
default) or kept, then ``"\\n#### <answer>\\n"``: the data set's own answer line
is already ``grading.ANSWER_MARKER``'s. Ids are ``gsm8k-L1-<hash>``. Validation
is carved from train (GSM8K has none).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, ClassVar, Literal

from pydantic import Field

from aligntrain.grading import ANSWER_MARKER
from aligntrain.problems.hub import DataRowError, Format, HubProblem, Source, make_row, text_field

NAME = "gsm8k"
LEVELS = (1,)
GSM8K = Format("GSM8K", ("question", "answer"), "{subset}/{split}-*.parquet")
#: openai/gsm8k, pinned
GSM8K_DATASET, GSM8K_REVISION = "openai/gsm8k", "740312add88f781978c0658806c59bc2815b9866"

_ANNOTATION = re.compile(r"<<[^<>\n]*>>")
_GROUPED = re.compile(r"[-+]?[1-9][0-9]{0,2}(?:,[0-9]{3})+(?:\.[0-9]+)?")


def final_answer(answer_text: str) -> tuple[str, str] | None:
    """(solution, final answer) of a GSM8K ``answer`` field, separators removed; None without ``####``."""
    solution, marker, final = answer_text.rpartition(ANSWER_MARKER)
    final = final.strip()
    if not marker or not final or "\n" in final:
        return None
    return solution.rstrip(), final.replace(",", "") if _GROUPED.fullmatch(final) else final


class Gsm8kProblem(HubProblem):
    """GSM8K word problems (openai/gsm8k): a numeric answer after '####', rewards 0/1."""

    name: ClassVar[str] = NAME
    levels: ClassVar[tuple[int, ...]] = LEVELS
    formats: ClassVar[dict[str, Format]] = {"GSM8K": GSM8K}
    default_format: ClassVar[str] = "GSM8K"

    train: Source = Field(
        Source(dataset=GSM8K_DATASET, revision=GSM8K_REVISION, subsets=("main",), split="train"),
        description="Source of the train split (default: GSM8K main train).",
    )
    test: Source = Field(
        Source(dataset=GSM8K_DATASET, revision=GSM8K_REVISION, subsets=("main",), split="test"),
        description="Source of the test split (default: GSM8K main test).",
    )
    annotations: Literal["strip", "keep"] = Field(
        "strip", description="The calculator annotations <<48/2=24>> of the solutions: stripped or kept."
    )

    def to_row(self, fmt: Format, record: Mapping[str, Any], where: str) -> dict[str, Any]:
        """A GSM8K record as a row (module docstring)."""
        question = text_field(record, "question", where)
        parts = final_answer(text_field(record, "answer", where))
        if parts is None:
            raise DataRowError(f"{where}: field 'answer' has no final line '{ANSWER_MARKER} <answer>'")
        solution, answer = parts
        if self.annotations == "strip":
            solution = _ANNOTATION.sub("", solution)
        return make_row(NAME, 1, question, solution, answer)
