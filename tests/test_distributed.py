"""SFT and RL under ``accelerate launch --num_processes 2`` on CPU (gloo): sharding, gathering, DDP, resuming.

Two launches of tests/distributed_driver.py (see its docstring for the scenarios) write what
each rank saw; every check below recomputes the expected value here, in one process, from
the rows and completion texts the ranks recorded:

- SFT: each rank trains on its own shard of the data; the gradient that reaches the optimizer
  is the mean over *both* ranks' rows of F(N, p)·∇(−ℓ), by an independent teacher-forced ℓ;
  both ranks end with the same weights.
- RL, groups split across processes (2 rollouts per rank, groups of 4): the advantages that
  reach ``compute_loss`` on each rank are the rule's on the whole group, by brute force
  (PKPO eq. 33 over all 2-subsets; Tang maj@k from the plurality vote with and without
  each answer); the reward history holds both ranks' rewards.
- RL with a reward history, interrupted at step 3 and resumed by a fresh 2-process launch:
  the checkpoint's rule state holds both ranks' rewards of steps 0–1, the resumed run starts
  at step 2 with exactly that history and re-samples the same completions on each rank (its
  own RNG state), and every step's advantages are ``cat_best_of_n``'s on the gathered groups.

Launch: ``accelerate launch --multi_gpu --num_processes 2`` with CUDA hidden. accelerate's
``--cpu`` flag launches a single process unless MPI is set up; ``--multi_gpu`` starts the
processes through torch.distributed.run, and the trainers' ``use_cpu`` (no CUDA) makes the
group MULTI_CPU with the gloo backend, which the test asserts.
"""

from __future__ import annotations

import copy
import itertools
import json
import math
import os
import signal
import subprocess
import sys
from collections import Counter
from fractions import Fraction
from pathlib import Path

import pytest
import torch

from aligntrain.advantages import RewardHistory, compute_advantages
from aligntrain.launch import free_port
from aligntrain.losses import pass_at_n_weight

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parent.parent
DRIVER = Path(__file__).resolve().parent / "distributed_driver.py"
WORLD = 2
N = 4  # group size of every RL scenario
SFT_N = 4  # the pass@N budget of the SFT scenario
DIGITS = set("0123456789")
LAUNCH_TIMEOUT_S = 300  # one launch takes ~15 s on 2 idle cores


# --------------------------------------------------------------------------- launching


