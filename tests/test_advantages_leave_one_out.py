"""PKPO and Tang leave-one-out rules against brute-force subset formulas (docs/math.md §3)."""

from __future__ import annotations

import itertools
import math
from collections import Counter
from fractions import Fraction

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from aligntrain.advantages import compute_advantages


def plurality_vote_correct(answers: list, correct: set) -> Fraction:
    """Plurality over parseable answers, uniform tie-break as an expectation; None never wins."""
    votes = Counter(a for a in answers if a is not None)
    if not votes:
        return Fraction(0)
    top = max(votes.values())
    winners = [a for a, c in votes.items() if c == top]
    return Fraction(sum(a in correct for a in winners), len(winners))


def brute_force_pkpo(rewards: list, k: int) -> list[Fraction]:
    """A_i = (n/C(n,k)) Σ_{S∋i, |S|=k} (max_S r − max_{S∖i} r) (PKPO eq. 33), over all subsets."""
    n = len(rewards)
    total = [Fraction(0)] * n
    for subset in itertools.combinations(range(n), k):
        best = max(rewards[j] for j in subset)
        for i in subset:
            total[i] += best - max(rewards[j] for j in subset if j != i)
    return [Fraction(n, math.comb(n, k)) * t for t in total]


def formulas_closed_form_pkpo(rewards: list[int], k: int) -> list[Fraction]:
    """docs/math.md §3's other closed form, exact: A_i = n·s_i − k·ρ̂_{k−1}(r_{−i}).

    s_(i) = [1{i≥k} C(i−1,k−1) r_(i) + Σ_{j>i} C(j−2,k−2) r_(j)]/C(n,k) and ρ̂ the
    max@(k−1) estimator of the other n−1 rewards, Σ_m C(m−1,k−2) r'_(m)/C(n−1,k−1).
    """
    n = len(rewards)
    order = sorted(range(n), key=lambda i: rewards[i])
    ranked = [rewards[i] for i in order]
    advantages = [Fraction(0)] * n
    for pos, i in enumerate(order, start=1):
        own = math.comb(pos - 1, k - 1) * ranked[pos - 1] if pos >= k else 0
        above = sum(math.comb(j - 2, k - 2) * ranked[j - 1] for j in range(pos + 1, n + 1))
        s_i = Fraction(own + above, math.comb(n, k))
        others = ranked[: pos - 1] + ranked[pos:]
        rho = Fraction(sum(math.comb(m - 1, k - 2) * others[m - 1] for m in range(1, n)), math.comb(n - 1, k - 1))
        advantages[i] = n * s_i - k * rho
    return advantages


def run(rule: str, rewards: list, **options) -> list[float]:
    return compute_advantages(rule, torch.tensor([rewards], dtype=torch.float64), **options)[0].tolist()


@settings(max_examples=60, deadline=None)
@given(
    rewards=st.lists(st.integers(-3, 3), min_size=2, max_size=7),
    data=st.data(),
)
def test_pkpo_matches_brute_force_subsets_with_ties(rewards, data):
    k = data.draw(st.integers(2, len(rewards)))
    expected = brute_force_pkpo(rewards, k)
    assert run("pkpo", [float(r) for r in rewards], budget=k) == pytest.approx([float(e) for e in expected], abs=1e-12)


@settings(max_examples=30, deadline=None)
@given(
    rewards=st.lists(st.floats(-5, 5, allow_nan=False, allow_infinity=False), min_size=2, max_size=8),
    data=st.data(),
)
def test_pkpo_matches_brute_force_subsets_continuous(rewards, data):
    k = data.draw(st.integers(2, len(rewards)))
    expected = brute_force_pkpo([Fraction(r) for r in rewards], k)
    assert run("pkpo", rewards, budget=k) == pytest.approx([float(e) for e in expected], abs=1e-9)


@pytest.mark.parametrize(("n", "k"), [(40, 2), (40, 20), (40, 39), (60, 30)])
def test_pkpo_large_groups_match_exact_rational_closed_form(n, k):
    """Where subsets are too many to enumerate, compare with docs/math.md's n·s_i − k·ρ̂ in exact arithmetic."""
    generator = torch.Generator().manual_seed(n + k)
    rewards = torch.randint(-20, 21, (n,), generator=generator).tolist()
    expected = [float(a) for a in formulas_closed_form_pkpo(rewards, k)]
    got = run("pkpo", [float(r) for r in rewards], budget=k)
    assert got == pytest.approx(expected, rel=1e-9, abs=1e-9)


