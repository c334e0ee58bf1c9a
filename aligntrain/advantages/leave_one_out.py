"""Leave-one-out k-sample policy gradients: Tang et al. pass@k and maj@k, PKPO max@k (docs/math.md §3).

Tang et al. (eq. 2) write the estimator as a *sum* over the n samples,
Σ_i (f(y) − f(y_{−i})) ∇log π(y_i); with the trainer's mean over samples the
advantage is therefore n·(f(y) − f(y_{−i})) here (scale convention, docs/math.md §3).
The biased variants (Tang et al. eq. 3) subtract the group mean of those advantages;
by Tang et al. Lemma 2 they are unbiased for the (n−1)-sample objective.
"""

from __future__ import annotations

import math
from functools import lru_cache

import torch
from pydantic import Field, StrictInt
from torch import Tensor

from aligntrain.advantages.answers import answer_classes
from aligntrain.advantages.baselines import rloo_advantage
from aligntrain.advantages.registry import RuleContext, RuleOptions, register_rule


def subtract_group_mean(advantages: Tensor) -> Tensor:
    """Tang et al. eq. 3: A'_i = A_i − mean_j A_j (the zero-mean, biased variant)."""
    return advantages - advantages.mean(dim=1, keepdim=True)


# --------------------------------------------------------------------------- pass@k, k = n


def tang_pass_at_k_advantage(rewards: Tensor) -> Tensor:
    """n·(max(r) − max(r_{−i})) (Tang et al. eq. 2): only a unique arg-max is non-zero, with r_(n) − r_(n−1)."""
    n = rewards.shape[1]
    top_two = rewards.topk(2, dim=1).values
    best, runner_up = top_two[:, :1], top_two[:, 1:]
    # A tie for the maximum makes runner_up == best, so every advantage is 0.
    return torch.where(rewards == best, (best - runner_up) * n, torch.zeros_like(rewards))


@register_rule
class LOOPassAtK(RuleOptions):
    """Tang LOO pass@k with k = n: A_i = n·(max(r) − max(r_{−i})) (Tang et al. eq. 2); unbiased for E[max of n]."""

    name = "loo_pass_at_k"
    unbiased_for = "E[max(r_1..r_n)] (pass@n / max@n, k = n)"

    def advantages(self, rewards: Tensor, context: RuleContext) -> Tensor:
        return tang_pass_at_k_advantage(rewards)


@register_rule
class LOOPassAtKBiased(RuleOptions):
    """Tang biased pass@k: LOO advantages minus their group mean (Tang et al. eq. 3); unbiased for E[max of n−1]."""

    name = "loo_pass_at_k_biased"
    unbiased_for = "E[max(r_1..r_{n-1})] (Tang et al. Lemma 2)"

    def advantages(self, rewards: Tensor, context: RuleContext) -> Tensor:
        return subtract_group_mean(tang_pass_at_k_advantage(rewards))


# --------------------------------------------------------------------------- maj@k, k = n


def tang_majority_advantage(rewards: Tensor, answers) -> Tensor:
    """n·(f(a_1..a_n) − f(a_{−i})) (Tang et al. §3.1), in O(G·n).

    f = P[the plurality vote picks a correct class]: only parseable answers vote,
    ties among the top classes are broken uniformly (as an expectation), so
    f = (#correct top classes)/(#top classes), and 0 when nothing is parseable.

    Leaving rollout i out only lowers its own class's count, so f(a_{−i}) follows
    from the top count T, the next count S < T, and how many classes (and correct
    classes) share each (Tang et al. §3.1: only a top class can change the vote):

    - i unparseable or not in a top class: the vote is unchanged;
    - i in a top class tied with others: the others stay tied on top;
    - i in the only top class: it still wins alone if T − 1 > S, joins the
      classes at S if T − 1 = S > 0, and no vote is left if T = 1, S = 0.
    """
    n = rewards.shape[1]
    classes = answer_classes(answers, rewards)
    votes, correct = classes.counts[:, :n], classes.correct[:, :n]  # parseable classes only
    top = votes.amax(dim=1, keepdim=True)
    at_top = (votes == top) & (votes > 0)
    n_top, correct_top = at_top.sum(dim=1, keepdim=True), (at_top & correct).sum(dim=1, keepdim=True)
    second = torch.where(votes < top, votes, torch.zeros_like(votes)).amax(dim=1, keepdim=True)
    at_second = (votes == second) & (votes > 0) & (votes < top)
    n_second, correct_second = at_second.sum(dim=1, keepdim=True), (at_second & correct).sum(dim=1, keepdim=True)

    dtype = rewards.dtype
    full = correct_top.to(dtype) / n_top.clamp(min=1)
    slot = classes.ids.clamp(max=n - 1)  # unparseable rollouts are masked by `in_top` below
    in_top = at_top.gather(1, slot) & (classes.ids < n)
    own_correct = correct.gather(1, slot).to(dtype)
    still_tied = (correct_top - own_correct) / (n_top - 1).clamp(min=1)
    joins_second = (own_correct + correct_second) / (1 + n_second)
    no_vote_left = torch.zeros_like(own_correct)
    alone = torch.where(top - 1 > second, own_correct, torch.where(second > 0, joins_second, no_vote_left))
    without = torch.where(in_top, torch.where(n_top > 1, still_tied, alone), full)
    return (full - without) * n


