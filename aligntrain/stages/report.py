"""The study report: ``reports/index.md`` and ``reports/figures/``, rebuilt from the stage outputs.

One page a researcher opens after ``dvc repro``: the setup, every variant's scaling
curves per strategy with intervals, paired comparisons and win/tie/loss against the
baseline, and each diagnostic with a sentence on what it shows. Every number on the
page is read from the study's outputs (``reports/compare.csv``,
``metrics/diagnostics/*.json``, ``diagnostics/``); the sentences state the measured
numbers and compare them with the papers' where the two are comparable, whatever
they show.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence

import numpy as np
import pandas as pd

from aligntrain.config import Params
from aligntrain.evaluation.compare import (
    baseline_rows,
    family_sentence,
    family_size,
    primary_paragraph,
    prompts_per_split,
)
from aligntrain.io import write_text
from aligntrain.paths import StudyPaths
from aligntrain.rollouts.pool import read_pool
from aligntrain.stages.prepare import problem_of


def _fmt(value: float | None, digits: int = 3) -> str:
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "—"
    return f"{value:.{digits}f}"


def _table(header: Sequence[str], rows: Sequence[Sequence[object]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return lines


def _json(path) -> dict:
    return json.loads(path.read_text())


#: What each tie convention of majority vote means (docs/math.md §4.1), as the report states it.
_TIES_READ = {
    "uniform": "ties broken uniformly at random, a tie of the gold answer with τ rivals counting 1/(1+τ) as in "
    "the maj@k evaluated above",
    "strict": "a tie is a loss, the gold answer needing strictly more votes than every rival (the CAT authors' "
    "convention)",
}


def _ties_sentence(conventions: set) -> str:
    """Which tie convention the diagnose stage's majority numbers were computed under (its outputs say)."""
    known = sorted(c for c in conventions if c is not None)
    if not known:
        return "Majority vote's tie convention: not recorded (diagnoses written before the option). "
    named = "; ".join(f"`{c}`: {_TIES_READ.get(c, c)}" for c in known)
    return (
        f"Majority vote here, `diagnostics.majority_ties` = {named}. docs/math.md §4.1 gives both conventions; "
        "the strict one usually gives the larger D/a_t. "
    )


def _variant_options(params: Params, name: str) -> str:
    variant = params.variants[name]
    extra = variant.model_extra or {}
    return ", ".join(f"{k}={v}" for k, v in extra.items()) or "—"


# --------------------------------------------------------------------------- sections


def _model_phrase(params: Params) -> str:
    """The study's base model in words: the tiny Llama pretrained here, or the pretrained model (and LoRA)."""
    m = params.model
    if m.base_model is None:
        return f"a Llama of width {m.hidden_size}, {m.num_layers} layers, pretrained {params.pretrain.steps} steps"
    phrase = f"`{m.base_model}`" + (f" at revision {m.revision[:12]}" if m.revision else "") + f" ({m.dtype})"
    if m.lora is not None:
        base = "a 4-bit NF4 base (QLoRA)" if m.lora.quantization == "nf4" else "the base"
        targets = m.lora.target_modules if isinstance(m.lora.target_modules, str) else ", ".join(m.lora.target_modules)
        phrase += f" with LoRA r = {m.lora.r}, α = {m.lora.alpha:g} on {targets} over {base}"
    return phrase


def setup_section(params: Params) -> list[str]:
    p = params
    rl = p.rl
    has_rl = any(p.variants[v].objective == "rl" for v in p.run_variants)
    # RL variants with a group size of their own (TEA Table 4): the same completions a step, fewer prompts.
    own_n = {
        v: p.variants[v].options.num_generations
        for v in p.run_variants
        if p.variants[v].objective == "rl" and p.variants[v].options.num_generations not in (None, rl.num_generations)
    }
    lines = [
        "## Setup",
        "",
        f"Problem `{p.problem.name}` (levels {p.problem.levels}; {p.problem.train_size} training, "
        f"{p.problem.test_size} test prompts); {_model_phrase(p)}, CE warm-up {p.warmup.steps} steps. "
        f"SFT variants: {p.train.steps} steps of {p.train.batch_size} at lr {p.train.learning_rate:g}."
        + (
            f" RL variants: {rl.steps} steps of {rl.batch_size} completions ({rl.batch_size // rl.num_generations} "
            f"prompts × n = {rl.num_generations}) at lr {rl.learning_rate:g}, β = {rl.beta:g}, "
            f"temperature {rl.temperature:g}."
            + "".join(f" `{v}`: n = {n} ({rl.batch_size // n} prompts a step)." for v, n in own_n.items())
            if has_rl
            else ""
        ),
        f"Evaluation: {p.rollouts.samples_per_prompt} samples per test prompt at temperature "
        f"{p.rollouts.temperature:g}; unbiased estimators over the pool (docs/math.md §1); intervals are "
        f"{int(100 * p.evaluate.confidence)}% paired "
        "seed × prompt bootstrap intervals (docs/evidence.md).",
        "",
    ]
    rows = [(f"`{name}`", params.variants[name].objective, _variant_options(params, name)) for name in p.run_variants]
    return lines + _table(["variant", "objective", "options"], rows) + [""]


