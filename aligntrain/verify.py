"""Answer extraction and equivalence for model completions: the names of :mod:`aligntrain.grading`.

The grader lives in the package :mod:`aligntrain.grading` (one module per
answer kind: scalar, equations, intervals, lists, text; the tokenizer and the
grammar in :mod:`~aligntrain.grading.parser`); its module docstring holds the safety design, the
answer kinds, the equivalence rules and the bounds, and docs/grading.md lists
them with examples. This module keeps ``aligntrain.verify`` importable with the
names the problems use.
"""

from __future__ import annotations

from aligntrain import grading
from aligntrain.grading import *  # noqa: F403 (this module re-exports the grader's public names)

__all__ = list(grading.__all__)
