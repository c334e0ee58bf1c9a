"""The tiny model is an ordinary Hugging Face checkpoint."""

from __future__ import annotations

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from aligntrain.models import load_model_and_tokenizer, save_model_and_tokenizer


def test_char_tokenizer_round_trip(tiny_model, arith_rows):
    _, tokenizer = tiny_model
    row = arith_rows["test"][0]
    text = row["prompt"] + row["completion"]
    ids = tokenizer(text)["input_ids"]
    assert ids[0] == tokenizer.bos_token_id
    assert len(ids) == len(text) + 1  # one token per character, plus BOS
    assert tokenizer.decode(ids, skip_special_tokens=True) == text
    assert tokenizer("1<eos>")["input_ids"][-1] == tokenizer.eos_token_id


def test_save_and_load_like_a_hub_model(tiny_model, tmp_path):
    model, tokenizer = tiny_model
    save_model_and_tokenizer(model, tokenizer, tmp_path / "m")
    assert (tmp_path / "m" / "tokenizer.json").is_file()
    hub_model = AutoModelForCausalLM.from_pretrained(tmp_path / "m")
    hub_tok = AutoTokenizer.from_pretrained(tmp_path / "m")
    ids = hub_tok("Q: 1+2=?", return_tensors="pt")["input_ids"]
    torch.testing.assert_close(hub_model(ids).logits, model(ids).logits)
    loaded, _ = load_model_and_tokenizer(tmp_path / "m")
    assert type(loaded).__name__ == "LlamaForCausalLM"


def test_missing_model_is_a_clear_error(tmp_path):
    import pytest

    with pytest.raises(FileNotFoundError, match="no model at"):
        load_model_and_tokenizer(tmp_path / "absent")


def test_a_model_with_non_finite_weights_is_not_saved(tiny_model, tmp_path):
    import copy
    import math

    import pytest

    model, tokenizer = tiny_model
    diverged = copy.deepcopy(model)  # the fixture's model stays intact
    with torch.no_grad():
        weight = diverged.model.layers[0].mlp.up_proj.weight
        weight[0, :2] = math.nan
        weight[1, 0] = -math.inf
    target = tmp_path / "m"
    with pytest.raises(
        ValueError,
        match=rf"to {target}: 3 non-finite parameter values .* in 1 tensor\(s\): model.layers.0.mlp.up_proj.weight$",
    ):
        save_model_and_tokenizer(diverged, tokenizer, target)
    assert list(tmp_path.iterdir()) == [], "nothing written, not even a temporary directory"
    save_model_and_tokenizer(model, tokenizer, target)  # a finite model still saves
    with pytest.raises(ValueError, match="non-finite"):
        save_model_and_tokenizer(diverged, tokenizer, target)
    torch.testing.assert_close(AutoModelForCausalLM.from_pretrained(target).lm_head.weight, model.lm_head.weight)
