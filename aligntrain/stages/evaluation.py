"""Stages ``rollouts@variant``, ``evaluate@variant`` and ``compare``.

rollouts: M sampled completions per test prompt, graded into a pool.
evaluate: pass@k and maj@k curves of the pool with standard errors.
compare: all variants side by side, paired against the baseline, one plot.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

import pandas as pd

from aligntrain.config import Params
from aligntrain.evaluation.compare import comparison_table, markdown_table, plot_scaling
from aligntrain.evaluation.curves import curve_table, per_prompt_scores, strategies_for, summarize
from aligntrain.io import atomic_path, write_json, write_text
from aligntrain.paths import StudyPaths
from aligntrain.problems import get_problem
from aligntrain.rollouts.pool import build_pool, read_pool, write_pool


def generate_pool(params: Params, paths: StudyPaths, variant: str, test_rows: Sequence[dict]) -> dict:
    """Sample, grade and write ``pools/<variant>.parquet``; returns throughput metrics."""
    # Imported here so that evaluate and compare, which only read pools, never load torch models.
    from aligntrain.models import load_model_and_tokenizer
    from aligntrain.rollouts.generate import SamplingConfig, sample_completions

    cfg = params.rollouts
    model, tokenizer = load_model_and_tokenizer(paths.variant_model(variant))
    check_prompt_lengths(
        test_rows, tokenizer, context=model.config.max_position_embeddings, max_new_tokens=cfg.max_new_tokens
    )
    start = time.perf_counter()
    completions = sample_completions(
        model,
        tokenizer,
        [r["prompt"] for r in test_rows],
        cfg.samples_per_prompt,
        SamplingConfig(temperature=cfg.temperature, top_p=cfg.top_p, max_new_tokens=cfg.max_new_tokens),
        batch_size=cfg.batch_size,
        seed=params.study.seed,
    )
    seconds = time.perf_counter() - start
    pool = build_pool(test_rows, completions, get_problem(params.problem.name))
    write_pool(pool, paths.pool(variant))
    tokens = int(pool.num_tokens.sum())
    return {
        "completions": float(len(pool)),
        "tokens_generated": float(tokens),
        "generation_seconds": seconds,
        "tokens_per_second": tokens / seconds,
        "unfinished_fraction": float(1 - pool.finished.mean()),
        "mean_reward": float(pool.reward.mean()),
    }


def check_prompt_lengths(rows: Sequence[dict], tokenizer, *, context: int, max_new_tokens: int) -> None:
    """Every prompt leaves room for ``max_new_tokens`` in the model's context; else name the row.

    A prompt that does not fit would be truncated silently, or make batched generation
    allocate for a sequence the model cannot attend over (a 1 MB prompt ran out of memory).
    """
    limit = context - max_new_tokens
    for row in rows:
        length = len(tokenizer(row["prompt"], add_special_tokens=True)["input_ids"])
        if length > limit:
            raise ValueError(
                f"row {row.get('id')!r}: its prompt is {length} tokens, but the model's context of {context} tokens "
                f"minus rollouts.max_new_tokens = {max_new_tokens} leaves {limit}"
            )


def evaluate_pool(params: Params, paths: StudyPaths, variant: str, test_rows: Sequence[dict]) -> dict:
    """Per-prompt scores, summary metrics and curve tables of one variant."""
    problem = get_problem(params.problem.name)
    gold = {r["id"]: problem.gold_class(r) for r in test_rows}
    per_prompt = per_prompt_scores(read_pool(paths.pool(variant)), gold, strategies_for(problem.binary_rewards))
    with atomic_path(paths.per_prompt(variant)) as tmp:
        per_prompt.to_parquet(tmp, index=False)
    summary = summarize(per_prompt)
    write_json(paths.metrics(variant), summary)
    with atomic_path(paths.curve(variant)) as tmp:
        curve_table(per_prompt).to_csv(tmp, index=False)
    return summary


def compare_variants(params: Params, paths: StudyPaths) -> dict:
    """``reports/compare.{md,csv,json}`` and ``reports/scaling.png``."""
    per_prompt = {v: pd.read_parquet(paths.per_prompt(v)) for v in params.run_variants}
    baseline = params.compare.baseline
    table = comparison_table(
        per_prompt,
        baseline,
        n_resamples=params.evaluate.bootstrap_resamples,
        confidence=params.evaluate.confidence,
        seed=params.study.seed,
    )
    reports = paths.reports
    with atomic_path(reports / "compare.csv") as tmp:
        table.to_csv(tmp, index=False)
    level = int(100 * params.evaluate.confidence)
    body = [
        f"# Study `{params.study.name}`: variants compared on {len(next(iter(per_prompt.values())))} test prompts",
        "",
        f"mean ± standard error over prompts; Δ = paired difference to the baseline `{baseline}` "
        f"with its {level}% prompt-bootstrap interval ({params.evaluate.bootstrap_resamples} resamples).",
    ]
    for strategy in sorted(table.strategy.unique()):
        body += ["", f"## {strategy}@k", "", markdown_table(table, strategy, baseline)]
    write_text(reports / "compare.md", "\n".join(body) + "\n")
    plot_scaling(table, reports / "scaling.png", f"{params.study.name}: scaling curves (95% bands)")
    # Flat metrics for `dvc metrics show`: each variant's delta to the baseline at the extremes of k.
    summary: dict[str, dict[str, float]] = {}
    for (variant, strategy), group in table.groupby(["variant", "strategy"]):
        for k in (group.k.min(), group.k.max()):
            r = group[group.k == k].iloc[0]
            summary.setdefault(variant, {})[f"{strategy}@{k}"] = round(float(r["mean"]), 6)
            if variant != baseline:
                summary[variant][f"{strategy}@{k}_delta"] = round(float(r["delta"]), 6)
    write_json(reports / "compare.json", summary)
    return summary
