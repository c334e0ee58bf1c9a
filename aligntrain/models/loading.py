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
    """``save_pretrained`` into a temporary sibling, then an atomic rename.

    A model with NaN or inf weights (a diverged run) is refused before anything
    is written, so that it never replaces a good checkpoint or reaches evaluation.
    """
    _check_finite_weights(model, path)
    with atomic_directory(path) as tmp:
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)


def _check_finite_weights(model: PreTrainedModel, path: str | Path) -> None:
    """ValueError naming ``path`` and the count of non-finite values if any weight is NaN or inf."""
    import torch

    bad: dict[str, int] = {}
    # named_parameters lists a tied weight (embeddings = LM head) once, so nothing is counted twice.
    for name, tensor in model.named_parameters():
        # One isfinite().all() per tensor; values are counted only in a tensor that fails.
        if not bool(torch.isfinite(tensor).all()):
            bad[name] = int((~torch.isfinite(tensor)).sum())
    if bad:
        names = ", ".join(list(bad)[:3]) + (f" and {len(bad) - 3} more" if len(bad) > 3 else "")
        raise ValueError(
            f"refusing to save the model to {path}: {sum(bad.values())} non-finite parameter values "
            f"(NaN or inf) in {len(bad)} tensor(s): {names}"
        )
