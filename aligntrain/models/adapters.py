"""LoRA and QLoRA adapters (peft) for the fine-tuning stages, merged into the weights before a model is saved.

:func:`apply_lora` wraps a loaded model in a ``peft.PeftModel`` whose only trainable
parameters are the adapters of ``model.lora`` (checked against the model's layers
first). TRL's trainers take such a model as it is: ``StrategySFTTrainer`` and
``StrategyGRPOTrainer`` forward it to ``SFTTrainer`` / ``GRPOTrainer``, whose forward
passes (the fused LM head of the SFT losses, ``_get_per_token_logps_and_entropies`` of
the RL rules) go through the adapters.

:func:`merge_adapter` folds a trained adapter into the base weights, W + (alpha / r) ·
B · A (``merge_and_unload``), and returns the plain model: ``save_model_and_tokenizer``
calls it, so that every saved ``models/...`` folder is a plain full model. A 4-bit base
(QLoRA) is not merged into: the base is reloaded unquantized in its compute dtype and the
adapter merged into that.

QLoRA loads the base with bitsandbytes' 4-bit NormalFloat (:func:`quantization_config`)
and prepares it with ``prepare_model_for_kbit_training``; bitsandbytes' 4-bit layers need
CUDA, so :func:`check_quantization_supported` refuses ``nf4`` elsewhere, before anything
is loaded.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

if TYPE_CHECKING:
    from peft import LoraConfig, PeftModel
    from transformers import BitsAndBytesConfig, PreTrainedModel

    from aligntrain.models.settings import LoraSettings

#: the adapter that :func:`apply_lora` creates and :func:`merge_adapter` merges (peft's default name)
ADAPTER_NAME = "default"


def lora_config(settings: LoraSettings) -> LoraConfig:
    """peft's ``LoraConfig`` of ``settings`` for a causal LM (no bias terms trained)."""
    from peft import LoraConfig

    targets = settings.target_modules
    return LoraConfig(
        r=settings.r,
        lora_alpha=settings.alpha,
        lora_dropout=settings.dropout,
        target_modules=targets if isinstance(targets, str) else list(targets),
        bias="none",
        task_type="CAUSAL_LM",
    )


def check_target_modules(model: torch.nn.Module, target_modules: list[str] | str) -> None:
    """ValueError naming each target that matches no linear layer of ``model`` (peft's suffix rule).

    A name matches a module whose full name is it or ends with ``.`` + it, as peft
    matches a list of names; ``'all-linear'`` matches by construction.
    """
    if isinstance(target_modules, str):
        return
    modules = dict(model.named_modules())
    linear = sorted({name.rsplit(".", 1)[-1] for name, m in modules.items() if isinstance(m, torch.nn.Linear)})
    bad = []
    for target in target_modules:
        matches = [m for name, m in modules.items() if name == target or name.endswith(f".{target}")]
        if not any(_adaptable(m) for m in matches):
            found = f"matches {type(matches[0]).__name__} modules, not linear layers" if matches else "matches nothing"
            bad.append(f"{target!r} ({found})")
    if bad:
        raise ValueError(
            f"model.lora.target_modules: {', '.join(bad)} in {type(model).__name__}; "
            f"its linear layers are {linear} (or use 'all-linear')"
        )


def _adaptable(module: torch.nn.Module) -> bool:
    # bitsandbytes' Linear4bit subclasses torch.nn.Linear, so a 4-bit base is checked the same way.
    return isinstance(module, (torch.nn.Linear, torch.nn.Embedding))


def check_quantization_supported(quantization: str) -> None:
    """RuntimeError unless ``quantization`` can run here: ``'nf4'`` needs CUDA and bitsandbytes."""
    if quantization == "none":
        return
    if quantization != "nf4":
        raise ValueError(f"quantization must be 'none' or 'nf4', got {quantization!r}")
    if not torch.cuda.is_available():
        raise RuntimeError(
            "model.lora.quantization 'nf4' (QLoRA) needs a CUDA GPU: bitsandbytes' 4-bit layers run on CUDA, and "
            "this machine has none. Use quantization: none (plain LoRA) here, or run the stage on a GPU machine."
        )
    try:
        import bitsandbytes  # noqa: F401
    except ImportError:
        raise RuntimeError(
            "model.lora.quantization 'nf4' (QLoRA) needs bitsandbytes, which is not installed: "
            "pip install 'aligntrain[gpu]' (the GPU environment) or pip install bitsandbytes"
        ) from None


