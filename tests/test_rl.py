"""Strategy-aware RL through TRL: the rule's advantages reach the loss, state persists, failures are contained.

Rewards here are deterministic functions of the completion text, so every
advantage can be recomputed from the decoded completions that reached
``compute_loss``, independently of the trainer's own bookkeeping.
"""

from __future__ import annotations

import math
import threading
import time
from pathlib import Path

import pytest
import torch
from datasets import Dataset
from interruption import Crash

import aligntrain.training.rl as rl
from aligntrain.advantages import RewardHistory, compute_advantages, list_rules, parse_rule
from aligntrain.config import RLConfig
from aligntrain.problems import get_problem
from aligntrain.training.rl import StrategyGRPOTrainer, check_trl_version, safe_reward_fn, train_rl

torch.set_num_threads(1)

N = 4  # rollouts per prompt
BATCH = 8  # completions per step: two prompts
DIGITS = set("0123456789")


# --------------------------------------------------------------------------- fixtures and helpers


def length_mod_3(text, row):
    return float(len(text) % 3)


def first_char(text):
    """Answer class of the binary test problem: the first character (None for an empty completion)."""
    return text[:1] or None


def first_char_is_digit(text, row):
    return 1.0 if first_char(text) in DIGITS else 0.0


def _config(rule, options=None, steps=1, **kw):
    """The one RL configuration: schedule, group, sampling and the rule with its options."""
    schedule = dict(steps=steps, batch_size=BATCH, learning_rate=1e-3, lr_warmup_ratio=0.0, log_every=1)
    return RLConfig(
        rule={"name": rule, **(options or {})}, num_generations=N, max_completion_length=10, **{**schedule, **kw}
    )


def _trainer(tiny_model, arith_rows, tmp_path, config, reward, steps, answer_class=None, binary=None):
    model, tokenizer = tiny_model
    train = arith_rows["train"]
    data = Dataset.from_dict({c: [r[c] for r in train] for c in ("prompt", "answer")})
    config.rule.check_fits(binary_rewards=binary)
    return StrategyGRPOTrainer(
        model,
        [safe_reward_fn(reward, timeout_s=5.0)],
        config=config.model_copy(update={"steps": steps, "checkpoint_every": 100}),
        checkpoint_dir=tmp_path,
        seed=0,
        answer_class=answer_class,
        train_dataset=data,
        processing_class=tokenizer,
    )


def _capture_loss_inputs(trainer):
    """Record a copy of every batch that reaches ``compute_loss``."""
    seen = []
    original = trainer.compute_loss

    def spy(model, inputs, *args, **kwargs):
        seen.append({k: v.detach().clone() if torch.is_tensor(v) else v for k, v in inputs.items()})
        return original(model, inputs, *args, **kwargs)

    trainer.compute_loss = spy
    return seen


def _groups(inputs, tokenizer):
    """Rows of one step regrouped by prompt: (G, n) row indices and the decoded completion texts."""
    by_prompt = {}
    for i, (ids, mask) in enumerate(zip(inputs["prompt_ids"], inputs["prompt_mask"])):
        by_prompt.setdefault(tuple(ids[mask.bool()].tolist()), []).append(i)
    index = torch.tensor(list(by_prompt.values()))
    texts = [
        tokenizer.decode(ids[mask.bool()].tolist(), skip_special_tokens=True)
        for ids, mask in zip(inputs["completion_ids"], inputs["completion_mask"])
    ]
    return index, texts


def _teacher_forced_logps(model, inputs):
    """Summed log π(completion | prompt) per row by a plain forward pass (temperature 1), independent of TRL."""
    logps = []
    for p_ids, p_mask, c_ids, c_mask in zip(
        inputs["prompt_ids"], inputs["prompt_mask"], inputs["completion_ids"], inputs["completion_mask"]
    ):
        prompt, completion = p_ids[p_mask.bool()], c_ids[c_mask.bool()]
        ids = torch.cat([prompt, completion])[None]
        logp = torch.log_softmax(model(input_ids=ids).logits[0, :-1].float(), dim=-1)
        token_logp = logp.gather(-1, ids[0, 1:, None]).squeeze(-1)
        logps.append(token_logp[len(prompt) - 1 :].sum())
    return torch.stack(logps)


# --------------------------------------------------------------------------- the rule's advantages reach the loss


