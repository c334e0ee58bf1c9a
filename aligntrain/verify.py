"""Answer extraction and equivalence for model completions: the names of :mod:`aligntrain.grading`.

The grader lives in the package :mod:`aligntrain.grading` (one module per
answer kind: scalar, equations, intervals, lists, text; the tokenizer and the
grammar in :mod:`~aligntrain.grading.parser`); its module docstring holds the safety design, the
answer kinds, the equivalence rules and the bounds, and docs/grading.md lists
them with examples. This module keeps ``aligntrain.verify`` importable with the
names the problems use.
"""

from __future__ import annotations

from aligntrain.grading import (
    ANSWER_MARKER,
    KINDS,
    MAX_ANSWER_CHARS,
    MAX_EXPANDED_TERMS,
    MAX_EXPONENT,
    MAX_GROUP_DEPTH,
    MAX_INTERVALS,
    MAX_ITEMS,
    MAX_NUMBER_DIGITS,
    MAX_RADICALS,
    MAX_ROOT_INDEX,
    SCOPES,
    Verdict,
    canonical_answer,
    extract_answer,
    grade,
    is_correct,
)

__all__ = [
    "ANSWER_MARKER",
    "MAX_ANSWER_CHARS",
    "MAX_EXPANDED_TERMS",
    "MAX_EXPONENT",
    "MAX_GROUP_DEPTH",
    "MAX_INTERVALS",
    "MAX_ITEMS",
    "MAX_NUMBER_DIGITS",
    "MAX_RADICALS",
    "MAX_ROOT_INDEX",
    "KINDS",
    "SCOPES",
    "Verdict",
    "canonical_answer",
    "extract_answer",
    "grade",
    "is_correct",
]
