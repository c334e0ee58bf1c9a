"""Strategy-aware RL through TRL's ``GRPOTrainer``: any advantage rule of :mod:`aligntrain.advantages`.

TRL samples ``num_generations`` completions per prompt, scores them with the
reward functions and turns each group's rewards into advantages inline, inside
``GRPOTrainer._generate_and_score_completions``: there is no method to override
for the advantage alone. :class:`StrategyGRPOTrainer` therefore

1. wraps ``GRPOTrainer._calculate_rewards`` to keep the gathered reward matrix
   (all processes, TRL's order) and this process's completion texts, and
2. overrides ``_generate_and_score_completions``: it calls TRL's and replaces
   ``output["advantages"]`` (this process's slice) by the rule's, computed from
   the kept rewards on whole groups (``rewards.view(-1, n)``, as TRL groups
   them) and sliced as TRL slices its own (by ``accelerator.process_index``).

Everything else — sampling, the clipped policy loss, its reduction
(``loss_type``), logging, checkpoints — is TRL's. The rule receives the context
it declares (``rule.context_needed()``): parsed answers per rollout, the
rollouts' summed log-probabilities under the sampling policy (TRL's
``old_per_token_logps`` or one pass of ``_get_per_token_logps_and_entropies``), a
:class:`RewardHistory` and a :class:`MajorityThresholdState` that live on the
trainer across steps and travel with checkpoints (``_save_checkpoint``,
``_load_optimizer_and_scheduler``), and the step (``state.global_step``).
``tests/test_rl.py::test_the_trl_internals_the_trainer_relies_on`` pins these
methods and their signatures, so a TRL upgrade that moves them fails there.

Unscorable rollouts (TRL's convention: every reward function returned None/NaN
for it) get advantage 0 and are counted in the metric ``unscorable``. The rule
itself sees only finite rewards: see :func:`rule_input_rewards` for the fill
value and ``docs/decisions.md`` ("RL trainer") for the TRL internals this
module depends on.
"""

from __future__ import annotations

import copy
import logging
import math
import numbers
import os
import signal
import threading
import time
from collections.abc import Callable, Hashable, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch
import trl
from accelerate.utils import gather_object
from datasets import Dataset
from torch import Tensor
from transformers import PreTrainedModel, PreTrainedTokenizerBase, TrainerCallback
from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR
from trl import GRPOConfig, GRPOTrainer

from aligntrain.advantages import MajorityThresholdState, RewardHistory, compute_advantages
from aligntrain.config import RLConfig
from aligntrain.training.schedule import (
    AtomicCheckpoints,
    bind_callbacks,
    finish_run,
    last_checkpoint,
    run_metrics,
    schedule_arguments,
)

logger = logging.getLogger(__name__)

#: the TRL minor version whose internals the trainer overrides (see the module docstring)
SUPPORTED_TRL = "1.16"
#: file inside each checkpoint folder holding the rule's cross-step state
RL_STATE_FILE = "aligntrain_rl_state.pt"

#: ``fn(completion_text, row) -> reward``: row holds the prompt and the dataset's other columns
SampleReward = Callable[[str, Mapping[str, Any]], float | None]
#: ``answer_class(completion_text) -> hashable class or None (unparseable)``
AnswerClass = Callable[[str], Hashable | None]
#: keyword arguments TRL adds to a reward function's call that are not dataset columns
_TRL_REWARD_KWARGS = frozenset({"completion_ids", "trainer_state", "log_extra", "log_metric", "environments"})


def check_trl_version(version: str | None = None) -> None:
    """Raise RuntimeError unless TRL is 1.16.x: the trainer overrides TRL internals (module docstring)."""
    version = trl.__version__ if version is None else version
    if version.split(".")[:2] != SUPPORTED_TRL.split("."):
        raise RuntimeError(
            f"aligntrain.training.rl needs trl {SUPPORTED_TRL}.x (it overrides GRPOTrainer internals: "
            f"_calculate_rewards and _generate_and_score_completions); trl {version} is installed"
        )