CASES = {
    "rloo": dict(rule="rloo", reward=length_mod_3),
    "pkpo_k2": dict(rule="pkpo", options={"budget": 2}, reward=length_mod_3),
    "loo_maj_at_k": dict(rule="loo_maj_at_k", reward=first_char_is_digit, answer_class=first_char, binary=True),
    "cat_best_of_n_history": dict(
        rule="cat_best_of_n", options={"budget": 8, "quantile": "history"}, reward=length_mod_3
    ),
    "tea": dict(rule="tea", options={"alpha": 0.5}, reward=length_mod_3),  # n = 4: the top 2 form the tail
}


@pytest.mark.parametrize("case", list(CASES))
def test_rule_advantages_reach_the_loss_and_history_persists(case, tiny_model, arith_rows, tmp_path):
    spec = CASES[case]
    rule, options, reward = spec["rule"], spec.get("options", {}), spec["reward"]
    answer_class = spec.get("answer_class")
    trainer = _trainer(
        tiny_model,
        arith_rows,
        tmp_path,
        _config(rule, options),
        reward,
        steps=2,
        answer_class=answer_class,
        binary=spec.get("binary"),
    )
    seen = _capture_loss_inputs(trainer)
    trainer.train()
    assert len(seen) == 2

    _, tokenizer = tiny_model
    history = RewardHistory()  # the test's own history, built from the recomputed rewards
    for step, inputs in enumerate(seen):
        index, texts = _groups(inputs, tokenizer)
        assert tuple(index.shape) == (BATCH // N, N)
        rewards = torch.tensor([[reward(texts[i], {}) for i in group] for group in index.tolist()])
        answers = [[answer_class(texts[i]) for i in group] for group in index.tolist()] if answer_class else None
        expected = compute_advantages(rule, rewards, answers=answers, history=history, step=step, **options)
        got = inputs["advantages"][index]
        torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-6)
    assert any(bool(inputs["advantages"].abs().gt(0).any()) for inputs in seen), "vacuous: all advantages 0"

    # The trainer's history holds both steps' rewards, stamped 0 and 1: step 2 saw step 1's.
    # (Rows reach the loss shuffled, so each step's rewards are compared as sorted values.)
    kept = trainer.reward_history
    assert kept.steps.tolist() == history.steps.tolist() == [0] * BATCH + [1] * BATCH
    for step in (0, 1):
        torch.testing.assert_close(
            kept.rewards[kept.steps == step].sort().values, history.rewards[history.steps == step].sort().values
        )


@pytest.mark.parametrize("loss_type", ["dapo", "dr_grpo"])
def test_loss_gradient_is_advantage_weighted_score(loss_type, tiny_model, arith_rows, tmp_path):
    """∇loss = −(1/Z) Σ_i A_i ∇ℓ_i with Z = completion tokens (dapo) or B·max_completion_length (dr_grpo);
    zero advantages give a zero gradient (beta = 0)."""
    model, _ = tiny_model
    config = _config("rloo", loss_type=loss_type)
    trainer = _trainer(tiny_model, arith_rows, tmp_path, config, length_mod_3, steps=1)
    params = [p for p in model.parameters() if p.requires_grad]
    checks = []
    original = trainer.compute_loss

    def spy(model_, inputs, *args, **kwargs):
        advantages = inputs["advantages"]
        assert advantages.abs().gt(0).any()
        got = torch.autograd.grad(original(model_, dict(inputs)), params)
        ell = _teacher_forced_logps(model, inputs)
        normaliser = {
            "dapo": inputs["completion_mask"].sum(),
            "dr_grpo": torch.tensor(len(ell) * config.max_completion_length),
        }[loss_type]
        want = torch.autograd.grad(-(advantages * ell).sum() / normaliser, params)
        zero = torch.autograd.grad(original(model_, {**inputs, "advantages": torch.zeros_like(advantages)}), params)
        checks.append((got, want, zero))
        return original(model_, inputs, *args, **kwargs)

    trainer.compute_loss = spy
    trainer.train()
    ((got, want, zero),) = checks
    for g, w, z in zip(got, want, zero):
        torch.testing.assert_close(g, w, rtol=1e-4, atol=1e-7)
        assert torch.equal(z, torch.zeros_like(z))


