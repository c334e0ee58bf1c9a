"""The diagnostic stages (docs/math.md §4–5): each writes tables under ``diagnoses/`` and headline
numbers to ``metrics/diagnostics/<name>.json``; the report stage draws the figures.

* ``diagnose@<variant>``: on the variant's test pool — diagonal-approximation efficiency
  (majority vote on verifiable problems, best-of-N on continuous ones), QQ tail fits
  (continuous rewards), greedy-completion confidence (needs the model), reward shift.
* ``oracle_gradient``: a fresh pool of M completions per prompt from one model, the
  oracle advantage of each target strategy, and the cosine of every RL variant's
  group gradient with the oracle gradient on the last transformer block.
* ``synthetic``: the Tang bandit and the TEA Gaussian-tail study (no study inputs).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import pandas as pd

from aligntrain.config import Params
from aligntrain.io import atomic_directory, write_json
from aligntrain.paths import StudyPaths
from aligntrain.rollouts.pool import grade_completions, read_pool
from aligntrain.stages.prepare import problem_of


def efficiency_strategies(binary_rewards: bool) -> tuple[str, ...]:
    """CAT Figure 9 (majority vote) for verifiable problems; best-of-N (E[max], target = the top reward)
    for continuous ones (the paper's per-candidate selection form has no single target per prompt)."""
    return ("majority",) if binary_rewards else ("best_of_n",)


def oracle_targets(binary_rewards: bool) -> tuple[str, ...]:
    """Target strategies of the oracle gradient: TEA's best-of-N, and beyond it pass@N and majority."""
    return ("pass", "majority") if binary_rewards else ("best_of_n",)


def _round(value: float) -> float | None:
    return None if value is None or not math.isfinite(value) else round(float(value), 6)


def summarize_efficiency(table: pd.DataFrame) -> dict[str, dict[str, float | str | None]]:
    """Per strategy and budget: prompts where it is defined, median and share < ½ of D/a_t,
    the median of the paper's a_t/(a_t + C), and majority's tie convention (``ties``, None
    for the strategies without plurality ties) so the numbers say what they were computed under."""
    out: dict[str, dict[str, float | str | None]] = {}
    for (strategy, budget), group in table.groupby(["strategy", "budget"], sort=True):
        defined = group.efficiency.dropna()
        conventions = group["ties"].dropna().unique() if "ties" in group else ()
        out[f"{strategy}@{budget}"] = {
            "prompts": int(defined.size),
            "median_efficiency": _round(defined.median()) if defined.size else None,
            "share_below_half": _round((defined < 0.5).mean()) if defined.size else None,
            "median_paper_ratio": _round(group.paper_ratio.dropna().median()) if defined.size else None,
            "ties": str(conventions[0]) if len(conventions) == 1 else None,
        }
    return out


def majority_weight_comparison(
    pool: pd.DataFrame, gold: dict, budgets: Sequence[int], consensus: float, ties: str = "uniform"
) -> pd.DataFrame:
    """Per prompt and budget N: CAT's majority SFT weight (a function of p_t alone, k = ⌈ρN⌉)
    next to the exact weight p_t·D/P of the prompt's answer distribution (docs/math.md §4),
    P under the tie convention ``ties`` (``aligntrain.diagnostics.forced_vote.TIES``)."""
    from aligntrain.diagnostics.diagonal import training_weight_comparison
    from aligntrain.diagnostics.forced_vote import class_distribution
    from aligntrain.losses import consensus_threshold

    records = []
    for prompt_id, group in pool.groupby("prompt_id", sort=True):
        dist = class_distribution(list(group.answer_class), gold.get(prompt_id))
        if dist.target is None or dist.probs[dist.target] >= 1.0:
            continue  # no gradient to compare: the gold answer is absent, or every sample is it
        for n in budgets:
            w = training_weight_comparison(
                dist.probs,
                n,
                "majority",
                dist.target,
                threshold=consensus_threshold(n, consensus),
                votable=dist.votable,
                correct=dist.correct,
                ties=ties,
            )
            records.append(
                {
                    "prompt_id": prompt_id,
                    "budget": n,
                    "p_target": w.p_target,
                    "diagonal_weight": w.diagonal_weight,
                    "exact_weight": w.exact_weight,
                }
            )
    columns = ["prompt_id", "budget", "p_target", "diagonal_weight", "exact_weight"]
    return pd.DataFrame.from_records(records, columns=columns)


def diagnose_variant(params: Params, paths: StudyPaths, variant: str, test_rows: Sequence[dict]) -> dict:
    """``diagnoses/<variant>/{efficiency,confidence[,tails]}.parquet`` and their headline numbers."""
    from aligntrain.diagnostics.overconfidence import greedy_confidence, reward_distribution, summarize_confidence
    from aligntrain.diagnostics.pool_efficiency import pool_efficiencies
    from aligntrain.diagnostics.tails import pool_tail_fits, summarize_tail_fits
    from aligntrain.models import load_model_and_tokenizer, policy_rows

    problem = problem_of(params)
    binary = problem.binary_rewards
    cfg = params.diagnostics
    pool = read_pool(paths.pool(variant))
    gold = {r["id"]: problem.gold_class(r) for r in test_rows}

    efficiency = pd.concat(
        [
            pool_efficiencies(
                pool,
                cfg.budgets,
                strategy,
                gold if strategy == "majority" else None,
                # only plurality vote has ties; the other strategies refuse the option
                ties=cfg.majority_ties if strategy == "majority" else "uniform",
                seed=params.study.seed,
            )
            for strategy in efficiency_strategies(binary)
        ],
        ignore_index=True,
    )
    model, tokenizer = load_model_and_tokenizer(paths.variant_model(variant), dtype=params.model.dtype)
    confidence = greedy_confidence(
        model,
        tokenizer,
        test_rows,
        problem,
        max_new_tokens=params.rollouts.max_new_tokens,
        batch_size=params.rollouts.batch_size,
        prompts=[r["prompt"] for r in policy_rows(params.model, tokenizer, test_rows)],
    )
    shift = reward_distribution(pool, binary)
    summary: dict = {
        "efficiency": summarize_efficiency(efficiency),
        "confidence": {k: _round(v) for k, v in summarize_confidence(confidence).items()},
        "reward": {
            "mean": _round(shift.mean()),
            **{f"q{int(q * 100):02d}": _round(np.quantile(shift, q)) for q in (0.1, 0.5, 0.9)},
        },
    }
    tables = {"efficiency": efficiency, "confidence": confidence}
    if binary:
        weights = majority_weight_comparison(pool, gold, cfg.budgets, cfg.majority_consensus, cfg.majority_ties)
        tables["weights"] = weights
        ratio = (weights.diagonal_weight / weights.exact_weight).replace([np.inf, -np.inf], np.nan).dropna()
        summary["majority_weight"] = {
            "prompt_budgets": int(len(weights)),
            "median_diagonal_over_exact": _round(ratio.median()) if len(ratio) else None,
            "ties": cfg.majority_ties,
        }
    if not binary:
        tails = pool_tail_fits(pool, cfg.tail_fraction)
        tables["tails"] = tails
        summary["tails"] = {k: _round(v) for k, v in summarize_tail_fits(tails.r2).items()}
    with atomic_directory(paths.diagnostics(variant)) as tmp:
        for name, table in tables.items():
            table.to_parquet(tmp / f"{name}.parquet", index=False)
    write_json(paths.diagnostics_metrics(variant), summary)
    return summary


def _oracle_advantages(target: str, group: pd.DataFrame, gold, n: int) -> np.ndarray:
    from aligntrain.diagnostics import forced_vote, oracle_gradient

    if target == "best_of_n":
        return oracle_gradient.best_of_n_oracle_advantage(group.reward.to_numpy(), n)
    if target == "pass":
        return oracle_gradient.pass_at_n_oracle_advantage(group.correct.to_numpy(dtype=float), n)
    # majority: forced-vote sensitivities of the pool's answer distribution (docs/math.md §4)
    classes = list(group.answer_class)
    dist = forced_vote.class_distribution(classes, gold)
    if dist.target is None:  # the gold answer never appears: every sample loses whatever it votes
        return np.zeros(len(classes))
    # The oracle targets the majority@N the study evaluates (maj@k, docs/math.md §1.2), hence
    # maj@k's uniform tie-break whatever diagnostics.majority_ties says.
    kwargs = {"target": dist.target, "votable": dist.votable, "ties": "uniform"}
    a = forced_vote.forced_vote_sensitivities(dist.probs, n, "majority", **kwargs)
    value = forced_vote.strategy_value(dist.probs, n, "majority", **kwargs)
    return oracle_gradient.forced_vote_oracle_advantage(dist.sample_outcomes, a, value, n)


def oracle_rules(params: Params) -> list[tuple[str, str, dict]]:
    """(variant, rule, options) of the RL variants compared: ``diagnostics.oracle.rules`` or every RL variant."""
    names = params.diagnostics.oracle.rules or [n for n, v in params.variants.items() if v.objective == "rl"]
    out = []
    for name in names:
        options = params.variants[name].options
        out.append((name, options.rule, dict(options.model_extra or {})))
    return out


def oracle_gradient(params: Params, paths: StudyPaths, test_rows: Sequence[dict]) -> dict:
    """``diagnoses/oracle_gradient/{cosines.parquet,summary.csv,batch_*}``: cos(g_rule(n), g*) per target.

    Two views: per prompt (TEA §4.6) and per batch of all the prompts (one batch per
    seed; ``batch_cosines.parquet``, ``batch_summary.csv``, the headline's ``batch``).
    """
    from aligntrain.diagnostics.oracle_gradient import (
        PromptPool,
        oracle_gradient_study,
        rule_label,
        summarize_cosines,
    )
    from aligntrain.models import load_model_and_tokenizer, policy_rows
    from aligntrain.rollouts.generate import SamplingConfig, sample_completions

    cfg = params.diagnostics.oracle
    rules = oracle_rules(params)
    if not rules:  # an SFT-only study: no rule to compare, nothing to sample
        with atomic_directory(paths.diagnostics("oracle_gradient")) as tmp:
            empty = pd.DataFrame(columns=["target", "centered", "variant", "n", "mean"])
            empty.to_csv(tmp / "summary.csv", index=False)
            empty.to_csv(tmp / "batch_summary.csv", index=False)
        headline = {"model": cfg.variant, "rules": 0, "note": "no RL variant in the catalog: nothing compared"}
        write_json(paths.diagnostics_metrics("oracle_gradient"), headline)
        return headline
    problem = problem_of(params)
    rows = list(test_rows[: cfg.prompts])
    model, tokenizer = load_model_and_tokenizer(paths.variant_model(cfg.variant), dtype=params.model.dtype)
    prompts = [r["prompt"] for r in policy_rows(params.model, tokenizer, rows)]
    sampling = SamplingConfig(
        temperature=params.rollouts.temperature,
        top_p=params.rollouts.top_p,
        max_new_tokens=params.rollouts.max_new_tokens,
    )
    completions = sample_completions(
        model,
        tokenizer,
        prompts,
        cfg.samples_per_prompt,
        sampling,
        batch_size=params.rollouts.batch_size,
        seed=params.study.seed + 7919,  # not the evaluation pool's draws
    )
    graded = list(zip(completions, grade_completions(rows, completions, problem), strict=True))
    pools = []
    for p, row in enumerate(rows):
        mine = [c for c, _ in graded if c.prompt_index == p]
        grades = [grade for c, grade in graded if c.prompt_index == p]
        group = pd.DataFrame({column: [g[column] for g in grades] for column in ("reward", "correct", "answer_class")})
        gold = problem.gold_class(row)
        advantages = {t: _oracle_advantages(t, group, gold, cfg.budget) for t in oracle_targets(problem.binary_rewards)}
        pools.append(
            PromptPool(
                prompt_id=row["id"],
                prompt=prompts[p],
                completion_ids=[c.token_ids for c in mine],
                rewards=group.reward.to_numpy(dtype=float),
                oracle_advantages=advantages,
                answers=list(group.answer_class),
                logps=np.array([c.logp for c in mine]),
            )
        )
    model.eval()
    study = oracle_gradient_study(
        model,
        tokenizer,
        pools,
        [(rule, options) for _, rule, options in rules],
        cfg.group_sizes,
        list(range(cfg.seeds)),
        center_scores=(False, True),
    )
    labels = {rule_label(rule, options): name for name, rule, options in rules}
    cosines, batch = study.per_prompt, study.batch
    cosines.insert(0, "variant", cosines.rule.map(labels))
    batch.insert(0, "variant", batch.rule.map(labels))
    summary = summarize_cosines(cosines, by=("target", "centered", "variant", "n"))
    batch_summary = summarize_cosines(batch, by=("target", "centered", "variant", "n"))
    success = {str(pool.prompt_id): float(np.mean(pool.rewards)) for pool in pools}
    with atomic_directory(paths.diagnostics("oracle_gradient")) as tmp:
        cosines.to_parquet(tmp / "cosines.parquet", index=False)
        summary.to_csv(tmp / "summary.csv", index=False)
        batch.to_parquet(tmp / "batch_cosines.parquet", index=False)
        batch_summary.to_csv(tmp / "batch_summary.csv", index=False)
    headline: dict = {
        "model": cfg.variant,
        "prompts": len(rows),
        "pool": cfg.samples_per_prompt,
        "budget": cfg.budget,
        "mean_reward": _round(float(np.mean(list(success.values())))),
    }
    raw = summary[~summary.centered]
    for (target, variant, n), r in raw.set_index(["target", "variant", "n"]).iterrows():
        headline.setdefault(target, {}).setdefault(variant, {})[f"n{n}"] = _round(r["mean"])
    # The batch of all prompts (one per seed): where weights across prompts show.
    batch_raw = batch_summary[~batch_summary.centered]
    for (target, variant, n), r in batch_raw.set_index(["target", "variant", "n"]).iterrows():
        headline.setdefault("batch", {}).setdefault(target, {}).setdefault(variant, {})[f"n{n}"] = _round(r["mean"])
    write_json(paths.diagnostics_metrics("oracle_gradient"), headline)
    return headline


def synthetic_checks(params: Params, paths: StudyPaths) -> dict:
    """``diagnoses/synthetic/{bandit,tea_gaussian}.csv``: the checks with known answers (docs/math.md §5)."""
    from aligntrain.diagnostics.synthetic import average_over_seeds, run_tang_bandit, run_tea_gaussian

    cfg = params.diagnostics.synthetic
    seed = params.study.seed
    bandit = run_tang_bandit(
        num_actions=cfg.bandit_actions,
        k=cfg.bandit_k,
        learning_rate=cfg.bandit_learning_rate,
        steps=cfg.bandit_steps,
        seeds=range(seed, seed + cfg.bandit_seeds),
    )
    gaussian = run_tea_gaussian(
        group_sizes=cfg.tea_group_sizes,
        repetitions=cfg.tea_repetitions,
        alpha=cfg.tea_alpha,
        budget=cfg.tea_budget,
        seed=seed,
    )
    with atomic_directory(paths.diagnostics("synthetic")) as tmp:
        bandit.to_csv(tmp / "bandit.csv", index=False)
        gaussian.to_csv(tmp / "tea_gaussian.csv", index=False)
    averaged = average_over_seeds(bandit)
    last = averaged[averaged.step == averaged.step.max()]
    summary: dict = {
        "bandit_final": {
            r.method: {m: _round(r[m]) for m in ("mean_reward", "pass_at_k", "kl")} for _, r in last.iterrows()
        },
        "tea_relative_bias": {f"{r.estimator}@n{int(r.n)}": _round(r.rel_bias_norm) for _, r in gaussian.iterrows()},
    }
    write_json(paths.diagnostics_metrics("synthetic"), summary)
    return summary
