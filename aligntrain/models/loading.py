"""Loading and saving checkpoints the way a hub model is loaded and saved."""

from __future__ import annotations

from pathlib import Path

from transformers import AutoModelForCausalLM, AutoTokenizer, PreTrainedModel, PreTrainedTokenizerBase

from aligntrain.io import atomic_directory


def load_model_and_tokenizer(
    path: str | Path, *, dtype: str = "float32"
) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    """``from_pretrained`` for both parts; a missing directory is a clear error."""
    import torch

    path = Path(path)
    if not (path / "config.json").is_file():
        raise FileNotFoundError(f"no model at {path} (expected {path / 'config.json'})")
    tokenizer = AutoTokenizer.from_pretrained(path)
    if tokenizer.pad_token is None:  # hub tokenizers often lack one; generation needs it
        tokenizer.pad_token = tokenizer.eos_token
    model = AutoModelForCausalLM.from_pretrained(path, dtype=getattr(torch, dtype))
    return model, tokenizer


def save_model_and_tokenizer(
    model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, path: str | Path
) -> None:
    """``save_pretrained`` into a temporary sibling, then an atomic rename."""
    with atomic_directory(path) as tmp:
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