def test_rule_gets_the_sequence_logps(tiny_model, arith_rows, tmp_path, monkeypatch):
    """The logps the rule receives are the completions' summed log-probs under the sampling weights."""
    model, _ = tiny_model
    received = []

    def spy(rule, rewards, **kwargs):
        received.append((rule, kwargs))
        return compute_advantages(rule, rewards, **kwargs)

    monkeypatch.setattr(rl, "compute_advantages", spy)
    config = _config("cat_pass_at_n", {"budget": 8, "p_source": "sequence"})
    trainer = _trainer(tiny_model, arith_rows, tmp_path, config, first_char_is_digit, steps=1, binary=True)
    references = []
    original = trainer.compute_loss

    def loss_spy(model_, inputs, *args, **kwargs):  # weights are still those that sampled the batch
        with torch.no_grad():
            references.append(_teacher_forced_logps(model, inputs))
        return original(model_, inputs, *args, **kwargs)

    trainer.compute_loss = loss_spy
    trainer.train()
    ((rule, kwargs),), (reference,) = received, references
    assert tuple(kwargs["logps"].shape) == (BATCH // N, N)
    assert kwargs["logps"].dtype == torch.float64  # summed in float64: the CAT weights use 1 − exp(ℓ)
    # Rows reach the loss shuffled: compare sorted values.
    got, want = kwargs["logps"].flatten().sort().values, reference.flatten().sort().values.double()
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)
    assert kwargs["step"] == 0 and rule.name == "cat_pass_at_n" and rule.budget == 8


# --------------------------------------------------------------------------- unscorable rewards


def _raises_on_multiples_of_3(text, row):
    if len(text) % 3 == 0:
        raise ZeroDivisionError("simulated verifier crash")
    return float(len(text) % 3)


def _pkpo_k2(rewards):
    """PKPO with k = 2 by its subset definition (PKPO eq. 33): A_i = (2/(n−1)) Σ_{j≠i} max(r_i − r_j, 0)."""
    n = rewards.shape[1]
    return (2 / (n - 1)) * (rewards[:, :, None] - rewards[:, None, :]).clamp(min=0).sum(dim=2)


def test_unscorable_samples_get_zero_advantage_and_are_counted(tiny_model, arith_rows, tmp_path):
    _, tokenizer = tiny_model
    steps = 3
    config = _config("pkpo", {"budget": 2}, max_unscorable_fraction=1.0)  # this test wants many unscorable
    trainer = _trainer(tiny_model, arith_rows, tmp_path, config, _raises_on_multiples_of_3, steps=steps)
    seen = _capture_loss_inputs(trainer)
    trainer.train()
    assert trainer.state.global_step == steps  # training went on

    counts, zeroed = [], 0
    for inputs in seen:
        index, texts = _groups(inputs, tokenizer)
        lengths = torch.tensor([[len(texts[i]) for i in group] for group in index.tolist()])
        unscorable = lengths % 3 == 0
        raw = (lengths % 3).double()
        # Rule input: unscorable rewards replaced by the mean of the group's scored ones (0 if none).
        scored = (~unscorable).sum(1, keepdim=True)
        group_mean = torch.where(unscorable, 0.0, raw).sum(1, keepdim=True) / scored.clamp(min=1)
        filled = torch.where(unscorable, group_mean, raw)
        expected = _pkpo_k2(filled)
        zeroed += int((expected[unscorable] != 0).sum())  # the zeroing, not the fill, makes these 0
        expected[unscorable] = 0.0
        got = inputs["advantages"][index]
        torch.testing.assert_close(got.double(), expected, rtol=1e-5, atol=1e-6)
        counts.append(int(unscorable.sum()))
    assert zeroed > 0, "vacuous: no unscorable sample the rule would have given an advantage"
    logged = [entry["unscorable"] for entry in trainer.state.log_history if "unscorable" in entry]
    assert logged == counts
    assert trainer.unscorable_total == sum(counts)
    # The history keeps the scored rewards only.
    assert len(trainer.reward_history) == steps * BATCH - sum(counts)


def test_unscorable_binary_rule_sees_zero_and_no_answer(tiny_model, arith_rows, tmp_path, monkeypatch):
    """A binary rule cannot take a group mean: the unscorable rollout enters as reward 0 with answer None."""
    received = []

    def spy(rule, rewards, **kwargs):
        received.append((rewards.clone(), kwargs["answers"]))
        return compute_advantages(rule, rewards, **kwargs)

    monkeypatch.setattr(rl, "compute_advantages", spy)

    def reward(text, row):
        if first_char(text) == "Q":
            raise RuntimeError("simulated crash")
        return first_char_is_digit(text, row)

    config = _config("loo_maj_at_k")
    trainer = _trainer(tiny_model, arith_rows, tmp_path, config, reward, steps=3, answer_class=first_char, binary=True)
    trainer.train()
    crashed = 0
    for rewards, answers in received:
        assert set(rewards.flatten().tolist()) <= {0.0, 1.0}
        assert all(a != "Q" for group in answers for a in group)
        crashed += sum(1 for group in answers for a in group if a is None)
    assert trainer.unscorable_total > 0, "vacuous: no completion starts with Q"
    assert crashed >= trainer.unscorable_total


