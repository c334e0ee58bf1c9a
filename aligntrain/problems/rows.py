"""The row format every problem shares: fields, their structural checks, parquet I/O.

A row is a plain dict ``{id, level, prompt, completion, answer}``. Problems add
their own semantic checks on top of :func:`check_row_shape`.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from typing import Any, ClassVar

import pyarrow as pa
import pyarrow.parquet as pq

from aligntrain.io import atomic_path
from aligntrain.validation import is_int

ROW_FIELDS = ("id", "level", "prompt", "completion", "answer")
ROW_SCHEMA = pa.schema(
    [
        ("id", pa.string()),
        ("level", pa.int64()),
        ("prompt", pa.string()),
        ("completion", pa.string()),
        ("answer", pa.string()),
    ]
)

RowError = Callable[[str, str], ValueError]


def text_digest(text: str) -> str:
    """16 hex digits of BLAKE2b of ``text`` (UTF-8): the stable part of every problem's row ids."""
    return hashlib.blake2b(text.encode("utf-8"), digest_size=8).hexdigest()


def check_row_shape(row: Mapping[str, Any], problem: str, levels: Collection[int]) -> RowError:
    """Fields present, no others, strings where text goes, a known level.

    Raises ValueError naming the row's id and the field; returns ``bad(field, what)``,
    the error builder the problem uses for its own checks.
    """
    if not isinstance(row, Mapping):
        raise ValueError(f"row must be a mapping, got {type(row).__name__}")
    identifier = row.get("id")
    if not isinstance(identifier, str) or not identifier:
        raise ValueError(f"row {identifier!r}: field 'id' must be a non-empty str")

    def bad(field: str, what: str) -> ValueError:
        return ValueError(f"row {identifier!r}: field {field!r} {what}")

    for field in ROW_FIELDS:
        if field not in row:
            raise bad(field, "is missing")
    for field in row:
        if field not in ROW_FIELDS:
            raise bad(field, f"is not a {problem} field {ROW_FIELDS}")
    for field in ("prompt", "completion", "answer"):
        if not isinstance(row[field], str):
            raise bad(field, f"must be a str, got {type(row[field]).__name__}")
    level = row["level"]
    # is_int, not isinstance(level, int): rows read back through pandas may carry numpy integers.
    if not is_int(level) or level not in levels:
        raise bad("level", f"must be an int in {tuple(sorted(levels))}, got {level!r}")
    return bad


def save_rows(
    rows: Iterable[Mapping[str, Any]], path: str | os.PathLike[str], validate: Callable[[Mapping[str, Any]], None]
) -> None:
    """Validate every row, then write parquet atomically (readers never see half a file)."""
    rows = list(rows)
    for row in rows:
        validate(row)
    table = pa.Table.from_pylist([{field: row[field] for field in ROW_FIELDS} for row in rows], ROW_SCHEMA)
    with atomic_path(path) as temp_path:
        pq.write_table(table, temp_path)


def load_rows(path: str | os.PathLike[str], validate: Callable[[Mapping[str, Any]], None]) -> list[dict[str, Any]]:
    """Read rows written by :func:`save_rows`; every row is validated (ValueError names its id)."""
    rows = pq.read_table(path).to_pylist()
    for row in rows:
        validate(row)
    return rows


class RowStore:
    """Mixin for problem classes: ``save_rows``/``load_rows`` through the problem's own ``validate_row``,
    and ``grade_batch`` as one ``grade`` per completion (a reward-model problem scores whole batches)."""

    #: True when scoring is cheaper a batch at a time (a reward model): RL then calls ``grade_batch``
    batched_rewards: ClassVar[bool] = False

    def grade_batch(self, completions: Sequence[str], rows: Sequence[Mapping[str, Any]]) -> list:
        """``grade(completion, row)`` of each pair, in order."""
        return [self.grade(c, r) for c, r in zip(completions, rows, strict=True)]

    def save_rows(self, rows: Iterable[Mapping[str, Any]], path: str | os.PathLike[str]) -> None:
        save_rows(rows, path, self.validate_row)

    def load_rows(self, path: str | os.PathLike[str]) -> list[dict[str, Any]]:
        return load_rows(path, self.validate_row)
