"""Compute Aligned Training for RL: strategy weights on the GRPO-Z advantage (CAT App. B, C, J–M).

Every CAT rule computes a detached per-sample weight w from the test-time
strategy and multiplies the GRPO-Z advantage of the *raw* rewards:
``A_i = w_i · A_i^{GRPO-Z}`` (CAT eq. 83). The weight never enters the reward
before normalisation (CAT App. C.1: normalisation would cancel its scale).
The weight formulas live in :mod:`aligntrain.losses`; this module chooses
their inputs (p, q, k) from the rollout group and applies them.

The rules are biased: the weight is CAT's diagonal approximation of the
strategy gradient (CAT App. B), further altered by clipping, log-weighting and
batch normalisation; none is on the unbiased scale convention.
"""

from __future__ import annotations

import math
from typing import Literal

import torch
from pydantic import Field, StrictBool, StrictInt, model_validator
from torch import Tensor

from aligntrain.advantages.answers import answer_classes
from aligntrain.advantages.baselines import group_normalized_advantage
from aligntrain.advantages.registry import RuleContext, RuleOptions, register_rule
from aligntrain.advantages.state import RewardHistory
from aligntrain.losses import (
    cat_best_of_n_rl_weight,
    cat_majority_rl_weight,
    cat_pass_at_n_rl_weight,
    dynamic_majority_threshold,
    empirical_success_probability,
    sequence_success_probability,
)
from aligntrain.options import Real

#: the global-history quantile is clamped to this interval (CAT eq. 105)
HISTORY_QUANTILE_BOUNDS = (0.001, 0.999)


# --------------------------------------------------------------------------- shared pieces


def success_probability(rewards: Tensor, context: RuleContext, p_source: str) -> Tensor:
    """p per rollout (G, n) for the Pass@N / majority weights (docs/math.md §3).

    ``empirical``: Laplace-smoothed group accuracy (c + 1)/(n + 2) (CAT eq. 79), one
    value per prompt; ``sequence``: exp of the rollout's summed log-prob clamped to
    [−50, 0], then to [1e−10, 1 − 1e−10] (CAT App. J.3). Always float64: near p = 1 the
    weights live on 1 − p, which float32 cannot resolve below ~6e−8.
    """
    if p_source == "sequence":
        return sequence_success_probability(context.logps.to(rewards.device))
    correct = (rewards > 0).sum(dim=1, keepdim=True).to(torch.float64)
    return empirical_success_probability(correct, rewards.shape[1]).to(torch.float64).expand_as(rewards)


def normalize_by_batch_mean(weights: Tensor) -> Tensor:
    """w ← w / mean(w) over the whole batch, all prompts together (CAT eq. 81, 106).

    Normalising per prompt would erase the relative weighting between prompts
    (CAT App. B.8). The batch is this call's (G, n) tensor. A batch whose weights
    are all 0 stays 0.
    """
    mean = weights.mean()
    return weights / torch.where(mean > 0, mean, torch.ones_like(mean))


def apply_all_wrong_penalty(advantages: Tensor, rewards: Tensor, penalty: float) -> Tensor:
    """Subtract ``penalty`` from every advantage of a group whose rewards are all 0 (CAT eq. 103)."""
    all_wrong = (rewards == 0).all(dim=1, keepdim=True)
    return advantages - penalty * all_wrong.to(advantages.dtype)


#: where the all-wrong penalty enters the CAT advantage (option ``all_wrong_penalty_placement``)
PENALTY_PLACEMENTS = ("before_weight", "after_weight")


def _weighted_advantage(
    rewards: Tensor,
    weights: Tensor,
    batch_normalize: bool,
    penalty: float = 0.0,
    placement: str = "before_weight",
) -> Tensor:
    """w · A^{GRPO-Z} (CAT eq. 83) with the all-wrong penalty before or after the weight.

    ``before_weight`` (CAT App. K.3, eqs. 102–103, then eq. 83; the authors' code): the
    penalty shifts the GRPO-Z advantage and the weight scales it, so an all-wrong
    group gets −w·penalty: small where a strong wrong answer makes the prompt's
    threshold hard to reach, large where the wrong answers are scattered.
    ``after_weight``: every all-wrong group gets exactly −penalty.
    """
    if batch_normalize:
        weights = normalize_by_batch_mean(weights)
    weights = weights.to(rewards.dtype)
    base = group_normalized_advantage(rewards)
    if placement == "before_weight":
        return weights * apply_all_wrong_penalty(base, rewards, penalty)
    return apply_all_wrong_penalty(weights * base, rewards, penalty)


class _CATRule(RuleOptions):
    """Options every CAT rule has: the budget N, the weight clip and batch normalisation."""

    budget: StrictInt = Field(ge=1, description="Test-time budget N of the strategy the weight targets.")
    clip: Real = Field(50.0, gt=0, description="The strategy weight is clipped to at most this (CAT App. J.3).")
    batch_normalize: StrictBool = Field(False, description="Divide the weights by their batch mean (CAT eq. 81).")


