"""Supervised training through TRL's ``SFTTrainer``: pretraining, warm-up and strategy SFT.

One function, :func:`train_sft`, runs all three; they differ in the data
(plain text for pretraining, prompt–completion pairs otherwise) and in the
objective (token-mean CE, or a sequence-level strategy loss from
:mod:`aligntrain.training.strategies`).

The strategy losses need the *summed* completion log-probability
ℓ = log π(y*|x) per sequence (FORMULAS §2). TRL's fused LM head already returns
per-token log-probabilities with zeros on ignored positions, so the only
override is :meth:`StrategySFTTrainer.compute_loss`, which sums them per row and
applies the objective.

Interrupted runs resume: checkpoints go to ``checkpoint_dir`` every
``checkpoint_every`` steps, and a re-run with the same ``checkpoint_dir`` picks up
the last one (optimizer, scheduler, RNG and data order included).
"""

from __future__ import annotations

import math
import shutil
from collections.abc import Sequence
from pathlib import Path

import torch
from datasets import Dataset
from transformers import PreTrainedModel, PreTrainedTokenizerBase, TrainerCallback
from transformers.trainer_utils import get_last_checkpoint
from trl import SFTConfig, SFTTrainer

from aligntrain.config import OptimConfig
from aligntrain.training.strategies import CrossEntropy, ObjectiveOptions


class StrategySFTTrainer(SFTTrainer):
    """``SFTTrainer`` whose loss is a strategy objective of the summed log-probability.

    With a token-level objective (plain CE) it is TRL's trainer unchanged.
    """

    def __init__(self, *args, objective: ObjectiveOptions, **kwargs):
        self.objective = objective
        super().__init__(*args, **kwargs)

    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        if not self.objective.sequence_level:
            return super().compute_loss(model, inputs, return_outputs, num_items_in_batch)
        mode = "train" if self.model.training else "eval"
        inputs["use_cache"] = False
        outputs = model(**inputs, fused_lm_head=True)
        # log_probs is (batch, seq) with zeros where the label is ignored (prompt, padding)
        seq_logp = outputs.log_probs.sum(dim=-1)
        # Per-sequence losses averaged over the batch (gradient accumulation is fixed at 1).
        loss = self.objective.loss(seq_logp).mean()
        with torch.no_grad():
            weight = self.objective.weight(seq_logp)
            metrics = self._metrics[mode]
            metrics["seq_logp"].append(seq_logp.mean().item())
            metrics["seq_prob"].append(seq_logp.exp().mean().item())
            metrics["strategy_weight"].append(weight.mean().item())
            num_valid = outputs.label_mask.sum()
            metrics["token_ce"].append((-outputs.log_probs.sum() / num_valid.clamp(min=1)).item())
        return (loss, outputs) if return_outputs else loss


def _sft_config(
    optim: OptimConfig,
    checkpoint_dir: Path,
    *,
    max_length: int,
    seed: int,
    completion_only: bool,
    eval_steps: int | None,
) -> SFTConfig:
    return SFTConfig(
        output_dir=str(checkpoint_dir),
        max_steps=optim.steps,
        per_device_train_batch_size=optim.batch_size,
        per_device_eval_batch_size=optim.batch_size,
        gradient_accumulation_steps=1,
        # TRL turns this on by default; it costs ~30% time and buys nothing for small models.
        activation_checkpointing=optim.activation_checkpointing,
        learning_rate=optim.learning_rate,
        lr_scheduler_type="linear",
        warmup_steps=optim.warmup_ratio,  # a float < 1 is a fraction of max_steps
        weight_decay=optim.weight_decay,
        logging_steps=optim.log_every,
        save_strategy="steps",
        save_steps=optim.checkpoint_every,
        save_total_limit=2,
        eval_strategy="steps" if eval_steps else "no",
        eval_steps=eval_steps,
        max_length=max_length,
        completion_only_loss=completion_only,
        seed=seed,
        data_seed=seed,
        report_to="none",
        disable_tqdm=False,
        dataloader_num_workers=0,
        use_cpu=not torch.cuda.is_available(),
        bf16=torch.cuda.is_available() and torch.cuda.is_bf16_supported(),
        save_only_model=False,
        # The strategy loss needs full sequences in the batch, never packed ones.
        packing=False,
    )


def train_sft(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    train_rows: Sequence[dict],
    optim: OptimConfig,
    checkpoint_dir: str | Path,
    *,
    objective: ObjectiveOptions | None = None,
    eval_rows: Sequence[dict] | None = None,
    max_length: int,
    seed: int,
    callbacks: Sequence[TrainerCallback] = (),
) -> dict[str, float]:
    """Train ``model`` in place for ``optim.steps`` steps and return the final metrics.

    Rows are ``{"text": ...}`` (language modelling, loss on every token) or
    ``{"prompt": ..., "completion": ...}`` (loss on the completion only). On
    success the checkpoint directory is removed: the caller saves the model.
    """
    objective = objective or CrossEntropy()
    columns = ["text"] if "text" in train_rows[0] else ["prompt", "completion"]
    to_dataset = lambda rows: Dataset.from_dict({c: [r[c] for r in rows] for c in columns})  # noqa: E731
    checkpoint_dir = Path(checkpoint_dir)
    args = _sft_config(
        optim,
        checkpoint_dir,
        max_length=max_length,
        seed=seed,
        completion_only="prompt" in columns,
        eval_steps=max(optim.steps // 4, 1) if eval_rows else None,
    )
    trainer = StrategySFTTrainer(
        model=model,
        args=args,
        train_dataset=to_dataset(train_rows),
        eval_dataset=to_dataset(eval_rows) if eval_rows else None,
        processing_class=tokenizer,
        callbacks=list(callbacks),
        objective=objective,
    )
    last = get_last_checkpoint(str(checkpoint_dir)) if checkpoint_dir.is_dir() else None
    result = trainer.train(resume_from_checkpoint=last)
    metrics = {k: float(v) for k, v in result.metrics.items() if isinstance(v, (int, float))}
    metrics["resumed_from_step"] = float(_step_of(last)) if last else 0.0
    if eval_rows:
        eval_metrics = trainer.evaluate()
        metrics.update({k: float(v) for k, v in eval_metrics.items() if isinstance(v, (int, float))})
    shutil.rmtree(checkpoint_dir, ignore_errors=True)
    return {k: v for k, v in metrics.items() if math.isfinite(v)}


def _step_of(checkpoint: str) -> int:
    return int(Path(checkpoint).name.rsplit("-", 1)[-1])
