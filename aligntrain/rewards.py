"""Reward models: a sequence-classification model by hub id (or local path) scoring (prompt, response) pairs.

The reward of the ``chat`` problem (:mod:`aligntrain.problems.chat`), for RL and for
best-of-N evaluation (max@k, bo@k), as TEA scores Llama-3.2-1B-Instruct's samples
with Skywork-Reward-V2-Llama-3.1-8B ("What should post-training optimize? A
test-time scaling law perspective", §4.1). Every problem scores through one
interface, :meth:`Problem.grade_batch` (completions and their rows in, one grade
each out): hydro and the verifiable problems grade each sample analytically; a
reward-model problem scores whole batches with :class:`RewardModel`.

Scoring [choice]: each pair is rendered as a two-turn conversation (the prompt as
the user turn, the response as the assistant turn) with the reward model's own
chat template, tokenized with its special tokens, truncated on the left to
``max_length`` tokens — the end of the response, where a sequence classifier reads
its score, is kept — and scored in batches of ``batch_size``, right-padded. The
score is the model's single logit (``num_labels`` must be 1) at each pair's last real
token, found from the attention mask (:meth:`RewardModel._forward`), with position ids
counted over real tokens, so padding on either side changes no score. transformers' own
classifier pooling instead reads the last token that is not ``pad_token_id``, which is the
wrong token when the pad token is one the text itself ends with (a tokenizer without a pad
token padded with its EOS, or Llama 3's ``<|eot_id|>``).

Failures are never silent and never cost a batch: a batch that raises is scored
again one pair at a time, so only the pairs that fail themselves are unscorable;
a pair whose score is NaN or infinite is unscorable too. Unscorable pairs score
NaN and are counted (:attr:`RewardModel.unscorable`); RL gives them zero
advantage (docs/faults.md), evaluation refuses a pool that holds any.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictInt, model_validator

logger = logging.getLogger(__name__)


class RewardModelConfig(BaseModel):
    """Which reward model scores responses, and how (a typed option of the problems that use one)."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    model: str = Field(
        ..., description="Sequence-classification model: a hub id (needs `revision`) or a local save_pretrained folder."
    )
    revision: str | None = Field(
        None, min_length=1, description="Hub revision of `model` (a commit sha pins it); None for a local folder."
    )
    dtype: Literal["float32", "bfloat16", "float16"] = Field("bfloat16", description="Weights' dtype for scoring.")
    batch_size: StrictInt = Field(16, ge=1, description="Pairs scored per forward pass.")
    max_length: StrictInt = Field(
        4096, ge=16, description="Tokens per pair; longer pairs lose their beginning (the response's end is kept)."
    )

    @model_validator(mode="after")
    def _pinned(self) -> RewardModelConfig:
        from aligntrain.models.settings import ModelConfig

        local = ModelConfig.is_local_path(self.model)
        if local and self.revision is not None:
            raise ValueError(f"revision {self.revision!r} applies to hub ids; model {self.model!r} is a local path")
        if not local and self.revision is None:
            raise ValueError(f"model {self.model!r} is a hub id (no such local folder): pin it with revision")
        return self