class _CATBinaryRule(_CATRule):
    """Options of the CAT rules for binary rewards (Pass@N, majority vote)."""

    binary_rewards_only = True
    p_source: Literal["empirical", "sequence"] = Field(
        "empirical",
        description="p per rollout: 'empirical' smoothed group accuracy (CAT eq. 79) or 'sequence' exp(logps) "
        "(CAT App. J.3; needs logps).",
    )
    log_weighted: StrictBool = Field(True, description="Use the log-derivative weight F(N, p) (CAT eq. 75).")
    all_wrong_penalty: Real = Field(0.0, ge=0, description="Subtracted from every advantage of an all-wrong group.")
    all_wrong_penalty_placement: Literal["before_weight", "after_weight"] = Field(
        "before_weight",
        description="'before_weight': the penalty shifts the GRPO-Z advantage, then the weight scales it (CAT App. "
        "K.3, the authors' code); 'after_weight': subtracted from the weighted advantage (exactly -penalty).",
    )

    def context_needed(self) -> frozenset[str]:
        return frozenset({"logps"}) if self.p_source == "sequence" else frozenset()


# --------------------------------------------------------------------------- Pass@N


@register_rule
class CATPassAtN(_CATBinaryRule):
    """CAT Pass@N: w·A^{GRPO-Z}, w = N(1−p)^{N−1} or log-weighted F(N, p), clipped (CAT eq. 54, 75, J.3); biased.

    Default log-weighted (CAT App. J.3: the author's primary RL implementation).
    """

    name = "cat_pass_at_n"

    def advantages(self, rewards: Tensor, context: RuleContext) -> Tensor:
        p = success_probability(rewards, context, self.p_source)
        weights = cat_pass_at_n_rl_weight(p, self.budget, log_weighted=self.log_weighted, clip=self.clip)
        return _weighted_advantage(
            rewards, weights, self.batch_normalize, self.all_wrong_penalty, self.all_wrong_penalty_placement
        )


# --------------------------------------------------------------------------- majority vote


def most_frequent_wrong_count(rewards: Tensor, answers) -> Tensor:
    """c_max (G,): votes of the most frequent wrong answer class (CAT eq. 100).

    Unparseable rollouts count as one wrong class; 0 when every rollout is correct.
    """
    classes = answer_classes(answers, rewards)
    return classes.counts.masked_fill(classes.correct, 0).amax(dim=1)


def majority_threshold(
    rewards: Tensor, context: RuleContext, budget: int, k: int | None, threshold_ema: float | None
) -> int | Tensor:
    """The vote threshold k of the majority weight: fixed, per-prompt dynamic, or its EMA.

    Dynamic (CAT eqs. 100–101): k = max(2, min(⌊N/2⌋+1, ⌊N c_max/n⌋ + 1)) per prompt
    (``objectives.dynamic_majority_threshold``; it gives k = 1 for N = 1).
    With ``threshold_ema`` = β (CAT App. B.7.2) [choice]: the state's k̄ is updated
    with this batch's mean dynamic threshold, k̄ ← β k̄ + (1 − β) mean_g k_g (first
    batch: k̄ = mean k), and every prompt of the batch uses round(k̄) (half up).
    """
    if k is not None:
        return k
    c_max = most_frequent_wrong_count(rewards, context.answers)
    dynamic = torch.as_tensor(dynamic_majority_threshold(budget, c_max, rewards.shape[1]), device=rewards.device)
    if threshold_ema is None:
        return dynamic.to(torch.long)  # (G,): one threshold per prompt (row)
    smoothed = context.threshold_state.update(float(dynamic.double().mean()), threshold_ema)
    return math.floor(smoothed + 0.5)


@register_rule
class CATMajority(_CATBinaryRule):
    """CAT majority: w·A^{GRPO-Z}, w = N·C(N−1,k−1)p^{k−1}(1−p)^{N−k} or the SFT weight (CAT eq. 70, K); biased.

    k = None uses the dynamic threshold (CAT eqs. 100–101), optionally smoothed by
    an EMA across steps (``threshold_ema`` with a ``threshold_state``). Defaults
    follow CAT App. K: raw RL weight (won in CAT Table 14), silence penalty 0.5.
    """

    name = "cat_majority"
    k: StrictInt | None = Field(
        None, ge=1, description="Votes the gold answer needs, <= budget; None: the dynamic threshold (CAT eq. 100)."
    )
    threshold_ema: Real | None = Field(
        None, ge=0, lt=1, description="EMA factor β of the dynamic threshold across steps (k = None only)."
    )
    log_weighted: StrictBool = Field(False, description="Use the SFT weight p·B′(p)/B(p) instead of the raw RL one.")
    all_wrong_penalty: Real = Field(0.5, ge=0, description="Subtracted from every advantage of an all-wrong group.")

    @model_validator(mode="after")
    def _threshold_fits(self) -> CATMajority:
        if self.k is not None and self.k > self.budget:
            raise ValueError(f"option k ({self.k}) must be <= budget ({self.budget})")
        if self.k is not None and self.threshold_ema is not None:
            raise ValueError("option threshold_ema applies to the dynamic threshold (k = None) only")
        return self

    def context_needed(self) -> frozenset[str]:
        needed = set(super().context_needed())
        if self.k is None:
            needed.add("answers")
            if self.threshold_ema is not None:
                needed.add("threshold_state")
        return frozenset(needed)

    def advantages(self, rewards: Tensor, context: RuleContext) -> Tensor:
        p = success_probability(rewards, context, self.p_source)
        threshold = majority_threshold(rewards, context, self.budget, self.k, self.threshold_ema)
        weights = cat_majority_rl_weight(p, self.budget, threshold, log_weighted=self.log_weighted, clip=self.clip)
        return _weighted_advantage(
            rewards, weights, self.batch_normalize, self.all_wrong_penalty, self.all_wrong_penalty_placement
        )


