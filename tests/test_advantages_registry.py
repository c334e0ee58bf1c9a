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
    parse_rule,
    register_rule,
)
from aligntrain.advantages.registry import RuleOptions

#: the options every rule needs to run (the rest keep their defaults)
MINIMAL_OPTIONS = {
    "bon_max_mean": {},
    "bon_max_second": {},
    "cat_best_of_n": {"budget": 4},
    "cat_majority": {"budget": 4},
    "cat_pass_at_n": {"budget": 4},
    "chow_bon": {"budget": 4},
    "dr_grpo": {},
    "grpo": {},
    "grpo_z": {},
    "loo_maj_at_k": {},
    "loo_maj_at_k_biased": {},
    "loo_pass_at_k": {},
    "loo_pass_at_k_biased": {},
    "pkpo": {"budget": 3},
    "prefix_tea": {"alpha": 0.5},  # n = 8: prefixes (4, 8) need α·4 ≥ 2
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
    assert spec.name == rule and spec.summary()
    assert spec.binary_rewards_only == (rule in BINARY_RULES)
    parsed = parse_rule(rule, MINIMAL_OPTIONS[rule], group_size=N, binary_rewards=True)
    assert isinstance(parsed, spec) and parsed.name == rule
    for option in spec.model_fields.values():
        assert option.description, (rule, option)


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
    if rule == "cat_majority":  # CAT eq. 103, on by default for majority, scaled by the weight (App. K.3)
        assert (advantages < 0).all()
        advantages = compute_advantages(
            rule, torch.zeros(G, N), **{**MINIMAL_OPTIONS[rule], "k": 2, "all_wrong_penalty_placement": "after_weight"}
        )
        assert (advantages == -0.5).all()
    else:
        assert (advantages == 0.0).all()


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
        parse_rule("nope", {}, group_size=4)
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
        ("grpo", {"k": 2}, r"advantage rule 'grpo': option k: unknown option"),
        ("pkpo", {}, "option budget: Field required"),
        ("pkpo", {"budget": 9}, r"rule 'pkpo': option budget \(9\) must be <= the group size n = 8"),
        ("pkpo", {"budget": 0}, "option budget: Input should be greater than or equal to 1"),
        ("pkpo", {"budget": 2.0}, "option budget: Input should be a valid integer"),
        ("pkpo", {"budget": True}, "option budget: Input should be a valid integer"),
        ("chow_bon", {"budget": 0}, "option budget: Input should be greater than or equal to 1"),
        ("chow_bon", {"budget": 4, "clip": 0.0}, "option clip: Input should be greater than 0"),
        ("cat_pass_at_n", {}, "option budget: Field required"),
        ("cat_pass_at_n", {"budget": 0}, "option budget"),
        ("cat_pass_at_n", {"budget": 4, "p_source": "oracle"}, "option p_source: Input should be 'empirical' or"),
        ("cat_pass_at_n", {"budget": 4, "log_weighted": 1}, "option log_weighted: Input should be a valid boolean"),
        ("cat_pass_at_n", {"budget": 4, "clip": -1.0}, "option clip"),
        ("cat_pass_at_n", {"budget": 4, "clip": True}, "option clip: must be a number, not a boolean"),
        ("cat_pass_at_n", {"budget": 4, "clip": math.inf}, "option clip: Input should be a finite number"),
        ("cat_pass_at_n", {"budget": 4, "all_wrong_penalty": -0.5}, "option all_wrong_penalty"),
        ("cat_pass_at_n", {"budget": 4, "batch_normalize": "yes"}, "option batch_normalize"),
        ("cat_majority", {"budget": 4, "k": 5}, r"option k \(5\) must be <= budget \(4\)"),
        ("cat_majority", {"budget": 4, "k": 2, "threshold_ema": 0.9}, "option threshold_ema applies to the dynamic"),
        ("cat_majority", {"budget": 4, "threshold_ema": 1.0}, "option threshold_ema: Input should be less than 1"),
        ("cat_best_of_n", {"budget": 4, "quantile": "global"}, "option quantile: Input should be 'in_batch',"),
        ("tea", {"alpha": 0.0}, "option alpha: Input should be greater than 0"),
        ("tea", {"alpha": 1.0}, "option alpha"),
        ("tea", {"budget": 0}, "option budget"),
        ("tea", {"positive_part": None}, "option positive_part"),
        ("prefix_tea", {"prefixes": (4, 6)}, "option prefixes must end at the group size n = 8"),
        ("prefix_tea", {"prefixes": (6, 4, 8)}, "option prefixes: prefixes must be"),
        ("prefix_tea", {"prefixes": (1, 8)}, "option prefixes: prefixes must be"),
        ("prefix_tea", {"prefixes": (8,)}, "option prefixes: prefixes must be"),
        ("prefix_tea", {"prefixes": "48"}, "option prefixes: Input should be a valid tuple"),
    ],
)
def test_bad_options_fail_before_training(rule, options, match):
    with raises(match):
        parse_rule(rule, options, group_size=N)
    with raises(match):
        compute_advantages(rule, sample_rewards(rule), answers=answers_for(sample_rewards(rule)), **options)


