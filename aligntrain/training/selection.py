"""Checkpoint selection on validation prompts (TEA App. B.2): the train stage keeps its best step, not its last.

TEA ("What should post-training optimize? A test-time scaling law perspective", arXiv 2605.10716,
App. B.2) selects every method's checkpoint by one rule: every so many training steps, sample 32
completions for each of 128 fixed validation prompts, score them with the reward model, take each
prompt's mean reward of its top 10 completions, average over prompts, and keep the checkpoint with
the highest average. GRPO's best was step 100 of 450 there, so the rule changes what is compared.

:class:`CheckpointSelector` is that rule as a ``TrainerCallback`` (``selection`` in params,
:class:`~aligntrain.config.SelectionConfig`). It measures at step 0 (the starting model is a
candidate too), every ``every`` optimizer steps and at the end; a candidate replaces the best only
when strictly better, so ties keep the earlier step. The best weights are kept on CPU and written to
the run's checkpoint folder (``selection-best.safetensors``, with a journal ``selection.jsonl``), so
a resumed run keeps its candidates. At the end of training the best weights are loaded into the
model, and the stage's final save writes them; the stage writes the table of candidates and the
chosen step beside the model (``selection.json``).

Never changes training: sampling runs under a forked RNG and the model's mode is restored, as the
monitor's (:mod:`aligntrain.training.monitor`). One process only: the config refuses a launched study.
"""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path
from typing import Any

import numpy as np
import torch
from transformers import TrainerCallback

from aligntrain.io import atomic_path
from aligntrain.rollouts.generate import SamplingConfig, sample_completions
from aligntrain.rollouts.pool import grade_completions
from aligntrain.training.monitor import MonitorSplit, sampling_aside

logger = logging.getLogger(__name__)

#: the journal of candidates in the run's checkpoint folder, and the best candidate's weights
JOURNAL = "selection.jsonl"
BEST = "selection-best.safetensors"
#: what the stage writes beside the saved model
REPORT = "selection.json"
_SEED_TAG = 0x73656C  # "sel": never one of the trainers' or the monitor's seeds


def top_mean_score(rewards: np.ndarray, top: int) -> float:
    """TEA App. B.2's validation score: per prompt the mean of its ``top`` highest rewards, averaged over prompts.

    ``rewards``: prompts × samples. With 0/1 rewards a prompt scores min(c, top)/top.
    """
    rewards = np.asarray(rewards, dtype=float)
    if rewards.ndim != 2 or rewards.shape[0] == 0 or not 1 <= top <= rewards.shape[1]:
        raise ValueError(f"rewards must be prompts x samples with 1 <= top <= samples; got {rewards.shape}, top {top}")
    best = -np.sort(-rewards, axis=1)[:, :top]
    return float(best.mean(axis=1).mean())


