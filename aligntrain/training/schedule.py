"""What every training run shares, SFT or RL: the schedule's trainer arguments, atomic checkpoints and resuming."""

from __future__ import annotations

import functools
import json
import logging
import os
import re
import shutil
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR, rotate_checkpoints

from aligntrain.config import OptimConfig
from aligntrain.errors import StageError
from aligntrain.io import fsync_directory, fsync_tree

logger = logging.getLogger(__name__)


def _restore_on_indexed_cpu(storage, location: str):
    # Several CPU processes (accelerate's MULTI_CPU) get the device torch.device("cpu", 0), and
    # the trainer resumes the optimizer with map_location=that device; torch's own CPU restore
    # accepts only "cpu" and would fail every distributed CPU resume ("cpu:0" unknown).
    return storage if re.fullmatch(r"cpu:\d+", location) else None


torch.serialization.register_package(30, lambda storage: None, _restore_on_indexed_cpu)


def schedule_arguments(optim: OptimConfig, checkpoint_dir: str | Path, *, seed: int) -> dict[str, Any]:
    """``TrainingArguments`` keywords of one run: AdamW with linear decay, checkpoints, seeding, device."""
    return dict(
        output_dir=str(checkpoint_dir),
        max_steps=optim.steps,
        per_device_train_batch_size=optim.batch_size,
        # Fixed at 1: strategy losses are per-sequence means over the batch (docs/decisions.md).
        gradient_accumulation_steps=1,
        # TRL turns this on by default; it costs ~30% time and buys nothing for small models.
        # transformers 5.17 (the newest vLLM 0.31 accepts) knows only this name; 5.18+ renamed it
        # activation_checkpointing and keeps this one as an alias until v6.
        gradient_checkpointing=optim.activation_checkpointing,
        learning_rate=optim.learning_rate,
        lr_scheduler_type="linear",
        warmup_steps=optim.lr_warmup_ratio,  # a float < 1 is a fraction of max_steps
        weight_decay=optim.weight_decay,
        max_grad_norm=optim.max_grad_norm,
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


#: where a checkpoint is written before it is complete: ``tmp-checkpoint-<step>/checkpoint-<step>``; never
#: matched by the ``checkpoint-*`` names that transformers and :func:`last_checkpoint` look for
STAGING_PREFIX = f"tmp-{PREFIX_CHECKPOINT_DIR}"


def _staged(save_checkpoint):
    """Wrap a ``Trainer._save_checkpoint`` so that the checkpoint is published whole, by one rename."""

    @functools.wraps(save_checkpoint)
    def staged_save_checkpoint(self, model, trial):
        if self._checkpoint_staging is not None:  # an outer override stages this save already
            return save_checkpoint(self, model, trial)
        run_dir = Path(self._get_output_dir(trial))
        name = f"{PREFIX_CHECKPOINT_DIR}-{self.state.global_step}"
        staging = run_dir / f"{STAGING_PREFIX}-{self.state.global_step}"
        if self.args.should_save:  # a crash's leftovers: never published, never resumed from
            for stale in run_dir.glob(f"{STAGING_PREFIX}-*"):
                shutil.rmtree(stale)
        self.accelerator.wait_for_everyone()
        self._checkpoint_staging = str(staging)
        try:
            save_checkpoint(self, model, trial)
        finally:
            self._checkpoint_staging = None
        self.accelerator.wait_for_everyone()  # every rank's files (RNG states, shards) are in
        if self.args.should_save:
            # Synced before the rename: after a power cut the name must not stand for unwritten data.
            fsync_tree(staging / name)
            final = run_dir / name
            if final.exists():  # this step saved before (a run resumed from an earlier checkpoint)
                os.replace(final, staging / "replaced")
            os.replace(staging / name, final)
            fsync_directory(run_dir)
            shutil.rmtree(staging)
            # The trainer rotated inside the staging folder, where there was nothing to remove.
            rotate_checkpoints(
                output_dir=str(run_dir),
                save_total_limit=self.args.save_total_limit,
                best_model_checkpoint=self.state.best_model_checkpoint,
                use_mtime=True,
            )
        self.accelerator.wait_for_everyone()

    return staged_save_checkpoint


class AtomicCheckpoints:
    """Mixin for a ``transformers.Trainer``: a ``checkpoint-<step>`` folder appears complete or not at all.

    The trainer writes a checkpoint in place, file after file, so a crash midway leaves a
    folder that looks like one. Here the whole save, every override of ``_save_checkpoint``
    in the class chain included (the RL trainer writes its own state file after
    ``super()``), writes into ``tmp-checkpoint-<step>/checkpoint-<step>``, which is synced
    to disk and then renamed to ``checkpoint-<step>``. A leftover staging folder is removed
    before the next save. List it first among the bases: ``class T(AtomicCheckpoints, SFTTrainer)``.

    How: the trainer and its subclasses put the checkpoint in ``_get_output_dir(trial)``,
    which names the staging folder during a save. (The trainer's best-checkpoint
    bookkeeping, unused here, would look there too.)
    """

    _checkpoint_staging: str | None = None

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        if cls._get_output_dir is not AtomicCheckpoints._get_output_dir:
            raise TypeError(f"{cls.__name__}: list AtomicCheckpoints before the trainer class among its bases")
        # A subclass's own _save_checkpoint comes before this mixin's in the MRO and may
        # write after its super() call returns: wrapped too, the outermost one stages it all.
        if "_save_checkpoint" in cls.__dict__:
            cls._save_checkpoint = _staged(cls.__dict__["_save_checkpoint"])

    def _get_output_dir(self, trial) -> str:
        return self._checkpoint_staging or super()._get_output_dir(trial)

    @_staged
    def _save_checkpoint(self, model, trial):
        super()._save_checkpoint(model, trial)


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


def bind_callbacks(trainer) -> None:
    """Hand the trainer to every callback of it that asks for it (``bind(trainer)``: the training monitor logs
    through the trainer's log, which a ``TrainerCallback`` otherwise cannot reach)."""
    for callback in trainer.callback_handler.callbacks:
        bind = getattr(callback, "bind", None)
        if callable(bind):
            bind(trainer)


class IncompleteTraining(StageError):
    """The trainer stopped before the steps it was asked for: nothing is saved as the trained model."""


def finish_run(trainer, checkpoint_dir: Path, save_final: Callable[[dict | None], None] | None) -> None:
    """Save the final model, then remove the checkpoints, in that order.

    A run that stopped short of ``max_steps`` raises :class:`IncompleteTraining` and saves
    nothing: TRL ends a run whose data loader yields no batch at step 0 without an error,
    and saving then would publish the starting weights as the trained model.
    If saving fails (read-only folder, full disk), the checkpoints stay and a re-run
    resumes at the last step instead of starting again. Every rank is past its last
    checkpoint write before the main process saves and deletes, and none returns
    before the checkpoints are gone. ``save_final`` gets the gathered weights of a sharded
    model (:func:`gathered_state_dict`), or None.
    """
    done, asked = trainer.state.global_step, trainer.args.max_steps
    if done < asked:
        batch = trainer.args.per_device_train_batch_size * trainer.args.gradient_accumulation_steps
        raise IncompleteTraining(
            f"training stopped at step {done} of the {asked} asked for; nothing was saved as the model. "
            f"The data gave fewer batches than asked: {len(trainer.train_dataset)} training rows for a "
            f"batch of {batch} per device (is the batch size larger than the data?)"
        )
    trainer.accelerator.wait_for_everyone()
    state_dict = gathered_state_dict(trainer)  # a collective: every rank takes part
    if trainer.accelerator.is_main_process:
        if save_final is not None:
            save_final(state_dict)
        shutil.rmtree(checkpoint_dir, ignore_errors=True)
    trainer.accelerator.wait_for_everyone()


def gathered_state_dict(trainer) -> dict | None:
    """The whole model's weights, gathered from its shards (FSDP, DeepSpeed ZeRO-3); None when unsharded.

    Each process of a sharded run holds a slice of every weight, so the process that saves
    must first gather them all (``Accelerator.get_state_dict``: FSDP's full state dict,
    ZeRO-3's 16-bit consolidation), and every process has to take part. Unsharded (one
    process, DDP, ZeRO-1/2) the main process's own module is whole: None, save it as it is.
    """
    if getattr(trainer, "is_fsdp_enabled", False):
        return trainer.accelerator.get_state_dict(trainer.model)
    if getattr(trainer, "is_deepspeed_enabled", False):
        plugin = trainer.accelerator.state.deepspeed_plugin
        if plugin is not None and plugin.zero_stage == 3:
            return trainer.accelerator.get_state_dict(trainer.model_wrapped)
    return None
