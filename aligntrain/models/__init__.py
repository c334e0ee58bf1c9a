"""Models: the character tokenizer and tiny Llama of the embedded study, pretrained models, LoRA, loading.

Every stage loads models with ``AutoModelForCausalLM.from_pretrained(path)``, so a
hub checkpoint (a 7B model saved locally) goes through the same code. A pretrained
``model.base_model`` (hub id at a pinned revision, or local path) is resolved and
loaded by :func:`load_pretrained`; LoRA / QLoRA adapters (``model.lora``) are added by
:func:`apply_lora` and merged when the model is saved (docs/models.md).
"""

from aligntrain.models.adapters import (
    apply_lora,
    check_quantization_supported,
    check_target_modules,
    lora_config,
    merge_adapter,
    quantization_config,
)
from aligntrain.models.hub import (
    ModelNotAvailableError,
    chat_prompt,
    load_pretrained,
    policy_rows,
    resolve_model_source,
    with_chat_template,
)
from aligntrain.models.loading import load_model_and_tokenizer, save_model_and_tokenizer
from aligntrain.models.tiny import build_char_tokenizer, build_tiny_llama

__all__ = [
    "ModelNotAvailableError",
    "apply_lora",
    "build_char_tokenizer",
    "build_tiny_llama",
    "chat_prompt",
    "check_quantization_supported",
    "check_target_modules",
    "load_model_and_tokenizer",
    "load_pretrained",
    "lora_config",
    "merge_adapter",
    "policy_rows",
    "quantization_config",
    "resolve_model_source",
    "save_model_and_tokenizer",
    "with_chat_template",
]
