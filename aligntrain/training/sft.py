"""Supervised training through TRL's ``SFTTrainer``: pretraining, warm-up and strategy SFT.

One function, :func:`train_sft`, runs all three; they differ in the data
(plain text for pretraining, prompt–completion pairs otherwise) and in the
objective (token-mean CE, or a sequence-level strategy loss from
:mod:`aligntrain.objectives`).

The strategy losses need the *summed* completion log-probability
ℓ = log π(y*|x) per sequence (docs/math.md §2). TRL's fused LM head already returns
per-token log-probabilities with zeros on ignored positions, so the override is
:meth:`StrategySFTTrainer.compute_loss`, which hands them to the objective (and
the full logits to an objective that asks for them, and picks the batch among
extra candidates for one that filters examples).

Interrupted runs resume: checkpoints go to ``checkpoint_dir`` every
``checkpoint_every`` steps, and a re-run with the same ``checkpoint_dir`` picks up
the last one (optimizer, scheduler, RNG and data order included). Checkpoints are
written atomically (:class:`~aligntrain.training.schedule.AtomicCheckpoints`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
import torch
from datasets import Dataset
from transformers import PreTrainedModel, PreTrainedTokenizerBase, TrainerCallback
from trl import SFTConfig, SFTTrainer

from aligntrain.config import OptimConfig
from aligntrain.objectives import CrossEntropy, ObjectiveOptions, ScoredBatch
from aligntrain.training.schedule import (
    AtomicCheckpoints,
    finish_run,
    last_checkpoint,
    run_metrics,
    schedule_arguments,
)


class StrategySFTTrainer(AtomicCheckpoints, SFTTrainer):
    """``SFTTrainer`` whose loss is a strategy objective (:mod:`aligntrain.objectives`).

    With ``objective.uses_trl_loss`` (plain CE) it is TRL's trainer unchanged.
    Otherwise each step (gradient accumulation is fixed at 1):

    1. in training, if the objective draws more candidates than the batch size
       (DCO refill), a no-grad forward scores them and ``objective.select``
       picks the batch; ``refilled_fraction`` logs the share of the nominal
       batch (its first ``batch_size`` candidates) that was replaced;
    2. a forward computes the label log-probabilities, with TRL's fused LM head,
       or from the full logits when ``objective.needs_logits``;
    3. the loss is the batch mean of ``objective.sample_loss``.

    The generator handed to the objective is seeded from ``args.seed`` and the
    global step (:func:`step_seed`), so sampled losses (contrastive rivals) are
    reproducible, resumed runs included; every eval batch at one step reuses
    that step's seed.
    """

    def __init__(self, *args, objective: ObjectiveOptions, **kwargs):
        self.objective = objective
        super().__init__(*args, **kwargs)
        self.batch_size = self._train_batch_size
        # The training loader yields the objective's candidates per step (more than
        # the batch size for DCO refill); Trainer sizes its loader and its sample
        # counts from this attribute.
        self._train_batch_size = objective.candidates_per_step(self.batch_size)
        self.selects_batch = self._train_batch_size > self.batch_size

    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        if self.objective.uses_trl_loss:
            return super().compute_loss(model, inputs, return_outputs, num_items_in_batch)
        mode = "train" if self.model.training else "eval"
        inputs = {**inputs, "use_cache": False}
        if mode == "train" and self.selects_batch:
            inputs = self._select_batch(model, inputs)
        batch, outputs = self._score(model, inputs)
        loss = self.objective.sample_loss(batch).mean()
        self._log_batch(mode, batch)
        return (loss, outputs) if return_outputs else loss

    def step_generator(self, device: torch.device) -> torch.Generator:
        """A generator on ``device`` seeded by :func:`step_seed` from the seed and the current step."""
        seed = step_seed(self.args.seed, self.state.global_step, self.accelerator.process_index)
        return torch.Generator(device=device).manual_seed(seed)

    def _select_batch(self, model, inputs: dict) -> dict:
        """The rows of the candidate batch that ``objective.select`` keeps (DCO refill)."""
        with torch.no_grad():
            seq_logp = model(**inputs, fused_lm_head=True).log_probs.sum(dim=-1)
        chosen, replaced = self.objective.select(seq_logp, self.batch_size)
        metrics = self._metrics["train"]
        metrics["refilled_fraction"].append(replaced / min(self.batch_size, seq_logp.numel()))
        rows = inputs["input_ids"].shape[0]
        per_row = lambda v: isinstance(v, torch.Tensor) and v.dim() > 0 and v.shape[0] == rows  # noqa: E731
        return {k: v[chosen] if per_row(v) else v for k, v in inputs.items()}

    def _score(self, model, inputs: dict) -> tuple[ScoredBatch, object]:
        """Label log-probabilities (and logits if asked for), shifted so position t predicts labels[:, t]."""
        labels = inputs["labels"][:, 1:]
        label_mask = labels != -100
        if self.objective.needs_logits:
            outputs = model(**{k: v for k, v in inputs.items() if k != "labels"})
            logits = outputs.logits[:, :-1]
            log_softmax = torch.log_softmax(logits.float(), dim=-1)
            gathered = log_softmax.gather(-1, labels.clamp(min=0)[..., None]).squeeze(-1)
            token_logp = torch.where(label_mask, gathered, 0.0)
        else:
            outputs = model(**inputs, fused_lm_head=True)  # log_probs: zeros where the label is ignored
            logits, token_logp = None, outputs.log_probs
        generator = self.step_generator(token_logp.device)
        return ScoredBatch(token_logp, label_mask, labels, logits, generator), outputs

    def _log_batch(self, mode: str, batch: ScoredBatch) -> None:
        with torch.no_grad():
            metrics = self._metrics[mode]
            seq_logp = batch.seq_logp.detach()
            metrics["seq_logp"].append(seq_logp.mean().item())
            metrics["seq_prob"].append(seq_logp.exp().mean().item())
            weight = self.objective.weight(seq_logp)
            if weight is not None:
                metrics["strategy_weight"].append(weight.mean().item())
            num_valid = batch.label_mask.sum().clamp(min=1)
            metrics["token_ce"].append((-batch.token_logp.detach().sum() / num_valid).item())


def step_seed(seed: int, step: int, rank: int = 0) -> int:
    """The seed of step ``step``'s generator on process ``rank``: hashed by numpy's SeedSequence to 63 bits.

    A hash rather than seed + step, so runs with neighbouring seeds do not share
    their rival draws one step apart; the rank enters the hash (rank 0 as in a
    single-process run), so processes draw different rivals.
    """
    entropy = [seed % 2**64, step] + ([rank] if rank else [])
    words = np.random.SeedSequence(entropy).generate_state(2, dtype=np.uint32)
    return (int(words[0]) << 31) ^ int(words[1])


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
        **schedule_arguments(optim, checkpoint_dir, seed=seed),
        per_device_eval_batch_size=optim.batch_size,
        eval_strategy="steps" if eval_steps else "no",
        eval_steps=eval_steps,
        max_length=max_length,
        completion_only_loss=completion_only,
        disable_tqdm=False,
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
    save_final: Callable[[], None] | None = None,
) -> dict[str, float]:
    """Train ``model`` in place for ``optim.steps`` steps and return the final metrics.

    Rows are ``{"text": ...}`` (language modelling, loss on every token) or
    ``{"prompt": ..., "completion": ...}`` (loss on the completion only). On
    success ``save_final`` saves the model, then the checkpoint directory is
    removed; if saving fails the checkpoints stay for a re-run to resume from.
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
    last, last_step = last_checkpoint(checkpoint_dir)
    result = trainer.train(resume_from_checkpoint=last)
    metrics = run_metrics(result, last_step)
    if eval_rows:
        eval_metrics = trainer.evaluate()
        metrics.update({k: float(v) for k, v in eval_metrics.items() if isinstance(v, (int, float))})
    finish_run(trainer, checkpoint_dir, save_final)
    return {k: v for k, v in metrics.items() if math.isfinite(v)}