def _launch(out_dir: Path, *scenarios: str) -> None:
    command = [
        sys.executable,
        "-m",
        "accelerate.commands.launch",  # `accelerate launch`, from this interpreter
        "--multi_gpu",
        "--num_processes",
        str(WORLD),
        "--num_machines",
        "1",
        "--gpu_ids",
        "all",
        "--mixed_precision",
        "no",
        "--dynamo_backend",
        "no",
        "--num_cpu_threads_per_process",
        "1",
        "--main_process_port",
        str(free_port()),
        str(DRIVER),
        str(out_dir),
        *scenarios,
    ]
    env = {
        **os.environ,
        "CUDA_VISIBLE_DEVICES": "",  # CPU processes even on a GPU machine
        "OMP_NUM_THREADS": "1",
        "HF_HOME": str(out_dir / "hf_home"),  # no accelerate config file from the user's cache
        "HF_HUB_OFFLINE": "1",
        "HF_HUB_DISABLE_TELEMETRY": "1",
        "TOKENIZERS_PARALLELISM": "false",
    }
    # Its own session, so that a hang (a deadlocked collective) can be ended with both workers.
    with subprocess.Popen(
        command,
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    ) as launcher:
        try:
            output, _ = launcher.communicate(timeout=LAUNCH_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            os.killpg(launcher.pid, signal.SIGKILL)
            output, _ = launcher.communicate()
            pytest.fail(f"launch of {scenarios} ran past {LAUNCH_TIMEOUT_S} s (a hang?):\n{output[-6000:]}")
    if launcher.returncode != 0:
        pytest.fail(f"launch of {scenarios} failed ({launcher.returncode}):\n{output[-6000:]}")


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> Path:
    out_dir = tmp_path_factory.mktemp("distributed")
    _launch(out_dir, "sft", "rl_groups", "rl_history_crash")
    _launch(out_dir, "rl_history_resume")  # a fresh process group resumes from the checkpoint
    return out_dir


def _ranks(runs: Path, scenario: str) -> tuple[list[dict], list[dict]]:
    """Per rank (index = rank): the JSON record and the saved tensors."""
    records = [json.loads((runs / scenario / f"rank{r}.json").read_text()) for r in range(WORLD)]
    tensors = [torch.load(runs / scenario / f"rank{r}.pt", weights_only=True) for r in range(WORLD)]
    return records, tensors


def _assert_same_weights(states: list[dict[str, torch.Tensor]], initial: dict[str, torch.Tensor] | None = None):
    for name, value in states[0].items():
        for other in states[1:]:
            assert torch.equal(value, other[name]), f"{name} differs across ranks"
    if initial is not None:
        assert any(not torch.equal(states[0][k], v) for k, v in initial.items()), "vacuous: no weight moved"


# --------------------------------------------------------------------------- SFT


def _completion_logp(model, tokenizer, row) -> torch.Tensor:
    """Summed log π(completion + EOS | prompt), by teacher forcing, independent of TRL."""
    prompt = tokenizer(row["prompt"])["input_ids"]
    full = tokenizer(row["prompt"] + row["completion"])["input_ids"] + [tokenizer.eos_token_id]
    ids = torch.tensor([full])
    logits = model(input_ids=ids).logits[0, :-1]
    logp = torch.log_softmax(logits.float(), dim=-1).gather(-1, ids[0, 1:, None]).squeeze(-1)
    return logp[len(prompt) - 1 :].sum()


def test_sft_shards_the_data_and_averages_the_gradient(runs, tiny_model, arith_rows):
    records, tensors = _ranks(runs, "sft")
    assert [r["process_index"] for r in records] == [0, 1]
    assert all(r["world_size"] == WORLD and r["distributed_type"] == "DistributedType.MULTI_CPU" for r in records)
    assert all(not r["checkpoint_dir_left"] and math.isfinite(r["metrics"]["train_loss"]) for r in records)

    # Each step, each rank trained on 2 rows of its own; no row twice in the first epoch.
    by_text = {r["prompt"] + r["completion"]: r for r in arith_rows["train"][:16]}
    steps = [[batch["texts"] for batch in r["batches"]] for r in records]
    assert [len(s) for s in steps] == [3, 3] and all(len(texts) == 2 for s in steps for texts in s)
    seen = [text for s in steps for texts in s for text in texts]
    assert len(set(seen)) == len(seen) == 12 and set(seen) <= set(by_text)

    # The driver's model is the fixture's, so the reference below starts from the same weights.
    model, tokenizer = tiny_model
    _assert_same_weights([tensors[0]["initial"], model.state_dict()])

    # Step 0: the gradient both ranks hold (after DDP's all-reduce, before clipping) is the
    # mean over the union of the two shards of F(N, p)·∇(−ℓ) (docs/math.md §2).
    rows = [by_text[text] for s in steps for text in s[0]]
    model.zero_grad()
    total = 0
    for row in rows:
        ell = _completion_logp(model, tokenizer, row)
        total = total + pass_at_n_weight(ell.detach().exp().double(), SFT_N).float() * (-ell)
    (total / len(rows)).backward()
    for name, param in model.named_parameters():
        for rank in range(WORLD):
            torch.testing.assert_close(tensors[rank]["step0_grads"][name], param.grad, rtol=1e-4, atol=1e-6)
    _assert_same_weights([t["final"] for t in tensors], initial=tensors[0]["initial"])


# --------------------------------------------------------------------------- RL: groups split across processes


def length_mod_3(text: str) -> Fraction:
    return Fraction(len(text) % 3)


def first_char(text: str) -> str | None:
    return text[:1] or None


def first_char_is_digit(text: str) -> Fraction:
    return Fraction(int(first_char(text) in DIGITS))


def pkpo_brute_force(rewards: list[Fraction], k: int) -> list[Fraction]:
    """PKPO eq. 33 by enumeration: A_i = (n/C(n,k)) Σ_{S∋i, |S|=k} (max_S r − max_{S∖i} r) (docs/math.md §3)."""
    n = len(rewards)
    subsets = list(itertools.combinations(range(n), k))
    return [
        Fraction(n, len(subsets))
        * sum(max(rewards[j] for j in s) - max(rewards[j] for j in s if j != i) for s in subsets if i in s)
        for i in range(n)
    ]


def majority_correct(answers: list[str | None], correct: dict[str, bool]) -> Fraction:
    """P[plurality vote is correct], ties broken uniformly; unparseable answers do not vote (Tang et al. §3.1)."""
    votes = Counter(a for a in answers if a is not None)
    if not votes:
        return Fraction(0)
    top = max(votes.values())
    winners = [a for a, count in votes.items() if count == top]
    return Fraction(sum(correct[a] for a in winners), len(winners))


def tang_majority_brute_force(texts: list[str]) -> list[Fraction]:
    """Tang LOO maj@k, k = n: A_i = n·(f(a) − f(a_{−i})), f the vote's correctness (Tang et al. §3.1)."""
    answers = [first_char(t) for t in texts]
    correct = {a: bool(first_char_is_digit(t)) for a, t in zip(answers, texts) if a is not None}
    full = majority_correct(answers, correct)
    return [len(texts) * (full - majority_correct(answers[:i] + answers[i + 1 :], correct)) for i in range(len(texts))]


GROUP_RULES = {
    "pkpo": (length_mod_3, lambda texts: pkpo_brute_force([length_mod_3(t) for t in texts], k=2)),
    "loo_maj_at_k": (first_char_is_digit, tang_majority_brute_force),
}


@pytest.mark.parametrize("rule", list(GROUP_RULES))
def test_rl_advantages_of_groups_split_across_processes(runs, rule):
    reward, expected_advantages = GROUP_RULES[rule]
    records, tensors = _ranks(runs, "rl_groups")
    records = [r[rule] for r in records]
    assert [r["process_index"] for r in records] == [0, 1] and all(r["world_size"] == WORLD for r in records)
    assert [len(r["batches"]) for r in records] == [2, 2]

    nonzero = False
    expected_history: list[tuple[int, list[Fraction]]] = []
    for step in range(2):
        halves = [r["batches"][step] for r in records]
        assert all(h["step"] == step and len(h["completions"]) == N // WORLD for h in halves)
        # One group per step, half of it on each rank: only the gathered rewards make it whole.
        assert len({p for h in halves for p in h["prompts"]}) == 1
        texts = [t for h in halves for t in h["completions"]]
        got = torch.tensor([a for h in halves for a in h["advantages"]], dtype=torch.float64)
        want = torch.tensor([float(a) for a in expected_advantages(texts)], dtype=torch.float64)
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)
        nonzero |= bool(want.abs().gt(0).any())
        expected_history.append((step, sorted(reward(t) for t in texts)))
    assert nonzero, "vacuous: every advantage is 0"

    # Both ranks keep the same history: all four rewards of every step, whichever rank scored them.
    for record in records:
        rewards, steps = record["history"]["rewards"], record["history"]["steps"]
        kept = [(s, sorted(Fraction(r) for r, t in zip(rewards, steps) if t == s)) for s in sorted(set(steps))]
        assert kept == expected_history
    _assert_same_weights([t[rule] for t in tensors])


# --------------------------------------------------------------------------- RL: history, checkpoint, resume


def _check_step(records: list[dict], step: int, history: RewardHistory) -> None:
    """The step's advantages on both ranks are cat_best_of_n's on the gathered groups.

    ``history`` is the test's own: ``compute_advantages`` queries it, then appends this step's rewards.
    """
    rows = []  # (prompt, completion text, advantage received) over both ranks
    for record in records:
        (batch,) = [b for b in record["batches"] if b["step"] == step]
        rows += zip(batch["prompts"], batch["completions"], batch["advantages"])
    by_prompt: dict[str, list[int]] = {}
    for i, (prompt, _, _) in enumerate(rows):
        by_prompt.setdefault(prompt, []).append(i)
    index = list(by_prompt.values())  # rows reach the loss shuffled: regroup them by prompt
    assert [len(group) for group in index] == [N] * WORLD, "two groups of 4 per step"
    rewards = torch.tensor([[float(length_mod_3(rows[i][1])) for i in group] for group in index])
    expected = compute_advantages("cat_best_of_n", rewards, history=history, step=step, budget=8, quantile="history")
    got = torch.tensor([[rows[i][2] for i in group] for group in index])
    torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-6)
    assert expected.abs().gt(0).any(), f"vacuous: every advantage of step {step} is 0"