# --------------------------------------------------------------------------- rewards


class RewardTimeout(Exception):
    """A reward function ran past its deadline."""


def safe_reward_fn(fn: SampleReward, timeout_s: float | None = None) -> Callable[..., list[float | None]]:
    """A TRL reward function that scores each completion with ``fn`` and never raises for one sample.

    ``fn(completion_text, row)`` gets the completion's text and a row of the
    prompt plus every other dataset column (e.g. the gold ``"answer"``). A sample
    whose call raises, runs past ``timeout_s`` seconds, or returns None, NaN, ±inf
    or a non-number scores ``None`` (a bool counts as 0/1): TRL turns it into NaN and, as the only reward
    function, marks the sample unscorable (advantage 0, counted in ``unscorable``).

    The deadline interrupts ``fn`` with SIGALRM when called from the main thread
    (TRL calls synchronous reward functions there); elsewhere ``fn`` runs to the
    end and a late result is discarded.
    """
    if timeout_s is not None and not (isinstance(timeout_s, numbers.Real) and timeout_s > 0):
        raise ValueError(f"timeout_s must be None or a number > 0, got {timeout_s!r}")

    def reward(prompts: Sequence[Any], completions: Sequence[Any], **kwargs: Any) -> list[float | None]:
        columns = {k: v for k, v in kwargs.items() if k not in _TRL_REWARD_KWARGS}
        scores: list[float | None] = []
        for i, completion in enumerate(completions):
            row = {"prompt": prompts[i], **{k: v[i] for k, v in columns.items()}}
            scores.append(_score_one(fn, completion_text(completion), row, timeout_s))
        return scores

    reward.__name__ = getattr(fn, "__name__", "reward")
    return reward


#: ``fn(completion_texts, rows) -> grades`` (each with a ``reward``): a problem's ``grade_batch``
BatchGrader = Callable[[Sequence[str], Sequence[Mapping[str, Any]]], Sequence[Any]]


def batch_reward_fn(grade_batch: BatchGrader, rows_by_id: Mapping[str, Mapping[str, Any]]) -> Callable[..., list]:
    """A TRL reward function that scores a whole batch with ``grade_batch`` (a reward model's batches).

    Each completion is graded against the problem's own row, found by the dataset's
    ``id`` column in ``rows_by_id`` (so a reward model reads the prompt as the data set
    wrote it, not as the policy's chat template rendered it). A call that raises makes
    the whole batch unscorable, and a NaN, ±inf or non-number reward its sample (warned):
    ``None`` to TRL, advantage 0 and counted in ``unscorable``, as :func:`safe_reward_fn`.
    """

    def reward(prompts: Sequence[Any], completions: Sequence[Any], **kwargs: Any) -> list[float | None]:
        texts = [completion_text(c) for c in completions]
        try:
            grades = grade_batch(texts, [rows_by_id[i] for i in kwargs["id"]])
        except Exception as err:  # the batch is lost to the rule, not the run
            logger.warning("reward failed on a batch of %d (%s: %s): unscorable", len(texts), type(err).__name__, err)
            return [None] * len(texts)
        scores: list[float | None] = []
        for grade in grades:
            value = grade.reward
            ok = isinstance(value, numbers.Real) and math.isfinite(value)
            scores.append(float(value) if ok else None)
        if None in scores:
            logger.warning(
                "reward: %d of %d samples unscorable (NaN, inf or not a number)", scores.count(None), len(scores)
            )
        return scores

    reward.__name__ = getattr(grade_batch, "__name__", "reward")
    return reward


def completion_text(completion: str | list[dict[str, Any]]) -> str:
    """The text of a completion: the string, or the last message's content for a conversation."""
    return completion if isinstance(completion, str) else str(completion[-1]["content"])


