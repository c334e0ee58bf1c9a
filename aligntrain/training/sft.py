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
from collections.abc import Callable, Hashable, Sequence
from pathlib import Path

import numpy as np
import torch
from datasets import Dataset
from torch import Tensor
from transformers import PreTrainedModel, PreTrainedTokenizerBase, TrainerCallback
from trl import SFTConfig, SFTTrainer

from aligntrain.config import OptimConfig
from aligntrain.objectives import CrossEntropy, ObjectiveOptions, ScoredBatch
from aligntrain.rollouts.generate import SamplingConfig, sample_from_token_ids
from aligntrain.training.schedule import (
    AtomicCheckpoints,
    bind_callbacks,
    finish_run,
    last_checkpoint,
    run_metrics,
    schedule_arguments,
)


class StrategySFTTrainer(AtomicCheckpoints, SFTTrainer):
    """``SFTTrainer`` whose loss is a strategy objective (:mod:`aligntrain.objectives`).

    With ``objective.uses_trl_loss`` (plain CE) it is TRL's trainer unchanged.
    Otherwise each step (gradient accumulation is fixed at 1):

    0. if the objective asks for ``answer_samples`` (DCO_a), each candidate's p̂ is
       estimated from that many completions sampled from the current model, graded
       by ``answer_class`` against the gold completion's class (logged as ``answer_p``);
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

    def __init__(
        self,
        *args,
        objective: ObjectiveOptions,
        answer_class: Callable[[str], Hashable | None] | None = None,
        answer_sampling: SamplingConfig | None = None,
        **kwargs,
    ):
        if objective.answer_samples and (answer_class is None or answer_sampling is None):
            raise ValueError(f"objective {objective.name!r} samples answers: answer_class and answer_sampling needed")
        self.objective = objective
        self.answer_class = answer_class
        self.answer_sampling = answer_sampling
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
        if self.objective.answer_samples:
            inputs["answer_p"] = self._answer_probability(model, inputs)
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

    def _answer_probability(self, model, inputs: dict) -> Tensor:
        """p̂ per row: the share of ``answer_samples`` completions of its prompt with the gold answer (DCO §5.4).

        The prompt is the row's own tokens before its first supervised label (what
        the model is trained to continue); the gold class is ``answer_class`` of the
        decoded gold completion. Sampling puts the model in eval mode; train mode
        is restored after. Seeded by the step (:func:`step_seed`).
        """
        supervised = inputs["labels"] != -100
        prompts, golds = [], []
        for ids, mask, labels in zip(inputs["input_ids"], inputs["attention_mask"], supervised):
            start = int(labels.nonzero()[0]) if labels.any() else int(mask.sum())
            prompts.append(ids[:start][mask[:start].bool()].tolist())
            gold_text = self.processing_class.decode(ids[labels], skip_special_tokens=True)
            golds.append(self.answer_class(gold_text))
        m = self.objective.answer_samples
        was_training = model.training
        seed = step_seed(self.args.seed, self.state.global_step, self.accelerator.process_index)
        try:
            completions = sample_from_token_ids(
                self.accelerator.unwrap_model(model),
                self.processing_class,
                prompts,
                m,
                self.answer_sampling,
                batch_size=len(prompts) * m,
                seed=seed,
                progress=False,
            )
        finally:
            model.train(was_training)
        hits = torch.zeros(len(prompts), dtype=torch.float64)
        for c in completions:
            gold = golds[c.prompt_index]
            hits[c.prompt_index] += gold is not None and self.answer_class(c.text) == gold
        answer_p = hits / m
        self._metrics["train" if was_training else "eval"]["answer_p"].append(float(answer_p.mean()))
        return answer_p.to(inputs["input_ids"].device)

    def _select_batch(self, model, inputs: dict) -> dict:
        """The rows of the candidate batch that ``objective.select`` keeps (DCO refill)."""
        with torch.no_grad():
            forward = {k: v for k, v in inputs.items() if k != "answer_p"}
            seq_logp = model(**forward, fused_lm_head=True).log_probs.sum(dim=-1)
        chosen, replaced = self.objective.select(seq_logp, self.batch_size, inputs.get("answer_p"))
        metrics = self._metrics["train"]
        metrics["refilled_fraction"].append(replaced / min(self.batch_size, seq_logp.numel()))
        rows = inputs["input_ids"].shape[0]
        per_row = lambda v: isinstance(v, torch.Tensor) and v.dim() > 0 and v.shape[0] == rows  # noqa: E731
        return {k: v[chosen] if per_row(v) else v for k, v in inputs.items()}

    def _score(self, model, inputs: dict) -> tuple[ScoredBatch, object]:
        """Label log-probabilities (and logits if asked for), shifted so position t predicts labels[:, t]."""
        inputs = dict(inputs)
        answer_p = inputs.pop("answer_p", None)
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
        return ScoredBatch(token_logp, label_mask, labels, logits, generator, answer_p), outputs

    def _log_batch(self, mode: str, batch: ScoredBatch) -> None:
        with torch.no_grad():
            metrics = self._metrics[mode]
            seq_logp = batch.seq_logp.detach()
            metrics["seq_logp"].append(seq_logp.mean().item())
            metrics["seq_prob"].append(seq_logp.exp().mean().item())
            weight = self.objective.sample_weight(batch)
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
    save_final: Callable[[dict | None], None] | None = None,
    answer_class: Callable[[str], Hashable | None] | None = None,
    answer_sampling: SamplingConfig | None = None,
) -> dict[str, float]:
    """Train ``model`` in place for ``optim.steps`` steps and return the final metrics.

    ``answer_class`` (the problem's) and ``answer_sampling`` serve an objective that
    samples answers (DCO_a); every gold completion must then have an answer class.

    Rows are ``{"text": ...}`` (language modelling, loss on every token) or
    ``{"prompt": ..., "completion": ...}`` (loss on the completion only). On
    success ``save_final`` saves the model, then the checkpoint directory is
    removed; if saving fails the checkpoints stay for a re-run to resume from.
    """
    objective = objective or CrossEntropy()
    if objective.answer_samples and answer_class is not None:
        for row in train_rows:
            if answer_class(row["completion"]) is None:
                raise ValueError(f"{objective.name}: the gold completion of row {row.get('id', '?')!r} has no answer")
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
        answer_class=answer_class,
        answer_sampling=answer_sampling,
    )
    bind_callbacks(trainer)
    last, last_step = last_checkpoint(checkpoint_dir)
    result = trainer.train(resume_from_checkpoint=last)
    metrics = run_metrics(result, last_step)
    metrics["processes"] = float(trainer.accelerator.num_processes)
    if eval_rows:
        eval_metrics = trainer.evaluate()
        metrics.update({k: float(v) for k, v in eval_metrics.items() if isinstance(v, (int, float))})
    finish_run(trainer, checkpoint_dir, save_final)
    return {k: v for k, v in metrics.items() if math.isfinite(v)}
