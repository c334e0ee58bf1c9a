"""Loading and saving checkpoints the way a hub model is loaded and saved.

Pickled weights are read only as plain tensors (:mod:`aligntrain.models.weights`).
"""

from __future__ import annotations

from pathlib import Path

from transformers import AutoModelForCausalLM, AutoTokenizer, PreTrainedModel, PreTrainedTokenizerBase

from aligntrain.io import atomic_directory
from aligntrain.models.adapters import (
    ADAPTER_NAME,
    check_quantization_supported,
    is_peft_model,
    merge_adapter,
    quantization_config,
)
from aligntrain.models.weights import from_pretrained_safely

#: the subfolder of a saved model that holds the LoRA adapter it was merged from (peft's format)
ADAPTER_DIR = "adapter"


def load_model_and_tokenizer(
    path: str | Path, *, dtype: str = "float32", quantization: str = "none"
) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    """``from_pretrained`` for both parts; a missing directory is a clear error. The tokenizer pads on the left.

    Pickled weights (no safetensors in ``path``) are read weights-only (:func:`check_pickled_weights`).

    ``quantization='nf4'`` loads the weights in 4-bit NormalFloat for QLoRA, on this
    process's GPU; without CUDA (or bitsandbytes) it is refused before anything is read.
    """
    import torch

    check_quantization_supported(quantization)
    path = Path(path)
    if not (path / "config.json").is_file():
        raise FileNotFoundError(f"no model at {path} (expected {path / 'config.json'})")
    tokenizer = AutoTokenizer.from_pretrained(path)
    if tokenizer.pad_token is None:  # hub tokenizers often lack one; generation needs it
        tokenizer.pad_token = tokenizer.eos_token
    # Batched generation continues each row from its last real token. (Set at every load:
    # save_pretrained does not keep it; every trainer here pads its own batches explicitly.)
    tokenizer.padding_side = "left"
    kwargs = {}
    if quantization == "nf4":
        from accelerate import PartialState

        kwargs = {
            "quantization_config": quantization_config(dtype),
            "device_map": {"": PartialState().local_process_index},
        }
    model = from_pretrained_safely(AutoModelForCausalLM, path, dtype=getattr(torch, dtype), **kwargs)
    return model, tokenizer


def save_model_and_tokenizer(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    path: str | Path,
    state_dict: dict | None = None,
) -> None:
    """``save_pretrained`` into a temporary sibling, then an atomic rename.

    A model with NaN or inf weights (a diverged run) is refused before anything
    is written, so that it never replaces a good checkpoint or reaches evaluation.

    A ``PeftModel`` (LoRA, QLoRA) is saved merged: its adapter goes to ``path/adapter``
    (peft's format) and is merged into the base weights (:func:`merge_adapter`), and
    ``path`` holds the plain full model, which ``from_pretrained`` loads without peft.

    ``state_dict``: the weights gathered from a sharded model (FSDP, ZeRO-3:
    ``training.schedule.gathered_state_dict``), saved instead of the module's own, which
    hold only this process's shards. A LoRA adapter from it is merged into the base
    reloaded from where it was loaded (the sharded module cannot be merged in one process).
    """
    if state_dict is None:
        _check_finite_weights(model, path)
    else:
        _check_finite(state_dict.items(), path)
    with atomic_directory(path) as tmp:
        if is_peft_model(model):
            model.save_pretrained(tmp / ADAPTER_DIR, selected_adapters=[ADAPTER_NAME], state_dict=state_dict)
            model = merge_adapter(model, tmp / ADAPTER_DIR, reload_base=state_dict is not None)
            _check_finite_weights(model, path)
            model.save_pretrained(tmp)
        else:
            model.save_pretrained(tmp, state_dict=state_dict)
        tokenizer.save_pretrained(tmp)


def _check_finite_weights(model: PreTrainedModel, path: str | Path) -> None:
    """ValueError naming ``path`` and the count of non-finite values if any weight is NaN or inf."""
    # named_parameters lists a tied weight (embeddings = LM head) once, so nothing is counted twice.
    _check_finite(model.named_parameters(), path)


def _check_finite(named_tensors, path: str | Path) -> None:
    """ValueError naming ``path`` if a tensor of ``(name, tensor)`` pairs holds NaN or inf."""
    import torch

    bad: dict[str, int] = {}
    for name, tensor in named_tensors:
        # One isfinite().all() per tensor; values are counted only in a tensor that fails.
        if tensor.is_floating_point() and not bool(torch.isfinite(tensor).all()):
            bad[name] = int((~torch.isfinite(tensor)).sum())
    if bad:
        names = ", ".join(list(bad)[:3]) + (f" and {len(bad) - 3} more" if len(bad) > 3 else "")
        raise ValueError(
            f"refusing to save the model to {path}: {sum(bad.values())} non-finite parameter values "
            f"(NaN or inf) in {len(bad)} tensor(s): {names}"
        )