def _by_step(rewards: list[float], steps: list[int]) -> list[tuple[int, list[float]]]:
    """A history as (step, sorted rewards) pairs: comparable whatever the order of its groups."""
    return [(s, sorted(r for r, t in zip(rewards, steps) if t == s)) for s in sorted(set(steps))]


def test_rl_history_is_gathered_checkpointed_and_resumed(runs):
    crash, _ = _ranks(runs, "rl_history_crash")
    resume, resume_tensors = _ranks(runs, "rl_history_resume")
    for records in (crash, resume):
        assert [r["process_index"] for r in records] == [0, 1] and all(r["world_size"] == WORLD for r in records)

    # The interrupted run: steps 0–2 ran, checkpoint-2 holds one RNG state per rank and the rule's state.
    assert all(r["interrupted"] for r in crash)
    files = set(crash[0]["checkpoint_files"])
    assert {f"checkpoint-2/{f}" for f in ("aligntrain_rl_state.pt", "rng_state_0.pth", "rng_state_1.pth")} <= files
    assert not any(f.startswith("checkpoint-3") for f in files)
    assert [[c["step"] for c in r["rule_calls"]] for r in crash] == [[0, 1, 2]] * WORLD

    history = RewardHistory()  # the test's own, from the recomputed rewards of both ranks
    for step in (0, 1):
        _check_step(crash, step, history)
    saved = _by_step(crash[0]["saved_history"]["rewards"], crash[0]["saved_history"]["steps"])
    assert saved == _by_step(history.rewards.tolist(), history.steps.tolist())
    assert len(crash[0]["saved_history"]["rewards"]) == 2 * WORLD * N  # both ranks' rollouts, two steps

    # The resumed launch starts at step 2 with that history, on both ranks.
    assert all(r["metrics"]["resumed_from_step"] == 2.0 and not r["checkpoint_dir_left"] for r in resume)
    for record in resume:
        first, second = record["rule_calls"]
        assert (first["step"], second["step"]) == (2, 3)
        assert _by_step(first["history"]["rewards"], first["history"]["steps"]) == saved
        assert sorted(set(second["history"]["steps"])) == [0, 1, 2]
    # Each rank restored its own RNG state: step 2 re-samples what the interrupted run sampled there.
    for before, after in zip(crash, resume):
        (b,) = [x for x in before["batches"] if x["step"] == 2]
        (a,) = [x for x in after["batches"] if x["step"] == 2]
        assert sorted(zip(a["prompts"], a["completions"])) == sorted(zip(b["prompts"], b["completions"]))

    _check_step(crash, 2, copy.deepcopy(history))
    _check_step(resume, 2, history)
    _check_step(resume, 3, history)
    _assert_same_weights([t["final"] for t in resume_tensors])
