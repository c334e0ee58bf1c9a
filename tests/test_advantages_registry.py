"""Registry, option validation and input checks of ``aligntrain.advantages``."""

from __future__ import annotations

import math

import pytest
import torch

from aligntrain.advantages import (
    MajorityThresholdState,
    RewardHistory,
    compute_advantages,
    get_rule,
    list_rules,
    register_rule,
    validate_rule_options,
)

#: the options every rule needs to run (the rest keep their defaults)
MINIMAL_OPTIONS = {
    "bon_max_mean": {},
    "bon_max_second": {},
    "cat_best_of_n": {"n_target": 4},
    "cat_majority": {"n_target": 4},
    "cat_pass_at_n": {"n_target": 4},
    "chow_bon": {"n_target": 4},
    "dr_grpo": {},
    "grpo": {},
    "grpo_z": {},
    "loo_maj_at_k": {},
    "loo_maj_at_k_biased": {},
    "loo_pass_at_k": {},
    "loo_pass_at_k_biased": {},
    "pkpo": {"k": 3},
    "prefix_tea": {},
    "rloo": {},
    "tea": {},
}
BINARY_RULES = {"cat_majority", "cat_pass_at_n", "chow_bon", "loo_maj_at_k", "loo_maj_at_k_biased"}
G, N = 3, 8


def answers_for(rewards: torch.Tensor) -> list[list]:
    """Answer classes consistent with binary rewards: correct → "42", wrong → one of two wrong answers."""
    return [["42" if r > 0 else ("1" if i % 2 else None) for i, r in enumerate(row.tolist())] for row in rewards]


def run(rule: str, rewards: torch.Tensor, **extra) -> torch.Tensor:
    context = {"answers": answers_for(rewards)} if rule in BINARY_RULES else {}
    return compute_advantages(rule, rewards, **context, **{**MINIMAL_OPTIONS[rule], **extra})


def sample_rewards(rule: str, dtype=torch.float32) -> torch.Tensor:
    generator = torch.Generator().manual_seed(0)
    if rule in BINARY_RULES:
        return torch.randint(0, 2, (G, N), generator=generator).to(dtype)
    return torch.randn(G, N, generator=generator).to(dtype)


def test_every_rule_is_listed_here():
    assert list_rules() == sorted(MINIMAL_OPTIONS)


@pytest.mark.parametrize("rule", sorted(MINIMAL_OPTIONS))
def test_spec_describes_the_rule(rule):
    spec = get_rule(rule)
    assert spec.name == rule and spec.description
    assert spec.binary_rewards_only == (rule in BINARY_RULES)
    validate_rule_options(rule, N, MINIMAL_OPTIONS[rule], binary_rewards=True)


def test_unbiased_rules_declare_their_objective():
    unbiased = {r for r in list_rules() if get_rule(r).unbiased_for}
    assert unbiased == {"rloo", "pkpo", "loo_pass_at_k", "loo_pass_at_k_biased", "loo_maj_at_k", "loo_maj_at_k_biased"}


@pytest.mark.parametrize("rule", sorted(MINIMAL_OPTIONS))
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_output_shape_dtype_detached_finite(rule, dtype):
    rewards = sample_rewards(rule, dtype).requires_grad_(True)
    advantages = run(rule, rewards)
    assert advantages.shape == rewards.shape and advantages.dtype == dtype
    assert not advantages.requires_grad
    assert torch.isfinite(advantages).all()


@pytest.mark.parametrize("rule", sorted(MINIMAL_OPTIONS))
def test_equal_rewards_give_zero_advantages(rule):
    values = (1.0,) if rule in BINARY_RULES else (0.0, 0.3, -7.25)
    for value in values:
        advantages = run(rule, torch.full((G, N), value))
        assert (advantages == 0).all(), (rule, value, advantages)


@pytest.mark.parametrize("rule", sorted(BINARY_RULES))
def test_all_wrong_groups_are_zero_except_the_majority_silence_penalty(rule):
    advantages = run(rule, torch.zeros(G, N))
    expected = -0.5 if rule == "cat_majority" else 0.0  # 000 eq. 103, on by default for majority
    assert (advantages == expected).all()


def test_grpo_z_equal_rewards_in_one_group_only():
    rewards = torch.tensor([[0.1] * 4, [0.0, 1.0, 2.0, 3.0]])
    advantages = compute_advantages("grpo_z", rewards)
    assert (advantages[0] == 0).all()
    std = math.sqrt(5 / 3)
    torch.testing.assert_close(advantages[1], torch.tensor([-1.5, -0.5, 0.5, 1.5]) / (std + 1e-4))


