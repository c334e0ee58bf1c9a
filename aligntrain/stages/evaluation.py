"""Stages ``rollouts@variant``, ``evaluate@variant`` and ``compare``.

rollouts: M sampled completions per test prompt, graded into a pool.
evaluate: pass@k and maj@k curves of the pool with standard errors.
compare: all variants side by side, paired against the baseline, one plot.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence

import pandas as pd

from aligntrain.config import Params
from aligntrain.evaluation.compare import (
    baseline_rows,
    comparison_table,
    family_sentence,
    family_size,
    markdown_table,
    plot_scaling,
    primary_paragraph,
    prompts_per_split,
)
from aligntrain.evaluation.curves import curve_table, per_prompt_scores, strategies_for, summarize
from aligntrain.io import atomic_path, write_json, write_text
from aligntrain.paths import StudyPaths
from aligntrain.rollouts.pool import build_pool, read_pool, read_sampler, write_pool, write_with_sampler
from aligntrain.stages.prepare import problem_of

logger = logging.getLogger(__name__)


def generate_pool(
    params: Params, paths: StudyPaths, variant: str, test_rows: Sequence[dict], split: str = "test"
) -> dict:
    """Sample, grade and write the variant's pool of one split (``pools/<variant>.parquet`` for test,
    ``pools/<split>/<variant>.parquet`` for another); returns throughput metrics.

    Prompts are rendered as the policy was trained on them (``model.chat_template``), the
    model is loaded in ``model.dtype``, and ``rollouts.backend`` samples (docs/models.md).
    """
    # Imported here so that evaluate and compare, which only read pools, never load torch models.
    from transformers import AutoConfig, AutoTokenizer

    from aligntrain.models import policy_rows
    from aligntrain.rollouts.backends import report_logp_gap
    from aligntrain.rollouts.generate import SamplingConfig

    cfg = params.rollouts
    model_dir = paths.variant_model(variant)
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    rows = policy_rows(params.model, tokenizer, test_rows)
    context = AutoConfig.from_pretrained(model_dir).max_position_embeddings
    check_prompt_lengths(rows, tokenizer, context=context, max_new_tokens=cfg.max_new_tokens)
    start = time.perf_counter()
    sampled = cfg.backend.sample(
        model_dir,
        [r["prompt"] for r in rows],
        [r["id"] for r in rows],
        cfg.samples_per_prompt,
        SamplingConfig(temperature=cfg.temperature, top_p=cfg.top_p, max_new_tokens=cfg.max_new_tokens),
        dtype=params.model.dtype,
        batch_size=cfg.batch_size,
        seed=params.study.seed,
    )
    seconds = time.perf_counter() - start
    pool = build_pool(test_rows, sampled.completions, problem_of(params), sampled.sampler_logps)
    write_pool(pool, paths.pool(variant, split), sampled.record.as_dict())
    tokens = int(pool.num_tokens.sum())
    gap = report_logp_gap(sampled.completions, sampled.sampler_logps)
    return {
        "completions": float(len(pool)),
        "tokens_generated": float(tokens),
        "generation_seconds": seconds,
        "tokens_per_second": tokens / seconds,
        "unfinished_fraction": float(1 - pool.finished.mean()),
        "mean_reward": float(pool.reward.mean()),
        "sampler_logp_gap_mean": gap["mean"],
        "sampler_logp_gap_max": gap["max"],
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


def compare_variants(params: Params, paths: StudyPaths) -> dict:
    """``reports/compare.{md,csv,json}`` and ``reports/scaling.png``: the primary endpoint first, then the family."""
    per_split = {  # every variant's tables, one per seed (study.seed, then study.seeds)
        split: {
            v: [pd.read_parquet(paths.per_prompt(r, split)) for r in params.replicates_of(v)]
            for v in params.run_variants
        }
        for split in params.rollouts.splits
    }
    mixed = mixed_samplers({v: read_sampler(paths.per_prompt(v)) for v in params.run_variants})
    baseline, confidence = params.compare.baseline, params.evaluate.confidence
    table = comparison_table(
        per_split,
        baseline,
        n_resamples=params.evaluate.bootstrap_resamples,
        confidence=confidence,
        seed=params.study.seed,
        primary=params.primary_endpoint,
    )
    reports = paths.reports
    with atomic_path(reports / "compare.csv") as tmp:
        table.to_csv(tmp, index=False)
    level = int(round(100 * confidence))
    first = table.iloc[0]
    prompts = prompts_per_split(table)
    body = [
        f"# Study `{params.study.name}`: variants compared on {prompts} prompts, {first.seeds} "
        f"seed{'s' if first.seeds != 1 else ''}",
        "",
        f"mean ± standard error over prompts; Δ = paired difference to the baseline `{baseline}` with its "
        f"{level}% seed × prompt bootstrap interval ({first.resamples} resamples; docs/evidence.md).",
    ]
    if mixed:
        body += ["", f"**Pools drawn by different samplers** (not one sampling procedure): {mixed}."]
    body += ["", "## Primary endpoint", ""]
    body.append(primary_paragraph(params, table))
    body += [
        "",
        f"## The other comparisons ({family_size(table)}, Holm-corrected)",
        "",
        family_sentence(table, confidence),
    ]
    for split in params.rollouts.splits:
        for strategy in sorted(table.strategy.unique()):
            body += ["", f"### {strategy}@k, {split} split", "", markdown_table(table, strategy, baseline, split)]
    write_text(reports / "compare.md", "\n".join(body) + "\n")
    plot_scaling(table, reports / "scaling.png", f"{params.study.name}: scaling curves (95% bands)")
    # Flat metrics for `dvc metrics show`: the primary endpoint, and each variant's delta to the
    # baseline at the extremes of k.
    summary: dict[str, dict[str, float]] = {}
    for r in table[table.role == "primary"].itertuples():
        summary["primary"] = {
            "delta": round(float(r.delta), 6),
            "delta_low": round(float(r.delta_low), 6),
            "delta_high": round(float(r.delta_high), 6),
            "p_value": round(float(r.p_value), 6),
        }
    for (variant, strategy), group in baseline_rows(table).groupby(["variant", "strategy"]):
        for k in (group.k.min(), group.k.max()):
            r = group[group.k == k].iloc[0]
            summary.setdefault(variant, {})[f"{strategy}@{k}"] = round(float(r["mean"]), 6)
            if variant != baseline:
                summary[variant][f"{strategy}@{k}_delta"] = round(float(r["delta"]), 6)
    write_json(reports / "compare.json", summary)
    return summary


def mixed_samplers(samplers: dict[str, dict[str, str] | None]) -> str:
    """ "" when every variant's pool came from one backend; else which variant used which (and a warning logged)."""
    kinds = {v: f"{s['backend']} ({s['version']}, {s['dtype']})" if s else "unrecorded" for v, s in samplers.items()}
    if len({k.split(" ")[0] for k in kinds.values()}) <= 1:
        return ""
    said = "; ".join(f"{v}: {k}" for v, k in kinds.items())
    logger.warning("compare: the variants' pools come from different generation backends: %s", said)
    return said