def scaling_section(params: Params, table: pd.DataFrame, family: int, split: str = "test") -> list[str]:
    """The comparisons against the baseline on one split (``table``: its rows), ``family`` the size of
    the whole corrected family."""
    baseline = params.compare.baseline
    level = int(100 * params.evaluate.confidence)
    if split == "test":
        lines = ["## Scaling curves and paired comparisons", "", "![scaling curves](scaling.png)", ""]
    else:
        lines = [
            f"## Held-out prompts: the {split} split",
            "",
            "Prompts no stage trains on (the monitor only measures on them).",
            "",
        ]
    lines += [
        f"Mean over {split} prompts (± standard error); Δ: paired difference to `{baseline}` with its {level}% "
        "interval; W/T/L: prompts where the variant scores above / equal to / below the baseline. "
        "Full tables: [compare.md](compare.md).",
    ]
    for strategy, sub in table.groupby("strategy", sort=True):
        ks = sorted(sub.k.unique())
        shown = sorted({ks[0], ks[min(len(ks) - 1, len(ks) // 2)], ks[-1]})
        rows = []
        for variant in params.run_variants:
            cells = [f"`{variant}`"]
            for k in shown:
                r = sub[(sub.variant == variant) & (sub.k == k)]
                if r.empty:
                    cells += ["—", "—"]
                    continue
                r = r.iloc[0]
                cells.append(f"{r['mean']:.3f} ± {r.se:.3f}")
                cells.append(
                    "baseline"
                    if variant == baseline
                    else f"{r.delta:+.3f} [{r.delta_low:+.3f}, {r.delta_high:+.3f}] {r.wins}/{r.ties}/{r.losses}"
                )
            rows.append(cells)
        header = ["variant"] + [h for k in shown for h in (f"{strategy}@{k}", f"Δ@{k} [interval] W/T/L")]
        lines += ["", f"### {strategy}@k", ""] + _table(header, rows)
        lines += ["", _scaling_sentence(params, sub, ks[0], ks[-1], family)]
    return lines + [""]


def _scaling_sentence(params: Params, sub: pd.DataFrame, k_min: int, k_max: int, family: int) -> str:
    """Which comparisons at the smallest and largest k hold after Holm's correction, each with its interval."""
    baseline, alpha = params.compare.baseline, 1.0 - params.evaluate.confidence
    parts = []
    for k in (k_min, k_max):
        at = sub[(sub.k == k) & (sub.role == "family") & (sub.p_holm <= alpha)]
        held = [
            f"`{r.variant}` {'above' if r.delta > 0 else 'below'} it ({r.delta:+.3f} [{r.delta_low:+.3f}, "
            f"{r.delta_high:+.3f}], p̃ {r.p_holm:.3g})"
            for r in at.itertuples()
        ]
        parts.append(f"at k = {k}, {', '.join(held) if held else 'no variant differs from it'}")
    corrected = f"with Holm's correction over the family of {family} comparisons"
    return f"Read: against `{baseline}`, {corrected}: {'; '.join(parts)}."


def primary_section(params: Params, table: pd.DataFrame) -> list[str]:
    """The endpoint fixed before the run, first, with its interval; then how the rest was corrected."""
    confidence = params.evaluate.confidence
    first = table.iloc[0]
    said = primary_paragraph(params, table)
    prompts = prompts_per_split(table)
    return [
        "## Primary endpoint",
        "",
        f"{first.seeds} seed{'s' if first.seeds != 1 else ''}; {prompts} prompts (docs/evidence.md). {said}",
        "",
        family_sentence(table, confidence),
        "",
    ]


def confidence_section(params: Params, paths: StudyPaths, figures: dict[str, str]) -> list[str]:
    from aligntrain.diagnostics.overconfidence import plot_confidence, plot_reward_shift, reward_distribution

    binary = problem_of(params).binary_rewards
    frames, shifts, rows = {}, {}, []
    wrong: list[str] = []  # counts, not a ranking: a few prompts either way is no finding (one seed, no interval)
    for v in params.run_variants:
        frames[v] = pd.read_parquet(paths.diagnostics(v) / "confidence.parquet")
        shifts[v] = reward_distribution(read_pool(paths.pool(v)), binary)
        c = _json(paths.diagnostics_metrics(v))["confidence"]
        if c.get("confidently_wrong") is not None:
            wrong.append(f"`{v}` {round(c['confidently_wrong'] * len(frames[v]))}")
        rows.append(
            (
                f"`{v}`",
                _fmt(c["greedy_accuracy"]),
                _fmt(c["median_prob_correct"]),
                _fmt(c["median_prob_wrong"]),
                _fmt(c["confidently_wrong"]),
                _fmt(c.get("median_token_prob")),
            )
        )
    plot_confidence(frames, paths.figures / "confidence.png")
    plot_reward_shift(shifts, paths.figures / "reward_shift.png", binary)
    figures["confidence"] = "figures/confidence.png"
    prompts = len(next(iter(frames.values()))) if frames else 0
    return [
        "## Overconfidence (DCO Fig. 1) and reward shift (TEA Fig. 3b)",
        "",
        "![greedy confidence](figures/confidence.png)",
        "",
        *_table(
            [
                "variant",
                "greedy accuracy",
                "median π(greedy) correct",
                "median π(greedy) wrong",
                "wrong with π ≥ 0.5",
                "median per-token π",
            ],
            rows,
        ),
        "",
        f"Read: the probability the model puts on its own greedy completion, for prompts it gets right and wrong. "
        f"A model that is confidently wrong has little mass left for the other N − 1 samples of pass@N. Greedy "
        f"answers wrong with π ≥ 0.5, of {prompts} test prompts: {', '.join(wrong) or 'none measured'} (counts with "
        "no interval: a difference of a few prompts is not a finding). The per-token "
        "probability exp(ℓ/T) compares models whose completions are long (a 50-residue sequence has a tiny "
        "probability however sure each step is).",
        "",
        "![reward shift](figures/reward_shift.png)",
        "",
        "Read: each model's distribution of "
        + (
            "per-prompt success rates p̂ on the test pool (binary rewards); a strategy-aware model moves mass "
            "off p̂ = 0 (more prompts solved at least sometimes) even if it lowers the top."
            if binary
            else "test-pool rewards; TEA's Fig. 3b shows strategy-aware RL moving the upper tail right."
        ),
        "",
    ]


def efficiency_section(params: Params, paths: StudyPaths) -> list[str]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from aligntrain.io import atomic_path

    tables = {v: pd.read_parquet(paths.diagnostics(v) / "efficiency.parquet") for v in params.run_variants}
    strategies = sorted(next(iter(tables.values())).strategy.unique())
    budgets = params.diagnostics.budgets
    fig, axes = plt.subplots(len(strategies), 2, figsize=(10, 3.2 * len(strategies)), squeeze=False)
    rows = []
    for s_index, strategy in enumerate(strategies):
        panels = (("efficiency", "D/a_t (docs/math.md §4)"), ("paper_ratio", "a_t/(a_t+C) (CAT Fig. 9)"))
        for col, (column, label) in enumerate(panels):
            ax = axes[s_index, col]
            positions = np.arange(len(budgets))
            width = 0.8 / len(tables)
            for v_index, (variant, table) in enumerate(tables.items()):
                sub = table[table.strategy == strategy]
                data = [sub[sub.budget == b][column].dropna().to_numpy() for b in budgets]
                data = [d if d.size else np.array([np.nan]) for d in data]
                box = ax.boxplot(
                    data, positions=positions + v_index * width, widths=width * 0.9, patch_artist=True, showfliers=False
                )
                for patch in box["boxes"]:
                    patch.set_facecolor(f"C{v_index}")
                    patch.set_alpha(0.5)
                ax.plot([], [], color=f"C{v_index}", label=variant)
            ax.set_xticks(positions + 0.4 - width / 2, [str(b) for b in budgets])
            ax.set_xlabel("budget N")
            ax.set_title(f"{strategy}: {label}", fontsize=9)
            ax.axhline(0.5, color="grey", lw=0.8, ls="--")
            ax.set_ylim(-0.02, 1.02)
        axes[s_index, 0].legend(fontsize=7)
    fig.tight_layout()
    with atomic_path(paths.figures / "efficiency.png") as tmp:
        fig.savefig(tmp, format="png", dpi=110)
    plt.close(fig)
    for variant in params.run_variants:
        eff = _json(paths.diagnostics_metrics(variant))["efficiency"]
        for key, e in eff.items():
            rows.append(
                (
                    f"`{variant}`",
                    key,
                    e["prompts"],
                    _fmt(e["median_efficiency"]),
                    _fmt(e["share_below_half"]),
                    _fmt(e["median_paper_ratio"]),
                )
            )
    first = _json(paths.diagnostics_metrics(params.run_variants[0]))["efficiency"]
    largest = max(first, key=lambda k: int(k.split("@")[1]))
    e = first[largest]
    conventions = {
        e.get("ties")
        for v in params.run_variants
        for k, e in _json(paths.diagnostics_metrics(v))["efficiency"].items()
        if k.startswith("majority@")
    }
    return [
        "## Diagonal-approximation efficiency (CAT Figs. 9–10, docs/math.md §4)",
        "",
        "![efficiency](figures/efficiency.png)",
        "",
        *_table(["variant", "strategy@N", "prompts", "median D/a_t", "share D/a_t < ½", "median a_t/(a_t+C)"], rows),
        "",
        "Read: on each test prompt's empirical answer distribution, D is the exact derivative of the strategy's "
        "success under proportional decay and a_t the diagonal (forced-vote) term the training weights use. "
        + (_ties_sentence(conventions) if conventions else "")
        + (
            f"For `{params.run_variants[0]}` at {largest}, the median D/a_t is {_fmt(e['median_efficiency'])} and "
            f"{_fmt(e['share_below_half'])} of the {e['prompts']} prompts where it is defined fall below ½ — the "
            "diagonal term over-states the real gradient there. "
            if e["prompts"]
            else f"For `{params.run_variants[0]}` at {largest} no prompt has a defined efficiency. "
        )
        + "CAT's saved ratio a_t/(a_t+C) lies in [½, 1] by construction, so its '≥ 50% efficiency' cannot fail; "
        "docs/math.md §4 measured D/a_t < ½ on 19/36/40/45% of random distributions at N = 4/8/16/32. Prompts whose "
        "gold answer never appears in the pool (or that are always right) have no defined efficiency and are excluded."
        + (
            ""
            if problem_of(params).binary_rewards
            else " For best-of-N (target: the top reward, value E[max]) D/a_t is not shift-invariant: adding c to "
            "every reward adds N·c to a_t and leaves D unchanged, so read it across variants of one problem only."
        ),
        "",
    ]


def weight_section(params: Params, paths: StudyPaths) -> list[str]:
    """CAT's majority SFT weight (a function of p_t alone) against the exact weight on real distributions."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from aligntrain.io import atomic_path

    variant = params.run_variants[0]
    path = paths.diagnostics(variant) / "weights.parquet"
    if not path.exists():
        return []
    weights = pd.read_parquet(path)
    if weights.empty:
        return [
            f"### The majority SFT weight against the exact weight (`{variant}`)",
            "",
            "No test prompt has the gold answer in its pool alongside other answers: nothing to compare.",
            "",
        ]
    rho = params.diagnostics.majority_consensus
    ties = _json(paths.diagnostics_metrics(variant)).get("majority_weight", {}).get("ties")
    budgets = sorted(weights.budget.unique())
    fig, axes = plt.subplots(1, len(budgets), figsize=(3.2 * len(budgets), 3.2), squeeze=False, sharey=True)
    rows = []
    for ax, n in zip(axes[0], budgets):
        sub = weights[weights.budget == n]
        ax.scatter(sub.p_target, sub.exact_weight, s=8, alpha=0.6, label="exact p·D/P")
        order = sub.sort_values("p_target")
        ax.plot(order.p_target, order.diagonal_weight, color="C1", lw=1.2, label="CAT weight")
        ax.set_xlabel("p_t (gold share of the pool)")
        ax.set_title(f"N = {n}, k = ⌈{rho:g}N⌉", fontsize=9)
        ax.set_yscale("symlog", linthresh=1e-3)
        ratio = (sub.diagonal_weight / sub.exact_weight).replace([np.inf, -np.inf], np.nan).dropna()
        rank = sub[["diagonal_weight", "exact_weight"]].corr(method="spearman").iloc[0, 1] if len(sub) > 2 else np.nan
        rows.append((n, len(sub), _fmt(ratio.median()), _fmt(rank)))
    axes[0, 0].set_ylabel("weight on ∇(−ℓ)")
    axes[0, 0].legend(fontsize=7)
    fig.tight_layout()
    with atomic_path(paths.figures / "majority_weights.png") as tmp:
        fig.savefig(tmp, format="png", dpi=110)
    plt.close(fig)
    return [
        f"### The majority SFT weight against the exact weight (`{variant}`)",
        "",
        "![majority weights](figures/majority_weights.png)",
        "",
        *_table(["N", "prompts", "median CAT weight / exact weight", "Spearman ρ"], rows),
        "",
        "Read: CAT's majority weight depends on p_t only (how often the gold answer is sampled); the exact "
        "weight p_t·D/P of −log P under proportional decay also depends on how the wrong answers split. "
        + _ties_sentence({ties})
        + "A ratio far from 1 or a low rank correlation means the SFT objective pushes prompts in a different "
        "order than the vote it targets.",
        "",
    ]


def tails_section(params: Params, paths: StudyPaths) -> list[str]:
    from aligntrain.diagnostics.tails import plot_qq_tails

    if problem_of(params).binary_rewards:
        return [
            "## QQ tail fits (TEA Table 14)",
            "",
            f"Not applicable: `{params.problem.name}` has binary rewards, whose upper tail is a point mass. "
            "The hydro study (pipelines/hydro) reports them.",
            "",
        ]
    rows = []
    for v in params.run_variants:
        t = _json(paths.diagnostics_metrics(v))["tails"]
        quantiles = (_fmt(t["median"]), _fmt(t["mean"]), _fmt(t["p10"]), _fmt(t["share_ge_095"]))
        rows.append((f"`{v}`", int(t["prompts"]), *quantiles))
    first = params.run_variants[0]
    fits = pd.read_parquet(paths.diagnostics(first) / "tails.parquet")
    if not np.isfinite(fits.r2).any():
        return [
            "## QQ tail fits (TEA Table 14)",
            "",
            f"No prompt has a defined fit: the top {params.diagnostics.tail_fraction:.0%} of "
            f"{params.rollouts.samples_per_prompt} samples is fewer than 3 points or constant.",
            "",
        ]
    plot_qq_tails(
        read_pool(paths.pool(first)),
        paths.figures / "qq_tails.png",
        params.diagnostics.tail_fraction,
        title=f"Upper-tail normal QQ fits, {first}",
    )
    worst = min(rows, key=lambda r: float(r[2]) if r[2] != "—" else 2)
    return [
        "## QQ tail fits (TEA Table 14)",
        "",
        "![qq tails](figures/qq_tails.png)",
        "",
        *_table(["variant", "prompts", "median R²", "mean R²", "10th pct R²", "share R² ≥ 0.95"], rows),
        "",
        f"Read: R² of each prompt's top {params.diagnostics.tail_fraction:.0%} rewards against normal quantiles. "
        "TEA's Gaussian-tail extrapolation assumes this is near 1 (its Table 14 reports medians ≥ 0.95 on its "
        f"tasks); the lowest median here is {worst[2]} (`{worst[0].strip('`')}`).",
        "",
    ]


def _batch_cosine_tables(paths: StudyPaths, cfg, ns: Sequence[int]) -> list[str]:
    """The batch-level oracle cosines: every test prompt in one batch, mean ± se over the seeds' batches."""
    path = paths.diagnostics("oracle_gradient") / "batch_summary.csv"
    batch = pd.read_csv(path) if path.exists() else pd.DataFrame()
    if batch.empty:
        return []
    batch = batch[~batch.centered.astype(bool)]
    lines = [
        "",
        "### Batch level",
        "",
        f"All {cfg.prompts} prompts form one batch: g = Σ_p g_p with the rule's advantages computed on the whole "
        f"batch (as in training), g* = Σ_p g*_p, the gradient of the mean strategy value. How a rule weighs one "
        f"prompt against another (GRPO-Z's per-prompt standard deviation, CAT's strategy weights) shows here "
        f"and not per prompt. Mean ± se over {cfg.seeds} batches (one per seed).",
    ]
    for target in sorted(batch.target.unique()):
        rows = []
        for variant, group in batch[batch.target == target].groupby("variant", sort=True):
            cells = [f"`{variant}`"]
            for n in ns:
                r = group[group.n == n]
                finite = not r.empty and np.isfinite(r["mean"].iloc[0])
                cells.append(f"{r['mean'].iloc[0]:.3f} ± {r.stderr.iloc[0]:.3f}" if finite else "—")
            rows.append(cells)
        lines += ["", f"target {target}@{cfg.budget}, batch level:", ""]
        lines += _table(["rule"] + [f"n = {n}" for n in ns], rows)
    return lines


def closest_by_n(cosines: pd.DataFrame, ns: Sequence[int]) -> str:
    """The rule with the highest mean cosine at each group size, with its ± se, and the runner-up when
    the two are within two standard errors of their difference (not told apart)."""
    parts = []
    for n in ns:
        at = cosines[cosines.n == n].dropna(subset=["mean"]).sort_values("mean", ascending=False)
        if at.empty:
            continue
        best = at.iloc[0]
        said = f"n = {n} `{best.variant}` {best['mean']:.3f} ± {best.stderr:.3f}"
        if len(at) > 1:
            second = at.iloc[1]
            if best["mean"] - second["mean"] <= 2 * math.hypot(best.stderr, second.stderr):
                said += f" (not told apart from `{second.variant}` {second['mean']:.3f} ± {second.stderr:.3f})"
        parts.append(said)
    return "; ".join(parts)


def oracle_section(params: Params, paths: StudyPaths) -> list[str]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from aligntrain.io import atomic_path

    cfg = params.diagnostics.oracle
    summary = pd.read_csv(paths.diagnostics("oracle_gradient") / "summary.csv")
    headline = _json(paths.diagnostics_metrics("oracle_gradient"))
    if summary.empty:
        return ["## Oracle-gradient cosine", "", f"Not computed: {headline.get('note', 'no rule compared')}.", ""]
    raw = summary[~summary.centered.astype(bool)]
    targets = sorted(raw.target.unique())
    fig, axes = plt.subplots(1, len(targets), figsize=(5.5 * len(targets), 3.8), squeeze=False)
    for ax, target in zip(axes[0], targets):
        for i, (variant, group) in enumerate(raw[raw.target == target].groupby("variant", sort=True)):
            group = group.sort_values("n")
            style = "-" if i < 10 else "--"
            ax.errorbar(group.n, group["mean"], yerr=group.stderr, marker="o", ms=3, label=variant, ls=style, capsize=2)
        ax.set_xscale("log", base=2)
        ax.set_xlabel("training group size n")
        ax.set_ylabel("cos(g, g*)")
        ax.set_title(f"target: {target}@{cfg.budget}", fontsize=9)
        ax.grid(alpha=0.3)
    axes[0, -1].legend(fontsize=6, ncol=2)
    fig.tight_layout()
    with atomic_path(paths.figures / "oracle_cosine.png") as tmp:
        fig.savefig(tmp, format="png", dpi=110)
    plt.close(fig)
    ns = sorted(raw.n.unique())
    lines = [
        "## Oracle-gradient cosine (TEA §4.6, Table 13)",
        "",
        "![oracle cosine](figures/oracle_cosine.png)",
        "",
        f"Model `{cfg.variant}`; {headline['prompts']} test prompts × M = {cfg.samples_per_prompt} completions form "
        f"the empirical policy (mean reward {_fmt(headline['mean_reward'])}); g* is the gradient of the target "
        f"strategy at N = {cfg.budget} on the last transformer block, g a rule's gradient from a group of n drawn "
        f"from the pool; cosines averaged over prompts × {cfg.seeds} seeds (mean ± se; '—': the rule does not apply "
        "or every group had all-zero advantages).",
    ]
    for target in targets:
        sub = raw[raw.target == target]
        rows = []
        for variant, group in sub.groupby("variant", sort=True):
            cells = [f"`{variant}`"]
            for n in ns:
                r = group[group.n == n]
                cells.append(
                    "—"
                    if r.empty or not np.isfinite(r["mean"].iloc[0])
                    else f"{r['mean'].iloc[0]:.3f} ± {r.stderr.iloc[0]:.3f}"
                )
            rows.append(cells)
        lines += ["", f"### target {target}@{cfg.budget}", ""] + _table(["rule"] + [f"n = {n}" for n in ns], rows)
        if closest := closest_by_n(sub, ns):
            lines += [
                "",
                f"Read: the rule closest to the {target} oracle, per group size: {closest}. TEA Table 13 reports "
                "0.2–0.6 for best-of-N on 7B models, where the gradient lives in far more dimensions.",
            ]
    if problem_of(params).binary_rewards:
        lines += [
            "",
            "On binary rewards the pass@N oracle is a positive multiple of r − p̂ within each prompt for "
            "every N, so per-prompt cosines cannot tell different N apart; rules with one weight per prompt "
            "(CAT-RL with empirical p) give GRPO-Z's cosine there. The batch level below can.",
        ]
    lines += _batch_cosine_tables(paths, cfg, ns)
    lines += [
        "",
        "Rules with state (a reward history, a threshold average) start each group from an empty state: "
        "an empty history gives CAT's history quantile q = 1/2, so it scores as GRPO-Z here. Centred "
        "scores (S − S̄) are in diagnoses/oracle_gradient/summary.csv.",
        "",
    ]
    return lines


def alignment_section(params: Params, table: pd.DataFrame) -> list[str]:
    """Predicted crossover budgets (Γ curves, CAT eq. 90–91) vs the crossovers of the measured pass@k curves."""
    from aligntrain.diagnostics.alignment import crossover_budget, predicted_crossover_budget

    trained: dict[str, int] = {}
    for name in params.run_variants:
        variant = params.variants[name]
        if variant.objective == "ce":
            trained[name] = 1
        elif variant.objective == "pass_at_n":
            trained[name] = variant.options.budget
    lines = ["## Alignment coefficient: predicted vs measured crossovers (CAT eq. 90, App. F.3)", ""]
    pairs = [(a, b) for a in trained for b in trained if trained[a] < trained[b]]
    if not pairs:
        return lines + ["Needs two SFT variants with different N (ce counts as N = 1) in study.run.", ""]
    passes = table[table.strategy == "pass"]
    ks = sorted(passes.k.unique())
    rows = []
    for small, large in pairs:
        predicted = predicted_crossover_budget(trained[small], trained[large])
        curve = {v: passes[passes.variant == v].set_index("k")["mean"].reindex(ks).to_numpy() for v in (small, large)}
        measured = crossover_budget(ks, curve[small], curve[large])
        rows.append(
            (
                f"`{small}` (N = {trained[small]})",
                f"`{large}` (N = {trained[large]})",
                predicted if predicted is not None else "none",
                measured if measured is not None else f"none ≤ {ks[-1]}",
            )
        )
    return (
        lines
        + _table(["smaller N", "larger N", "predicted k′", "measured k′"], rows)
        + [
            "",
            "Read: Γ(N, k) scores how well training at N aligns with testing at k; the predicted crossover is "
            "the first k where the larger-N curve of Γ stays ahead. The measured crossover is the first budget "
            "from which the larger-N model's pass@k stays at or above the smaller-N model's on the test pool "
            "(point estimates; the intervals are in the scaling table). "
            "CAT App. F.3 predicts 2 (CE vs N = 4), 8 (4 vs 16), 32 (16 vs 64).",
            "",
        ]
    )


def synthetic_section(params: Params, paths: StudyPaths) -> list[str]:
    from aligntrain.diagnostics.synthetic import average_over_seeds, plot_tang_bandit, plot_tea_gaussian

    cfg = params.diagnostics.synthetic
    bandit = pd.read_csv(paths.diagnostics("synthetic") / "bandit.csv")
    gaussian = pd.read_csv(paths.diagnostics("synthetic") / "tea_gaussian.csv")
    plot_tang_bandit(bandit, paths.figures / "tang_bandit.png")
    plot_tea_gaussian(gaussian, paths.figures / "tea_gaussian.png")
    averaged = average_over_seeds(bandit)
    steps = sorted(averaged.step.unique())
    early = steps[min(len(steps) - 1, max(1, len(steps) // 10))]
    rows = []
    for method, group in averaged.groupby("method", sort=False):
        cells = [f"`{method}`"]
        for step in (early, steps[-1]):
            r = group[group.step == step].iloc[0]
            cells += [_fmt(r.mean_reward, 2), _fmt(r.pass_at_k, 2), _fmt(r.kl, 2)]
        rows.append(cells)
    measures = ("mean r", f"pass@{cfg.bandit_k}", "KL")
    header = ["method"] + [f"{m} @ step {s}" for s in (early, steps[-1]) for m in measures]
    grows = []
    for estimator, group in gaussian.groupby("estimator", sort=False):
        group = group.sort_values("n")
        cells = [f"{100 * r.rel_bias_norm:.1f}% / {r.rel_std:.2f}" for r in group.itertuples()]
        grows.append([f"`{estimator}`"] + cells)
    ns = sorted(gaussian.n.unique())
    final = averaged[averaged.step == steps[-1]].set_index("method")
    leader = final.pass_at_k.idxmax()
    return [
        "## Synthetic checks with known answers (docs/math.md §5)",
        "",
        "### Tang bandit (Tang et al. Fig. 1)",
        "",
        "![tang bandit](figures/tang_bandit.png)",
        "",
        *_table(header, rows),
        "",
        f"Read: {cfg.bandit_actions} arms with N(0, 1) rewards, softmax from uniform, k = {cfg.bandit_k} samples per "
        f"update at step size {cfg.bandit_learning_rate:g}, {cfg.bandit_seeds} bandits averaged. "
        "Highest pass@k at the end: "
        f"`{leader}`. Tang et al. report the k-sample estimators reaching higher pass@k at lower KL than mean PG.",
        "",
        "### TEA Gaussian tail (TEA App. E, Table 15)",
        "",
        "![tea gaussian](figures/tea_gaussian.png)",
        "",
        *_table(["estimator"] + [f"n = {n}: bias / rel. std" for n in ns], grows),
        "",
        f"Read: relative bias ‖E[ĝ] − ∇‖/‖∇‖ and relative standard deviation of the gradient of E[max of "
        f"{cfg.tea_budget}] under a Gaussian reward, {cfg.tea_repetitions} groups per n. TEA's bias falls like "
        "1/n; Prefix-TEA trades lower bias for larger variance (App. E). docs/math.md §3 records our implementation's "
        "reference values (raw TEA −14%/−19% per component at n = 64; raw Prefix-TEA ≈ 5%; both positive-part "
        "forms level off near 8.7%).",
        "",
    ]


# --------------------------------------------------------------------------- the stage


def build_report(params: Params, paths: StudyPaths) -> dict:
    """Write ``reports/index.md`` and ``reports/figures/*.png``; return headline counts for MLflow."""
    table = pd.read_csv(paths.reports / "compare.csv")
    figures: dict[str, str] = {}
    body = [
        f"# Study `{params.study.name}`",
        "",
        "Rebuilt by the `report` stage from the study's outputs (`dvc repro` keeps it current). "
        "Formulas and their sources: docs/math.md; every number below is measured, none is tuned toward the papers.",
        "",
    ]
    body += setup_section(params)
    body += primary_section(params, table)
    family = family_size(table)
    body += scaling_section(params, baseline_rows(table), family)  # the primary may have a baseline of its own
    for split in params.rollouts.held_out:
        body += scaling_section(params, baseline_rows(table, split), family, split)
    body += alignment_section(params, baseline_rows(table))
    body += confidence_section(params, paths, figures)
    body += efficiency_section(params, paths)
    body += weight_section(params, paths)
    body += tails_section(params, paths)
    body += oracle_section(params, paths)
    body += synthetic_section(params, paths)
    write_text(paths.reports / "index.md", "\n".join(body) + "\n")
    return {"variants": len(params.run_variants), "figures": len(list(paths.figures.glob("*.png")))}
