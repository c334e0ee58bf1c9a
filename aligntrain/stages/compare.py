"""Stage ``compare``: all variants side by side, paired against the baseline; the primary endpoint first."""

from __future__ import annotations

import logging

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
    with_ensembles,
)
from aligntrain.io import atomic_path, write_json, write_text
from aligntrain.paths import StudyPaths
from aligntrain.rollouts.pool import read_sampler

logger = logging.getLogger(__name__)


def compare_variants(params: Params, paths: StudyPaths) -> dict:
    """``reports/compare.{md,csv,json}`` and ``reports/scaling.png``: the primary endpoint first, then the family."""
    per_split = {  # every variant's tables, one per seed (study.seed, then study.seeds), then the ensembles'
        split: with_ensembles(
            {
                v: [pd.read_parquet(paths.per_prompt(r, split)) for r in params.replicates_of(v)]
                for v in params.run_variants
            },
            params.run_ensembles,
        )
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
