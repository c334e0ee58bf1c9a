"""Unbiasedness of the leave-one-out rules by exact enumeration (docs/math.md §3 scale convention).

A softmax policy π_θ over a few actions with fixed rewards (and answer classes).
For a group size n we enumerate every ordered rollout group, weight it by its
probability, and compute the exact expectation of (1/n) Σ_i A_i ∇_θ log π(y_i)
(∇_θ log π(a) = e_a − π). The reference is a central finite difference of the
objective J(θ), itself computed by enumeration in plain Python (no code under test).
"""

from __future__ import annotations

import itertools
from collections import Counter
from fractions import Fraction

import numpy as np
import pytest
import torch

from aligntrain.advantages import compute_advantages

THETA = np.array([0.3, -0.5, 1.1, 0.0])
#: rewards of the four actions (a tie between actions 1 and 3 on purpose)
REWARDS = np.array([0.2, 1.0, -0.4, 1.0])
#: answer classes of the four actions for majority vote; "7" is the correct answer
ANSWERS = ("7", "3", "7", None)
CORRECT = "7"
BINARY_REWARDS = np.array([1.0 if a == CORRECT else 0.0 for a in ANSWERS])


def softmax(theta: np.ndarray) -> np.ndarray:
    e = np.exp(theta - theta.max())
    return e / e.sum()


def expectation_over_groups(theta: np.ndarray, size: int, value) -> float:
    """Σ over ordered groups of ``size`` actions of P(group)·value(group)."""
    pi = softmax(theta)
    return sum(np.prod(pi[list(group)]) * value(group) for group in itertools.product(range(len(theta)), repeat=size))


def finite_difference(objective, theta: np.ndarray, h: float = 1e-5) -> np.ndarray:
    grad = np.zeros_like(theta)
    for a in range(len(theta)):
        step = np.zeros_like(theta)
        step[a] = h
        grad[a] = (objective(theta + step) - objective(theta - step)) / (2 * h)
    return grad


def expected_rule_gradient(rule: str, n: int, rewards: np.ndarray, with_answers: bool = False, **options) -> np.ndarray:
    """E[(1/n) Σ_i A_i ∇log π(y_i)] over all ordered groups of n rollouts, exactly."""
    pi = softmax(THETA)
    groups = list(itertools.product(range(len(THETA)), repeat=n))
    batch = torch.tensor([[rewards[a] for a in g] for g in groups], dtype=torch.float64)
    context = {"answers": [[ANSWERS[a] for a in g] for g in groups]} if with_answers else {}
    advantages = compute_advantages(rule, batch, **context, **options).numpy()
    grad = np.zeros_like(THETA)
    for group, adv in zip(groups, advantages):
        probability = np.prod(pi[list(group)])
        for action, a_i in zip(group, adv):
            score = -pi.copy()
            score[action] += 1.0
            grad += probability * a_i * score / n
    return grad


# --------------------------------------------------------------------------- objectives (plain Python)


def mean_reward(theta: np.ndarray) -> float:
    return float(softmax(theta) @ REWARDS)


def expected_max(k: int, rewards: np.ndarray = REWARDS):
    return lambda theta: expectation_over_groups(theta, k, lambda g: max(rewards[a] for a in g))


def plurality_vote_correct(answers) -> Fraction:
    """Plurality over parseable answers, uniform tie-break as an expectation; None never wins."""
    votes = Counter(a for a in answers if a is not None)
    if not votes:
        return Fraction(0)
    top = max(votes.values())
    winners = [a for a, c in votes.items() if c == top]
    return Fraction(sum(a == CORRECT for a in winners), len(winners))


def expected_majority(m: int):
    def value(group) -> float:
        return float(plurality_vote_correct([ANSWERS[a] for a in group]))

    return lambda theta: expectation_over_groups(theta, m, value)


# --------------------------------------------------------------------------- tests


@pytest.mark.parametrize("n", [2, 3, 4])
def test_rloo_is_unbiased_for_mean_reward(n):
    expected = finite_difference(mean_reward, THETA)
    np.testing.assert_allclose(expected_rule_gradient("rloo", n, REWARDS), expected, atol=1e-8)


@pytest.mark.parametrize("rule", ["grpo", "dr_grpo"])
@pytest.mark.parametrize("n", [2, 3, 4])
def test_grpo_is_n_minus_1_over_n_of_the_mean_reward_gradient(rule, n):
    expected = (n - 1) / n * finite_difference(mean_reward, THETA)
    np.testing.assert_allclose(expected_rule_gradient(rule, n, REWARDS), expected, atol=1e-8)
    # ... so it is *not* unbiased at scale 1
    assert np.abs(expected_rule_gradient(rule, n, REWARDS) - finite_difference(mean_reward, THETA)).max() > 1e-3


@pytest.mark.parametrize("n", [2, 3, 4])
def test_loo_pass_at_k_is_unbiased_for_expected_max_of_n(n):
    expected = finite_difference(expected_max(n), THETA)
    np.testing.assert_allclose(expected_rule_gradient("loo_pass_at_k", n, REWARDS), expected, atol=1e-8)


@pytest.mark.parametrize("n", [2, 3, 4])
def test_biased_loo_pass_at_k_optimises_the_n_minus_1_sample_objective(n):
    """Tang Lemma 2: E[(1/n) Σ_i max(r_{−i})] = E[max of n − 1 draws]."""
    expected = finite_difference(expected_max(n - 1), THETA)
    np.testing.assert_allclose(expected_rule_gradient("loo_pass_at_k_biased", n, REWARDS), expected, atol=1e-8)


@pytest.mark.parametrize(("n", "k"), [(n, k) for n in (2, 3, 4) for k in range(1, n + 1)])
def test_pkpo_is_unbiased_for_expected_max_of_k(n, k):
    expected = finite_difference(expected_max(k), THETA)
    np.testing.assert_allclose(expected_rule_gradient("pkpo", n, REWARDS, budget=k), expected, atol=1e-8)


@pytest.mark.parametrize("n", [2, 3, 4])
def test_loo_maj_at_k_is_unbiased_for_majority_vote_of_n(n):
    expected = finite_difference(expected_majority(n), THETA)
    got = expected_rule_gradient("loo_maj_at_k", n, BINARY_REWARDS, with_answers=True)
    np.testing.assert_allclose(got, expected, atol=1e-8)
    assert np.abs(expected).max() > 1e-2  # the objective has a real gradient here


@pytest.mark.parametrize("n", [2, 3, 4])
def test_biased_loo_maj_at_k_optimises_majority_vote_of_n_minus_1(n):
    expected = finite_difference(expected_majority(n - 1), THETA)
    got = expected_rule_gradient("loo_maj_at_k_biased", n, BINARY_REWARDS, with_answers=True)
    np.testing.assert_allclose(got, expected, atol=1e-8)


def test_biased_and_unbiased_majority_differ():
    """The biased variant is not the unbiased one in disguise."""
    unbiased = expected_rule_gradient("loo_maj_at_k", 4, BINARY_REWARDS, with_answers=True)
    biased = expected_rule_gradient("loo_maj_at_k_biased", 4, BINARY_REWARDS, with_answers=True)
    assert np.abs(unbiased - biased).max() > 1e-3