def test_bad_group_size_fails_before_training():
    with raises("group_size"):
        parse_rule("grpo", {}, group_size=1)
    with raises("prefixes defaults to"):
        parse_rule("prefix_tea", {}, group_size=3)


@pytest.mark.parametrize("rule", sorted(BINARY_RULES))
def test_binary_rule_on_continuous_problem_fails_early(rule):
    with raises(f"rule '{rule}' needs binary rewards"):
        parse_rule(rule, MINIMAL_OPTIONS[rule], group_size=N, binary_rewards=False)
    with raises("rewards must be binary"):
        compute_advantages(rule, torch.full((2, 4), 0.5), answers=[["a"] * 4] * 2, **MINIMAL_OPTIONS[rule])


def test_missing_context():
    rewards = torch.tensor([[1.0, 0.0, 0.0]])
    with raises("needs context 'answers'"):
        compute_advantages("loo_maj_at_k", rewards)
    with raises("needs context 'answers'"):
        compute_advantages("cat_majority", rewards, budget=4)
    with raises("needs context 'logps'"):
        compute_advantages("cat_pass_at_n", rewards, budget=4, p_source="sequence")
    with raises("needs context 'threshold_state'"):
        compute_advantages("cat_majority", rewards, budget=4, threshold_ema=0.9, answers=[["a", "b", "c"]])
    with raises("needs context 'history'"):
        compute_advantages("cat_best_of_n", rewards, budget=4, quantile="history")
    with raises("needs context 'step'"):
        compute_advantages(
            "cat_best_of_n", rewards, budget=4, quantile="time_weighted", history=RewardHistory(decay=0.9)
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
        compute_advantages("cat_pass_at_n", rewards, budget=4, p_source="sequence", logps=torch.zeros(2, 2))


def test_bad_context_values():
    rewards = torch.tensor([[1.0, 0.0, 0.0]])
    with raises(r"logps must be <= 0 \(sequence probability p = exp\(logps\) outside \[0, 1\]\)"):
        compute_advantages(
            "cat_pass_at_n", rewards, budget=4, p_source="sequence", logps=torch.tensor([[0.5, -1.0, -1.0]])
        )
    with raises("logps contain NaN"):
        nan_logps = torch.tensor([[float("nan"), -1.0, -1.0]])
        compute_advantages("cat_pass_at_n", rewards, budget=4, p_source="sequence", logps=nan_logps)
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
            "cat_best_of_n", rewards, budget=4, quantile="time_weighted", history=RewardHistory(), step=0
        )
    history = RewardHistory(decay=0.9)
    history.append(torch.zeros(3), step=5)
    with raises(r"step \(4\) must be >= the history's last step \(5\)"):
        compute_advantages("cat_best_of_n", rewards, budget=4, quantile="time_weighted", history=history, step=4)


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

        @register_rule
        class AnotherGRPO(RuleOptions):
            name = "grpo"

    with raises("requires unknown context"):

        class NeedsAModel(RuleOptions):
            name = "new_rule"
            requires = frozenset({"reward_model"})


def test_a_parsed_rule_runs_as_its_name_does_and_takes_no_more_options():
    rewards = sample_rewards("pkpo")
    parsed = parse_rule("pkpo", {"budget": 3}, group_size=N)
    torch.testing.assert_close(compute_advantages(parsed, rewards), compute_advantages("pkpo", rewards, budget=3))
    with raises("already parsed"):
        compute_advantages(parsed, rewards, budget=2)
    with raises(r"rule 'pkpo': option budget \(3\) must be <= the group size n = 2"):
        compute_advantages(parsed, rewards[:, :2])
