"""CAT rules (CAT App. B, C, J–M; docs/math.md §3) against hand-computed weights on tiny groups.

Every expected weight below is worked out by hand as an exact fraction; the
GRPO-Z advantage it multiplies is recomputed here with the ``statistics`` module.
"""

from __future__ import annotations

import math
import statistics
from fractions import Fraction as F

import pytest
import torch

from aligntrain.advantages import MajorityThresholdState, RewardHistory, compute_advantages


def grpo_z(rows: list[list[float]]) -> torch.Tensor:
    """(r − mean)/(stdev_ddof1 + 1e−4), row by row, 0 for equal rewards."""
    out = []
    for row in rows:
        mean, std = statistics.fmean(row), statistics.stdev(row)
        out.append([0.0 if std == 0 else (r - mean) / (std + 1e-4) for r in row])
    return torch.tensor(out, dtype=torch.float64)


def weights(rows: list[list[F]]) -> torch.Tensor:
    return torch.tensor([[float(w) for w in row] for row in rows], dtype=torch.float64)


def t64(rows) -> torch.Tensor:
    return torch.tensor(rows, dtype=torch.float64)


# --------------------------------------------------------------------------- best-of-N


IN_BATCH_REWARDS = [[0.1, 0.5, 0.5, 0.9], [0.3, 0.3, 0.3, 0.8]]
# q = (#{r_j < r_i} + 1)/(n + 1): group 1 (1, 2, 2, 4)/5, group 2 (1, 1, 1, 4)/5; w = N q^{N−1}, N = 3
IN_BATCH_WEIGHTS = [[F(3, 25), F(12, 25), F(12, 25), F(48, 25)], [F(3, 25), F(3, 25), F(3, 25), F(48, 25)]]


def test_best_of_n_in_batch_quantile_weights_multiply_grpo_z():
    got = compute_advantages("cat_best_of_n", t64(IN_BATCH_REWARDS), budget=3, batch_normalize=False)
    torch.testing.assert_close(got, weights(IN_BATCH_WEIGHTS) * grpo_z(IN_BATCH_REWARDS))


def test_best_of_n_batch_normalisation_is_over_the_whole_batch():
    """w ← w / mean_batch(w) (CAT eq. 81): batch mean (75 + 57)/200 = 0.66, not per prompt."""
    got = compute_advantages("cat_best_of_n", t64(IN_BATCH_REWARDS), budget=3)  # normalised by default
    normalised = weights(IN_BATCH_WEIGHTS) / 0.66
    torch.testing.assert_close(got, normalised * grpo_z(IN_BATCH_REWARDS))
    assert normalised.mean().item() == pytest.approx(1.0)
    assert normalised[0].mean().item() == pytest.approx(75 / 66)  # per-prompt means differ from 1


def test_weight_multiplies_the_grpo_z_advantage_never_the_reward():
    rewards = t64(IN_BATCH_REWARDS)
    got = compute_advantages("cat_best_of_n", rewards, budget=3, batch_normalize=False)
    z = grpo_z(IN_BATCH_REWARDS)
    nonzero = z != 0
    torch.testing.assert_close((got / z)[nonzero], weights(IN_BATCH_WEIGHTS)[nonzero])
    folded = compute_advantages("grpo_z", weights(IN_BATCH_WEIGHTS) * rewards)
    assert (got - folded).abs().max() > 0.1


def test_best_of_n_history_quantile_and_fifo_append():
    """q = (#{h < r} + 1)/(|H| + 2) from the history *before* the batch; then the batch is appended."""
    history = RewardHistory(capacity=5)
    history.append(torch.tensor([0.0, 0.2, 0.4, 0.6]), step=0)
    rewards = [[0.5, 0.1, 0.7, -1.0]]
    got = compute_advantages(
        "cat_best_of_n", t64(rewards), budget=2, quantile="history", batch_normalize=False, history=history, step=1
    )
    # below = (3, 1, 4, 0) of |H| = 4; w = 2q
    expected_weights = [[2 * F(4, 6), 2 * F(2, 6), 2 * F(5, 6), 2 * F(1, 6)]]
    torch.testing.assert_close(got, weights(expected_weights) * grpo_z(rewards))
    assert history.rewards.tolist() == pytest.approx([0.6, 0.5, 0.1, 0.7, -1.0])  # FIFO, capacity 5
    assert history.steps.tolist() == [0, 1, 1, 1, 1]