def _score_one(fn: SampleReward, text: str, row: Mapping[str, Any], timeout_s: float | None) -> float | None:
    start = time.monotonic()
    try:
        with _deadline(timeout_s):
            value = fn(text, row)
    except Exception as err:  # any failure of one sample makes that sample unscorable, not the run
        logger.warning("reward %s failed on a sample (%s: %s): unscorable", _name(fn), type(err).__name__, err)
        return None
    if timeout_s is not None and time.monotonic() - start > timeout_s:
        logger.warning("reward %s ran past %.3g s on a sample: unscorable", _name(fn), timeout_s)
        return None
    if value is not None and not isinstance(value, numbers.Real):
        logger.warning("reward %s returned a %s, not a number: unscorable", _name(fn), type(value).__name__)
        return None
    # None, NaN and ±inf are unscorable; a bool counts as 0/1.
    return float(value) if value is not None and math.isfinite(value) else None


def _name(fn: Callable) -> str:
    return getattr(fn, "__name__", type(fn).__name__)


@contextmanager
def _deadline(timeout_s: float | None):
    """Raise :class:`RewardTimeout` inside the block after ``timeout_s`` (main thread, SIGALRM only)."""
    in_main_thread = threading.current_thread() is threading.main_thread()
    if timeout_s is None or not hasattr(signal, "setitimer") or not in_main_thread:
        yield
        return

    def on_alarm(signum, frame):
        raise RewardTimeout(f"reward ran past {timeout_s} s")

    previous = signal.signal(signal.SIGALRM, on_alarm)
    signal.setitimer(signal.ITIMER_REAL, timeout_s)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def rule_input_rewards(rewards: Tensor, unscorable: Tensor, binary: bool) -> Tensor:
    """Rewards (G, n) the rule sees: unscorable entries replaced by a neutral finite value [choice].

    Continuous rules: the mean of the group's scorable rewards, which leaves the
    group mean unchanged (so GRPO-type baselines are those of the scorable
    rollouts). Binary rules: 0, i.e. "not shown correct" (the mean would not be
    binary); the trainer also sets the answer of such a rollout to None, so
    answers and rewards agree. A group with no scorable rollout is all 0. The
    unscorable rollouts' own advantages are zeroed afterwards either way.
    """
    scorable = ~unscorable
    if binary:
        fill = torch.zeros_like(rewards)
    else:
        count = scorable.sum(dim=1, keepdim=True)
        total = torch.where(scorable, rewards, torch.zeros_like(rewards)).sum(dim=1, keepdim=True)
        fill = (total / count.clamp(min=1)).expand_as(rewards)
    return torch.where(scorable, rewards, fill)


# --------------------------------------------------------------------------- the trainer


