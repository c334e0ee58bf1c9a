"""params.yaml's ``model:`` section: the base model and its LoRA adapters.

Lives with the models it describes, and imports nothing heavy: :mod:`aligntrain.config` reads
it for every params.yaml, and the loaders (:mod:`aligntrain.models.hub`, :mod:`aligntrain.rewards`)
take it without importing the whole params schema.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, StrictInt, field_validator, model_validator

from aligntrain.options import Real, Strict


class LoraSettings(Strict):
    """params.yaml's ``model.lora``: LoRA adapters (peft) instead of full fine-tuning; QLoRA with ``nf4``.

    Applies to every fine-tuning run (warm-up and each SFT or RL variant): the run trains only the
    adapter's matrices A (r × in) and B (out × r) of each target layer, B starting at zero; the
    saved model is the merged one, W + (alpha / r) · B · A, a plain full model (the adapter itself is
    kept beside it in ``adapter/``). Defaults follow common LoRA practice, not a tuned study.
    """

    r: StrictInt = Field(16, ge=1, description="Rank r of each adapter (B · A has rank ≤ r).")
    alpha: Real = Field(32.0, gt=0, description="Scale numerator: the update is (alpha / r) · B · A.")
    dropout: Real = Field(0.05, ge=0, lt=1, description="Dropout on the adapter's input during training.")
    target_modules: list[str] | Literal["all-linear"] = Field(
        "all-linear",
        description="Layers that get an adapter: module names matched as peft matches them (the name or its "
        "dotted suffix, e.g. q_proj, self_attn.o_proj), or 'all-linear' (every linear layer but the LM head). "
        "A name that matches no linear layer of the model is an error before training.",
    )
    quantization: Literal["none", "nf4"] = Field(
        "none",
        description="'nf4': QLoRA, the frozen base loaded in 4-bit NormalFloat (bitsandbytes, double quantization, "
        "computing in model.dtype); needs a CUDA GPU and bitsandbytes (the gpu extra). The merge reloads the base in "
        "model.dtype, so the saved model is never quantized.",
    )

    @field_validator("target_modules")
    @classmethod
    def _named_once(cls, names: list[str] | str) -> list[str] | str:
        if isinstance(names, list):
            if not names or any(not name.strip() for name in names):
                raise ValueError(f"target_modules needs at least one non-empty module name, got {names}")
            if len(set(names)) != len(names):
                raise ValueError(f"target_modules must not repeat, got {names}")
        return names


class ModelConfig(Strict):
    """The base model: the tiny Llama built by ``pretrain``, or a pretrained causal LM (``base_model``).

    A pretrained model is a hub id pinned to a ``revision`` or a local ``save_pretrained`` folder; the
    ``pretrain`` stage resolves it before any work (offline: from the local hub cache, with a clear error
    naming the id and how to pre-fetch it) and saves it to ``models/base``.
    """

    base_model: str | None = Field(
        None,
        description="Pretrained causal LM: a hub id (org/name, needs `revision`) or a local directory in the "
        "save_pretrained layout (an existing path, or one written ./rel, /abs or ~/...); None: train the tiny one.",
    )
    revision: str | None = Field(
        None,
        min_length=1,
        description="Hub revision of `base_model`: a commit sha pins it exactly (a branch or tag is read from the "
        "cache's refs offline, and moves online). Required for a hub id, refused for a local path.",
    )
    dtype: Literal["float32", "bfloat16", "float16"] = Field(
        "float32",
        description="Weights' dtype when a model is loaded for training and saved (bfloat16 halves memory; with "
        "full fine-tuning float32 keeps exact optimizer updates). QLoRA's compute dtype.",
    )
    chat_template: bool = Field(
        False,
        description="Render each prompt as one user turn of the tokenizer's chat template (instruct models); "
        "needs `base_model`, whose tokenizer must have a template.",
    )
    lora: LoraSettings | None = Field(None, description="LoRA / QLoRA adapters; None: full fine-tuning.")
    hidden_size: StrictInt = Field(128, ge=8, description="Width of the residual stream.")
    num_layers: StrictInt = Field(4, ge=1, description="Transformer blocks.")
    num_heads: StrictInt = Field(4, ge=1, description="Attention heads (no grouped-query attention).")
    intermediate_size: StrictInt = Field(384, ge=8, description="MLP hidden width.")
    max_length: StrictInt = Field(192, ge=16, description="Longest sequence in tokens (prompt + completion).")

    @model_validator(mode="after")
    def _heads_divide_width(self) -> ModelConfig:
        if self.hidden_size % self.num_heads:
            raise ValueError(f"hidden_size ({self.hidden_size}) must be divisible by num_heads ({self.num_heads})")
        return self

    @model_validator(mode="after")
    def _source_is_pinned(self) -> ModelConfig:
        if self.base_model is None:
            if self.revision is not None:
                raise ValueError("revision needs base_model (a hub id); the tiny model has none")
            if self.chat_template:
                raise ValueError("chat_template needs base_model: the tiny model's character tokenizer has no template")
            return self
        if self.is_local_path(self.base_model):
            if self.revision is not None:
                raise ValueError(
                    f"revision {self.revision!r} applies to hub ids; base_model {self.base_model!r} is a local path"
                )
            return self
        from huggingface_hub.utils import HFValidationError, validate_repo_id

        try:
            validate_repo_id(self.base_model)
        except HFValidationError as err:
            raise ValueError(
                f"base_model {self.base_model!r} is neither an existing directory nor a hub id (org/name): {err}"
            ) from None
        if self.revision is None:
            raise ValueError(
                f"base_model {self.base_model!r} is a hub id (no such local directory): pin it with revision "
                "(a commit sha), or give the path of a local directory"
            )
        return self

    @staticmethod
    def is_local_path(name: str) -> bool:
        """A local directory rather than a hub id: an existing path, or one written ``/…``, ``./…``, ``~…``."""
        import os

        written_as_path = name.startswith(("/", "./", "../", "~")) or name in (".", "..")
        return written_as_path or os.path.exists(os.path.expanduser(name))
