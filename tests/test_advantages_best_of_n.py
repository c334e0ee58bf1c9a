"""BoN-max mean/second and Chow BoN-RL against hand-computed values (docs/math.md §3, TEA App. B.1)."""

from __future__ import annotations

from fractions import Fraction as F

import pytest
import torch

from aligntrain.advantages import compute_advantages


def run(rule: str, rows, **options) -> torch.Tensor:
    return compute_advantages(rule, t64(rows), **options)


def t64(rows) -> torch.Tensor:
    return torch.tensor(rows, dtype=torch.float64)


def test_bon_max_mean_hand_values():
    # selected: the first arg-max (index 1); r_max − mean = 0.7 − 0.45
    torch.testing.assert_close(run("bon_max_mean", [[0.1, 0.7, 0.3, 0.7]]), t64([[0.0, 0.25, 0.0, 0.0]]))
    torch.testing.assert_close(run("bon_max_mean", [[2.0, -1.0, 0.5]]), t64([[1.5, 0.0, 0.0]]))


def test_bon_max_second_hand_values():
    torch.testing.assert_close(run("bon_max_second", [[0.1, 0.9, 0.3, 0.7]]), t64([[0.0, 0.2, 0.0, 0.0]]))
    # a tied maximum: the runner-up equals the best, no signal
    assert (run("bon_max_second", [[0.1, 0.7, 0.3, 0.7]]) == 0).all()


def chow(correct: bool, solved: F, budget: int, clip: F = F(3)) -> float:
    failed = 1 - solved
    if correct:
        value = budget * failed ** (budget - 1) / (1 - failed**budget)
    else:
        value = -budget * failed / (1 - failed)
    return float(max(-clip, min(clip, value)))


@pytest.mark.parametrize(
    ("rewards", "budget", "expected"),
    [
        # p_fail = 3/4, N = 4: correct 4·(27/64)/(175/256) = 432/175; incorrect −12 → clipped −3
        ([1.0, 0.0, 0.0, 0.0], 4, [F(432, 175), -3, -3, -3]),
        # p_fail = 1/4, N = 2: correct (1/2)/(15/16) = 8/15; incorrect −(1/2)/(3/4) = −2/3
        ([1.0, 1.0, 1.0, 0.0], 2, [F(8, 15), F(8, 15), F(8, 15), F(-2, 3)]),
        # N = 1: correct 1/(1 − p_fail) = 4/3; incorrect −p_fail/(1 − p_fail) = −1/3
        ([1.0, 1.0, 1.0, 0.0], 1, [F(4, 3), F(4, 3), F(4, 3), F(-1, 3)]),
    ],
)
def test_chow_bon_hand_values(rewards, budget, expected):
    got = run("chow_bon", [rewards], budget=budget)[0]
    assert got.tolist() == pytest.approx([float(e) for e in expected], abs=1e-12)
    solved = F(int(sum(rewards)), len(rewards))
    assert got.tolist() == pytest.approx([chow(r == 1.0, solved, budget) for r in rewards], abs=1e-12)


def test_chow_bon_clip_option_and_large_budget():
    rewards = [[1.0] + [0.0] * 63]  # p_fail = 63/64, N = 256: correct weight ≈ 256·e^{−4}/(1 − e^{−4})
    got = run("chow_bon", rewards, budget=256, clip=100.0)[0]
    solved = F(1, 64)
    assert got[0].item() == pytest.approx(chow(True, solved, 256, F(100)), rel=1e-10)
    assert got[1].item() == pytest.approx(-100.0)  # −256·63 clipped at −100


@pytest.mark.parametrize("value", [0.0, 1.0])
def test_chow_bon_equal_rewards_give_zero(value):
    got = run("chow_bon", [[value] * 5], budget=8)
    assert (got == 0).all()