def test_history_quantile_is_clamped():
    history = RewardHistory()
    history.append(torch.ones(2000), step=0)
    rewards = [[0.0, 2.0]]  # q = 1/2002 → 0.001 and 2001/2002 → 0.999
    got = compute_advantages(
        "cat_best_of_n", t64(rewards), budget=2, quantile="history", batch_normalize=False, history=history
    )
    torch.testing.assert_close(got, t64([[2 * 0.001, 2 * 0.999]]) * grpo_z(rewards))


def test_time_weighted_quantile_weighs_items_by_decay_to_the_age():
    """γ = 1/2 at step 3: items at steps 0, 1, 2 weigh 1/8, 1/4, 1/2 (CAT eq. 80)."""
    history = RewardHistory(decay=0.5)
    for step, value in enumerate([0.0, 1.0, 2.0]):
        history.append(torch.tensor([value]), step=step)
    rewards = [[1.5, 0.5]]
    got = compute_advantages(
        "cat_best_of_n",
        t64(rewards),
        budget=2,
        quantile="time_weighted",
        batch_normalize=False,
        history=history,
        step=3,
    )
    total = F(1, 8) + F(1, 4) + F(1, 2)
    q = [(F(1, 8) + F(1, 4) + 1) / (total + 2), (F(1, 8) + 1) / (total + 2)]
    torch.testing.assert_close(got, weights([[2 * q[0], 2 * q[1]]]) * grpo_z(rewards))