class RewardModel:
    """A loaded reward model: :meth:`score` pairs in batches (module docstring). Loads on first use."""

    def __init__(self, config: RewardModelConfig) -> None:
        self.config = config
        self.unscorable = 0
        self._loaded: tuple[Any, Any] | None = None

    def load(self) -> None:
        """Resolve (offline-safe: :func:`~aligntrain.models.hub.resolve_model_source`) and load the model."""
        if self._loaded is not None:
            return
        import torch
        from transformers import AutoModelForSequenceClassification, AutoTokenizer

        from aligntrain.models.hub import resolve_model_source
        from aligntrain.models.weights import from_pretrained_safely

        folder = resolve_model_source(self.config.model, self.config.revision)
        tokenizer = AutoTokenizer.from_pretrained(folder)
        if tokenizer.pad_token is None:  # padding needs some id; scores are read by the mask, so any will do
            tokenizer.pad_token = tokenizer.eos_token
        tokenizer.padding_side, tokenizer.truncation_side = "right", "left"
        model = from_pretrained_safely(
            AutoModelForSequenceClassification, folder, dtype=getattr(torch, self.config.dtype)
        )
        if model.config.num_labels != 1:
            raise ValueError(
                f"reward model {self.config.model!r} has {model.config.num_labels} labels; a reward model has one score"
            )
        if not isinstance(getattr(model, "score", None), torch.nn.Linear) or model.base_model is model:
            raise ValueError(
                f"reward model {self.config.model!r} ({type(model).__name__}) is not a decoder classifier with a "
                "`score` head over its base model's hidden states: aligntrain reads that head at the last real token"
            )
        if torch.cuda.is_available():
            model = model.to("cuda")
        self._loaded = (model.eval(), tokenizer)

    def render(self, prompt: str, response: str) -> str:
        """The pair as the reward model reads it: its chat template, or ``prompt + response`` without one."""
        _, tokenizer = self._model()
        if not tokenizer.chat_template:
            return prompt + response
        conversation = [{"role": "user", "content": prompt}, {"role": "assistant", "content": response}]
        return tokenizer.apply_chat_template(conversation, tokenize=False)

    def score(self, prompts: Sequence[str], responses: Sequence[str]) -> list[float]:
        """One score per (prompt, response) pair; NaN for a pair that cannot be scored (counted)."""
        if len(prompts) != len(responses):
            raise ValueError(f"{len(prompts)} prompts but {len(responses)} responses")
        texts = [self.render(p, r) for p, r in zip(prompts, responses, strict=True)]
        scores: list[float] = []
        size = self.config.batch_size
        for start in range(0, len(texts), size):
            batch = texts[start : start + size]
            try:
                scores += self._forward(batch)
            except Exception as err:  # one bad batch: score its pairs one at a time
                logger.warning("reward model failed on a batch of %d (%s: %s): scoring it pair by pair",
                               len(batch), type(err).__name__, err)  # fmt: skip
                scores += [self._score_one(text) for text in batch]
        bad = sum(not math.isfinite(s) for s in scores)
        if bad:
            self.unscorable += bad
            logger.warning("reward model: %d of %d pairs unscorable (NaN, inf or an error)", bad, len(scores))
        return [s if math.isfinite(s) else math.nan for s in scores]

    def _score_one(self, text: str) -> float:
        try:
            return self._forward([text])[0]
        except Exception as err:
            logger.warning("reward model failed on one pair (%s: %s): unscorable", type(err).__name__, err)
            return math.nan

    def _forward(self, texts: list[str]) -> list[float]:
        import torch

        model, tokenizer = self._model()
        enc = tokenizer(
            texts,
            return_tensors="pt",
            padding=True,
            truncation=True,
            max_length=self.config.max_length,
            add_special_tokens=not tokenizer.chat_template,  # the template writes them itself
        ).to(model.device)
        mask = enc["attention_mask"]
        # Positions count real tokens only: a left-padded row is then read exactly as it is alone.
        positions = (mask.cumsum(-1) - 1).clamp(min=0)
        # The last real token of each row, whichever side the padding is on (the rightmost 1 of the mask).
        last = (torch.arange(mask.shape[-1], device=mask.device) * mask).argmax(-1)
        with torch.no_grad():
            hidden = model.base_model(
                input_ids=enc["input_ids"], attention_mask=mask, position_ids=positions, use_cache=False
            ).last_hidden_state
            scores = model.score(hidden[torch.arange(hidden.shape[0], device=hidden.device), last])
        return [float(x) for x in scores[:, 0].float().tolist()]

    def _model(self):
        self.load()
        assert self._loaded is not None
        return self._loaded


def reward_model_folder(config: RewardModelConfig) -> Path:
    """Where ``config.model`` lies on this machine (for checks before any work)."""
    from aligntrain.models.hub import resolve_model_source

    return resolve_model_source(config.model, config.revision)