def test_pkpo_huge_group_stays_finite():
    """C(1024, 512) overflows float64; the log-space coefficients do not."""
    rewards = torch.randn(2, 1024, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    advantages = compute_advantages("pkpo", rewards, budget=512)
    assert torch.isfinite(advantages).all()
    assert (advantages >= 0).all()  # max@k LOO advantages are never negative


@pytest.mark.parametrize("n", [2, 3, 5, 8])
def test_pkpo_with_k_equal_n_is_tang(n):
    rewards = torch.randn(16, n, generator=torch.Generator().manual_seed(n), dtype=torch.float64)
    rewards[0, :2] = 1.5  # a tied maximum or tied pair
    torch.testing.assert_close(
        compute_advantages("pkpo", rewards, budget=n), compute_advantages("loo_pass_at_k", rewards)
    )


def test_pkpo_with_k_1_is_rloo():
    rewards = torch.randn(8, 5, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    torch.testing.assert_close(compute_advantages("pkpo", rewards, budget=1), compute_advantages("rloo", rewards))


@settings(max_examples=40, deadline=None)
@given(rewards=st.lists(st.integers(-3, 3), min_size=2, max_size=7))
def test_tang_pass_at_k_matches_its_definition(rewards):
    """A_i = n·(max(r) − max(r_{−i})); the biased variant subtracts the mean (Tang et al. eqs. 2–3)."""
    n = len(rewards)
    expected = [n * (max(rewards) - max(rewards[:i] + rewards[i + 1 :])) for i in range(n)]
    floats = [float(r) for r in rewards]
    assert run("loo_pass_at_k", floats) == pytest.approx(expected, abs=1e-12)
    mean = Fraction(sum(expected), n)
    assert run("loo_pass_at_k_biased", floats) == pytest.approx([float(e - mean) for e in expected], abs=1e-12)


def test_tang_pass_at_k_hand_values():
    # only the unique best rollout moves, by n·(best − runner-up) = 4·(0.9 − 0.5)
    assert run("loo_pass_at_k", [0.1, 0.5, 0.9, 0.2]) == pytest.approx([0.0, 0.0, 1.6, 0.0])
    assert run("loo_pass_at_k", [0.1, 0.9, 0.9, 0.2]) == [0.0, 0.0, 0.0, 0.0]
    assert run("loo_pass_at_k_biased", [0.1, 0.5, 0.9, 0.2]) == pytest.approx([-0.4, -0.4, 1.2, -0.4])


def test_tang_majority_hand_values():
    """a = (b, b, a, c), b correct: dropping a b ties three classes, f = 1 → 1/3."""
    rewards = torch.tensor([[1.0, 1.0, 0.0, 0.0], [0.0, 1.0, 1.0, 0.0], [0.0, 0.0, 0.0, 0.0]])
    answers = [["b", "b", "a", "c"], [None, "x", "x", None], [None, None, "q", "q"]]
    got = compute_advantages("loo_maj_at_k", rewards, answers=answers)
    # group 2: x has 2 votes, None never wins, so dropping an x leaves x alone on top (f stays 1)
    # group 3: q wins (f = 0 since q is wrong); dropping a q keeps q on top: all 0
    expected = torch.tensor([[8 / 3, 8 / 3, 0.0, 0.0], [0.0, 0.0, 0.0, 0.0], [0.0, 0.0, 0.0, 0.0]])
    torch.testing.assert_close(got, expected)
    biased = compute_advantages("loo_maj_at_k_biased", rewards, answers=answers)
    torch.testing.assert_close(biased[0], torch.tensor([4 / 3, 4 / 3, -4 / 3, -4 / 3]))


def test_tang_majority_tie_with_wrong_class():
    """a = (x, y, x, y), x correct: f = 1/2; dropping an x makes y win (f = 0), dropping a y makes x win."""
    got = compute_advantages("loo_maj_at_k", torch.tensor([[1.0, 0.0, 1.0, 0.0]]), answers=[["x", "y", "x", "y"]])
    torch.testing.assert_close(got, torch.tensor([[2.0, -2.0, 2.0, -2.0]]))


def test_majority_answers_as_class_id_tensor_equal_answers_as_lists():
    rewards = torch.tensor([[1.0, 1.0, 0.0, 0.0, 0.0], [0.0, 1.0, 0.0, 1.0, 0.0]])
    answers = [["7", "7", "3", None, "3"], ["1", "2", None, "2", "5"]]
    ids = torch.tensor([[70, 70, 30, -1, 30], [10, 20, -1, 20, 50]])
    for rule in ("loo_maj_at_k", "loo_maj_at_k_biased"):
        torch.testing.assert_close(
            compute_advantages(rule, rewards, answers=ids), compute_advantages(rule, rewards, answers=answers)
        )


@settings(max_examples=200, deadline=None)
@given(
    groups=st.lists(
        st.lists(st.sampled_from(["a", "b", "c", "d", None]), min_size=2, max_size=9),
        min_size=1,
        max_size=4,
    ),
    correct=st.sets(st.sampled_from(["a", "b", "c", "d"]), max_size=2),
)
def test_tang_majority_matches_brute_force_leave_one_out(groups, correct):
    """A_i = n·(f(a) − f(a_{−i})) with f recomputed by a plain plurality count for every i."""
    n = len(groups[0])
    groups = [(g * n)[:n] for g in groups]  # one group size per batch
    rewards = torch.tensor([[1.0 if a in correct else 0.0 for a in g] for g in groups], dtype=torch.float64)
    got = compute_advantages("loo_maj_at_k", rewards, answers=groups)
    for g, answers in enumerate(groups):
        full = plurality_vote_correct(answers, correct)
        without = [plurality_vote_correct(answers[:i] + answers[i + 1 :], correct) for i in range(n)]
        expected = [float(n * (full - f)) for f in without]
        assert got[g].tolist() == pytest.approx(expected, abs=1e-12)