# --------------------------------------------------------------------------- best-of-N


def in_batch_quantile(rewards: Tensor) -> Tensor:
    """q_i = (#{j: r_j < r_i} + 1)/(n + 1), same prompt only (CAT eq. 108)."""
    ordered = rewards.sort(dim=1).values.contiguous()
    below = torch.searchsorted(ordered, rewards.contiguous(), side="left")
    return (below.to(rewards.dtype) + 1.0) / (rewards.shape[1] + 1)


def history_quantile(
    rewards: Tensor, history: RewardHistory, step: int | None = None, decay: float | None = None
) -> Tensor:
    """q = (W_below(r) + 1)/(W_total + 2), clamped to [0.001, 0.999] (CAT eqs. 80, 105).

    Without ``decay`` every stored reward weighs 1, so W_below = #{h < r} and
    W_total = |H| (eq. 105). With ``decay`` = γ item j weighs γ^(step − t_j) (eq. 80)
    [choice: the same +1/+2 smoothing and clamp as eq. 105, so γ = 1 reproduces it].
    An empty history gives q = 1/2.
    """
    stored = history.rewards.to(device=rewards.device, dtype=rewards.dtype)
    if decay is None:
        item_weights = torch.ones_like(stored)
    else:
        age = (step - history.steps).to(device=rewards.device, dtype=rewards.dtype)
        item_weights = torch.pow(torch.as_tensor(decay, dtype=rewards.dtype, device=rewards.device), age)
    ordered, order = stored.sort()
    cumulative = torch.cat([torch.zeros(1, dtype=rewards.dtype, device=rewards.device), item_weights[order].cumsum(0)])
    below = cumulative[torch.searchsorted(ordered, rewards.reshape(-1), side="left")].reshape(rewards.shape)
    low, high = HISTORY_QUANTILE_BOUNDS
    return ((below + 1.0) / (cumulative[-1] + 2.0)).clamp(low, high)


def _time_weighted_quantile(rewards: Tensor, context: RuleContext) -> Tensor:
    history = context.history
    if history.decay is None:
        raise ValueError("quantile='time_weighted' needs a history created with a decay (RewardHistory(decay=γ))")
    if history.last_step is not None and context.step < history.last_step:
        raise ValueError(f"step ({context.step}) must be >= the history's last step ({history.last_step})")
    return history_quantile(rewards, history, context.step, history.decay)


#: how each ``quantile`` option estimates q, and the context it needs
QUANTILE_ESTIMATORS = {
    "in_batch": (lambda rewards, context: in_batch_quantile(rewards), frozenset()),
    "history": (lambda rewards, context: history_quantile(rewards, context.history), frozenset({"history"})),
    "time_weighted": (_time_weighted_quantile, frozenset({"history", "step"})),
}
QUANTILES = tuple(QUANTILE_ESTIMATORS)


@register_rule
class CATBestOfN(_CATRule):
    """CAT best-of-N: w·A^{GRPO-Z}, w = N q^{N−1} batch-normalised, q = P[other sample lower] (CAT eq. 58); biased.

    q in-batch (eq. 108), from the global FIFO history (eq. 105) or time-weighted
    (eq. 80); the history is queried before this batch is added to it.
    """

    name = "cat_best_of_n"
    quantile: Literal["in_batch", "history", "time_weighted"] = Field(
        "in_batch",
        description="How q is estimated: 'in_batch' (CAT eq. 108), 'history' (eq. 105), 'time_weighted' (eq. 80; "
        "needs a history with a decay).",
    )
    batch_normalize: StrictBool = Field(True, description="Divide the weights by their batch mean (CAT eq. 81).")

    def context_needed(self) -> frozenset[str]:
        return QUANTILE_ESTIMATORS[self.quantile][1]

    def advantages(self, rewards: Tensor, context: RuleContext) -> Tensor:
        estimate_quantile, _ = QUANTILE_ESTIMATORS[self.quantile]
        q = estimate_quantile(rewards, context)
        weights = cat_best_of_n_rl_weight(q, self.budget, clip=self.clip)
        return _weighted_advantage(rewards, weights, self.batch_normalize)


assert set(QUANTILE_ESTIMATORS) == set(CATBestOfN.model_fields["quantile"].annotation.__args__)

assert set(PENALTY_PLACEMENTS) == set(_CATBinaryRule.model_fields["all_wrong_penalty_placement"].annotation.__args__)
