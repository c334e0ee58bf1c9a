"""Stage ``evaluate@variant``: pass@k and maj@k curves of a variant's pool, with standard errors."""

from __future__ import annotations

from collections.abc import Sequence

from aligntrain.config import Params
from aligntrain.evaluation.curves import curve_table, per_prompt_scores, strategies_for, summarize
from aligntrain.io import atomic_path, write_json
from aligntrain.paths import StudyPaths
from aligntrain.rollouts.pool import read_pool, read_sampler, write_with_sampler
from aligntrain.stages.prepare import problem_of


def evaluate_pool(params: Params, paths: StudyPaths, variant: str, rows: Sequence[dict], split: str = "test") -> dict:
    """Per-prompt scores and summary metrics of one variant on one split; the curve table on test."""
    problem = problem_of(params)
    gold = {r["id"]: problem.gold_class(r) for r in rows}
    pool = paths.pool(variant, split)
    per_prompt = per_prompt_scores(read_pool(pool), gold, strategies_for(problem.binary_rewards))
    # The sampler record travels with the scores, so that compare sees what drew each variant's pool.
    write_with_sampler(per_prompt, paths.per_prompt(variant, split), read_sampler(pool))
    summary = summarize(per_prompt)
    write_json(paths.metrics(variant, split), summary)
    if split == "test":
        with atomic_path(paths.curve(variant)) as tmp:
            curve_table(per_prompt).to_csv(tmp, index=False)
    return summary