def test_time_weighted_with_decay_one_is_the_plain_history_quantile():
    rewards = torch.randn(4, 6, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    past = torch.randn(300, generator=torch.Generator().manual_seed(1))
    plain, timed = RewardHistory(), RewardHistory(decay=1.0)
    for history in (plain, timed):
        history.append(past, step=0)
        history.append(past[:100] + 0.5, step=4)
    a = compute_advantages("cat_best_of_n", rewards, budget=4, quantile="history", history=plain, step=7)
    b = compute_advantages("cat_best_of_n", rewards, budget=4, quantile="time_weighted", history=timed, step=7)
    torch.testing.assert_close(a, b)


def test_empty_history_gives_equal_weights_so_grpo_z_after_normalisation():
    history = RewardHistory()
    rewards = torch.randn(3, 5, generator=torch.Generator().manual_seed(2), dtype=torch.float64)
    got = compute_advantages("cat_best_of_n", rewards, budget=8, quantile="history", history=history)
    torch.testing.assert_close(got, compute_advantages("grpo_z", rewards))
    assert len(history) == 15 and history.steps.tolist() == [0] * 15
    compute_advantages("cat_best_of_n", rewards, budget=8, quantile="history", history=history)
    assert history.last_step == 1  # step=None appends at the step after the last one


def test_best_of_n_weight_is_clipped():
    history = RewardHistory()
    history.append(torch.ones(2000), step=0)
    rewards = [[0.0, 2.0]]  # q = 0.001 and 0.999; w = 100 q^99: 100·0.999^99 ≈ 90.6 is clipped to 50
    got = compute_advantages(
        "cat_best_of_n", t64(rewards), budget=100, quantile="history", history=history, batch_normalize=False
    )
    torch.testing.assert_close(got, t64([[100 * 0.001**99, 50.0]]) * grpo_z(rewards))


# --------------------------------------------------------------------------- Pass@N


def test_pass_at_n_log_weighted_empirical_p_is_the_sft_weight():
    """Default: F(N, p) with p = (c+1)/(n+2); c = 1 of 4 → p = 1/3, N = 4 → F = (4·8/81)/(65/81) = 32/65."""
    rewards = [[1.0, 0.0, 0.0, 0.0]]
    got = compute_advantages("cat_pass_at_n", t64(rewards), budget=4)
    torch.testing.assert_close(got, F(32, 65).__float__() * grpo_z(rewards))


def test_pass_at_n_raw_weight_with_sequence_probability():
    """p = exp(clamp(ℓ, −50, 0)) clamped to [1e−10, 1 − 1e−10] (CAT App. J.3); w = N(1−p)^{N−1}."""
    rewards = [[1.0, 0.0, 1.0, 0.0]]
    logps = torch.log(t64([[0.2, 0.5, 0.9, 1e-30]]))
    got = compute_advantages(
        "cat_pass_at_n", t64(rewards), budget=4, log_weighted=False, p_source="sequence", logps=logps
    )
    expected_w = [[4 * 0.8**3, 4 * 0.5**3, 4 * 0.1**3, 4 * (1 - 1e-10) ** 3]]
    torch.testing.assert_close(got, t64(expected_w) * grpo_z(rewards))


def test_pass_at_n_raw_weight_is_clipped():
    rewards = [[1.0, 0.0, 0.0]]
    logps = t64([[-30.0, -30.0, -30.0]])  # p ≈ 1e−13: w ≈ N = 100, clipped to 50
    got = compute_advantages(
        "cat_pass_at_n", t64(rewards), budget=100, log_weighted=False, p_source="sequence", logps=logps
    )
    torch.testing.assert_close(got, 50.0 * grpo_z(rewards))


def test_all_wrong_penalty_is_scaled_by_the_weight_by_default():
    """CAT App. K.3: A ← A^{GRPO-Z} − penalty on an all-wrong group (eq. 103), then w·A (eq. 83)."""
    rewards = t64([[0.0, 0.0, 0.0], [1.0, 0.0, 1.0], [1.0, 1.0, 1.0]])
    default = compute_advantages("cat_pass_at_n", rewards, budget=4)
    assert (default[0] == 0).all() and (default[2] == 0).all()
    penalised = compute_advantages("cat_pass_at_n", rewards, budget=4, all_wrong_penalty=0.5)
    # p = 1/5; F(4, 1/5) = 4·(1/5)(4/5)³ / (1 − (4/5)⁴) = 256/369
    torch.testing.assert_close(penalised[0], t64([-0.5 * 256 / 369] * 3))
    torch.testing.assert_close(penalised[1:], default[1:])  # other groups untouched
    majority = compute_advantages("cat_majority", rewards, budget=4, k=2)  # CAT eq. 103: on by default
    torch.testing.assert_close(majority[0], t64([-0.5 * float(majority_weight(4, 2, F(1, 5)))] * 3))  # 192/125
    assert (majority[2] == 0).all()


def test_all_wrong_penalty_after_the_weight_is_exactly_minus_the_penalty():
    rewards = t64([[0.0, 0.0, 0.0], [1.0, 0.0, 1.0]])
    options = {"budget": 4, "all_wrong_penalty": 0.5, "all_wrong_penalty_placement": "after_weight"}
    penalised = compute_advantages("cat_pass_at_n", rewards, **options)
    torch.testing.assert_close(penalised[0], t64([-0.5] * 3))
    torch.testing.assert_close(penalised[1], compute_advantages("cat_pass_at_n", rewards, budget=4)[1])
    majority = compute_advantages("cat_majority", rewards, k=2, **options)
    torch.testing.assert_close(majority[0], t64([-0.5] * 3))


def test_majority_silence_penalty_depends_on_how_the_wrong_answers_agree():
    """N = 8, n = 8, all wrong, p = 1/10, raw weight, dynamic threshold (CAT eqs. 100–103).

    One repeated wrong answer: c_max 8 → k 5, w = 8·C(7,4)·10⁻⁴·0.9³ = 0.0204120 → −0.0102060.
    Eight distinct wrong answers: c_max 1 → k 2, w = 8·7·0.1·0.9⁶ = 2.9760696 → −1.4880348.
    """
    rewards = torch.zeros(2, 8, dtype=torch.float64)
    answers = [["3"] * 8, [str(a) for a in range(8)]]
    got = compute_advantages("cat_majority", rewards, answers=answers, budget=8)
    assert majority_weight(8, 5, F(1, 10)) == F(204120, 10**7) and majority_weight(8, 2, F(1, 10)) == F(29760696, 10**7)
    torch.testing.assert_close(got[0], t64([-0.0102060] * 8), rtol=0, atol=1e-12)
    torch.testing.assert_close(got[1], t64([-1.4880348] * 8), rtol=0, atol=1e-12)


@pytest.mark.parametrize("logp", [-1e-4, -3e-6, -2e-7, -1e-8])
def test_sequence_weights_keep_their_precision_from_float32_logps(logp):
    """The trainer's log-probabilities are float32; p = exp(ℓ) and w = N(1−p)^{N−1} are formed in float64.

    Reference: the same float32 value of ℓ carried exactly into 40-digit Decimal arithmetic.
    float64 resolves 1 − p to ~1.1e−16/|ℓ| relative, so w = N(1−p)^7 to ~8e−16/|ℓ|; in
    float32 1 − p rounds to a multiple of 6e−8 and w was off by up to ~50% (or 0).
    """
    from decimal import Decimal, localcontext

    logps = torch.full((1, 4), logp, dtype=torch.float32)
    rewards = t64([[1.0, 0.0, 0.0, 0.0]])
    got = compute_advantages(
        "cat_pass_at_n", rewards, budget=8, log_weighted=False, p_source="sequence", logps=logps, clip=1e300
    )
    with localcontext() as context:
        context.prec = 40
        p = Decimal(float(logps[0, 0])).exp()
        weight = 8 * (1 - p) ** 7
    expected = float(weight) * grpo_z([[1.0, 0.0, 0.0, 0.0]])
    torch.testing.assert_close(got, expected, rtol=1e-15 / abs(logp) * 8, atol=0)


# --------------------------------------------------------------------------- majority vote

MAJ_REWARDS = [[1.0, 1.0, 0.0, 0.0], [1.0, 0.0, 0.0, 0.0], [1.0, 0.0, 0.0, 0.0]]
MAJ_ANSWERS = [["7", "7", "3", "3"], ["7", None, None, "3"], ["7", "1", "2", "3"]]


def majority_weight(budget: int, k: int, p: F) -> F:
    """N·C(N−1, k−1) p^{k−1} (1−p)^{N−k}."""
    return budget * math.comb(budget - 1, k - 1) * p ** (k - 1) * (1 - p) ** (budget - k)


def test_majority_dynamic_threshold_hand_values():
    """N = 8, n = 4: k = max(2, min(5, ⌊8 c_max/4⌋ + 1)).

    group 1: wrong "3" ×2 → c_max 2 → k 5, p = 3/6; group 2: None ×2 (one class) → k 5,
    p = 2/6; group 3: three single wrong answers → c_max 1 → k 3, p = 2/6.
    """
    got = compute_advantages("cat_majority", t64(MAJ_REWARDS), answers=MAJ_ANSWERS, budget=8)
    expected = [
        [majority_weight(8, 5, F(1, 2))] * 4,
        [majority_weight(8, 5, F(1, 3))] * 4,
        [majority_weight(8, 3, F(1, 3))] * 4,
    ]
    assert expected[0][0] == F(35, 16) and expected[2][0] == F(5376, 2187)
    torch.testing.assert_close(got, weights(expected) * grpo_z(MAJ_REWARDS))


def test_majority_fixed_threshold_needs_no_answers():
    got = compute_advantages("cat_majority", t64(MAJ_REWARDS), budget=8, k=4)
    expected = [[majority_weight(8, 4, p)] * 4 for p in (F(3, 6), F(2, 6), F(2, 6))]
    torch.testing.assert_close(got, weights(expected) * grpo_z(MAJ_REWARDS))


def test_majority_threshold_ema_persists_across_steps():
    """k̄ ← β k̄ + (1−β) mean_g k_g; every prompt uses round(k̄), half up."""
    state = MajorityThresholdState()
    third = [MAJ_REWARDS[2]]
    first = compute_advantages(
        "cat_majority",
        t64([MAJ_REWARDS[0], MAJ_REWARDS[2]]),
        answers=[MAJ_ANSWERS[0], MAJ_ANSWERS[2]],
        budget=8,
        threshold_ema=0.5,
        threshold_state=state,
    )
    assert state.value == 4.0  # mean of the dynamic thresholds (5, 3)
    expected_third = float(majority_weight(8, 4, F(1, 3)))  # k = 4, not its own dynamic 3
    torch.testing.assert_close(first[1], expected_third * grpo_z(third)[0])
    ema_options = {"budget": 8, "threshold_ema": 0.5, "threshold_state": state}
    second = compute_advantages("cat_majority", t64(third), answers=[MAJ_ANSWERS[2]], **ema_options)
    assert state.value == 3.5  # 0.5·4 + 0.5·3 → k = 4
    torch.testing.assert_close(second, expected_third * grpo_z(third))
    third_step = compute_advantages("cat_majority", t64(third), answers=[MAJ_ANSWERS[2]], **ema_options)
    assert state.value == 3.25  # → k = 3
    torch.testing.assert_close(third_step, float(majority_weight(8, 3, F(1, 3))) * grpo_z(third))
