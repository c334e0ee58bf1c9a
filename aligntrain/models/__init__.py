"""Models: the character tokenizer and tiny Llama of the embedded study, pretrained models, LoRA, loading.

Every stage loads models with ``AutoModelForCausalLM.from_pretrained(path)``, so a
hub checkpoint (a 7B model saved locally) goes through the same code. A pretrained
``model.base_model`` (hub id at a pinned revision, or local path) is resolved and
loaded by :func:`load_pretrained` (pickled ``*.bin`` weights only as plain tensors:
:func:`check_pickled_weights`); LoRA / QLoRA adapters (``model.lora``) are added by
:func:`apply_lora` and merged when the model is saved (docs/models.md). The settings of
params.yaml's ``model:`` section are :mod:`aligntrain.models.settings`.

The names below are imported on first use: reading params.yaml needs the settings, and
importing them must not pull in torch and transformers.
"""

from __future__ import annotations

import importlib

#: each public name and the submodule that defines it
_HOMES = {
    "ModelNotAvailableError": "hub",
    "UnsafeCheckpointError": "weights",
    "apply_lora": "adapters",
    "build_char_tokenizer": "tiny",
    "build_tiny_llama": "tiny",
    "chat_prompt": "hub",
    "check_pickled_weights": "weights",
    "check_quantization_supported": "adapters",
    "check_target_modules": "adapters",
    "load_model_and_tokenizer": "loading",
    "load_pretrained": "hub",
    "lora_config": "adapters",
    "merge_adapter": "adapters",
    "policy_rows": "hub",
    "quantization_config": "adapters",
    "resolve_model_source": "hub",
    "save_model_and_tokenizer": "loading",
    "with_chat_template": "hub",
}

__all__ = sorted(_HOMES)


def __getattr__(name: str):
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'aligntrain.models' has no attribute {name!r}")
    return getattr(importlib.import_module(f"aligntrain.models.{home}"), name)


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_HOMES))
