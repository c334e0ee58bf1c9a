"""The pool: one row per sampled completion, the interchange format of the study.

Written as parquet by ``rollouts`` and read by ``evaluate`` and the diagnostics
(DESIGN: the data path). Columns:

=============  ==========================================================
prompt_id      id of the test row
level          difficulty level of the prompt
sample_index   0..M−1 within the prompt
text           the completion as decoded
answer         the extracted final answer text (None when absent)
answer_class   canonical answer class (None: unparseable, never wins a vote)
correct        the verifier's verdict
reward         the problem's reward (1/0 for verifiable problems)
logp           summed log π(y|x) of the completion at temperature 1
num_tokens     completion length in tokens, EOS included
finished       True when generation stopped at EOS, not at the length cap
=============  ==========================================================
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from aligntrain.io import atomic_path

POOL_COLUMNS = [
    "prompt_id",
    "level",
    "sample_index",
    "text",
    "answer",
    "answer_class",
    "correct",
    "reward",
    "logp",
    "num_tokens",
    "finished",
]


def grade_completions(rows: Sequence[Mapping[str, Any]], completions: Sequence, problem) -> list[dict[str, Any]]:
    """Grade every :class:`~aligntrain.rollouts.generate.Completion` against its row
    (``rows[c.prompt_index]``) with ``problem.grade``: the one grading loop of the package.

    One dict per completion, in the order given, with the pool's columns ``prompt_id``,
    ``level`` (int), ``answer``, ``answer_class``, ``correct`` (bool) and ``reward`` (float).
    """
    graded = []
    for c in completions:
        row = rows[c.prompt_index]
        verdict = problem.grade(c.text, row)
        graded.append(
            {
                "prompt_id": row["id"],
                "level": int(row["level"]),
                "answer": verdict.answer,
                "answer_class": verdict.answer_class,
                "correct": bool(verdict.correct),
                "reward": float(verdict.reward),
            }
        )
    return graded


def build_pool(rows: Sequence[dict], completions: Sequence, problem) -> pd.DataFrame:
    """The pool of ``completions``: each graded (:func:`grade_completions`), with its text and sampling record."""
    records = [
        {
            **grade,
            "sample_index": c.sample_index,
            "text": c.text,
            "logp": c.logp,
            "num_tokens": c.num_tokens,
            "finished": c.finished,
        }
        for c, grade in zip(completions, grade_completions(rows, completions, problem), strict=True)
    ]
    return pd.DataFrame.from_records(records, columns=POOL_COLUMNS)


def write_pool(pool: pd.DataFrame, path: str | Path) -> None:
    missing = set(POOL_COLUMNS) - set(pool.columns)
    if missing:
        raise ValueError(f"pool is missing columns {sorted(missing)}")
    with atomic_path(path) as tmp:
        pool.to_parquet(tmp, index=False)


def read_pool(path: str | Path) -> pd.DataFrame:
    pool = pd.read_parquet(path)
    missing = set(POOL_COLUMNS) - set(pool.columns)
    if missing:
        raise ValueError(f"{path} is not a pool: missing columns {sorted(missing)}")
    return pool
