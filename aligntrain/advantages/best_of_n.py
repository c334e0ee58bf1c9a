"""Selected-output best-of-N baselines: BoN-max mean/second, Chow BoN-RL (docs/math.md §3, TEA App. B.1)."""

from __future__ import annotations

import torch
from pydantic import Field, StrictInt
from torch import Tensor

from aligntrain.advantages.baselines import centered, constant_groups
from aligntrain.advantages.registry import RuleContext, RuleOptions, register_rule
from aligntrain.options import Real


def _only_selected(rewards: Tensor, selected_value: Tensor) -> Tensor:
    """Advantage ``selected_value`` (G, 1) on the reward-selected rollout, 0 elsewhere.

    The selected rollout is the first arg-max (deterministic tie-breaking, TEA App. B.1).
    """
    selected = rewards.argmax(dim=1, keepdim=True)
    return torch.zeros_like(rewards).scatter_(1, selected, selected_value)


@register_rule
class BoNMaxMean(RuleOptions):
    """BoN-max mean: r_max − mean(r) on the reward-selected rollout only, 0 elsewhere (TEA eq. 21); biased."""

    name = "bon_max_mean"

    def advantages(self, rewards: Tensor, context: RuleContext) -> Tensor:
        return _only_selected(rewards, centered(rewards).amax(dim=1, keepdim=True))


@register_rule
class BoNMaxSecond(RuleOptions):
    """BoN-max second: r_max − r_(second) on the reward-selected rollout only (TEA eq. 22); biased.

    r_(second) is the second largest value of the sorted group, so a tied maximum gives 0.
    """

    name = "bon_max_second"

    def advantages(self, rewards: Tensor, context: RuleContext) -> Tensor:
        top_two = rewards.topk(2, dim=1).values
        return _only_selected(rewards, top_two[:, :1] - top_two[:, 1:])


def chow_binary_advantage(rewards: Tensor, budget: int, clip: float) -> Tensor:
    """Chow BoN-RL, binary rewards (docs/math.md §3; third-party code, not checked against the paper).

    With p_fail = 1 − mean(r): a correct rollout gets N p_fail^{N−1}/(1 − p_fail^N),
    an incorrect one −N p_fail/(1 − p_fail), both clipped to [−clip, clip].
    A group whose rewards are all equal gets 0 [choice]: the all-wrong case is
    −N/0 and the all-correct case has no learning signal.
    """
    solved = rewards.mean(dim=1, keepdim=True)
    flat = constant_groups(rewards)
    solved = torch.where(flat, torch.full_like(solved, 0.5), solved)  # safe input for unused branches
    failed = 1.0 - solved
    # 1 − p_fail^N = −expm1(N·log(1 − solved)), exact for p_fail close to 1.
    correct = budget * failed.pow(budget - 1) / -torch.expm1(budget * torch.log1p(-solved))
    incorrect = -budget * failed / solved
    advantages = torch.where(rewards > 0, correct, incorrect).clamp(-clip, clip)
    return advantages.masked_fill(flat, 0.0)


@register_rule
class ChowBoN(RuleOptions):
    """Chow BoN-RL (binary): N p_f^{N−1}/(1−p_f^N) if correct, −N p_f/(1−p_f) if not, clipped ±3; biased."""

    name = "chow_bon"
    binary_rewards_only = True
    budget: StrictInt = Field(ge=1, description="Test-time budget N of best-of-N.")
    clip: Real = Field(3.0, gt=0, description="Advantages are clipped to [−clip, clip].")

    def advantages(self, rewards: Tensor, context: RuleContext) -> Tensor:
        return chow_binary_advantage(rewards, self.budget, self.clip)