def test_baseline_hand_values():
    rewards = torch.tensor([[1.0, 0.0, 0.0, 3.0]], dtype=torch.float64)  # mean 1
    grpo = compute_advantages("grpo", rewards)
    torch.testing.assert_close(grpo, torch.tensor([[0.0, -1.0, -1.0, 2.0]], dtype=torch.float64))
    torch.testing.assert_close(compute_advantages("dr_grpo", rewards), compute_advantages("grpo", rewards))
    # RLOO: r_i − mean of the others = (0 − 1, 0 − 4/3, 0 − 4/3, 3 − 1/3)
    rloo = compute_advantages("rloo", rewards)
    torch.testing.assert_close(rloo, torch.tensor([[0.0, -4 / 3, -4 / 3, 8 / 3]], dtype=torch.float64))


def test_history_is_appended_whatever_the_rule():
    history = RewardHistory(capacity=100)
    compute_advantages("grpo", torch.ones(2, 3), history=history, step=5)
    assert len(history) == 6 and history.last_step == 5


# --------------------------------------------------------------------------- ValueError paths


def raises(match: str):
    return pytest.raises(ValueError, match=match)


def test_unknown_rule_lists_the_known_ones():
    with raises(r"unknown advantage rule 'nope'.*grpo_z"):
        compute_advantages("nope", torch.zeros(2, 2))
    with raises("unknown advantage rule"):
        validate_rule_options("nope", 4, {})
    with raises("unknown advantage rule"):
        get_rule("nope")


@pytest.mark.parametrize(
    ("rewards", "match"),
    [
        ([[1.0, 0.0]], "rewards must be a torch.Tensor"),
        (torch.zeros(4), r"rewards must have shape \(G, n\)"),
        (torch.zeros(0, 4), "rewards must be non-empty"),
        (torch.zeros(3, 0), "rewards must be non-empty"),
        (torch.zeros(3, 1), "group size n must be >= 2"),
        (torch.zeros(2, 3, dtype=torch.long), "rewards must be a floating-point tensor"),
        (torch.tensor([[0.0, float("nan")]]), "rewards contain NaN or inf"),
        (torch.tensor([[0.0, float("inf")]]), "rewards contain NaN or inf"),
    ],
)
def test_bad_rewards(rewards, match):
    with raises(match):
        compute_advantages("grpo", rewards)


@pytest.mark.parametrize(
    ("rule", "options", "match"),
    [
        ("grpo", {"k": 2}, r"rule 'grpo': unknown option\(s\) \['k'\]"),
        ("pkpo", {}, "option k must be an integer"),
        ("pkpo", {"k": 9}, r"option k must be an integer in \[1, 8\], i.e. <= n"),
        ("pkpo", {"k": 0}, "option k must be"),
        ("pkpo", {"k": 2.0}, "option k must be an integer"),
        ("chow_bon", {"n_target": 0}, "option n_target must be an integer >= 1"),
        ("chow_bon", {"n_target": 4, "clip": 0.0}, "option clip"),
        ("cat_pass_at_n", {}, "option n_target must be an integer >= 1, got None"),
        ("cat_pass_at_n", {"n_target": 0}, "option n_target"),
        ("cat_pass_at_n", {"n_target": 4, "p_source": "oracle"}, "option p_source must be one of"),
        ("cat_pass_at_n", {"n_target": 4, "log_weighted": 1}, "option log_weighted must be True or False"),
        ("cat_pass_at_n", {"n_target": 4, "clip": -1.0}, "option clip"),
        ("cat_pass_at_n", {"n_target": 4, "all_wrong_penalty": -0.5}, "option all_wrong_penalty"),
        ("cat_pass_at_n", {"n_target": 4, "batch_normalize": "yes"}, "option batch_normalize"),
        ("cat_majority", {"n_target": 4, "k": 5}, r"option k must be an integer in \[1, 4\], i.e. <= n_target"),
        ("cat_majority", {"n_target": 4, "k": 2, "threshold_ema": 0.9}, "option threshold_ema applies to the dynamic"),
        ("cat_majority", {"n_target": 4, "threshold_ema": 1.0}, "option threshold_ema must be"),
        ("cat_best_of_n", {"n_target": 4, "quantile": "global"}, "option quantile must be one of"),
        ("tea", {"alpha": 0.0}, "option alpha must be a real number in"),
        ("tea", {"alpha": 1.0}, "option alpha"),
        ("tea", {"n_target": 0}, "option n_target"),
        ("tea", {"positive_part": None}, "option positive_part"),
        ("prefix_tea", {"prefixes": (4, 6)}, "option prefixes must be"),
        ("prefix_tea", {"prefixes": (6, 4, 8)}, "option prefixes must be"),
        ("prefix_tea", {"prefixes": (1, 8)}, "option prefixes must be"),
        ("prefix_tea", {"prefixes": (8,)}, "option prefixes must be"),
    ],
)
def test_bad_options_fail_before_training(rule, options, match):
    with raises(match):
        validate_rule_options(rule, N, options)
    with raises(match):
        compute_advantages(rule, sample_rewards(rule), answers=answers_for(sample_rewards(rule)), **options)


def test_bad_group_size_fails_before_training():
    with raises("group_size"):
        validate_rule_options("grpo", 1, {})
    with raises("prefixes defaults to"):
        validate_rule_options("prefix_tea", 3, {})