@register_rule
class LOOMajAtK(RuleOptions):
    """Tang LOO maj@k with k = n: A_i = n·(f(a) − f(a_{−i})), f = majority correct (Tang et al. §3.1)."""

    name = "loo_maj_at_k"
    unbiased_for = "P[plurality vote over n answers is correct] (maj@n, k = n)"
    binary_rewards_only = True
    requires = frozenset({"answers"})

    def advantages(self, rewards: Tensor, context: RuleContext) -> Tensor:
        return tang_majority_advantage(rewards, context.answers)


@register_rule
class LOOMajAtKBiased(RuleOptions):
    """Tang biased maj@k: LOO maj advantages minus their group mean (Tang et al. eq. 3); unbiased for maj over n−1."""

    name = "loo_maj_at_k_biased"
    unbiased_for = "P[plurality vote over n-1 answers is correct] (Tang et al. Lemma 2)"
    binary_rewards_only = True
    requires = frozenset({"answers"})

    def advantages(self, rewards: Tensor, context: RuleContext) -> Tensor:
        return subtract_group_mean(tang_majority_advantage(rewards, context.answers))


# --------------------------------------------------------------------------- PKPO, k ≤ n


@lru_cache(maxsize=256)
def _pkpo_gap_weights(n: int, k: int) -> tuple[float, ...]:
    """a_m = n·C(m−1, k−1)/C(n, k) for sorted positions m = 1..n (0 for m < k), via log-gamma."""
    log_binom = lambda a, b: math.lgamma(a + 1) - math.lgamma(b + 1) - math.lgamma(a - b + 1)  # noqa: E731
    log_norm = math.log(n) - log_binom(n, k)
    return tuple(math.exp(log_norm + log_binom(m - 1, k - 1)) if m >= k else 0.0 for m in range(1, n + 1))


def pkpo_advantage(rewards: Tensor, k: int) -> Tensor:
    """Unbiased max@k advantage for 2 ≤ k ≤ n, sorted closed form (docs/math.md §3, PKPO eq. 33).

    A_i = (n/C(n,k)) Σ_{S∋i,|S|=k} (max_S r − max_{S∖i} r). Only subsets where i
    is the maximum contribute, with r_i minus the runner-up; counting the subsets
    whose runner-up is the j-th smallest reward gives, in ascending order,
    A_(i) = Σ_{j<i} n·C(j−1, k−2)/C(n, k)·(r_(i) − r_(j)), and summing the
    coefficients (hockey stick) telescopes it into
    ``A_(i) = Σ_{m=2}^{i} a_m (r_(m) − r_(m−1))``, ``a_m = n·C(m−1, k−1)/C(n, k)``:
    one cumulative sum of non-negative terms, O(n) per group, no cancellation,
    and tied rewards get exactly equal advantages. (It equals docs/math.md's
    n·s_i − k·ρ̂_{k−1}(r_{−i}).) Coefficients are computed in float64 log space,
    so large n does not overflow.
    """
    n = rewards.shape[1]
    ordered, order = rewards.sort(dim=1)
    gaps = torch.diff(ordered, dim=1, prepend=ordered[:, :1])
    weights = torch.tensor(_pkpo_gap_weights(n, k), dtype=torch.float64, device=rewards.device)
    sorted_advantage = (gaps * weights.to(rewards.dtype)).cumsum(dim=1)
    return torch.empty_like(rewards).scatter_(1, order, sorted_advantage)


@register_rule
class PKPO(RuleOptions):
    """PKPO / max@k for k ≤ n (Walder & Karkhanis 2025): unbiased for E[max of k]; k = 1 is RLOO, k = n is Tang.

    Its k is the test-time budget, the option ``budget``.
    """

    name = "pkpo"
    unbiased_for = "E[max of k rewards] (max@k / pass@k, 1 <= k <= n)"
    budget: StrictInt = Field(ge=1, description="Test-time budget k of max@k / pass@k, at most the group size n.")

    def check_group_size(self, group_size: int) -> None:
        if self.budget > group_size:
            raise ValueError(f"option budget ({self.budget}) must be <= the group size n = {group_size}")

    def advantages(self, rewards: Tensor, context: RuleContext) -> Tensor:
        if self.budget == 1:  # max of one sample is the mean reward; the k ≥ 2 formula needs a runner-up
            return rloo_advantage(rewards)
        return pkpo_advantage(rewards, self.budget)
