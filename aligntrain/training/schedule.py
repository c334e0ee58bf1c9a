"""What every training run shares, SFT or RL: the schedule's trainer arguments and resuming."""

from __future__ import annotations

import json
import logging
import re
import shutil
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from aligntrain.config import OptimConfig

logger = logging.getLogger(__name__)


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


def checkpoint_problem(path: Path) -> str | None:
    """Why a checkpoint cannot be resumed from, or None when it can.

    A crash while the trainer writes a checkpoint leaves it truncated; resuming from
    it would fail on every re-run. Checked cheaply: the trainer state parses, every
    safetensors header reads and its tensors fit in the file, every torch file's zip
    directory (at the end of the file) is intact.
    """
    state = path / "trainer_state.json"
    if not state.is_file():
        return "no trainer_state.json (the write did not finish)"
    try:
        json.loads(state.read_text())
    except (OSError, ValueError) as err:
        return f"trainer_state.json unreadable: {err}"
    weights = list(path.glob("*.safetensors"))
    if not weights:
        return "no *.safetensors weights"
    for f in weights:
        try:
            raw = f.read_bytes()
            size = int.from_bytes(raw[:8], "little")
            header = json.loads(raw[8 : 8 + size])
            end = max((v["data_offsets"][1] for k, v in header.items() if k != "__metadata__"), default=0)
            if len(raw) < 8 + size + end:
                return f"{f.name} truncated ({len(raw)} bytes, needs {8 + size + end})"
        except (OSError, ValueError, KeyError, TypeError) as err:
            return f"{f.name} unreadable: {err}"
    for f in path.glob("*.pt*"):
        try:
            with zipfile.ZipFile(f) as archive:
                archive.namelist()
        except (OSError, zipfile.BadZipFile) as err:
            return f"{f.name} unreadable: {err}"
    return None


def last_checkpoint(checkpoint_dir: str | Path) -> tuple[str | None, int]:
    """The newest valid checkpoint an interrupted run resumes from, and its step (None, 0 for a fresh run).

    Invalid checkpoints (see :func:`checkpoint_problem`) are skipped with a warning naming them.
    """
    checkpoint_dir = Path(checkpoint_dir)
    if not checkpoint_dir.is_dir():
        return None, 0
    steps = []
    for child in checkpoint_dir.iterdir():
        match = re.fullmatch(r"checkpoint-(\d+)", child.name)
        if match and child.is_dir():
            steps.append((int(match.group(1)), child))
    for step, path in sorted(steps, reverse=True):
        problem = checkpoint_problem(path)
        if problem is None:
            return str(path), step
        logger.warning("skipping checkpoint %s: %s", path, problem)
    return None, 0


def run_metrics(result, resumed_from_step: int) -> dict[str, float]:
    """The trainer's final numbers, and the step the run resumed from.

    The trainer's ``train_loss`` averages the steps this process ran: after a resume,
    only the resumed part. It is then reported as ``train_loss_since_resume``, so it is
    never read as the whole run's loss.
    """
    metrics = {k: float(v) for k, v in result.metrics.items() if isinstance(v, (int, float))}
    if resumed_from_step and "train_loss" in metrics:
        metrics["train_loss_since_resume"] = metrics.pop("train_loss")
    metrics["resumed_from_step"] = float(resumed_from_step)
    return metrics


def finish_run(trainer, checkpoint_dir: Path, save_final: Callable[[], None] | None) -> None:
    """Save the final model, then remove the checkpoints, in that order.

    If saving fails (read-only folder, full disk), the checkpoints stay and a re-run
    resumes at the last step instead of starting again. Every rank is past its last
    checkpoint write before the main process saves and deletes, and none returns
    before the checkpoints are gone.
    """
    trainer.accelerator.wait_for_everyone()
    if trainer.accelerator.is_main_process:
        if save_final is not None:
            save_final()
        shutil.rmtree(checkpoint_dir, ignore_errors=True)
    trainer.accelerator.wait_for_everyone()