@pytest.mark.parametrize("rule", sorted(BINARY_RULES))
def test_binary_rule_on_continuous_problem_fails_early(rule):
    with raises(f"rule '{rule}' needs binary rewards"):
        validate_rule_options(rule, N, MINIMAL_OPTIONS[rule], binary_rewards=False)
    with raises("rewards must be binary"):
        compute_advantages(rule, torch.full((2, 4), 0.5), answers=[["a"] * 4] * 2, **MINIMAL_OPTIONS[rule])


def test_missing_context():
    rewards = torch.tensor([[1.0, 0.0, 0.0]])
    with raises("needs context 'answers'"):
        compute_advantages("loo_maj_at_k", rewards)
    with raises("needs context 'answers'"):
        compute_advantages("cat_majority", rewards, n_target=4)
    with raises("needs context 'logps'"):
        compute_advantages("cat_pass_at_n", rewards, n_target=4, p_source="sequence")
    with raises("needs context 'threshold_state'"):
        compute_advantages("cat_majority", rewards, n_target=4, threshold_ema=0.9, answers=[["a", "b", "c"]])
    with raises("needs context 'history'"):
        compute_advantages("cat_best_of_n", rewards, n_target=4, quantile="history")
    with raises("needs context 'step'"):
        compute_advantages(
            "cat_best_of_n", rewards, n_target=4, quantile="time_weighted", history=RewardHistory(decay=0.9)
        )


def test_mismatched_context_shapes():
    rewards = torch.tensor([[1.0, 0.0, 0.0], [0.0, 1.0, 0.0]])
    with raises("answers must be a list of G = 2"):
        compute_advantages("loo_maj_at_k", rewards, answers=[["a", "b", "c"]])
    with raises(r"answers\[1\] must be a list of n = 3"):
        compute_advantages("loo_maj_at_k", rewards, answers=[["a", "b", "c"], ["a", "b"]])
    with raises("answers as a tensor must be integer class ids"):
        compute_advantages("loo_maj_at_k", rewards, answers=torch.zeros(2, 3))
    with raises("logps must be a tensor of the rewards' shape"):
        compute_advantages("cat_pass_at_n", rewards, n_target=4, p_source="sequence", logps=torch.zeros(2, 2))


def test_bad_context_values():
    rewards = torch.tensor([[1.0, 0.0, 0.0]])
    with raises(r"logps must be <= 0 \(sequence probability p = exp\(logps\) outside \[0, 1\]\)"):
        compute_advantages(
            "cat_pass_at_n", rewards, n_target=4, p_source="sequence", logps=torch.tensor([[0.5, -1.0, -1.0]])
        )
    with raises("logps contain NaN"):
        nan_logps = torch.tensor([[float("nan"), -1.0, -1.0]])
        compute_advantages("cat_pass_at_n", rewards, n_target=4, p_source="sequence", logps=nan_logps)
    with raises("answers and rewards disagree: rollouts with the same answer class"):
        compute_advantages("loo_maj_at_k", rewards, answers=[["a", "a", "b"]])
    with raises(r"an unparseable answer \(None\) has reward 1"):
        compute_advantages("loo_maj_at_k", rewards, answers=[[None, "a", "b"]])
    with raises("answers must be hashable"):
        compute_advantages("loo_maj_at_k", rewards, answers=[[["a"], "a", "b"]])
    with raises("step must be an integer >= 0"):
        compute_advantages("grpo", rewards, step=-1)
    with raises("history must be a RewardHistory"):
        compute_advantages("grpo", rewards, history=[1.0])
    with raises("threshold_state must be a MajorityThresholdState"):
        compute_advantages("grpo", rewards, threshold_state=3.0)


def test_time_weighted_history_errors():
    rewards = torch.tensor([[1.0, 0.0, 0.5]])
    with raises("needs a history created with a decay"):
        compute_advantages(
            "cat_best_of_n", rewards, n_target=4, quantile="time_weighted", history=RewardHistory(), step=0
        )
    history = RewardHistory(decay=0.9)
    history.append(torch.zeros(3), step=5)
    with raises(r"step \(4\) must be >= the history's last step \(5\)"):
        compute_advantages("cat_best_of_n", rewards, n_target=4, quantile="time_weighted", history=history, step=4)


def test_state_object_errors():
    with raises("capacity must be an integer >= 1"):
        RewardHistory(capacity=0)
    with raises("decay must be None or a real number in"):
        RewardHistory(decay=1.5)
    with raises("step must be an integer >= 0"):
        RewardHistory().append(torch.zeros(2), step=-3)
    with raises("contain NaN"):
        RewardHistory().append(torch.tensor([float("nan")]), step=0)
    with raises("batch_threshold must be finite"):
        MajorityThresholdState().update(float("inf"), 0.5)


def test_registering_twice_or_with_unknown_context_fails():
    with raises("registered twice"):
        register_rule("grpo")(lambda rewards, context: rewards)
    with raises("requires unknown context"):
        register_rule("new_rule", requires=("reward_model",))
