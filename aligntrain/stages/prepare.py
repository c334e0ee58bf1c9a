"""Stage ``prepare``: the problem's train / val / test rows and the pretraining corpus.

The embedded problem generates its rows from the study seed; a hub problem
(``math``, ``gsm8k``: docs/data.md) draws them from its data set, read as its
typed options (``problem.options``) say: a hub id at a pinned revision, or
local parquet in the data set's schema. A study may instead point
``problem.data_files`` at local parquet files of rows already mapped (a data
set exported once); their rows go through the same validation, so a malformed
row stops the stage with its id.
"""

from __future__ import annotations

from collections.abc import Sequence

import pandas as pd

from aligntrain.config import Params
from aligntrain.io import atomic_path
from aligntrain.paths import StudyPaths
from aligntrain.problems import PROBLEMS, Problem
from aligntrain.problems.hub import HubProblem, corpus_from_rows

SPLITS = ("train", "validation", "test")


def problem_of(params: Params) -> Problem:
    """The study's problem with its typed options (``problem.options``)."""
    return PROBLEMS.parse(params.problem.name, params.problem.options)


def generate_rows(params: Params) -> dict[str, list[dict]]:
    """Rows of every split, from ``problem.data_files`` when given, else generated (or drawn from a data set)."""
    cfg = params.problem
    problem = problem_of(params)
    if cfg.data_files:
        return {split: pd.read_parquet(cfg.data_files[split]).to_dict("records") for split in SPLITS}
    sizes = {"train": cfg.train_size, "validation": cfg.validation_size, "test": cfg.test_size}
    return problem.generate_splits(sizes, levels=cfg.levels, seed=params.study.seed)


def validate_rows(params: Params, splits: dict[str, Sequence[dict]]) -> None:
    """Every row well-formed (ValueError naming the row id), every id once, no prompt in two splits.

    Every problem's ids hash the prompt (``validate_row`` checks it), so an id written twice
    is a prompt written twice: in the test split it would be sampled twice as often and weigh
    twice in every mean, silently.
    """
    problem = problem_of(params)
    seen: dict[str, str] = {}
    ids: dict[str, str] = {}  # id -> "<split> row <number>" where first seen
    for split in SPLITS:
        if not splits.get(split):
            raise ValueError(f"split {split!r} is empty")
        for number, row in enumerate(splits[split]):
            problem.validate_row(row)
            where = f"{split} row {number}"
            first = ids.setdefault(row["id"], where)
            if first != where:
                raise ValueError(f"row id {row['id']!r} is written twice: {first} and {where}")
            other = seen.setdefault(row["prompt"], split)
            if other != split:
                raise ValueError(f"row {row['id']!r}: its prompt is in both {other!r} and {split!r}")


def pretrain_corpus(params: Params) -> list[str]:
    """The problem's pretraining corpus; a hub problem given ``data_files`` draws it from their train rows."""
    cfg, problem = params.problem, problem_of(params)
    if cfg.data_files and isinstance(problem, HubProblem):
        train = pd.read_parquet(cfg.data_files["train"]).to_dict("records")
        return corpus_from_rows(train, cfg.pretrain_corpus_size, f"{cfg.name}:pretrain:{params.study.seed}")
    return problem.pretrain_corpus(cfg.pretrain_corpus_size, seed=params.study.seed)


def write_outputs(paths: StudyPaths, splits: dict[str, Sequence[dict]], corpus: Sequence[str]) -> dict:
    for split in SPLITS:
        with atomic_path(paths.split(split)) as tmp:
            pd.DataFrame.from_records(list(splits[split])).to_parquet(tmp, index=False)
    with atomic_path(paths.pretrain_corpus) as tmp:
        pd.DataFrame({"text": list(corpus)}).to_parquet(tmp, index=False)
    return {f"{split}_rows": len(splits[split]) for split in SPLITS} | {"corpus_texts": len(corpus)}


def read_split(params: Params, paths: StudyPaths, split: str) -> list[dict]:
    """The rows of one prepared split, validated as ``prepare`` validated them.

    Stages do not trust ``data/`` blindly: a file edited or corrupted after prepare
    stops here, naming the file and the row, instead of failing later somewhere that
    names neither (an Arrow conversion error, a 0-row pool, an unscorable gold answer).
    """
    path = paths.split(split)
    rows = pd.read_parquet(path).to_dict("records")
    if not rows:
        raise ValueError(f"{path}: split {split!r} has no rows")
    problem = problem_of(params)
    for row in rows:
        try:
            problem.validate_row(row)
        except (ValueError, KeyError, TypeError) as err:
            raise ValueError(f"{path}: {err}") from None
    return rows
