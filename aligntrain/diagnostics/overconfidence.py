"""Overconfidence and reward shift per model (docs/math.md §4; DCO Figure 1, TEA Figure 3b).

* Greedy confidence (DCO Fig. 1): for each test prompt, the probability
  π(ŷ|x) = exp ℓ of the greedy completion ŷ under the model at temperature 1,
  split by whether ŷ is correct. An overconfident model puts most of its mass
  on one completion even when it is wrong — which leaves nothing for pass@N to
  find in the other N − 1 draws.
* Reward shift (TEA Fig. 3b): the distribution of a model's rewards on the test
  pool. Binary problems: each prompt's success rate p̂ (the pool's mean
  reward), since the reward itself only takes two values; continuous problems:
  the rewards of all completions.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from aligntrain.io import atomic_path
from aligntrain.validation import check_real

CONFIDENCE_COLUMNS = ["prompt_id", "level", "greedy_logp", "greedy_prob", "correct", "reward", "num_tokens"]


def greedy_confidence(
    model,
    tokenizer,
    rows: Sequence[Mapping[str, Any]],
    problem,
    *,
    max_new_tokens: int,
    batch_size: int,
    prompts: Sequence[str] | None = None,
) -> pd.DataFrame:
    """One row per test prompt: the greedy completion's log-probability, probability and verdict.

    ``prompts``: the model's inputs, one per row (e.g. chat-rendered); None: the rows' prompts.
    """
    from aligntrain.rollouts.generate import SamplingConfig, sample_completions
    from aligntrain.rollouts.pool import grade_completions

    sampling = SamplingConfig(max_new_tokens=max_new_tokens, greedy=True)
    prompts = [r["prompt"] for r in rows] if prompts is None else list(prompts)
    completions = sample_completions(model, tokenizer, prompts, 1, sampling, batch_size=batch_size, seed=0)
    records = [
        {
            "prompt_id": grade["prompt_id"],
            "level": grade["level"],
            "greedy_logp": c.logp,
            "greedy_prob": math.exp(c.logp),
            "correct": grade["correct"],
            "reward": grade["reward"],
            "num_tokens": c.num_tokens,
        }
        for c, grade in zip(completions, grade_completions(rows, completions, problem), strict=True)
    ]
    return pd.DataFrame.from_records(records, columns=CONFIDENCE_COLUMNS)


def _median(values: pd.Series) -> float:
    return float(values.median()) if len(values) else float("nan")


def summarize_confidence(frame: pd.DataFrame, confident: float = 0.5) -> dict[str, float]:
    """Greedy accuracy, median greedy probability of correct and of wrong completions, the share
    of prompts answered wrongly with probability ≥ ``confident``, and the median per-token
    probability exp(ℓ/T) (comparable across completion lengths: a 50-residue sequence has a
    tiny probability however confident each step is)."""
    check_real(confident, "confident", low=0, high=1, low_open=True, high_open=True)
    if frame.empty:
        raise ValueError("frame has no prompts")
    right = frame[frame.correct]
    wrong = frame[~frame.correct]
    return {
        "greedy_accuracy": float(frame.correct.mean()),
        "median_prob_correct": _median(right.greedy_prob),
        "median_prob_wrong": _median(wrong.greedy_prob),
        "mean_prob": float(frame.greedy_prob.mean()),
        "confidently_wrong": float((~frame.correct & (frame.greedy_prob >= confident)).mean()),
        "median_token_prob": float(np.exp(frame.greedy_logp / frame.num_tokens.clip(lower=1)).median()),
    }


def reward_distribution(pool: pd.DataFrame, binary: bool) -> np.ndarray:
    """The values whose distribution shifts between models: per-prompt success rates (binary) or all rewards."""
    if binary:
        return pool.groupby("prompt_id", sort=False).reward.mean().to_numpy(dtype=float)
    return pool.reward.to_numpy(dtype=float)


def plot_confidence(frames: Mapping[str, pd.DataFrame], path: str | Path) -> None:
    """DCO Figure 1 per model: histograms of the greedy probability, correct vs wrong (PNG)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = list(frames)
    cols = min(3, len(names))
    rows = math.ceil(len(names) / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(4 * cols, 2.8 * rows), squeeze=False, sharex=True)
    bins = np.linspace(0, 1, 21)
    for ax, name in zip(axes.flat, names):
        frame = frames[name]
        ax.hist(frame.greedy_prob[frame.correct], bins=bins, alpha=0.6, label="correct", color="tab:green")
        ax.hist(frame.greedy_prob[~frame.correct], bins=bins, alpha=0.6, label="wrong", color="tab:red")
        ax.set_title(name, fontsize=9)
        ax.set_xlabel("π(greedy completion)")
    for ax in list(axes.flat)[len(names) :]:
        ax.axis("off")
    axes.flat[0].legend(fontsize=8)
    axes.flat[0].set_ylabel("prompts")
    fig.suptitle("Greedy-completion probability, correct vs wrong (DCO Fig. 1)", fontsize=10)
    fig.tight_layout()
    with atomic_path(path) as tmp:
        fig.savefig(tmp, format="png", dpi=110)
    plt.close(fig)


def plot_reward_shift(values: Mapping[str, np.ndarray], path: str | Path, binary: bool) -> None:
    """TEA Figure 3b: each model's reward distribution as an empirical CDF (PNG)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 3.6))
    for name, v in values.items():
        x = np.sort(np.asarray(v, dtype=float))
        ax.step(x, np.arange(1, len(x) + 1) / len(x), where="post", label=name)
    ax.set_xlabel("per-prompt success rate p̂" if binary else "reward")
    ax.set_ylabel("fraction ≤ x")
    ax.set_title("Reward distribution per model (TEA Fig. 3b)", fontsize=10)
    ax.legend(fontsize=8)
    fig.tight_layout()
    with atomic_path(path) as tmp:
        fig.savefig(tmp, format="png", dpi=110)
    plt.close(fig)