def quantization_config(dtype: str) -> BitsAndBytesConfig:
    """QLoRA's 4-bit NormalFloat with double quantization, computing in ``dtype`` (Dettmers et al., QLoRA)."""
    from transformers import BitsAndBytesConfig

    return BitsAndBytesConfig(
        load_in_4bit=True,
        bnb_4bit_quant_type="nf4",
        bnb_4bit_use_double_quant=True,
        bnb_4bit_compute_dtype=getattr(torch, dtype),
        # packed 4-bit weights stored in the model's dtype, so FSDP / ZeRO-3 can flatten and shard them with the rest
        bnb_4bit_quant_storage=getattr(torch, dtype),
    )


def is_quantized(model: Any) -> bool:
    return bool(getattr(model, "is_loaded_in_4bit", False) or getattr(model, "is_loaded_in_8bit", False))


def is_peft_model(model: Any) -> bool:
    """Whether ``model`` is a ``peft.PeftModel`` (without importing peft: none exists before peft is imported)."""
    peft = sys.modules.get("peft")
    return peft is not None and isinstance(model, peft.PeftModel)


def apply_lora(model: PreTrainedModel, settings: LoraSettings, *, seed: int) -> PeftModel:
    """``model`` wrapped in a ``PeftModel`` that trains only the adapters of ``settings``.

    The target modules are checked first (:func:`check_target_modules`). A quantized
    base goes through ``prepare_model_for_kbit_training`` (norms in float32, base
    frozen; activation checkpointing is left to the trainer's arguments). The adapters'
    A matrices are drawn after ``torch.manual_seed(seed)``; every B starts at zero, so
    the wrapped model computes what ``model`` did.
    """
    from peft import get_peft_model, prepare_model_for_kbit_training

    check_target_modules(model, settings.target_modules)
    if is_quantized(model):
        model = prepare_model_for_kbit_training(model, use_gradient_checkpointing=False)
    torch.manual_seed(seed)
    return get_peft_model(model, lora_config(settings), adapter_name=ADAPTER_NAME)


def merge_adapter(
    model: PeftModel, adapter_dir: str | Path | None = None, reload_base: bool = False
) -> PreTrainedModel:
    """The plain model with the trained adapter merged in: W + (alpha / r) · B · A in every target layer.

    Full-precision base: ``merge_and_unload`` in place (``model``'s base becomes the
    returned model; other adapters, such as GRPO's frozen ``ref`` copy, are dropped).
    4-bit base (QLoRA), or ``reload_base`` (a sharded model, whose base this process holds
    only in part): the base is reloaded from where it was loaded, unquantized in its
    compute dtype, and the adapter (saved to ``adapter_dir``, or to a temporary folder
    when None) is merged into that.
    """
    base = model.get_base_model()
    if not is_quantized(base) and not reload_base:
        return model.merge_and_unload(adapter_names=[ADAPTER_NAME])
    if adapter_dir is None:
        with tempfile.TemporaryDirectory() as tmp:
            model.save_pretrained(tmp, selected_adapters=[ADAPTER_NAME])
            return _merge_into_full_precision(base, tmp)
    return _merge_into_full_precision(base, adapter_dir)


def _merge_into_full_precision(base: PreTrainedModel, adapter_dir: str | Path) -> PreTrainedModel:
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    from aligntrain.models.weights import from_pretrained_safely

    quant = getattr(base.config, "quantization_config", None)
    if quant is None:  # a full-precision base: its own dtype
        dtype = getattr(base.config, "dtype", None) or getattr(base.config, "torch_dtype", None) or torch.float32
    else:
        dtype = quant.get("bnb_4bit_compute_dtype") if isinstance(quant, dict) else quant.bnb_4bit_compute_dtype
    dtype = getattr(torch, dtype) if isinstance(dtype, str) else dtype
    full = from_pretrained_safely(AutoModelForCausalLM, base.config._name_or_path, dtype=dtype)
    return PeftModel.from_pretrained(full, str(adapter_dir), adapter_name=ADAPTER_NAME).merge_and_unload()
