"""Strategy SFT through TRL: the loss that reaches the parameters, and resuming."""

from __future__ import annotations

import copy

import pytest
import torch
from transformers import TrainerCallback

from aligntrain.config import OptimConfig
from aligntrain.objectives import pass_at_n_weight
from aligntrain.training.sft import train_sft
from aligntrain.training.strategies import PassAtN


def _completion_logp(model, tokenizer, row) -> torch.Tensor:
    """Summed log π(completion + EOS | prompt), by teacher forcing, independent of TRL."""
    prompt = tokenizer(row["prompt"])["input_ids"]
    full = tokenizer(row["prompt"] + row["completion"])["input_ids"] + [tokenizer.eos_token_id]
    ids = torch.tensor([full])
    logits = model(input_ids=ids).logits[0, :-1]
    logp = torch.log_softmax(logits.float(), dim=-1).gather(-1, ids[0, 1:, None]).squeeze(-1)
    return logp[len(prompt) - 1 :].sum()


def _optim(steps: int, **kw) -> OptimConfig:
    return OptimConfig(steps=steps, batch_size=4, learning_rate=1e-3, warmup_ratio=0.0, checkpoint_every=2, log_every=1, **kw)


def test_pass_at_n_gradient_is_weighted_ce(tiny_model, arith_rows, tmp_path):
    """One SGD-free step: the trainer's loss gradient equals mean_i F(N, p_i)·∇(−ℓ_i) (FORMULAS §2)."""
    from aligntrain.training.sft import StrategySFTTrainer, _sft_config
    from datasets import Dataset

    model, tokenizer = tiny_model
    rows = arith_rows["train"][:4]
    n = 8
    objective = PassAtN(n=n)
    args = _sft_config(_optim(1), tmp_path, max_length=128, seed=0, completion_only=True, eval_steps=None)
    data = Dataset.from_dict({c: [r[c] for r in rows] for c in ("prompt", "completion")})
    trainer = StrategySFTTrainer(model=model, args=args, train_dataset=data, processing_class=tokenizer, objective=objective)
    batch = next(iter(trainer.get_train_dataloader()))
    model.zero_grad()
    trainer.compute_loss(model, dict(batch)).backward()
    got = [p.grad.clone() for p in model.parameters()]

    # Reference: the same batch rows (the dataloader shuffles) with an independent log-prob.
    decoded = [tokenizer.decode(ids, skip_special_tokens=True) for ids in batch["input_ids"]]
    by_text = {r["prompt"] + r["completion"]: r for r in rows}
    batch_rows = [by_text[t] for t in decoded]
    model.zero_grad()
    total = 0
    for row in batch_rows:
        ell = _completion_logp(model, tokenizer, row)
        w = pass_at_n_weight(ell.detach().exp().double(), n).float()
        total = total + w * (-ell)
    (total / len(batch_rows)).backward()
    for g, p in zip(got, model.parameters()):
        torch.testing.assert_close(g, p.grad, rtol=1e-4, atol=1e-6)


class _Crash(TrainerCallback):
    """Simulates a killed run: raises once training has passed ``at_step``."""

    def __init__(self, at_step: int):
        self.at_step = at_step

    def on_step_begin(self, args, state, control, **kwargs):
        if state.global_step == self.at_step:
            raise KeyboardInterrupt(f"simulated interruption at step {state.global_step}")


def test_interrupted_training_resumes_to_the_same_weights(tiny_model, arith_rows, tmp_path):
    model, tokenizer = tiny_model
    rows = arith_rows["train"]
    optim = _optim(6)
    reference = copy.deepcopy(model)
    train_sft(reference, tokenizer, rows, optim, tmp_path / "ref", objective=PassAtN(n=4), max_length=128, seed=0)

    interrupted = copy.deepcopy(model)
    with pytest.raises(KeyboardInterrupt):
        train_sft(interrupted, tokenizer, rows, optim, tmp_path / "run", objective=PassAtN(n=4),
                  max_length=128, seed=0, callbacks=[_Crash(at_step=5)])
    assert (tmp_path / "run" / "checkpoint-4").is_dir()

    resumed = copy.deepcopy(model)  # a new process would start from the initial weights again
    metrics = train_sft(resumed, tokenizer, rows, optim, tmp_path / "run", objective=PassAtN(n=4), max_length=128, seed=0)
    assert metrics["resumed_from_step"] == 4
    assert not (tmp_path / "run").exists(), "checkpoints are removed after a completed run"
    for a, b in zip(reference.parameters(), resumed.parameters()):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)
