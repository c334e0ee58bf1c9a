"""Training-time monitor: pass@k, success per level and per prompt, greedy confidence, during training.

:class:`TrainingMonitor` is a transformers ``TrainerCallback`` that both trainers take
(``train_sft``: pretraining aside, the warm-up and every SFT variant; ``train_rl``: every RL
variant). Every ``every`` optimizer steps, at step 0 and at the end, it measures the model on two
fixed sets of prompts, ``prompts`` of the training split and ``prompts`` of the validation split
(:func:`select_prompts`: the same prompts at every step, levels in turn):

* ``samples`` completions per prompt, sampled as the rollouts stage samples (temperature, top-p,
  length cap of the ``monitor`` section), graded by the problem
  (:func:`~aligntrain.rollouts.pool.grade_completions`): pass@k for every k of ``ks``
  (the unbiased estimator, :func:`~aligntrain.estimators.pass_at_k_curve`), the mean reward, and
  each prompt's success rate c/n;
* the greedy completion of every prompt: its probability π(ŷ|x) = exp ℓ at temperature 1 and its
  verdict (greedy confidence, DCO Fig. 1, as ``diagnostics/overconfidence.py`` measures it on the
  test pool), and the share of prompts answered wrongly with probability ≥ 0.5.

What it records:

* step metrics through the trainer's log (the base ``transformers.Trainer.log``, so TRL's own
  averaged metrics are not flushed early): ``monitor/<split>/pass_at_<k>``, ``.../mean_reward``,
  ``.../greedy_prob``, ``.../greedy_accuracy``, ``.../confidently_wrong`` and per level
  ``monitor/<split>/level_<l>/pass_at_1`` (the level's success rate); the stage's MLflow callback
  logs them at the step, and they enter ``trainer_state.json``'s log history;
* every number, per level and per prompt too, as rows of a long table (:data:`MONITOR_COLUMNS`:
  step, split, level, prompt_id, metric, value; ``level`` and ``prompt_id`` are ``all`` for
  aggregates), written as CSV at the end of training (the stage's ``plots/monitor/...`` DVC plot).

Never changes training: sampling runs under a forked RNG (CPU and the model's CUDA device), so
the training draws after a measurement are those without it, and the model's train/eval mode is
restored. Seeded from the study seed, the split and the step (:func:`monitor_seed`), so the same
model at the same step gives the same numbers. Resume-safe: each measurement is appended to a
journal in the run's checkpoint folder (``monitor.jsonl``); a resumed run keeps the rows up to the
step it resumes from and measures the later steps again. Multi-process runs measure on the main
process only (the others wait at their next collective; fine for DDP, not for sharded weights).
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import os
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import torch
from transformers import Trainer, TrainerCallback

from aligntrain.estimators import pass_at_k_curve
from aligntrain.io import atomic_path
from aligntrain.rollouts.generate import SamplingConfig, sample_completions
from aligntrain.rollouts.pool import grade_completions

logger = logging.getLogger(__name__)

#: the long table's columns, one row per number
MONITOR_COLUMNS = ["step", "split", "level", "prompt_id", "metric", "value"]
#: the splits measured, in order; their code enters the seed
SPLITS = ("train", "validation")
#: the journal of measurements in the run's checkpoint folder (resume)
JOURNAL = "monitor.jsonl"
#: a wrong greedy completion at least this probable is "confidently wrong" (diagnostics' default)
CONFIDENT = 0.5
ALL = "all"
_SEED_TAG = 0x6D6F6E  # "mon": this module's seeds never coincide with the trainers' step seeds


@contextlib.contextmanager
def sampling_aside(model) -> Iterator[None]:
    """Sample from ``model`` in the middle of training without changing the run.

    The RNG streams of the CPU and of the model's GPU are forked (the training's dropout and
    data order draw as if nothing had been sampled), and the model's train/eval mode is put
    back. The monitor and checkpoint selection (aligntrain.training.selection) sample under it.
    """
    device = getattr(model, "device", torch.device("cpu"))
    index = None
    if device.type == "cuda":
        index = device.index if device.index is not None else torch.cuda.current_device()
    was_training = model.training
    try:
        with torch.random.fork_rng(devices=[] if index is None else [index]):
            yield
    finally:
        model.train(was_training)


def monitor_seed(seed: int, step: int, split: str) -> int:
    """The sampling seed of one measurement: the study seed, the step and the split, hashed to 63 bits."""
    entropy = [seed % 2**64, step, SPLITS.index(split), _SEED_TAG]
    words = np.random.SeedSequence(entropy).generate_state(2, dtype=np.uint32)
    return (int(words[0]) << 31) ^ int(words[1])


def select_prompts(rows: Sequence[Mapping[str, Any]], n: int) -> list[int]:
    """Indices of ``n`` rows (all when fewer): the first rows of each level in order, one level after another in turn.

    Stratified and fixed: the same split gives the same prompts at every step and in every run.
    """
    by_level: dict[int, list[int]] = {}
    for index, row in enumerate(rows):
        by_level.setdefault(int(row["level"]), []).append(index)
    queues = [by_level[level] for level in sorted(by_level)]
    chosen: list[int] = []
    depth = 0
    while len(chosen) < min(n, len(rows)):
        for queue in queues:
            if depth < len(queue) and len(chosen) < n:
                chosen.append(queue[depth])
        depth += 1
    return sorted(chosen)


@dataclass(frozen=True)
class MonitorSplit:
    """The prompts of one split the monitor measures: the problem's rows (graded) and the policy's inputs."""

    rows: Sequence[Mapping[str, Any]]
    prompts: Sequence[str]

    @classmethod
    def of(cls, source_rows: Sequence[Mapping[str, Any]], policy_rows: Sequence[Mapping[str, Any]], n: int):
        """``n`` prompts of a split (:func:`select_prompts`).

        ``policy_rows[i]`` is ``source_rows[i]`` as the model reads it (``models.policy_rows``).
        """
        if len(source_rows) != len(policy_rows):
            raise ValueError(f"{len(source_rows)} rows but {len(policy_rows)} policy rows")
        picked = select_prompts(source_rows, n)
        return cls([source_rows[i] for i in picked], [policy_rows[i]["prompt"] for i in picked])


def measure_split(
    model,
    tokenizer,
    problem,
    split: MonitorSplit,
    *,
    samples: int,
    ks: Sequence[int],
    sampling: SamplingConfig,
    batch_size: int,
    seed: int,
) -> pd.DataFrame:
    """One split's numbers at one step: the long table's rows without ``step`` and ``split``.

    Levels ``all`` and each level: ``pass_at_<k>``, ``mean_reward``, ``greedy_prob``,
    ``greedy_accuracy``, ``confidently_wrong``, ``prompts``; per prompt: ``success_rate``,
    ``greedy_correct``, ``greedy_prob``. Leaves the model in eval mode (the callback restores it).
    """
    rows = list(split.rows)
    sampled = sample_completions(
        model, tokenizer, list(split.prompts), samples, sampling, batch_size=batch_size, seed=seed, progress=False
    )
    graded = grade_completions(rows, sampled, problem)
    correct = np.zeros(len(rows), dtype=np.int64)
    reward = np.zeros(len(rows))
    for completion, grade in zip(sampled, graded, strict=True):
        correct[completion.prompt_index] += grade["correct"]
        reward[completion.prompt_index] += grade["reward"]
    greedy_sampling = SamplingConfig(max_new_tokens=sampling.max_new_tokens, greedy=True, stop=sampling.stop)
    greedy = sample_completions(
        model, tokenizer, list(split.prompts), 1, greedy_sampling, batch_size=batch_size, seed=seed, progress=False
    )
    greedy_graded = grade_completions(rows, greedy, problem)
    per_prompt = pd.DataFrame(
        {
            "level": [str(int(r["level"])) for r in rows],
            "prompt_id": [str(r["id"]) for r in rows],
            "success_rate": correct / samples,
            "mean_reward": reward / samples,
            "greedy_correct": [float(g["correct"]) for g in greedy_graded],
            "greedy_prob": [math.exp(c.logp) for c in greedy],
        }
    )
    curve = pass_at_k_curve(samples, correct, list(ks))
    for j, k in enumerate(ks):
        per_prompt[f"pass_at_{k}"] = curve[:, j]
    records: list[dict[str, Any]] = []
    groups = [(ALL, per_prompt)] + [(level, group) for level, group in per_prompt.groupby("level", sort=True)]
    for level, group in groups:
        wrong = group.greedy_correct == 0
        summary = {f"pass_at_{k}": group[f"pass_at_{k}"].mean() for k in ks}
        summary |= {
            "mean_reward": group.mean_reward.mean(),
            "greedy_prob": group.greedy_prob.mean(),
            "greedy_accuracy": group.greedy_correct.mean(),
            "confidently_wrong": (wrong & (group.greedy_prob >= CONFIDENT)).mean(),
            "prompts": float(len(group)),
        }
        records += [{"level": level, "prompt_id": ALL, "metric": m, "value": float(v)} for m, v in summary.items()]
    for _, prompt in per_prompt.iterrows():
        for metric in ("success_rate", "greedy_correct", "greedy_prob"):
            records.append(
                {"level": prompt.level, "prompt_id": prompt.prompt_id, "metric": metric, "value": float(prompt[metric])}
            )
    return pd.DataFrame.from_records(records, columns=MONITOR_COLUMNS[2:])


def logged_metrics(frame: pd.DataFrame, ks: Sequence[int]) -> dict[str, float]:
    """The step metrics of one measurement (rows of one step): what MLflow gets; the rest stays in the CSV."""
    out: dict[str, float] = {}
    aggregate = frame[frame.prompt_id == ALL]
    overall = {f"pass_at_{k}" for k in ks} | {"mean_reward", "greedy_prob", "greedy_accuracy", "confidently_wrong"}
    for row in aggregate.itertuples(index=False):
        if row.level == ALL and row.metric in overall:
            out[f"monitor/{row.split}/{row.metric}"] = row.value
        elif row.level != ALL and row.metric == "pass_at_1":
            out[f"monitor/{row.split}/level_{row.level}/pass_at_1"] = row.value
    return out


def write_monitor_csv(frame: pd.DataFrame | None, path: str | os.PathLike[str]) -> None:
    """The long table as CSV, atomically (None or empty: the header alone, what a stage without the monitor writes)."""
    frame = pd.DataFrame(columns=MONITOR_COLUMNS) if frame is None else frame[MONITOR_COLUMNS]
    with atomic_path(Path(path)) as tmp:
        frame.to_csv(tmp, index=False)


class TrainingMonitor(TrainerCallback):
    """The monitor as a ``TrainerCallback`` (module docstring); ``train_sft``/``train_rl`` bind it to their trainer.

    ``splits``: ``{"train": MonitorSplit, "validation": MonitorSplit}`` (either may be left out);
    ``config``: the ``monitor`` section (:class:`~aligntrain.config.MonitorConfig`); ``seed``: the
    study seed; ``csv_path``: where the table is written at the end of training (None: not written;
    :attr:`frame` holds it either way).
    """

    def __init__(
        self,
        config,
        *,
        problem,
        tokenizer,
        splits: Mapping[str, MonitorSplit],
        seed: int,
        csv_path: str | os.PathLike[str] | None = None,
    ) -> None:
        unknown = set(splits) - set(SPLITS)
        if unknown:
            raise ValueError(f"monitor splits are {SPLITS}, got {sorted(unknown)}")
        self.config = config
        self.problem = problem
        self.tokenizer = tokenizer
        self.splits = {name: splits[name] for name in SPLITS if name in splits and splits[name].rows}
        self.seed = seed
        self.csv_path = Path(csv_path) if csv_path is not None else None
        self.sampling = SamplingConfig(
            temperature=config.temperature, top_p=config.top_p, max_new_tokens=config.max_new_tokens
        )
        self.trainer: Trainer | None = None
        self._frames: list[pd.DataFrame] = []
        self._journal: Path | None = None
        self._last_step: int | None = None

    # ---- what the trainers call

    def bind(self, trainer: Trainer) -> None:
        """The trainer whose log the step metrics go through (``schedule.bind_callbacks`` calls this)."""
        self.trainer = trainer

    def on_train_begin(self, args, state, control, model=None, **kwargs):
        self._frames, self._last_step = [], None
        self._journal = Path(args.output_dir) / JOURNAL if args.output_dir else None
        if state.is_world_process_zero:
            self._restore(state.global_step)
            if state.global_step == 0:
                self.measure(model, state)

    def on_step_end(self, args, state, control, model=None, **kwargs):
        step = state.global_step
        if state.is_world_process_zero and (step % self.config.every == 0 or step >= state.max_steps):
            self.measure(model, state)

    def on_train_end(self, args, state, control, model=None, **kwargs):
        if not state.is_world_process_zero:
            return
        if self._last_step != state.global_step:  # stopped early, between two measurements
            self.measure(model, state)
        if self.csv_path is not None:
            write_monitor_csv(self.frame, self.csv_path)

    # ---- the measurement

    @property
    def frame(self) -> pd.DataFrame:
        """Every measurement so far (restored ones included), in step order: :data:`MONITOR_COLUMNS`."""
        if not self._frames:
            return pd.DataFrame(columns=MONITOR_COLUMNS)
        return pd.concat(self._frames, ignore_index=True)[MONITOR_COLUMNS]

    def measure(self, model, state) -> pd.DataFrame:
        """Measure ``model`` at ``state.global_step`` (once per step), log the step metrics, journal the rows."""
        step = int(state.global_step)
        if self._last_step == step:
            return self._frames[-1]
        if model is None and self.trainer is not None:
            model = self.trainer.model
        frame = self.measure_model(model, step)
        self._frames.append(frame)
        self._last_step = step
        self._append_journal(frame)
        metrics = logged_metrics(frame, self.config.ks)
        if self.trainer is not None:
            self._log(metrics)
        logger.info("monitor at step %d: %s", step, _headline(metrics))
        return frame

    def _log(self, metrics: Mapping[str, float]) -> None:
        """The step metrics through the trainer's log, as if the monitor were not there for the trainer's own.

        The base class's log: TRL's would flush (and clear) its averaged step metrics here. The
        callbacks' ``on_log`` clears ``control.should_log``, which would drop the trainer's own log
        of this step: the flag is put back as it was.
        """
        control = self.trainer.control
        should_log = control.should_log
        Trainer.log(self.trainer, dict(metrics))
        control.should_log = self.trainer.control.should_log = should_log

    def measure_model(self, model, step: int) -> pd.DataFrame:
        """The table's rows of ``model`` at ``step``: every split, sampled under a forked RNG, mode restored."""
        cfg = self.config
        parts = []
        with sampling_aside(model):
            for name, split in self.splits.items():
                part = measure_split(
                    model,
                    self.tokenizer,
                    self.problem,
                    split,
                    samples=cfg.samples,
                    ks=cfg.ks,
                    sampling=self.sampling,
                    batch_size=cfg.batch_size,
                    seed=monitor_seed(self.seed, step, name),
                )
                part.insert(0, "split", name)
                parts.append(part)
        frame = pd.concat(parts, ignore_index=True) if parts else pd.DataFrame(columns=MONITOR_COLUMNS[1:])
        frame.insert(0, "step", step)
        return frame[MONITOR_COLUMNS]

    # ---- the journal (resume)

    def _append_journal(self, frame: pd.DataFrame) -> None:
        if self._journal is None:
            return
        self._journal.parent.mkdir(parents=True, exist_ok=True)
        line = json.dumps(
            {"step": int(frame.step.iloc[0]) if len(frame) else self._last_step, "rows": frame.to_dict("records")}
        )
        with open(self._journal, "a", encoding="utf-8") as handle:
            handle.write(line + "\n")
            handle.flush()
            os.fsync(handle.fileno())

    def _restore(self, resumed_step: int) -> None:
        """Keep the journal's measurements up to the step the run resumes from (a fresh run: none)."""
        if self._journal is None or not self._journal.is_file():
            return
        if resumed_step == 0:
            self._journal.unlink()  # a fresh run in a used folder: nothing of the old one counts
            return
        kept, lines = {}, []
        for line in self._journal.read_text(encoding="utf-8").splitlines():
            try:
                entry = json.loads(line)
            except ValueError:
                continue  # the last line of a run killed while writing it
            if entry["step"] <= resumed_step:
                kept[entry["step"]] = entry
        for step in sorted(kept):
            lines.append(json.dumps(kept[step]))
            self._frames.append(pd.DataFrame.from_records(kept[step]["rows"], columns=MONITOR_COLUMNS))
        self._last_step = max(kept) if kept else None
        with atomic_path(self._journal) as tmp:
            Path(tmp).write_text("".join(f"{line}\n" for line in lines), encoding="utf-8")


def _headline(metrics: Mapping[str, float]) -> str:
    shown = [f"{k.removeprefix('monitor/')}={v:.3f}" for k, v in metrics.items() if "/level_" not in k]
    return ", ".join(shown)
