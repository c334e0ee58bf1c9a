#!/usr/bin/env python
"""A study's pass@k per seed and per level, for every variant and ensemble of its comparison.

    scripts/study_tables.py pipelines/dco_step docs/results/dco_step

writes ``per_seed.csv`` (the mean over test prompts, one row per variant and seed) and
``per_level.csv`` (the mean over test prompts of a level and over seeds, one row per variant and
level) into the output folder. It reads what the ``compare`` stage reads: every replicate's
per-prompt table (metrics/per_prompt/<variant>[--s<seed>].parquet), with the ensembles of
``compare.ensembles`` scored from their members (aligntrain.evaluation.compare.with_ensembles).
Descriptive only: the intervals and the Holm family are the compare stage's (reports/compare.md).
"""

from __future__ import annotations

import sys
from pathlib import Path

import pandas as pd

from aligntrain.config import load_params
from aligntrain.evaluation.compare import with_ensembles
from aligntrain.paths import StudyPaths

SCORES = ("pass@1", "pass@4", "pass@8", "pass@32")


def tables(study: Path) -> tuple[pd.DataFrame, pd.DataFrame]:
    params = load_params(study / "params.yaml")
    paths = StudyPaths(study)
    seeds = [params.study.seed, *params.study.seeds]
    per_prompt = with_ensembles(
        {v: [pd.read_parquet(paths.per_prompt(r)) for r in params.replicates_of(v)] for v in params.run_variants},
        params.run_ensembles,
    )
    scores = [s for s in SCORES if s in next(iter(per_prompt.values()))[0].columns]
    by_seed, by_level = [], []
    for variant, replicates in per_prompt.items():
        for seed, table in zip(seeds, replicates, strict=True):
            by_seed.append({"variant": variant, "seed": seed, **table[scores].mean().to_dict()})
        pooled = pd.concat(replicates, ignore_index=True)
        for level, group in pooled.groupby("level", sort=True):
            by_level.append({"variant": variant, "level": int(level), **group[scores].mean().to_dict()})
    return pd.DataFrame(by_seed), pd.DataFrame(by_level)


def main(argv: list[str]) -> None:
    if len(argv) != 2:
        sys.exit(__doc__)
    study, out = Path(argv[0]), Path(argv[1])
    per_seed, per_level = tables(study)
    out.mkdir(parents=True, exist_ok=True)
    per_seed.to_csv(out / "per_seed.csv", index=False, float_format="%.4f")
    per_level.to_csv(out / "per_level.csv", index=False, float_format="%.4f")
    print(f"wrote {out / 'per_seed.csv'} ({len(per_seed)} rows) and {out / 'per_level.csv'} ({len(per_level)} rows)")


if __name__ == "__main__":
    main(sys.argv[1:])