class StrategyGRPOTrainer(AtomicCheckpoints, GRPOTrainer):
    """``GRPOTrainer`` whose advantages come from the rule of an :class:`~aligntrain.config.RLConfig`.

    ``config`` is the one configuration of the run: TRL's ``GRPOConfig`` is made
    from it (:func:`grpo_config`) together with ``checkpoint_dir`` and ``seed``, and
    its rule, reward history and unscorable threshold drive the advantages; it
    was validated when it was built. ``answer_class``: the problem's answer
    parser, needed by rules that use ``answers``. Use a single reward function
    made with :func:`safe_reward_fn`, or several combined as TRL does (weighted
    ``nansum``).
    """

    def __init__(
        self,
        model: PreTrainedModel,
        reward_funcs: Sequence[Callable[..., Any]],
        *,
        config: RLConfig,
        checkpoint_dir: str | Path,
        seed: int,
        answer_class: AnswerClass | None = None,
        **kwargs: Any,
    ) -> None:
        check_trl_version()
        self.config = config
        self.rule = config.rule
        self.context_needed = self.rule.context_needed()
        if "answers" in self.context_needed and answer_class is None:
            raise ValueError(f"rule {self.rule.name!r} with these options needs parsed answers: pass answer_class")
        self.answer_class = answer_class
        self.reward_history = config.new_history()
        self.threshold_state = MajorityThresholdState()
        self.unscorable_total = 0
        self._scored_batch: tuple[Tensor, list[Any]] | None = None
        args = grpo_config(config, Path(checkpoint_dir), seed=seed)
        super().__init__(model=model, reward_funcs=list(reward_funcs), args=args, **kwargs)

    # ---- the two TRL hooks

    def _calculate_rewards(self, inputs, prompts, completions, completion_ids_list):
        rewards_per_func = super()._calculate_rewards(inputs, prompts, completions, completion_ids_list)
        # Gathered (all processes) rewards, and this process's completions, for the rule below.
        self._scored_batch = (rewards_per_func, list(completions))
        return rewards_per_func

    def _generate_and_score_completions(self, inputs):
        output = super()._generate_and_score_completions(inputs)
        if self._scored_batch is None:
            raise RuntimeError("TRL's _generate_and_score_completions did not call _calculate_rewards")
        rewards_per_func, completions = self._scored_batch
        self._scored_batch = None
        mode = "train" if self.model.training else "eval"
        advantages = self.rule_advantages(rewards_per_func, completions, output, mode)
        # This process's rows, sliced as TRL slices its own advantages.
        local = len(completions)
        start = self.accelerator.process_index * local
        output["advantages"] = advantages[start : start + local].to(output["advantages"].dtype)
        self._replace_logged_advantages(advantages)
        return output

    # ---- the rule

    def rule_advantages(
        self, rewards_per_func: Tensor, completions: list[Any], output: Mapping[str, Any], mode: str
    ) -> Tensor:
        """Advantages (all processes' rollouts, flat) of the rule on whole groups; unscorable ones are 0.

        Train mode updates the history (scorable rewards only) and the threshold
        state; eval mode works on copies, so evaluation never changes training.
        """
        n = self.num_generations if mode == "train" else self.num_generations_eval
        weights = self.reward_weights.to(rewards_per_func.device)
        # TRL's reward and its unscorable rows (every reward function NaN); ±inf is unscorable too.
        rewards = (rewards_per_func * weights.unsqueeze(0)).nansum(dim=1)
        unscorable = torch.isnan(rewards_per_func).all(dim=1) | ~torch.isfinite(rewards)
        grouped, unscorable = rewards.view(-1, n), unscorable.view(-1, n)
        share = float(unscorable.float().mean())
        if mode == "train" and share > self.config.max_unscorable_fraction:
            # Broken gold answers or a broken grader: stop now, not after every step trained on zeros.
            raise RuntimeError(
                f"step {self.state.global_step}: {int(unscorable.sum())} of {unscorable.numel()} rewards are "
                f"unscorable ({share:.0%} > rl.max_unscorable_fraction = {self.config.max_unscorable_fraction:.0%}); "
                "check the data's gold answers and the reward function (the warnings above name the failures)"
            )
        binary = self.rule.binary_rewards_only
        context: dict[str, Any] = {}
        if "answers" in self.context_needed:
            answers = gather_object([self.answer_class(completion_text(c)) for c in completions])
            # An unscorable rollout is unparseable to the rule, so answers agree with its fill reward.
            answers = [None if bad else a for a, bad in zip(answers, unscorable.reshape(-1).tolist())]
            context["answers"] = [answers[g * n : (g + 1) * n] for g in range(len(grouped))]
        if "logps" in self.context_needed:
            context["logps"] = self.sequence_logps(output).view(-1, n).to(grouped.device)
        step = int(self.state.global_step)
        advantages = compute_advantages(
            self.rule,
            rule_input_rewards(grouped, unscorable, binary),
            history=copy.deepcopy(self.reward_history),
            step=step,
            threshold_state=self.threshold_state if mode == "train" else copy.deepcopy(self.threshold_state),
            **context,
        ).masked_fill(unscorable, 0.0)
        count = int(unscorable.sum())
        if mode == "train":
            # The history gets the rewards that were scored, never the fill values.
            self.reward_history.append(grouped[~unscorable], step)
            self.unscorable_total += count
        self._metrics[mode]["unscorable"].append(float(count))
        return advantages.reshape(-1)

    @torch.no_grad()
    def sequence_logps(self, output: Mapping[str, Any]) -> Tensor:
        """Summed completion log-probabilities ℓ = Σ_t log π(y_t | x, y_<t), gathered over processes.

        Under the sampling policy (the weights that generated the batch, logits
        divided by ``temperature`` as in TRL's loss). Reuses TRL's
        ``old_per_token_logps`` when it computed them, otherwise one no-grad pass
        of ``_get_per_token_logps_and_entropies``. Text-only models.
        """
        per_token = output.get("old_per_token_logps")
        if per_token is None:
            if "pixel_values" in output:
                raise ValueError("sequence log-probabilities (rule context 'logps') support text-only models")
            input_ids = torch.cat([output["prompt_ids"], output["completion_ids"]], dim=1)
            attention_mask = torch.cat([output["prompt_mask"], output["completion_mask"]], dim=1)
            per_token, _, _ = self._get_per_token_logps_and_entropies(
                self.model,
                input_ids,
                attention_mask,
                output["completion_ids"].size(1),
                batch_size=self.args.per_device_train_batch_size,
            )
        mask = output["completion_mask"]
        if "tool_mask" in output:
            mask = mask * output["tool_mask"]
        # Summed and handed on in float64: the CAT weights use 1 − exp(ℓ), lost in float32 near ℓ = 0.
        return self.accelerator.gather((per_token.double() * mask).sum(dim=1))

    def _replace_logged_advantages(self, advantages: Tensor) -> None:
        # TRL appended its own advantages to the completions log; show the rule's instead.
        logged = self._logs["advantages"]
        for _ in range(min(len(logged), advantages.numel())):
            logged.pop()
        logged.extend(advantages.tolist())

    # ---- cross-step state in checkpoints (the same hooks TRL uses for its entropy controller)

    def _save_checkpoint(self, model, trial):
        super()._save_checkpoint(model, trial)
        if self.args.should_save:
            folder = f"{PREFIX_CHECKPOINT_DIR}-{self.state.global_step}"
            torch.save(self.rl_state(), os.path.join(self._get_output_dir(trial=trial), folder, RL_STATE_FILE))

    def _load_optimizer_and_scheduler(self, checkpoint):
        super()._load_optimizer_and_scheduler(checkpoint)
        path = os.path.join(checkpoint, RL_STATE_FILE) if checkpoint is not None else None
        if path is not None and os.path.exists(path):
            self.load_rl_state(torch.load(path, weights_only=True))

    def rl_state(self) -> dict[str, Any]:
        history = self.reward_history
        return {
            "history_capacity": history.capacity,
            "history_decay": history.decay,
            "history_rewards": history.rewards.clone(),
            "history_steps": history.steps.clone(),
            "threshold_value": self.threshold_state.value,
            "threshold_updates": self.threshold_state.updates,
            "unscorable_total": self.unscorable_total,
        }

    def load_rl_state(self, state: Mapping[str, Any]) -> None:
        history = RewardHistory(capacity=state["history_capacity"], decay=state["history_decay"])
        rewards, steps = state["history_rewards"], state["history_steps"]
        # Re-append consecutive runs of one step, oldest first: the same buffer, through its public API.
        start = 0
        for end in range(1, len(steps) + 1):
            if end == len(steps) or steps[end] != steps[start]:
                history.append(rewards[start:end], int(steps[start]))
                start = end
        self.reward_history = history
        self.threshold_state = MajorityThresholdState(state["threshold_value"], state["threshold_updates"])
        self.unscorable_total = int(state["unscorable_total"])