def test_safe_reward_fn_contains_failures():
    def score(text, row):
        if text == "raise":
            raise KeyError("boom")
        if text == "slow":
            time.sleep(5)
        returns = {"nan": math.nan, "inf": math.inf, "none": None, "str": "1", "ok": 0.5, "bool": True}
        return returns.get(text, float(len(row["answer"])))

    reward = safe_reward_fn(score, timeout_s=0.05)
    assert reward.__name__ == "score"
    completions = ["raise", "slow", "nan", "inf", "none", "str", "ok", "bool", "other"]
    start = time.monotonic()
    got = reward(
        prompts=["p"] * len(completions),
        completions=completions,
        completion_ids=[[0]] * len(completions),
        answer=["123"] * len(completions),
        trainer_state=None,
        log_extra=None,
        log_metric=None,
    )
    assert time.monotonic() - start < 2.0  # the 5 s sleep was interrupted
    assert got == [None, None, None, None, None, None, 0.5, 1.0, 3.0]
    # Conversational completions: the last message's text is scored.
    assert reward(prompts=["p"], completions=[[{"role": "assistant", "content": "ok"}]], answer=["1"]) == [0.5]


def test_safe_reward_fn_deadline_off_the_main_thread():
    """No SIGALRM outside the main thread: the late result is discarded instead."""
    reward = safe_reward_fn(lambda text, row: time.sleep(0.1) or 1.0, timeout_s=0.02)
    out = []
    worker = threading.Thread(target=lambda: out.append(reward(prompts=["p"], completions=["c"])))
    worker.start()
    worker.join()
    assert out == [[None]]
    with pytest.raises(ValueError, match="timeout_s"):
        safe_reward_fn(length_mod_3, timeout_s=0)


# --------------------------------------------------------------------------- validation before training


def test_config_rejects_bad_variants_naming_the_option():
    with pytest.raises(ValueError, match="unknown advantage rule") as err:
        _config("pass_at_k_magic")
    assert all(name in str(err.value) for name in list_rules())
    with pytest.raises(ValueError, match=r"option budget \(5\) must be <= the group size n = 4"):
        _config("pkpo", {"budget": 5})
    with pytest.raises(ValueError, match="option k: unknown option"):
        _config("rloo", {"k": 2})
    with pytest.raises(ValueError, match="decay"):  # caught by the dry run, when the config is built
        _config("cat_best_of_n", {"budget": 4, "quantile": "time_weighted"})
    _config("cat_best_of_n", {"budget": 4, "quantile": "time_weighted"}, history_decay=0.9)
    with pytest.raises(ValueError, match="needs binary rewards"):
        _config("loo_maj_at_k").rule.check_fits(binary_rewards=False)
    assert _config("pkpo", {"budget": 2}).rule == parse_rule("pkpo", {"budget": 2})
    assert _config("dr_grpo").resolved_loss_type == "dr_grpo"
    assert _config("rloo").resolved_loss_type == "dapo"


def test_train_rl_fails_before_building_the_trainer(tiny_model, arith_rows, tmp_path, monkeypatch):
    def no_trainer(*args, **kwargs):
        raise AssertionError("the trainer was built")

    monkeypatch.setattr(rl, "StrategyGRPOTrainer", no_trainer)
    model, tokenizer = tiny_model
    with pytest.raises(ValueError, match="needs binary rewards"):
        train_rl(
            model,
            tokenizer,
            arith_rows["train"],
            _config("loo_maj_at_k"),
            tmp_path,
            reward_fn=first_char_is_digit,
            answer_class=first_char,
            binary_rewards=False,
            seed=0,
        )


def test_the_trainer_needs_an_answer_parser_for_rules_that_vote(tiny_model, arith_rows, tmp_path):
    with pytest.raises(ValueError, match="needs parsed answers: pass answer_class"):
        _trainer(tiny_model, arith_rows, tmp_path, _config("loo_maj_at_k"), first_char_is_digit, steps=1)


