"""Mean-reward baselines: GRPO, GRPO-Z, Dr. GRPO, RLOO (docs/math.md §3).

Naming follows the TEA paper (TEA App. B.1): GRPO is the mean-centred reward,
GRPO-Z divides by the group standard deviation (TRL's default "GRPO" with
``scale_rewards="group"`` is GRPO-Z here).
"""

from __future__ import annotations

from torch import Tensor

from aligntrain.advantages.registry import RuleContext, RuleOptions, register_rule

#: added to the group standard deviation in GRPO-Z (CAT's and TRL's code)
GRPO_Z_EPS = 1e-4


def constant_groups(rewards: Tensor) -> Tensor:
    """(G, 1) bool: groups whose rewards are all equal (they carry no signal)."""
    return rewards.amax(dim=1, keepdim=True) == rewards.amin(dim=1, keepdim=True)


def centered(rewards: Tensor) -> Tensor:
    """r_i − mean(r) per group, exactly 0 for groups of equal rewards.

    The mean of equal floats can differ from them in the last bit; forcing the
    zeros keeps "equal rewards → zero advantage" exact for every rule built on it.
    """
    residual = rewards - rewards.mean(dim=1, keepdim=True)
    return residual.masked_fill(constant_groups(rewards), 0.0)


def group_normalized_advantage(rewards: Tensor) -> Tensor:
    """GRPO-Z: (r_i − mean(r)) / (std(r) + 1e−4), std with ddof = 1 (docs/math.md §3; TEA eq. 20)."""
    return centered(rewards) / (rewards.std(dim=1, correction=1, keepdim=True) + GRPO_Z_EPS)


@register_rule
class GRPO(RuleOptions):
    """GRPO: A_i = r_i − mean(r) (TEA eq. 19); biased at scale 1: E[(1/n)ΣA_i S_i] = (n−1)/n ∇E[r].

    The mean includes r_i itself, which correlates the baseline with y_i and
    shrinks the gradient by exactly (n−1)/n relative to RLOO.
    """

    name = "grpo"

    def advantages(self, rewards: Tensor, context: RuleContext) -> Tensor:
        return centered(rewards)


@register_rule
class GRPOZ(RuleOptions):
    """GRPO-Z: (r_i − mean(r)) / (std_ddof1(r) + 1e−4); a group of equal rewards gives 0."""

    name = "grpo_z"

    def advantages(self, rewards: Tensor, context: RuleContext) -> Tensor:
        return group_normalized_advantage(rewards)


@register_rule
class DrGRPO(RuleOptions):
    """Dr. GRPO: the same advantage as GRPO, r_i − mean(r) (no std division; DCO App. B).

    Its difference from GRPO lies in the loss reduction, not in the advantage: the
    per-token loss is summed and divided by a constant (TRL ``loss_type="dr_grpo"``)
    instead of being averaged over each completion's length. The trainer selects
    that reduction; this rule only supplies the advantage.
    """

    name = "dr_grpo"

    def advantages(self, rewards: Tensor, context: RuleContext) -> Tensor:
        return centered(rewards)


def rloo_advantage(rewards: Tensor) -> Tensor:
    """A_i = r_i − mean_{j≠i} r_j = n/(n−1)·(r_i − mean(r))."""
    n = rewards.shape[1]
    return centered(rewards) * (n / (n - 1))


@register_rule
class RLOO(RuleOptions):
    """RLOO: A_i = r_i − mean_{j≠i} r_j = n/(n−1)·(r_i − mean(r)); unbiased for E[r] (docs/math.md §3)."""

    name = "rloo"
    unbiased_for = "E[r] (mean reward of one sample)"

    def advantages(self, rewards: Tensor, context: RuleContext) -> Tensor:
        return rloo_advantage(rewards)