# --------------------------------------------------------------------------- the entry point


def grpo_config(config: RLConfig, checkpoint_dir: Path, *, seed: int) -> GRPOConfig:
    """TRL's configuration of the run described by ``config``."""
    return GRPOConfig(
        **schedule_arguments(config, checkpoint_dir, seed=seed),
        num_generations=config.num_generations,
        temperature=config.temperature,
        max_completion_length=config.max_completion_length,
        # The rule does its own scaling; TRL's group std would only be logged.
        scale_rewards="none",
        loss_type=config.resolved_loss_type,
        beta=config.beta,
        # vLLM samples inside the TRL methods the trainer wraps (tests/test_rl.py pins that), so the rule
        # still makes the advantages; the policy's log π for the loss comes from the training model.
        use_vllm=config.vllm != "off",
        vllm_mode="colocate" if config.vllm == "off" else config.vllm,
        vllm_gpu_memory_utilization=config.vllm_gpu_memory_utilization,
    )


def train_rl(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    prompt_rows: Sequence[Mapping[str, Any]],
    config: RLConfig,
    checkpoint_dir: str | Path,
    *,
    reward_fn: SampleReward | None = None,
    grade_batch: BatchGrader | None = None,
    answer_class: AnswerClass | None = None,
    binary_rewards: bool | None = None,
    seed: int,
    callbacks: Sequence[TrainerCallback] = (),
    save_final: Callable[[dict | None], None] | None = None,
) -> dict[str, float]:
    """Train ``model`` in place for ``config.steps`` RL steps and return the final metrics.

    ``prompt_rows``: rows with a ``"prompt"`` and any other columns (e.g. the
    gold ``"answer"``), which reach ``reward_fn(completion_text, row)`` (a gold
    ``"completion"`` column is dropped). ``config.batch_size`` counts completions
    per step: ``batch_size / config.num_generations`` prompts. The rule's fit to
    the problem (``binary_rewards``, an ``answer_class`` where the rule needs
    answers) is checked before the trainer is built. An interrupted run resumes
    from the last checkpoint in ``checkpoint_dir`` (with the reward history and
    threshold state); ``save_final`` saves the model before the checkpoints are removed.
    ``grade_batch`` instead of ``reward_fn``: rewards scored a batch at a time against the
    rows by their ``"id"`` (:func:`batch_reward_fn`; a reward model).
    """
    if (reward_fn is None) == (grade_batch is None):
        raise ValueError("give exactly one of reward_fn (per sample) and grade_batch (per batch)")
    config.rule.check_fits(binary_rewards=binary_rewards)
    if not prompt_rows or "prompt" not in prompt_rows[0]:
        raise ValueError("prompt_rows must be a non-empty list of rows with a 'prompt' field")
    columns = [c for c in prompt_rows[0] if c != "completion"]
    dataset = Dataset.from_dict({c: [r[c] for r in prompt_rows] for c in columns})
    checkpoint_dir = Path(checkpoint_dir)
    if grade_batch is not None:
        if "id" not in columns:
            raise ValueError("grade_batch needs prompt_rows with an 'id' column")
        reward = batch_reward_fn(grade_batch, {r["id"]: r for r in prompt_rows})
    else:
        reward = safe_reward_fn(reward_fn, config.reward_timeout_s)
    trainer = StrategyGRPOTrainer(
        model,
        [reward],
        config=config,
        checkpoint_dir=checkpoint_dir,
        seed=seed,
        answer_class=answer_class,
        train_dataset=dataset,
        processing_class=tokenizer,
        callbacks=list(callbacks),
    )
    bind_callbacks(trainer)
    last, last_step = last_checkpoint(checkpoint_dir)
    result = trainer.train(resume_from_checkpoint=last)
    metrics = run_metrics(result, last_step)
    metrics["processes"] = float(trainer.accelerator.num_processes)
    metrics["unscorable_total"] = float(trainer.unscorable_total)
    # A step with no scorable reward logs None (TRL); the last scored one is the run's reward.
    logged_rewards = [entry["reward"] for entry in trainer.state.log_history if entry.get("reward") is not None]
    if logged_rewards:
        metrics["reward"] = float(logged_rewards[-1])
    finish_run(trainer, checkpoint_dir, save_final)
    return {k: v for k, v in metrics.items() if math.isfinite(v)}
