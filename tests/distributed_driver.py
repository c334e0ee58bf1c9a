"""Runs SFT and RL scenarios on every process of a 2-process launch; driven by tests/test_distributed.py.

Usage, on a machine without CUDA (or with ``CUDA_VISIBLE_DEVICES=``), where the trainers'
``use_cpu`` makes the launch a gloo MULTI_CPU group::

    HF_HUB_OFFLINE=1 accelerate launch --multi_gpu --num_processes 2 --num_cpu_threads_per_process 1 \
        tests/distributed_driver.py OUT_DIR SCENARIO [SCENARIO ...]

Each scenario writes ``OUT_DIR/<scenario>/rank<r>.json`` (what this rank saw: the world size,
the rows that reached the loss, the advantages, the rule's history...) and ``rank<r>.pt``
(tensors: weights, gradients). The test recomputes everything from those records; the driver
only observes, through subclasses of the project's trainers swapped into their modules (the
way tests/test_rl.py swaps them), so ``train_sft`` / ``train_rl`` run unchanged.

Scenarios:

- ``sft``: ``train_sft`` with the pass@N objective, 2 rows per rank, 3 steps.
- ``rl_groups``: ``StrategyGRPOTrainer`` with 2 rollouts per rank and groups of 4, so every
  group is split across the two processes; one run with ``pkpo`` (k = 2) and one with
  ``loo_maj_at_k`` (needs the answers of the whole group).
- ``rl_history_crash`` then, in a second launch, ``rl_history_resume``: ``train_rl`` with
  ``cat_best_of_n`` (history quantile), 4 rollouts per rank, checkpoints every 2 steps; the
  first run is interrupted at step 3, the second resumes from ``checkpoint-2``.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import torch
from datasets import Dataset
from transformers import TrainerCallback

import aligntrain.training.rl as rl
import aligntrain.training.sft as sft
from aligntrain.advantages import RewardHistory, compute_advantages
from aligntrain.config import OptimConfig, RLConfig
from aligntrain.models import build_char_tokenizer, build_tiny_llama
from aligntrain.objectives import PassAtN
from aligntrain.problems import get_problem
from aligntrain.training.rl import StrategyGRPOTrainer, safe_reward_fn, train_rl
from aligntrain.training.sft import StrategySFTTrainer, train_sft

N = 4  # rollouts per prompt (group size) in every RL scenario
SFT_BATCH, SFT_STEPS, SFT_N = 2, 3, 4
GROUPS_BATCH, GROUPS_STEPS = 2, 2  # per rank: half a group each
HISTORY_BATCH, HISTORY_STEPS, CHECKPOINT_EVERY, CRASH_AT = 4, 4, 2, 3  # per rank: one whole group each
DIGITS = set("0123456789")


# --------------------------------------------------------------------------- the problem (as tests/conftest.py)


def tiny_model_and_rows():
    """The rows, tokenizer and seed-0 tiny Llama of tests/conftest.py (``arith_rows``, ``tiny_model``)."""
    sizes = {"train": 48, "validation": 8, "test": 6}
    rows = get_problem("arith").generate_splits(sizes, levels=[1, 2], seed=0)
    texts = [r[f] for split in rows.values() for r in split for f in ("prompt", "completion")]
    tokenizer = build_char_tokenizer(texts)
    model = build_tiny_llama(
        tokenizer, hidden_size=32, num_layers=2, num_heads=2, intermediate_size=64, max_length=128, seed=0
    )
    return model, tokenizer, rows


def length_mod_3(text: str, row: Any) -> float:
    return float(len(text) % 3)


def first_char(text: str) -> str | None:
    return text[:1] or None


def first_char_is_digit(text: str, row: Any) -> float:
    return 1.0 if first_char(text) in DIGITS else 0.0


def write(out_dir: Path, scenario: str, record: dict[str, Any], tensors: dict[str, Any]) -> None:
    rank = int(os.environ.get("RANK", 0))  # set by the launcher on every process
    folder = out_dir / scenario
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"rank{rank}.json").write_text(json.dumps(record))
    torch.save(tensors, folder / f"rank{rank}.pt")


def state_of(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


# --------------------------------------------------------------------------- SFT


class RecordingSFTTrainer(StrategySFTTrainer):
    """Records the rows of every training batch and the gradient of step 0 before clipping."""

    last: RecordingSFTTrainer | None = None

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.batches: list[dict[str, Any]] = []
        self.step0_grads: dict[str, torch.Tensor] = {}
        RecordingSFTTrainer.last = self

    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        if self.model.training:
            texts = self.processing_class.batch_decode(inputs["input_ids"].tolist(), skip_special_tokens=True)
            self.batches.append({"step": int(self.state.global_step), "texts": texts})
        return super().compute_loss(model, inputs, return_outputs, num_items_in_batch)

    def _clip_grad_norm(self, model):
        # The gradients here are DDP's all-reduced ones, before clipping rescales them.
        if self.state.global_step == 0:
            self.step0_grads = {name: p.grad.detach().clone() for name, p in self.model.named_parameters()}
        return super()._clip_grad_norm(model)


def run_sft(out_dir: Path) -> None:
    model, tokenizer, rows = tiny_model_and_rows()
    initial = state_of(model)
    sft.StrategySFTTrainer = RecordingSFTTrainer
    optim = OptimConfig(
        steps=SFT_STEPS, batch_size=SFT_BATCH, learning_rate=1e-3, lr_warmup_ratio=0.0, checkpoint_every=2, log_every=1
    )
    checkpoint_dir = out_dir / "sft_checkpoints"
    metrics = train_sft(
        model,
        tokenizer,
        rows["train"][:16],
        optim,
        checkpoint_dir,
        objective=PassAtN(budget=SFT_N),
        max_length=128,
        seed=0,
    )
    trainer = RecordingSFTTrainer.last
    record = {
        "world_size": trainer.accelerator.num_processes,
        "process_index": trainer.accelerator.process_index,
        "distributed_type": str(trainer.accelerator.distributed_type),
        "batches": trainer.batches,
        "metrics": metrics,
        "checkpoint_dir_left": checkpoint_dir.exists(),
    }
    write(out_dir, "sft", record, {"initial": initial, "final": state_of(model), "step0_grads": trainer.step0_grads})


# --------------------------------------------------------------------------- RL


class RecordingGRPOTrainer(StrategyGRPOTrainer):
    """Records every batch that reaches ``compute_loss``: prompts, completions, advantages."""

    last: RecordingGRPOTrainer | None = None

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.batches: list[dict[str, Any]] = []
        RecordingGRPOTrainer.last = self

    def compute_loss(self, model, inputs, *args, **kwargs):
        def decode(ids: torch.Tensor, mask: torch.Tensor) -> str:
            return self.processing_class.decode(ids[mask.bool()].tolist(), skip_special_tokens=True)

        self.batches.append(
            {
                "step": int(self.state.global_step),
                "prompts": [decode(i, m) for i, m in zip(inputs["prompt_ids"], inputs["prompt_mask"])],
                "completions": [decode(i, m) for i, m in zip(inputs["completion_ids"], inputs["completion_mask"])],
                "advantages": inputs["advantages"].tolist(),
            }
        )
        return super().compute_loss(model, inputs, *args, **kwargs)


def history_record(history: RewardHistory) -> dict[str, list]:
    return {"rewards": history.rewards.tolist(), "steps": history.steps.tolist()}


GROUP_RULES = {
    "pkpo": dict(rule="pkpo", options={"budget": 2}, reward=length_mod_3, answer_class=None, binary=None),
    "loo_maj_at_k": dict(
        rule="loo_maj_at_k", options={}, reward=first_char_is_digit, answer_class=first_char, binary=True
    ),
}


def run_rl_groups(out_dir: Path) -> None:
    record: dict[str, Any] = {}
    tensors: dict[str, Any] = {}
    for name, spec in GROUP_RULES.items():
        model, tokenizer, rows = tiny_model_and_rows()
        config = RLConfig(
            rule={"name": spec["rule"], **spec["options"]},
            num_generations=N,
            max_completion_length=10,
            steps=GROUPS_STEPS,
            batch_size=GROUPS_BATCH,
            learning_rate=1e-3,
            lr_warmup_ratio=0.0,
            checkpoint_every=100,
            log_every=1,
        )
        config.rule.check_fits(binary_rewards=spec["binary"])
        train = rows["train"]
        trainer = RecordingGRPOTrainer(
            model,
            [safe_reward_fn(spec["reward"], timeout_s=5.0)],
            config=config,
            checkpoint_dir=out_dir / f"rl_groups_{name}",
            seed=0,
            answer_class=spec["answer_class"],
            train_dataset=Dataset.from_dict({c: [r[c] for r in train] for c in ("prompt", "answer")}),
            processing_class=tokenizer,
        )
        trainer.train()
        record[name] = {
            "world_size": trainer.accelerator.num_processes,
            "process_index": trainer.accelerator.process_index,
            "batches": trainer.batches,
            "history": history_record(trainer.reward_history),
        }
        tensors[name] = state_of(model)
    write(out_dir, "rl_groups", record, tensors)


class CrashAt(TrainerCallback):
    """Interrupts training when it reaches ``step`` (every rank at the same step, as a kill would)."""

    def __init__(self, step: int):
        self.step = step

    def on_step_begin(self, args, state, control, **kwargs):
        if state.global_step == self.step:
            raise KeyboardInterrupt(f"simulated interruption at step {self.step}")


def run_rl_history(out_dir: Path, phase: str) -> None:
    model, tokenizer, rows = tiny_model_and_rows()
    rule_calls: list[dict[str, Any]] = []

    def spy(rule, rewards, **kwargs):
        if rewards.shape[0] > 1:  # not the dry run's single synthetic group
            rule_calls.append({"step": kwargs["step"], "history": history_record(kwargs["history"])})
        return compute_advantages(rule, rewards, **kwargs)

    rl.compute_advantages = spy
    rl.StrategyGRPOTrainer = RecordingGRPOTrainer
    config = RLConfig(
        rule={"name": "cat_best_of_n", "budget": 8, "quantile": "history"},
        num_generations=N,
        max_completion_length=10,
        steps=HISTORY_STEPS,
        batch_size=HISTORY_BATCH,
        learning_rate=1e-3,
        lr_warmup_ratio=0.0,
        checkpoint_every=CHECKPOINT_EVERY,
        log_every=1,
    )
    checkpoint_dir = out_dir / "rl_history_checkpoints"
    record: dict[str, Any] = {}
    run = dict(reward_fn=length_mod_3, seed=0)
    if phase == "crash":
        try:
            train_rl(model, tokenizer, rows["train"], config, checkpoint_dir, callbacks=[CrashAt(CRASH_AT)], **run)
        except KeyboardInterrupt:
            record["interrupted"] = True
        record["checkpoint_files"] = sorted(
            str(p.relative_to(checkpoint_dir)) for p in checkpoint_dir.rglob("*") if p.is_file()
        )
        # The resumed run deletes the checkpoints when it completes: keep what the rule's state file holds.
        saved = torch.load(checkpoint_dir / f"checkpoint-{CHECKPOINT_EVERY}" / rl.RL_STATE_FILE, weights_only=True)
        record["saved_history"] = {
            "rewards": saved["history_rewards"].tolist(),
            "steps": saved["history_steps"].tolist(),
        }
    else:
        record["metrics"] = train_rl(model, tokenizer, rows["train"], config, checkpoint_dir, **run)
        record["checkpoint_dir_left"] = checkpoint_dir.exists()
    trainer = RecordingGRPOTrainer.last
    record.update(
        world_size=trainer.accelerator.num_processes,
        process_index=trainer.accelerator.process_index,
        batches=trainer.batches,
        rule_calls=rule_calls,
        history=history_record(trainer.reward_history),
    )
    write(out_dir, f"rl_history_{phase}", record, {"final": state_of(model)})


SCENARIOS = {
    "sft": run_sft,
    "rl_groups": run_rl_groups,
    "rl_history_crash": lambda out_dir: run_rl_history(out_dir, "crash"),
    "rl_history_resume": lambda out_dir: run_rl_history(out_dir, "resume"),
}


def main(argv: list[str]) -> None:
    if len(argv) < 2 or any(name not in SCENARIOS for name in argv[1:]):
        raise SystemExit(f"usage: distributed_driver.py OUT_DIR SCENARIO [SCENARIO ...]; scenarios: {list(SCENARIOS)}")
    torch.set_num_threads(1)  # two processes share the machine's cores
    out_dir = Path(argv[0])
    for name in argv[1:]:
        SCENARIOS[name](out_dir)


if __name__ == "__main__":
    main(sys.argv[1:])