class CheckpointSelector(TrainerCallback):
    """The selection rule as a callback (module docstring). ``split``: the validation prompts it samples."""

    def __init__(self, config, *, problem, tokenizer, split: MonitorSplit, seed: int) -> None:
        self.config = config
        self.problem = problem
        self.tokenizer = tokenizer
        self.split = split
        self.seed = seed
        self.sampling = SamplingConfig(
            temperature=config.temperature, top_p=config.top_p, max_new_tokens=config.max_new_tokens
        )
        self.candidates: list[dict[str, float]] = []
        self.best_step: int | None = None
        self._best_score = -np.inf
        self._best_weights: dict[str, torch.Tensor] | None = None
        self._folder: Path | None = None

    # ---- what the trainers call

    def on_train_begin(self, args, state, control, model=None, **kwargs):
        self._folder = Path(args.output_dir) if args.output_dir else None
        if state.is_world_process_zero:
            self._restore(state.global_step)
            self.measure(model, state.global_step)  # step 0, or the resumed step when its candidate is lost

    def on_step_end(self, args, state, control, model=None, **kwargs):
        step = state.global_step
        if state.is_world_process_zero and (step % self.config.every == 0 or step >= state.max_steps):
            self.measure(model, step)

    def on_train_end(self, args, state, control, model=None, **kwargs):
        if not state.is_world_process_zero:
            return
        if not self.candidates or self.candidates[-1]["step"] != state.global_step:
            self.measure(model, state.global_step)
        if self._best_weights is not None and self.best_step != state.global_step:
            model.load_state_dict(self._best_weights)  # the final save writes the chosen step
        logger.info("selection: step %d of %d chosen (score %.4f)", self.best_step, state.global_step, self._best_score)

    # ---- the measurement

    def measure(self, model, step: int) -> float:
        """Score ``model`` at ``step`` on the validation prompts; keep it if strictly best so far."""
        if any(c["step"] == step for c in self.candidates):
            return next(c["score"] for c in self.candidates if c["step"] == step)
        score = self._score(model, step)
        self.candidates.append({"step": int(step), "score": score})
        if score > self._best_score:
            self._best_score, self.best_step = score, int(step)
            self._best_weights = {k: v.detach().to("cpu", copy=True) for k, v in model.state_dict().items()}
            self._save_best()
        self._append_journal()
        logger.info("selection at step %d: score %.4f (best: step %d)", step, score, self.best_step)
        return score

    def _score(self, model, step: int) -> float:
        cfg, rows = self.config, list(self.split.rows)
        with sampling_aside(model):
            sampled = sample_completions(
                model,
                self.tokenizer,
                list(self.split.prompts),
                cfg.samples,
                self.sampling,
                batch_size=cfg.batch_size,
                seed=(self.seed * 1_000_003 + step) ^ _SEED_TAG,
                progress=False,
            )
        rewards = np.zeros((len(rows), cfg.samples))
        filled = np.zeros(len(rows), dtype=int)
        for completion, grade in zip(sampled, grade_completions(rows, sampled, self.problem), strict=True):
            i = completion.prompt_index
            rewards[i, filled[i]] = grade["reward"]
            filled[i] += 1
        return top_mean_score(rewards, cfg.top)

    def report(self) -> dict[str, Any]:
        """What the stage writes beside the model: the rule, every candidate and the chosen step."""
        cfg = self.config
        return {
            "rule": f"mean of the top {cfg.top} rewards of {cfg.samples} samples per prompt, "
            f"averaged over {len(self.split.rows)} validation prompts (TEA App. B.2)",
            "chosen_step": self.best_step,
            "chosen_score": self._best_score,
            "candidates": self.candidates,
        }

    # ---- the journal and the best weights (resume)

    def _save_best(self) -> None:
        if self._folder is None:
            return
        from safetensors.torch import save_file

        self._folder.mkdir(parents=True, exist_ok=True)
        weights = {k: v.contiguous() for k, v in self._best_weights.items()}
        with atomic_path(self._folder / BEST) as tmp:
            save_file(weights, str(tmp), metadata={"step": str(self.best_step)})

    def _append_journal(self) -> None:
        if self._folder is None:
            return
        self._folder.mkdir(parents=True, exist_ok=True)
        with open(self._folder / JOURNAL, "a", encoding="utf-8") as handle:
            handle.write(json.dumps(self.candidates[-1]) + "\n")
            handle.flush()
            os.fsync(handle.fileno())

    def _restore(self, resumed_step: int) -> None:
        """Keep the candidates up to the step the run resumes from, and the best of them (a fresh run: none).

        The best weights on disk must be the best kept candidate's (their file records its step). If a
        better candidate measured after the resumed step overwrote them, the earlier candidates cannot
        be chosen any more: the selection starts again from the resumed step, and says so.
        """
        journal = self._folder / JOURNAL if self._folder is not None else None
        if journal is None or not journal.is_file():
            return
        if resumed_step == 0:  # a fresh run in a used folder: nothing of the old one counts
            journal.unlink()
            (self._folder / BEST).unlink(missing_ok=True)
            return
        kept = []
        for line in journal.read_text(encoding="utf-8").splitlines():
            try:
                entry = json.loads(line)
            except ValueError:
                continue  # the last line of a run killed while writing it
            if entry["step"] <= resumed_step:
                kept.append(entry)
        best = max(kept, key=lambda e: (e["score"], -e["step"]), default=None)
        weights, on_disk = None, None
        if best is not None and (self._folder / BEST).is_file():
            from safetensors import safe_open
            from safetensors.torch import load_file

            with safe_open(str(self._folder / BEST), framework="pt") as handle:
                on_disk = int(handle.metadata().get("step", -1))
            if on_disk == best["step"]:
                weights = load_file(str(self._folder / BEST))
        if weights is None:
            if kept:
                logger.warning(
                    "selection: the saved best weights are not those of a candidate up to step %d; "
                    "choosing among the steps from %d on",
                    resumed_step,
                    resumed_step,
                )
            journal.unlink()
            (self._folder / BEST).unlink(missing_ok=True)
            return
        self.candidates = kept
        self.best_step, self._best_score, self._best_weights = best["step"], best["score"], weights
        with atomic_path(journal) as tmp:
            Path(tmp).write_text("".join(json.dumps(e) + "\n" for e in kept), encoding="utf-8")