def test_train_rl_with_the_arith_problem(tiny_model, arith_rows, tmp_path):
    """The registry's reward and answer parser plug straight in; each row's gold answer reaches the reward."""
    problem = get_problem("arith")
    model, tokenizer = tiny_model
    seen = []

    def reward(text, row):
        seen.append(row)
        return problem.reward(text, row)

    metrics = train_rl(
        model,
        tokenizer,
        arith_rows["train"],
        _config("loo_maj_at_k", steps=2),
        tmp_path / "ck",
        reward_fn=reward,
        answer_class=problem.answer_class,
        binary_rewards=problem.binary_rewards,
        seed=0,
    )
    assert metrics["resumed_from_step"] == 0.0 and metrics["unscorable_total"] == 0.0
    assert math.isfinite(metrics["reward"])
    assert len(seen) == 2 * BATCH
    by_prompt = {r["prompt"]: r for r in arith_rows["train"]}
    for row in seen:
        assert row["answer"] == by_prompt[row["prompt"]]["answer"] and "completion" not in row
    assert not (tmp_path / "ck").exists()


def test_a_run_that_trains_fewer_steps_than_asked_fails_and_saves_nothing(tiny_model, arith_rows, tmp_path):
    """A batch of more completions than the data can fill: TRL ends the run at step 0 without an error
    ("not a single sample"); the run must fail, naming it, and not publish the starting weights."""
    from aligntrain.errors import StageError

    model, tokenizer = tiny_model
    saved = []
    config = _config("rloo", steps=3, batch_size=400_000_000 // N * N)
    with pytest.raises(StageError, match=r"^training stopped at step 0 of the 3 asked for; nothing was saved as the"):
        train_rl(
            model,
            tokenizer,
            arith_rows["train"],
            config,
            tmp_path / "ck",
            reward_fn=length_mod_3,
            seed=0,
            save_final=lambda state_dict: saved.append(state_dict is None),
        )
    assert saved == []


#: TRL internals StrategyGRPOTrainer overrides or calls, with the parameters it relies on
TRL_INTERNALS = {
    "_calculate_rewards": ["self", "inputs", "prompts", "completions", "completion_ids_list"],
    "_generate_and_score_completions": ["self", "inputs"],
    "_get_per_token_logps_and_entropies": [
        "self",
        "model",
        "input_ids",
        "attention_mask",
        "logits_to_keep",
        "batch_size",
    ],
    "_save_checkpoint": ["self", "model", "trial"],
    "_load_optimizer_and_scheduler": ["self", "checkpoint"],
}


def test_the_trl_internals_the_trainer_relies_on():
    """A TRL upgrade that renames or re-signs one of these fails here, not in the middle of a run."""
    import inspect

    from trl import GRPOTrainer

    for method, parameters in TRL_INTERNALS.items():
        assert hasattr(GRPOTrainer, method), method
        signature = list(inspect.signature(getattr(GRPOTrainer, method)).parameters)
        assert signature[: len(parameters)] == parameters, (method, signature)
    # The attributes the overrides read.
    source = inspect.getsource(GRPOTrainer._generate_and_score_completions)
    for name in ("self._calculate_rewards(", '"advantages"', "old_per_token_logps", "self.num_generations"):
        assert name in source, name


def test_trainer_checks_the_pinned_trl_version(tiny_model, arith_rows, tmp_path, monkeypatch):
    with pytest.raises(RuntimeError, match=r"trl 1\.16\.x.*trl 1\.17\.0"):
        check_trl_version("1.17.0")
    check_trl_version("1.16.3")
    monkeypatch.setattr(rl.trl, "__version__", "2.0.0")
    with pytest.raises(RuntimeError, match="2.0.0"):
        _trainer(tiny_model, arith_rows, tmp_path, _config("rloo"), length_mod_3, steps=1)


# --------------------------------------------------------------------------- resuming


def test_interrupted_run_resumes_with_its_reward_history(tiny_model, arith_rows, tmp_path, monkeypatch):
    model, tokenizer = tiny_model
    calls = []

    def spy(rule, rewards, **kwargs):
        if rewards.shape[0] == BATCH // N:  # not the dry run's (1, n) group
            calls.append((kwargs["step"], len(kwargs["history"]), sorted(set(kwargs["history"].steps.tolist()))))
        return compute_advantages(rule, rewards, **kwargs)

    monkeypatch.setattr(rl, "compute_advantages", spy)
    config = _config("cat_best_of_n", {"budget": 8, "quantile": "history"})
    config = config.model_copy(update={"steps": 4, "checkpoint_every": 2})
    run = dict(reward_fn=length_mod_3, seed=0)
    with pytest.raises(KeyboardInterrupt):
        train_rl(model, tokenizer, arith_rows["train"], config, tmp_path / "ck", callbacks=[Crash(at_step=3)], **run)
    assert (tmp_path / "ck" / "checkpoint-2" / rl.RL_STATE_FILE).is_file()  # written inside the atomic save
    assert not list((tmp_path / "ck").glob("tmp-checkpoint-*"))
    assert [c[0] for c in calls] == [0, 1, 2]

    calls.clear()
    metrics = train_rl(model, tokenizer, arith_rows["train"], config, tmp_path / "ck", **run)
    assert metrics["resumed_from_step"] == 2.0
    # The resumed run starts at step 2 with the history saved at step 2: steps 0 and 1, two batches.
    assert calls == [(2, 2 * BATCH, [0, 1]), (3, 3 * BATCH, [0, 1, 2])]
    assert not (tmp_path / "ck").exists()


def test_a_step_of_mostly_unscorable_rewards_stops_training(tiny_model, arith_rows, tmp_path):
    """Broken gold answers make every reward unscorable: the first step fails, naming the share and the key."""
    model, tokenizer = tiny_model
    unscorable = lambda text, row: None  # noqa: E731  (what a grader returns on a broken gold answer)
    with pytest.raises(
        RuntimeError, match=r"step 0: 8 of 8 rewards are unscorable \(100% > rl.max_unscorable_fraction"
    ):
        train_rl(
            model,
            tokenizer,
            arith_rows["train"],
            _config("grpo", steps=2),
            tmp_path / "ck",
            reward_fn=unscorable,
            seed=0,
        )
    tolerant = _config("grpo", steps=2, max_unscorable_fraction=1.0)
    metrics = train_rl(model, tokenizer, arith_rows["train"], tolerant, tmp_path / "ck2", reward_fn=unscorable, seed=0)
    assert metrics["unscorable_total"] == 2 * BATCH


def test_vllm_generation_happens_inside_the_method_the_trainer_wraps():
    """With ``use_vllm`` (colocated or server), TRL samples in ``_generate_single_turn``, reached from
    ``_generate_and_score_completions`` before ``_calculate_rewards``: the two methods StrategyGRPOTrainer
    wraps see vLLM's completions as they see transformers' ones, so the rule hook still makes the advantages.
    (The GPU check, scripts/gpu_check.sh, runs one such step for real.)"""
    import dataclasses
    import inspect

    from trl import GRPOConfig, GRPOTrainer

    outer = inspect.getsource(GRPOTrainer._generate_and_score_completions)
    assert "self._generate(" in outer and "self._calculate_rewards(" in outer
    assert outer.index("self._generate(") < outer.index("self._calculate_rewards("), "rewards are scored after sampling"
    assert "self._generate_single_turn(" in inspect.getsource(GRPOTrainer._generate)
    single = inspect.getsource(GRPOTrainer._generate_single_turn)
    assert "if self.use_vllm" in single, "the vLLM branch is inside the sampling method"
    fields = {f.name: f for f in dataclasses.fields(GRPOConfig)}
    assert fields["use_vllm"].default is False and fields["vllm_mode"].default == "colocate"
    assert "'server'" in fields["vllm_mode"].metadata["help"] and "'colocate'" in fields["vllm_mode"].metadata["help"]


def test_the_rl_section_turns_vllm_rollouts_on_in_trl():
    from aligntrain.config import RLConfig
    from aligntrain.training.rl import grpo_config

    off = grpo_config(RLConfig(rule="grpo", batch_size=8, num_generations=4), Path("unused"), seed=0)
    assert off.use_vllm is False
    on = grpo_config(
        RLConfig(rule="grpo", batch_size=8, num_generations=4, vllm="server", vllm_gpu_memory_utilization=0.5),
        Path("unused"),
        seed=0,
    )
    assert (on.use_vllm, on.vllm_mode, on.vllm_gpu_memory_utilization) == (True, "server", 0.5)
    with pytest.raises(ValueError, match="vllm"):
        RLConfig(rule="grpo", vllm="sometimes")
