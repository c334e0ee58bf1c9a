"""What every training run shares, SFT or RL: the schedule's trainer arguments and resuming."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from transformers.trainer_utils import get_last_checkpoint

from aligntrain.config import OptimConfig


def schedule_arguments(optim: OptimConfig, checkpoint_dir: str | Path, *, seed: int) -> dict[str, Any]:
    """``TrainingArguments`` keywords of one run: AdamW with linear decay, checkpoints, seeding, device."""
    return dict(
        output_dir=str(checkpoint_dir),
        max_steps=optim.steps,
        per_device_train_batch_size=optim.batch_size,
        # Fixed at 1: strategy losses are per-sequence means over the batch (docs/decisions.md).
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
        save_only_model=False,  # optimizer, scheduler and RNG states too: resuming is exact
        seed=seed,
        data_seed=seed,
        report_to="none",
        dataloader_num_workers=0,
        use_cpu=not torch.cuda.is_available(),
        bf16=torch.cuda.is_available() and torch.cuda.is_bf16_supported(),
    )


def last_checkpoint(checkpoint_dir: str | Path) -> tuple[str | None, int]:
    """The checkpoint an interrupted run resumes from, and its step (None, 0 for a fresh run)."""
    checkpoint_dir = Path(checkpoint_dir)
    last = get_last_checkpoint(str(checkpoint_dir)) if checkpoint_dir.is_dir() else None
    return last, int(Path(last).name.rsplit("-", 1)[-1]) if last else 0
