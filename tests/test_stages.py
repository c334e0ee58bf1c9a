"""Stage functions on a tiny saved warm-up model: every objective kind trains and saves."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from aligntrain.config import parse_params
from aligntrain.models import load_model_and_tokenizer, save_model_and_tokenizer
from aligntrain.paths import StudyPaths
from aligntrain.stages import training

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture()
def study(tmp_path, tiny_model):
    raw = yaml.safe_load((ROOT / "profiles" / "smoke.yaml").read_text())
    raw["train"].update(steps=2, batch_size=4, checkpoint_every=1)
    raw["rl"].update(steps=2, batch_size=8, num_generations=4, max_completion_length=12, checkpoint_every=1)
    raw["variants"]["loo"] = {"objective": "rl", "rule": "loo_pass_at_k"}
    params = parse_params(raw)
    paths = StudyPaths(tmp_path)
    save_model_and_tokenizer(*tiny_model, paths.warmup_model)
    return params, paths


@pytest.mark.parametrize("variant", ["warmup", "pass_at_n", "grpo", "loo"])
def test_train_variant_saves_a_model(study, arith_rows, variant):
    params, paths = study
    metrics = training.train_variant(params, paths, variant, arith_rows["train"], arith_rows["validation"][:4])
    model, _ = load_model_and_tokenizer(paths.variant_model(variant))
    assert model.config.model_type == "llama"
    if params.variant(variant).options.kind == "rl":
        assert metrics["resumed_from_step"] == 0 and "reward" in metrics
        assert not any((paths.root / "checkpoints").glob("train-*")), "checkpoints removed after success"
    if variant == "warmup":
        assert metrics == {"train_steps": 0.0}


def test_rl_variant_that_does_not_fit_fails_before_training():
    raw = yaml.safe_load((ROOT / "profiles" / "smoke.yaml").read_text())
    raw["variants"]["bad"] = {"objective": "rl", "rule": "pkpo", "k": 99}
    with pytest.raises(ValueError, match=r"variants\.bad: rule 'pkpo': option k"):
        parse_params(raw)
    raw["variants"]["bad"] = {"objective": "rl", "rule": "no_such_rule"}
    with pytest.raises(ValueError, match=r"variants\.bad: .*known"):
        parse_params(raw)
    raw["variants"].pop("bad")
    raw.pop("rl")
    with pytest.raises(ValueError, match=r"variants\.grpo is an RL variant"):
        parse_params(raw)
