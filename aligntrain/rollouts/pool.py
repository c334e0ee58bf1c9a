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
logp           summed log π(y|x) of the completion at temperature 1, from the
               training model's own forward pass (rollouts.backends)
sampler_logp   the same sum as the generation backend computed it (hf: = logp;
               vllm: its kernels' sum, a diagnostic)
num_tokens     completion length in tokens, EOS included
finished       True when generation stopped at EOS, not at the length cap
=============  ==========================================================

The file's metadata (``SAMPLER_KEY``) records what drew the pool: the backend,
its version and the dtype (:func:`read_sampler`).
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from aligntrain.io import atomic_path

#: key of the pool file's schema metadata that holds the sampler record (JSON)
SAMPLER_KEY = b"aligntrain.sampler"

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
    "sampler_logp",
    "num_tokens",
    "finished",
]


def grade_completions(rows: Sequence[Mapping[str, Any]], completions: Sequence, problem) -> list[dict[str, Any]]:
    """Grade every :class:`~aligntrain.rollouts.generate.Completion` against its row
    (``rows[c.prompt_index]``) with ``problem.grade_batch``: the one grading loop of the package.
    A completion the problem cannot score (reward NaN: a reward model failed) is a ValueError.

    One dict per completion, in the order given, with the pool's columns ``prompt_id``,
    ``level`` (int), ``answer``, ``answer_class``, ``correct`` (bool) and ``reward`` (float).
    """
    graded = []
    verdicts = problem.grade_batch([c.text for c in completions], [rows[c.prompt_index] for c in completions])
    pairs = zip(completions, verdicts, strict=True)
    unscorable = sorted({rows[c.prompt_index]["id"] for c, v in pairs if math.isnan(v.reward)})
    if unscorable:  # NaN: a reward model failed on these; a pool's statistics cannot hold them
        raise ValueError(
            f"completions of {len(unscorable)} prompts could not be scored (e.g. {unscorable[:5]}); "
            "the log names the reward model's errors"
        )
    for c, verdict in zip(completions, verdicts, strict=True):
        row = rows[c.prompt_index]
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


def build_pool(
    rows: Sequence[dict], completions: Sequence, problem, sampler_logps: Sequence[float] | None = None
) -> pd.DataFrame:
    """The pool of ``completions``: each graded (:func:`grade_completions`), with its text and sampling record.

    ``sampler_logps``: the backend's own log π sums (None: the completions' ``logp``).
    """
    sampler_logps = [c.logp for c in completions] if sampler_logps is None else sampler_logps
    graded = grade_completions(rows, completions, problem)
    records = [
        {
            **grade,
            "sample_index": c.sample_index,
            "text": c.text,
            "logp": c.logp,
            "sampler_logp": float(sampler_logp),
            "num_tokens": c.num_tokens,
            "finished": c.finished,
        }
        for c, grade, sampler_logp in zip(completions, graded, sampler_logps, strict=True)
    ]
    return pd.DataFrame.from_records(records, columns=POOL_COLUMNS)


def write_pool(pool: pd.DataFrame, path: str | Path, sampler: Mapping[str, str] | None = None) -> None:
    """Write ``pool`` atomically, with ``sampler`` (backend, version, dtype) in the file's metadata."""
    missing = set(POOL_COLUMNS) - set(pool.columns)
    if missing:
        raise ValueError(f"pool is missing columns {sorted(missing)}")
    write_with_sampler(pool, path, sampler)


def write_with_sampler(frame: pd.DataFrame, path: str | Path, sampler: Mapping[str, str] | None) -> None:
    """``frame`` as parquet, atomically, with ``sampler`` in the schema metadata (pools and per-prompt scores)."""
    table = pa.Table.from_pandas(frame, preserve_index=False)
    if sampler is not None:
        metadata = {**(table.schema.metadata or {}), SAMPLER_KEY: json.dumps(dict(sampler), sort_keys=True).encode()}
        table = table.replace_schema_metadata(metadata)
    with atomic_path(path) as tmp:
        pq.write_table(table, tmp)


def read_sampler(path: str | Path) -> dict[str, str] | None:
    """The sampler record of a file written by :func:`write_with_sampler` (None: it records none)."""
    metadata = pq.read_schema(path).metadata or {}
    return json.loads(metadata[SAMPLER_KEY]) if SAMPLER_KEY in metadata else None


def read_pool(path: str | Path) -> pd.DataFrame:
    pool = pd.read_parquet(path)
    missing = set(POOL_COLUMNS) - set(pool.columns)
    if missing:
        raise ValueError(f"{path} is not a pool: missing columns {sorted(missing)}")
    return pool
